"""Distributed runs on 1-4 MPI ranks: time per step split into compute and
halo exchange, exchanges and bytes sent per step, and bytes per exchange
against the minimum the halo needs; step by step, the time per step with and
without overlap of the exchange with the inner box. Writes JSON.

    python3 benchmarks/mpi_halo.py --json mpi.json [--ranks 1,2,3,4] [--steps 20] [--depths 1,4] [--quick]

Two problems per stencil (star heat2d and box box2d9p, dirichlet, float64):
a fixed one (strong scaling) and one that grows with the ranks (weak
scaling: the rows grow with P); each step by step (depth 1: halo = radius,
one exchange per step) and time-tiled (time_tile(D, x=...): halo = radius x
D, one exchange per D steps, redundant computation in the halo). One
OpenMP thread per rank; 4 ranks on a 2-core machine are oversubscribed, so
their times say little about speed. The split into compute and exchange is
that of the runs without overlap; `step_ms` and `overlap_step_ms` are whole
steps (the best of three runs, slowest rank), without and with overlap.
The minimum is counted independently of the library: the halo cells that
lie inside another rank's block and that the next D steps of some owned
point read (the owned block dilated D times by the stencil's offsets; the
stencils here have one statement). Times are the slowest rank's; bytes are
summed over ranks; the exchange of the initial levels is not counted.
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


@msc.stencil
def heat2d(u):
    u[t + 1, x, y] = 0.5 * u[t, x, y] + 0.125 * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1])


@msc.stencil
def box2d9p(u):
    u[t + 1, x, y] = 0.25 * u[t, x, y] + 0.125 * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1]) \
        + 0.0625 * (u[t, x - 1, y - 1] + u[t, x - 1, y + 1] + u[t, x + 1, y - 1] + u[t, x + 1, y + 1])


STENCILS = {"heat2d": heat2d, "box2d9p": box2d9p}


def _dilate(mask: np.ndarray, offsets: set[tuple[int, ...]]) -> np.ndarray:
    """The cells p + o for every cell p of `mask` and offset o (clipped to the array)."""
    out = mask.copy()
    for o in offsets:
        src = tuple(slice(max(0, -k), n - max(0, k)) for k, n in zip(o, mask.shape))
        dst = tuple(slice(max(0, k), n - max(0, -k)) for k, n in zip(o, mask.shape))
        out[dst] |= mask[src]
    return out


def minimum_bytes_per_exchange(dist: Any) -> int:
    """Halo cells of every rank that another rank owns and that the next `depth`
    steps of an owned point read, in bytes (one-statement stencils)."""
    stencil = dist.kernel.ir
    assert len(stencil.statements) == 1 and len(stencil.written_fields) == 1
    offsets = {a.offsets for a in stencil.statements[0].reads}
    total = 0
    for rank in range(dist.comm.size):
        start, count = dist.grid.block_of(rank)
        lo, hi = dist.grid.padding(dist.halo, dist.plan.edge, rank)
        owned = np.zeros([a + n + b for a, n, b in zip(lo, count, hi)], bool)
        owned[tuple(slice(a, a + n) for a, n in zip(lo, count))] = True
        read = owned
        for _ in range(dist.plan.depth):
            read = _dilate(read, offsets)
        inside = np.ones_like(read)  # the halo cells that lie in the global interior
        for d, (s, n, a, b, size) in enumerate(zip(start, count, lo, hi, dist.grid.interior)):
            g = np.arange(s - a, s + n + b)
            inside &= ((g >= 0) & (g < size)).reshape([-1 if e == d else 1 for e in range(read.ndim)])
        total += int(np.count_nonzero(read & inside & ~owned)) * np.dtype(stencil.dtype).itemsize
    return total


def worker(name: str, shape: tuple[int, ...], steps: int, depth: int) -> None:
    from mpi4py import MPI

    from msc.runtime.distributed import DistributedKernel

    comm = MPI.COMM_WORLD
    schedule = msc.Schedule().time_tile(depth, x=64) if depth > 1 else None
    kernel = STENCILS[name].compile(threads=1)
    fill = lambda i, j: np.sin(0.01 * i) * np.cos(0.02 * j)  # noqa: E731

    def step_ms(dist: DistributedKernel) -> float:
        """Milliseconds per step, the best of three runs (slowest rank)."""
        dist.run(steps=2, u=fill)  # warm-up
        best = float("inf")
        for _ in range(3):
            dist.run(steps=steps, u=fill)
            best = min(best, comm.allreduce(kernel.last_run.seconds, op=MPI.MAX))
        return 1e3 * best / steps

    overlap_ms = None
    if depth == 1:
        overlapped = DistributedKernel(kernel, comm, shape, overlap=True)
        overlap_ms = step_ms(overlapped)
        overlapped.close()
    dist = DistributedKernel(kernel, comm, shape, schedule=schedule, overlap=False)
    plain_ms = step_ms(dist)
    s = dist.last_run
    exchanges = comm.allreduce(s.exchanges, op=MPI.MAX)
    bytes_sent = comm.allreduce(s.bytes_sent)
    row = {
        "stencil": name, "ranks": comm.size, "dims": list(dist.dims), "shape": list(shape), "steps": steps,
        "depth": depth, "halo": list(dist.halo),
        "compute_ms_per_step": 1e3 * comm.allreduce(s.compute_seconds, op=MPI.MAX) / steps,
        "exchange_ms_per_step": 1e3 * comm.allreduce(s.exchange_seconds, op=MPI.MAX) / steps,
        "step_ms": plain_ms,
        "overlap_step_ms": overlap_ms,
        "exchanges_per_step": exchanges / steps,
        "bytes_per_step": bytes_sent // steps,
        "bytes_per_exchange": bytes_sent // exchanges if exchanges else 0,
        "minimum_bytes_per_exchange": minimum_bytes_per_exchange(dist),
    }
    minimum = row["minimum_bytes_per_exchange"]
    row["volume_over_minimum"] = row["bytes_per_exchange"] / minimum if minimum else 1.0
    if comm.rank == 0:
        print(json.dumps(row))
    dist.close()


def launch(ranks: int, name: str, shape: tuple[int, ...], steps: int, depth: int) -> dict[str, Any]:
    return run_worker(ranks, __file__, [name, "x".join(map(str, shape)), str(steps), str(depth)],
                      dict(os.environ, OMP_NUM_THREADS="1"))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], tuple(int(n) for n in sys.argv[3].split("x")), int(sys.argv[4]), int(sys.argv[5]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--ranks", default="1,2,3,4")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--depths", default="1,4", help="time-tile depths (1: step by step)")
    ap.add_argument("--quick", action="store_true", help="small problems (a smoke run)")
    a = ap.parse_args()
    side = 130 if a.quick else 2050
    rows = []
    for name in STENCILS:
        for ranks in (int(r) for r in a.ranks.split(",")):
            for problem, shape in (("fixed", (side, side)), ("growing", ((side - 2) * ranks + 2, side))):
                for depth in (int(d) for d in a.depths.split(",")):
                    row = dict(launch(ranks, name, shape, a.steps, depth), problem=problem)
                    rows.append(row)
                    overlap = row["overlap_step_ms"]
                    print(f"{name:8s} {problem:7s} P={ranks} dims={row['dims']} {row['shape']} D={depth}: "
                          f"{row['step_ms']:.2f} ms/step" + (f" ({overlap:.2f} overlapped)" if overlap else "") +
                          f" = compute {row['compute_ms_per_step']:.2f} + exchange {row['exchange_ms_per_step']:.2f}, "
                          f"{row['exchanges_per_step']:.2f} exchanges/step, {row['bytes_per_step']} B/step, "
                          f"{row['bytes_per_exchange']} B/exchange = {row['volume_over_minimum']:.3f} x minimum",
                          flush=True)
    result = {"cpu_count": os.cpu_count(), "threads_per_rank": 1,
              "note": "ranks beyond the core count are oversubscribed", "runs": rows}
    if a.json:
        a.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
