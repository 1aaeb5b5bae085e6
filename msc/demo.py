"""`msc demo`: the main job on embedded defaults.

A 2D heat equation (explicit Euler, 5-point Laplacian) from a hot square in a
cold plate with fixed edges: traced, compiled to OpenMP C, run, checked
against the numpy reference, timed, and pictured as a PNG.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import msc
from msc import t, x, y
from msc.png import write_png


@msc.stencil
def heat2d(u, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * (
        u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y]
    )


def initial_plate(n: int) -> np.ndarray:
    """A cold plate with a hot square off-centre and a warm left edge."""
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
    path = write_png(picture, out)
    say(f"  wrote a picture of the final temperature to {path}")
    return DemoResult(err, stats.gstencils_per_second, stats.seconds, compile_seconds, path)
