"""Two time levels and two coupled statements: the 2D acoustic wave equation
in velocity-pressure form, with a time-invariant sound-speed field.

    python3 examples/wave_coupled.py [n] [steps]
"""

from __future__ import annotations

import sys

import numpy as np

import msc
from msc import t, x, y


@msc.stencil
def wave(p, q, c, dt2):
    # q holds the Laplacian of the current pressure; p is advanced with two past levels
    q[t + 1, x, y] = p[t, x - 1, y] + p[t, x + 1, y] + p[t, x, y - 1] + p[t, x, y + 1] - 4 * p[t, x, y]
    p[t + 1, x, y] = 2 * p[t, x, y] - p[t - 1, x, y] + dt2 * c[x, y] ** 2 * q[t + 1, x, y]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    grid = np.linspace(-1, 1, n)
    X, Y = np.meshgrid(grid, grid, indexing="ij")
    p0 = np.exp(-200 * (X**2 + Y**2))              # a pressure pulse at rest:
    inputs = dict(p=[p0, p0], q=np.zeros_like(p0),  # two equal levels (t-1, t), oldest first
                  c=np.where(X > 0.3, 0.5, 1.0), dt2=0.2)
    out = wave.compile().run(steps=steps, **inputs)
    ref = wave.reference(steps=steps, **inputs)
    print(f"wave: max |p| {np.max(np.abs(out['p'])):.3f}, difference to the reference "
          f"{np.max(np.abs(out['p'] - ref['p'])):.1e}")


if __name__ == "__main__":
    main()
