"""Pipelined time tiles (Schedule.pipeline): a band's tiles in plain order, the
columns shared among threads and each tile waiting point-to-point for the
column before. Against the reference on generated and hand-written 3D
stencils (several statements, two levels, float32, a third tiled dimension,
1-3 threads, runs continued mid-band, the box entry point), the waits in the
printed code, an emitted program, the pipeline's own legality check, and its
refusals."""

from __future__ import annotations

import random
import subprocess

import islpy as isl
import numpy as np
import pytest
from stencil_gen import generate

import msc
from msc import Schedule, t, x, y, z
from msc.errors import ScheduleError
from msc.poly import PolyIR
from msc.poly.schedule import _check_pipeline, lower, parse_schedule
from msc.tune.tuner import candidates


@msc.stencil
def heat3(u):
    u[t + 1, x, y, z] = 0.4 * u[t, x, y, z] + 0.1 * (u[t, x - 1, y, z] + u[t, x + 1, y, z] + u[t, x, y - 1, z]
                                                     + u[t, x, y + 1, z] + u[t, x, y, z - 1] + u[t, x, y, z + 1])


@msc.stencil
def wave3(u, v):  # two statements, two levels, the second reads the first's new level around its point
    v[t + 1, x, y, z] = 0.3 * (u[t, x - 1, y, z] + u[t, x + 1, y + 1, z]) - 0.2 * u[t - 1, x, y, z - 1]
    u[t + 1, x, y, z] = 0.5 * u[t, x, y, z] + 0.2 * (v[t + 1, x, y - 1, z] + v[t + 1, x + 1, y, z + 1])


@msc.stencil
def box3(u):
    u[t + 1, x, y, z] = sum(u[t, x + i, y + j, z + k]
                            for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)) / 27.5


@msc.stencil
def line(u):
    u[t + 1, x] = 0.5 * (u[t, x - 1] + u[t, x + 1])


@msc.stencil
def heat2(u):
    u[t + 1, x, y] = 0.5 * u[t, x, y] + 0.125 * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1])


CASES = [
    (heat3, Schedule().time_tile(4, x=3, y=5).pipeline(), (11, 13, 17), 13, 2),
    (heat3, Schedule().time_tile(3, x=2, y=4).pipeline(), (14, 9, 12), 11, 3),
    (heat3, Schedule().time_tile(5, x=4, y=2, z=8).pipeline(), (10, 12, 21), 12, 2),
    (heat3, Schedule().time_tile(2, y=3, z=4).pipeline(), (9, 11, 14), 7, 2),  # columns along y
    (wave3, Schedule().time_tile(3, x=4, y=4).pipeline(), (12, 10, 15), 10, 2),
    (box3, Schedule().time_tile(4, x=2, y=8).pipeline().stream_stores(), (13, 15, 19), 9, 2),
    (box3, Schedule().time_tile(16, x=8, y=8).pipeline(), (12, 12, 40), 17, 1),
]


@pytest.mark.parametrize("stencil, schedule, shape, steps, threads", CASES, ids=lambda v: str(v) if
                         isinstance(v, Schedule) else None)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_pipelined_time_tile_matches_the_reference(stencil, schedule, shape, steps, threads, dtype,
                                                     assert_matches):
    """One-shot, and continued from mid-band steps (the bands then start at another step)."""
    rng = np.random.default_rng(7)
    inputs = {f.name: rng.random(shape).astype(dtype) for f in stencil.ir.fields}
    expected = stencil.reference(steps=steps, dtype=dtype, **inputs)
    kernel = stencil.compile(dtype=dtype, schedule=schedule, threads=threads)
    assert_matches(kernel.run(steps=steps, **inputs), expected, dtype, schedule)
    sim = kernel.start(**inputs)
    for chunk in (steps // 3, 1, steps - steps // 3 - 1):
        sim.advance(chunk)
    assert_matches(sim.fields, expected, dtype, f"continued: {schedule}")


@pytest.mark.parametrize("seed", [s for s in range(60) if generate(s).stencil.ir.ndim == 3
                                  and generate(s).stencil.ir.boundary == "dirichlet"][:6])
def test_generated_stencils_match_the_reference_pipelined(seed, assert_matches):
    case = generate(seed)
    rng = random.Random(seed)
    dims = list(case.stencil.ir.dims)
    tiled = dims[:2] + (["z"] if rng.random() < 0.3 else [])
    schedule = Schedule().time_tile(rng.choice([1, 2, 3]), **{d: rng.choice([2, 3, 5, 8]) for d in tiled}).pipeline()
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    kernel = case.stencil.compile(dtype=case.dtype, schedule=schedule, threads=1 + seed % 3)
    assert_matches(kernel.run(steps=case.steps, **case.inputs), expected, case.dtype, f"{schedule}\n{case}")
    sim = kernel.start(**case.inputs)
    sim.advance(case.split)
    sim.advance(case.steps - case.split)
    assert_matches(sim.fields, expected, case.dtype, f"continued after {case.split} steps: {schedule}\n{case}")


def test_the_columns_are_handed_out_in_order_and_each_tile_waits_for_the_column_before():
    schedule = Schedule().time_tile(4, x=3, y=5).pipeline().with_threads(2)
    assert str(schedule) == "Schedule().time_tile(4, x=3, y=5).pipeline().with_threads(2)"
    assert parse_schedule(str(schedule)) == schedule
    kernel = heat3.compile(schedule=schedule)
    src = kernel.source
    assert src.count("#pragma omp for ") == 1 and "#pragma omp for schedule(dynamic, 1)" in src
    assert "(loops: t_tile, x_tile, y_tile, t, x, y, z)" in src
    assert src.count("msc_wait_tile(msc_done, msc_columns, c1 - 1, c0, c2);") == 1
    assert src.count("msc_tile_done(msc_done, msc_columns, c1, c0, c2);") == 1
    assert src.count("msc_column_done(msc_done, msc_columns, c1, c0);") == 1
    wait, loop = src.index("msc_wait_tile(msc_done"), src.index("for (long c3 = ")
    done, column_done = src.index("msc_tile_done(msc_done"), src.index("msc_column_done(msc_done")
    assert wait < loop < done < column_done  # wait, the tile's steps, then say so; the column last
    plain = heat3.compile(schedule=Schedule().time_tile(4, x=3, y=5), threads=2).source
    assert "msc_done" not in plain and "(loops: wave, x_tile, y_tile, t_tile, t, x, y, z)" in plain


def test_the_box_entry_point_of_a_pipelined_time_tile_computes_the_box(assert_matches):
    """The distributed runs' inner and rim boxes: the pipeline's columns then start at the box."""
    from msc.ir.arguments import bind_arguments
    from msc.runtime.buffers import pack
    from msc.targets.cpu.openmp import OpenMPTarget

    shape, lo, hi = (12, 11, 14), (3, 2, 1), (10, 9, 13)
    rng = np.random.default_rng(5)
    args = bind_arguments(heat3.ir, 1, {"u": rng.random(shape)})
    schedule = Schedule().time_tile(4, x=2, y=3).pipeline()
    kernel = OpenMPTarget().compile(PolyIR(heat3.ir), schedule=schedule, box=True, threads=2)
    whole, part = pack(heat3.ir, args), pack(heat3.ir, args)
    kernel.advance(kernel.arguments(whole, args.scalars, shape), 0, 1, 2)
    kernel.advance_box(kernel.arguments(part, args.scalars, shape), lo, hi, 0, 1, 2)
    inside = tuple(slice(a, b) for a, b in zip(lo, hi))
    assert np.array_equal(part["u"][1][inside], whole["u"][1][inside])


@pytest.mark.parametrize("stencil, schedule, words", [
    (line, Schedule().time_tile(4, x=64).pipeline(), "a 1D stencil has one dimension to tile"),
    (heat2, Schedule().time_tile(4, x=8).pipeline(), "with one, a band is a chain of tiles"),
    (heat3, Schedule().time_tile(4, x=8).pipeline(), "with one, a band is a chain of tiles"),
    (heat3, Schedule().pipeline(), "there is no time tile"),
    (heat3, Schedule().tile(x=8, y=8).pipeline(), "there is no time tile"),
    (heat3, Schedule().time_tile(2, x=4, y=4, z=4).pipeline().cache_read("u").cache_write("u"),
     "cannot stage tiles"),
    (heat3, Schedule().time_tile(4, x=8, y=8).pipeline().parallel("y_tile"), "drop parallel('y_tile')"),
], ids=str)
def test_what_a_pipeline_cannot_run_is_refused(stencil, schedule, words):
    with pytest.raises(ScheduleError, match="pipeline") as refused:
        stencil.compile(schedule=schedule)
    assert words in str(refused.value)


@pytest.mark.parametrize("target", ["serial", "cuda", "athread"])
def test_other_targets_refuse_a_pipeline_naming_the_openmp_target(target):
    options = {"emulate": True} if target == "cuda" else {}
    with pytest.raises(ScheduleError, match=r"has no pipeline\(\); it is an option of targets 'openmp', 'openmp\+mpi'"):
        heat3.compile(target=target, schedule=Schedule().time_tile(4, x=8, y=8).pipeline(), **options)


def test_the_pipeline_check_refuses_a_dependence_that_goes_back_along_the_second_tile_loop():
    """Skewed tiles never do; a schedule map whose rows count the second tile loop backwards does: a tile
    would then need a tile of the column before that lies past its own place."""
    poly = PolyIR(heat3.ir)
    lowered = lower(Schedule().time_tile(2, x=3, y=3).pipeline(), poly)
    assert lowered.names[:3] == ["t_tile", "x_tile", "y_tile"]
    lowered.map = lowered.map.apply_range(isl.UnionMap("{ [a, b, c, d, e, f, g, h] -> [a, b, -c, d, e, f, g, h] }"))
    with pytest.raises(ScheduleError, match="pipeline\\(\\) is illegal for stencil 'heat3'.*goes back along 'y_tile'"):
        _check_pipeline(poly, lowered)


def test_the_cpu_tuner_offers_3d_time_tiles_pipelined():
    space = candidates(PolyIR(heat3.ir), (66, 66, 66), "temporal", steps=32)
    assert space and all(s.pipelined and len(s.tiles) == 2 for s in space)
    assert all(not s.pipelined for s in candidates(PolyIR(heat2.ir), (258, 258), "temporal", steps=32))


def test_an_emitted_program_runs_a_pipelined_time_tile(tmp_path):
    """The standalone tree (`make`, C11) with the pipeline's waits, run on 3 threads against the reference."""
    schedule = Schedule().time_tile(3, x=2, y=4).pipeline()
    out = heat3.emit("openmp", tmp_path / "src", schedule=schedule)
    assert "msc_wait_tile" in (out / "kernel.c").read_text()
    made = subprocess.run(["make", "-s", "-C", str(out)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    u0 = np.random.default_rng(6).random((10, 12, 15))
    np.save(tmp_path / "u0.npy", u0)
    proc = subprocess.run([str(out / "heat3"), "--steps", "8", "--threads", "3", "--in", f"u={tmp_path / 'u0.npy'}",
                           "--out", f"u={tmp_path / 'u.npy'}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "u.npy"), heat3.reference(steps=8, u=u0)["u"], rtol=1e-12)
