#!/usr/bin/env bash
# One call on a machine with an NVIDIA GPU: the CUDA tests built with nvcc for
# the device and run on it (no emulation), then the GPU benchmark. Writes the
# device's name, the test log, the benchmark's log and its JSON (rewritten after
# every case), and compute-sanitizer's memcheck and racecheck logs of a sample
# of kernels (benchmarks/gpu_sample.py) under $OUT when set, else
# benchmarks/results/. About 8 minutes on one H200.
#
#     bash benchmarks/gpu.sh [--quick]
#
# Needs nvcc, a CUDA driver, and a python3 that has numpy, scipy, jinja2,
# matplotlib, tqdm, threadpoolctl, xarray, h5py, pytest and the CuPy that matches
# the driver (cupy-cuda13x for CUDA 13). The GPU machine may reach no package
# index: the rest (islpy, lark, pymetis, h5netcdf, pystencils and its needs) is
# installed from wheels in .whl/ when that folder exists, made beforehand on a
# machine that has an index by `bash benchmarks/gpu_wheels.sh`. pytest-xdist, when
# there, runs the tests on all cores. Time limits (seconds, each a `timeout`):
# MSC_GPU_TEST_S (default 150), MSC_GPU_SANITIZE_S (45 per tool) and
# MSC_GPU_BENCH_S (default 240).
set -uo pipefail
cd "$(dirname "$0")/.."
quick=""
[[ "${1:-}" == "--quick" ]] && quick="--quick"
out="${OUT:-benchmarks/results}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1

command -v nvcc >/dev/null || { echo "gpu.sh: nvcc is not on PATH" >&2; exit 2; }
if compgen -G ".whl/*.whl" >/dev/null; then
    site="${TMPDIR:-/tmp}/msc-gpu-site"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
        || { echo "gpu.sh: could not install the wheels in .whl/" >&2; exit 2; }
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.memory --format=csv; nvcc --version | tail -2; } \
    | tee "$out/gpu_device.txt"
python3 -c "import msc.targets.gpu.cuda as c; a = c.device_arch(); print('CUDA device:', a); raise SystemExit(a is None)" \
    || { echo "gpu.sh: msc does not import, or no CUDA device was found" >&2; exit 2; }

export MSC_CACHE_DIR="${MSC_CACHE_DIR:-$PWD/.gpu-cache}"
parallel=()
python3 -c "import xdist" 2>/dev/null && parallel=(-n "$(nproc)")
status=0
MSC_CUDA_ON_DEVICE=1 timeout "${MSC_GPU_TEST_S:-150}" python3 -m pytest -q -m "not slow" "${parallel[@]}" \
    tests/test_cuda_target.py -p no:cacheprovider -p no:benchmark 2>&1 | tee "$out/gpu_tests.log" || status=1
# a sample of kernels (global, staged, time tile, tensor cores) under compute-sanitizer: out-of-bounds
# accesses and shared-memory races; built by the tests' cache above, so each run is short
if command -v compute-sanitizer >/dev/null; then
    timeout 90 python3 benchmarks/gpu_sample.py 2>&1 | tee "$out/gpu_sample.log" || status=1  # builds them
    for tool in memcheck racecheck; do
        timeout "${MSC_GPU_SANITIZE_S:-45}" compute-sanitizer --tool "$tool" --error-exitcode 3 \
            python3 benchmarks/gpu_sample.py 2>&1 | tee "$out/gpu_$tool.log" || status=1
    done
fi
timeout "${MSC_GPU_BENCH_S:-240}" python3 benchmarks/stencils_gpu.py $quick --repeat 10 --json "$out/stencils_gpu.json" \
    2>&1 | tee "$out/gpu_bench.log" || status=1
exit $status
