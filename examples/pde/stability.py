"""Explicit against implicit time steps for the heat equation, past the
explicit stability limit: explicit Euler (an ordinary compiled msc stencil
made by msc.explicit) blows up when dt exceeds h^2/4, backward Euler
(msc.implicit, swCholesky) stays bounded, from the same operator.

    python3 examples/pde/stability.py [--n 64] [--steps 60] [--factor 1.5] [--picture stability.png]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import msc
from msc import x, y
from msc.runtime.plot import draw


@msc.operator
def laplacian(u, h):
    return (u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y]) / h**2


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=64, help="grid points per side, ring included")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--factor", type=float, default=1.5, help="dt as a multiple of the explicit limit h^2/4")
    p.add_argument("--picture", default="stability.png")
    a = p.parse_args(argv)
    n, h = a.n, 1.0 / (a.n - 1)
    dt = a.factor * h * h / 4
    rng = np.random.default_rng(0)
    u0 = np.zeros((n, n))
    u0[1:-1, 1:-1] = rng.random((n - 2, n - 2))            # rough data excites every mode
    explicit = msc.explicit(laplacian, dt, "euler").compile(target="openmp")
    u_explicit = explicit.run(steps=a.steps, u=u0, h=h)["u"]
    u_implicit = msc.implicit(laplacian, dt, "backward_euler", shape=u0.shape, h=h).run(steps=a.steps, u=u0)["u"]
    big_e, big_i = float(np.abs(u_explicit).max()), float(np.abs(u_implicit).max())
    print(f"dt = {a.factor:g} x h^2/4, {a.steps} steps from data bounded by 1: "
          f"explicit Euler max |u| = {big_e:.3g}, backward Euler max |u| = {big_i:.3g}")
    path = draw(a.picture, [u_explicit, u_implicit], f"heat equation, dt = {a.factor:g} x the explicit limit",
                subtitles=[f"explicit Euler: max |u| = {big_e:.2g}", f"backward Euler: max |u| = {big_i:.2g}"],
                label="u")
    print(f"wrote {path}")
    return {"explicit_max": big_e, "implicit_max": big_i}


if __name__ == "__main__":
    main()
