"""msc.solve(comm=...) with multigrid on 1, 2 (and more) MPI ranks: 3D Poisson to a relative residual of
1e-8, the time, iterations, the difference from the one-rank solution, and halo bytes per Krylov iteration
against the faces-only minimum (edges and corners left out). One OpenMP thread per rank; more ranks than
cores are oversubscribed, so their times say little about speed. Writes JSON.

    python3 benchmarks/pde_mpi.py --json pde_mpi.json [--ranks 1,2,4] [--n 64] [--agglomerate POINTS]

--agglomerate sets msc.pde.distributed.AGGLOMERATE: the fewest points per rank of a coarse level
that runs in blocks (a huge value: every coarse level on rank 0).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from mpi_launch import run_worker

import msc
from msc import x, y, z
from msc.runtime.build import atomic_write_text


@msc.operator
def lap3(u, h):
    return (u[x - 1, y, z] + u[x + 1, y, z] + u[x, y - 1, z] + u[x, y + 1, z] + u[x, y, z - 1] + u[x, y, z + 1]
            - 6 * u[x, y, z]) / h**2


def worker(n: int, out: str, agglomerate: int | None) -> None:
    from mpi4py import MPI

    from msc.pde import distributed

    if agglomerate is not None:
        distributed.AGGLOMERATE = agglomerate
    comm = MPI.COMM_WORLD
    f = np.random.default_rng(0).random((n,) * 3) if comm.rank == 0 else None
    msc.solve(lap3, f, h=1.0 / (n + 1), method="multigrid", comm=comm)  # kernels built before timing
    comm.Barrier()
    start = time.perf_counter()
    u, info = msc.solve(lap3, f, h=1.0 / (n + 1), method="multigrid", comm=comm, full_output=True)
    seconds = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    if comm.rank == 0:
        np.save(out, u)
        print(json.dumps({"ranks": comm.size, "seconds": seconds, "iterations": info.iterations,
                          "residual": info.residuals[-1], "halo_bytes_per_iteration": info.halo_bytes_per_iteration,
                          "halo_face_bytes_per_iteration": info.halo_face_bytes_per_iteration,
                          "gather_bytes_per_iteration": info.gather_bytes_per_iteration,
                          "levels": info.levels, "levels_in_blocks": info.levels_in_blocks}))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--ranks", default="1,2,4")
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--agglomerate", type=int, help="points per rank below which coarse levels go to rank 0")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a.n, a.out, a.agglomerate)
        return 0
    env = dict(os.environ, OMP_NUM_THREADS="1")
    runs: list[dict[str, Any]] = []
    first = None
    for ranks in [int(r) for r in a.ranks.split(",")]:
        out = str(Path(a.json or "pde_mpi.json").with_suffix(f".u{ranks}.npy"))
        extra = [] if a.agglomerate is None else ["--agglomerate", str(a.agglomerate)]
        run = run_worker(ranks, __file__, ["--n", str(a.n), "--out", out, *extra], env)
        u = np.load(out)
        os.remove(out)
        first = u if first is None else first
        run["difference_from_one_rank"] = float(np.abs(u - first).max() / np.abs(first).max())
        runs.append(run)
        print(f"{ranks} rank(s): {run['seconds']:.2f} s, {run['iterations']} iterations, "
              f"{run['levels_in_blocks']} of {len(run['levels'])} levels in blocks, halo "
              f"{run['halo_bytes_per_iteration'] / 1e3:.0f} kB/iteration (faces only: "
              f"{run['halo_face_bytes_per_iteration'] / 1e3:.0f} kB), gathered {run['gather_bytes_per_iteration'] / 1e3:.0f} "
              f"kB/iteration, difference {run['difference_from_one_rank']:.1e}")
    if a.json:
        atomic_write_text(Path(a.json), json.dumps({"benchmark": "pde_mpi", "n": a.n, "cpu_count": os.cpu_count(),
                                                    "agglomerate": a.agglomerate, "runs": runs}, indent=2))
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
