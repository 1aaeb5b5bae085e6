"""cache_read/cache_write under time_tile: a time tile staged in thread-local
buffers (every level it touches, a band that moves with the skew), copied in
before its first step and out, step by step, after its last; and under
compute_at (each statement's shifted tile). Generated stencils against the
reference (also continued mid-tile), on both C targets; what is refused,
and why."""

from __future__ import annotations

import random

import numpy as np
import pytest
from stencil_gen import generate
from test_schedules import heat, wave_two_stage

import msc
from msc.codegen import get_target
from msc.errors import ScheduleError

# the dirichlet cases in 1D and 2D, and the 3D ones whose staged tiles fit a
# thread's 512 KiB (a 3D stencil of radius 3-4 with several statements or
# levels needs more for any staged time tile: a level's band spans the tile,
# the skew of each step and of each older level read, and the radius)
SEEDS = [s if generate(s).stencil.ir.ndim < 3 else pytest.param(s, marks=pytest.mark.slow)
         for s in range(48) if generate(s).stencil.ir.boundary == "dirichlet"
         and (generate(s).stencil.ir.ndim < 3 or s in (6, 10, 24, 33, 42))]


def staged(stencil: msc.Stencil, schedule: msc.Schedule, rng: random.Random, only: str | None = None) -> msc.Schedule:
    """`schedule` with every written field staged (or only `only`) and some time-invariant ones."""
    for f in stencil.ir.fields:
        if (f.written and only in (None, f.name)) or (not f.written and rng.random() < 0.7):
            schedule = schedule.cache_read(f.name)
            if f.written:
                schedule = schedule.cache_write(f.name)
    return schedule


def _fitting(stencil: msc.Stencil, dtype: str, target: str, seed: int) -> tuple[msc.Schedule, object]:
    """The first of a few staged time tiles, deep and wide to shallow and narrow,
    all fields to one, whose buffers fit a thread's stack; and its kernel."""
    rng = random.Random(seed)
    first = stencil.ir.written_fields[0].name
    for depth, size, only in [(rng.choice([3, 5]), rng.choice([4, 7, 16]), None), (2, 3, None), (2, 2, first), (1, 1, first)]:
        schedule = staged(stencil, msc.Schedule().time_tile(depth, **{d: size + i for i, d in enumerate(stencil.ir.dims)}),
                          rng, only)
        try:
            return schedule, stencil.compile(target=target, dtype=dtype, schedule=schedule, threads=2)
        except ScheduleError as e:
            assert "more than the" in str(e), str(e)  # only the capacity may refuse it
    raise AssertionError(f"no staged time tile fits for {stencil.ir.name}")


@pytest.mark.parametrize("seed", SEEDS)
def test_staged_time_tiles_match_reference(seed, assert_matches):
    case = generate(seed)
    schedule, kernel = _fitting(case.stencil, case.dtype, "serial" if seed % 4 == 0 else "openmp", seed)
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    assert_matches(kernel.run(steps=case.steps, **case.inputs), expected, case.dtype, f"{schedule}\n{case}")
    sim = kernel.start(**case.inputs)  # continued from a step inside a time tile
    sim.advance(case.split)
    sim.advance(case.steps - case.split)
    assert_matches(sim.fields, expected, case.dtype, f"continued after {case.split} steps: {schedule}\n{case}")


@pytest.mark.parametrize("seed", [s for s in range(0, 48, 3) if generate(s).stencil.ir.boundary == "dirichlet"])
def test_caches_under_compute_at_match_reference(seed, assert_matches):
    """Every level not written in the fused tile itself (older levels, time-invariant
    fields) may be staged, and written fields no statement of the step reads."""
    case = generate(seed)
    st, rng = case.stencil, random.Random(seed)
    dims = st.ir.dims
    base = msc.Schedule().tile(**{d: rng.choice([3, 4, 8]) for d in dims}).compute_at(f"{rng.choice(dims)}_tile")
    same_step = {a.name for s in st.ir.statements for a in s.reads if a.dt == 1}
    schedule = base
    for f in st.ir.fields:
        if f.name not in same_step:
            schedule = schedule.cache_read(f.name)
    writes = [f.name for f in st.ir.written_fields if f.name not in same_step]
    try:
        kernel = st.compile(dtype=case.dtype, schedule=_with_writes(schedule, writes), threads=2)
        schedule = _with_writes(schedule, writes)
    except ScheduleError as e:  # a write buffer needs a shared tile loop, which compute_at may leave none of
        assert "cache_write buffer holds one thread's whole tile" in str(e), str(e)
        kernel = st.compile(dtype=case.dtype, schedule=schedule, threads=2)
    expected = st.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    assert_matches(kernel.run(steps=case.steps, **case.inputs), expected, case.dtype, f"{schedule}\n{case}")


def _with_writes(schedule: msc.Schedule, fields: list[str]) -> msc.Schedule:
    for name in fields:
        schedule = schedule.cache_write(name)
    return schedule


@pytest.mark.parametrize("schedule", [msc.Schedule().time_tile(4, x=8, y=8),
                                      msc.Schedule().time_tile(3, x=5, y=7).parallel("x_tile"),
                                      msc.Schedule().time_tile(1, x=4, y=16)], ids=str)
@pytest.mark.parametrize("stencil", [heat, wave_two_stage], ids=lambda s: s.name)
def test_each_staged_tile_shape(schedule, stencil, assert_matches):
    schedule = staged(stencil, schedule, random.Random(0))
    rng = np.random.default_rng(1)
    inputs = {f.name: rng.random((37, 41)) for f in stencil.ir.fields}
    assert_matches(stencil.compile(schedule=schedule).run(steps=11, **inputs), stencil.reference(steps=11, **inputs))


def test_a_staged_tile_computes_in_its_buffer():
    """Inside the time loop every read and write of u is the buffer's: one band
    of (8 + 1 + 2) x (8 + 1 + 2) points per level, depth 4 + 1 levels."""
    source = get_target("openmp").source(heat.poly(), msc.Schedule().time_tile(4, x=8, y=8).cache_read("u").cache_write("u"))
    assert "real ct_f_u[605];" in source
    assert "f_u_t0[" not in source and "f_u_tp1[" not in source and "ct_f_u[" in source


@pytest.mark.parametrize("schedule, words", [
    (msc.Schedule().time_tile(2, x=8, y=8).cache_read("u"), ["use both cache_read('u') and cache_write('u')"]),
    (msc.Schedule().time_tile(2, x=8).cache_read("u").cache_write("u"), ["tile every dimension first, e.g. time_tile(2, x=32, y=32)"]),
    (msc.Schedule().time_tile(2, x=8, y=8).cache_read("u").cache_write("u").parallel("x"),
     ["a staged time tile belongs to one thread", "loop 'x'", "parallel('x_tile')"]),
    (msc.Schedule().time_tile(8, x=96, y=96).cache_read("u").cache_write("u"), ["u 9x99x99 (705672 bytes)", "more than the 524288"]),
    (msc.Schedule().tile(x=8, y=8).compute_at("x_tile").cache_read("v").cache_read("u"),
     ["under compute_at a statement reads the new level of 'v'", "cache_read: a copy made before the tile does not hold"]),
    (msc.Schedule().tile(x=8, y=8).compute_at("x_tile").cache_write("v"),
     ["the new level of 'v'", "cache_write: a buffer copied out after the tile does not hold"]),
    (msc.Schedule().tile(x=8, y=8).cache_write("u").parallel("y"),  # each thread would copy out the whole tile
     ["a cache_write buffer holds one thread's whole tile", "loop 'y' inside the tile is shared"]),
], ids=["one-sided", "untiled-dimension", "shared-point-loop", "capacity", "compute_at-read", "compute_at-write",
        "cache_write-shared-point-loop"])
def test_what_staging_refuses_and_why(schedule, words):
    stencil = wave_two_stage if "'v'" in str(schedule) else heat
    with pytest.raises(ScheduleError) as info:
        stencil.compile(schedule=schedule)
    for w in words:
        assert w in str(info.value), str(info.value)
