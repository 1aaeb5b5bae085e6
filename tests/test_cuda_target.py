"""The CUDA target: the generated stencils (with random schedules) run
through the CUDA emulator (`emulate=True`: the same kernel.cu built by g++)
against the reference interpreter; every generated kernel compiles with
nvcc for sm_80 and sm_90, warnings as errors (a third of them by default,
the rest marked slow); device arrays in place; the emitted nvcc project;
the errors of over-capacity schedules and of a machine without a GPU.
Shared-memory staging and time tiles run with the emulator's blocks in
reverse order, where two blocks writing one byte is an error.
With MSC_CUDA_ON_DEVICE=1 (benchmarks/gpu.sh, on a machine with a GPU) the
same tests build with nvcc for the device and run there instead."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from stencil_gen import generate, program_arguments
from test_schedules import random_schedule

import msc
from msc.codegen import get_target, target_names
from msc.errors import ScheduleError, TargetError
from msc.runtime.build import atomic_write_text, cache_dir
from msc.targets.gpu import cuda_stream
from msc.targets.gpu import cuda_time_tile as time_tile
from msc.targets.gpu.cuda import TENSOR_DEPTHS, cuda_candidates
from msc.tune.tuner import AutoKernel

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA compiler) is not on PATH")
ARCHS = ("sm_80", "sm_90")
ON_DEVICE = os.environ.get("MSC_CUDA_ON_DEVICE") == "1"
EMULATE = not ON_DEVICE
host_memory = pytest.mark.skipif(ON_DEVICE, reason="host memory described as device memory is valid only under the emulator")


@pytest.fixture
def reverse_blocks(monkeypatch):
    """Emulated launches run their blocks last first and report a byte two blocks both write;
    a block's threads run last first too (a read of a lower thread's write needs its barrier)."""
    from msc.runtime import cuda_emu

    monkeypatch.setenv(cuda_emu.BLOCK_ORDER, "reverse")
    monkeypatch.setenv(cuda_emu.THREAD_ORDER, "reverse")


def _schedule(seed: int, stencil: msc.Stencil, random: bool) -> msc.Schedule | None:
    """A random schedule (without the x86 store primitives CUDA lacks), or the default."""
    if not random:
        return None
    return replace(random_schedule(seed, stencil), streaming=False, prefetch_distance=0)


def _cases(nvcc: bool) -> list[Any]:
    """Each seed once by default: even seeds with a random schedule, odd ones
    with the default (nvcc: every third seed of those); every eighth seed
    with its other schedule too, marked slow (nvcc: every emulated kernel
    the quick set leaves out, slow)."""
    out = []
    for seed in range(48):
        for random in (False, True):
            quick = random == (seed % 2 == 0)
            if not quick and seed % 8:
                continue
            checked_quick = quick and (seed % 3 == 0 or not nvcc)
            out.append(pytest.param(seed, random, marks=() if checked_quick else pytest.mark.slow,
                                    id=f"{seed}-{'random' if random else 'default'}"))
    return out


def nvcc_check(source: str, directory: Path) -> None:
    """`nvcc -c` for sm_80 and sm_90 in one call, warnings as errors; a source
    checked before (same text, header and nvcc) is not compiled again."""
    from msc.runtime import cuda_emu

    header = b"".join(path.read_bytes() for path in sorted(Path(cuda_emu.EMULATOR_DIR).glob("msc_*.h")))
    digest = hashlib.sha256(source.encode() + header + str(Path(NVCC or "").resolve()).encode()).hexdigest()[:32]
    stamp = cache_dir() / "nvcc-checked" / digest
    if stamp.exists():
        return
    path = directory / "kernel.cu"
    path.write_text(source)
    gencode = [f"-gencode=arch=compute_{a[3:]},code={a}" for a in ARCHS]
    cmd = [str(NVCC), "-c", "--threads", "2", f"-I{cuda_emu.EMULATOR_DIR}", *gencode, "-Werror", "all-warnings",
           "-Xcompiler", "-Wall,-Werror", str(path), "-o", str(directory / "kernel.o")]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    atomic_write_text(stamp, "")


@needs_nvcc
def test_every_launch_fits_the_register_file(tmp_path):
    """Each __global__ function states its block size (__launch_bounds__), so ptxas keeps
    registers x threads within the 64K registers of a multiprocessor: on an H200 this
    float32 time tile (442 threads) took 216 registers without it, and its launch failed
    with 'too many resources requested for launch'."""
    import re

    from msc.runtime import cuda_emu

    case = generate(20)
    source = get_target("cuda").source(case.stencil.poly(case.dtype), msc.Schedule().time_tile(5, y=7, z=16))
    bounds = dict((name, int(n)) for n, name in re.findall(r"__launch_bounds__\((\d+)\) (\w+)\(", source))
    assert "msc_run_k0" in bounds
    (tmp_path / "kernel.cu").write_text(source)
    proc = subprocess.run([str(NVCC), "-c", "-arch=sm_90", "-Xptxas", "-v", f"-I{cuda_emu.EMULATOR_DIR}",
                           str(tmp_path / "kernel.cu"), "-o", str(tmp_path / "kernel.o")],
                          check=True, capture_output=True, text=True)
    used = re.findall(r"entry function '(\w+)'.*?Used (\d+) registers", proc.stderr, re.S)
    for mangled, registers in used:
        for name, threads in bounds.items():
            if name in mangled:
                assert int(registers) * threads <= 65536, (name, registers, threads)
    assert any("msc_run_k0" in m for m, _ in used)


@needs_nvcc
def test_default_kernels_fit_64_registers_without_spills(tmp_path):
    """benchmarks/cuda_resources.py (ptxas for sm_90) on the four standard stencils' default
    launches in float64 (float32's take as many registers: benchmarks/results/cuda_resources.json):
    at most 64 registers, nothing spilled, and the occupancy it reports."""
    import json
    import sys

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "resources.json"
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "cuda_resources.py"), "--json", str(out),
                           "--dtypes", "float64"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              filter(None, [str(root), os.environ.get("PYTHONPATH")]))})
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    assert {r["stencil"] for r in rows} == {"heat2d", "box2d9p", "heat3d", "box3d27p"}
    for row in rows:
        assert row["registers"] <= 64 and row["spill_bytes"] == 0, row
        assert 0.5 <= row["occupancy"] <= 1.0, row


@needs_nvcc
def test_32_bit_indices_take_fewer_instructions(tmp_path):
    """benchmarks/cuda_resources.py --sass (cuobjdump, of the test extra) on heat3d's and
    box2d9p's default kernels in float64: the int instantiation's loop takes at most 0.85
    of the long one's SASS instructions per plane (0.47 and 0.71 when measured), and each
    gets its instructions per update (the model's issue bound); heat3d's grid-mapped kernel
    at most 0.85 of the long one's per point (0.67 when measured)."""
    import json
    import sys

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "benchmarks"))
    from cuda_resources import sass_path

    if sass_path() is None:
        pytest.skip("cuobjdump and nvdisasm are not installed (pip install -e '.[test]' on x86-64 Linux has them)")
    out = tmp_path / "sass.json"
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "cuda_resources.py"), "--sass", "--json", str(out),
                           "--only", "heat3d,box2d9p", "--dtypes", "float64"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              filter(None, [str(root), os.environ.get("PYTHONPATH")]))})
    assert done.returncode == 0, done.stderr
    rows = {(r["stencil"], r["index"]): r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {(s, i) for s in ("heat3d", "box2d9p") for i in ("int", "long")}
    for name in ("heat3d", "box2d9p"):
        wide, narrow = rows[(name, "long")], rows[(name, "int")]
        assert narrow["instructions_per_plane"] <= 0.85 * wide["instructions_per_plane"], (wide, narrow)
        assert narrow["instructions_per_update"] > narrow["instructions_per_plane"] > 10
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "cuda_resources.py"), "--sass", "--json", str(out),
                           "--only", "heat3d", "--dtypes", "float64", "--schedule", "Schedule().parallel('x')"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              filter(None, [str(root), os.environ.get("PYTHONPATH")]))})
    assert done.returncode == 0, done.stderr
    wide, narrow = sorted(json.loads(out.read_text())["rows"], key=lambda r: r["index"] == "int")  # grid-mapped
    assert narrow["instructions_per_point"] <= 0.85 * wide["instructions_per_point"], (wide, narrow)


def test_sass_counts_take_the_fewest_instructions_between_a_units_mmas():
    """cuda_resources.shortest_path passes a forward branch where that is shorter and never
    takes a backward one, counting the MMAs on its way; mma_instructions counts per MMA on
    the path from a unit's first MMA to its last (in the innermost loop holding them, else in
    the kernel), with each MMA's flops, and one instruction per MMA where no forward path
    joins them."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from cuda_resources import mma_instructions, shortest_path

    def sass(lines: list[str]) -> list[tuple[int, str]]:
        return [(16 * i, text) for i, text in enumerate(lines)]

    straight = sass(["IMAD R1, R2, R3, RZ", "DMMA.8x8x4 R4, R2, R4, RZ", "@P0 BRA 0x50", "LDS R6, [R1]",
                     "LDS R7, [R1+0x8]", "DMMA.8x8x4 R8, R6, R8, RZ", "EXIT"])
    assert shortest_path(straight, 0x10, 0x50) == (3, 2)  # the branch skips both loads
    assert mma_instructions(straight) == (1.5, 512)
    skipped = sass(["DMMA.8x8x4 R4, R2, R4, RZ", "@P0 BRA 0x40", "DMMA.8x8x4 R8, R6, R8, RZ", "LDS R6, [R1]",
                    "DMMA.8x8x4 R8, R6, R8, RZ"])
    assert shortest_path(skipped, 0x0, 0x40) == (3, 2)  # the MMA the branch skips is not on the path
    assert mma_instructions(skipped) == (1.5, 512)
    unconditional = sass(["DMMA.8x8x4 R4, R2, R4, RZ", "BRA 0x30", "LDS R6, [R1]", "DMMA.8x8x4 R8, R6, R8, RZ"])
    assert shortest_path(unconditional, 0x0, 0x30) == (3, 2)
    arms = sass(["@P0 BRA 0x30", "DMMA.8x8x4 R4, R2, R4, RZ", "BRA 0x50", "LDS R6, [R1]",
                 "DMMA.8x8x4 R8, R6, R8, RZ", "EXIT"])  # an MMA in each arm: no path joins them
    assert shortest_path(arms, 0x10, 0x40) is None
    assert mma_instructions(arms) == (1.0, 512)
    looped = sass(["MOV R1, RZ", "HMMA.1684.F32.TF32 R4, R2, R4, R4", "LDS R6, [R1]", "@P1 BRA 0x20",
                   "HMMA.1684.F32.TF32 R8, R6, R8, R8", "IADD3 R1, R1, 0x1, RZ", "@P2 BRA 0x10", "EXIT"])
    assert shortest_path(looped, 0x10, 0x40) == (4, 2)  # the inner backward branch is not taken
    assert mma_instructions(looped) == (2.0, 1024)  # the loop's span from 0x10 to 0x40


def test_occupancy_follows_the_calculators_rules():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from cuda_resources import occupancy

    assert occupancy(32, 256, 0) == 1.0  # 8 blocks of 8 warps
    assert occupancy(40, 256, 0) == 0.75  # 40 registers: 1280 per warp, 6 blocks
    assert occupancy(48, 256, 0) == 0.625
    assert occupancy(255, 256, 0) == 0.125
    assert occupancy(32, 1024, 0) == 1.0
    assert occupancy(32, 32, 0) == 0.5  # 32 blocks at most
    assert occupancy(32, 256, 48 << 10) == 0.5  # 4 blocks of 48 KiB (+1 KiB each) in 228 KiB


def test_cuda_is_registered_with_its_option():
    assert "cuda" in target_names()
    assert get_target("cuda").compile_options == ("emulate",)


@pytest.mark.parametrize(("seed", "random"), _cases(nvcc=False))
def test_emulated_cuda_matches_reference(seed, random, assert_matches, monkeypatch):
    """Results only: the libraries skip the memory counters (the counters' own tests count)."""
    from msc.runtime import cuda_emu

    monkeypatch.setenv(cuda_emu.COUNTERS_SWITCH, "0")
    case = generate(seed)
    schedule = _schedule(seed, case.stencil, random)
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    kernel = case.stencil.compile(target="cuda", dtype=case.dtype, schedule=schedule, emulate=EMULATE)
    assert kernel.target == "cuda"
    assert_matches(kernel.run(steps=case.steps, **case.inputs), expected, case.dtype, (case, schedule))


@needs_nvcc
@pytest.mark.parametrize(("seed", "random"), _cases(nvcc=True))
def test_generated_cuda_compiles_with_nvcc(seed, random, tmp_path):
    case = generate(seed)
    schedule = _schedule(seed, case.stencil, random)
    nvcc_check(get_target("cuda").source(case.stencil.poly(case.dtype), schedule), tmp_path)


@msc.stencil
def heat(u, alpha):
    u[msc.t + 1, msc.x, msc.y] = u[msc.t, msc.x, msc.y] + alpha * (
        u[msc.t, msc.x - 1, msc.y] + u[msc.t, msc.x + 1, msc.y] + u[msc.t, msc.x, msc.y - 1]
        + u[msc.t, msc.x, msc.y + 1] - 4 * u[msc.t, msc.x, msc.y])


def test_a_continued_run_equals_one_run(assert_matches):
    case = generate(7)
    kernel = case.stencil.compile(target="cuda", dtype=case.dtype, emulate=EMULATE)
    sim = kernel.start(**case.inputs)
    sim.advance(case.split)
    sim.advance(case.steps - case.split)
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    assert_matches({k: v.copy() for k, v in sim.fields.items()}, expected, case.dtype, case)


def test_a_simulation_keeps_its_buffers_on_the_device(tmp_path):
    """advance runs on the device buffers; reading fields copies them back, set copies
    the host's over again before the next step, and a checkpoint holds the device's
    levels: step for step the same as the C kernel's simulation."""
    from msc.runtime.cuda_kernel import DeviceSimulation

    rng = np.random.default_rng(3)
    u0, alpha = rng.random((12, 17)), 0.1
    kernel = heat.compile(target="cuda", emulate=EMULATE)
    sims = [kernel.start(u=u0, alpha=alpha), heat.compile(target="serial").start(u=u0, alpha=alpha)]
    assert isinstance(sims[0], DeviceSimulation)
    for sim in sims:
        sim.advance(3)
        sim.set(u=sim.fields["u"] * 2, alpha=0.05)  # the host's copy goes over before the next step
        sim.advance(2)
    np.testing.assert_allclose(sims[0].fields["u"], sims[1].fields["u"], rtol=1e-12)
    np.testing.assert_allclose(sims[0].levels["u"][0], sims[1].levels["u"][0], rtol=1e-12)
    resumed = kernel.resume(sims[0].save(tmp_path / "heat.nc"))
    assert isinstance(resumed, DeviceSimulation) and resumed.step == 5
    for sim in (*sims, resumed):
        sim.advance(4)
    np.testing.assert_array_equal(resumed.fields["u"], sims[0].fields["u"])
    np.testing.assert_allclose(sims[0].fields["u"], sims[1].fields["u"], rtol=1e-12)


def _heat_sectors(rows: int, cols: int) -> int:
    """Sectors of one step of the default heat launch by hand: each warp is 32 threads
    of one row, starting at a multiple of 32 columns; its lanes inside the ring load
    five neighbours and store one point; a warp-level access touches the distinct
    32-byte sectors of its lanes' doubles."""
    total = 0
    for i in range(1, rows - 1):
        for first in range(0, cols, 32):
            lanes = [c for c in range(first, first + 32) if 1 <= c < cols - 1]
            for di, dj in ((-1, 0), (0, -1), (0, 0), (0, 1), (1, 0), (0, 0)):  # five loads, one store
                total += len({((i + di) * cols + c + dj) * 8 // 32 for c in lanes})
    return total


@pytest.mark.parametrize("shape", [(34, 64), (34, 66), (7, 40)])
def test_an_emulated_run_counts_its_memory_traffic(shape):
    """k.last_run after an emulated run: updates, and the emulator's counters, against
    counts by hand. The grid-mapped launch's warps start on a multiple of 32 columns, as a
    hand-written kernel's do, so on rows of 64 doubles a warp's store is 8 sectors, not 9.
    Staging the tile in shared memory loads each point about once."""
    if not EMULATE:
        pytest.skip("the counters are the emulator's")
    u = np.random.default_rng(6).random(shape)
    kernel = heat.compile(target="cuda", emulate=True, schedule=msc.Schedule().parallel("x"))
    kernel.run(steps=3, u=u, alpha=0.1)
    run = kernel.last_run
    updates = (shape[0] - 2) * (shape[1] - 2) * 3
    assert run.updates == updates and run.gpu is not None
    assert run.gpu["store_bytes"] == 8 * updates and run.gpu["load_bytes"] == 5 * 8 * updates
    assert run.gpu["launches"] == 3 and run.gpu["shared_accesses"] == 0
    assert run.gpu["sectors"] == 3 * _heat_sectors(*shape)
    read = shape[0] * shape[1] - 4  # every point but the corners
    assert 8 * (read + updates // 3) * 3 <= run.gpu["dram_bytes"] <= 8 * shape[0] * shape[1] * 2 * 3 + 3 * 64 * shape[0]
    staged = heat.compile(target="cuda", emulate=True, schedule=msc.Schedule().tile(x=8, y=32).cache_read("u"))
    sim = staged.start(u=u, alpha=0.1)
    sim.advance(3)
    gpu = staged.last_run.gpu
    assert staged.last_run.updates == updates and gpu["store_bytes"] == 8 * updates
    assert gpu["load_bytes"] < 2 * 8 * updates and gpu["shared_accesses"] > 0
    assert 1.0 <= gpu["shared_wavefronts_per_access"] < 1.5


def test_streamed_launches_read_each_point_about_once():
    """The default launch of a 2D or 3D dirichlet stencil streams (docs/cuda.md): global
    loads per update at most 1.5 x the itemsize (the grid-mapped launch loads one value per
    read, 5 for heat), conflict-free shared memory; a time tile of depth 4 moves at most
    1.3 x 2 x itemsize / 4 DRAM bytes per update (benchmarks/cuda_counters.py: every standard
    stencil, both dtypes)."""
    if not EMULATE:
        pytest.skip("the counters are the emulator's")
    u = np.random.default_rng(7).random((66, 258))
    for schedule, goal in ((None, "load"), (msc.Schedule().time_tile(4), "dram")):
        kernel = heat.compile(target="cuda", emulate=True, schedule=schedule)
        assert "streamed tiles" in kernel.source
        np.testing.assert_allclose(kernel.run(steps=8, u=u, alpha=0.1)["u"],
                                   heat.reference(steps=8, u=u, alpha=0.1)["u"], rtol=1e-13)
        run = kernel.last_run
        assert run.gpu["store_bytes"] == 8 * run.updates // (4 if goal == "dram" else 1)
        assert run.gpu["shared_accesses"] > 0 and run.gpu["shared_wavefronts_per_access"] <= 1.1
        if goal == "load":
            assert run.gpu["load_bytes"] <= 1.5 * 8 * run.updates and run.gpu["launches"] == 8
        else:
            assert run.gpu["dram_bytes"] <= 1.3 * 2 * 8 / 4 * run.updates and run.gpu["launches"] == 2


def planes_ahead(source: str) -> int:
    """How many planes ahead a streamed kernel's loads run: its registers next0, next1, ...
    (a suffix per field and point where it loads several)."""
    return 1 + max(int(n) for n in re.findall(r"\bnext(\d+)(?:_\w+)? = ", source))


def test_prefetch_sets_how_many_planes_ahead_streamed_loads_run(tmp_path, assert_matches):
    """prefetch(d) on a streamed tile: each thread's loads run d planes ahead (d registers of
    loaded planes per point it owns, instead of AHEAD // rows), the same loads and results as
    the default; on a launch that does not stream, one ScheduleError saying why, on cuda and
    hip alike. The tuner tries prefetch(PREFETCH) beside the default."""
    from msc import t, x, y, z

    @msc.stencil
    def heat3(u):
        u[t + 1, x, y, z] = 0.4 * u[t, x, y, z] + 0.1 * (u[t, x - 1, y, z] + u[t, x + 1, y, z] + u[t, x, y - 1, z]
                                                         + u[t, x, y + 1, z] + u[t, x, y, z - 1] + u[t, x, y, z + 1])

    u2 = np.random.default_rng(3).random((40, 140))
    u3 = np.random.default_rng(4).random((14, 20, 36))
    cases = [(heat, msc.Schedule(), msc.Schedule().prefetch(4), 4, dict(u=u2, alpha=0.1)),
             (heat3, msc.Schedule().time_tile(2), msc.Schedule().time_tile(2).prefetch(3), 3, dict(u=u3)),
             (heat3, msc.Schedule().time_tile(1, x=32, y=6, z=30).unroll("y", 2),
              msc.Schedule().time_tile(1, x=32, y=6, z=30).unroll("y", 2).prefetch(3), 3, dict(u=u3))]
    for stencil, plain, ahead, planes, args in cases:
        kernel = stencil.compile(target="cuda", emulate=True, schedule=ahead)
        assert "streamed tiles" in kernel.source
        if NVCC:
            nvcc_check(kernel.source, tmp_path)
        assert planes_ahead(kernel.source) == planes, ahead
        assert planes_ahead(stencil.compile(target="cuda", emulate=True, schedule=plain).source) < planes
        if EMULATE:
            np.testing.assert_allclose(kernel.run(steps=5, **args)["u"], stencil.reference(steps=5, **args)["u"],
                                       rtol=1e-13)
            loads = kernel.last_run.gpu["load_bytes"]
            other = stencil.compile(target="cuda", emulate=True, schedule=plain)
            other.run(steps=5, **args)
            assert loads == other.last_run.gpu["load_bytes"], ahead
    # a time tile writing two levels of a field runs its steps left over in a one-step launch: as far ahead
    wave, _, waves, _ = _several_cases()[0]
    kernel = wave.compile(target="cuda", emulate=True, schedule=msc.Schedule().time_tile(2, x=8, y=16).prefetch(4))
    launches = kernel.source.split("__global__")[1:]
    assert "_step" in kernel.source and [planes_ahead(f) for f in launches if "msc_ring" in f] == [4, 4]
    assert_matches(kernel.run(steps=5, **waves), wave.reference(steps=5, **waves), "float64", "wave, prefetch(4)")
    for target in ("cuda", "hip"):
        for schedule, why in ((msc.Schedule().parallel("x").prefetch(4), "tile(), parallel() and the other loop"),
                              (msc.Schedule().tile(x=8, y=32).prefetch(2), "tile(), parallel() and the other loop"),
                              (msc.Schedule().time_tile(2, x=8).prefetch(2), "not every dimension is tiled"),
                              (msc.Schedule().prefetch(35), "a block streams 34 planes"),
                              (msc.Schedule().tensor_cores("fp64").prefetch(2), "tensor-core kernels")):
            if target == "hip" and schedule.tensor_core_precision:
                continue  # hip takes no tensor cores at all
            with pytest.raises(ScheduleError, match=re.escape(f"on {target} sets how many planes ahead")) as refused:
                get_target(target).source(heat.poly("float64"), schedule)
            assert why in str(refused.value)
    assert planes_ahead(get_target("cuda").source(heat.poly("float64"), msc.Schedule().prefetch(34))) == 34
    assert msc.Schedule().prefetch(4) in cuda_candidates(heat.typed("float64"))


@pytest.mark.parametrize("seed", [6, 11, 16, 33, 40, 42])
def test_generated_stencils_stream_with_their_loads_further_ahead(seed, assert_matches, monkeypatch):
    """Generated stencils whose default launch streams (2D and 3D, several statements, fields
    keeping up to 3 past levels, float32 and float64) match the reference with their loads
    1 and 5 planes ahead (prefetch(d)), the default's 2 either side."""
    from msc.runtime import cuda_emu

    monkeypatch.setenv(cuda_emu.COUNTERS_SWITCH, "0")
    case = generate(seed)
    assert time_tile.default_stream(case.stencil.typed(case.dtype)) is not None
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    for planes in (1, 5):
        kernel = case.stencil.compile(target="cuda", dtype=case.dtype, schedule=msc.Schedule().prefetch(planes),
                                      emulate=EMULATE)
        assert planes_ahead(kernel.source) == planes
        assert_matches(kernel.run(steps=case.steps, **case.inputs), expected, case.dtype, (case, planes))


def test_time_tile_steps_hand_their_own_values_on_in_registers():
    """A streamed time tile stores each loaded plane and each step's plane in shared memory
    for the neighbours and hands each point's own value on to the next step in registers:
    no step reads it back. heat's time_tile(4) on 66 x 258: 0.214 shared accesses per
    update, against 0.264 when every step read it back. The default launch (one step)
    reads the loaded value back (docs/cuda.md)."""
    if not EMULATE:
        pytest.skip("the counters are the emulator's")
    u = np.random.default_rng(7).random((66, 258))
    kernel = heat.compile(target="cuda", emulate=True, schedule=msc.Schedule().time_tile(4))
    assert "plane_n[q]" not in kernel.source
    np.testing.assert_allclose(kernel.run(steps=8, u=u, alpha=0.1)["u"],
                               heat.reference(steps=8, u=u, alpha=0.1)["u"], rtol=1e-13)
    assert kernel.last_run.gpu["shared_accesses"] <= 0.22 * kernel.last_run.updates
    assert heat.compile(target="cuda", emulate=True).source.count("plane_n[q]") == 1


def test_3d_time_tiles_take_larger_blocks_where_their_rings_fit():
    """`time_tile(d)` with no sizes on a 3D stencil takes blocks of 32 x 32 threads where their
    rings fit in shared memory (`cuda_stream.TIME_TILE_THREADS`), else the default launch's 16 x
    32 (halved while its rings do not fit): the halo takes a smaller share of the block, so it
    counts fewer shared accesses per update. box27's time_tile(4) on 35 x 66 x 66: 0.84 against
    1.06 in blocks of 16 x 32 (docs/cuda.md "Larger 3D time tiles"). A block of 1024 threads
    unrolls its plane loop by 2 (`cuda_stream.PLANE_UNROLL`: its registers are free), a smaller
    time tile's keeps it."""
    box27 = _row_cases()[0][0]
    cuda = get_target("cuda")
    larger = cuda.source(box27.poly("float64"), msc.Schedule().time_tile(4))
    assert "blocks of 32 x 32 threads" in larger and "#pragma unroll 2" in larger
    assert "#pragma unroll" not in cuda.source(box27.poly("float64"), msc.Schedule().time_tile(4, x=32, y=8, z=24))
    assert "blocks of 16 x 32 threads" in cuda.source(box27.poly("float64"), msc.Schedule())
    maxwell = _chained_cases()[12][0]  # fifteen rings at depth 2: in float32 they fit 16 x 32 threads only
    assert "blocks of 16 x 32 threads" in cuda.source(maxwell.poly("float32"), msc.Schedule().time_tile(2))
    if not EMULATE:
        pytest.skip("the counters are the emulator's")
    u = np.random.default_rng(5).random((35, 66, 66))
    expected = box27.reference(steps=8, u=u, a=0.9)["u"]
    shared = []
    for schedule in (msc.Schedule().time_tile(4), msc.Schedule().time_tile(4, x=32, y=8, z=24)):
        kernel = box27.compile(target="cuda", emulate=True, schedule=schedule)
        np.testing.assert_allclose(kernel.run(steps=8, u=u, a=0.9)["u"], expected, rtol=1e-13)
        shared.append(kernel.last_run.gpu["shared_accesses"] / kernel.last_run.updates)
    assert shared[0] < 0.85 * shared[1], shared


@pytest.mark.parametrize(("precision", "dtype"), [("fp64", "float64"), ("tf32", "float32"), ("fp16", "float32")])
def test_tensor_core_kernels_meet_no_bank_conflicts(precision, dtype):
    """The tensor-core staging's pitch and the warps' output tiles are padded (columns never
    loaded) so that every fragment load and store takes its ideal wavefronts: at most 1.1 per
    shared access, counted with each fragment load or store as one access, on a 2D and a 3D star
    (row and column lines). Without the padding heat's fp64 kernel took 2.0. A warp computes 4
    tiles side by side (fp64 and tf32), sharing its halo and weight blocks: heat's fp64 kernel
    loads 9.8 bytes per update from global memory, against 16.2 with one tile per warp."""
    if not EMULATE:
        pytest.skip("the counters are the emulator's")
    from msc import t, x, y, z

    @msc.stencil
    def star3(u):
        u[t + 1, x, y, z] = 0.4 * u[t, x, y, z] + 0.1 * (u[t, x - 1, y, z] + u[t, x + 1, y, z] + u[t, x, y - 1, z]
                                                         + u[t, x, y + 1, z] + u[t, x, y, z - 1] + u[t, x, y, z + 1])

    rng = np.random.default_rng(5)
    for stencil, inputs in ((heat, {"u": rng.random((34, 66)).astype(dtype), "alpha": 0.1}),
                            (star3, {"u": rng.random((10, 18, 34)).astype(dtype)})):
        kernel = stencil.compile(target="cuda", dtype=dtype, emulate=True,
                                 schedule=msc.Schedule().tensor_cores(precision))
        kernel.run(steps=2, **inputs)
        run = kernel.last_run
        assert run.gpu["shared_accesses"] > 0 and run.gpu["shared_wavefronts_per_access"] <= 1.1, (stencil, run.gpu)
        if stencil is heat and precision == "fp64":
            assert run.gpu["load_bytes"] <= 10.3 * run.updates  # bytes (9.8): the padding columns are never loaded


def test_counting_can_be_switched_off(monkeypatch):
    """MSC_CUDA_EMU_COUNTERS=0: the library is built without the counters (a key of
    its own in the kernel cache), computes the same, and reports no counts."""
    if not EMULATE:
        pytest.skip("the counters are the emulator's")
    from msc.runtime import cuda_emu

    u = np.random.default_rng(8).random((18, 40))
    counted = heat.compile(target="cuda", emulate=True)
    monkeypatch.setenv(cuda_emu.COUNTERS_SWITCH, "0")
    plain = heat.compile(target="cuda", emulate=True)
    assert plain.library_path != counted.library_path
    np.testing.assert_array_equal(plain.run(steps=3, u=u, alpha=0.1)["u"], counted.run(steps=3, u=u, alpha=0.1)["u"])
    assert plain.last_run.gpu is None and plain.last_run.updates == 16 * 38 * 3
    assert counted.last_run.gpu is not None


class HostDeviceArray:
    """What CuPy's arrays expose (`__cuda_array_interface__`), over host memory:
    under the emulator a device pointer is a host pointer."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = np.array(array, order="C")  # a copy: the kernel writes into it

    def copy(self) -> HostDeviceArray:
        return HostDeviceArray(self.array)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.array.shape, "typestr": self.array.dtype.str, "strides": None,
                "data": (self.array.ctypes.data, False), "version": 3}


@host_memory
@pytest.mark.parametrize("seed", [0, 5, 12, 31])  # 1D-3D, both boundaries, several levels, float32
def test_device_arrays_are_used_in_place(seed, assert_matches):
    case = generate(seed)
    kernel = case.stencil.compile(target="cuda", dtype=case.dtype, emulate=EMULATE)
    given = {k: [HostDeviceArray(a) for a in v] if isinstance(v, list) else HostDeviceArray(v) if isinstance(v, np.ndarray) else v
             for k, v in case.inputs.items()}
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    out = kernel.run(steps=case.steps, **given)
    for name, value in out.items():  # each written field's newest input array holds its result
        newest = given[name][-1] if isinstance(given[name], list) else given[name]
        assert value is newest
    assert_matches({k: v.array for k, v in out.items()}, expected, case.dtype, case)


@pytest.mark.skipif(not ON_DEVICE, reason="needs a CUDA device (MSC_CUDA_ON_DEVICE=1) and CuPy")
def test_cupy_arrays_are_used_in_place(assert_matches):
    cp = pytest.importorskip("cupy")
    case = generate(12)
    kernel = case.stencil.compile(target="cuda", dtype=case.dtype)
    given = {k: [cp.asarray(a) for a in v] if isinstance(v, list) else cp.asarray(v) if isinstance(v, np.ndarray) else v
             for k, v in case.inputs.items()}
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    out = kernel.run(steps=case.steps, **given)
    assert_matches({k: cp.asnumpy(v) for k, v in out.items()}, expected, case.dtype, case)


@host_memory
def test_device_arrays_are_checked_like_host_arrays():
    kernel = heat.compile(target="cuda", emulate=EMULATE)
    with pytest.raises(msc.errors.StencilArgumentError, match="dtype|float64"):
        kernel.run(steps=1, u=HostDeviceArray(np.zeros((8, 8), np.float32)), alpha=0.1)
    strided = HostDeviceArray(np.zeros((8, 8)))
    info = dict(strided.__cuda_array_interface__, strides=(8, 64))
    fortran = type("Fortran", (), {"__cuda_array_interface__": info})()
    with pytest.raises(msc.errors.StencilArgumentError, match="not C-contiguous"):
        kernel.run(steps=1, u=fortran, alpha=0.1)
    with pytest.raises(msc.errors.StencilArgumentError, match="start.*host.*run"):
        kernel.start(u=HostDeviceArray(np.zeros((8, 8))), alpha=0.1)


def test_without_a_device_the_error_names_emulate(monkeypatch):
    from msc.targets.gpu import cuda

    monkeypatch.setattr(cuda, "device_arch", lambda: None)
    with pytest.raises(TargetError, match=r"no CUDA device was found.*emulate=True"):
        heat.compile(target="cuda")


def test_over_capacity_schedules_name_the_limit_and_both_sizes():
    from msc import t, x, y, z

    @msc.stencil
    def wave(u, c):
        u[t + 1, x, y, z] = sum(u[t + dt, x + i, y, z] + u[t + dt, x, y + i, z] + u[t + dt, x, y, z + i]
                                for dt in (0, -1) for i in (-2, 2)) * c

    target = get_target("cuda")
    with pytest.raises(ScheduleError) as err:  # 1024 threads, but two levels of 8 x 20 x 20 points
        target.source(wave.poly(), msc.Schedule().tile(x=4, y=16, z=16).cache_read("u"))
    text = str(err.value)
    for words in ("shared", "x=4, y=16, z=16", "u 8x20x20", str(2 * 8 * 20 * 20 * 8), str(48 << 10), "'cuda'"):
        assert words in text, (words, text)
    target.source(wave.poly(), msc.Schedule().tile(x=2, y=16, z=16).cache_read("u"))  # 6x20x20 x 2 levels fit
    with pytest.raises(ScheduleError) as err:
        target.source(heat.poly(), msc.Schedule().tile(x=64, y=32))
    text = str(err.value)
    for words in ("x=64, y=32", "2048 threads", "1024 threads per block"):
        assert words in text, (words, text)


def test_shared_memory_staging_is_synchronised(reverse_blocks):
    schedule = msc.Schedule().tile(x=16, y=32).cache_read("u")
    source = get_target("cuda").source(heat.poly(), schedule)
    kernel = source[source.index("__global__ void __launch_bounds__(512) msc_run_k0"):]  # a 16 x 32 block
    kernel = kernel[:kernel.index("\n}\n")]
    assert "MSC_SHARED(real, cr_f_u_t0, [612]);" in kernel  # (16 + 2) x (32 + 2)
    copy, compute = kernel.index("cr_f_u_t0[("), kernel.index("f_u_tp1[")
    assert copy < kernel.index("__syncthreads();", copy) < compute
    assert "<<<" not in source and "MSC_LAUNCH_INDEXED(msc_run_k0, P0 * P1, dim3(" in source
    u = np.random.default_rng(5).random((30, 50))  # 2 x 2 tiles, the last ones partial
    result = heat.compile(target="cuda", schedule=schedule, emulate=EMULATE).run(steps=3, u=u, alpha=0.1)
    np.testing.assert_allclose(result["u"], heat.reference(steps=3, u=u, alpha=0.1)["u"], rtol=1e-12, atol=0)


def test_x86_primitives_are_refused():
    with pytest.raises(ScheduleError, match="target 'cuda' has no stream_stores"):
        get_target("cuda").source(heat.poly(), msc.Schedule().stream_stores())


# -- the emitted nvcc project --------------------------------------------------

EMITTED = ["Makefile", "kernel.cu", "main.cu", "msc_cuda.h", "npy.h"]


@pytest.mark.parametrize("seed", [4, 19])
def test_emitted_program_built_with_the_emulator_matches_reference(seed, tmp_path, assert_matches):
    case = generate(seed)
    directory = case.stencil.emit("cuda", tmp_path / "src", dtype=case.dtype)
    assert set(EMITTED) <= {p.name for p in directory.iterdir()}
    proc = subprocess.run(["make", "-s", "-C", str(directory), "emulate"], check=False, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    written = [f.name for f in case.stencil.ir.written_fields]
    cmd = [str(directory / f"{case.stencil.name}-emulated"), "--steps", str(case.steps),
           *program_arguments(case.inputs, tmp_path)]
    for name in written:
        cmd += ["--out", f"{name}={tmp_path / (name + '.npy')}"]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "GStencil/s" in proc.stdout
    result = {name: np.load(tmp_path / f"{name}.npy") for name in written}
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    assert_matches(result, expected, case.dtype, case)
    usage = subprocess.run(cmd[:1] + ["--help"], check=False, capture_output=True, text=True)
    assert usage.returncode == 0 and "--steps N" in usage.stdout and "--threads" not in usage.stdout


@needs_nvcc
def test_emitted_project_builds_with_nvcc(tmp_path):
    directory = heat.emit("cuda", tmp_path / "heat")
    proc = subprocess.run(["make", "-s", "-C", str(directory), "ARCH=sm_80"], check=False, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (directory / "heat").is_file()  # linked; running it needs a GPU
    if ON_DEVICE:
        u0 = np.random.default_rng(0).random((40, 50))
        np.save(tmp_path / "u0.npy", u0)
        proc = subprocess.run([str(directory / "heat"), "--steps", "7", "--param", "alpha=0.1", "--in",
                               f"u={tmp_path / 'u0.npy'}", "--out", f"u={tmp_path / 'u.npy'}"],
                              check=False, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        np.testing.assert_allclose(np.load(tmp_path / "u.npy"), heat.reference(steps=7, u=u0, alpha=0.1)["u"], rtol=1e-12)


def test_cli_emits_the_cuda_tree(tmp_path):
    from msc.cli import main

    source = tmp_path / "heat.py"
    source.write_text("import msc\n\n@msc.stencil\ndef heat(u, alpha):\n"
                      "    u[msc.t + 1, msc.x] = u[msc.t, msc.x] + alpha * (u[msc.t, msc.x - 1] - 2 * u[msc.t, msc.x]"
                      " + u[msc.t, msc.x + 1])\n")
    assert main(["emit", f"{source}:heat", "--target", "cuda", "-o", str(tmp_path / "out")]) == 0
    assert set(EMITTED) <= {p.name for p in (tmp_path / "out").iterdir()}
    makefile = (tmp_path / "out" / "Makefile").read_text()
    assert "NVCC ?= nvcc" in makefile and "ARCH ?= sm_90" in makefile


def test_tuner_candidates_are_legal_cuda_schedules():
    for seed in (0, 5):  # 2D periodic, 3D dirichlet
        case = generate(seed)
        candidates = cuda_candidates(case.stencil.ir)
        assert candidates[0] == msc.Schedule() and len(set(candidates)) == len(candidates)
        for schedule in candidates:
            get_target("cuda").source(case.stencil.poly(case.dtype), schedule)


def test_degenerate_time_tiles_are_not_tuning_candidates():
    """On an H200 the tuner spent 165 s timing star2d4r's time_tile(4, x=1, y=1): one output
    per 1089-point region, 20.7 s per step. A time tile is tried only when at least a
    quarter of what its block loads becomes outputs; the streamed tiles of every depth
    the tuner tries are such tiles."""
    from msc import t, x, y

    @msc.stencil
    def star4(u):
        u[t + 1, x, y] = sum(u[t, x + o, y] + u[t, x, y + o] for o in range(-4, 5)) / 18

    assert not time_tile.pays(star4.ir, 4, {"x": 1, "y": 1})
    for stencil in (star4.ir, heat.ir):
        for schedule in cuda_candidates(stencil):
            if schedule.time_depth and not schedule.tensor_core_precision:  # fused: test_tensor_core_candidates
                plan = cuda_stream.streamed_tile(stencil, schedule.time_depth, dict(schedule.tiles))
                assert plan.useful() >= time_tile.MIN_USEFUL and plan.too_large() is None, schedule
    assert {s.time_depth for s in cuda_candidates(heat.ir)} == {0, 1, 2, 3, 4, 8}


def test_tensor_core_candidates():
    """A float64 stencil with a tensor-core plan adds tensor_cores("fp64") to the tuning space, in 2D
    also fused with time tiles of 2, 4 and 8 steps (where a tile fits), each with its tile named and
    each matching the reference under the emulator; a float32 stencil adds none (tf32 is never
    chosen for the user), nor does a nonlinear one."""
    from msc import t, x, y

    @msc.stencil
    def square(u):
        u[t + 1, x, y] = u[t, x, y] * u[t, x + 1, y]

    tensor = [s for s in cuda_candidates(heat.ir) if s.tensor_core_precision]
    assert [s.time_depth for s in tensor] == [0, *TENSOR_DEPTHS]
    assert all(s.tensor_core_precision == "fp64" and (s.tiles or not s.time_depth) for s in tensor)
    assert not [s for s in cuda_candidates(heat.ir.with_dtype("float32")) if s.tensor_core_precision]
    assert not [s for s in cuda_candidates(square.ir) if s.tensor_core_precision]
    u = np.random.default_rng(3).random((20, 70))
    expected = heat.reference(steps=5, u=u, alpha=0.1)["u"]
    for schedule in tensor[:2]:
        got = heat.compile("cuda", schedule=schedule, emulate=True).run(steps=5, u=u, alpha=0.1)["u"]
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_every_candidate_of_the_gpu_tuning_space_matches_the_reference(assert_matches, monkeypatch):
    """What schedule="auto" times on a device, each run here under the emulator (results
    only: without the memory counters)."""
    from msc.runtime import cuda_emu

    monkeypatch.setenv(cuda_emu.COUNTERS_SWITCH, "0")
    case = generate(1, boundary="dirichlet")  # 1D: tiles and time tiles
    target = get_target("cuda")
    space = target.platform.tuning_space(case.stencil.poly(case.dtype), case.inputs[case.stencil.ir.fields[0].name].shape,
                                         case.steps)
    assert space == cuda_candidates(case.stencil.ir) and any(s.time_depth for s in space)
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    built = 0
    for schedule in space:
        try:
            kernel = case.stencil.compile(target="cuda", dtype=case.dtype, schedule=schedule, emulate=True)
        except ScheduleError:
            continue  # illegal for this stencil (a dependence, a capacity)
        assert_matches(kernel.run(steps=case.steps, **case.inputs), expected, case.dtype, case)
        built += 1
    assert built >= 2


def test_auto_goes_through_the_one_tuner(assert_matches):
    case = generate(1, boundary="dirichlet")
    kernel = case.stencil.compile(target="cuda", dtype=case.dtype, schedule="auto", emulate=EMULATE)
    assert isinstance(kernel, AutoKernel)
    result = kernel.run(steps=case.steps, **case.inputs)
    assert_matches(result, case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs), case.dtype, case)
    report = kernel.report
    if ON_DEVICE:
        assert report.from_cache or {t.schedule for t in report.trials} >= {str(msc.Schedule())}
    else:  # the emulator says nothing about GPU speed: the default launch, and a line saying why
        assert report.schedule == msc.Schedule() and "under the GPU emulator (CUDA and HIP)" in report.estimate.text
        assert "the default, kept (this platform neither times nor models)" in repr(report)
        with warnings.catch_warnings():  # nothing was cached: a second kernel neither warns of a damaged entry
            warnings.simplefilter("error")
            again = case.stencil.compile(target="cuda", dtype=case.dtype, schedule="auto", emulate=EMULATE)
            again.run(steps=1, **case.inputs)
        assert not again.report.from_cache


# -- time tiles in shared memory ------------------------------------------------

def _shared_tile_cases() -> list[Any]:
    from msc import t, x, y, z

    @msc.stencil
    def box3(u, c, k):  # a time-invariant input, a box, float32 below
        u[t + 1, x, y, z] = u[t, x, y, z] + k * c[x, y, z] * (
            sum(u[t, x + i, y + j, z + m] for i in (-1, 0, 1) for j in (-1, 0, 1) for m in (-1, 0, 1)) / 27 - u[t, x, y, z])

    @msc.stencil
    def wide1(u):  # radius 3, a branch and a function
        u[t + 1, x] = msc.where(u[t, x] > 0.5, 0.3 * u[t, x - 3] + 0.4 * u[t, x + 3], msc.sqrt(u[t, x - 1] * u[t, x + 1])) * 0.98

    rng = np.random.default_rng(1)
    return [
        (heat, msc.Schedule().time_tile(3, x=8, y=16), {"u": rng.random((21, 45)), "alpha": 0.2}, "float64"),
        (box3, msc.Schedule().time_tile(2, x=4, y=4, z=8),
         {"u": rng.random((9, 11, 21)).astype(np.float32), "c": rng.random((9, 11, 21)).astype(np.float32), "k": 0.5},
         "float32"),
        (wide1, msc.Schedule().time_tile(4, x=32), {"u": rng.random(150)}, "float64"),
    ]


@pytest.mark.parametrize("index", range(3))
def test_time_tiles_in_shared_memory_match_reference(index, assert_matches, reverse_blocks):
    stencil, schedule, inputs, dtype = _shared_tile_cases()[index]
    source = get_target("cuda").source(stencil.poly(dtype), schedule)
    shared = "MSC_SHARED(real, msc_ring, [" if stencil.ir.ndim > 1 else "MSC_SHARED(real, msc_tt, [2]"
    assert shared in source and "in shared memory" in source
    _runs_match(stencil, schedule, source, inputs, dtype, 9, assert_matches)


def _runs_match(stencil: msc.Stencil, schedule: msc.Schedule, source: str, inputs: dict[str, Any], dtype: str,
                steps: int, assert_matches: Any) -> None:
    """Runs of `steps` and `steps` + 1 steps (the newest level ends in either ring slot) and one
    continued from the odd step 3 match the reference, emulated; nvcc compiles the source."""
    kernel = stencil.compile(target="cuda", dtype=dtype, schedule=schedule, emulate=EMULATE)
    for count in (steps, steps + 1):
        expected = stencil.reference(steps=count, dtype=dtype, **inputs)
        assert_matches(kernel.run(steps=count, **inputs), expected, dtype, (stencil.name, schedule, count))
    sim = kernel.start(**inputs)
    sim.advance(3)
    sim.advance(steps - 2)
    assert_matches({k: v.copy() for k, v in sim.fields.items()},
                   stencil.reference(steps=steps + 1, dtype=dtype, **inputs), dtype, stencil.name)
    if NVCC is not None:
        with tempfile.TemporaryDirectory() as directory:
            nvcc_check(source, Path(directory))


def test_other_time_tiles_say_why_they_stay_in_global_memory():
    from msc import t, x

    @msc.stencil
    def wave(u):
        u[t + 1, x] = 2 * u[t, x] - u[t - 1, x] + 0.1 * (u[t, x - 1] + u[t, x + 1] - 2 * u[t, x])

    source = get_target("cuda").source(wave.poly(), msc.Schedule().time_tile(2, x=16))
    assert "msc_tt" not in source
    assert "skewed time tiles in global memory, not in shared memory: field 'u' keeps 2 past levels" in source
    big = get_target("cuda").source(heat.poly(), msc.Schedule().time_tile(8, x=1, y=1010))
    assert "its blocks of 1026 threads" in big and "more than 1024" in big and "msc_ring" not in big
    from msc import y, z

    @msc.stencil
    def box3(u):
        u[t + 1, x, y, z] = sum(u[t, x + i, y + j, z + m] for i in (-1, 0, 1) for j in (-1, 0, 1) for m in (-1, 0, 1)) / 27

    with pytest.raises(ScheduleError, match="in shared memory they cannot run either: its 8 rings of 2 planes of 640 "
                                           "points would take 81920 bytes of shared memory, more than 65536"):
        get_target("cuda").source(box3.poly(), msc.Schedule().time_tile(8, x=64, y=4, z=16))
    # with no sizes the target picks a tile that runs: there, the default block of skewed tiles
    chosen = get_target("cuda").source(box3.poly(), msc.Schedule().time_tile(8))
    assert "time_tile(8, x=2, y=4, z=32)" in chosen and "skewed time tiles in global memory" in chosen


def _several_cases() -> list[Any]:
    from msc import t, x, y, z

    @msc.stencil
    def wave(u, c):  # level t-1 read at the point only: partial sums, u[t-1] from global memory in step 1
        u[t + 1, x, y] = 2 * u[t, x, y] - u[t - 1, x, y] + c * (
            u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y])

    @msc.stencil
    def wave3d(u):  # level t-1 at the point, in 3D: partial sums
        u[t + 1, x, y, z] = 2 * u[t, x, y, z] - u[t - 1, x, y, z] + 0.1 * (
            u[t, x - 1, y, z] + u[t, x + 1, y, z] + u[t, x, y - 1, z] + u[t, x, y + 1, z] + u[t, x, y, z - 1]
            + u[t, x, y, z + 1] - 6 * u[t, x, y, z])

    @msc.stencil
    def wave2r(u, a):  # radius 2, level t-1 weighed by a parameter, a constant term: partial sums
        u[t + 1, x, y] = 1.6 * u[t, x, y] - a * u[t - 1, x, y] + 0.01 + 0.05 * sum(
            u[t, x + i, y] + u[t, x, y + i] for i in (-2, -1, 1, 2))

    @msc.stencil
    def wave3(u, s):  # level t-1 read with neighbours: a ring of its own; an input
        u[t + 1, x, y, z] = 1.9 * u[t, x, y, z] - 0.5 * (u[t - 1, x + 1, y, z] + u[t - 1, x, y - 1, z + 1]) + (
            0.1 * s[x, y, z] * (u[t, x - 1, y, z] + u[t, x, y + 1, z]))

    @msc.stencil
    def pair(u, v, a):  # two fields, each reading the other's neighbours
        u[t + 1, x, y] = u[t, x, y] + a * (u[t, x - 1, y] + u[t, x + 1, y] - 2 * u[t, x, y]) - (
            0.1 * u[t, x, y] * v[t, x, y + 1])
        v[t + 1, x, y] = v[t, x, y] + a * (v[t, x, y - 1] + v[t, x, y + 1] - 2 * v[t, x, y]) + (
            0.1 * u[t, x - 1, y] * v[t, x, y])

    @msc.stencil
    def levels3(u, v):  # a field of three past levels beside one of one
        u[t + 1, x, y] = 0.5 * u[t, x, y] + 0.3 * u[t - 1, x + 1, y] + 0.2 * u[t - 2, x, y - 1] + 0.1 * v[t, x, y + 1]
        v[t + 1, x, y] = 0.9 * v[t, x, y] - 0.05 * (u[t, x - 1, y] - u[t - 1, x, y])

    @msc.stencil
    def acoustic(p, q, c, dt2):  # examples/wave_coupled.py: q[t+1] read at the point, from a register
        q[t + 1, x, y] = p[t, x - 1, y] + p[t, x + 1, y] + p[t, x, y - 1] + p[t, x, y + 1] - 4 * p[t, x, y]
        p[t + 1, x, y] = 2 * p[t, x, y] - p[t - 1, x, y] + dt2 * c[x, y] ** 2 * q[t + 1, x, y]

    @msc.stencil
    def pair3(u, v, k):
        u[t + 1, x, y, z] = u[t, x, y, z] + 0.1 * (u[t, x - 1, y, z] + u[t, x, y + 1, z] + u[t, x, y, z - 1]
                                                   - 3 * u[t, x, y, z]) + 0.05 * k[x, y, z] * v[t, x + 1, y, z]
        v[t + 1, x, y, z] = 0.9 * v[t, x, y, z] + 0.1 * u[t, x, y - 1, z + 1]

    rng = np.random.default_rng(3)
    plane, box = (37, 45), (13, 14, 35)
    two = {"u": rng.random(plane), "v": rng.random(plane), "a": 0.2}
    three = {name: rng.random(box).astype(np.float32) for name in ("u", "v", "k")}
    waves = {"u": [rng.random(plane), rng.random(plane)], "c": 0.1}
    waves3 = {"u": [rng.random(box), rng.random(box)], "s": rng.random(box)}
    acoustics = {"p": [rng.random(plane), rng.random(plane)], "q": np.zeros(plane), "c": rng.random(plane), "dt2": 0.05}
    return [
        (wave, msc.Schedule(), waves, "float64"),
        (wave3, msc.Schedule(), waves3, "float64"),
        (pair, msc.Schedule(), two, "float64"),
        (pair, msc.Schedule().time_tile(3, x=8, y=16), two, "float64"),
        (pair, msc.Schedule().time_tile(2), two, "float64"),
        (pair3, msc.Schedule().time_tile(2, x=5, y=4, z=8), three, "float32"),
        (pair3, msc.Schedule().time_tile(2, x=6, y=4, z=12).unroll("y", 2), three, "float32"),
        (wave, msc.Schedule().time_tile(4, x=8, y=16), waves, "float64"),
        (wave3, msc.Schedule().time_tile(3, x=5, y=4, z=8), waves3, "float64"),
        (levels3, msc.Schedule().time_tile(3, x=8, y=16),
         {"u": [rng.random(plane), rng.random(plane), rng.random(plane)], "v": rng.random(plane)}, "float64"),
        (acoustic, msc.Schedule(), acoustics, "float64"),
        (acoustic, msc.Schedule().time_tile(2, x=8, y=16), acoustics, "float64"),
        (wave3d, msc.Schedule().time_tile(3), {"u": [rng.random(box), rng.random(box)]}, "float64"),
        (wave3d, msc.Schedule().time_tile(2, x=6, y=6, z=12).unroll("y", 2),
         {"u": [rng.random(box).astype(np.float32), rng.random(box).astype(np.float32)]}, "float32"),
        (wave2r, msc.Schedule().time_tile(3, x=8, y=16), {"u": [rng.random(plane), rng.random(plane)], "a": 0.6},
         "float64"),
    ]


@pytest.mark.parametrize("index", range(15))
def test_several_statements_and_levels_stream(index, assert_matches, reverse_blocks):
    """Streamed tiles of stencils with several statements or past levels: every written
    field's rings, an older level from a ring, from global memory or (partial sums) from the
    registers of the step before; time tiles of fields
    keeping several levels over 9 and 10 steps and continued from step 3 (launches ending
    in either set of levels, steps left over)."""
    stencil, schedule, inputs, dtype = _several_cases()[index]
    source = get_target("cuda").source(stencil.poly(dtype), schedule)
    assert "streamed tiles" in source and "skewed" not in source
    several_levels = schedule.time_depth > 1 and any(f.window > 1 for f in stencil.ir.written_fields)
    assert ("msc_place_levels(" in source) == several_levels
    _runs_match(stencil, schedule, source, inputs, dtype, 9 if several_levels else 5, assert_matches)


def _chained_cases() -> list[Any]:
    from msc import t, x, y, z

    @msc.stencil
    def chained(u, v):  # v reads u[t+1] at in-plane neighbours on both sides: a barrier between the statements
        u[t + 1, x, y] = 0.5 * (u[t, x - 1, y] + u[t, x + 1, y])
        v[t + 1, x, y] = v[t, x, y] + 0.1 * (u[t + 1, x, y + 1] - u[t + 1, x, y - 1])

    @msc.stencil
    def yee(ex, hz):  # staggered: hz reads ex[t+1] a plane ahead, so it lags one plane; ex reads hz[t] behind it
        ex[t + 1, x, y] = ex[t, x, y] + 0.3 * (hz[t, x, y] - hz[t, x, y - 1]) + 0.2 * (hz[t, x, y] - hz[t, x - 1, y])
        hz[t + 1, x, y] = hz[t, x, y] - 0.25 * (ex[t + 1, x + 1, y] - ex[t + 1, x, y]) + 0.1 * ex[t + 1, x, y - 1]

    @msc.stencil
    def chain3(a, b, c):  # a chain of three in 3D; c reads a[t+1] at the point of a statement two runs back
        a[t + 1, x, y, z] = 0.4 * a[t, x, y, z] + 0.1 * (a[t, x, y, z - 1] + a[t, x - 1, y, z] + a[t, x, y + 1, z])
        b[t + 1, x, y, z] = 0.8 * b[t, x, y, z] + 0.1 * (a[t + 1, x + 1, y, z] + a[t + 1, x, y, z - 1])
        c[t + 1, x, y, z] = 0.7 * c[t, x, y, z] + 0.2 * b[t + 1, x, y + 1, z] - 0.1 * a[t + 1, x, y, z]

    @msc.stencil
    def spread(a, b, c):  # c lags 3 planes (a[t+1] ahead) and reads b[t+1] 3 behind: b's ring keeps its 7 planes
        a[t + 1, x, y] = 0.9 * a[t, x, y] + 0.05 * a[t, x, y + 1]
        b[t + 1, x, y] = 0.8 * b[t, x, y] + 0.1 * b[t, x, y - 1]
        c[t + 1, x, y] = 0.5 * a[t + 1, x + 3, y] + 0.25 * b[t + 1, x - 3, y] + 0.1 * a[t + 1, x, y + 1]

    @msc.stencil
    def maxwell(ex, ey, ez, hx, hy, hz):  # Yee in 3D: nine rings, too many for the default block in float64
        hx[t + 1, x, y, z] = hx[t, x, y, z] - 0.3 * (ez[t, x, y + 1, z] - ez[t, x, y, z] - ey[t, x, y, z + 1]
                                                     + ey[t, x, y, z])
        hy[t + 1, x, y, z] = hy[t, x, y, z] - 0.3 * (ex[t, x, y, z + 1] - ex[t, x, y, z] - ez[t, x + 1, y, z]
                                                     + ez[t, x, y, z])
        hz[t + 1, x, y, z] = hz[t, x, y, z] - 0.3 * (ey[t, x + 1, y, z] - ey[t, x, y, z] - ex[t, x, y + 1, z]
                                                     + ex[t, x, y, z])
        ex[t + 1, x, y, z] = ex[t, x, y, z] + 0.3 * (hz[t + 1, x, y, z] - hz[t + 1, x, y - 1, z] - hy[t + 1, x, y, z]
                                                     + hy[t + 1, x, y, z - 1])
        ey[t + 1, x, y, z] = ey[t, x, y, z] + 0.3 * (hx[t + 1, x, y, z] - hx[t + 1, x, y, z - 1] - hz[t + 1, x, y, z]
                                                     + hz[t + 1, x - 1, y, z])
        ez[t + 1, x, y, z] = ez[t, x, y, z] + 0.3 * (hy[t + 1, x, y, z] - hy[t + 1, x - 1, y, z] - hx[t + 1, x, y, z]
                                                     + hx[t + 1, x, y - 1, z])

    @msc.stencil
    def wave_flux(p, f, k):  # a field of two past levels feeding a flux read at neighbours
        p[t + 1, x, y] = 2 * p[t, x, y] - p[t - 1, x, y] + k * (
            p[t, x - 1, y] + p[t, x + 1, y] + p[t, x, y - 1] + p[t, x, y + 1] - 4 * p[t, x, y])
        f[t + 1, x, y] = 0.9 * f[t, x, y] + 0.05 * (p[t + 1, x - 1, y] - p[t + 1, x, y + 1])

    rng = np.random.default_rng(7)
    plane, box = (37, 45), (13, 14, 35)
    two = {"u": rng.random(plane), "v": rng.random(plane)}
    fields = {"ex": rng.random(plane), "hz": rng.random(plane)}
    three = {name: rng.random(box).astype(np.float32) for name in ("a", "b", "c")}
    flux = {"p": [rng.random(plane), rng.random(plane)], "f": rng.random(plane), "k": 0.1}
    abc = {name: rng.random(plane) for name in ("a", "b", "c")}
    em = {name: rng.random(box) for name in ("ex", "ey", "ez", "hx", "hy", "hz")}
    return [
        (chained, msc.Schedule(), two, "float64"),
        (chained, msc.Schedule().time_tile(3, x=8, y=16), two, "float64"),
        (yee, msc.Schedule(), fields, "float64"),
        (yee, msc.Schedule().time_tile(2, x=8, y=16), fields, "float64"),
        (yee, msc.Schedule().time_tile(3), fields, "float64"),
        (chain3, msc.Schedule(), three, "float32"),
        (chain3, msc.Schedule().time_tile(2, x=5, y=6, z=12), three, "float32"),
        (chain3, msc.Schedule().time_tile(2, x=6, y=4, z=12).unroll("y", 2), three, "float32"),
        (wave_flux, msc.Schedule(), flux, "float64"),
        (wave_flux, msc.Schedule().time_tile(2, x=8, y=16), flux, "float64"),
        (spread, msc.Schedule(), abc, "float64"),
        (spread, msc.Schedule().time_tile(2, x=8, y=16), abc, "float64"),
        (maxwell, msc.Schedule(), em, "float64"),
        (maxwell, msc.Schedule().time_tile(2), {name: a.astype(np.float32) for name, a in em.items()}, "float32"),
    ]


@pytest.mark.parametrize("index", range(14))
def test_a_level_t_plus_1_read_at_neighbours_streams(index, assert_matches, monkeypatch):
    """A statement reading a level t+1 that an earlier statement writes, at in-plane neighbours
    (after a barrier), a plane ahead or behind (lagging behind its writer: the ring keeps the
    planes back to the one it reads) or at the point of another run of statements (from the
    ring), streams: default launches and time tiles (their halo the
    chain's length wider) match the reference with a block's threads run in either order."""
    from msc.runtime import cuda_emu

    stencil, schedule, inputs, dtype = _chained_cases()[index]
    source = get_target("cuda").source(stencil.poly(dtype), schedule)
    assert "msc_ring" in source and "skewed" not in source
    steps = 9 if schedule.time_depth > 1 and any(f.window > 1 for f in stencil.ir.written_fields) else 5
    monkeypatch.setenv(cuda_emu.THREAD_ORDER, "reverse")
    kernel = stencil.compile(target="cuda", dtype=dtype, schedule=schedule, emulate=EMULATE)
    assert_matches(kernel.run(steps=steps, **inputs), stencil.reference(steps=steps, dtype=dtype, **inputs), dtype,
                   (stencil.name, schedule, "threads last first"))
    monkeypatch.delenv(cuda_emu.THREAD_ORDER)
    _runs_match(stencil, schedule, source, inputs, dtype, steps, assert_matches)


def test_a_default_block_whose_rings_do_not_fit_halves():
    """Maxwell's equations in 3D keep nine rings of planes: in float64 the default block of
    16 x 32 threads would need 110592 bytes of shared memory, so the default launch takes
    8 x 32 (before, it was grid-mapped); in float32 the rings fit the default block. Where
    no block leaves a tile (float64 time_tile(2): fifteen rings), the skewed tiles say why."""
    stencil = _chained_cases()[12][0]
    cuda = get_target("cuda")
    assert "blocks of 8 x 32 threads" in cuda.source(stencil.poly("float64"), msc.Schedule())
    assert "blocks of 16 x 32 threads" in cuda.source(stencil.poly("float32"), msc.Schedule())
    skewed = cuda.source(stencil.poly("float64"), msc.Schedule().time_tile(2))
    assert "skewed time tiles" in skewed and "bytes of shared memory, more than 65536" in skewed


def test_streamed_tuning_candidates_of_a_chain_match_the_reference(assert_matches, monkeypatch):
    """The tuner's streamed candidates for yee (a level t+1 read at neighbours): blocks of other
    shapes and time tiles of every depth whose halo, a chain wider, still pays; each matches
    the reference."""
    from msc.runtime import cuda_emu

    monkeypatch.setenv(cuda_emu.COUNTERS_SWITCH, "0")
    stencil, _, inputs, dtype = _chained_cases()[2]
    target = get_target("cuda")
    streamed = [s for s in cuda_candidates(stencil.ir) if "msc_ring" in target.source(stencil.poly(dtype), s)]
    assert {s.time_depth for s in streamed} == {0, 1, 2, 3, 4, 8}, streamed
    expected = stencil.reference(steps=5, dtype=dtype, **inputs)
    for schedule in streamed:
        kernel = stencil.compile(target="cuda", dtype=dtype, schedule=schedule, emulate=EMULATE)
        assert_matches(kernel.run(steps=5, **inputs), expected, dtype, schedule)


def _indexed_cases() -> list[Any]:
    from msc import t, x, y

    @msc.stencil
    def heat(u):  # one statement of one level: partial sums
        u[t + 1, x, y] = 0.5 * u[t, x, y] + 0.125 * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1])

    @msc.stencil
    def line(u):  # 1D: box tiles
        u[t + 1, x] = 0.5 * u[t, x] + 0.25 * (u[t, x - 1] + u[t, x + 1])

    @msc.stencil(boundary="periodic")
    def ring(u):  # periodic: grid-mapped
        u[t + 1, x, y] = 0.5 * u[t, x, y] + 0.25 * (u[t, x - 1, y] + u[t, x, y + 1])

    rng = np.random.default_rng(5)
    several = _several_cases()
    return [(heat, msc.Schedule(), {"u": rng.random((37, 45))}, "float64"),
            (ring, msc.Schedule(), {"u": rng.random((37, 45))}, "float64"),  # grid-mapped
            (heat, msc.Schedule().tile(x=8, y=16).cache_read("u"), {"u": rng.random((37, 45))}, "float64"),  # staged
            (heat, msc.Schedule().time_tile(3, x=8, y=16).unroll("x", 2), {"u": rng.random((37, 45))},
             "float64"),  # skewed tiles in global memory: levels chosen in the kernel (V)
            (heat, msc.Schedule().time_tile(3, x=8, y=16), {"u": rng.random((37, 45)).astype(np.float32)}, "float32"),
            (line, msc.Schedule().time_tile(2, x=16), {"u": rng.random(70)}, "float64"),
            *(several[i] for i in (1, 6, 9, 11)),
            (heat, msc.Schedule().tensor_cores("fp64"), {"u": rng.random((37, 45))}, "float64"),  # wmma
            (heat, msc.Schedule().tensor_cores("fp64").time_tile(3, x=16, y=24), {"u": rng.random((37, 45))},
             "float64")]  # tensor cores fused with a time tile


@pytest.mark.parametrize("index", range(12))
def test_kernels_run_with_either_index_width(index, assert_matches, monkeypatch):
    """Streamed and box tiles, grid-mapped launches, staged tiles, skewed time tiles and the
    tensor-core kernels (fused with time tiles too) are templates on their index type,
    launched with 32-bit indices where a level's points (a ring's, where the kernel picks
    its levels) allow (every other test's grids) and 64-bit ones above: the emulator runs
    the 64-bit ones here (MSC_CUDA_EMU_INDEX=64). Their bodies declare no index of a fixed
    type."""
    from msc.runtime import cuda_emu

    monkeypatch.setenv(cuda_emu.INDEX_WIDTH, "64")
    stencil, schedule, inputs, dtype = _indexed_cases()[index]
    source = get_target("cuda").source(stencil.poly(dtype), schedule)
    functions = re.findall(r"template <typename index_t>\n__global__ .*?\n\}\n", source, re.S)
    steps = r"const long (t0|T|c\d+)\b"  # the run's steps, and the host's loops over them (a wave of tiles)
    assert functions and all(re.sub(steps, "", f).count("long") == 0 for f in functions), source
    assert source.count("MSC_LAUNCH_INDEXED(") >= len(functions) and "MSC_LAUNCH(msc_run" not in source
    _runs_match(stencil, schedule, source, inputs, dtype, 5, assert_matches)


@host_memory
def test_a_failed_launch_frees_the_scratch_levels(monkeypatch):
    """A time tile of a field of two past levels takes a scratch level on the device; a launch
    that fails (here: an index width the emulator refuses) ends the run with an error and
    leaves no device memory allocated (the scratch is freed however the time loop ends)."""
    from msc.runtime import cuda_emu

    stencil, _, inputs, dtype = _several_cases()[0]
    kernel = stencil.compile(target="cuda", dtype=dtype, schedule=msc.Schedule().time_tile(4, x=8, y=16), emulate=True)
    assert "msc_scratch " in kernel.source
    monkeypatch.setenv(cuda_emu.INDEX_WIDTH, "48")
    with pytest.raises(TargetError, match="CUDA runtime call failed"):
        kernel.run(steps=5, **inputs)
    assert kernel._lib.msc_emu_allocated_bytes() == 0


def test_the_last_step_reading_a_loaded_level_keeps_a_plane_more(assert_matches):
    """The last step of wave3's time tile of 2 reads level t-1, a loaded ring, at in-plane
    neighbours with no barrier before the next plane is stored: its ring keeps one plane
    more (threads in order, where a lower warp overwrites before a higher one reads)."""
    stencil, _, inputs, dtype = _several_cases()[1]
    schedule = msc.Schedule().time_tile(2, x=5, y=4, z=8)
    _runs_match(stencil, schedule, get_target("cuda").source(stencil.poly(dtype), schedule), inputs, dtype, 5,
                assert_matches)


def test_several_levels_stream_each_level_once():
    """The streamed default launch reads each level about once (at most 1.5 x the itemsize per
    update and level read), against one value per read before (48 and 64 bytes per update),
    and no level of a field no statement reads at t or before."""
    if not EMULATE:
        pytest.skip("the counters are the emulator's")
    for index, levels in ((0, 2), (2, 2), (10, 3)):
        stencil, schedule, inputs, dtype = _several_cases()[index]
        kernel = stencil.compile(target="cuda", emulate=True, schedule=schedule)
        kernel.run(steps=4, **inputs)
        run = kernel.last_run
        assert run.gpu["load_bytes"] <= 1.5 * 8 * levels * run.updates, (stencil.name, run.gpu)
        assert run.gpu["shared_wavefronts_per_access"] <= 1.1
    # the acoustic wave's q is read at t+1 only: its level t is not loaded
    assert "src_f_q_t0[" not in kernel.source and "src_f_p_t0[" in kernel.source


def test_a_wave_equation_takes_partial_sums():
    """One statement reading its field's level t-1 at the point only (a wave equation)
    streams as partial sums: each plane is read once per step, and level t-1 comes from
    global memory in the first step and from the registers of the step before in the
    others (`cuda_stream.Sums.older`). Read at neighbours (wave3) it keeps its ring of
    planes. wave's time_tile(4, x=8, y=16) on 37 x 45: 0.46 shared accesses per update,
    against 0.67 with rings of planes."""
    wave, wave3 = _several_cases()[0][0], _several_cases()[1][0]
    cuda = get_target("cuda")
    for schedule in (msc.Schedule(), msc.Schedule().time_tile(4, x=8, y=16)):
        assert "partial sums" in cuda.source(wave.poly(), schedule)
    tiled = cuda.source(wave.poly(), msc.Schedule().time_tile(4, x=8, y=16))
    assert "o2_0" in tiled and "o4_1" in tiled and "o1_" not in tiled  # level t-1 of steps 2-4 in registers
    assert "partial sums" not in cuda.source(wave3.poly(), msc.Schedule())
    if not EMULATE:
        pytest.skip("the counters are the emulator's")
    stencil, schedule, inputs, dtype = _several_cases()[7]
    kernel = stencil.compile(target="cuda", emulate=True, schedule=schedule)
    kernel.run(steps=8, **inputs)
    assert kernel.last_run.gpu["shared_accesses"] <= 0.5 * kernel.last_run.updates


def test_what_does_not_stream_says_why():
    from msc import t, x, y

    wave, pair = _several_cases()[0][0], _several_cases()[2][0]

    @msc.stencil
    def fill(u, c):  # reads no field at t: nothing to stream in a step (its time tiles stream their steps)
        u[t + 1, x, y] = 0.5 * c[x, y]

    cuda = get_target("cuda")
    assert "msc_ring" not in cuda.source(fill.poly(), msc.Schedule())
    assert "streamed tiles of 2 steps" in cuda.source(fill.poly(), msc.Schedule().time_tile(2, x=4, y=8))
    levels3 = _several_cases()[9][0]
    tiled = cuda.source(levels3.poly(), msc.Schedule().time_tile(2, x=8, y=16))
    assert ("skewed time tiles in global memory, not in shared memory: field 'u' keeps 3 past levels, and a time "
            "tile in shared memory writes them all: it takes at least 3 steps") in tiled
    assert "streamed tiles" in cuda.source(wave.poly(), msc.Schedule().time_tile(2, x=8, y=16))
    # the tuner's streamed time tiles only where they stream
    for stencil in (pair, wave):
        assert any(s.time_depth > 1 and "msc_ring" in cuda.source(stencil.poly(), s)
                   for s in cuda_candidates(stencil.ir))
    assert all("msc_ring" not in cuda.source(levels3.poly(), s) for s in cuda_candidates(levels3.ir)
               if s.time_depth == 2)


def _row_cases() -> list[Any]:
    from msc import t, x, y, z

    @msc.stencil
    def box27(u, a):  # constant weights and a parameter: partial sums
        u[t + 1, x, y, z] = a * sum((1 + abs(i) + 2 * abs(j) + 3 * abs(m)) * u[t, x + i, y + j, z + m]
                                    for i in (-1, 0, 1) for j in (-1, 0, 1) for m in (-1, 0, 1)) / 100

    @msc.stencil
    def star2(u, c):  # radius 2, weights read from an input: each point reads its ring of planes
        u[t + 1, x, y, z] = u[t, x, y, z] + 0.05 * c[x, y, z] * sum(
            u[t, x + i, y, z] + u[t, x, y + i, z] + u[t, x, y, z + i] - 3 * u[t, x, y, z] for i in (-2, -1, 1, 2))

    rng = np.random.default_rng(3)
    box = {"u": rng.random((19, 23, 30)), "a": 0.9}
    star = {"u": rng.random((17, 26, 21)).astype(np.float32), "c": rng.random((17, 26, 21)).astype(np.float32)}
    return [
        (box27, msc.Schedule().time_tile(1, x=8, y=10, z=14).unroll("y", 2), box, "float64"),
        (box27, msc.Schedule().time_tile(3, x=8, y=7, z=12).unroll("y", 3), box, "float64"),  # 13 rows: 15 loaded
        (star2, msc.Schedule().time_tile(2, x=8, y=6, z=8).unroll("y", 2), star, "float32"),
    ]


@pytest.mark.parametrize("index", range(3))
def test_streamed_threads_take_several_points_of_the_middle_dimension(index, assert_matches, reverse_blocks):
    """`unroll(y, n)` on a 3D streamed tile: each thread loads, computes and writes n
    consecutive points of y; partial sums read each neighbour once for all of them. One
    step and several, a row count that does not divide the loaded rows, the ring form,
    float32, and a run continued from an odd step, blocks and threads in reverse order."""
    stencil, schedule, inputs, dtype = _row_cases()[index]
    source = get_target("cuda").source(stencil.poly(dtype), schedule)
    rows = schedule.unrolls[0][1]
    assert f"{rows} points of y per thread" in source and "next0_1" in source
    _runs_match(stencil, schedule, source, inputs, dtype, 5, assert_matches)


def test_several_points_per_thread_share_their_neighbours():
    """Two points of y per thread: a 27-point box reads 12 shared values per pair of
    outputs and plane instead of 9 per output, the same global traffic per update (the
    same tile, half the threads)."""
    if not EMULATE:
        pytest.skip("the counters are the emulator's")
    stencil, _, inputs, dtype = _row_cases()[0]
    counts = []
    for rows in (1, 2):
        schedule = msc.Schedule().time_tile(1, x=8, y=10, z=14)
        kernel = stencil.compile(target="cuda", schedule=schedule.unroll("y", 2) if rows == 2 else schedule,
                                 emulate=True)
        kernel.run(steps=4, **inputs)
        run = kernel.last_run
        counts.append({key: value / run.updates for key, value in run.gpu.items()
                       if key.endswith(("accesses", "bytes"))})
    one, two = counts
    assert two["shared_accesses"] < 0.8 * one["shared_accesses"], counts
    assert two["load_bytes"] == pytest.approx(one["load_bytes"]) and two["store_bytes"] == one["store_bytes"]


def test_points_per_thread_are_along_the_middle_dimension_of_3d_tiles():
    box27 = _row_cases()[0][0]
    source = get_target("cuda").source(box27.poly(), msc.Schedule().time_tile(1, x=8, y=10, z=14).unroll("z", 2))
    assert ("skewed time tiles in global memory, not in shared memory: unroll() of streamed tiles takes the middle "
            "dimension of a 3D stencil (its points per thread), not z") in source
    flat = get_target("cuda").source(heat.poly(), msc.Schedule().time_tile(2, x=8, y=16).unroll("x", 2))
    assert "not in shared memory: unroll() of streamed tiles takes the middle dimension of a 3D stencil" in flat


@pytest.mark.parametrize("seed", [12, 24, 36])  # 2D two statements; 3D, its rings too large; 2D, two levels
def test_time_tiles_of_the_targets_choice_run(seed, assert_matches):
    """`time_tile(depth)` with no sizes: the target's tile runs (in shared memory where the
    stencil's tiles can, else skewed tiles in global memory) and matches the reference."""
    case = generate(seed)
    schedule = msc.Schedule().time_tile(3)
    kernel = case.stencil.compile(target="cuda", dtype=case.dtype, schedule=schedule, emulate=EMULATE)
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    assert_matches(kernel.run(steps=case.steps, **case.inputs), expected, case.dtype, (case, schedule))


@pytest.mark.skipif(ON_DEVICE, reason="on a device the benchmark runs (benchmarks/gpu.sh)")
def test_gpu_benchmark_parses_its_options_and_fails_clearly_without_a_device():
    import sys

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "stencils_gpu.py"
    usage = subprocess.run([sys.executable, str(script), "--help"], check=False, capture_output=True, text=True)
    assert usage.returncode == 0 and "--quick" in usage.stdout and "--dtypes" in usage.stdout
    bad = subprocess.run([sys.executable, str(script), "--only", "nosuch"], check=False, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown stencil(s) nosuch" in bad.stderr
    run = subprocess.run([sys.executable, str(script), "--quick", "--only", "heat2d"], check=False,
                         capture_output=True, text=True)
    assert run.returncode == 2 and "needs a CUDA device" in run.stderr, run.stderr
