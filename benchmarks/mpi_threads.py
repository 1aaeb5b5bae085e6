"""OpenMP threads per MPI rank by default: milliseconds per step of heat2d run
with `kernel.run(..., comm=comm)` on 1 and 2 ranks, with the default thread
count (the node's cores divided among its ranks), with one thread per rank
(OMP_NUM_THREADS=1) and with every core per rank (`threads=os.cpu_count()`,
what each rank ran before: oversubscribed once ranks share a node). The
default should match the better of the other two. Writes JSON.

    python3 benchmarks/mpi_threads.py --json mpi_threads.json [--size 1026] [--steps 200] [--quick]

Times are the slowest rank's time loop, the best of three runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from mpi_launch import run_worker

import msc
from msc import t, x, y

SETTINGS = ("default", "one-per-rank", "every-core")


@msc.stencil
def heat2d(u):
    u[t + 1, x, y] = 0.5 * u[t, x, y] + 0.125 * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1])


def worker(setting: str, size: int, steps: int) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    kernel = heat2d.compile()
    threads = os.cpu_count() if setting == "every-core" else None
    u0 = np.random.default_rng(0).random((size, size)) if comm.rank == 0 else None
    kernel.run(steps=2, comm=comm, threads=threads, u=u0)  # warm-up
    best = float("inf")
    for _ in range(3):
        kernel.run(steps=steps, comm=comm, threads=threads, u=u0)
        best = min(best, comm.allreduce(kernel.last_run.seconds, op=MPI.MAX))
    if comm.rank == 0:
        print(json.dumps({"setting": setting, "ranks": comm.size, "ms_per_step": 1e3 * best / steps}))


def launch(ranks: int, setting: str, size: int, steps: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if setting == "one-per-rank":
        env["OMP_NUM_THREADS"] = "1"
    return run_worker(ranks, __file__, [setting, str(size), str(steps)], env)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--size", type=int, default=1026)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="a small problem (a smoke run)")
    a = ap.parse_args()
    size, steps = (66, 10) if a.quick else (a.size, a.steps)
    rows = []
    for ranks in (1, 2):
        for setting in SETTINGS:
            row = launch(ranks, setting, size, steps)
            rows.append(row)
            print(f"heat2d {size}x{size}, {ranks} rank(s), {setting:12s}: {row['ms_per_step']:.3f} ms/step", flush=True)
        mine = {r["setting"]: r["ms_per_step"] for r in rows if r["ranks"] == ranks}
        best_other = min(mine["one-per-rank"], mine["every-core"])
        print(f"  default / best of the others: {mine['default'] / best_other:.2f}", flush=True)
    result = {"cpu_count": os.cpu_count(), "shape": [size, size], "steps": steps, "runs": rows}
    if a.json:
        a.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
