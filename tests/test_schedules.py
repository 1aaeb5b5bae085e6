"""Schedule primitives on generated stencils against the reference
interpreter, illegal schedules rejected with the violated dependence named,
and the auto-tuner with its persistent cache."""

from __future__ import annotations

import platform
import random
import re
import subprocess

import numpy as np
import pytest
from stencil_gen import generate

import msc
from msc import Schedule, t, x, y
from msc.codegen import get_target
from msc.errors import ScheduleError
from msc.poly.schedule import parse_schedule
from msc.runtime.build import DEFAULT_CFLAGS, build_shared_library, host_identity
from msc.runtime.kernel import CompiledKernel

SEEDS = range(0, 48, 2)


def random_schedule(seed: int, stencil: msc.Stencil) -> Schedule:
    """A random legal-by-construction combination of primitives for this stencil."""
    rng = random.Random(seed * 7919)
    dims = list(stencil.ir.dims)
    s = Schedule()
    if stencil.ir.boundary == "dirichlet" and rng.random() < 0.6:
        tiled = rng.sample(dims, rng.randint(1, len(dims)))
        s = s.time_tile(rng.choice([1, 2, 3, 5]), **{d: rng.choice([2, 3, 4, 7, 16]) for d in tiled})
        if rng.random() < 0.5:
            s = s.parallel(rng.choice(["x", f"{tiled[0]}_tile"]))
    elif rng.random() < 0.5:  # staged tiles: every dimension tiled, tile loops outside
        s = s.tile(**{d: rng.choice([2, 3, 5, 8]) for d in dims})
        fields = stencil.ir.fields
        for f in rng.sample(fields, rng.randint(1, len(fields))):
            s = s.cache_read(f.name)
        for f in rng.sample(stencil.ir.written_fields, rng.randint(0, len(stencil.ir.written_fields))):
            s = s.cache_write(f.name)
    else:
        tiled = rng.sample(dims, rng.randint(1, len(dims)))
        s = s.tile(**{d: rng.choice([1, 3, 4, 8]) for d in tiled})
        band = [f"{d}_tile" for d in dims if d in tiled] + dims
        if rng.random() < 0.5:
            s = s.reorder(*rng.sample(band, len(band)))
        elif stencil.ir.boundary == "dirichlet" and rng.random() < 0.7:
            s = s.compute_at(f"{tiled[0]}_tile")
    if len(dims) > 1 and rng.random() < 0.4:
        s = s.unroll(dims[-1], rng.choice([2, 4]))
    streamable = not (s.unrolls or s.order or s.parallel_loop == dims[-1] or (len(dims) == 1 and not s.tiles))
    if streamable and rng.random() < 0.5:
        s = s.stream_stores()
    if streamable and rng.random() < 0.5:
        s = s.prefetch(rng.choice([1, 8, 64]))
    return s


def test_schedules_print_as_text_that_parses_back():
    for seed in range(200):
        schedule = random_schedule(seed, generate(seed % 48).stencil).with_threads(1 + seed % 3)
        assert parse_schedule(str(schedule)) == schedule
        assert parse_schedule(str(schedule).removeprefix("Schedule().")) == schedule
    assert parse_schedule("default") == Schedule() and parse_schedule(" auto ") == "auto"


@pytest.mark.parametrize("seed", SEEDS)
def test_random_schedule_matches_reference(seed, assert_matches):
    case = generate(seed)
    schedule = random_schedule(seed, case.stencil)
    assert case.steps >= 2 * (schedule.time_depth or 1)  # time tiles are run whole at least twice
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    kernel = case.stencil.compile(dtype=case.dtype, schedule=schedule, threads=2)
    assert_matches(kernel.run(steps=case.steps, **case.inputs), expected, case.dtype, f"{schedule}\n{case}")
    sim = kernel.start(**case.inputs)  # continued from step t0 = split, mid-tile in general
    sim.advance(case.split)
    sim.advance(case.steps - case.split)
    assert_matches(sim.fields, expected, case.dtype, f"continued after {case.split} steps: {schedule}\n{case}")


@msc.stencil
def heat(u):
    u[t + 1, x, y] = 0.5 * u[t, x, y] + 0.125 * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1])


@msc.stencil
def wave_two_stage(u, v):
    v[t + 1, x, y] = u[t, x - 1, y] + u[t, x + 1, y] - u[t - 1, x, y]
    u[t + 1, x, y] = 0.25 * (v[t + 1, x, y - 1] + v[t + 1, x, y + 1])


@msc.stencil(boundary="periodic")
def ring(u):
    u[t + 1, x] = 0.5 * (u[t, x - 1] + u[t, x + 1])


@pytest.mark.parametrize(
    "schedule",
    [
        Schedule().tile(x=8, y=16),
        Schedule().tile(x=5).reorder("y", "x_tile", "x"),
        Schedule().tile(x=8, y=8).parallel("y_tile").vectorize("y").unroll("x", 2),
        Schedule().time_tile(4, x=8),
        Schedule().time_tile(3, x=4, y=8).parallel("y_tile"),
        Schedule().time_tile(6, y=16).parallel("x").vectorize("y"),
        Schedule().time_tile(2, x=8).with_threads(1),
        Schedule().tile(x=8, y=8).compute_at("x_tile"),
        Schedule().tile(x=4, y=16).compute_at("y_tile").parallel("x"),
        Schedule().tile(x=8, y=16).cache_read("u"),
        Schedule().tile(x=5, y=7).cache_read("u").cache_write("u").parallel("y_tile"),
        Schedule().stream_stores(),
        Schedule().tile(y=16).stream_stores().with_threads(3),
        Schedule().time_tile(4, x=8).stream_stores(),
        Schedule().prefetch(64),
        Schedule().tile(x=8, y=8).stream_stores().prefetch(16),
    ],
    ids=str,
)
@pytest.mark.parametrize("stencil", [heat, wave_two_stage], ids=lambda s: s.name)
def test_each_primitive(schedule, stencil, assert_matches):
    rng = np.random.default_rng(1)
    inputs = {f.name: rng.random((37, 41)) for f in stencil.ir.fields}
    expected = stencil.reference(steps=11, **inputs)
    assert_matches(stencil.compile(schedule=schedule).run(steps=11, **inputs), expected)


@pytest.mark.parametrize(
    "stencil, schedule, words",
    [
        (heat, Schedule().parallel("t"), ["loop 't' of stencil 'heat' cannot run in parallel", "S0[", "-> S0[",
                                          "carries the dependence of u[t+1] at ", "written 1 step earlier by u[t+1] at",
                                          "(the schedule must run that write first; in isl: S0["]),
        (heat, Schedule().time_tile(4, x=8).parallel("wave"), ["loop 'wave'", "cannot run in parallel"]),
        (heat, Schedule().time_tile(4, x=8).parallel("t"), ["loop 't'", "carries the dependence"]),
        (heat, Schedule().time_tile(4, x=8).parallel("t_tile"),  # it used to race: every thread ran every tile
         ["loop 't_tile' of stencil 'heat' cannot run in parallel", "fixed by the wavefront", "('x_tile')"]),
        (heat, Schedule().unroll("x", 2), ["unroll: loop 'x' is shared among threads by default",
                                           "parallel('y') shares another"]),
        (wave_two_stage, Schedule().parallel("t"), ["cannot run in parallel", "at ",
                                                     "overwrites a ring slot of 'u' that v[t+1] at",
                                                     "(the schedule must run that read first; in isl: S0["]),
        (heat, Schedule().tile(x=4).vectorize("x"), ["vectorize: 'x' is not the innermost loop ('y' is)"]),
        (heat, Schedule().tile(x=4).reorder("q"), ["reorder: no loop named 'q'"]),
        (heat, Schedule().parallel("x_tile"), ["no loop named 'x_tile' in this schedule"]),
        (heat, Schedule().parallel("x").unroll("x", 2), ["unroll: loop 'x' is already shared among threads"]),
        (ring, Schedule().time_tile(4, x=8), ["time_tile needs a dirichlet boundary"]),
        (ring, Schedule().tile(x=4).compute_at("x_tile"), ["compute_at needs a dirichlet boundary"]),
        (heat, Schedule().compute_at("x_tile"), ["compute_at: 'x_tile' is not a tile loop (tile loops: none: tile() first)"]),
        (wave_two_stage, Schedule().tile(x=8).compute_at("x_tile").parallel("x_tile"),
         ["loop 'x_tile'", "cannot run in parallel", "on v[t+1, x, y-1], written in the same step by v[t+1] at"]),
        (heat, Schedule().tile(x=8).cache_read("u"), ["tile every dimension first"]),
        (heat, Schedule().time_tile(2, x=8, y=8).cache_read("u"), ["use both cache_read('u') and cache_write('u')"]),
        (heat, Schedule().tile(x=8, y=8).cache_read("q"), ["reads no field 'q'"]),
        (heat, Schedule().tile(x=8, y=8).reorder("x", "y", "x_tile", "y_tile").cache_read("u"), ["tile loops must be outside"]),
        (heat, Schedule().tile(x=512, y=512).cache_read("u"),
         ["x=512, y=512", "u 514x514 (2113568 bytes)", "more than the 524288 bytes"]),
        (ring, Schedule().tile(y=4), ["is 1D: it has no dimension 'y'"]),
        (heat, Schedule().tile(x=4).reorder("y", "x").stream_stores(),
         ["stream_stores: the innermost loop runs along 'x'", "keep 'y' innermost"]),
        (ring, Schedule().stream_stores(), ["stream_stores: the innermost loop 'x' is shared among threads; use tile(x=4096)"]),
        (heat, Schedule().unroll("y", 2).stream_stores(), ["stream_stores: loop 'y' is unrolled"]),
        (heat, Schedule().reorder("y", "x").prefetch(8), ["prefetch: the innermost loop runs along 'x'"]),
    ],
)
def test_illegal_schedules_are_rejected(stencil, schedule, words):
    with pytest.raises(ScheduleError) as info:
        stencil.compile(schedule=schedule)
    for w in words:
        assert w in str(info.value), str(info.value)


def test_a_misspelt_primitive_names_the_closest_and_all():
    with pytest.raises(ScheduleError, match=r"Schedule has no primitive 'tiel': did you mean tile\(\)\? the "
                       r"primitives are tile, time_tile, reorder, .*tensor_cores"):
        Schedule().tiel(x=4)
    with pytest.raises(ScheduleError, match="no primitive 'fastest': the primitives are tile, "):
        Schedule().fastest()
    assert not hasattr(Schedule(), "tiel")  # still an AttributeError for hasattr and getattr


def test_bad_primitive_arguments():
    with pytest.raises(ScheduleError, match="tile: unknown dimension 'w'"):
        Schedule().tile(w=4)
    with pytest.raises(ScheduleError, match="size of x must be a positive integer"):
        Schedule().tile(x=0)
    with pytest.raises(ScheduleError, match="time_tile depth must be a positive integer"):
        Schedule().time_tile(0, x=4)
    with pytest.raises(ScheduleError, match="cannot be combined"):
        Schedule().tile(x=4).time_tile(4, x=4)
    with pytest.raises(ScheduleError, match="prefetch distance must be a positive integer, got 0"):
        Schedule().prefetch(0)
    for threads in (-3, 0, "2", 2.5, True):  # refused when built, not when the kernel runs
        with pytest.raises(ScheduleError, match=rf"with_threads: threads must be a positive integer, got {threads!r}"):
            Schedule().with_threads(threads)
    with pytest.raises(ScheduleError, match="with_threads: threads must be a positive integer, got -3"):
        parse_schedule("with_threads(-3)")
    with pytest.raises(ScheduleError, match="schedule must be a msc.Schedule"):
        heat.compile(schedule="fastest")


def test_a_primitive_given_twice_adds_to_or_conflicts_with_the_first_never_replaces_it():
    assert Schedule().tile(x=4).tile(y=5) == Schedule().tile(x=4, y=5)
    assert Schedule().parallel("x").parallel("x") == Schedule().parallel("x")
    for build, said in [
        (lambda: Schedule().tile(x=4).tile(x=8), "tile: 'x' is tiled already (Schedule().tile(x=4))"),
        (lambda: Schedule().time_tile(4, x=8).time_tile(8, x=8), "time_tile is given already"),
        (lambda: Schedule().parallel("x").parallel("y"), "parallel is given already (Schedule().parallel('x'))"),
        (lambda: Schedule().vectorize("y").vectorize("x"), "vectorize is given already"),
        (lambda: Schedule().reorder("y", "x").reorder("x", "y"), "reorder is given already"),
        (lambda: Schedule().tile(x=4).compute_at("x_tile").compute_at("x"), "compute_at is given already"),
        (lambda: Schedule().unroll("y", 2).unroll("y", 4), "unroll: loop 'y' is unrolled already"),
        (lambda: parse_schedule("parallel('x').parallel('y')"), "parallel is given already"),
    ]:
        with pytest.raises(ScheduleError, match=re.escape(said)):
            build()


def test_violated_dependence_names_the_statement_line():
    with pytest.raises(ScheduleError) as info:
        wave_two_stage.compile(schedule=Schedule().parallel("t"))
    assert __file__ in str(info.value)


def test_innermost_loops_store_whole_lines():
    """Aligned whole-line stores by default; streaming ones, fenced before
    other threads read, only with stream_stores(); prefetch(d) asks for the
    leading row (x + 1) d points ahead."""
    plain = heat.compile().source
    streamed = heat.compile(schedule=Schedule().stream_stores()).source
    assert "msc_line_aligned(" in plain and "msc_put_line(" not in plain and "msc_stream_fence" not in plain
    assert "msc_put_line(" in streamed and streamed.count("msc_stream_fence();") == 2
    prefetching = heat.compile(schedule=Schedule().prefetch(100)).source
    assert "__builtin_prefetch(&f_u_t0[(c2 + 1) * P1 + msc_base + 100]);" in prefetching


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("schedule", [Schedule(), Schedule().stream_stores(), Schedule().time_tile(3, x=4)], ids=str)
def test_rows_of_every_length_around_a_line_match_the_reference(dtype, schedule, assert_matches):
    """A row of at least a line is a peel and a rest computed as whole lines in vector lanes, each
    storing its own points only, around the aligned lines; a shorter row runs point by point. Rows
    of 1 to 2 lines + 3 points (8 or 16 per line), starting at every alignment (one row after another)."""
    kernel = heat.compile(schedule=schedule, dtype=dtype, threads=2)
    assert kernel.source.count("msc_edge[c") == 4  # two edge lines computed, two stored from
    rng = np.random.default_rng(5)
    line = 64 // np.dtype(dtype).itemsize
    for columns in range(3, 2 * line + 6):
        u0 = rng.random((11, columns)).astype(dtype)
        assert_matches(kernel.run(steps=4, u=u0), heat.reference(steps=4, dtype=dtype, u=u0), dtype,
                       context=f"{schedule}, {columns} columns")


@msc.stencil
def heat3(u):
    u[t + 1, x, y, msc.z] = 0.4 * u[t, x, y, msc.z] + 0.1 * (u[t, x - 1, y, msc.z] + u[t, x + 1, y, msc.z]
                                                         + u[t, x, y - 1, msc.z] + u[t, x, y + 1, msc.z]
                                                         + u[t, x, y, msc.z - 1] + u[t, x, y, msc.z + 1])


@pytest.mark.parametrize("stencil, schedule, mapping", [
    (heat3, Schedule().time_tile(4, x=3, y=5), "schedule(dynamic, 1)"),
    (heat3, Schedule().time_tile(4, x=3, y=5).parallel("x"), "schedule(static)"),
    (heat, Schedule().time_tile(4, x=3), "schedule(static)"),
    (heat3, Schedule().tile(x=3, y=5), "schedule(static)"),
], ids=str)
def test_wavefront_tiles_of_two_tiled_dimensions_are_handed_out_one_at_a_time(stencil, schedule, mapping,
                                                                               assert_matches):
    """A time tile's wavefront of tiles in two dimensions shares its tiles dynamically (they differ in
    work); the points of a tile made parallel, a 2D wavefront and a sweep's tiles stay static. Each
    against the reference, one-shot and continued over a partial tile."""
    kernel = stencil.compile(schedule=schedule, threads=2)
    assert f"#pragma omp for {mapping}" in kernel.source
    assert kernel.source.count("#pragma omp for ") == 1
    u0 = np.random.default_rng(3).random((11, 13, 17) if stencil is heat3 else (17, 19))
    expected = stencil.reference(steps=9, u=u0)
    assert_matches(kernel.run(steps=9, u=u0), expected, context=schedule)
    sim = kernel.start(u=u0)
    sim.advance(5)
    sim.advance(4)
    assert_matches(sim.fields, expected, context=f"continued: {schedule}")


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the ISA levels below are x86-64's")
@pytest.mark.parametrize("isa", ["-march=x86-64", "-march=x86-64-v3", "-march=x86-64-v4"], ids=lambda f: f[7:])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("schedule", [Schedule().prefetch(16), Schedule().stream_stores()], ids=str)
def test_line_stores_on_each_x86_level(isa, dtype, schedule, assert_matches):
    """The line-store helpers' SSE2 and AVX branches, ordinary and streaming,
    built for each level (the JIT otherwise builds for this CPU only), AVX-512
    (which takes the AVX branch) included; -march=x86-64-v4 runs only where
    the CPU has AVX-512."""
    if isa.endswith("v4") and "avx512f" not in host_identity():
        pytest.skip("this CPU has no AVX-512")
    poly = heat.poly(dtype)
    source = get_target("openmp").source(poly, schedule)
    flags = tuple(isa if f == "-march=native" else f for f in DEFAULT_CFLAGS)
    kernel = CompiledKernel(poly.ir, source, build_shared_library(source, "msc_heat_isa", flags=flags), schedule=schedule)
    u0 = np.random.default_rng(4).random((29, 70)).astype(dtype)
    assert_matches(kernel.run(steps=5, u=u0), heat.reference(steps=5, dtype=dtype, u=u0), dtype)


@pytest.mark.parametrize("schedule", [Schedule().time_tile(4, x=8), Schedule().tile(y=8).stream_stores()], ids=str)
def test_emit_honours_the_schedule(tmp_path, schedule):
    out = heat.emit("openmp", tmp_path / "src", schedule=schedule)
    assert str(schedule) in (out / "kernel.c").read_text()
    assert subprocess.run(["make", "-s", "-C", str(out)], capture_output=True).returncode == 0
    u0 = np.random.default_rng(2).random((30, 30))
    np.save(tmp_path / "u0.npy", u0)
    proc = subprocess.run([str(out / "heat"), "--steps", "9", "--in", f"u={tmp_path / 'u0.npy'}",
                           "--out", f"u={tmp_path / 'u.npy'}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "u.npy"), heat.reference(steps=9, u=u0)["u"], rtol=1e-12)


def test_auto_tuner_builds_every_candidate_side_by_side_before_timing(tmp_path, monkeypatch, assert_matches):
    """The candidates' compilers run in parallel threads before the first timing; the
    timings then load the built kernels (one build per schedule)."""
    import threading

    from msc.codegen import get_target
    from msc.tune.tuner import AutoKernel

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    target, poly = get_target("openmp"), heat.poly()
    calls: list[tuple[msc.Schedule, bool]] = []

    def compile_fn(schedule, threads):
        calls.append((schedule, threading.current_thread() is threading.main_thread()))
        return target.compile(poly, threads=threads, schedule=schedule)

    kernel = AutoKernel(poly, compile_fn, budget_s=3.0, echo=False)
    u0 = np.random.default_rng(4).random((34, 40))
    assert_matches(kernel.run(steps=4, u=u0), heat.reference(steps=4, u=u0))
    first_timed = next(n for n, (_, main) in enumerate(calls) if main)
    prebuilt = {s for s, _ in calls[:first_timed]}
    from msc.tune.tuner import TIMED

    first_pass = {msc.poly.schedule.parse_schedule(t.schedule) for t in kernel.report.trials[:TIMED]}
    # (a lone neighbour of the climb that follows is built when it is first timed)
    assert first_timed >= 2 and first_pass <= prebuilt | {s for s, main in calls if not main}


def test_auto_tuner_copies_the_inputs_in_once_and_every_trial_goes_on_from_the_last(tmp_path, monkeypatch,
                                                                                    assert_matches):
    """The trials run one after another in one copy of the inputs (kernel.follow: no fresh memory to
    page in or copy for each, a fifth of a 256^3 tuning's time before); the choice still runs right."""
    from msc.runtime.kernel import CompiledKernel

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    starts, buffers = [], set()
    start, follow = CompiledKernel.start, CompiledKernel.follow
    monkeypatch.setattr(CompiledKernel, "start", lambda self, *a, **kw: starts.append(1) or start(self, *a, **kw))
    monkeypatch.setattr(CompiledKernel, "follow", lambda self, previous, *a, **kw: buffers.add(
        id(previous.host_buffers["u"])) or follow(self, previous, *a, **kw))
    kernel = heat.compile(target="openmp", schedule="auto")
    u0 = np.random.default_rng(5).random((34, 40))
    assert_matches(kernel.run(steps=4, u=u0), heat.reference(steps=4, u=u0))
    assert len(kernel.report.trials) > 4
    assert len(starts) == 2 and len(buffers) == 1  # the tuning's one copy, then the run's own


def test_a_timing_runs_a_band_of_time_tiles_per_thread(tmp_path, monkeypatch, assert_matches):
    """Along one tiled dimension a band of time tiles is a chain (one tile per wavefront), so a timing
    of one band runs on one thread at a time: every timing of such a tile runs a band per thread, as far
    as the trial's steps allow. Tiles in two dimensions and sweeps need no more than a tile's depth."""
    from msc.tune import tuner
    from msc.tune.tuner import _bands

    assert _bands(Schedule().time_tile(16, x=64), 2, 64) == 2
    assert _bands(Schedule().time_tile(16, x=64), 2, 16) == 1  # a run no longer than one band
    assert _bands(Schedule().time_tile(16, x=64), 1, 64) == 1
    assert _bands(Schedule().time_tile(4, x=8, y=8), 2, 64) == 1
    assert _bands(Schedule(), 2, 64) == 1
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuner, "SAMPLE_S", 1e-9)  # the shortest timings: whole tiles, and the bands
    timings: list[tuple[msc.Schedule, int]] = []
    timing = tuner.AutoKernel._timing
    monkeypatch.setattr(tuner.AutoKernel, "_timing", lambda self, kernel, steps: timings.append(
        (kernel.schedule, steps)) or timing(self, kernel, steps))
    kernel = heat.compile(target="openmp", schedule="auto", threads=2)
    u0 = np.random.default_rng(8).random((66, 70))
    assert_matches(kernel.run(steps=40, u=u0), heat.reference(steps=40, u=u0))
    tiles = [(s, steps) for s, steps in timings if s.time_depth]
    assert tiles and all(steps == s.time_depth * min(s.threads or 2, 40 // s.time_depth) for s, steps in tiles), tiles


def _tuned_by_stand_ins(tmp_path, monkeypatch, assert_matches, ms) -> tuple[object, list[msc.Schedule]]:
    """heat tuned with a stand-in cost model that ranks shallow, narrow time tiles best and the stand-in
    clock `ms` (ms/step by schedule); the kernel (checked against the reference) and the schedules timed."""
    from msc.targets.cpu import model
    from msc.tune import tuner
    from msc.tune.tuner import Estimate

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(model, "estimate", lambda poly, shape, s: Estimate(
        1.0 + (s.time_depth + dict(s.tiles).get("x", 0) / 64 if s.time_depth else 99.0)))
    monkeypatch.setattr(tuner.AutoKernel, "_timing", lambda self, kernel, steps: ms(kernel.schedule))
    kernel = heat.compile(target="openmp", schedule="auto", threads=2)
    kernel.budget_s = 60.0
    u0 = np.random.default_rng(7).random((66, 70))
    assert_matches(kernel.run(steps=16, u=u0), heat.reference(steps=16, u=u0))
    return kernel, [parse_schedule(t.schedule) for t in kernel.report.trials]


def test_the_climb_goes_no_deeper_than_a_far_slower_depth(tmp_path, monkeypatch, assert_matches):
    """A stand-in clock where depth 8 takes twice depth 4's time (narrower tiles a little faster, depth 16
    faster still): once a deeper tile is FAR_SLOWER than the tile the climb stands on, tiles deeper than it
    are not timed (their timings went to the narrower tiles instead), and the choice is the best timed."""
    import math

    def ms(s: msc.Schedule) -> float:
        if not s.time_depth:
            return 5.0
        return {4: 1.0, 8: 2.0}.get(s.time_depth, 0.5) * (1 - 0.04 * math.log2(64 / dict(s.tiles).get("x", 64)))

    kernel, trials = _tuned_by_stand_ins(tmp_path, monkeypatch, assert_matches, ms)
    assert msc.Schedule().time_tile(8, x=8) in trials and max(s.time_depth for s in trials) == 8
    assert kernel.report.schedule == msc.Schedule().time_tile(4, x=8).with_threads(2)


def test_a_finalist_stopped_early_does_not_win_when_load_slows_the_rest(tmp_path, monkeypatch, assert_matches):
    """A stand-in clock: the default takes 2 ms/step, every time tile 1 ms for its first two timings and 5 ms
    after (another process takes a core). The default stops after the run-off's first round; the medians of
    the time tiles, timed on through the load, end above its median, and still a time tile is chosen."""
    from collections import Counter

    from msc.tune import tuner

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    calls: Counter = Counter()

    def timing(self, kernel, steps):
        calls[kernel.schedule] += 1
        if not kernel.schedule.time_depth:
            return 2.0
        return 1.0 if calls[kernel.schedule] <= 2 else 5.0

    monkeypatch.setattr(tuner.AutoKernel, "_timing", timing)
    kernel = heat.compile(target="openmp", schedule="auto")
    u0 = np.random.default_rng(9).random((34, 40))
    assert_matches(kernel.run(steps=4, u=u0), heat.reference(steps=4, u=u0))
    assert kernel.report.schedule.time_depth and kernel.report.ms_per_step > kernel.report.default_ms_per_step


def test_a_first_timing_close_behind_the_finalists_goes_to_the_run_off(tmp_path, monkeypatch, assert_matches):
    """A stand-in clock: the first four candidates timed take 1.0, 1.01, 1.02 and 1.05 ms/step at first,
    every other 2 ms and the default 3. The fourth is within CLOSE of the fastest, so it is timed again
    with the three ahead of it, and there it takes 0.5 ms: it is chosen (it was one unlucky timing)."""
    from msc.tune import tuner

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    first: dict = {}

    def timing(self, kernel, steps):
        schedule = kernel.schedule
        if schedule in (None, Schedule()):
            return 3.0
        if schedule not in first:
            first[schedule] = [1.0, 1.01, 1.02, 1.05][len(first)] if len(first) < 4 else 2.0
            return first[schedule]
        return 0.5 if first[schedule] == 1.05 else first[schedule]

    monkeypatch.setattr(tuner.AutoKernel, "_timing", timing)
    kernel = heat.compile(target="openmp", schedule="auto")
    u0 = np.random.default_rng(4).random((34, 40))
    assert_matches(kernel.run(steps=4, u=u0), heat.reference(steps=4, u=u0))
    fourth = next(s for s, ms in first.items() if ms == 1.05)
    assert kernel.report.schedule == fourth and kernel.report.ms_per_step == 0.5


def test_fewer_threads_winning_on_long_steps_is_load_and_not_chosen(tmp_path, monkeypatch, assert_matches):
    """Steps of a millisecond or more (a stand-in clock on which one thread would be faster, as when
    another process holds a core): fewer threads are not tried, and the choice records no thread
    count, so each run takes the cores free then (ADR 0058)."""
    from msc.tune import tuner

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuner.AutoKernel, "_timing", lambda self, kernel, steps: 0.5 if kernel.threads == 1 else 1.0)
    kernel = heat.compile(target="openmp", schedule="auto")
    u0 = np.random.default_rng(8).random((34, 40))
    assert_matches(kernel.run(steps=4, u=u0), heat.reference(steps=4, u=u0))
    assert not any("with_threads" in t.schedule for t in kernel.report.trials)
    assert kernel.report.schedule.threads is None


def test_the_default_is_timed_on_the_threads_an_untuned_run_takes(tmp_path, monkeypatch, assert_matches):
    """A stand-in clock of a busy machine with one core free: a step takes 0.1 ms on one thread and 4.5 ms on
    more (each barrier waits for a descheduled thread). An untuned run takes the free core, so the default is
    timed on it too: "Nx the default" is what tuning gains (nothing here), not 45x."""
    from msc.runtime import threads
    from msc.tune import tuner

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "free_cores", lambda: 1)
    monkeypatch.setattr(tuner.os, "cpu_count", lambda: 4)  # candidates are timed on 4 threads
    monkeypatch.setattr(tuner.AutoKernel, "_timing",
                        lambda self, kernel, steps: 0.1 if kernel._threads_of(None) == 1 else 4.5)
    kernel = heat.compile(target="openmp", schedule="auto")
    u0 = np.random.default_rng(8).random((34, 40))
    assert_matches(kernel.run(steps=4, u=u0), heat.reference(steps=4, u=u0))
    assert kernel.report.default_ms_per_step == pytest.approx(0.1) and kernel.report.speedup == pytest.approx(1.0)


def test_a_report_of_a_platform_that_models_says_ranked_not_timed():
    from msc.tune.tuner import Estimate, Trial, TuningReport

    trials = [Trial("Schedule()", 2.0), Trial("Schedule().tile(x=8)", 1.0)]
    assert repr(TuningReport(Schedule().tile(x=8), 1.0, 2.0, False, trials, Estimate(1.0))) == (
        "<TuningReport Schedule().tile(x=8): 1 ms/step, 2.00x the default (2 candidates ranked by the cost model)>")
    assert repr(TuningReport(Schedule().tile(x=8), 1.0, 2.0, False, trials)).endswith("(2 candidates timed)>")


@pytest.mark.parametrize("slower, rounds", [(3.0, 1), (1.3, 2)])
def test_a_clearly_slower_finalist_stops_early(tmp_path, monkeypatch, assert_matches, slower, rounds):
    """The run-off times each finalist ROUNDS times, interleaved; one whose fastest timing is FAR_SLOWER
    than the leader's slowest after one round, or CLEARLY_SLOWER after two, stops there (here: every
    1-thread schedule takes 3x or 1.3x the time, by a stand-in clock of steps short enough for fewer threads
    to be tried), and the choice is still the fast one."""
    from msc.tune import tuner

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    timings: list[msc.Schedule] = []

    def timing(self, kernel, steps):
        timings.append(kernel.schedule)
        return 0.1 * (slower if kernel.threads == 1 else 1.0 + 0.01 * (len(timings) % 3))

    monkeypatch.setattr(tuner.AutoKernel, "_timing", timing)
    kernel = heat.compile(target="openmp", schedule="auto", threads=2)
    u0 = np.random.default_rng(6).random((34, 40))
    assert_matches(kernel.run(steps=4, u=u0), heat.reference(steps=4, u=u0))
    one_thread = [t for t in kernel.report.trials if "with_threads(1)" in t.schedule]
    assert one_thread and all(t.ms_per_step == pytest.approx(0.1 * slower) for t in one_thread)
    assert kernel.report.schedule.threads == 2
    runs = {s: timings.count(s) for s in set(timings)}
    assert [n for s, n in runs.items() if s.threads == 1] == [rounds]  # a variant of the fastest
    assert max(runs.values()) == 1 + 3  # the first pass, then the run-off of the rest: tied after three rounds


def test_one_unlucky_round_does_not_drop_the_fastest_finalist(tmp_path, monkeypatch, assert_matches):
    """The run-off counts each finalist's first timing with its rounds: a stand-in clock where time tiles
    take half the default's time, except in their first run-off round (10x: another process took a core),
    still chooses a time tile (without the first timing, the FAR_SLOWER rule dropped them after that round)."""
    from msc.tune import tuner

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    timings: list[msc.Schedule] = []

    def timing(self, kernel, steps):
        timings.append(kernel.schedule)
        if not kernel.schedule.time_depth or kernel.threads == 1:
            return 1.0
        return 5.0 if timings.count(kernel.schedule) == 2 else 0.5

    monkeypatch.setattr(tuner.AutoKernel, "_timing", timing)
    kernel = heat.compile(target="openmp", schedule="auto", threads=2)
    u0 = np.random.default_rng(6).random((34, 40))
    assert_matches(kernel.run(steps=4, u=u0), heat.reference(steps=4, u=u0))
    assert kernel.report.schedule.time_depth and kernel.report.schedule.threads == 2


def test_a_run_off_of_tied_finalists_ends_after_three_rounds(tmp_path, monkeypatch, assert_matches):
    """Finalists whose medians are all within TIED of each other (a stand-in clock times every schedule
    alike) are timed three rounds, not ROUNDS: more rounds would pick among them by noise."""
    from msc.tune import tuner

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    timings: list[msc.Schedule] = []

    def timing(self, kernel, steps):
        timings.append(kernel.schedule)
        return 1.0

    monkeypatch.setattr(tuner.AutoKernel, "_timing", timing)
    kernel = heat.compile(target="openmp", schedule="auto", threads=2)
    u0 = np.random.default_rng(6).random((34, 40))
    assert_matches(kernel.run(steps=4, u=u0), heat.reference(steps=4, u=u0))
    runs = {s: timings.count(s) for s in set(timings)}
    assert tuner.ROUNDS > 3 and max(runs.values()) == 1 + 3  # the first pass, then one run-off of three rounds


def test_a_decided_run_off_ends_after_three_rounds(tmp_path, monkeypatch, assert_matches):
    """A run-off whose leader was the fastest in every one of three rounds ends there (a stand-in clock with 10%
    of noise: narrow, shallow time tiles fastest, prefetching and one thread slower)."""
    from msc.tune import tuner

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    timings: list[msc.Schedule] = []
    rng = np.random.default_rng(1)

    def timing(self, kernel, steps):
        timings.append(kernel.schedule)
        s = kernel.schedule
        penalty = 0.05 * s.time_depth + 0.02 * dict(s.tiles).get("x", 0) + 0.3 * bool(s.prefetch_distance)
        return (0.5 if s.time_depth else 1.0) * (1 + 0.1 * rng.random()) + penalty + 0.3 * (kernel.threads == 1)

    monkeypatch.setattr(tuner.AutoKernel, "_timing", timing)
    kernel = heat.compile(target="openmp", schedule="auto", threads=2)
    u0 = np.random.default_rng(6).random((34, 40))
    assert_matches(kernel.run(steps=4, u=u0), heat.reference(steps=4, u=u0))
    runs = {s: timings.count(s) for s in set(timings)}
    assert kernel.report.schedule.time_depth and tuner.ROUNDS > 3
    assert max(runs.values()) == 1 + 3  # the first pass, then one run-off (finalists and variants) of three rounds


def test_the_tuner_climbs_from_its_best_time_tile_to_faster_neighbours(tmp_path, monkeypatch, assert_matches):
    """A stand-in model that ranks shallow, narrow time tiles best and a stand-in clock where deeper and wider
    ones are faster: the first pass times the model's choice, then the climb moves through neighbours (the
    depth or a tile size doubled) to a faster tile the first pass did not time, each one step from another."""
    from msc.tune import tuner

    def ms(s: msc.Schedule) -> float:
        return 1.0 - (0.02 * s.time_depth + 0.001 * dict(s.tiles).get("x", 0) if s.time_depth else 0.0)

    kernel, trials = _tuned_by_stand_ins(tmp_path, monkeypatch, assert_matches, ms)
    first_pass = trials[:tuner.TIMED]
    start = min((s for s in first_pass if s.time_depth), key=ms)
    chosen = kernel.report.schedule
    tile = msc.Schedule().time_tile(chosen.time_depth, **dict(chosen.tiles))
    assert tile not in first_pass and ms(tile) < ms(start)
    climbed = [s for s in trials[len(first_pass):] if s.time_depth and not s.prefetch_distance and not s.threads]
    assert tile in climbed
    assert all(any(tuner._steps(a, [b]) == [b] for a in [start, *climbed]) for b in climbed)


def test_the_climb_reaches_a_tile_four_times_as_deep_past_a_slower_one(tmp_path, monkeypatch, assert_matches):
    """A stand-in clock where tiles twice as deep as the model's choice are slower and four times as deep
    faster (as heat2d 4096^2 timed on a 2-core machine): the climb still reaches the deep tile."""
    from msc.targets.cpu import model
    from msc.tune import tuner
    from msc.tune.tuner import Estimate

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    clock = {4: 1.0, 8: 1.2, 16: 0.5}
    monkeypatch.setattr(model, "estimate", lambda poly, shape, s: Estimate(
        1.0 + (s.time_depth + dict(s.tiles).get("x", 0) / 64 if s.time_depth else 99.0)))
    monkeypatch.setattr(tuner.AutoKernel, "_timing",
                        lambda self, kernel, steps: clock.get(kernel.schedule.time_depth, 2.0))
    kernel = heat.compile(target="openmp", schedule="auto", threads=2)
    kernel.budget_s = 60.0
    u0 = np.random.default_rng(7).random((66, 70))
    assert_matches(kernel.run(steps=16, u=u0), heat.reference(steps=16, u=u0))
    first_pass = [parse_schedule(t.schedule) for t in kernel.report.trials[:tuner.TIMED]]
    assert 16 not in {s.time_depth for s in first_pass} and 8 in {s.time_depth for s in first_pass}
    assert kernel.report.schedule.time_depth == 16


def test_auto_tuner_tunes_once_then_uses_its_cache(tmp_path, monkeypatch, capsys, assert_matches):
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    u0 = np.random.default_rng(3).random((66, 70))
    kernel = heat.compile(schedule="auto")
    kernel.budget_s = 3.0
    assert_matches(kernel.run(steps=7, u=u0), heat.reference(steps=7, u=u0))
    report = kernel.report
    assert not report.from_cache and report.trials and report.trials[0].schedule == "Schedule()"
    # the report is what the trials measured: the default's figure is one of its interleaved (median)
    # re-timings after the first pass, and the chosen schedule's figure is a timing of that schedule
    defaults = [trial.ms_per_step for trial in report.trials if trial.schedule == "Schedule()"]
    assert report.default_ms_per_step in defaults[1:]
    chosen = [trial for trial in report.trials if trial.ms_per_step == report.ms_per_step]
    assert chosen, "the chosen figure is one of the recorded timings"
    assert report.speedup == pytest.approx(report.default_ms_per_step / report.ms_per_step)
    # a thread count only where fewer threads won (else each run takes the cores free then)
    assert report.schedule.threads in (None, 1)
    assert any(report.schedule == parse_schedule(t.schedule) for t in chosen)
    assert "msc tune: [1/" in capsys.readouterr().err  # progress is reported

    again = heat.compile(schedule="auto")
    assert_matches(again.run(steps=7, u=u0), heat.reference(steps=7, u=u0))
    assert again.report.from_cache and again.report.trials == []
    assert again.report.schedule == report.schedule
    assert (tmp_path / "tuning" / "stencils.json").exists()

    with pytest.raises(ScheduleError, match="tuned for a problem size"):
        heat.emit("openmp", tmp_path / "x", schedule="auto")


def test_the_tuner_s_budget_and_progress_lines_are_set_on_the_kernel(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    kernel = heat.compile(schedule="auto")
    kernel.budget_s, kernel.echo = 0.5, False
    assert kernel.budget_s == 0.5
    kernel.run(steps=4, u=np.random.default_rng(0).random((18, 20)))
    assert kernel.report is not None and not kernel.report.from_cache and "msc tune" not in capsys.readouterr().err
    for name, bad in [("budget_s", -1), ("budget_s", float("inf")), ("budget_s", "10"), ("budget_s", True),
                      ("echo", 1), ("echo", None)]:
        with pytest.raises(ScheduleError, match=f"^{name}: "):
            setattr(kernel, name, bad)
