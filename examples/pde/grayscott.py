"""Gray-Scott reaction-diffusion, two coupled fields on a periodic domain,
written once as an operator (a dict {u: ..., v: ...}) and stepped explicitly:
msc.explicit turns it into an ordinary stencil compiled to OpenMP C.
The reaction term u*v^2 is non-linear, so the same operator has no matrix.

    python3 examples/pde/grayscott.py [--n 256] [--steps 5000] [--picture grayscott.png]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import msc
from msc import x, y
from msc.runtime.plot import draw


@msc.operator(boundary="periodic")
def gray_scott(u, v, du, dv, feed, kill):
    def laplacian(f):
        return f[x - 1, y] + f[x + 1, y] + f[x, y - 1] + f[x, y + 1] - 4 * f[x, y]

    reaction = u[x, y] * v[x, y] * v[x, y]
    return {u: du * laplacian(u) - reaction + feed * (1 - u[x, y]),
            v: dv * laplacian(v) + reaction - (feed + kill) * v[x, y]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--picture", default="grayscott.png")
    a = p.parse_args(argv)
    n = a.n
    rng = np.random.default_rng(3)
    u0, v0 = np.ones((n, n)), np.zeros((n, n))
    c = slice(n // 2 - n // 10, n // 2 + n // 10)
    u0[c, c], v0[c, c] = 0.5, 0.25
    u0 += 0.02 * rng.random((n, n))
    params = {"du": 0.16, "dv": 0.08, "feed": 0.035, "kill": 0.065}
    kernel = msc.explicit(gray_scott, 1.0, "euler").compile(target="openmp")
    out = kernel.run(steps=a.steps, u=u0, v=v0, **params)
    print(f"Gray-Scott {n}x{n}, {a.steps} explicit steps: v in [{out['v'].min():.3f}, {out['v'].max():.3f}]"
          f", {kernel.last_run.gstencils_per_second:.2f} GStencil/s")
    path = draw(a.picture, out["v"], f"Gray-Scott, v after {a.steps} steps (msc.explicit, OpenMP)",
                label="v", extent=(0, n, 0, n))
    print(f"wrote {path}")
    return {"u": out["u"], "v": out["v"], "u0": u0, "v0": v0, "params": params}


if __name__ == "__main__":
    main()
