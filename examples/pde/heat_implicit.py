"""The 2D heat equation du/dt = alpha * laplace(u), stepped implicitly with
Crank-Nicolson: msc assembles I - dt/2 alpha A once, factors it once with
swCholesky, and every step is two triangular solves. With --solver multigrid
nothing is assembled: each step is a matrix-free CG solve preconditioned by
geometric multigrid, to a relative residual of 1e-10.

    python3 examples/pde/heat_implicit.py [--n 256] [--steps 50] [--solver direct|multigrid] [--picture heat_implicit.png]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import msc
from msc import x, y
from msc.runtime.plot import draw


@msc.operator
def diffusion(u, alpha, h):
    return alpha * (u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y]) / h**2


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=256, help="grid points per side, ring included")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--dt", type=float, default=2e-4)
    p.add_argument("--solver", choices=("direct", "multigrid"), default="direct")
    p.add_argument("--picture", default="heat_implicit.png")
    a = p.parse_args(argv)
    n, h = a.n, 1.0 / (a.n - 1)
    X, Y = np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n), indexing="ij")
    u0 = np.where((np.abs(X - 0.35) < 0.15) & (np.abs(Y - 0.5) < 0.25), 1.0, 0.0)
    u0[0, :] = 0.5                                          # a warm left edge, held fixed
    start = time.perf_counter()
    stepper = msc.implicit(diffusion, a.dt, "crank_nicolson", shape=u0.shape, alpha=1.0, h=h, solver=a.solver,
                           tol=1e-10)
    setup = time.perf_counter() - start
    start = time.perf_counter()
    u = stepper.run(steps=min(a.steps, 1), u=u0)["u"]   # the first step also builds what the solver runs
    first = time.perf_counter() - start
    start = time.perf_counter()
    u = stepper.run(steps=a.steps - 1, u=u)["u"] if a.steps > 1 else u
    run = time.perf_counter() - start
    cfl = a.dt / (h * h / 4)
    print(f"implicit heat, {n}x{n}, {a.steps} Crank-Nicolson steps of dt = {a.dt:g} ({cfl:.0f}x the explicit "
          f"limit): set up {stepper.solver} in {setup:.2f} s"
          + (f", first step {first * 1e3:.1f} ms" if a.steps else "")
          + (f", then {run / (a.steps - 1) * 1e3:.1f} ms per step" if a.steps > 1 else "")
          + (f", {np.mean(stepper.iterations):.1f} CG iterations per step" if stepper.iterations else ""))
    path = draw(a.picture, [u0, u], f"heat equation, Crank-Nicolson ({stepper.solver})",
                subtitles=["t = 0", f"t = {a.steps * a.dt:g}"], label="temperature")
    print(f"wrote {path}")
    return {"u0": u0, "u": u, "solver": stepper.solver, "cfl": cfl}


if __name__ == "__main__":
    main()
