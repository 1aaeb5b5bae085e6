"""div(k grad u) = f in 3D over MPI ranks, the scalable way: every rank fills only its own block of k
and f (from functions of the coordinates) and gets only its own block of u back. Multigrid runs every
level it can in blocks on the ranks, agglomerates the coarse ones onto fewer ranks, and solves the
coarsest on rank 0; no rank ever holds the whole grid, not even for the setup.

    mpiexec -n 4 python3 examples/pde/poisson3d_mpi.py [--n 128]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from mpi4py import MPI

import msc
from msc import x, y, z
from msc.pde.distributed import owned_block


@msc.operator
def diffusion(u, k, h):
    """div(k grad u), k at the points, fluxes between neighbours weighted by the upwind point's k."""
    return (k[x + 1, y, z] * (u[x + 1, y, z] - u[x, y, z]) - k[x, y, z] * (u[x, y, z] - u[x - 1, y, z])
            + k[x, y + 1, z] * (u[x, y + 1, z] - u[x, y, z]) - k[x, y, z] * (u[x, y, z] - u[x, y - 1, z])
            + k[x, y, z + 1] * (u[x, y, z + 1] - u[x, y, z]) - k[x, y, z] * (u[x, y, z] - u[x, y, z - 1])) / h**2


def coefficient(X: np.ndarray, Y: np.ndarray, Z: np.ndarray) -> np.ndarray:
    return 1 + 0.9 * np.sin(2 * np.pi * X) * np.sin(2 * np.pi * Y) * np.sin(2 * np.pi * Z)


def source(X: np.ndarray, Y: np.ndarray, Z: np.ndarray) -> np.ndarray:
    return -np.exp(-40 * ((X - 0.5) ** 2 + (Y - 0.5) ** 2 + (Z - 0.5) ** 2))  # a heat source in the middle


def coordinates(rows: tuple[slice, ...], h: float) -> list[np.ndarray]:
    """The coordinates of array rows (array index i lies at i h; the ring is rows 0 and n + 1)."""
    return np.meshgrid(*[np.arange(s.start, s.stop) * h for s in rows], indexing="ij")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=128, help="interior points per side")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    n, h = a.n, 1.0 / (a.n + 1)
    shape = (n + 2,) * 3                                    # the global array, its ring included
    mine = owned_block(diffusion, comm, shape)              # this rank's block of the interior (interior indices)
    rows = tuple(slice(s.start + 1, s.stop + 1) for s in mine)          # ... as array rows
    ringed = tuple(slice(s.start - 1, s.stop + 1) for s in rows)       # ... padded by the radius, 1
    k = coefficient(*coordinates(ringed, h))
    f = source(*coordinates(rows, h))
    u, info = msc.solve(diffusion, f, k=k, h=h, comm=comm, shape=shape, blocks=True, method="multigrid",
                        tol=1e-8, full_output=True)
    total = comm.allreduce(float(u.sum()))
    lowest = comm.allreduce(float(u.min()), op=MPI.MIN)
    if comm.rank == 0:
        print(f"div(k grad u) = f, {n}^3 unknowns on {comm.size} ranks: {info.solver}, {info.iterations} "
              f"iterations, relative residual {info.residuals[-1]:.2e} (checked on b - A u)")
        print(f"levels {info.levels}, held by {info.ranks_per_level} ranks; setup {info.setup_s:.2f} s, "
              f"solve {info.solve_s:.2f} s")
        print(f"sum of u = {total!r}, lowest u = {lowest!r}")
    return {"u": u, "block": mine, "total": total, "lowest": lowest, "info": info}


if __name__ == "__main__":
    main()
