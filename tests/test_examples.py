"""Every example runs as a user would run it (with small sizes)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from msc.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

PYTHON_EXAMPLES = {
    "heat2d.py": ["64", "10"],
    "wave_coupled.py": ["48", "10"],
    "schedules.py": ["96", "8"],
    "cholesky_poisson.py": ["40"],
}


@pytest.mark.parametrize("name", sorted(PYTHON_EXAMPLES))
def test_python_example_runs(name, tmp_path):
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *PYTHON_EXAMPLES[name]],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()


def test_every_python_example_is_exercised():
    assert {p.name for p in EXAMPLES.glob("*.py")} <= set(PYTHON_EXAMPLES) | {"distributed_heat.py"}


@pytest.mark.mpi
def test_distributed_example_runs_on_two_ranks(tmp_path):
    mpiexec = Path(sys.executable).parent / "mpiexec"
    exe = str(mpiexec) if mpiexec.exists() else shutil.which("mpiexec")
    assert exe, "mpiexec not found: the test extra installs mpi4py and the mpich wheel"
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    proc = subprocess.run([exe, "-n", "2", sys.executable, str(EXAMPLES / "distributed_heat.py"), "--size", "66",
                           "--steps", "10"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "2 ranks, process grid" in proc.stdout and "total heat" in proc.stdout


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.msc")), ids=lambda p: p.name)
def test_msc_example_emits_and_builds(path, tmp_path, capsys):
    assert main(["emit", str(path), "-o", str(tmp_path / "out")]) == 0
    assert subprocess.run(["make", "-s", "-C", str(tmp_path / "out")], capture_output=True).returncode == 0
