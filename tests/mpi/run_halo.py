"""Under mpiexec: the halo library on its own, 1D-3D, periodic or not, faces
only (star) or with edges and corners (box), padded less on a physical edge
than toward a neighbour, split-phase with work between start and finish.
Rank 0 prints one JSON dict: wrong cells and bytes per case."""

from __future__ import annotations

import itertools
import json

import numpy as np
from mpi4py import MPI

from msc.runtime.halo import Grid, HaloExchanger

comm = MPI.COMM_WORLD
report = {}
for ndim, periodic, shape in itertools.product((1, 2, 3), (False, True), ("star", "box")):
    interior, halo, edge = (11, 7, 6)[:ndim], (2, 1, 2)[:ndim], (1, 0, 1)[:ndim]
    grid = Grid(comm, interior, periodic)
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
    report[f"{ndim}d-{'periodic' if periodic else 'dirichlet'}-{shape}"] = {
        "wrong": comm.allreduce(wrong), "bytes": comm.allreduce(exchanger.bytes_sent)}
    exchanger.close()
    grid.close()
if comm.rank == 0:
    print(json.dumps(report))
