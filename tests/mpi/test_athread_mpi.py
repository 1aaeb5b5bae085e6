"""athread+mpi: the emitted MPI program over the athread node target (one MPE
and its 64 emulated CPEs per rank), built with `make EMULATE=1`, is bitwise
equal to the athread kernel on one process, on 1-4 ranks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from launch import ENV, mpi_command, mpiexec
from stencil_gen import generate, program_arguments

import msc

pytestmark = [pytest.mark.mpi, pytest.mark.skipif(mpiexec() is None, reason="no mpiexec (pip install 'msc[mpi]')")]


@pytest.mark.parametrize("seed, chip, schedule", [
    (12, "sw26010", msc.Schedule().tile(x=3, y=8)),  # two statements: two phases, each exchange overlapped
    (40, "sw26010pro", None),  # three statements, an input field
    (7, "sw26010pro", msc.Schedule().time_tile(3, x=4)),  # deeper halos every 3 steps
    (42, "sw26010", msc.Schedule().tile(x=2, y=4)),  # 3D, two statements
    (6, "sw26010pro", msc.Schedule().time_tile(2, x=3, y=4, z=16)),  # 3D, streamed time tiles, an input
], ids=["2d-phases", "2d-three", "2d-time-tiled", "3d", "3d-time-tiled"])
def test_emitted_athread_mpi_program_is_bitwise_one_rank(seed, chip, schedule, tmp_path):
    case = generate(seed)
    directory = tmp_path / "src"
    case.stencil.emit("athread+mpi", directory, dtype=case.dtype, schedule=schedule, chip=chip)
    mpicc = Path(sys.executable).parent / "mpicc"
    make = ["make", "-C", str(directory), "EMULATE=1"] + ([f"MPICC={mpicc}"] if mpicc.exists() else [])
    built = subprocess.run(make, check=False, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert "warning" not in built.stderr, built.stderr  # simd.h's -Wpsabi notes were left on, as a tree built alone
    one = case.stencil.compile(target="athread", dtype=case.dtype, schedule=schedule, chip=chip)
    expected = one.run(steps=case.steps, **case.inputs)
    args = ["--steps", str(case.steps), *program_arguments(case.inputs, tmp_path)]
    env = dict(os.environ, **ENV)
    ran = []
    for ranks in (1, 2, 3, 4):
        outs = [a for n in expected for a in ("--out", f"{n}={tmp_path / f'out_{n}_{ranks}.npy'}")]
        proc = subprocess.run(mpi_command(ranks, str(directory / case.stencil.name), *args, *outs), check=False,
                              capture_output=True, text=True, env=env, timeout=300)
        if proc.returncode != 0 and "thinnest local block" in proc.stderr:
            continue  # too many ranks for this grid and halo
        assert proc.returncode == 0, proc.stderr
        assert f"on {ranks} ranks" in proc.stdout
        ran.append(ranks)
        for name, want in expected.items():
            assert np.array_equal(np.load(tmp_path / f"out_{name}_{ranks}.npy"), want), (name, ranks, case)
    assert len(ran) >= 3, ran
