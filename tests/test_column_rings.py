"""Column sums kept in rings (msc/codegen/row_sums.py, `_Group.ring`): separable
boxes whose row sums are made from column sums along y, each made once per
row and kept for the rows after it. Against the reference interpreter:
radius 1 and 2 (row pointers), offsets along y not centred, two levels with
a non-linear term, a statement reading another's new level, both boundaries
and dtypes, rows of several strips; under sweeps, short y tiles, a tiled z,
fused statements, plain and pipelined time tiles, streaming stores, 1-3
threads, continued runs and the box entry point. Where the ring must not be used (y shared
among threads, unrolled or not around the row loop, weights that are no
exact product, 2D) the source says so."""

from __future__ import annotations

import numpy as np
import pytest

import msc
from msc import Schedule, t, x, y, z
from msc.codegen.row_sums import BUFFER, RING, ROW_STRIP

A = (0.25, 0.5, 0.25)  # exact in binary: every product of weights is exact too


@msc.stencil
def box1(u):
    """box3d27p's weights, [1, 2, 1] / 4 along each axis."""
    u[t + 1, x, y, z] = sum(A[i + 1] * A[j + 1] * A[k + 1] * u[t, x + i, y + j, z + k]
                            for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1))


B = {-2: 0.5, -1: 1.0, 0: 0.25, 1: 2.0}  # along y: four offsets, not centred
C = {-1: 1.0, 0: 0.5, 1: 2.0, 2: 0.25}  # along z


@msc.stencil
def off_centre(u):
    """Offsets -2..1 along y and -1..2 along z, weights of no symmetry (a ring of four slots)."""
    u[t + 1, x, y, z] = sum(0.125 * A[i + 1] * B[j] * C[k] * u[t, x + i, y + j, z + k]
                            for i in (-1, 0, 1) for j in B for k in C)


@msc.stencil
def two_levels(u):
    """Two levels, each a separable box of its own weights, and a term outside the linear form."""
    u[t + 1, x, y, z] = sum(A[i + 1] * A[j + 1] * A[k + 1] * (0.75 * u[t, x + i, y + j, z + k]
                                                              + 0.25 * B[j - 1] * u[t - 1, x + i, y + j, z + k])
                            for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)) \
        - 0.1 * u[t, x, y, z] * u[t, x, y, z]


@msc.stencil
def chained(u, v):
    """The second statement's box reads the first's new level (the statements fused under compute_at)."""
    v[t + 1, x, y, z] = 0.5 * u[t, x, y, z] + 0.25 * u[t, x, y + 1, z]
    u[t + 1, x, y, z] = sum(A[i + 1] * A[j + 1] * A[k + 1] * v[t + 1, x + i, y + j, z + k]
                            for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1))


R2 = (0.0625, 0.25, 0.375, 0.25, 0.0625)


@msc.stencil
def box2(u):
    """Radius 2: 25 rows summed from 5 columns at 5 offsets."""
    u[t + 1, x, y, z] = sum(R2[i + 2] * R2[j + 2] * R2[k + 2] * u[t, x + i, y + j, z + k]
                            for i in range(-2, 3) for j in range(-2, 3) for k in range(-2, 3))


@msc.stencil
def box2_and_a_row(u):
    """box2 and one row of its own weight, read through its row pointer beside the ring."""
    u[t + 1, x, y, z] = sum(R2[i + 2] * R2[j + 2] * R2[k + 2] * u[t, x + i, y + j, z + k]
                            for i in range(-2, 3) for j in range(-2, 3) for k in range(-2, 3)) \
        + 0.01 * u[t, x + 3, y - 1, z]


@msc.stencil(boundary="periodic")
def box1_periodic(u):
    u[t + 1, x, y, z] = sum(A[i + 1] * A[j + 1] * A[k + 1] * u[t, x + i, y + j, z + k]
                            for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1))


STENCILS = [box1, off_centre, two_levels, chained, box2, box2_and_a_row]
RINGED = [
    None,
    Schedule().tile(y=3),
    Schedule().tile(x=2, y=5, z=8),
    Schedule().tile(y=4).stream_stores().prefetch(16),
    Schedule().time_tile(3, x=4, y=3),
    Schedule().time_tile(4, x=3, y=5).pipeline(),
]


def _inputs(stencil: msc.Stencil, shape: tuple[int, ...], dtype: str, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f.name: rng.random(shape).astype(dtype) for f in stencil.ir.fields}


@pytest.mark.parametrize("schedule", RINGED, ids=str)
@pytest.mark.parametrize("stencil", STENCILS, ids=lambda s: s.ir.name)
def test_rings_match_reference(stencil, schedule, assert_matches):
    """Each stencil under each schedule that keeps a ring, float64 (float32 below), 2 threads, one
    shape whose y extent no tile divides; the ring is in the source."""
    kernel = stencil.compile(target="openmp", threads=2, schedule=schedule)
    assert f"{RING}0" in kernel.source, schedule
    inputs = _inputs(stencil, (9, 13, 21), "float64")
    steps = 7
    assert_matches(kernel.run(steps=steps, **inputs), stencil.reference(steps=steps, **inputs), context=schedule)


@pytest.mark.parametrize("schedule", [Schedule().tile(y=2).compute_at("y_tile"),
                                      Schedule().tile(x=3, y=4).compute_at("x_tile")], ids=str)
def test_rings_of_fused_statements(schedule, assert_matches):
    kernel = chained.compile(target="openmp", threads=2, schedule=schedule)
    assert f"{RING}0" in kernel.source
    inputs = _inputs(chained, (9, 13, 21), "float64", seed=2)
    assert_matches(kernel.run(steps=5, **inputs), chained.reference(steps=5, **inputs), context=schedule)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("threads", [1, 3])
def test_rows_of_several_strips(dtype, threads, assert_matches):
    """Rows of one, two and three strips (each strip fills its own ring), one-shot and continued."""
    kernel = box1.compile(target="openmp", dtype=dtype, threads=threads, schedule=Schedule().tile(y=4))
    for n in (ROW_STRIP - 3, ROW_STRIP + 4, 2 * ROW_STRIP + 7):
        u = np.random.default_rng(n).random((5, 7, n)).astype(dtype)
        expected = box1.reference(steps=5, dtype=dtype, u=u)
        assert_matches(kernel.run(steps=5, u=u), expected, dtype, n)
        sim = kernel.start(u=u)
        sim.advance(2)
        sim.advance(3)
        assert_matches(sim.fields, expected, dtype, f"continued, {n}")


@pytest.mark.parametrize("stencil", [off_centre, two_levels], ids=lambda s: s.ir.name)
def test_float32_and_continued_runs(stencil, assert_matches):
    kernel = stencil.compile(target="openmp", dtype="float32", threads=2,
                             schedule=Schedule().time_tile(4, x=3, y=5).pipeline())
    inputs = _inputs(stencil, (8, 14, 19), "float32", seed=3)
    expected = stencil.reference(steps=9, dtype="float32", **inputs)
    sim = kernel.start(**inputs)
    sim.advance(5)
    sim.advance(4)
    assert_matches(sim.fields, expected, "float32", stencil.ir.name)


def test_periodic_boundary(assert_matches):
    kernel = box1_periodic.compile(target="openmp", threads=2, schedule=Schedule().tile(y=3))
    assert f"{RING}0" in kernel.source
    u = np.random.default_rng(4).random((6, 8, 11))
    assert_matches(kernel.run(steps=4, u=u), box1_periodic.reference(steps=4, u=u))


@msc.stencil
def nearly_product(u):
    """Rows weighed alike along z, but the centre column's factor is not the others' product."""
    u[t + 1, x, y, z] = sum((0.5 if i == j == 0 else A[i + 1] * A[j + 1]) * A[k + 1] * u[t, x + i, y + j, z + k]
                            for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1))


@msc.stencil
def box9(u):
    u[t + 1, x, y] = sum(A[i + 1] * A[j + 1] * u[t, x + i, y + j] for i in (-1, 0, 1) for j in (-1, 0, 1))


@pytest.mark.parametrize("stencil, schedule", [
    (box1, Schedule().parallel("y")),  # y shared among threads: its iterations run apart
    (box1, Schedule().tile(y=4).unroll("y", 2)),  # y unrolled: its rows run side by side
    (box1, Schedule().reorder("y", "x", "z")),  # the loop around the rows runs along x
    (nearly_product, None),  # the rows' factors are no product of a column's and an offset's
    (box9, Schedule().time_tile(3, x=4)),  # 2D: the rows are the columns, nothing to keep
], ids=["parallel-y", "unrolled-y", "x-around-rows", "no-product", "2d"])
def test_where_no_ring_is_kept(stencil, schedule, assert_matches):
    """Row sums without a ring, and results still the reference's."""
    kernel = stencil.compile(target="openmp", threads=2, schedule=schedule)
    assert BUFFER in kernel.source and RING not in kernel.source
    shape = (9, 12, 17) if stencil.ir.ndim == 3 else (11, 17)
    inputs = _inputs(stencil, shape, "float64", seed=5)
    assert_matches(kernel.run(steps=4, **inputs), stencil.reference(steps=4, **inputs), context=schedule)


def test_ring_loads():
    """box3d27p's sum per point reads 3 rows into the ring and 3 slots of it (9 rows without it)."""
    source = box1.compile(target="openmp", threads=2).source
    body = source[source.index(f"real {RING}0"):]
    assert body.count("f_u_t0[") == 3 + 2 * 3  # the new column's 3 rows, and the ring's first two columns
    assert body.count(f"{RING}0[") == 1 + 2 + 1 + 3  # declared, its first two slots filled, one stored, 3 read


def test_row_pointers_the_ring_leaves():
    """A large stencil (row pointers) keeps the pointer of the row it reads directly, no other."""
    source = box2_and_a_row.compile(target="openmp", threads=2).source
    assert source.count("const real *restrict msc_row") == 1 and f"{RING}0" in source


@pytest.mark.parametrize("schedule", [None, Schedule().tile(y=3), Schedule().time_tile(4, x=2, y=3).pipeline()],
                         ids=str)
def test_the_box_entry_point_keeps_rings(schedule):
    """The distributed runs' inner and rim boxes: the rings start where the box's rows do."""
    from msc.ir.arguments import bind_arguments
    from msc.poly import PolyIR
    from msc.runtime.buffers import pack
    from msc.targets.cpu.openmp import OpenMPTarget

    shape, lo, hi = (12, 11, 14), (3, 2, 1), (10, 9, 13)
    args = bind_arguments(box1.ir, 1, {"u": np.random.default_rng(6).random(shape)})
    kernel = OpenMPTarget().compile(PolyIR(box1.ir), schedule=schedule, box=True, threads=2)
    assert f"{RING}0" in kernel.source
    whole, part = pack(box1.ir, args), pack(box1.ir, args)
    kernel.advance(kernel.arguments(whole, args.scalars, shape), 0, 1, 2)
    kernel.advance_box(kernel.arguments(part, args.scalars, shape), lo, hi, 0, 1, 2)
    inside = tuple(slice(a, b) for a, b in zip(lo, hi))
    assert np.array_equal(part["u"][1][inside], whole["u"][1][inside])


def test_prefetch_reaches_the_rows_the_rings_read(assert_matches):
    """The points of a ringed row read only stack buffers; prefetch(d) still fetches the rows the ring
    reads from memory (the statement's leading access, d points ahead), once per line."""
    kernel = box1.compile(target="openmp", threads=2, schedule=Schedule().stream_stores().prefetch(64))
    assert kernel.source.count("__builtin_prefetch(&f_u_t0[((c2 + 1) * P1 + c3 + 1) * P2 + msc_base + 1 + 64])") == 1
    u = np.random.default_rng(8).random((7, 9, 40))
    assert_matches(kernel.run(steps=3, u=u), box1.reference(steps=3, u=u))
