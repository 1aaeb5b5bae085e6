"""A 2D heat equation: the reference, the compiled kernel, and standalone sources.

    python3 examples/heat2d.py [n] [steps]        # default 512 x 512, 200 steps
"""

from __future__ import annotations

import sys

import numpy as np

import msc
from msc import t, x, y


@msc.stencil
def heat(u, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * (
        u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y]
    )


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    u0 = np.zeros((n + 2, n + 2))  # the interior plus a fixed ring of width 1
    u0[n // 3 : n // 2, n // 3 : n // 2] = 1.0
    kernel = heat.compile(target="openmp")
    out = kernel.run(steps=steps, u=u0, alpha=0.2)["u"]
    ref = heat.reference(steps=steps, u=u0, alpha=0.2)["u"]
    print(f"{steps} steps on {n}x{n}: {kernel.last_run.gstencils_per_second:.2f} GStencil/s, "
          f"max difference to the reference {np.max(np.abs(out - ref)):.1e}")
    directory = heat.emit("openmp", "build/heat2d")
    print(f"standalone sources in {directory}; build them with: make -C {directory}")


if __name__ == "__main__":
    main()
