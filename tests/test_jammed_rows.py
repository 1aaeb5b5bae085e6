"""Rows jammed into their line loop: `unroll(loop, k)` of the loop around a row
loop stored in whole lines runs k rows side by side, a line of each in turn
(msc/targets/cpu/x86_pass.py, `_jammed`). Against the reference on rows of
every alignment (so the rows' aligned lines start at different points), rows
shorter than a line, row counts that do not fill a group, streaming stores
with and without prefetching, several statements, float32 and time tiles;
and where a jam does not apply, the plain unroll."""

from __future__ import annotations

import numpy as np
import pytest

import msc
from msc import Schedule, t, x, y, z


@msc.stencil
def heat(u):
    u[t + 1, x, y] = 0.5 * u[t, x, y] + 0.125 * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1])


@msc.stencil
def box(u):
    u[t + 1, x, y] = sum(u[t, x + i, y + j] for i in (-1, 0, 1) for j in (-1, 0, 1)) / 9.5


@msc.stencil
def two(u, v):  # two statements, two levels: each statement's rows are jammed on their own
    v[t + 1, x, y] = 0.3 * (u[t, x - 1, y] + u[t, x, y + 2]) - 0.2 * u[t - 1, x, y]
    u[t + 1, x, y] = 0.5 * u[t, x, y] + 0.2 * (v[t + 1, x, y - 1] + v[t + 1, x, y + 1])


@msc.stencil
def wide(u):  # 81 reads: row pointers
    u[t + 1, x, y] = sum(u[t, x + i, y + j] for i in range(-4, 5) for j in range(-4, 5)) / 81.5


@msc.stencil
def heat3(u):
    u[t + 1, x, y, z] = 0.4 * u[t, x, y, z] + 0.1 * (u[t, x - 1, y, z] + u[t, x + 1, y, z] + u[t, x, y - 1, z]
                                                     + u[t, x, y + 1, z] + u[t, x, y, z - 1] + u[t, x, y, z + 1])


CASES = [
    (heat, Schedule().tile(x=4).unroll("x", 2).stream_stores(), (20, 37)),
    (heat, Schedule().tile(x=5).unroll("x", 2).stream_stores().prefetch(8), (21, 29)),
    (heat, Schedule().tile(x=3).unroll("x", 3), (19, 9)),  # rows of 7: point by point
    (heat, Schedule().tile(x=7).unroll("x", 4).stream_stores(), (40, 77)),
    (box, Schedule().tile(x=6).unroll("x", 4).stream_stores().prefetch(16), (31, 45)),
    (box, Schedule().tile(x=4).unroll("x", 2), (13, 6)),
    (two, Schedule().tile(x=4).unroll("x", 2).stream_stores(), (17, 41)),
    (heat, Schedule().time_tile(4, x=8).parallel("x_tile").unroll("x", 2), (26, 35)),
    (heat3, Schedule().tile(y=4).unroll("y", 2).stream_stores(), (9, 11, 27)),
]


@pytest.mark.parametrize("stencil, schedule, shape", CASES, ids=lambda v: str(v) if isinstance(v, Schedule) else None)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_jammed_rows_match_the_reference(stencil, schedule, shape, dtype, assert_matches):
    rng = np.random.default_rng(11)
    inputs = {f.name: rng.random(shape).astype(dtype) for f in stencil.ir.fields}
    kernel = stencil.compile(dtype=dtype, schedule=schedule, threads=2)
    factor = dict(schedule.unrolls)[schedule.unrolls[0][0]]
    row = "c4" if stencil.ir.ndim == 2 and not schedule.time_depth else None
    if row is not None:  # the rows' own iterators, and the group's step
        assert f"{row}_{factor - 1}" in kernel.source and f"c3 += {factor}" in kernel.source
    expected = stencil.reference(steps=7, dtype=dtype, **inputs)
    assert_matches(kernel.run(steps=7, **inputs), expected, dtype, schedule)
    sim = kernel.start(**inputs)
    sim.advance(3)
    sim.advance(4)
    assert_matches(sim.fields, expected, dtype, f"continued: {schedule}")


def test_rows_read_through_row_pointers_are_unrolled_as_before(assert_matches):
    """A large stencil (LARGE_READS) reads through row pointers declared around its row loop: the loop
    around it holds more than the row loop, so no jam; the compiler's unroll."""
    schedule = Schedule().tile(x=4).unroll("x", 2).stream_stores()
    kernel = wide.compile(schedule=schedule, threads=2)
    assert "#pragma GCC unroll 2" in kernel.source and "c4_1" not in kernel.source
    u0 = np.random.default_rng(2).random((15, 40))
    assert_matches(kernel.run(steps=3, u=u0), wide.reference(steps=3, u=u0), context=schedule)


def test_the_cpu_tuner_times_jammed_streamed_sweeps_in_2d_only():
    from msc.poly import PolyIR
    from msc.tune.tuner import candidates

    sweeps = candidates(PolyIR(heat.ir), (1026, 1026), "sweep", steps=32)
    jammed = [s for s in sweeps if s.unrolls]
    assert jammed and all(s.streaming and s.prefetch_distance for s in jammed)
    assert sweeps.index(jammed[0]) < min(sweeps.index(s) for s in sweeps if s.streaming and not s.unrolls)
    assert not any(s.unrolls for s in candidates(PolyIR(heat3.ir), (66, 66, 66), "sweep", steps=32))
