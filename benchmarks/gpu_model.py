"""A bound on GStencil/s per CUDA kernel from the emulator's counters
(benchmarks/cuda_counters.py) and an H200's published rates, next to what
benchmarks/stencils_gpu.py measured on one, where that JSON is given.

    python3 benchmarks/gpu_model.py --counters benchmarks/results/cuda_counters.json
        [--measured benchmarks/results/stencils_gpu.json] [--json out.json]
        [--resources benchmarks/results/cuda_resources.json ... [--index int|long]]

The model: a kernel's time per update is the longest of its times on each
resource at its peak rate (a roofline; whatever is not counted, latency,
barriers, L2, is taken as free):
- DRAM: `dram_bytes` per update (the ideal-L2 count: each 32-byte sector
  once per launch) at the HBM's 4.8 TB/s (datasheet);
- shared memory: the counted `shared_wavefronts` per update (each warp-level
  access's, an access of fewer lanes taking fewer; counters from before they
  were counted: `shared_accesses` x 32 x itemsize / 128 ideal wavefronts, as
  if every access were a whole warp's, x `shared_wavefronts_per_access`) at
  one wavefront per clock per SM, 132 SMs at 1.98 GHz (the SXM part's SM
  count and the clock nvidia-smi reported);
- L1: the 32-byte `sectors` of the global accesses per update, which pass
  through each SM's L1 at 128 bytes per clock (the same path as shared memory,
  counted apart);
- tensor cores: `mma_flops` per update (2 m n k per warp's mma_sync) at the
  H200's dense tensor rate of the kernel's operands (datasheet: fp64 67
  TFLOP/s; tf32 989 with sparsity, so 494.5 dense), fp64 for float64 rows and
  tf32 for float32 rows, as benchmarks/cuda_counters.py runs them (counters
  from before mma_flops was counted have none: no tensor bound).
- instruction issue, where --resources gives the kernel's SASS instructions
  per update (benchmarks/cuda_resources.py --sass; streamed kernels of the
  default schedule and of time_tile(4), in the `--index` instantiation, int
  by default: what a grid of up to 2^30 points runs): one warp instruction
  per clock on each of an SM's 4 schedulers, 32 threads each (FP64's half
  rate and dependent issue are not modelled). A tensor-core kernel's
  instructions per update are summed from its parts (`tensor_core_issue`):
  its staging (the counted loads per update, each at its loop's SASS
  instructions per load), its products (the counted MMA flops per update
  over one SASS MMA's flops, a warp's, at the fewest instructions per MMA
  from its first MMA to its last) and its writes (the counted stores, each
  at the instructions per point of its writing code). Lanes a staging
  iteration leaves idle, the stores of accumulators and barriers are not
  counted, so this too is a lower bound on what the kernel issues.
So the prediction is an upper bound: the measured figure over it is how
close the kernel comes to what its traffic allows. The counts come from
small emulated grids, where halos weigh more than at the measured sizes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HBM_GB_S = 4800.0
SMS = 132
CLOCK_HZ = 1.98e9
SHARED_BYTES_PER_CLOCK = 128
TENSOR_FLOPS = {"float64": 67e12, "float32": 494.5e12}  # dense fp64 and tf32 tensor rates of the H200
ISSUE_PER_SECOND = SMS * 4 * 32 * CLOCK_HZ  # thread-instructions: a warp instruction per scheduler per clock
SCHEDULES = {"Schedule()": "default (streamed)", "Schedule().time_tile(4)": "time_tile(4)",  # resources -> counted
             # the other 3D time tiles of benchmarks/cuda_counters.py (of radius-1 stencils: heat3d, box3d27p)
             "Schedule().time_tile(4, x=32, y=8, z=24)": "time_tile(4), 16 x 32 threads",
             "Schedule().time_tile(4, x=32, y=24, z=24).unroll('y', 2)": "time_tile(4), 2 points of y per thread",
             # the tensor-core kernels of benchmarks/cuda_counters.py: fp64 on float64, tf32 on float32
             **{f"Schedule().tensor_cores('{p}')": "tensor cores" for p in ("fp64", "tf32")},
             **{f"Schedule().tensor_cores('{p}').time_tile(4)": "tensor cores, time_tile(4)" for p in ("fp64", "tf32")}}
TOOLS = {"grid-mapped": "msc grid-mapped", "default (streamed)": "msc plain",  # counted schedule -> measured row
         "streamed, 2 points of y per thread": "msc 2 points per thread"}
ITEMSIZE = {"float64": 8, "float32": 4}
PRECISION = {"float64": "fp64", "float32": "tf32"}  # the tensor cores' operands in each dtype
TENSOR_CORES = {"tensor cores": "msc tensor cores ({})",  # counted schedule -> measured row, of the precision
                "tensor cores, time_tile(4)": "msc tensor cores + time tiles ({})"}


def bound(row: dict[str, Any], instructions: float | None = None) -> tuple[float, str]:
    """GStencil/s the counted traffic (and `instructions` per update, where known) allows,
    and the resource that bounds it."""
    itemsize = ITEMSIZE[row["dtype"]]
    dram_s = row["dram_bytes_per_update"] / (HBM_GB_S * 1e9)
    wavefronts = row.get("shared_wavefronts_per_update") or row["shared_accesses_per_update"] * (
        row["shared_wavefronts_per_access"] or 1.0) * (32 * itemsize / SHARED_BYTES_PER_CLOCK)
    shared_s = wavefronts / (SMS * CLOCK_HZ)
    l1_s = row["sectors_per_update"] * 32 / (SHARED_BYTES_PER_CLOCK * SMS * CLOCK_HZ)
    tensor_s = row.get("mma_flops_per_update", 0.0) / TENSOR_FLOPS[row["dtype"]]
    issue_s = (instructions or 0.0) / ISSUE_PER_SECOND
    seconds, what = max((dram_s, "DRAM"), (shared_s, "shared memory"), (l1_s, "L1"), (tensor_s, "tensor cores"),
                        (issue_s, "instruction issue"))
    return 1e-9 / seconds, what


def tensor_core_issue(row: dict[str, Any], sass: dict[str, Any]) -> float | None:
    """Thread-instructions per update of a tensor-core kernel from its counted traffic
    (`row`, benchmarks/cuda_counters.py) and its SASS (`sass`, benchmarks/cuda_resources.py
    --sass): staging loads, MMAs (warp instructions, 32 threads each) and written points.
    None where a count is missing (counters from before mma_flops, a loop not found)."""
    needed = (row.get("mma_flops_per_update"), sass.get("instructions_per_load"), sass.get("instructions_per_point"))
    if any(n is None for n in needed):
        return None
    itemsize = ITEMSIZE[row["dtype"]]
    staging = row["load_bytes_per_update"] / itemsize * sass["instructions_per_load"]
    products = row["mma_flops_per_update"] / sass["flops_per_mma"] * sass["instructions_per_mma"] * 32
    writes = row["store_bytes_per_update"] / itemsize * sass["instructions_per_point"]
    return staging + products + writes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counters", required=True)
    ap.add_argument("--measured")
    ap.add_argument("--json")
    ap.add_argument("--resources", nargs="*", default=[], help="benchmarks/cuda_resources.py --sass JSON files")
    ap.add_argument("--index", choices=("int", "long"), default="int")
    a = ap.parse_args(argv)
    counted = json.loads(Path(a.counters).read_text())["rows"]
    sass_rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for path in a.resources:
        sass = json.loads(Path(path).read_text())
        for r in sass["rows"]:
            if (r.get("index") == a.index and sass["schedule"] in SCHEDULES
                    and ("instructions_per_update" in r or "instructions_per_mma" in r)
                    and ("tensor_cores" not in sass["schedule"] or f"'{PRECISION[r['dtype']]}'" in sass["schedule"])):
                # a tensor-core kernel of the precision the counters ran in its dtype (fp64 in float64, tf32 in float32)
                sass_rows[(r["stencil"], r["dtype"], SCHEDULES[sass["schedule"]])] = r
    measured: dict[tuple[str, str], dict[str, Any]] = {}
    if a.measured:
        for r in json.loads(Path(a.measured).read_text())["results"]:
            measured[(r["stencil"], r["dtype"])] = r.get("tools", {})
    rows = []
    print("| stencil | dtype | kernel | bound (GStencil/s) | bounded by | issue bound | measured on the H200 "
          "| measured / bound |")
    print("|---|---|---|---|---|---|---|---|")
    for r in counted:
        sass_row = sass_rows.get((r["stencil"], r["dtype"], r["schedule"]), {})
        issued = sass_row.get("instructions_per_update")
        if "instructions_per_mma" in sass_row:
            issued = tensor_core_issue(r, sass_row)
        gst, what = bound(r, issued)
        issue = f"{ISSUE_PER_SECOND / issued / 1e9:.0f}" if issued else ""
        tensor_cores = TENSOR_CORES.get(r["schedule"])
        name = tensor_cores.format(PRECISION[r["dtype"]]) if tensor_cores else TOOLS.get(r["schedule"], "")
        tool = measured.get((r["stencil"], r["dtype"]), {}).get(name)
        got = tool["gstencil_per_s"] if tool else None
        rows.append({"stencil": r["stencil"], "dtype": r["dtype"], "schedule": r["schedule"], "bound_gstencil_per_s": gst,
                     "bounded_by": what, "instructions_per_update": issued, "measured_gstencil_per_s": got})
        print(f"| {r['stencil']} | {r['dtype']} | {r['schedule']} | {gst:.0f} | {what} | {issue} | "
              f"{'' if got is None else f'{got:.0f}'} | {'' if got is None else f'{got / gst:.2f}'} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"hbm_gb_s": HBM_GB_S, "sms": SMS, "clock_hz": CLOCK_HZ, "index": a.index,
                                            "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
