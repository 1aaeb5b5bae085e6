"""Poisson's equation -laplace(u) = 1 on an L-shaped domain, u = 0 on its edge,
from one operator: msc assembles the matrix and solves it with swCholesky.

The L shape is a mask m (1 inside, 0 in the cut-out quadrant). Neighbours are
weighted by m[here] * m[there], so the matrix stays symmetric (negative
definite: msc.solve flips its sign and uses swCholesky), inside points see
u = 0 across the re-entrant edge, and cut-out points solve -4u = 0.

    python3 examples/pde/poisson_lshape.py [--n 200] [--picture poisson_lshape.png]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import msc
from msc import x, y
from msc.runtime.plot import draw


@msc.operator
def masked_laplacian(u, m, h):
    near = m[x - 1, y] * u[x - 1, y] + m[x + 1, y] * u[x + 1, y] + m[x, y - 1] * u[x, y - 1] + m[x, y + 1] * u[x, y + 1]
    return (m[x, y] * near - 4 * u[x, y]) / h**2


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200, help="grid points per side, ring included")
    p.add_argument("--picture", default="poisson_lshape.png")
    a = p.parse_args(argv)
    n, h = a.n, 1.0 / (a.n - 1)
    X, Y = np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n), indexing="ij")
    cut = (X > 0.5) & (Y > 0.5)                              # the cut-out upper-right quadrant
    m = np.where(cut, 0.0, 1.0)
    m[[0, -1], :] = 0.0
    m[:, [0, -1]] = 0.0
    rhs = -m[1:-1, 1:-1]                                     # laplace(u) = -1 inside, 0 in the cut-out
    u, info = msc.solve(masked_laplacian, rhs, m=m, h=h, u=np.zeros((n, n)), full_output=True)
    A, g = masked_laplacian.matrix(shape=u.shape, m=m, h=h, u=u)
    residual = float(np.abs(A @ u[1:-1, 1:-1].ravel() + g - rhs.ravel()).max())
    print(f"L-shaped Poisson, {n}x{n}: solved with {info['solver']} "
          f"(assembly {info['assembly_s']:.2f} s, factor {info['factor_s']:.2f} s, solve {info['solve_s']:.3f} s); "
          f"max u = {u.max():.4f}, residual {residual:.1e}")
    path = draw(a.picture, np.where(cut, np.nan, u), "-laplace(u) = 1 on an L-shaped domain (msc.solve)", label="u")
    print(f"wrote {path}")
    return {"max_u": float(u.max()), "residual": residual, "outside": float(np.abs(u[cut]).max()),
            "solver": info["solver"]}


if __name__ == "__main__":
    main()
