"""A seeded generator of random stencils written as real Python source, traced
by msc exactly as a user's function would be (used by the differential tests)."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import msc

DIMS = ("x", "y", "z")


@dataclass(frozen=True)
class GeneratedCase:
    seed: int
    source: str
    stencil: msc.Stencil
    inputs: dict[str, Any]
    steps: int
    dtype: str

    def __str__(self) -> str:
        return f"seed {self.seed}, {self.dtype}:\n{self.source}"


def _offsets(rng: random.Random, ndim: int, radius: int, shape: str) -> list[tuple[int, ...]]:
    """Centre, the extreme points that set the radius, plus a random sample."""
    if shape == "star":
        pool = [tuple(o if d == k else 0 for d in range(ndim)) for k in range(ndim)
                for o in range(-radius, radius + 1) if o]
    else:
        pool = [p for p in itertools.product(range(-radius, radius + 1), repeat=ndim) if any(p)]
    extremes = [p for p in pool if max(abs(v) for v in p) == radius]
    chosen = {(0,) * ndim, rng.choice(extremes), rng.choice(extremes)}
    chosen.update(rng.sample(pool, min(len(pool), rng.randint(2, 8))))
    return sorted(chosen)


def _index(ndim: int, offs: tuple[int, ...]) -> str:
    return ", ".join(f"{DIMS[d]}{o:+d}" if o else DIMS[d] for d, o in enumerate(offs))


def generate(seed: int) -> GeneratedCase:
    rng = random.Random(seed)
    ndim = rng.randint(1, 3)
    radius = rng.randint(1, 4 if ndim < 3 else 2)
    shape = rng.choice(["star", "box"])
    levels = rng.randint(1, 3)
    nstmts = rng.randint(1, 3)
    boundary = rng.choice(["dirichlet", "periodic"])
    use_coeff = rng.random() < 0.4
    dtype = rng.choice(["float64", "float64", "float32"])
    written = [f"f{k}" for k in range(nstmts)]
    params = written + (["c"] if use_coeff else []) + ["a"]
    body = []
    for k, target in enumerate(written):
        terms = []
        for src in written:
            lookback = range(0, -levels, -1) if src == target or rng.random() < 0.5 else [0]
            for dt in lookback:
                for offs in _offsets(rng, ndim, radius, shape) if rng.random() < 0.7 or src == target else [(0,) * ndim]:
                    terms.append((src, f"t{dt:+d}" if dt else "t", offs))
            if written.index(src) < k and rng.random() < 0.7:  # read what an earlier statement wrote
                terms.append((src, "t+1", rng.choice(_offsets(rng, ndim, radius, shape))))
        weights = [rng.uniform(-1, 1) for _ in terms]
        scale = 0.9 / sum(abs(w) for w in weights)
        expr = " + ".join(f"{w * scale!r} * {src}[{lvl}, {_index(ndim, offs)}]"
                          for w, (src, lvl, offs) in zip(weights, terms))
        if use_coeff and rng.random() < 0.7:
            expr = f"({expr}) * (1 - 0.1 * c[{_index(ndim, (0,) * ndim)}])"
        if rng.random() < 0.3:
            expr = f"msc.where({target}[t, {_index(ndim, (0,) * ndim)}] > 0.5, {expr}, a * {target}[t, {_index(ndim, (0,) * ndim)}])"
        elif rng.random() < 0.3:
            expr = f"{expr} + a * msc.sin({target}[t, {_index(ndim, (0,) * ndim)}])"
        else:
            expr = f"{expr} + 0.05 * a"
        body.append(f"    {target}[t+1, {_index(ndim, (0,) * ndim)}] = {expr}")
    decorator = "@msc.stencil" + ("(boundary='periodic')" if boundary == "periodic" else "")
    source = f"{decorator}\ndef gen{seed}({', '.join(params)}):\n" + "\n".join(body) + "\n"
    namespace: dict[str, Any] = {"msc": msc, "t": msc.t, "x": msc.x, "y": msc.y, "z": msc.z}
    exec(compile(source, f"<generated stencil {seed}>", "exec"), namespace)
    stencil = namespace[f"gen{seed}"]

    r = stencil.ir.radius
    extent = {1: (30, 45), 2: (9, 17), 3: (5, 9)}[ndim]
    shp = tuple(rng.randint(*extent) + (0 if boundary == "periodic" else 2 * r[d]) for d in range(ndim))
    nrng = np.random.default_rng(seed)
    inputs: dict[str, Any] = {p: rng.uniform(0.1, 0.9) for p in stencil.ir.params}
    for f in stencil.ir.fields:
        if f.window > 1 and rng.random() < 0.5:
            inputs[f.name] = [nrng.random(shp).astype(dtype) for _ in range(f.window)]
        else:
            inputs[f.name] = nrng.random(shp).astype(dtype)
    return GeneratedCase(seed, source, stencil, inputs, rng.randint(1, 5), dtype)


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
