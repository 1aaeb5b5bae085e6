"""A 3D variable-coefficient Poisson problem, div(k grad u) = f, solved by
multigrid-preconditioned CG: the operator is applied matrix-free by compiled
stencils, the coarse operators are Galerkin products kept as coefficient
stencils (so the varying k coarsens exactly), the coarsest is factored by
swCholesky. The picture is the middle slice of u.

    python3 examples/pde/poisson3d_multigrid.py [--n 64] [--picture poisson3d_multigrid.png]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import msc
from msc import x, y, z
from msc.runtime.plot import draw


@msc.operator
def diffusion(u, k, h):
    """div(k grad u), k at the points, fluxes between neighbours weighted by the upwind point's k."""
    return (k[x + 1, y, z] * (u[x + 1, y, z] - u[x, y, z]) - k[x, y, z] * (u[x, y, z] - u[x - 1, y, z])
            + k[x, y + 1, z] * (u[x, y + 1, z] - u[x, y, z]) - k[x, y, z] * (u[x, y, z] - u[x, y - 1, z])
            + k[x, y, z + 1] * (u[x, y, z + 1] - u[x, y, z]) - k[x, y, z] * (u[x, y, z] - u[x, y, z - 1])) / h**2


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=64, help="interior points per side")
    p.add_argument("--picture", default="poisson3d_multigrid.png")
    a = p.parse_args(argv)
    n, h = a.n, 1.0 / (a.n + 1)
    X, Y, Z = np.meshgrid(*[np.linspace(0, 1, n + 2)] * 3, indexing="ij")
    k = 1 + 0.9 * np.sin(2 * np.pi * X) * np.sin(2 * np.pi * Y) * np.sin(2 * np.pi * Z)
    inner = (slice(1, -1),) * 3
    f = -np.exp(-40 * ((X - 0.5) ** 2 + (Y - 0.5) ** 2 + (Z - 0.5) ** 2))[inner]   # -div(k grad u) = source: a heat source in the middle
    u, info = msc.solve(diffusion, f, k=k, h=h, method="multigrid", tol=1e-8, full_output=True)
    A, g = diffusion.matrix(shape=u.shape, k=k, h=h, u=u)      # assembled here only to check the answer
    residual = float(np.linalg.norm(A @ u[inner].ravel() + g - f.ravel()) / np.linalg.norm(f))
    print(f"div(k grad u) = f, {n}^3 unknowns: {info.solver}, {info.iterations} iterations "
          f"(residual reduced {info.convergence_factor:.3f}x per iteration), levels {info.levels}, "
          f"setup {info.setup_s:.2f} s, solve {info.solve_s:.2f} s; checked residual {residual:.1e}")
    path = draw(a.picture, u[:, :, (n + 2) // 2], "div(k grad u) = f, middle slice (msc multigrid)", label="u")
    print(f"wrote {path}")
    return {"u": u, "iterations": info.iterations, "residual": residual, "solver": info.solver}


if __name__ == "__main__":
    main()
