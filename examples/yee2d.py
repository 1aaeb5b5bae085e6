"""A staggered scheme: Maxwell's equations in 2D (TE mode) by Yee's FDTD
scheme. The electric fields are advanced from the magnetic field's new
level, read at neighbours (hz[t+1] at y-1 and x-1), in the same step.

    python3 examples/yee2d.py [n] [steps]        # default 256 x 256, 200 steps

The walls are perfect conductors: the fixed ring of the grid. The same
stencil compiled with target="cuda" streams through shared memory on a GPU
(docs/cuda.md, ADR 0069).
"""

from __future__ import annotations

import sys

import numpy as np

import msc
from msc import t, x, y


@msc.stencil
def yee(ex, ey, hz, c):
    hz[t + 1, x, y] = hz[t, x, y] - c * (ey[t, x + 1, y] - ey[t, x, y] - ex[t, x, y + 1] + ex[t, x, y])
    ex[t + 1, x, y] = ex[t, x, y] + c * (hz[t + 1, x, y] - hz[t + 1, x, y - 1])
    ey[t + 1, x, y] = ey[t, x, y] - c * (hz[t + 1, x, y] - hz[t + 1, x - 1, y])


def energy(fields: dict[str, np.ndarray]) -> float:
    """The discrete field energy: the sum of the squares of every field."""
    return float(sum(np.sum(fields[name] ** 2) for name in ("ex", "ey", "hz")))


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    grid = np.linspace(-1, 1, n)
    X, Y = np.meshgrid(grid, grid, indexing="ij")
    inputs = dict(ex=np.zeros((n, n)), ey=np.zeros((n, n)), hz=np.exp(-100 * (X**2 + Y**2)), c=0.5)
    kernel = yee.compile()
    out = kernel.run(steps=steps, **inputs)
    ref = yee.reference(steps=steps, **inputs)
    difference = max(float(np.max(np.abs(out[name] - ref[name]))) for name in ("ex", "ey", "hz"))
    print(f"yee: {steps} steps on {n}x{n}: max |hz| {np.max(np.abs(out['hz'])):.6f}, "
          f"energy {energy(inputs):.6f} at the start, {energy(out):.6f} at the end, "
          f"difference to the reference {difference:.1e}")


if __name__ == "__main__":
    main()
