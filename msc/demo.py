"""`msc demo`: the main job on embedded defaults, in two parts.

heat: a 2D heat equation (explicit Euler, 5-point Laplacian) from a hot
square in a cold plate with fixed edges: traced, compiled to OpenMP C, run,
checked against the numpy reference, timed, and pictured.

pde: a Poisson problem -div(k grad u) = f with a variable coefficient, from
one operator definition: assembled as a sparse matrix, solved with
swCholesky through msc.solve, checked by its residual, and pictured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import msc
from msc import t, x, y
from msc.runtime.plot import draw


@msc.stencil
def heat2d(u, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * (
        u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y]
    )


def initial_plate(n: int) -> np.ndarray:
    """A cold plate with a hot square off-centre and a warm edge at y = 0 (u[:, 0]: the
    bottom of the picture, where x runs left to right and y upwards)."""
    u = np.zeros((n, n))
    q = n // 4
    u[q : 2 * q, q : 2 * q] = 1.0
    u[:, 0] = 0.5
    return u


@dataclass
class DemoResult:
    max_error: float
    gstencils: float
    seconds: float
    compile_seconds: float
    picture: Path


def run_demo(size: int = 512, steps: int = 2000, alpha: float = 0.2, threads: int | None = None,
             picture: str | Path = "msc_demo_heat2d.png", echo: bool = True) -> DemoResult:
    say = print if echo else (lambda *_: None)
    u0 = initial_plate(size)
    say(f"msc {msc.__version__} demo: 2D heat equation, {size}x{size} grid, {steps} steps, alpha={alpha}")
    start = time.perf_counter()
    kernel = heat2d.compile(target="openmp", threads=threads)
    compile_seconds = time.perf_counter() - start
    say(f"  compiled to OpenMP C in {compile_seconds:.2f} s")
    out = kernel.run(steps=steps, u=u0, alpha=alpha)["u"]
    stats = kernel.last_run
    say(f"  ran {steps} steps in {stats.seconds * 1e3:.1f} ms: {stats.gstencils_per_second:.2f} GStencil/s")
    say("  checking against the numpy reference interpreter ...")
    ref = heat2d.reference(steps=steps, u=u0, alpha=alpha)["u"]
    err = float(np.max(np.abs(out - ref)) / max(np.max(np.abs(ref)), 1e-300))
    verdict = "OK" if err < 1e-12 else "MISMATCH"
    say(f"  max relative difference to the reference: {err:.2e} ({verdict})")
    path = draw(picture, out, f"2D heat equation after {steps} steps (msc, OpenMP)", label="temperature")
    say(f"  wrote a picture of the final temperature to {path}")
    return DemoResult(err, stats.gstencils_per_second, stats.seconds, compile_seconds, path)


@msc.operator
def diffusion(u, k, h):
    """div(k grad u) with k averaged onto the cell faces."""
    east, west = (k[x, y] + k[x + 1, y]) / 2, (k[x, y] + k[x - 1, y]) / 2
    north, south = (k[x, y] + k[x, y + 1]) / 2, (k[x, y] + k[x, y - 1]) / 2
    return (east * (u[x + 1, y] - u[x, y]) - west * (u[x, y] - u[x - 1, y])
            + north * (u[x, y + 1] - u[x, y]) - south * (u[x, y] - u[x, y - 1])) / h**2


@dataclass
class PdeDemoResult:
    relative_residual: float
    solver: str
    seconds: float
    picture: Path


def run_pde_demo(size: int = 256, picture: str | Path = "msc_demo_poisson.png", echo: bool = True) -> PdeDemoResult:
    say = print if echo else (lambda *_: None)
    h = 1.0 / (size - 1)
    X, Y = np.meshgrid(np.linspace(0, 1, size), np.linspace(0, 1, size), indexing="ij")
    k = np.where((X - 0.6) ** 2 + (Y - 0.4) ** 2 < 0.05, 20.0, 1.0)   # a conducting disc
    source = 300 * np.exp(-200 * ((X - 0.25) ** 2 + (Y - 0.7) ** 2))     # a heat source
    ring = np.zeros((size, size))
    ring[:, 0] = 1.0                                                      # one warm edge
    say(f"msc demo, part 2: Poisson problem -div(k grad u) = f, {size}x{size} grid, variable k")
    start = time.perf_counter()
    u, info = msc.solve(diffusion, -source[1:-1, 1:-1], k=k, h=h, u=ring, method="direct", full_output=True)
    seconds = time.perf_counter() - start
    A, g = diffusion.matrix(shape=u.shape, k=k, h=h, u=ring)
    residual = A @ u[1:-1, 1:-1].ravel() + g + source[1:-1, 1:-1].ravel()
    scale = abs(A).sum(axis=1).max() * np.abs(u).max() + np.abs(g).max() + np.abs(source).max()
    rel = float(np.abs(residual).max() / scale)  # the normwise backward error
    solver = info["solver"]
    verdict = "OK" if rel < 1e-8 else "MISMATCH"
    say(f"  assembled {A.shape[0]} unknowns ({A.nnz} non-zeros) and solved with {solver} in {seconds:.2f} s")
    say(f"  residual |L(u) - f| relative to |A| |u| + |g| + |f|: {rel:.2e} ({verdict})")
    path = draw(picture, u, "Poisson: -div(k grad u) = f (msc.solve, swCholesky)", label="u")
    say(f"  wrote a picture of the solution to {path}")
    return PdeDemoResult(rel, solver, seconds, path)
