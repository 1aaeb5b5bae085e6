"""How close a time tile comes to its own loop in cache. For each standard
stencil (benchmarks/stencils.py's CASES) and a time tile:
- the loop in cache: the same schedule on a grid whose levels fit in the
  core's L2 (rows as long as at full size, few of them: one tile covers the
  grid), many steps on 1 thread;
- the tile at full size on 1 thread and on every thread (also per thread);
- for a pipelined tile (Schedule.pipeline), the same tile in wavefronts, timed
  in the same rounds;
- with --growth, the tile on 1 thread over grids between the two (rows as
  long as at full size, levels of 1 to 64 MiB): where its speed falls off
  says which cache level a full-size tile outgrows.
With a JSON of benchmarks/stencils.py, each row also says the speed per
thread that 2.0x that run's best peer asks for (the issue's goal for heat2d
and heat3d). Best of --repeat rounds, the three timings interleaved in each.

    python3 benchmarks/in_cache.py --json benchmarks/results/in_cache.json \\
        [--stencils benchmarks/results/stencils-full.json] [--only heat3d] [--growth]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import PEERS  # noqa: E402
from stencils import CASES, Case, msc_stencil  # noqa: E402

import msc  # noqa: E402
from msc.poly.schedule import parse_schedule  # noqa: E402
from msc.runtime.build import atomic_write_text  # noqa: E402
from msc.runtime.threads import usable_cores  # noqa: E402
from msc.tune.machine import cache_bytes  # noqa: E402

#: the time tiles the tuner chose in the last full-size run (docs/benchmarks.md), used without --stencils
TILES = {"heat2d": "Schedule().time_tile(8, x=32)", "box2d9p": "Schedule().time_tile(8, x=16)",
         "heat3d": "Schedule().time_tile(16, x=32, y=32)", "box3d27p": "Schedule().time_tile(8, x=16, y=64)"}
FULL_STEPS = 32
IN_CACHE_UPDATES = 2e8  # points x steps of the in-cache run
GROWTH_LEVEL_MIB = (1, 4, 16, 64)  # --growth: level sizes between in cache and full size


def schedule_of(text: str) -> msc.Schedule:
    """A schedule as the benchmarks write it ("Schedule().time_tile(8, x=32).with_threads(2)"), threads dropped."""
    schedule = parse_schedule(re.sub(r"\.with_threads\(\d+\)", "", text))
    assert isinstance(schedule, msc.Schedule), text
    return schedule


def in_cache_shape(case: Case) -> tuple[int, ...]:
    """A level within a third of the L2 (one ring of two levels and what the tile's halo adds)."""
    return shape_of_level(case, cache_bytes().get(2, 512 * 1024) // 3)


def shape_of_level(case: Case, level_bytes: float) -> tuple[int, ...]:
    """Rows of the full size, as many as make a level of about `level_bytes` (as many along each other
    axis), and at least 3 interior rows along each."""
    rows = max(level_bytes / (case.n * 8), 3 ** (case.ndim - 1))
    side = max(round(rows ** (1 / (case.ndim - 1))), 3)
    return (side + 2,) * (case.ndim - 1) + (case.n,)


def rate(kernel: Any, u0: np.ndarray, steps: int) -> float:
    kernel.run(steps=steps, u=u0)
    return math.prod(n - 2 for n in u0.shape) * steps / kernel.last_run.seconds / 1e9


def best_peer(case: dict[str, Any]) -> tuple[str, float]:
    """The fastest peer of a case of benchmarks/stencils.py's JSON, and its ms per step."""
    ms, tool = min((case["tools"][p]["ms_per_step"], p) for p in PEERS if p in case["tools"])
    return tool, ms


def measure(case: Case, tile: str, threads: int, repeat: int, peer: tuple[str, float] | None,
            growth: bool) -> dict[str, Any]:
    """The row of one time tile; a pipelined one's row has the same tile in wavefronts, timed in the same
    rounds, under "wavefront"."""
    stencil = msc_stencil(case)
    schedule = schedule_of(tile)
    schedules = [schedule] + ([replace(schedule, pipelined=False)] if schedule.pipelined else [])
    rng = np.random.default_rng(0)
    small = rng.random(in_cache_shape(case))
    full = rng.random((case.n,) * case.ndim)
    small_steps = max(int(IN_CACHE_UPDATES / math.prod(n - 2 for n in small.shape)), FULL_STEPS)
    kernels = [(stencil.compile(schedule=s.with_threads(1), threads=1),
                stencil.compile(schedule=s.with_threads(threads), threads=threads)) for s in schedules]
    best = [{"in_cache_1": 0.0, "full_1": 0.0, "full_n": 0.0} for _ in schedules]
    for _ in range(repeat):
        for (one, many), b in zip(kernels, best):
            b["in_cache_1"] = max(b["in_cache_1"], rate(one, small, small_steps))
            b["full_1"] = max(b["full_1"], rate(one, full, FULL_STEPS))
            b["full_n"] = max(b["full_n"], rate(many, full, FULL_STEPS))
    rows = [{"stencil": case.name, "schedule": str(s), "threads": threads,
             "in_cache_shape": list(small.shape), "in_cache_steps": small_steps,
             "in_cache_gstencils_1_thread": b["in_cache_1"],
             "full_gstencils_1_thread": b["full_1"],
             "full_gstencils": b["full_n"],
             "full_gstencils_per_thread": b["full_n"] / threads} for s, b in zip(schedules, best)]
    if growth:
        for r in rows:
            r["growth_1_thread"] = []
        for mib in GROWTH_LEVEL_MIB:
            grid = rng.random(shape_of_level(case, mib * 2**20))
            steps = max(int(IN_CACHE_UPDATES / 4 / math.prod(n - 2 for n in grid.shape)), FULL_STEPS)
            gst = [0.0] * len(rows)
            for _ in range(repeat):
                gst = [max(g, rate(one, grid, steps)) for g, (one, _many) in zip(gst, kernels)]
            for r, g in zip(rows, gst):
                r["growth_1_thread"].append({"shape": list(grid.shape), "level_mib": grid.nbytes / 2**20,
                                             "gstencils": g})
    row = rows[0]
    if len(rows) > 1:
        row["wavefront"] = rows[1]
    if peer is not None:
        tool, ms = peer
        points = (case.n - 2) ** case.ndim
        row["best_peer"] = {"tool": tool, "ms_per_step": ms}
        row["per_thread_for_2x_best_peer"] = 2 * points / (ms * 1e-3) / 1e9 / threads
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--stencils", help="a JSON of benchmarks/stencils.py: its time tiles and best peers")
    parser.add_argument("--only", help="comma-separated stencil names")
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--growth", action="store_true", help="also the tile on 1 thread over grids of 1-64 MiB levels")
    args = parser.parse_args()
    run = json.loads(Path(args.stencils).read_text()) if args.stencils else None
    only = set(args.only.split(",")) if args.only else None
    rows = []
    for case in CASES:
        if only and case.name not in only:
            continue
        measured = next((c for c in run["cases"] if c["stencil"] == case.name), None) if run else None
        tile = measured["msc_schedules"]["msc_time_tiled"] if measured else TILES[case.name]
        row = measure(case, tile, args.threads, args.repeat, best_peer(measured) if measured else None,
                      args.growth)
        rows.append(row)
        need = row.get("per_thread_for_2x_best_peer")
        print(f"{case.name}: {row['schedule']}: in cache {row['in_cache_gstencils_1_thread']:.2f} GStencil/s on 1 "
              f"thread {tuple(row['in_cache_shape'])}; at full size {row['full_gstencils_1_thread']:.2f} on 1, "
              f"{row['full_gstencils_per_thread']:.2f} per thread on {args.threads}"
              + (f"; 2.0x the best peer needs {need:.2f} per thread" if need else ""), flush=True)
        for g in row.get("growth_1_thread", []):
            print(f"  {tuple(g['shape'])} ({g['level_mib']:.1f} MiB a level): "
                  f"{g['gstencils']:.2f} GStencil/s on 1 thread", flush=True)
        if "wavefront" in row:
            wave = row["wavefront"]
            print(f"  the same tile in wavefronts: in cache {wave['in_cache_gstencils_1_thread']:.2f}; at full size "
                  f"{wave['full_gstencils_1_thread']:.2f} on 1, {wave['full_gstencils_per_thread']:.2f} per thread"
                  + "".join(f"; {g['level_mib']:.0f} MiB {g['gstencils']:.2f}"
                            for g in wave.get("growth_1_thread", [])),
                  flush=True)
    result = {"machine": platform.processor() or platform.machine(), "caches": cache_bytes(),
              "threads": args.threads, "stencils_json": args.stencils, "rows": rows}
    atomic_write_text(Path(args.json), json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
