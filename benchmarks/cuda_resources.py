"""Registers, spills and occupancy of msc's CUDA kernels for sm_90, from ptxas
(`nvcc -Xptxas -v`), for the standard stencils of benchmarks/stencils_gpu.py
with the default schedule (or the one given). Needs nvcc only (no GPU).
Writes JSON (and prints a table).

    python3 benchmarks/cuda_resources.py [--json out.json] [--schedule "Schedule().tile(x=8, y=32)"]
        [--dtypes float64,float32] [--only heat3d,box3d27p]

Occupancy is the share of an H100/H200 multiprocessor's 64 warps that the
kernel's blocks can hold at once, limited by registers (65536 per
multiprocessor, allocated per warp in units of 256), threads (2048), blocks
(32) and static shared memory (228 KiB, 1 KiB reserved per block): the CUDA
occupancy calculator's rules for compute capability 9.0.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stencils_gpu import CASES, msc_stencil  # noqa: E402

from msc.codegen import get_target  # noqa: E402
from msc.poly.schedule import parse_schedule  # noqa: E402
from msc.runtime import cuda_emu  # noqa: E402

REGISTERS_PER_SM = 65536
WARPS_PER_SM = 64
BLOCKS_PER_SM = 32
SHARED_PER_SM = 228 * 1024
SHARED_RESERVED_PER_BLOCK = 1024


def occupancy(registers: int, threads: int, shared_bytes: int) -> float:
    """Resident warps over the multiprocessor's 64, for blocks of `threads` threads."""
    warps = -(-threads // 32)
    per_warp = -(-max(registers, 1) * 32 // 256) * 256
    by_registers = REGISTERS_PER_SM // (per_warp * warps)
    by_shared = SHARED_PER_SM // (shared_bytes + SHARED_RESERVED_PER_BLOCK)
    blocks = min(by_registers, by_shared, BLOCKS_PER_SM, WARPS_PER_SM // warps)
    return blocks * warps / WARPS_PER_SM


def resources(source: str) -> dict[str, dict[str, int]]:
    """Per __global__ function of msc's launches: registers, spill bytes, shared bytes, threads per block."""
    bounds = {name: int(n) for n, name in re.findall(r"__launch_bounds__\((\d+)\) (\w+)\(", source)}
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "kernel.cu"
        path.write_text(source)
        done = subprocess.run(["nvcc", "-c", "-arch=sm_90", "-Xptxas", "-v", f"-I{cuda_emu.EMULATOR_DIR}", str(path),
                               "-o", str(Path(directory) / "kernel.o")], capture_output=True, text=True, check=True)
    out = {}
    for block in done.stderr.split("Compiling entry function")[1:]:
        mangled = block.split("'")[1]
        name = next((n for n in bounds if n in mangled), None)
        if name is None:
            continue  # the runtime's level copies
        spills = re.search(r"(\d+) bytes spill stores", block)
        shared = re.search(r"(\d+) bytes smem", block)
        out[name] = {"registers": int(re.search(r"Used (\d+) registers", block).group(1)),
                     "spill_bytes": int(spills.group(1)) if spills else 0,
                     "shared_bytes": int(shared.group(1)) if shared else 0, "threads": bounds[name]}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--schedule", default="Schedule()")
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--only", default=",".join(c.name for c in CASES[:4]), help="stencils, comma-separated")
    a = ap.parse_args(argv)
    schedule = parse_schedule(a.schedule)
    rows: list[dict[str, Any]] = []
    names = a.only.split(",")
    unknown = set(names) - {c.name for c in CASES}
    if unknown:
        ap.error(f"unknown stencil(s) {', '.join(sorted(unknown))}")
    for case in (c for c in CASES if c.name in names):
        stencil = msc_stencil(case)
        for dtype in a.dtypes.split(","):
            source = get_target("cuda").source(stencil.poly(dtype), schedule)
            for kernel, r in resources(source).items():
                row = {"stencil": case.name, "dtype": dtype, "kernel": kernel, **r,
                       "occupancy": occupancy(r["registers"], r["threads"], r["shared_bytes"])}
                rows.append(row)
                print(f"{case.name:9} {dtype:8} {kernel:12} {r['registers']:3} registers, {r['spill_bytes']} bytes "
                      f"spilled, {r['threads']} threads, occupancy {row['occupancy']:.0%}")
    if a.json:
        Path(a.json).write_text(json.dumps({"schedule": a.schedule, "arch": "sm_90", "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
