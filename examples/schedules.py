"""Schedules: spatial tiles, streaming sweeps, temporal tiles, and the auto-tuner.

    python3 examples/schedules.py [n] [steps]
"""

from __future__ import annotations

import sys

import numpy as np

import msc
from msc import Schedule, t, x, y


@msc.stencil
def smooth(u):
    u[t + 1, x, y] = 0.5 * u[t, x, y] + 0.125 * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1])


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    u0 = np.random.default_rng(0).random((n, n))
    ref = smooth.reference(steps=steps, u=u0)["u"]
    for schedule in [
        Schedule(),                                              # one sweep per step
        Schedule().tile(x=32, y=256).parallel("x_tile"),         # spatial tiles
        Schedule().stream_stores().prefetch(512),                # for fields larger than the caches
        Schedule().time_tile(8, x=32),                           # 8 steps per pass over a tile
        "auto",                                                  # tuned once, then cached
    ]:
        kernel = smooth.compile(schedule=schedule)
        out = kernel.run(steps=steps, u=u0)["u"]
        chosen = kernel.report.schedule if schedule == "auto" else schedule
        print(f"{str(chosen):50} {kernel.last_run.gstencils_per_second:6.2f} GStencil/s, "
              f"error {np.max(np.abs(out - ref)):.1e}")


if __name__ == "__main__":
    main()
