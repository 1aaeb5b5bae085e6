"""Starting scripts under mpiexec for the MPI tests.

mpiexec is the one next to the running Python (the `mpich` wheel puts it
there), else the one on PATH. The environment makes any MPI run as root and
oversubscribed (Open MPI needs to be told; MPICH does both by default), with
one OpenMP thread per rank.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ENV = {
    "OMP_NUM_THREADS": "1",
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
}


def mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def mpi_command(ranks: int, *argv: str) -> list[str]:
    exe = mpiexec()
    assert exe is not None, "mpiexec not found: pip install 'msc[mpi]'"
    return [exe, "-n", str(ranks), *argv]


def run_python(ranks: int, script: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run tests/mpi/`script` on `ranks` ranks (mpi4py aborts all ranks on an uncaught error)."""
    env = dict(os.environ, **ENV)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    cmd = mpi_command(ranks, sys.executable, "-m", "mpi4py", str(HERE / script), *args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def run_json(ranks: int, script: str, *args: str, timeout: float = 240) -> Any:
    """Run a script whose rank 0 prints one JSON line last; return it."""
    proc = run_python(ranks, script, *args, timeout=timeout)
    assert proc.returncode == 0, f"{script} on {ranks} ranks failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])
