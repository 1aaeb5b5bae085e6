"""A periodic Poisson problem, lap(u) = f on the unit torus: the pressure
equation of an incompressible flow. It is singular (u is defined only up to
a constant), so msc.solve is told so with nullspace="constant": the rhs's
mean is removed (a rhs of nonzero mean beyond the tolerance gets a warning:
the problem then has no solution) and the solution of zero mean comes back.
The manufactured solution u = sin(2 pi x) cos(4 pi y) checks the answer to
the scheme's second order. The picture is u.

    python3 examples/pde/periodic_poisson.py [--n 256] [--method multigrid] [--picture periodic_poisson.png]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import msc
from msc import x, y
from msc.runtime.plot import draw


@msc.operator(boundary="periodic")
def laplacian(u, h):
    return (u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y]) / h**2


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=256, help="points per side (even, for multigrid)")
    p.add_argument("--method", default="auto", choices=("auto", "direct", "multigrid"))
    p.add_argument("--picture", default="periodic_poisson.png")
    a = p.parse_args(argv)
    n, h = a.n, 1.0 / a.n
    X, Y = np.meshgrid(np.arange(n) * h, np.arange(n) * h, indexing="ij")
    exact = np.sin(2 * np.pi * X) * np.cos(4 * np.pi * Y)  # of zero mean
    f = -20 * np.pi**2 * exact  # lap(exact); its mean is zero to rounding
    u, info = msc.solve(laplacian, f, h=h, method=a.method, nullspace="constant", tol=1e-10, full_output=True)
    residual = float(np.linalg.norm(laplacian.apply(u=u, h=h)["u"] - (f - info.rhs_mean_removed)) / np.linalg.norm(f))
    error = float(np.abs(u - exact).max())
    print(f"periodic lap(u) = f, {n}^2 points: {info.solver}, {info.iterations} iterations, rhs mean "
          f"{info.rhs_mean_removed:.1e} removed, mean of u {u.mean():.1e}; residual {residual:.1e}, "
          f"max error against the exact solution {error:.2e} ({error / h**2:.1f} h^2: second order)")
    path = draw(a.picture, u, "periodic lap(u) = f, the solution of zero mean (msc)", label="u")
    print(f"wrote {path}")
    return {"u": u, "solver": info.solver, "residual": residual, "error": error, "mean": float(u.mean()),
            "rhs_mean_removed": info.rhs_mean_removed}


if __name__ == "__main__":
    main()
