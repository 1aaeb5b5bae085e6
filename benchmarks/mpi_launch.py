"""Run a benchmark's worker under mpiexec (the one beside this Python, from
the mpich wheel, when there is one) and read the JSON line rank 0 prints last."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping


def run_worker(ranks: int, script: str, args: list[str], env: Mapping[str, str]) -> dict[str, Any]:
    """`mpiexec -n ranks python -m mpi4py script --worker *args` under `env`."""
    mpiexec = Path(sys.executable).parent / "mpiexec"
    env = dict(env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    cmd = [str(mpiexec) if mpiexec.exists() else "mpiexec", "-n", str(ranks), sys.executable, "-m", "mpi4py",
           script, "--worker", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
