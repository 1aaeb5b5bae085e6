"""Under mpiexec: the halo library on its own, 1D-3D, periodic or not, faces
only (star) or with edges and corners (box), padded less on a physical edge
than toward a neighbour, split-phase with work between start and finish, on the
even split and on given block bounds (the even split's sizes in reverse order).
Rank 0 prints one JSON dict: wrong cells and bytes per case, and the errors of bad bounds."""

from __future__ import annotations

import itertools
import json

import numpy as np
from mpi4py import MPI

from msc.runtime.halo import DistributedError, Grid, HaloExchanger, block

comm = MPI.COMM_WORLD
report = {}


def reversed_bounds(interior: tuple[int, ...], dims: tuple[int, ...]) -> list[list[int]]:
    """Blocks of the even split's sizes, the larger ones last (the even split puts them first)."""
    sizes = [[block(n, p, c)[1] for c in reversed(range(p))] for n, p in zip(interior, dims)]
    return [[0, *itertools.accumulate(s)] for s in sizes]


for ndim, periodic, shape, split in itertools.product((1, 2, 3), (False, True), ("star", "box"), ("even", "given")):
    interior, halo, edge = (11, 7, 6)[:ndim], (2, 1, 2)[:ndim], (1, 0, 1)[:ndim]
    grid = Grid(comm, interior, periodic)
    if split == "given":
        dims = grid.dims
        grid.close()
        grid = Grid(comm, interior, periodic, dims, reversed_bounds(interior, dims))
        assert grid.block_of(comm.rank) == (grid.start, grid.count)
    lo, hi = grid.padding(halo, edge)
    if shape == "star":
        dirs = [v for v in itertools.product((-1, 0, 1), repeat=ndim) if sum(map(abs, v)) == 1]
    else:
        dirs = [v for v in itertools.product((-1, 0, 1), repeat=ndim) if any(v)]
    exchanger = HaloExchanger(grid, halo, 8, dirs, edge)
    values = np.arange(np.prod(interior), dtype=float).reshape(interior) + 1
    index = [np.arange(s - a, s + n + b) for s, n, a, b in zip(grid.start, grid.count, lo, hi)]
    if periodic:
        expected = values[np.ix_(*[i % n for i, n in zip(index, interior)])]
    else:
        expected = np.pad(values, [(h, h) for h in halo], constant_values=-1)[np.ix_(*[i + h for i, h in zip(index, halo)])]
    if shape == "star":  # edges and corners are not sent: they keep their old value
        in_halo = sum(((np.arange(p) < a) | (np.arange(p) >= a + n)).astype(int).reshape([-1 if e == d else 1 for e in range(ndim)])
                      for d, (p, a, n) in enumerate(zip(exchanger.shape, lo, grid.count)))
        expected[np.broadcast_to(in_halo > 1, expected.shape)] = -1
    local = np.full(exchanger.shape, -1.0)
    inner = tuple(slice(a, a + n) for a, n in zip(lo, grid.count))
    local[inner] = values[tuple(slice(s, s + n) for s, n in zip(grid.start, grid.count))]
    exchanger.start(local)
    work = float(np.sum(local[inner]))  # interior work while the messages travel
    exchanger.finish()
    wrong = int(np.count_nonzero(local != expected)) + (work != float(np.sum(local[inner])))
    report[f"{ndim}d-{'periodic' if periodic else 'dirichlet'}-{shape}-{split}"] = {
        "wrong": comm.allreduce(wrong), "bytes": comm.allreduce(exchanger.bytes_sent)}
    exchanger.close()
    grid.close()
errors = {}
p = comm.size
bad = {"short": [list(range(p)) + [10]], "count": [list(range(p + 1)) + [11]]}
if p > 1:
    bad["empty"] = [[0] * p + [11]]
for name, bounds in bad.items():
    try:
        Grid(comm, (11,), False, (p,), bounds)
    except DistributedError as err:
        errors[name] = str(err)
report["errors"] = errors
if comm.rank == 0:
    print(json.dumps(report))
