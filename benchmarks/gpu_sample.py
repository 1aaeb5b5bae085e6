"""A sample of msc's CUDA kernels, each run once on a small grid and checked
against the reference interpreter: what benchmarks/gpu.sh runs under
compute-sanitizer (memcheck, racecheck) on a GPU. `--emulate` runs the same
under msc's CUDA emulator (a smoke test without a GPU).

    python3 benchmarks/gpu_sample.py [--emulate]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import msc
from msc import t, x, y


@msc.stencil
def heat(u, alpha):  # type: ignore[no-untyped-def]
    u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1]
                                            - 4 * u[t, x, y])


@msc.stencil
def box(u):  # type: ignore[no-untyped-def]
    u[t + 1, x, y] = sum(u[t, x + i, y + j] for i in (-1, 0, 1) for j in (-1, 0, 1)) / 9


@msc.stencil
def upwind(u):  # type: ignore[no-untyped-def]  # not a weighted sum: streamed tiles read rings of planes
    u[t + 1, x, y] = u[t, x, y] - 0.2 * msc.where(u[t, x, y] > 0.5, u[t, x, y] - u[t, x - 1, y], u[t, x, y + 1] - u[t, x, y])


SAMPLE = [  # streamed (partial sums, and rings), staged, streamed time tiles (64 KiB of dynamic shared memory),
    # tensor cores (one step; fused with time tiles: heat stores its accumulators straight into the next copy,
    # box through the warps' output tiles)
    (heat, msc.Schedule()),
    (upwind, msc.Schedule()),
    (upwind, msc.Schedule().time_tile(3)),
    (heat, msc.Schedule().tile(x=8, y=32).cache_read("u")),
    (heat, msc.Schedule().time_tile(4, x=8, y=32)),
    (heat, msc.Schedule().time_tile(8, x=64, y=496)),
    (box, msc.Schedule().tile(x=16, y=32)),
    (box, msc.Schedule().tensor_cores("fp64")),
    (heat, msc.Schedule().tensor_cores("fp64").time_tile(4)),
    (box, msc.Schedule().tensor_cores("fp64").time_tile(4)),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--emulate", action="store_true")
    a = ap.parse_args(argv)
    u0 = np.random.default_rng(0).random((70, 134))
    worst = 0.0
    for stencil, schedule in SAMPLE:
        inputs = {"u": u0, **({"alpha": 0.1} if stencil is heat else {})}
        kernel = stencil.compile(target="cuda", schedule=schedule, emulate=a.emulate)
        got = kernel.run(steps=8, **inputs)["u"]
        error = float(np.abs(got - stencil.reference(steps=8, **inputs)["u"]).max())
        worst = max(worst, error)
        print(f"{stencil.ir.name} {schedule}: max difference to the reference {error:.1e}", flush=True)
    return 0 if worst < 1e-12 else 1


if __name__ == "__main__":
    sys.exit(main())
