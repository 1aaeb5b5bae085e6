#!/usr/bin/env bash
# Fetch into .whl/ the wheels benchmarks/gpu.sh installs on a GPU machine that
# reaches no package index: msc's dependencies such a machine's python lacks,
# and pystencils (the peer) with its needs, for CPython 3.12 on x86-64 Linux
# (PYTHON_VERSION to change it). Run it where pip reaches an index.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${PYTHON_VERSION:-3.12}"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
    platforms+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
    "${platforms[@]}" --platform any -d .whl \
    "islpy>=2024.1" "lark>=1.1" "pymetis>=2025.1" "h5netcdf>=1.3" "pystencils>=2.0" appdirs fasteners
ls .whl
