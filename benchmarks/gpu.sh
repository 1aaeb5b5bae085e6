#!/usr/bin/env bash
# One call on a machine with an NVIDIA GPU: set up a venv, run the CUDA tests
# on the device (no emulation), then the GPU benchmark. Writes its JSON and the
# test log under benchmarks/results/ (or $OUT when set). About 10 minutes at most
# (the tests and the benchmark each stop at their timeout).
#
#     bash benchmarks/gpu.sh [--quick]
#
# Needs nvcc and a CUDA driver; installs msc (editable), cupy-cuda12x and
# pystencils into .venv-gpu (a package index must be reachable, or the
# packages already installed in the python that runs this).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=""
[[ "${1:-}" == "--quick" ]] && quick="--quick"
out="${OUT:-benchmarks/results}"
mkdir -p "$out"

command -v nvcc >/dev/null || { echo "gpu.sh: nvcc is not on PATH" >&2; exit 2; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu_device.txt"

python3 -m venv --system-site-packages .venv-gpu
py=.venv-gpu/bin/python
$py -m pip install -q --no-build-isolation -e . || echo "gpu.sh: could not install msc into the venv; using what is importable" >&2
for pkg in cupy-cuda12x pystencils pytest; do
    $py -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('${pkg%%-*}') is None)" 2>/dev/null \
        || $py -m pip install -q "$pkg" || echo "gpu.sh: could not install $pkg" >&2
done
$py -c "import msc.targets.gpu.cuda as c; a = c.device_arch(); print('CUDA device:', a); raise SystemExit(a is None)" \
    || { echo "gpu.sh: no CUDA device was found" >&2; exit 2; }

export MSC_CACHE_DIR="${MSC_CACHE_DIR:-$PWD/.gpu-cache}"
# the CUDA tests built with nvcc for this device and run on it (MSC_CUDA_ON_DEVICE=1: no emulation)
status=0
MSC_CUDA_ON_DEVICE=1 timeout 240 $py -m pytest -q -m "not slow" tests/test_cuda_target.py -p no:cacheprovider \
    2>&1 | tee "$out/gpu_tests.log" || status=1
timeout 300 $py benchmarks/stencils_gpu.py $quick --repeat 3 --json "$out/stencils_gpu.json" || status=1
exit $status
