"""Memory traffic of msc's CUDA kernels per grid-point update, counted by the
CUDA emulator (docs/cuda.md "Counters"), for the standard stencils of
benchmarks/stencils_gpu.py: the grid-mapped launch (one point per thread,
`parallel` on the outermost dimension), the default launch (streamed tiles),
time tiles of depth 4 and the tensor-core kernels (fp64 in float64, tf32 in
float32; in 2D also fused with time tiles of depth 4), in float64 and float32. Runs on the CPU (g++ only).
Writes JSON and prints a table; the goals of docs/cuda.md are checked and
reported ("meets").

    python3 benchmarks/cuda_counters.py [--json out.json] [--only heat2d,heat3d] [--steps 8]

In 3D also streamed tiles (one step and depth 4) whose threads take 2 points of y
each (`unroll("y", 2)`): blocks of 8 x 32 threads, so the default's 16 x 32 points
of a plane and its tile.

Goals: with the default launch, global load bytes per update at most 1.5 x
the itemsize (the stencils read one level); with time_tile(4), DRAM bytes
per update (the ideal-L2 model) at most 1.3 x 2 x itemsize / 4; shared
memory wavefronts per access at most 1.1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stencils_gpu import CASES, msc_stencil, points_per_thread, write_atomically  # noqa: E402

import msc  # noqa: E402

SHAPES = {2: (130, 258), 3: (34, 34, 66)}  # several blocks along every dimension, small enough to emulate
STANDARD = ("heat2d", "box2d9p", "heat3d", "box3d27p")
DEPTH = 4


def schedules(stencil: msc.Stencil, dtype: str) -> dict[str, msc.Schedule]:
    """The grid-mapped launch, the default, time_tile(DEPTH), tensor cores (fp64, or tf32 in
    float32); in 2D also tensor cores with time_tile(DEPTH) (fused); in 3D also streamed tiles
    (one step and DEPTH) whose threads take 2 points of y each."""
    out = {"grid-mapped": msc.Schedule().parallel("x"), "default (streamed)": msc.Schedule(),
           f"time_tile({DEPTH})": msc.Schedule().time_tile(DEPTH),
           "tensor cores": msc.Schedule().tensor_cores("fp64" if dtype == "float64" else "tf32")}
    if stencil.ir.ndim == 2:
        out[f"tensor cores, time_tile({DEPTH})"] = out["tensor cores"].time_tile(DEPTH)
    if stencil.ir.ndim == 3:
        for depth in (1, DEPTH):
            label = "streamed" if depth == 1 else f"time_tile({depth})"
            out[f"{label}, 2 points of y per thread"] = points_per_thread(stencil, depth)
    return out


def measure(name: str, dtype: str, steps: int) -> list[dict[str, Any]]:
    case = next(c for c in CASES if c.name == name)
    stencil = msc_stencil(case)
    u = np.random.default_rng(0).random(SHAPES[case.ndim]).astype(dtype)
    itemsize = np.dtype(dtype).itemsize
    rows = []
    for label, schedule in schedules(stencil, dtype).items():
        kernel = stencil.compile(target="cuda", dtype=dtype, schedule=schedule, emulate=True)
        start = time.perf_counter()
        out = kernel.run(steps=steps, u=u)
        seconds = time.perf_counter() - start
        expected = stencil.reference(steps=steps, dtype=dtype, u=u)["u"]
        error = float(np.max(np.abs(out["u"] - expected)))
        run = kernel.last_run
        per = {key: run.gpu[key] / run.updates
               for key in ("load_bytes", "store_bytes", "sectors", "dram_bytes", "shared_accesses", "mma_flops")}
        row = {"stencil": name, "dtype": dtype, "schedule": label, "shape": list(u.shape), "steps": steps,
               "updates": run.updates, "launches": run.gpu["launches"], "max_abs_error": error,
               "emulated_seconds": seconds, **{f"{k}_per_update": v for k, v in per.items()},
               "shared_wavefronts_per_access": run.gpu["shared_wavefronts_per_access"]}
        goals = []
        if label.startswith(("default", "streamed")):
            goals.append(("load_bytes_per_update <= 1.5 x itemsize", per["load_bytes"] <= 1.5 * itemsize))
        if "time_tile" in label:
            goals.append((f"dram_bytes_per_update <= 1.3 x 2 x itemsize / {DEPTH}",
                          per["dram_bytes"] <= 1.3 * 2 * itemsize / DEPTH))
        if run.gpu["shared_accesses"]:
            goals.append(("shared_wavefronts_per_access <= 1.1", run.gpu["shared_wavefronts_per_access"] <= 1.1))
        row["goals"] = {text: bool(ok) for text, ok in goals}
        rows.append(row)
        print(f"{name:9s} {dtype:8s} {label:20s} load {per['load_bytes']:6.2f} store {per['store_bytes']:5.2f} "
              f"sectors {per['sectors']:6.3f} dram {per['dram_bytes']:6.2f} B/update, shared {per['shared_accesses']:5.3f}/update, "
              f"wavefronts {row['shared_wavefronts_per_access'] or 0:4.2f}, mma {per['mma_flops']:5.1f} flop/update, "
              f"error {error:.1e}, "
              f"goals {'met' if all(ok for _, ok in goals) else 'MISSED'} ({seconds:.1f} s)", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--only", default=",".join(STANDARD))
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args(argv)
    names = a.only.split(",")
    unknown = set(names) - {c.name for c in CASES}
    if unknown:
        ap.error(f"unknown stencil(s) {', '.join(sorted(unknown))}")
    rows = [row for dtype in a.dtypes.split(",") for name in names for row in measure(name, dtype, a.steps)]
    met = all(all(r["goals"].values()) for r in rows)
    if a.json:
        write_atomically(Path(a.json), json.dumps({"rows": rows, "all_goals_met": met}, indent=1))
    print("every goal met" if met else "some goals missed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
