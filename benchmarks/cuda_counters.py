"""Memory traffic of msc's CUDA kernels per grid-point update, counted by the
CUDA emulator (docs/cuda.md "Counters"), for the standard stencils of
benchmarks/stencils_gpu.py: the grid-mapped launch (one point per thread,
`parallel` on the outermost dimension), the default launch (streamed tiles),
time tiles of depth 4 and the tensor-core kernels (fp64 in float64, tf32 in
float32; in 2D also fused with time tiles of depth 4), in float64 and float32. Runs on the CPU (g++ only).
Writes JSON and prints a table; the goals of docs/cuda.md are checked and
reported ("meets").

    python3 benchmarks/cuda_counters.py [--json out.json] [--only heat2d,heat3d] [--steps 8]
        [--shape 66x258x258] [--no-tensor-cores]

In 3D also streamed tiles (one step and depth 4) whose threads take 2 points of y
each (`unroll("y", 2)`) on the default's points of a plane and its tile: blocks of
8 x 32 threads for the default's 16 x 32 points, 16 x 32 for time_tile(4)'s 32 x 32;
and time_tile(4) in the default launch's blocks of 16 x 32 threads (the default time
tile's block before it took 32 x 32, docs/cuda.md "Larger 3D time tiles").

`--only` also takes stencils of several levels or fields (SEVERAL, not run by
default): a wave equation in 2D and 3D (levels t and t-1), two coupled
fields in 2D, the acoustic wave of examples/wave_coupled.py (a statement
reading the level t+1 the one before wrote, at the point) and a staggered
Yee scheme in 2D and 3D (yee2d, yee3d: the electric fields read the magnetic
field's level t+1 at neighbours), with the grid-mapped launch, the default
and time_tile(4).

Goals: with the default launch, global load bytes per update at most 1.5 x
the itemsize per level read (the standard stencils read one); with
time_tile(4) in shared memory, DRAM bytes per update (the ideal-L2 model) at
most 1.3 x 2 x itemsize / 4 per level read; shared memory wavefronts per
access at most 1.1.
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
from msc.targets.gpu.cuda_stream import INNER_THREADS, block_tile  # noqa: E402

SHAPES = {2: (130, 258), 3: (34, 34, 66)}  # several blocks along every dimension, small enough to emulate
STANDARD = ("heat2d", "box2d9p", "heat3d", "box3d27p")
DEPTH = 4


def schedules(stencil: msc.Stencil, dtype: str) -> dict[str, msc.Schedule]:
    """The grid-mapped launch, the default, time_tile(DEPTH), tensor cores (fp64, or tf32 in
    float32); in 2D also tensor cores with time_tile(DEPTH) (fused); in 3D also streamed tiles
    (one step and DEPTH) whose threads take 2 points of y each, and time_tile(DEPTH) in the
    default launch's block."""
    out = {"grid-mapped": msc.Schedule().parallel("x"), "default (streamed)": msc.Schedule(),
           f"time_tile({DEPTH})": msc.Schedule().time_tile(DEPTH),
           "tensor cores": msc.Schedule().tensor_cores("fp64" if dtype == "float64" else "tf32")}
    if stencil.ir.ndim == 2:
        out[f"tensor cores, time_tile({DEPTH})"] = out["tensor cores"].time_tile(DEPTH)
    if stencil.ir.ndim == 3:
        for depth in (1, DEPTH):
            label = "streamed" if depth == 1 else f"time_tile({depth})"
            out[f"{label}, 2 points of y per thread"] = points_per_thread(stencil, depth)
        smaller = block_tile(stencil.ir, DEPTH, INNER_THREADS[3])  # the default launch's block
        assert smaller is not None
        out[f"time_tile({DEPTH}), 16 x 32 threads"] = msc.Schedule().time_tile(DEPTH, **smaller)
    return out


def several(name: str) -> tuple[msc.Stencil, int]:
    """A stencil of SEVERAL and the levels it reads."""
    from msc import t, x, y, z

    def wave2d(u, c):  # type: ignore[no-untyped-def]
        u[t + 1, x, y] = 2 * u[t, x, y] - u[t - 1, x, y] + c * (
            u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y])

    def wave3d(u, c):  # type: ignore[no-untyped-def]
        u[t + 1, x, y, z] = 2 * u[t, x, y, z] - u[t - 1, x, y, z] + c * (
            u[t, x - 1, y, z] + u[t, x + 1, y, z] + u[t, x, y - 1, z] + u[t, x, y + 1, z]
            + u[t, x, y, z - 1] + u[t, x, y, z + 1] - 6 * u[t, x, y, z])

    def coupled2d(u, v, c):  # type: ignore[no-untyped-def]
        u[t + 1, x, y] = u[t, x, y] + c * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1]
                                           - 4 * u[t, x, y]) - 0.1 * u[t, x, y] * v[t, x, y]
        v[t + 1, x, y] = v[t, x, y] + c * (v[t, x - 1, y] + v[t, x + 1, y] + v[t, x, y - 1] + v[t, x, y + 1]
                                           - 4 * v[t, x, y]) + 0.1 * u[t, x, y] * v[t, x, y]

    def acoustic2d(p, q, c, dt2):  # type: ignore[no-untyped-def]  # examples/wave_coupled.py: q[t+1] read at the point
        q[t + 1, x, y] = p[t, x - 1, y] + p[t, x + 1, y] + p[t, x, y - 1] + p[t, x, y + 1] - 4 * p[t, x, y]
        p[t + 1, x, y] = 2 * p[t, x, y] - p[t - 1, x, y] + dt2 * c[x, y] ** 2 * q[t + 1, x, y]

    def yee2d(ex, ey, hz, c):  # type: ignore[no-untyped-def]  # staggered (FDTD, TE mode): h[t+1] read at neighbours
        hz[t + 1, x, y] = hz[t, x, y] - c * (ey[t, x + 1, y] - ey[t, x, y] - ex[t, x, y + 1] + ex[t, x, y])
        ex[t + 1, x, y] = ex[t, x, y] + c * (hz[t + 1, x, y] - hz[t + 1, x, y - 1])
        ey[t + 1, x, y] = ey[t, x, y] - c * (hz[t + 1, x, y] - hz[t + 1, x - 1, y])

    def yee3d(ex, ey, ez, hx, hy, hz, c):  # type: ignore[no-untyped-def]  # Maxwell in 3D: six fields
        hx[t + 1, x, y, z] = hx[t, x, y, z] - c * (ez[t, x, y + 1, z] - ez[t, x, y, z]
                                                   - ey[t, x, y, z + 1] + ey[t, x, y, z])
        hy[t + 1, x, y, z] = hy[t, x, y, z] - c * (ex[t, x, y, z + 1] - ex[t, x, y, z]
                                                   - ez[t, x + 1, y, z] + ez[t, x, y, z])
        hz[t + 1, x, y, z] = hz[t, x, y, z] - c * (ey[t, x + 1, y, z] - ey[t, x, y, z]
                                                   - ex[t, x, y + 1, z] + ex[t, x, y, z])
        ex[t + 1, x, y, z] = ex[t, x, y, z] + c * (hz[t + 1, x, y, z] - hz[t + 1, x, y - 1, z]
                                                   - hy[t + 1, x, y, z] + hy[t + 1, x, y, z - 1])
        ey[t + 1, x, y, z] = ey[t, x, y, z] + c * (hx[t + 1, x, y, z] - hx[t + 1, x, y, z - 1]
                                                   - hz[t + 1, x, y, z] + hz[t + 1, x - 1, y, z])
        ez[t + 1, x, y, z] = ez[t, x, y, z] + c * (hy[t + 1, x, y, z] - hy[t + 1, x - 1, y, z]
                                                   - hx[t + 1, x, y, z] + hx[t + 1, x, y - 1, z])

    body = {"wave2d": wave2d, "wave3d": wave3d, "coupled2d": coupled2d, "acoustic2d": acoustic2d, "yee2d": yee2d,
            "yee3d": yee3d}[name]
    return msc.stencil(body), {"acoustic2d": 3, "yee2d": 3, "yee3d": 6}.get(name, 2)


SEVERAL = ("wave2d", "wave3d", "coupled2d", "acoustic2d", "yee2d", "yee3d")
SEVERAL_SCHEDULES = ("grid-mapped", "default (streamed)", f"time_tile({DEPTH})")


def inputs_of(stencil: msc.Stencil, dtype: str) -> dict[str, Any]:
    """Random fields (every level a field keeps, and inputs) and scalars of 0.1."""
    rng = np.random.default_rng(0)
    shape = SHAPES[stencil.ir.ndim]
    out: dict[str, Any] = {}
    for f in stencil.ir.fields:
        levels = [rng.random(shape).astype(dtype) for _ in range(max(f.window, 1))]
        out[f.name] = levels[0] if len(levels) == 1 else levels
    return {**out, **{p: 0.1 for p in stencil.ir.params}}


def measure(name: str, dtype: str, steps: int, tensor_cores: bool = True) -> list[dict[str, Any]]:
    if name in SEVERAL:  # no tensor-core plan (several statements or levels); the default's blocks
        stencil, levels = several(name)
        plans = {label: s for label, s in schedules(stencil, dtype).items() if label in SEVERAL_SCHEDULES}
    else:
        stencil, levels = msc_stencil(next(c for c in CASES if c.name == name)), 1
        plans = {label: s for label, s in schedules(stencil, dtype).items()
                 if tensor_cores or not label.startswith("tensor cores")}
    inputs = inputs_of(stencil, dtype)
    shape = SHAPES[stencil.ir.ndim]
    itemsize = np.dtype(dtype).itemsize
    rows = []
    for label, schedule in plans.items():
        kernel = stencil.compile(target="cuda", dtype=dtype, schedule=schedule, emulate=True)
        start = time.perf_counter()
        out = kernel.run(steps=steps, **inputs)
        seconds = time.perf_counter() - start
        expected = stencil.reference(steps=steps, dtype=dtype, **inputs)
        error = max(float(np.max(np.abs(out[f] - expected[f]))) for f in expected)
        run = kernel.last_run
        per = {key: run.gpu[key] / run.updates
               for key in ("load_bytes", "store_bytes", "sectors", "dram_bytes", "shared_accesses", "shared_wavefronts",
                           "mma_flops")}
        row = {"stencil": name, "dtype": dtype, "schedule": label, "shape": list(shape), "steps": steps,
               "updates": run.updates, "launches": run.gpu["launches"], "max_abs_error": error,
               "emulated_seconds": seconds, **{f"{k}_per_update": v for k, v in per.items()},
               "shared_wavefronts_per_access": run.gpu["shared_wavefronts_per_access"]}
        goals = []
        per_level = "" if levels == 1 else f" x {levels} levels"
        if label.startswith(("default", "streamed")):
            goals.append((f"load_bytes_per_update <= 1.5 x itemsize{per_level}",
                          per["load_bytes"] <= 1.5 * itemsize * levels))
        if "time_tile" in label and "msc_ring" in kernel.source:
            goals.append((f"dram_bytes_per_update <= 1.3 x 2 x itemsize / {DEPTH}{per_level}",
                          per["dram_bytes"] <= 1.3 * 2 * itemsize / DEPTH * levels))
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
    ap.add_argument("--no-tensor-cores", action="store_true",
                    help="leave the tensor-core kernels out (the slowest to emulate on a large --shape)")
    ap.add_argument("--shape", help="the grid of the stencils of its dimensionality, outermost first (default: "
                    + ", ".join("x".join(map(str, shape)) for shape in SHAPES.values()) + ")")
    a = ap.parse_args(argv)
    if a.shape:
        try:
            shape = tuple(int(n) for n in a.shape.split("x"))
        except ValueError:
            ap.error(f"--shape {a.shape}: give the points per dimension, outermost first, as 66x258x258")
        if len(shape) not in SHAPES or min(shape) < 8:
            ap.error(f"--shape {a.shape}: a 2D or 3D grid of at least 8 points per dimension")
        SHAPES[len(shape)] = shape
    names = a.only.split(",")
    unknown = set(names) - {c.name for c in CASES} - set(SEVERAL)
    if unknown:
        ap.error(f"unknown stencil(s) {', '.join(sorted(unknown))}")
    rows = [row for dtype in a.dtypes.split(",") for name in names
            for row in measure(name, dtype, a.steps, not a.no_tensor_cores)]
    met = all(all(r["goals"].values()) for r in rows)
    if a.json:
        write_atomically(Path(a.json), json.dumps({"rows": rows, "all_goals_met": met}, indent=1))
    print("every goal met" if met else "some goals missed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
