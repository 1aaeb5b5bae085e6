"""What the real Sunway toolchains need, checked here with gcc.

SW26010's `sw5cc` is GCC 4.1.2-based: it knows C99 with GNU extensions
(`-std=gnu99`) at most, and the vendors' headers declare less than the
emulator used to (slave.h has no ldm_malloc; it does not include athread.h).
Every emitted athread tree of the generated stencils, for both chips, with and
without MPI, must compile as gnu99 against the emulator's headers (which carry
the vendors' names and values) with implicit declarations and incompatible
pointers as errors; its Makefile must pass `-std=gnu99` to every Sunway
compile and link the CPE math library."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from stencil_gen import generate

import msc
from msc.errors import ScheduleError
from msc.runtime import athread_emu
from msc.runtime.halo import find_mpicc

CHIPS = sorted(athread_emu.LDM_BYTES)
STRICT = ["-std=gnu99", "-fsyntax-only", "-Werror=implicit-function-declaration",
          "-Werror=incompatible-pointer-types", "-Werror=int-conversion"]
SEEDS = range(48)


def _compile(directory: Path, chip: str, mpi: bool) -> None:
    """Every C source of the tree but the emulator's own, as gnu99, warnings above as errors."""
    sources = sorted(p.name for p in directory.glob("*.c") if p.name != "athread_emu.c")
    defines = [f"-DATHREAD_EMU_LDM_BYTES={athread_emu.LDM_BYTES[chip]}", f"-DATHREAD_EMU_CHIP=\"{chip}\""]
    compiler = find_mpicc() if mpi else "gcc"
    done = subprocess.run([compiler, *STRICT, "-I.", *defines, *sources], cwd=directory, check=False,
                          capture_output=True, text=True)
    assert done.returncode == 0, f"{directory.name}:\n{done.stderr}"


@pytest.mark.parametrize("seed", [pytest.param(s, marks=[] if s % 6 == 0 else [pytest.mark.slow]) for s in SEEDS])
def test_every_emitted_tree_is_gnu99_that_the_vendor_headers_accept(seed, tmp_path):
    case = generate(seed)
    for chip in CHIPS:
        for mpi in (False, True):
            directory = tmp_path / f"{chip}{'-mpi' if mpi else ''}"
            try:
                case.stencil.emit("athread+mpi" if mpi else "athread", directory, dtype=case.dtype, chip=chip)
            except ScheduleError as refused:  # a stencil the MPI program does not take is refused before writing
                assert mpi and not directory.exists(), refused
                continue
            _compile(directory, chip, mpi)


# time tiles: 1D (a box), 2D, 3D (streamed), 3D of three statements (whose halo fills SW26010's LDM: refused there)
@pytest.mark.parametrize("seed", [3, 7, 6, 10])
def test_time_tile_trees_are_gnu99_too(seed, tmp_path):
    case = generate(seed)
    compiled = 0
    for chip in CHIPS:
        for mpi in (False, True):
            directory = tmp_path / f"{chip}{'-mpi' if mpi else ''}"
            try:
                case.stencil.emit("athread+mpi" if mpi else "athread", directory, dtype=case.dtype, chip=chip,
                                  schedule=msc.Schedule().time_tile(2))
            except ScheduleError as refused:
                assert seed == 10 and chip == "sw26010" and "more than the 57312 bytes" in str(refused), refused
                continue
            assert "msc_slave_tt" in (directory / ("slave_phase0.c" if mpi else "slave.c")).read_text()
            _compile(directory, chip, mpi)
            compiled += 1
    assert compiled == (2 if seed == 10 else 4)


@pytest.mark.parametrize("chip", CHIPS)
def test_the_makefiles_pass_gnu99_and_link_the_cpe_math_library(chip, tmp_path):
    case = generate(0)
    for target in ("athread", "athread+mpi"):
        directory = tmp_path / target
        case.stencil.emit(target, directory, dtype=case.dtype, chip=chip)
        extra = ["MPICC=mpicc"] if target == "athread+mpi" else []
        dry = subprocess.run(["make", "-n", "-C", str(directory), *extra], check=False, capture_output=True, text=True)
        assert dry.returncode == 0, dry.stderr
        compiles = [line for line in dry.stdout.splitlines() if " -c " in line]
        assert compiles and all("-std=gnu99" in line for line in compiles), dry.stdout
        assert "-std=gnu11" not in dry.stdout
        slave = [line for line in compiles if "slave" in line]
        assert slave and all("-msimd" in line for line in slave), dry.stdout
        link = [line for line in dry.stdout.splitlines() if " -o " in line and " -c " not in line]
        assert link and "-lm_slave" in link[-1] and "-lrt" in link[-1], dry.stdout
