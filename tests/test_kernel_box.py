"""The kernels' box entry point (msc_run_box) computes exactly the requested box,
and the split of a block into an inner box and rim boxes that distributed
runs overlap with halo exchange covers the domain once."""

from __future__ import annotations

import numpy as np
import pytest

import msc
from msc import t, x, y, z
from msc.ir.arguments import bind_arguments
from msc.poly import PolyIR
from msc.poly.schedule import Schedule
from msc.runtime.buffers import pack
from msc.runtime.distributed import split_block
from msc.targets.cpu.openmp import OpenMPTarget


@msc.stencil
def heat(u, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y])


@msc.stencil
def two_stage(u, v):  # the second statement reads the first's new level at its own point only
    v[t + 1, x, y] = 0.3 * (u[t, x - 2, y] + u[t, x + 1, y + 2]) - 0.2 * u[t - 1, x, y]
    u[t + 1, x, y] = 0.5 * u[t, x, y] + 0.4 * v[t + 1, x, y]


@msc.stencil
def box3d(u):
    u[t + 1, x, y, z] = sum(u[t, x + i, y + j, z + k] for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)) / 27.5


CASES = [
    (heat, None, (4, 3), (13, 9)),
    (heat, Schedule().tile(x=5, y=4).cache_read("u").cache_write("u"), (3, 6), (12, 15)),
    (two_stage, Schedule().tile(x=4, y=8).compute_at("x_tile"), (5, 2), (9, 17)),
    (two_stage, Schedule().time_tile(2, x=4), (2, 4), (15, 11)),
    (box3d, None, (2, 3, 1), (7, 5, 8)),
    (heat, Schedule().stream_stores().prefetch(8), (4, 1), (13, 18)),
    (box3d, Schedule().tile(y=2).stream_stores(), (1, 2, 1), (8, 5, 9)),
]


@pytest.mark.parametrize("stencil, schedule, lo, hi", CASES, ids=lambda v: str(v) if isinstance(v, Schedule) else None)
def test_box_entry_computes_exactly_the_box(stencil, schedule, lo, hi):
    shape = (17, 19) if stencil.ir.ndim == 2 else (9, 7, 10)
    rng = np.random.default_rng(3)
    inputs = {f.name: rng.random(shape) for f in stencil.ir.fields} | {p: 0.1 for p in stencil.ir.params}
    args = bind_arguments(stencil.ir, 1, inputs)
    before = pack(stencil.ir, args)
    kernel = OpenMPTarget().compile(PolyIR(stencil.ir), schedule=schedule, box=True)

    whole = pack(stencil.ir, args)  # the buffers' own layout: the kernel finds ring slots at their stride
    kernel.advance(kernel.arguments(whole, args.scalars, shape), 0, 1, 1)
    part = pack(stencil.ir, args)
    kernel.advance_box(kernel.arguments(part, args.scalars, shape), lo, hi, 0, 1, 1)

    inside = np.zeros(shape, dtype=bool)
    inside[tuple(slice(a, b) for a, b in zip(lo, hi))] = True
    for f in stencil.ir.written_fields:
        new = whole[f.name][1 % f.slots]
        assert not np.array_equal(new[inside], before[f.name][1 % f.slots][inside])  # the kernel wrote the box
        assert not np.array_equal(new[~inside], before[f.name][1 % f.slots][~inside])  # and more around it
        expected = before[f.name].copy()
        expected[1 % f.slots][inside] = new[inside]
        assert np.array_equal(part[f.name], expected), f.name


def test_split_block_covers_the_domain_once():
    shape, radius = (12, 9, 7), (2, 1, 0)
    near = ((2, 0, 0), (2, 1, 0))  # no neighbour below in y, none in z
    split = split_block(shape, radius, near)
    assert split is not None
    inner, rims = split
    assert inner == ((4, 1, 0), (8, 7, 7))
    assert len(rims) == 3  # two in x, one (above) in y
    count = np.zeros(shape, dtype=int)
    for a, b in [inner, *rims]:
        count[tuple(slice(i, j) for i, j in zip(a, b))] += 1
    domain = tuple(slice(r, n - r) for r, n in zip(radius, shape))
    assert (count[domain] == 1).all() and count.sum() == count[domain].sum()
    assert split_block((6, 9), (2, 1), ((2, 1), (2, 1))) is None  # halos meet: no inner point
    assert split_block((7, 9), (1, 1), ((0, 0), (0, 0))) == (((1, 1), (6, 8)), [])
