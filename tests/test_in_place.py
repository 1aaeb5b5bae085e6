"""In-place sweeps (Schedule.update_in_place): each step written over the level
it reads, the old planes kept in a ring. Against the reference on hand-written
and generated 3D stencils (radii 0-4 per dimension, a coefficient field,
float32), tiles of one row to more than the grid, 1-3 threads, runs of 1-7
steps and continued runs; the levels left where the plain sweep leaves them;
an emitted program; and the refusals."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from stencil_gen import generate

import msc
from msc import Schedule, t, x, y, z
from msc.codegen import get_target
from msc.errors import ScheduleError
from msc.poly import PolyIR
from msc.poly.schedule import parse_schedule
from msc.targets.cpu.openmp import CPUPlatform
from msc.tune.tuner import candidates


@msc.stencil
def heat3(u):
    u[t + 1, x, y, z] = 0.4 * u[t, x, y, z] + 0.1 * (u[t, x - 1, y, z] + u[t, x + 1, y, z] + u[t, x, y - 1, z]
                                                     + u[t, x, y + 1, z] + u[t, x, y, z - 1] + u[t, x, y, z + 1])


@msc.stencil
def box3(u):
    u[t + 1, x, y, z] = sum(u[t, x + i, y + j, z + k]
                            for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)) / 27.5


@msc.stencil
def far3(u, c):  # radius 2 along x and y, a coefficient field read around the point
    u[t + 1, x, y, z] = (0.3 * u[t, x, y, z] + 0.15 * (u[t, x - 2, y + 1, z] + u[t, x + 2, y - 2, z])
                         + 0.2 * c[x, y + 1, z] * (u[t, x + 1, y + 2, z - 1] + u[t, x - 1, y - 1, z + 1]))


@msc.stencil
def wave3(u):  # reads two old levels: not an in-place sweep
    u[t + 1, x, y, z] = 0.5 * u[t, x, y, z] + 0.25 * (u[t, x - 1, y, z] + u[t, x + 1, y, z]) - 0.1 * u[t - 1, x, y, z]


@msc.stencil
def heat2(u):
    u[t + 1, x, y] = 0.5 * u[t, x, y] + 0.125 * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1])


@msc.stencil(boundary="periodic")
def ring3(u):
    u[t + 1, x, y, z] = 0.5 * u[t, x, y, z] + 0.25 * (u[t, x - 1, y, z] + u[t, x, y + 1, z])


@msc.stencil
def pair3(u, v):
    u[t + 1, x, y, z] = 0.5 * (u[t, x - 1, y, z] + v[t, x, y, z])
    v[t + 1, x, y, z] = 0.5 * (v[t, x, y + 1, z] + u[t, x, y, z])


CASES = [
    (heat3, 4, (11, 13, 17)),
    (heat3, 1, (9, 12, 20)),  # one-row tiles
    (heat3, 64, (10, 11, 19)),  # one tile, taller than the grid
    (box3, 5, (12, 14, 21)),
    (far3, 3, (13, 16, 18)),  # tiles shorter than the radius along y: rows below reach two tiles back
    (far3, 7, (9, 20, 12)),
]


@pytest.mark.parametrize("stencil, height, shape", CASES, ids=lambda v: v.ir.name if isinstance(v, msc.Stencil)
                         else None)
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_an_in_place_sweep_matches_the_reference(stencil, height, shape, threads, dtype, assert_matches):
    """Runs of 1-7 steps (0, 1 or 2 of them written to the other slot) and a run continued in pieces."""
    rng = np.random.default_rng(3)
    inputs = {f.name: rng.random(shape).astype(dtype) for f in stencil.ir.fields}
    schedule = Schedule().tile(y=height).update_in_place()
    kernel = stencil.compile(dtype=dtype, schedule=schedule, threads=threads)
    for steps in (1, 2, 3, 4, 7):
        expected = stencil.reference(steps=steps, dtype=dtype, **inputs)
        assert_matches(kernel.run(steps=steps, **inputs), expected, dtype, f"{schedule}, {steps} steps")
    sim = kernel.start(**inputs)
    for chunk in (3, 1, 4, 2):
        sim.advance(chunk)
    assert_matches(sim.fields, stencil.reference(steps=10, dtype=dtype, **inputs), dtype, f"continued: {schedule}")


@pytest.mark.parametrize("seed", [24, 34, 41, 51, 69, 77])
def test_generated_stencils_swept_in_place_match_the_reference(seed, assert_matches):
    """The generated 3D stencils an in-place sweep takes (one statement reading its field at t only):
    radii 0 to 4 per dimension, a coefficient field, a scalar parameter, float32 and float64."""
    case = generate(seed, ndim=3, boundary="dirichlet")
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    for height in (2, 5):
        schedule = Schedule().tile(y=height).update_in_place()
        kernel = case.stencil.compile(dtype=case.dtype, schedule=schedule, threads=2)
        assert_matches(kernel.run(steps=case.steps, **case.inputs), expected, case.dtype, f"{case}: {schedule}")


@pytest.mark.parametrize("steps", [1, 2, 3, 6, 9])
def test_the_levels_end_where_the_plain_sweep_leaves_them(steps):
    """Both levels (the newest and the one before), bitwise as the plain sweep's: the last step, and the
    first of an even number, write the other slot."""
    u = np.random.default_rng(5).random((10, 14, 19))
    plain = heat3.compile(schedule=Schedule().tile(y=4), threads=2).start(u=u)
    in_place = heat3.compile(schedule=Schedule().tile(y=4).update_in_place(), threads=2).start(u=u)
    plain.advance(steps)
    in_place.advance(steps)
    for old, new in zip(plain.levels["u"], in_place.levels["u"], strict=True):
        np.testing.assert_array_equal(new, old)


def test_the_printed_step_saves_before_it_writes():
    """The in-place step: the saves, a barrier, the ring filled and the plane computed from it, a barrier;
    the plain sweep for the steps that write the other slot; the buffers allocated around the threads."""
    source = get_target("openmp").source(heat3.poly(), Schedule().tile(y=8).update_in_place())
    step = source[source.index("msc_lo ="):]
    assert step.index("msc_dst = msc_saved +") < step.index("msc_barrier();") < step.index("msc_dst = msc_ring +")
    assert step.count("msc_barrier();") == 2
    assert "if (c0 == T - 1 || (T % 2 == 0 && c0 == 0))" in source
    assert source.index("msc_alloc(") < source.index("#pragma omp parallel") < source.rindex("free(msc_rings)")


def test_an_emitted_in_place_program_matches_the_reference(tmp_path, assert_matches):
    u = np.random.default_rng(9).random((9, 11, 13))
    schedule = Schedule().tile(y=3).update_in_place()
    heat3.emit("openmp", tmp_path, schedule=schedule)
    subprocess.run(["make", "-s"], cwd=tmp_path, check=True, capture_output=True)
    np.save(tmp_path / "u.npy", u)
    subprocess.run(["./heat3", "--steps", "5", "--threads", "2", "--in", f"u={tmp_path / 'u.npy'}",
                    "--out", f"u={tmp_path / 'out.npy'}"], cwd=tmp_path, check=True, capture_output=True)
    result = {"u": np.load(tmp_path / "out.npy")}
    assert_matches(result, heat3.reference(steps=5, u=u), "float64", schedule)


def test_the_schedule_text_round_trips():
    schedule = Schedule().tile(y=16).update_in_place().with_threads(2)
    assert str(schedule) == "Schedule().tile(y=16).update_in_place().with_threads(2)"
    assert parse_schedule(str(schedule)) == schedule


@pytest.mark.parametrize("stencil, schedule, words", [
    (heat2, Schedule().tile(y=8).update_in_place(), "3D stencil along x; this one is 2D"),
    (ring3, Schedule().tile(y=8).update_in_place(), "dirichlet boundary"),
    (pair3, Schedule().tile(y=8).update_in_place(), "2 statements"),
    (wave3, Schedule().tile(y=8).update_in_place(), "levels [-1, 0]"),
    (heat3, Schedule().update_in_place(), "takes tile(y=...)"),
    (heat3, Schedule().tile(x=4, y=8).update_in_place(), "takes tile(y=...)"),
    (heat3, Schedule().tile(y=8).update_in_place().stream_stores(), "stream_stores()"),
    (heat3, Schedule().time_tile(4, x=8).update_in_place(), "time_tile(4"),
])
def test_what_an_in_place_sweep_refuses(stencil, schedule, words):
    with pytest.raises(ScheduleError, match="update_in_place") as info:
        stencil.compile(schedule=schedule)
    assert words in str(info.value)


def test_other_targets_refuse_it():
    with pytest.raises(ScheduleError, match=r"update_in_place\(\).*'openmp'"):
        heat3.compile(target="serial", schedule=Schedule().tile(y=8).update_in_place())


def test_the_tuner_offers_in_place_sweeps_where_they_apply():
    """First among the sweeps, modelled as moving the bytes of a streamed sweep, and refined with fewer
    threads only (prefetching is not an in-place sweep's option)."""
    sweeps = candidates(PolyIR(heat3.ir), (64, 64, 64), "sweep", steps=16)
    in_place = [s for s in sweeps if s.in_place]
    assert in_place and max(map(sweeps.index, in_place)) < min(i for i, s in enumerate(sweeps) if s.streaming)
    platform = CPUPlatform()
    streamed = platform.cost(PolyIR(heat3.ir), (64, 64, 64), 16, Schedule().tile(y=64).stream_stores())
    assert platform.cost(PolyIR(heat3.ir), (64, 64, 64), 16, in_place[0]).ms_per_step == streamed.ms_per_step
    assert platform.refinements(in_place[0], 2) == [in_place[0].with_threads(1)]
    for stencil in (wave3, pair3, heat2):
        shape = (64,) * stencil.ir.ndim
        assert not [s for s in candidates(PolyIR(stencil.ir), shape, "all", steps=16) if s.in_place]
