"""MPI faults and defaults: a rank that dies mid-run makes the others exit with
an error (never hang), in-process and in the emitted program; the default
thread count divides the node's cores among its ranks, said once on rank 0;
explicit threads and OMP_NUM_THREADS are respected; OpenMP waits passively
when the node's ranks would run more threads than it has cores."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import heat

pytest.importorskip("mpi4py")
HERE = Path(__file__).resolve().parent
MPIEXEC = str(Path(sys.executable).parent / "mpiexec") if (Path(sys.executable).parent / "mpiexec").exists() \
    else shutil.which("mpiexec")
pytestmark = [pytest.mark.mpi, pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install 'msc[mpi]')")]
HANG_GUARD_S = 120  # a run that hangs fails the test here instead of hanging the suite


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return {**env, **extra}


def _python(ranks: int, script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, str(HERE / script)], capture_output=True,
                          text=True, env=_env(**env), timeout=HANG_GUARD_S)


def test_rank_dying_mid_run_ends_the_others():
    proc = _python(2, "mpi_rank_dies.py")
    assert "rank 1: killing itself" in proc.stdout
    assert proc.returncode != 0 and "finished" not in proc.stdout, proc.stdout + proc.stderr


def _per_rank(proc: subprocess.CompletedProcess[str]) -> list[dict]:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_default_threads_share_the_node():
    proc = _python(2, "mpi_threads.py")
    ranks = _per_rank(proc)
    for r in ranks:
        share = r["usable"] if r["usable"] < r["cores"] else max(1, r["cores"] // 2)
        assert r["threads"] == r["again"] == share and r["explicit"] == 1
        assert r["policy"] is None  # not oversubscribed: OpenMP's own policy
    told = [ln for ln in proc.stderr.splitlines() if "OpenMP thread(s) per rank" in ln]
    assert told == [f"msc: 2 rank(s) on this node, {ranks[0]['cores']} core(s): {ranks[0]['threads']} "
                    "OpenMP thread(s) per rank (threads= or OMP_NUM_THREADS to change)"]


def test_omp_num_threads_is_respected():
    proc = _python(2, "mpi_threads.py", OMP_NUM_THREADS="1")
    assert all(r["threads"] == 0 and r["explicit"] == 1 for r in _per_rank(proc))  # 0: OpenMP's own default
    assert "OpenMP thread(s) per rank" not in proc.stderr


def test_oversubscribed_ranks_wait_passively():
    cores = str(os.cpu_count())  # each of 2 ranks asks for every core
    assert all(r["policy"] == "passive" for r in _per_rank(_python(2, "mpi_threads.py", OMP_NUM_THREADS=cores)))
    kept = _per_rank(_python(2, "mpi_threads.py", OMP_NUM_THREADS=cores, OMP_WAIT_POLICY="active"))
    assert all(r["policy"] == "active" for r in kept)  # the user's choice stands


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    out = heat.emit("openmp+mpi", tmp_path_factory.mktemp("emit") / "heat")
    mpicc = Path(sys.executable).parent / "mpicc"
    make = ["make", "-s", "-C", str(out)] + ([f"MPICC={mpicc}"] if mpicc.exists() else [])
    proc = subprocess.run(make, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out / "heat"


def _program_args(program: Path, tmp: Path, steps: int) -> list[str]:
    np.save(tmp / "u.npy", np.random.default_rng(2).random((66, 66)))
    return [str(program), "--steps", str(steps), "--param", "alpha=0.1", "--in", f"u={tmp / 'u.npy'}"]


def test_emitted_program_threads(program, tmp_path):
    args = _program_args(program, tmp_path, 3)
    proc = subprocess.run([MPIEXEC, "-n", "2", *args], capture_output=True, text=True, env=_env(),
                          timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr
    cores = os.cpu_count() or 1
    share = len(os.sched_getaffinity(0)) if len(os.sched_getaffinity(0)) < cores else max(1, cores // 2)
    assert proc.stderr.splitlines() == [f"heat: 2 rank(s) on this node, {cores} core(s): {share} OpenMP thread(s) "
                                        "per rank (--threads or OMP_NUM_THREADS to change)"]
    for given in ({"OMP_NUM_THREADS": "1"}, {}):
        extra = [] if given else ["--threads", "1"]
        quiet = subprocess.run([MPIEXEC, "-n", "2", *args, *extra], capture_output=True, text=True,
                               env=_env(**given), timeout=HANG_GUARD_S)
        assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_emitted_program_help_under_mpiexec(program):
    proc = subprocess.run([MPIEXEC, "-n", "2", str(program), "--help"], capture_output=True, text=True, env=_env(),
                          timeout=HANG_GUARD_S)
    assert proc.returncode == 0 and proc.stdout.count("Usage: mpiexec -n P heat") == 1  # rank 0 only


def _ranks_of(program: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().split(b"\0")[0] == str(program).encode():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def test_emitted_program_rank_dying_mid_run(program, tmp_path):
    args = _program_args(program, tmp_path, 10**8)
    run = subprocess.Popen([MPIEXEC, "-n", "2", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=_env(OMP_NUM_THREADS="1"))
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while len(_ranks_of(program)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        ranks = _ranks_of(program)
        assert len(ranks) == 2, "the program did not start"
        time.sleep(1.0)  # well into the time loop
        os.kill(max(ranks), signal.SIGKILL)
        out, err = run.communicate(timeout=HANG_GUARD_S)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode != 0 and "steps in" not in out, out + err
    assert _ranks_of(program) == []  # no rank left behind
