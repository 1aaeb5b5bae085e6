"""Under mpiexec: step-by-step runs that overlap each exchange with the next
phase's inner box, against the single-process kernel (bitwise) and against
the same runs without overlap. Rank 0 prints one JSON dict: per case, whether
the results agree, and on how many ranks the block split into inner and rim."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from mpi_common import box9_periodic as box9
from mpi_common import comm, heat

import msc
from msc import t, x, y, z
from msc.runtime.distributed import DistributedKernel

results: dict[str, Any] = {}


@msc.stencil
def star3d(u, c):  # radius 2 in x, two time levels
    u[t + 1, x, y, z] = (2 * u[t, x, y, z] - u[t - 1, x, y, z]
                         + c[x, y, z] * (u[t, x - 2, y, z] + u[t, x + 2, y, z] + u[t, x, y - 1, z] + u[t, x, y + 1, z]
                                         + u[t, x, y, z - 1] + u[t, x, y, z + 1] - 6 * u[t, x, y, z]))


@msc.stencil(boundary="periodic")
def box3d(u):
    u[t + 1, x, y, z] = sum(u[t, x + i, y + j, z + k] for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)) / 27.5


@msc.stencil
def three_phases(p, q, r, k):  # each statement reads the previous one's new level at an offset
    p[t + 1, x, y] = 0.5 * p[t, x, y] + 0.1 * (r[t, x + 1, y] - r[t, x - 1, y + 1])
    q[t + 1, x, y] = 0.5 * q[t, x, y] + k * (p[t + 1, x, y + 1] - p[t + 1, x - 1, y - 1])
    r[t + 1, x, y] = 0.5 * r[t, x, y] + k * (q[t + 1, x + 1, y] + q[t + 1, x, y - 1]) - 0.1 * p[t + 1, x, y]


def compare(name: str, stencil: msc.Stencil, steps: int, shape: tuple[int, ...], **scalars: float) -> None:
    """Every rank makes the same global inputs and runs its block with and without overlap."""
    rng = np.random.default_rng(7)
    inputs: dict[str, Any] = {f.name: [rng.random(shape) for _ in range(f.window)] if f.window > 1 else rng.random(shape)
                              for f in stencil.ir.fields}
    kernel = stencil.compile(threads=1)
    serial = kernel.run(steps=steps, **inputs, **scalars)
    agree, split = True, False
    for overlap in (True, False):
        dist = DistributedKernel(kernel, comm, shape, overlap=overlap)
        where = dist.coordinates()
        local = {n: [v[where] for v in value] if isinstance(value, list) else value[where] for n, value in inputs.items()}
        mine = dist.run(steps=steps, **local, **scalars)
        agree &= all(np.array_equal(mine[n], serial[n][dist.interior]) for n in serial)
        split |= overlap and dist._split is not None and len(dist._split[1]) > 0
        dist.close()
    results[name] = {"bitwise": all(comm.allgather(agree)), "split_ranks": sum(comm.allgather(split))}


compare("heat_star_2d", heat, 6, (23, 18), alpha=0.1)
compare("box9_periodic_2d", box9, 5, (19, 14))
compare("star3d_two_levels", star3d, 4, (16, 11, 9))
compare("box3d_periodic", box3d, 3, (9, 10, 8))
compare("three_phases_2d", three_phases, 5, (17, 21), k=0.3)
if comm.rank == 0:
    print(json.dumps(results))
