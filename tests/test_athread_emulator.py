"""The athread emulator: a hand-written double-buffered Jacobi step against
numpy, and each enforced hardware rule firing with a message naming the CPE,
the call and the sizes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from msc.errors import CompileError
from msc.runtime import athread_emu

DATA = Path(__file__).parent / "athread"
JACOBI = [DATA / "jacobi_host.c", DATA / "jacobi_slave.c", DATA / "jacobi.h"]
FAULTS = [DATA / "faults_host.c", DATA / "faults_slave.c", DATA / "faults.h"]
CHIPS = sorted(athread_emu.LDM_BYTES)
# modes of tests/athread/faults.h
LDM_MALLOC, MISALIGNED_DMA, BAD_LENGTH, BAD_BLOCKS, DMA_TO_MEMORY, DIRECT_ACCESS, WAIT_TOO_LONG = range(7)
STATIC_LDM, SYNC, DIRECT_LOAD, REPLY_ON_STACK, PUT_REWRITTEN, GET_OVERWRITTEN, PUT_AT_BARRIER, RACE = range(7, 15)
INIT_TWICE, BIG_STACK = 15, 16
OMIT_NOTHING, OMIT_FIRST_GET_WAIT, OMIT_FINAL_PUT_WAIT = range(3)


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("athread")
    built = {}
    for chip in CHIPS:
        for name, sources in (("jacobi", JACOBI), ("faults", FAULTS)):
            built[name, chip] = build(name, sources, root / f"{name}-{chip}", chip)
    return built


def build(name: str, sources: list[Path], workdir: Path, chip: str, defs: tuple[str, ...] = ()) -> Path:
    host, slave = [f"{name}_host.c"], [f"{name}_slave.c"]
    return athread_emu.build(sources, workdir, host_srcs=host, slave_srcs=slave, target=name, chip=chip, defs=defs)


def jacobi_reference(a: np.ndarray, steps: int) -> np.ndarray:
    for _ in range(steps):
        b = a.copy()
        b[1:-1, 1:-1] = 0.25 * (a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])
        a = b
    return a


def run_jacobi(program: Path, workdir: Path, shape, tile, steps: int, omit: int = OMIT_NOTHING):
    nx, ny = shape
    grid = np.random.default_rng(7).random((nx + 2, ny + 2))
    grid.tofile(workdir / "in.bin")
    out = workdir / "out.bin"
    command = [str(program), *map(str, (nx, ny, *tile, steps)), str(workdir / "in.bin"), str(out), str(omit)]
    env = dict(os.environ, ATHREAD_EMU_STATS="1")
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60, env=env)
    result = np.fromfile(out).reshape(grid.shape) if done.returncode == 0 else None
    return grid, result, done


def tiles(n: int, b: int) -> list[int]:
    return [min(b, n - i) for i in range(0, n, b)]


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("shape,tile", [((100, 70), (8, 16)), ((37, 45), (5, 7)), ((6, 5), (4, 4))])
def test_jacobi_matches_numpy(programs, tmp_path, chip, shape, tile):
    steps = 3
    grid, result, done = run_jacobi(programs["jacobi", chip], tmp_path, shape, tile, steps)
    assert done.returncode == 0, done.stderr
    assert "unguarded" not in done.stderr  # the grids are guarded: the slave reads them only by DMA
    np.testing.assert_allclose(result, jacobi_reference(grid, steps), rtol=1e-13, atol=0)
    # the counters: one strided get (tile plus halo) and one strided put (tile) per tile and step
    stats = athread_emu.parse_stats(done.stderr)
    hs, ws = tiles(shape[0], tile[0]), tiles(shape[1], tile[1])
    assert stats["chip"] == chip and stats["ldm_bytes"] == athread_emu.LDM_BYTES[chip]
    assert stats["spawns"] == steps
    assert stats["transfers"] == 2 * len(hs) * len(ws) * steps
    assert stats["put_bytes"] == 8 * shape[0] * shape[1] * steps
    assert stats["get_bytes"] == 8 * sum((h + 2) * (w + 2) for h in hs for w in ws) * steps
    buffers = 2 * 8 * ((tile[0] + 2) * (tile[1] + 2) + tile[0] * tile[1])  # double-buffered in and out
    assert athread_emu.STACK_RESERVE + buffers <= stats["peak_ldm"] <= athread_emu.STACK_RESERVE + buffers + 1024


def test_missing_get_wait_is_caught_when_the_buffer_is_refilled(programs, tmp_path):
    # 192 tiles: every CPE has three, so its first tile's buffer, whose get was never waited for, is
    # refilled by the third tile's get while the first is still outstanding: the two race on the chip
    program = programs["jacobi", "sw26010pro"]
    _, _, done = run_jacobi(program, tmp_path, (96, 64), (8, 4), 1, OMIT_FIRST_GET_WAIT)
    assert done.returncode != 0
    assert "in kernel 'jacobi': athread_get: its LDM buffer 0x" in done.stderr
    assert "overlaps that of an athread_get (0x" in done.stderr and "not yet waited for" in done.stderr


def test_missing_get_wait_at_the_end_is_caught(programs, tmp_path):
    _, _, done = run_jacobi(programs["jacobi", "sw26010pro"], tmp_path, (20, 20), (8, 8), 1, OMIT_FIRST_GET_WAIT)
    assert done.returncode != 0
    assert "in kernel 'jacobi': ldm_free" in done.stderr
    assert "while an athread_get on it is not waited for" in done.stderr


def test_missing_put_wait_is_caught(programs, tmp_path):
    _, _, done = run_jacobi(programs["jacobi", "sw26010pro"], tmp_path, (40, 40), (8, 8), 1, OMIT_FINAL_PUT_WAIT)
    assert done.returncode != 0
    assert "in kernel 'jacobi': return: " in done.stderr
    assert "DMA transfer(s) never waited for (first: athread_put of" in done.stderr


def assert_static_ldm(stderr: str, doubles: int) -> None:
    """The emulator's message counts the program's __thread_local bytes: its array of doubles and its reply word."""
    found = re.search(r"__thread_local variables (\d+)", stderr)
    assert found, stderr
    assert 8 * doubles + 4 <= int(found.group(1)) <= 8 * doubles + 16, stderr


def run_faults(program: Path, mode: int, size: int = 0, culprit: int = 5) -> subprocess.CompletedProcess:
    command = [str(program), str(mode), str(size), str(culprit)]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("chip", CHIPS)
def test_ldm_capacity(programs, chip):
    ldm = athread_emu.LDM_BYTES[chip]
    # what is left after the stack reserve and the __thread_local array (16 doubles, padded by the loader)
    fits = run_faults(programs["faults", chip], LDM_MALLOC, ldm - athread_emu.STACK_RESERVE - 1024)
    assert fits.returncode == 0 and "finished" in fits.stdout, fits.stderr
    over = ldm - athread_emu.STACK_RESERVE + 32
    done = run_faults(programs["faults", chip], LDM_MALLOC, over)
    assert done.returncode != 0
    assert f"in kernel 'faults': ldm_malloc: ldm_malloc({over}) exceeds the LDM: {ldm} bytes on {chip}" in done.stderr
    assert f"stack reserve {athread_emu.STACK_RESERVE}" in done.stderr


def test_static_ldm_over_capacity(tmp_path):
    doubles = 60 * 1024 // 8  # 60 KB of __thread_local: fits 256 KB, not 64 KB with the stack reserve
    for chip, fits in (("sw26010pro", True), ("sw26010", False)):
        program = build("faults", FAULTS, tmp_path / chip, chip, defs=(f"-DSTATIC_DOUBLES={doubles}",))
        done = run_faults(program, STATIC_LDM)
        if fits:
            assert done.returncode == 0, done.stderr
        else:
            assert done.returncode != 0
            assert "in kernel 'faults': athread_spawn: LDM over capacity before any ldm_malloc" in done.stderr
            assert_static_ldm(done.stderr, doubles)
            assert "bytes of LDM on sw26010" in done.stderr


@pytest.mark.parametrize(
    "mode,size,message",
    [
        (MISALIGNED_DMA, 0, "CRTS_dma_iget: main-memory address 0x"),
        (BAD_LENGTH, 6, "CRTS_dma_iget: length 6 bytes is not a multiple of 4"),
        (BAD_LENGTH, 0, "CRTS_dma_iget: length 0 bytes: must be positive"),
        (BAD_BLOCKS, 0, "CRTS_dma_iget_stride: length 40 bytes is not a whole number of 16-byte blocks"),
        (DMA_TO_MEMORY, 0, "CRTS_dma_iget: LDM side 0x"),
        (DIRECT_ACCESS, 0, "LDM_ACCESS: p = 0x"),
        (WAIT_TOO_LONG, 0, "CRTS_dma_wait_value: waits for the reply counter to reach 2, but it is 1"),
        (DIRECT_LOAD, 0, "direct access to main memory at byte 8000 of the guarded buffer 0x"),
        (REPLY_ON_STACK, 0, "CRTS_dma_iget: reply word 0x"),
        (REPLY_ON_STACK, 0, "is not in this CPE's LDM (the SW26010-Pro's DMA engine writes replies to LDM addresses"),
        (PUT_REWRITTEN, 0, "CRTS_dma_iput: its LDM buffer 0x"),
        (PUT_REWRITTEN, 0, "(64 bytes) was written before the wait for it; on the chip the DMA engine may send"),
        (GET_OVERWRITTEN, 0, "CRTS_dma_iget: its LDM buffer 0x"),
        (GET_OVERWRITTEN, 0, "(64 bytes) was written at byte 8 before the wait for it"),
        (PUT_AT_BARRIER, 0, "athread_syn: an CRTS_dma_iput of 8 bytes is not waited for at the barrier"),
    ],
)
def test_rule_violations_name_cpe_call_and_sizes(programs, mode, size, message):
    done = run_faults(programs["faults", "sw26010pro"], mode, size)
    assert done.returncode != 0
    assert "athread emulator: CPE 5 (row 0, col 5) in kernel 'faults': " in done.stderr
    assert message in done.stderr
    assert "finished" not in done.stdout


@pytest.mark.parametrize(
    "mode", [MISALIGNED_DMA, BAD_LENGTH, BAD_BLOCKS, DMA_TO_MEMORY, DIRECT_ACCESS, WAIT_TOO_LONG, DIRECT_LOAD,
             REPLY_ON_STACK, PUT_REWRITTEN, GET_OVERWRITTEN, PUT_AT_BARRIER, RACE]
)
def test_legal_versions_run(programs, mode):
    # no culprit: all 64 CPEs do the legal twin of the faulty call
    done = run_faults(programs["faults", "sw26010pro"], mode, 64, culprit=-1)
    assert done.returncode == 0 and "finished" in done.stdout, done.stderr


@pytest.mark.parametrize("chip", CHIPS)
def test_a_get_and_a_put_of_the_same_words_with_no_barrier_are_a_race(programs, chip):
    # every CPE puts a word and gets its neighbour's with no barrier: whichever of a pair comes first, the
    # other is reported (a get of what was put, or a put of what was read); with the barrier all is well
    done = run_faults(programs["faults", chip], RACE, 0, culprit=0)
    assert done.returncode != 0
    assert "with no barrier between: a missing athread_syn(ARRAY_SCOPE, ...) / athread_ssync_array()" in done.stderr
    assert "CRTS_dma_get: reads byte " in done.stderr or "CRTS_dma_put: writes byte " in done.stderr


def test_a_reply_word_on_the_stack_is_legal_on_sw26010_only(programs):
    # SW26010 keeps the stack in LDM; the Pro's DMA engine writes replies to LDM addresses only
    done = run_faults(programs["faults", "sw26010"], REPLY_ON_STACK, 0)
    assert done.returncode == 0 and "finished" in done.stdout, done.stderr
    done = run_faults(programs["faults", "sw26010pro"], REPLY_ON_STACK, 0)
    assert done.returncode != 0 and "declare it __thread_local" in done.stderr


LOAD_AND_CALL = """
import ctypes, sys
library = ctypes.CDLL(sys.argv[1])
argv = (ctypes.c_char_p * 4)(*(a.encode() for a in ["faults", *sys.argv[2:]]))
sys.exit(library.faults_main(4, argv))
"""


def test_loaded_library(tmp_path):
    # a library loaded into a process (the in-process path): the __thread_local
    # block of a loaded module is found, counted and accepted as LDM
    doubles = 60 * 1024 // 8
    for chip, fits in (("sw26010pro", True), ("sw26010", False)):
        library = athread_emu.build(FAULTS, tmp_path / chip, host_srcs=["faults_host.c"],
                                    slave_srcs=["faults_slave.c"], target="faults", chip=chip, shared=True,
                                    defs=("-Dmain=faults_main", f"-DSTATIC_DOUBLES={doubles}"))  # fmt: skip
        for mode in (STATIC_LDM, DMA_TO_MEMORY):
            command = [sys.executable, "-c", LOAD_AND_CALL, str(library), str(mode), "0", "-1"]
            done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
            if fits:
                assert done.returncode == 0 and "finished" in done.stdout, done.stderr
            else:
                assert done.returncode != 0
                assert_static_ldm(done.stderr, doubles)
                assert "+ stack reserve" in done.stderr


@pytest.mark.parametrize("scope", [0, 1, 2], ids=["array", "row", "column"])
def test_barriers_order_dma_between_cpes(programs, scope):
    # every CPE publishes its id by DMA, syncs, and reads a neighbour of the scope:
    # the host checks that each read saw the published value
    done = run_faults(programs["faults", "sw26010pro"], SYNC, scope)
    assert done.returncode == 0 and "finished" in done.stdout, done.stdout + done.stderr


def test_sunway_build_is_the_default():
    command = ["make", "-n", "-f", str(athread_emu.MAKEFILE), "-C", str(DATA), "TARGET=prog"]
    command += ["HOST_SRCS=jacobi_host.c", "SLAVE_SRCS=jacobi_slave.c"]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    assert "swgcc -mhost" in done.stdout and "swgcc -mslave -msimd" in done.stdout
    assert "swgcc -mhybrid -o prog" in done.stdout and "athread_emu" not in done.stdout


def test_unknown_chip_is_refused(tmp_path):
    with pytest.raises(CompileError, match="athread chip must be one of"):
        build("jacobi", JACOBI, tmp_path, "sw9")


def test_the_pros_data_cache_is_counted_against_the_ldm(tmp_path):
    # 64 KB of the Pro's LDM configured as data cache: what fitted without it is refused (NULL), and the
    # message names the cache; SW26010 has no such cache and will not build with one
    ldm, cache = athread_emu.LDM_BYTES["sw26010pro"], 64 * 1024
    program = athread_emu.build(FAULTS, tmp_path / "pro", host_srcs=["faults_host.c"], slave_srcs=["faults_slave.c"],
                                target="faults", chip="sw26010pro", ldm_cache=cache)
    size = ldm - athread_emu.STACK_RESERVE - 1024
    done = run_faults(program, LDM_MALLOC, size)
    assert done.returncode != 0
    assert f"ldm_malloc({size}) exceeds the LDM: {ldm} bytes on sw26010pro" in done.stderr
    assert f"data cache {cache}" in done.stderr
    assert run_faults(program, LDM_MALLOC, size - cache).returncode == 0
    with pytest.raises(CompileError, match="only the SW26010-Pro shares its LDM with a data cache"):
        athread_emu.build(FAULTS, tmp_path / "sw", host_srcs=["faults_host.c"], slave_srcs=["faults_slave.c"],
                          target="faults", chip="sw26010", ldm_cache=cache)


def test_athread_init_is_once_per_program(programs):
    done = run_faults(programs["faults", "sw26010pro"], INIT_TWICE)
    assert done.returncode != 0
    assert "athread emulator: MPE: athread_init: called again before athread_halt" in done.stderr


def test_a_stack_deeper_than_the_reserve_is_caught(programs):
    # the stack lives in LDM: a kernel whose stack (measured on this host) outgrows the reserve is reported
    done = run_faults(programs["faults", "sw26010"], BIG_STACK, 12 * 1024)
    assert done.returncode != 0
    assert "in kernel 'faults': return: the kernel's stack reached " in done.stderr
    assert f"more than the {athread_emu.STACK_RESERVE}-byte stack reserve counted in the LDM" in done.stderr
    assert run_faults(programs["faults", "sw26010"], BIG_STACK, 1024).returncode == 0
