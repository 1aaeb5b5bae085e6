"""The athread target under the emulator: the generated stencils (with random
tile schedules) against the reference interpreter on both chips, the DMA
and LDM counters against what the tile shape needs, the LDM capacity check
before any code is written, a missing DMA wait caught, and the emitted tree
built with `make EMULATE=1` and run on .npy files."""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from stencil_gen import generate, program_arguments

import msc
from msc.codegen import get_target
from msc.errors import ScheduleError, TargetError
from msc.runtime import athread_emu
from msc.runtime.athread_emu import AthreadKernel, EmulatorError
from msc.targets.sunway import athread_plan
from msc.targets.sunway.chips import STATIC_LDM

CHIPS = sorted(athread_emu.LDM_BYTES)


def chip_of(seed: int) -> str:
    return CHIPS[seed % 2]


def athread_schedule(seed: int, stencil: msc.Stencil) -> msc.Schedule:
    """A random schedule of the primitives the athread target takes: tiles
    (some dimensions; halved until they fit the chip's LDM), LDM staging named,
    a parallel tile loop, an unrolled point loop."""
    rng = random.Random(seed * 104729)
    dims = list(stencil.ir.dims)
    tiled = rng.sample(dims, rng.randint(1, len(dims)))
    sizes = {d: rng.choice([1, 2, 3, 5, 8, 16]) for d in tiled}
    while _ldm_bytes(stencil, msc.Schedule().tile(**sizes), chip_of(seed)) > athread_plan.ldm_capacity(chip_of(seed)):
        largest = max(sizes, key=lambda d: sizes[d])
        sizes[largest] //= 2
    s = msc.Schedule().tile(**sizes)
    for f in rng.sample(stencil.ir.fields, rng.randint(0, len(stencil.ir.fields))):
        s = s.cache_read(f.name)
    for f in rng.sample(stencil.ir.written_fields, rng.randint(0, len(stencil.ir.written_fields))):
        s = s.cache_write(f.name)
    if rng.random() < 0.5:
        s = s.parallel(f"{rng.choice(tiled)}_tile")
    if rng.random() < 0.4:
        s = s.unroll(rng.choice(dims), rng.choice([2, 4]))
    return s


def time_tile_schedule(seed: int, stencil: msc.Stencil) -> msc.Schedule:
    """A random time tile (depth, some dimensions tiled; sizes, then depth, reduced until it fits the LDM)."""
    rng = random.Random(seed * 7907)
    dims = list(stencil.ir.dims)
    depth = rng.choice([1, 2, 3, 5])
    sizes = {d: rng.choice([2, 3, 4, 7, 16]) for d in rng.sample(dims, rng.randint(1, len(dims)))}
    while _ldm_bytes(stencil, msc.Schedule().time_tile(depth, **sizes), chip_of(seed)) > athread_plan.ldm_capacity(chip_of(seed)):
        largest = max(sizes, key=lambda d: sizes[d])
        if sizes[largest] > 1:
            sizes[largest] //= 2
        else:
            depth -= 1
    s = msc.Schedule().time_tile(depth, **sizes)
    return s.parallel(f"{next(iter(sizes))}_tile") if rng.random() < 0.3 else s


def _ldm_bytes(stencil: msc.Stencil, schedule: msc.Schedule, chip: str, dtype: str = "float64") -> int:
    ir = stencil.poly(dtype).ir
    full = athread_plan.athread_schedule(schedule, ir, chip)
    kernels = athread_plan.slave_kernels(ir, tuple(size for _, size in full.tiles), full.time_depth)
    return max(k.ldm_bytes(8 if ir.dtype == "float64" else 4) for k in kernels)


def _run_case(seed: int, schedule: msc.Schedule | None, assert_matches) -> AthreadKernel:
    case = generate(seed)
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    kernel = case.stencil.compile(target="athread", dtype=case.dtype, schedule=schedule, chip=chip_of(seed))
    assert isinstance(kernel, AthreadKernel) and kernel.chip == chip_of(seed)
    assert_matches(kernel.run(steps=case.steps, **case.inputs), expected, case.dtype, (case, schedule))
    stats = kernel.last_run
    depth = schedule.time_depth if schedule else 0
    # a time tile spawns per tile of steps; the rest once for the whole run (periodic wraps on the CPEs too)
    assert stats.spawns == (-(-case.steps // depth) if depth else 1)
    assert 0 < stats.peak_ldm <= athread_emu.LDM_BYTES[chip_of(seed)]
    return kernel


@pytest.mark.parametrize("seed", range(48))
def test_generated_stencils_match_reference(seed, assert_matches):
    _run_case(seed, None, assert_matches)


# a quarter of the seeds by default, an eighth more slow (each run starts 64 emulated CPEs)
@pytest.mark.parametrize("seed", [pytest.param(s, marks=[] if s % 4 == 0 else [pytest.mark.slow])
                                  for s in range(48) if s % 8 in (0, 2, 4)])
def test_random_tile_schedules_match_reference(seed, assert_matches):
    _run_case(seed, athread_schedule(seed, generate(seed).stencil), assert_matches)


def _time_tileable(seed: int) -> bool:
    """A dirichlet stencil whose one-step time tile of one point fits the chip's LDM (the halo of a
    many-statement, wide-radius 3D stencil alone may not)."""
    stencil = generate(seed).stencil
    smallest = msc.Schedule().time_tile(1, **{d: 1 for d in stencil.ir.dims})
    return (stencil.ir.boundary == "dirichlet"
            and _ldm_bytes(stencil, smallest, chip_of(seed)) <= athread_plan.ldm_capacity(chip_of(seed)))


DIRICHLET = [s for s in range(48) if _time_tileable(s)]


# 1-3D, one to three statements, cheap under the emulator (time tiles of a wide-radius 3D stencil
# are tiny under their halos and take up to a minute each emulated, too long for the suite)
TIME_TILE_SAMPLE = [3, 6, 7, 8, 12, 27, 40]


@pytest.mark.parametrize("seed", TIME_TILE_SAMPLE)
def test_random_time_tiles_match_reference(seed, assert_matches):
    assert _time_tileable(seed)
    _run_case(seed, time_tile_schedule(seed, generate(seed).stencil), assert_matches)


# 2D dirichlet stencils of windows 1-3, one to three statements, an input, radius 1-4; 3D ones of windows 1-3,
# one to three statements, an input, radius 1-4 (anisotropic in one)
STREAMED_SAMPLE = [7, 9, 11, 12, 13, 16, 36, 40, 6, 10, 24, 26, 27, 33, 35, 42]


@pytest.mark.parametrize("seed", STREAMED_SAMPLE)
def test_streamed_time_tiles_match_reference(seed, assert_matches):
    """A 2D or 3D time tile streams its rows (planes) through rings in LDM. 7 steps in tiles of 3 end with a
    one-step tile, shallower than a window of 2 or 3: the levels it fetches are then among those it writes back
    (a 3D stencil of several statements or a wide radius may take tiles of 2 or 1 steps: its halo of
    depth x statements x radius fills the LDM)."""
    case = generate(seed)
    stencil = case.stencil
    assert stencil.ir.ndim in (2, 3) and stencil.ir.boundary == "dirichlet"
    chip = chip_of(seed)
    for depth in (3, 2, 1):
        schedule = msc.Schedule().time_tile(depth, x=5, y=24) if stencil.ir.ndim == 2 else \
            msc.Schedule().time_tile(depth, x=3, y=2, z=8)
        if _ldm_bytes(stencil, schedule, chip, case.dtype) > athread_plan.ldm_capacity(chip):  # e.g. radius 4
            chip = "sw26010pro"
        if _ldm_bytes(stencil, schedule, chip, case.dtype) <= athread_plan.ldm_capacity(chip):
            break
    assert depth == 3 or stencil.ir.ndim == 3
    expected = stencil.reference(steps=7, dtype=case.dtype, **case.inputs)
    kernel = stencil.compile(target="athread", dtype=case.dtype, schedule=schedule, chip=chip)
    assert_matches(kernel.run(steps=7, **case.inputs), expected, case.dtype, case)
    assert kernel.last_run.spawns == -(-7 // depth)
    if stencil.ir.ndim == 2:
        assert kernel.last_run.transfers == kernel.last_run.dma_blocks  # a row a transfer, each one block
    else:  # a plane a transfer, a block per row of it (the box's rows are never whole here: the halo is clipped)
        assert kernel.last_run.transfers < kernel.last_run.dma_blocks


@pytest.fixture
def heat2d() -> msc.Stencil:
    @msc.stencil
    def heat(u, alpha):
        u[msc.t + 1, msc.x, msc.y] = u[msc.t, msc.x, msc.y] + alpha * (
            u[msc.t, msc.x - 1, msc.y] + u[msc.t, msc.x + 1, msc.y] + u[msc.t, msc.x, msc.y - 1]
            + u[msc.t, msc.x, msc.y + 1] - 4 * u[msc.t, msc.x, msc.y])

    return heat


def _tiles(n: int, b: int) -> list[int]:
    return [min(b, n - i) for i in range(0, n, b)]


def test_a_last_time_tile_shallower_than_the_depth_matches_reference(heat2d):
    u = np.random.default_rng(6).random((20, 30))
    kernel = heat2d.compile(target="athread", schedule=msc.Schedule().time_tile(3, x=8, y=8))
    result = kernel.run(steps=7, u=u, alpha=0.1)  # spawns of 3, 3 and 1 steps
    assert kernel.last_run.spawns == 3
    np.testing.assert_allclose(result["u"], heat2d.reference(steps=7, u=u, alpha=0.1)["u"], rtol=1e-12, atol=0)


@pytest.mark.parametrize("chip", CHIPS)
def test_counters_are_the_dma_a_tile_shape_needs(heat2d, chip):
    """Per step: each tile is streamed along x, so it gets each row of its box plus
    a halo of 1 (one transfer, one block) and puts each row of the tile; a CPE's
    LDM is a window of 4 rows of the footprint and two output rows (one block
    from ldm_malloc, rounded to 32 bytes), the stack reserve and the
    __thread_local reply and status words."""
    shape, tile, steps = (40, 70), (8, 16), 3
    u = np.random.default_rng(1).random(shape)
    kernel = heat2d.compile(target="athread", schedule=msc.Schedule().tile(x=8, y=16), chip=chip)
    result = kernel.run(steps=steps, u=u, alpha=0.1)
    np.testing.assert_allclose(result["u"], heat2d.reference(steps=steps, u=u, alpha=0.1)["u"], rtol=1e-12, atol=0)
    hs, ws = _tiles(shape[0] - 2, tile[0]), _tiles(shape[1] - 2, tile[1])
    stats = kernel.last_run
    assert stats.get_bytes == steps * sum((h + 2) * (w + 2) * 8 for h in hs for w in ws)
    assert stats.put_bytes == steps * (shape[0] - 2) * (shape[1] - 2) * 8
    assert stats.transfers == stats.dma_blocks == steps * sum((h + 2) + h for h in hs for _ in ws)
    assert stats.mean_dma_block == (stats.get_bytes + stats.put_bytes) / stats.dma_blocks
    ldm = (4 * (tile[1] + 2) + 2 * tile[1]) * 8
    assert 6 * 4 <= stats.static_ldm <= STATIC_LDM  # got[2], put[2], the status put's reply, the status
    assert stats.peak_ldm == athread_emu.STACK_RESERVE + stats.static_ldm + -(-ldm // 32) * 32
    assert stats.dma_bytes_per_step == (stats.get_bytes + stats.put_bytes) / steps


@pytest.mark.parametrize("chip", CHIPS)
def test_over_capacity_tile_is_refused_before_any_code_is_written(heat2d, chip, tmp_path):
    capacity = athread_emu.LDM_BYTES[chip] - athread_emu.STACK_RESERVE - STATIC_LDM
    assert athread_plan.ldm_capacity(chip) == capacity
    # streamed along x, a tile holds rows: a window of 4 rows of y+2 points and two output rows of y
    width = 2048 if chip == "sw26010" else 8192
    need = (4 * (width + 2) + 2 * width) * 8
    assert need > capacity
    out = tmp_path / "tree"
    with pytest.raises(ScheduleError) as err:
        heat2d.emit("athread", out, schedule=msc.Schedule().tile(x=64, y=width), chip=chip)
    text = str(err.value)
    for words in ("stencil 'heat'", f"x=64, y={width}", f"u 4x{width + 2}", str(need), str(capacity), "'athread'"):
        assert words in text, (words, text)
    assert not out.exists()
    with pytest.raises(ScheduleError, match=str(need)):
        heat2d.compile(target="athread", schedule=msc.Schedule().tile(x=64, y=width), chip=chip)
    # half the width fits, and a default tile is shrunk to fit this chip
    heat2d.emit("athread", out, schedule=msc.Schedule().tile(x=64, y=width // 2), chip=chip)
    assert (out / "slave.c").is_file()


def test_what_the_target_lacks_is_named(heat2d, tmp_path):
    with pytest.raises(TargetError, match="chip must be one of sw26010, sw26010pro, not 'sw39010'"):
        heat2d.compile(target="athread", chip="sw39010")
    with pytest.raises(TargetError, match="chip must be one of"):
        heat2d.emit("athread", tmp_path / "x", chip="x86")
    for schedule, name in ((msc.Schedule().tile(x=8).compute_at("x_tile"), "compute_at"),
                           (msc.Schedule().vectorize("y"), "vectorize"),
                           (msc.Schedule().stream_stores(), "stream_stores")):
        with pytest.raises(ScheduleError, match=rf"target 'athread' has no {name}\(\)"):
            heat2d.emit("athread", tmp_path / "x", schedule=schedule)
    with pytest.raises(ScheduleError, match="only a tile loop can be parallel"):
        heat2d.emit("athread", tmp_path / "x", schedule=msc.Schedule().tile(x=8).parallel("y"))
    # under MPI a one-step time tile would have to compute a box of its block while halos travel
    with pytest.raises(ScheduleError, match=r"a time tile computes whole blocks.*time_tile\(1, \.\.\.\)"):
        heat2d.emit("athread+mpi", tmp_path / "x", schedule=msc.Schedule().time_tile(1, x=8))
    assert not (tmp_path / "x").exists()


def _emit_and_break(stencil: msc.Stencil, directory: Path, schedule: msc.Schedule, wait: str,
                    call: str = "MSC_WAIT", chip: str = "sw26010") -> AthreadKernel:
    """The emitted tree with the statement `call(wait);` (a DMA wait by default) deleted from slave.c, built
    with the emulator."""
    stencil.emit("athread", directory, schedule=schedule, chip=chip)
    slave = directory / "slave.c"
    text = slave.read_text()
    line = re.compile(rf"^\s*{call}\({re.escape(wait)}\);.*\n", re.MULTILINE)
    assert len(line.findall(text)) == 1, text
    slave.write_text(line.sub("", text))
    athread_emu.build_tree(directory, chip)
    return AthreadKernel(stencil.ir, directory / stencil.name, chip, schedule)


def test_a_missing_dma_wait_is_caught(heat2d, tmp_path):
    u = np.random.default_rng(2).random((50, 40))
    expected = heat2d.reference(steps=2, u=u, alpha=0.1)["u"]
    schedule = msc.Schedule().tile(x=1, y=8)  # 48 x 5 tiles of one row: every CPE has three or four
    # no wait for a tile's fetch: the CPE computes on what is not there yet, and returns with the gets in flight
    no_get_wait = _emit_and_break(heat2d, tmp_path / "get", schedule, "got, gets")
    # (the first CPE to notice reports it: refilling the buffer, freeing it, or returning with the get pending)
    with pytest.raises(EmulatorError, match=r"athread emulator: CPE \d+ .*(athread_get.* not (yet )?waited for|"
                                            r"never waited for \(first: athread_get)"):
        no_get_wait.run(steps=2, u=u, alpha=0.1)
    # no wait before an output buffer is reused: the next tile's compute rewrites a buffer a put still sends
    no_put_wait = _emit_and_break(heat2d, tmp_path / "put", schedule, "&put[s], puts[s]")
    with pytest.raises(EmulatorError, match=r"athread emulator: CPE \d+ .*athread_put: its LDM buffer 0x[0-9a-f]+ "
                                            r"\(64 bytes\) was written before the wait for it"):
        no_put_wait.run(steps=2, u=u, alpha=0.1)
    # the same tree with its waits computes the reference
    heat2d.emit("athread", tmp_path / "ok", schedule=schedule, chip="sw26010")
    athread_emu.build_tree(tmp_path / "ok", "sw26010")
    good = AthreadKernel(heat2d.ir, tmp_path / "ok" / "heat", "sw26010", schedule).run(steps=2, u=u, alpha=0.1)
    np.testing.assert_allclose(good["u"], expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("chip", CHIPS)
def test_one_spawn_runs_every_step_and_a_missing_barrier_is_caught(heat2d, tmp_path, chip):
    u = np.random.default_rng(5).random((40, 50))
    expected = heat2d.reference(steps=3, u=u, alpha=0.1)["u"]
    schedule = msc.Schedule().tile(x=4, y=16)
    kernel = heat2d.compile(target="athread", schedule=schedule, chip=chip)
    np.testing.assert_allclose(kernel.run(steps=3, u=u, alpha=0.1)["u"], expected, rtol=1e-12, atol=0)
    assert kernel.last_run.spawns == 1  # the CPEs step through the run themselves
    # without the array barrier between steps, a CPE fetches halo rows another CPE puts in the same step:
    # caught whichever comes first (a get after the put, or the put after the get)
    no_barrier = _emit_and_break(heat2d, tmp_path / "sync", schedule, "", call="MSC_SYNC", chip=chip)
    with pytest.raises(EmulatorError, match=r"athread emulator: CPE \d+ .*: (reads|writes) byte \d+ of the buffer "
                                            r"0x[0-9a-f]+, which CPE \d+ (put|read) with no barrier between: a missing "
                                            r"athread_syn"):
        no_barrier.run(steps=3, u=u, alpha=0.1)


def test_an_ldm_smaller_than_the_code_assumed_is_reported(heat2d, tmp_path):
    # sources for the Pro's 256 KB of LDM built for SW26010's 64 KB: ldm_malloc returns NULL, as on the chip,
    # and the generated code tells the MPE instead of computing on it
    schedule = msc.Schedule().tile(x=4, y=2048)  # 4 rows of 2050 and 2 of 2048 doubles: 98 KB
    heat2d.emit("athread", tmp_path, schedule=schedule, chip="sw26010pro")
    athread_emu.build_tree(tmp_path, "sw26010")
    kernel = AthreadKernel(heat2d.ir, tmp_path / "heat", "sw26010", schedule)
    with pytest.raises(EmulatorError, match=r"msc: stencil 'heat' \(sw26010pro\): ldm_malloc returned NULL on CPE 0: "
                                            "its LDM is smaller than the generated code assumed"):
        kernel.run(steps=1, u=np.ones((6, 2050)), alpha=0.1)


@pytest.mark.parametrize("seed", [5, 14])
def test_emitted_tree_builds_with_the_emulator_and_gives_the_reference(seed, tmp_path, assert_matches):
    case = generate(seed)
    chip = chip_of(seed)
    out = tmp_path / "tree"
    case.stencil.emit("athread", out, dtype=case.dtype, schedule=athread_schedule(seed, case.stencil), chip=chip)
    assert {"host.c", "slave.c", "main.c", "npy.h", "Makefile", "athread_emu.c"} <= {p.name for p in out.iterdir()}
    slave = (out / "slave.c").read_text()
    assert ("CRTS_dma_iget" in slave) == (chip == "sw26010pro") and ("athread_get(" in slave) == (chip == "sw26010")
    done = subprocess.run(["make", "-s", "-C", str(out), "EMULATE=1"], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    program = out / case.stencil.name
    usage = subprocess.run([str(program), "--help"], check=False, capture_output=True, text=True)
    assert "--steps N" in usage.stdout and "--threads" not in usage.stdout
    written = [f.name for f in case.stencil.ir.written_fields]
    command = [str(program), "--steps", str(case.steps), *program_arguments(case.inputs, tmp_path)]
    for name in written:
        command += ["--out", f"{name}={tmp_path / ('out_' + name + '.npy')}"]
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = {name: np.load(tmp_path / f"out_{name}.npy") for name in written}
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    assert_matches(result, expected, case.dtype, case)
    # a build for the hardware after the emulator's rebuilds every object (they share names) and relinks
    plan = subprocess.run(["make", "-n", "-C", str(out)], check=False, capture_output=True, text=True).stdout
    compiler = {"sw26010": "sw5cc", "sw26010pro": "swgcc"}[chip]
    assert all(f"{compiler} " in plan and f"-c {src} -o {src[:-2]}." in plan for src in ("main.c", "host.c", "slave.c"))


def test_kernels_of_emulated_targets_say_so_in_one_line(heat2d):
    athread = heat2d.compile(target="athread")
    cuda = heat2d.compile(target="cuda", emulate=True)
    assert repr(athread) == ("<msc kernel 'heat' target=athread (emulated) chip=sw26010pro dtype=float64 "
                             "schedule=default>")
    assert repr(cuda) == "<msc kernel 'heat' target=cuda (emulated) dtype=float64 schedule=default>"
    with pytest.raises(msc.MscError, match="threads must be a positive integer"):
        heat2d.compile(target="athread", threads=-3)


def test_an_athread_kernel_refuses_comm_and_points_at_the_mpi_program(heat2d):
    """comm= was reported as an unknown stencil argument, and a DistributedKernel over an athread kernel
    failed on an attribute it lacks."""
    from msc.runtime.distributed import DistributedError, DistributedKernel

    kernel, u0 = heat2d.compile(target="athread"), np.zeros((8, 10))
    for call in (lambda: kernel.run(steps=1, comm=object(), u=u0, alpha=0.1),
                 lambda: kernel.start(comm=object(), u=u0, alpha=0.1)):
        with pytest.raises(msc.StencilArgumentError, match="an athread kernel runs one core group and takes no "
                                                           "comm=: emit target 'athread\\+mpi'"):
            call()
    with pytest.raises(DistributedError, match="a kernel of type AthreadKernel runs on one node only: .* emit target "
                                              "'athread\\+mpi'"):
        DistributedKernel(kernel, None, u0.shape)


def test_cli_passes_chip_only_when_given(tmp_path, heat2d):
    from msc.cli import main

    source = tmp_path / "heat.py"
    source.write_text("import msc\n\n\n@msc.stencil\ndef heat(u):\n    u[msc.t + 1, msc.x] = 0.5 * (u[msc.t, msc.x - 1] + u[msc.t, msc.x + 1])\n")
    assert main(["emit", f"{source}:heat", "--target", "athread", "-o", str(tmp_path / "pro")]) == 0
    assert "CRTS_dma_iget" in (tmp_path / "pro" / "slave.c").read_text()
    assert main(["emit", f"{source}:heat", "--target", "openmp", "-o", str(tmp_path / "omp")]) == 0
    assert main(["emit", f"{source}:heat", "--target", "openmp", "-o", str(tmp_path / "x"), "--chip", "sw26010"]) != 0
    assert get_target("athread").emit_options == ("chip",)


@pytest.mark.parametrize("chip", CHIPS)
def test_auto_schedule_is_a_printed_model_that_counts_what_the_emulator_counts(heat2d, chip, capsys):
    from msc.targets.sunway.athread_model import predict

    u = np.random.default_rng(3).random((70, 90))
    kernel = heat2d.compile(target="athread", schedule="auto", chip=chip)
    steps = 8  # a whole number of the candidates' time-tile depths
    result = kernel.run(steps=steps, u=u, alpha=0.1)
    np.testing.assert_allclose(result["u"], heat2d.reference(steps=steps, u=u, alpha=0.1)["u"], rtol=1e-12, atol=0)
    printed = capsys.readouterr().err  # the tuner's lines (msc/tune/tuner.py), as on every platform
    assert "cost model" in printed and "not a measurement" in printed and chip in printed
    report, stats = kernel.report.estimate.detail, kernel.last_run
    assert report is not None and str(report.schedule) in printed
    if not kernel.report.from_cache:  # the least predicted time of all: rows of 720 bytes keep every
        # candidate below the DMA floor (ADR 0056), so none ranks ahead of the rest
        assert len(kernel.report.trials) > 10
        assert "msc tune: msc:" not in printed and "candidates ranked by the cost model)>" in repr(kernel.report)
        assert kernel.report.ms_per_step == min(t.ms_per_step for t in kernel.report.trials)
    assert (report.get_bytes * steps, report.put_bytes * steps, report.transfers * steps,
            report.dma_blocks * steps) == (stats.get_bytes, stats.put_bytes, stats.transfers, stats.dma_blocks)
    # the same for a time tile the model did not choose, and a 3D spatial tile
    for stencil, shape, schedule in ((heat2d, (37, 45), msc.Schedule().time_tile(4, x=8, y=16)),
                                     (generate(5).stencil, (12, 13, 45), msc.Schedule().tile(x=3, y=4))):
        case_inputs = {f.name: np.random.default_rng(4).random(shape) for f in stencil.ir.fields}
        case_inputs.update({p: 0.1 for p in stencil.ir.params})
        k = stencil.compile(target="athread", schedule=schedule, chip=chip)
        k.run(steps=4, **case_inputs)
        model = predict(stencil.ir, shape, schedule, chip)
        assert (model.get_bytes * 4, model.put_bytes * 4, model.transfers * 4, model.dma_blocks * 4) == (
            k.last_run.get_bytes, k.last_run.put_bytes, k.last_run.transfers, k.last_run.dma_blocks), schedule


@pytest.mark.parametrize("ndim", [1, 3])
def test_model_counts_a_1d_or_3d_time_tile_as_the_emulator_does(ndim):
    """A 1D time tile (boxes, two sets alternating) and a 3D one (streamed planes): partial tiles, two spawns."""
    from msc import t, x, y, z
    from msc.targets.sunway.athread_model import predict

    if ndim == 3:
        @msc.stencil
        def heat(u, alpha):
            u[t + 1, x, y, z] = u[t, x, y, z] + alpha * (u[t, x - 1, y, z] + u[t, x + 1, y, z] + u[t, x, y - 1, z]
                                                       + u[t, x, y + 1, z] + u[t, x, y, z - 1] + u[t, x, y, z + 1]
                                                       - 6 * u[t, x, y, z])

        shape, schedule = (10, 9, 14), msc.Schedule().time_tile(2, x=3, y=4, z=12)  # interior 8 x 7 x 12
    else:
        @msc.stencil
        def heat(u, alpha):
            u[t + 1, x] = u[t, x] + alpha * (u[t, x - 1] + u[t, x + 1] - 2 * u[t, x])

        shape, schedule = (1000,), msc.Schedule().time_tile(2, x=7)  # 142 full tiles and one of 4 points
    steps = 4
    u = np.random.default_rng(7).random(shape)
    kernel = heat.compile(target="athread", schedule=schedule)
    result = kernel.run(steps=steps, u=u, alpha=0.1)
    np.testing.assert_allclose(result["u"], heat.reference(steps=steps, u=u, alpha=0.1)["u"], rtol=1e-12, atol=0)
    model = predict(heat.ir, shape, schedule, kernel.chip)
    assert (model.get_bytes * steps, model.put_bytes * steps, model.transfers * steps, model.dma_blocks * steps) == (
        kernel.last_run.get_bytes, kernel.last_run.put_bytes, kernel.last_run.transfers, kernel.last_run.dma_blocks)


@pytest.mark.parametrize("seed", [0, 4, 7, 10])  # 2D periodic, 1D periodic with an input, 2D and 3D dirichlet; 2-3 levels
def test_start_and_advance_continue_as_one_run(seed, assert_matches):
    """A Simulation of an athread kernel: each advance runs the program from every
    level the next step reads, as CompiledKernel.start does on the CPU."""
    case = generate(seed)
    kernel = case.stencil.compile(target="athread", dtype=case.dtype)
    sim = kernel.start(**case.inputs)
    first = case.steps // 3
    sim.advance(first)
    sim.advance(case.steps - first)
    assert sim.step == case.steps
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    assert_matches({name: np.array(level) for name, level in sim.fields.items()}, expected, case.dtype, case)


def test_auto_kernels_start_too(heat2d):
    u = np.random.default_rng(8).random((30, 40))
    kernel = heat2d.compile(target="athread", schedule="auto")
    sim = kernel.start(u=u, alpha=0.1)
    sim.advance(3)
    sim.advance(5)
    np.testing.assert_allclose(sim.fields["u"], heat2d.reference(steps=8, u=u, alpha=0.1)["u"], rtol=1e-12, atol=0)
    assert "/* ---- host.c ---- */" in kernel.source and "/* ---- slave.c ---- */" in kernel.source


def test_a_checkpoint_resumes_on_athread(heat2d, tmp_path):
    """sim.save, then kernel.resume: the run goes on as if never stopped."""
    u = np.random.default_rng(9).random((20, 24))
    kernel = heat2d.compile(target="athread")
    sim = kernel.start(u=u, alpha=0.1)
    sim.advance(3)
    sim.save(tmp_path / "run.nc")
    resumed = kernel.resume(tmp_path / "run.nc")
    assert resumed.step == 3
    resumed.advance(4)
    np.testing.assert_allclose(resumed.fields["u"], heat2d.reference(steps=7, u=u, alpha=0.1)["u"], rtol=1e-12,
                               atol=0)


def test_dma_bandwidth_by_block_size_is_the_measured_table():
    from msc.targets.sunway.chips import CHIPS, DMA_GB_S

    sw, pro = CHIPS["sw26010"], CHIPS["sw26010pro"]
    for block, gb_s in DMA_GB_S:
        assert sw.dma_gb_s(block) == pytest.approx(gb_s)
        assert pro.dma_gb_s(block) == pytest.approx(gb_s * pro.dma_scale)
    assert sw.dma_gb_s(64) == pytest.approx(DMA_GB_S[0][1] / 2)  # a fixed cost per block below 128 bytes
    assert sw.dma_gb_s(1 << 20) == sw.ceiling_gb_s == 22.0
    assert DMA_GB_S[1][1] < sw.dma_gb_s(512) < DMA_GB_S[2][1]  # interpolated between 256 B and 1 KB
    widths = [sw.dma_gb_s(b) for b in range(8, 20000, 8)]
    assert widths == sorted(widths)


def _heat3d() -> msc.Stencil:
    from msc import t, x, y, z

    @msc.stencil
    def heat3d(u, alpha):
        u[t + 1, x, y, z] = u[t, x, y, z] + alpha * (u[t, x - 1, y, z] + u[t, x + 1, y, z] + u[t, x, y - 1, z]
                                                     + u[t, x, y + 1, z] + u[t, x, y, z - 1] + u[t, x, y, z + 1]
                                                     - 6 * u[t, x, y, z])

    return heat3d


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("ndim", [2, 3])
def test_auto_tiles_move_blocks_of_a_kilobyte_or_more(heat2d, chip, ndim):
    """heat2d and heat3d with rows of 2 KB or more, at full size and small: the model's choice moves DMA blocks
    of at least 1 KB on average, at 75% or more of the chip's ceiling by the measured table (the DMA floor,
    ADR 0056). Where a candidate below the floor is predicted faster, the choice says so and names it. The
    emulator counts the blocks the model does, and both run as the reference does."""
    from msc.targets.sunway.athread import PLATFORMS
    from msc.targets.sunway.athread_model import caveat, fastest
    from msc.tune.tuner import model_choice

    stencil = heat2d if ndim == 2 else _heat3d()
    shapes = ((4096, 4096), (258, 258)) if ndim == 2 else ((256, 256, 256), (34, 34, 258))
    for shape in shapes:
        said: list[str] = []
        model = model_choice(stencil.poly(), shape, 1, PLATFORMS[chip], say=said.append).estimate.detail
        best = fastest(stencil.ir, shape, chip)
        assert model.mean_dma_block >= 1024, (shape, model.describe())
        assert model.dma_gb_s >= 0.75 * model.chip.ceiling_gb_s, (shape, model.describe())
        assert caveat(model) == ""
        assert best.step_s <= model.step_s
        if best.step_s < model.step_s:
            assert caveat(best) and f"{best.schedule} is predicted faster" in said[-1], said
    u = np.random.default_rng(8).random(shape)
    for chosen in (model, best):
        kernel = stencil.compile(target="athread", schedule=chosen.schedule, chip=chip)
        steps = max(chosen.schedule.time_depth, 1)
        result = kernel.run(steps=steps, u=u, alpha=0.1)
        np.testing.assert_allclose(result["u"], stencil.reference(steps=steps, u=u, alpha=0.1)["u"], rtol=1e-12, atol=0)
        assert kernel.last_run.dma_blocks == chosen.dma_blocks * steps
