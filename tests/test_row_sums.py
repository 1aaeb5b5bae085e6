"""Row sums (msc/codegen/row_sums.py) against the reference interpreter:
generated stencils that read their own field over a whole box with weights
by distance class (2D and 3D, radius 1-2, one to three levels and statements,
inputs, non-linear terms, both boundaries and dtypes) under the default and
random schedules; rows longer than a strip; continued runs; and the
statements the pass must leave alone."""

from __future__ import annotations

import numpy as np
import pytest
from stencil_gen import generate

import msc
from msc import Schedule, t, x, y, z
from msc.codegen.row_sums import BUFFER, ROW_STRIP

SEEDS = range(16)


def case(seed: int):
    return generate(seed, ndim=2 if seed % 4 == 3 else 3, classes=2 if seed % 8 == 0 else 1)


def test_the_cases_are_summed_by_rows():
    """The seeds below really exercise the pass: most 3D ones are summed by rows, with one to three levels."""
    summed = []
    for seed in SEEDS:
        c = case(seed)
        source = c.stencil.compile(target="openmp", dtype=c.dtype, threads=2).source
        if BUFFER in source:
            summed.append(c)
    assert len(summed) >= 5
    assert {c.stencil.ir.boundary for c in summed} == {"dirichlet", "periodic"}
    assert {c.dtype for c in summed} == {"float64", "float32"}
    assert {max(f.window for f in c.stencil.ir.fields) for c in summed} >= {1, 2}
    assert max(len(c.stencil.ir.statements[0].reads) for c in summed) >= 125  # radius 2: rows through row pointers


@pytest.mark.parametrize("seed", SEEDS)
def test_summed_rows_match_reference(seed, assert_matches):
    c = case(seed)
    expected = c.stencil.reference(steps=c.steps, dtype=c.dtype, **c.inputs)
    kernel = c.stencil.compile(target="openmp", dtype=c.dtype, threads=2)
    assert_matches(kernel.run(steps=c.steps, **c.inputs), expected, c.dtype, c)
    sim = kernel.start(**c.inputs)
    sim.advance(c.split)
    sim.advance(c.steps - c.split)
    assert_matches(sim.fields, expected, c.dtype, f"continued after {c.split} steps: {c}")


# every primitive that keeps a private row loop, and some that do not (the pass then stays out)
SCHEDULES = [
    Schedule().tile(y=2, z=16),
    Schedule().time_tile(2, x=3, y=2),
    Schedule().time_tile(3, x=4).parallel("x_tile"),
    Schedule().tile(x=2, y=3).reorder("x_tile", "y_tile", "x", "y", "z"),
    Schedule().tile(x=3, y=2, z=8).cache_read("f0").cache_write("f0"),
    Schedule().tile(y=2).compute_at("y_tile"),
    Schedule().stream_stores().prefetch(8),
    Schedule().unroll("z", 2),
    Schedule().parallel("y").with_threads(1),
]


@pytest.mark.parametrize("seed", SEEDS)
def test_summed_rows_under_schedules_match_reference(seed, assert_matches):
    c = case(seed)
    schedule = SCHEDULES[seed % len(SCHEDULES)]
    if c.stencil.ir.ndim == 2:
        schedule = Schedule().tile(y=16).stream_stores() if seed % 2 else Schedule().time_tile(2, x=3)
    if c.stencil.ir.boundary == "periodic" and (schedule.time_depth or schedule.fuse_at):  # wraps run between steps
        schedule = Schedule().tile(x=2, z=8)
    expected = c.stencil.reference(steps=c.steps, dtype=c.dtype, **c.inputs)
    kernel = c.stencil.compile(target="openmp", dtype=c.dtype, threads=2, schedule=schedule)
    assert_matches(kernel.run(steps=c.steps, **c.inputs), expected, c.dtype, f"{schedule}: {c}")


@msc.stencil
def box27(u, a):
    """box3d27p's weights by class, with a parameter in one of them and an asymmetric row read."""
    w = (0.125, 0.0625 * a, 0.03125, 0.015625)
    u[t + 1, x, y, z] = sum(w[abs(i) + abs(j) + abs(k)] * u[t, x + i, y + j, z + k]
                            for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)) - 0.01 * u[t, x, y, z + 2]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("schedule", [None, Schedule().tile(y=2).stream_stores().prefetch(16),
                                      Schedule().time_tile(3, x=2, y=3)], ids=str)
def test_rows_longer_than_a_strip(schedule, dtype, assert_matches):
    """Rows of one, two and three strips (and a strip's last points), one-shot and continued."""
    kernel = box27.compile(target="openmp", dtype=dtype, threads=2, schedule=schedule)
    assert BUFFER in kernel.source
    rng = np.random.default_rng(7)
    for n in (ROW_STRIP - 3, ROW_STRIP + 4, 2 * ROW_STRIP + 7):
        u = rng.random((5, 6, n)).astype(dtype)
        expected = box27.reference(steps=5, dtype=dtype, u=u, a=0.9)
        assert_matches(kernel.run(steps=5, u=u, a=0.9), expected, dtype, n)
        sim = kernel.start(u=u, a=0.9)
        sim.advance(2)
        sim.advance(3)
        assert_matches(sim.fields, expected, dtype, f"continued, {n}")


@msc.stencil
def heat3d(u):
    u[t + 1, x, y, z] = 0.25 * u[t, x, y, z] + 0.125 * (u[t, x - 1, y, z] + u[t, x + 1, y, z] + u[t, x, y - 1, z]
                                                        + u[t, x, y + 1, z] + u[t, x, y, z - 1] + u[t, x, y, z + 1])


@msc.stencil
def variable_box(u, k):
    u[t + 1, x, y, z] = k[x, y, z] * sum(u[t, x + i, y + j, z + l] for i in (-1, 0, 1) for j in (-1, 0, 1)
                                         for l in (-1, 0, 1)) / 27.0


@msc.stencil
def box9(u):
    u[t + 1, x, y] = 0.25 * u[t, x, y] + 0.125 * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1]) \
        + 0.0625 * (u[t, x - 1, y - 1] + u[t, x + 1, y - 1] + u[t, x - 1, y + 1] + u[t, x + 1, y + 1])


@pytest.mark.parametrize("stencil", [heat3d, variable_box, box9], ids=lambda s: s.ir.name)
def test_statements_the_pass_leaves_alone(stencil, assert_matches):
    """A star (no rows alike), a coefficient field (weights vary by point), and a 2D box (one
    sum for 9 reads, 8 accesses of 9: measured slower when memory-bound) stay as written."""
    kernel = stencil.compile(target="openmp", threads=2)
    assert BUFFER not in kernel.source
    rng = np.random.default_rng(1)
    shape = (6, 7, 40) if stencil.ir.ndim == 3 else (9, 40)
    inputs = {f.name: rng.random(shape) for f in stencil.ir.fields}
    assert_matches(kernel.run(steps=3, **inputs), stencil.reference(steps=3, **inputs))


def test_a_2d_box_is_summed_inside_time_tiles(assert_matches):
    """Inside a time tile, whose levels stay in cache, any saving pays: box9's 9 reads become 3 rows
    summed once and read at 3 shifts (7 accesses of 9), where a sweep leaves it as written."""
    kernel = box9.compile(target="openmp", threads=2, schedule=Schedule().time_tile(3, x=4))
    assert BUFFER in kernel.source
    u = np.random.default_rng(2).random((13, 40))
    expected = box9.reference(steps=7, u=u)
    assert_matches(kernel.run(steps=7, u=u), expected)
    sim = kernel.start(u=u)
    sim.advance(4)
    sim.advance(3)
    assert_matches(sim.fields, expected, context="continued after 4 steps")


@msc.stencil
def separable_box(u):
    """A box whose rows' weights along z are one pattern, [1, 2, 1], times 1, 1/2 or 1/4 (separable)."""
    a = (1.0, 0.5)
    u[t + 1, x, y, z] = sum(0.125 * a[abs(i)] * a[abs(j)] * a[abs(k)] * u[t, x + i, y + j, z + k]
                            for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1))


@msc.stencil
def nearly_separable_box(u):
    """The centre row's weights are 3 times the others', which floating point does not keep exactly
    (0.1 * 3 != 0.3): 0.3 / 0.1 times 0.3 is not 0.9."""
    u[t + 1, x, y, z] = sum((0.3 if not (i or j) else 0.1) * (3.0 if k == 0 else 1.0) * u[t, x + i, y + j, z + k]
                            for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_rows_in_one_proportion_share_one_sum(dtype, assert_matches):
    """Rows whose weights are a factor times another row's at every shift are summed, each weighed by
    its factor, into one buffer; a proportion that is not exact in floating point is not used."""
    from msc.codegen.row_sums import _grouping

    def rows_summed(stencil):
        statement = stencil.ir.statements[0]
        return [len(group.rows) for group in _grouping(statement.expr, {"u"}, in_cache=False).groups]

    assert rows_summed(separable_box) == [9]  # one sum of every row
    assert rows_summed(nearly_separable_box) == [8]  # the centre row weighed directly
    rng = np.random.default_rng(5)
    for stencil in (separable_box, nearly_separable_box):
        kernel = stencil.compile(target="openmp", dtype=dtype, threads=2)
        assert f"{BUFFER}0" in kernel.source and f"{BUFFER}1" not in kernel.source
        u = rng.random((6, 7, ROW_STRIP + 9)).astype(dtype)
        assert_matches(kernel.run(steps=4, u=u), stencil.reference(steps=4, dtype=dtype, u=u), dtype,
                       stencil.ir.name)
