"""A seeded generator of random stencils written as real Python source, traced
by msc exactly as a user's function would be (used by the differential tests).

Each statement is a weighted average of reads (so fields stay of order one
over many steps, neither growing nor fading) plus small terms that between them use every
operator and function of the language. Every term is bounded (its operands
are clipped to [-1, 1] with minimum/maximum where it matters) and continuous
across the branches of its `where`, so float32 rounding near a comparison's
threshold cannot flip a result by more than rounding. The last dimension is
wide enough that the kernels' whole-cache-line store path runs for float32
(16 points a line) as well as float64.
"""

from __future__ import annotations

import itertools
import random
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import msc
from msc.errors import StencilDefinitionWarning

DIMS = ("x", "y", "z")

# Each term reads {v} and {w} (field reads) and {q} (a read clipped to [-1, 1]).
TERMS: dict[str, str] = {
    "/": "{q} / (2.0 + {q})",
    "**2": "{q} ** 2",
    "**3": "{q} ** 3",
    "**0": "{q} ** 0",
    "**0.5": "(1.0 + {q}) ** 0.5",
    "**-1": "(2.0 + {q}) ** -1",
    "**1.5": "(1.0 + {q}) ** 1.5",
    "sqrt": "msc.sqrt(1.0 + {q})",
    "exp": "msc.exp({q})",
    "log": "msc.log(1.5 + {q})",
    "sin": "msc.sin({v})",
    "cos": "msc.cos({v})",
    "abs": "msc.abs({q} - 0.25)",
    "minimum": "msc.minimum({v}, {w})",
    "maximum": "msc.maximum({v}, {w})",
    "<": "msc.where({v} < {w}, {v}, {w})",
    "<=": "msc.where({v} <= {w}, {w}, {v})",
    ">": "msc.where({v} > {w}, {v} - {w}, 0.0)",
    ">=": "msc.where({v} >= {w}, 0.0, {w} - {v})",
    "==": "msc.where(msc.minimum({v}, 0.5) == 0.5, {v} - 0.5, 0.0)",
    "!=": "msc.where(msc.maximum({v}, 0.5) != 0.5, {v} - 0.5, 0.0)",
    "&": "msc.where(({v} > 0.3) & ({w} > 0.3), ({q} - 0.3) * ({w} - 0.3), 0.0)",
    "|": "msc.where(({v} < 0.3) | ({w} < 0.3), 0.0, ({q} - 0.3) * ({w} - 0.3))",
    "~": "msc.where(~({v} > 0.3), 0.0, {v} - 0.3)",
    "-": "-{v} - {w}",
}


@dataclass(frozen=True)
class GeneratedCase:
    seed: int
    source: str
    stencil: msc.Stencil
    inputs: dict[str, Any]
    steps: int
    dtype: str
    split: int  # a continued run advances `split` steps, then `steps - split`
    terms: tuple[str, ...]  # the TERMS keys the statements use

    def __str__(self) -> str:
        return f"seed {self.seed}, {self.dtype}, {self.steps} steps:\n{self.source}"


def _offsets(rng: random.Random, ndim: int, radius: int, shape: str) -> list[tuple[int, ...]]:
    """Centre, the extreme points that set the radius (for a box, a corner
    with every component nonzero too), plus a random sample."""
    if shape == "star":
        pool = [tuple(o if d == k else 0 for d in range(ndim)) for k in range(ndim)
                for o in range(-radius, radius + 1) if o]
    else:
        pool = [p for p in itertools.product(range(-radius, radius + 1), repeat=ndim) if any(p)]
    extremes = [p for p in pool if max(abs(v) for v in p) == radius]
    chosen = {(0,) * ndim, rng.choice(extremes), rng.choice(extremes)}
    if shape == "box":
        chosen.add(tuple(rng.choice([-1, 1]) * rng.randint(1, radius) for _ in range(ndim)))
    chosen.update(rng.sample(pool, min(len(pool), rng.randint(2, 6))))
    return sorted(chosen)


def _index(ndim: int, offs: tuple[int, ...]) -> str:
    return ", ".join(f"{DIMS[d]}{o:+d}" if o else DIMS[d] for d, o in enumerate(offs))


def generate(seed: int, *, ndim: int | None = None, boundary: str | None = None, shape: str | None = None,
             dtype: str | None = None, coeff: bool | None = None, classes: int = 0) -> GeneratedCase:
    """The case of `seed`; keywords fix a choice the seed would otherwise make.
    `classes` > 0: each statement reads its own field at every offset of the
    box of that radius, weighed by the offset's class (the absolute leading
    offsets, sorted, and the last one), as a box stencil with weights by
    distance is (what msc/codegen/row_sums.py sums by rows)."""
    rng = random.Random(seed)
    ndim = ndim or rng.randint(1, 3)
    radius = rng.randint(1, 4)
    shape = shape or rng.choice(["star", "box"])
    levels = rng.randint(1, 3)
    nstmts = rng.randint(1, 3)
    boundary = boundary or rng.choice(["dirichlet", "periodic"])
    use_coeff = rng.random() < 0.4 if coeff is None else coeff
    dtype = dtype or rng.choice(["float64", "float64", "float32"])
    written = [f"f{k}" for k in range(nstmts)]
    params = written + (["c"] if use_coeff else []) + ["a"]
    names = list(TERMS)
    used: list[str] = []
    body = []
    for k, target in enumerate(written):
        terms = []
        for src in written:
            lookback = range(0, -levels, -1) if src == target or rng.random() < 0.5 else [0]
            for dt in lookback:
                offsets = _offsets(rng, ndim, radius, shape) if rng.random() < 0.7 or src == target else [(0,) * ndim]
                if classes and src == target:
                    offsets = list(itertools.product(range(-classes, classes + 1), repeat=ndim))
                for offs in offsets:
                    terms.append((src, f"t{dt:+d}" if dt else "t", offs))
            if written.index(src) < k and rng.random() < 0.7:  # read what an earlier statement wrote
                terms.append((src, "t+1", rng.choice(_offsets(rng, ndim, radius, shape))))
        if classes:
            by_class: dict[tuple[Any, ...], float] = {}
            weights = [by_class.setdefault((src, lvl, tuple(sorted(map(abs, offs[:-1]))), offs[-1]),
                                           rng.uniform(0.05, 1)) for src, lvl, offs in terms]
        else:
            weights = [rng.uniform(0.05, 1) for _ in terms]
        scale = 1 / sum(weights)  # an average: the reads' range bounds it
        reads = [f"{src}[{lvl}, {_index(ndim, offs)}]" for src, lvl, offs in terms]
        expr = " + ".join(f"{w * scale!r} * {r}" for w, r in zip(weights, reads))
        if use_coeff:
            reads.append(f"c[{_index(ndim, rng.choice(_offsets(rng, ndim, radius, shape)))}]")
            if rng.random() < 0.7:
                expr = f"({expr}) * (1 - 0.1 * c[{_index(ndim, (0,) * ndim)}])"
        # the seed's own term first, so that any len(TERMS) consecutive seeds use every term
        chosen = [names[seed % len(names)]] if k == 0 else []
        chosen += rng.sample(names, rng.randint(1, 2))
        for name in chosen:
            v, w, q = rng.choice(reads), rng.choice(reads), rng.choice(reads)
            term = TERMS[name].format(v=v, w=w, q=f"msc.minimum(msc.maximum({q}, -1.0), 1.0)")
            expr += f" {rng.choice('+-')} {rng.uniform(0.01, 0.05):.3f} * ({term})"
            used.append(name)
        # 1e-05 prints in C without a decimal point (c_literal's exponent form)
        expr += " + 0.05 * a + 1e-05" if rng.random() < 0.5 else " - 0.02 / a"
        body.append(f"    {target}[t+1, {_index(ndim, (0,) * ndim)}] = {expr}")
    decorator = "@msc.stencil" + ("(boundary='periodic')" if boundary == "periodic" else "")
    source = f"{decorator}\ndef gen{seed}({', '.join(params)}):\n" + "\n".join(body) + "\n"
    namespace: dict[str, Any] = {"msc": msc, "t": msc.t, "x": msc.x, "y": msc.y, "z": msc.z}
    with warnings.catch_warnings():  # `c` may be declared and read by no statement: it stays a parameter
        warnings.simplefilter("ignore", StencilDefinitionWarning)
        exec(compile(source, f"<generated stencil {seed}>", "exec"), namespace)
    stencil = namespace[f"gen{seed}"]

    r = stencil.ir.radius
    # leading extents split over 2-4 MPI ranks (tests/mpi) mostly leave blocks as thick as the radius
    low = [rng.randint(*{2: (8, 14), 3: (6, 10)}[ndim]) for d in range(ndim - 1)]
    extents = [*low, rng.randint(33, 48)]
    shp = tuple(n + (0 if boundary == "periodic" else 2 * r[d]) for d, n in enumerate(extents))
    nrng = np.random.default_rng(seed)
    inputs: dict[str, Any] = {p: rng.uniform(0.1, 0.9) for p in stencil.ir.params}
    for f in stencil.ir.fields:
        if f.window > 1 and rng.random() < 0.5:
            inputs[f.name] = [nrng.random(shp).astype(dtype) for _ in range(f.window)]
        else:
            inputs[f.name] = nrng.random(shp).astype(dtype)
    steps = rng.randint(10, 16)
    return GeneratedCase(seed, source, stencil, inputs, steps, dtype, rng.randint(1, steps - 1), tuple(used))


def program_arguments(inputs: dict[str, Any], directory: Path) -> list[str]:
    """Command-line arguments that give an emitted program these inputs:
    --param for scalars, --in with .npy files saved in `directory` for fields."""
    args: list[str] = []
    for name, value in inputs.items():
        if isinstance(value, float):
            args += ["--param", f"{name}={value!r}"]
            continue
        files = []
        for k, arr in enumerate(value if isinstance(value, list) else [value]):
            np.save(directory / f"{name}{k}.npy", arr)
            files.append(str(directory / f"{name}{k}.npy"))
        args += ["--in", f"{name}={','.join(files)}"]
    return args
