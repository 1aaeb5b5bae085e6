"""Standalone source trees: `make -C DIR` builds them without msc, and the
program's .npy output equals the reference interpreter's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from stencil_gen import generate, program_arguments

import msc
from msc import t, x, y

SAMPLE = [0, 3, 5, 11, 19, 26, 33, 40]


def _build(stencil: msc.Stencil, directory: Path, dtype: str) -> Path:
    stencil.emit("openmp", directory, dtype=dtype)
    assert sorted(p.name for p in directory.iterdir()) == [".msc-files", "Makefile", "kernel.c", "main.c", "npy.h"]
    proc = subprocess.run(["make", "-C", str(directory)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return directory / stencil.name


def _run(program: Path, steps: int, inputs: dict, tmp: Path, written: list[str]) -> tuple[dict, str]:
    cmd = [str(program), "--steps", str(steps), "--threads", "2", *program_arguments(inputs, tmp)]
    for name in written:
        cmd += ["--out", f"{name}={tmp / ('out_' + name + '.npy')}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return {name: np.load(tmp / f"out_{name}.npy") for name in written}, proc.stdout


@pytest.mark.parametrize("seed", SAMPLE)
def test_emitted_program_matches_reference(seed, tmp_path, assert_matches):
    case = generate(seed)
    program = _build(case.stencil, tmp_path / "src", case.dtype)
    written = [f.name for f in case.stencil.ir.written_fields]
    result, stdout = _run(program, case.steps, case.inputs, tmp_path, written)
    assert "GStencil/s" in stdout
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    assert_matches(result, expected, case.dtype, case)


def test_design_md_command_line(tmp_path):
    """`DIR/NAME --steps N --param alpha=0.1 --in u=u0.npy --out u=u.npy`."""

    @msc.stencil
    def heat(u, alpha):
        u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y])

    program = _build(heat, tmp_path / "heat", "float64")
    u0 = np.random.default_rng(0).random((33, 40))
    np.save(tmp_path / "u0.npy", u0)
    proc = subprocess.run([str(program), "--steps", "10", "--param", "alpha=0.1", "--in", f"u={tmp_path / 'u0.npy'}",
                           "--out", f"u={tmp_path / 'u.npy'}"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "heat: 10 steps in" in proc.stdout
    np.testing.assert_allclose(np.load(tmp_path / "u.npy"), heat.reference(steps=10, u=u0, alpha=0.1)["u"], rtol=1e-12)

    bad = subprocess.run([str(program), "--steps", "1", "--in", f"u={tmp_path / 'u0.npy'}"], capture_output=True, text=True)
    assert bad.returncode != 0 and "missing --param alpha" in bad.stderr
    wrong = np.zeros((4, 4), np.float32)
    np.save(tmp_path / "f32.npy", wrong)
    bad = subprocess.run([str(program), "--steps", "1", "--param", "alpha=1", "--in", f"u={tmp_path / 'f32.npy'}"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "dtype '<f4', expected '<f8'" in bad.stderr
    for argv, said in ((["--bogus"], "unknown option --bogus"), (["--steps", "1", "--bogus", "2"], "unknown option --bogus"),
                       (["--steps"], "missing value after --steps"),
                       # an option given twice: the last silently won
                       (["--steps", "1", "--steps", "2"], "heat: given twice: --steps"),
                       (["--threads", "1", "--steps", "1", "--threads", "2"], "heat: given twice: --threads"),
                       (["--param", "alpha=0.1", "--param", "alpha=0.3"], "heat: given twice: --param alpha"),
                       (["--in", "u=a.npy", "--in", "u=b.npy"], "heat: given twice: --in u"),
                       (["--out", "u=a.npy", "--steps", "1", "--out", "u=b.npy"], "heat: given twice: --out u")):
        bad = subprocess.run([str(program), *argv], capture_output=True, text=True)
        assert bad.returncode != 0 and said in bad.stderr, (argv, bad.stderr)


def test_without_a_thread_count_the_program_takes_the_free_cores(tmp_path):
    """As a Python run does (msc/runtime/threads.py): the cores less the others' running tasks, read here from a
    stand-in for /proc/loadavg; --threads and OMP_NUM_THREADS are kept as given."""
    import os

    @msc.stencil
    def heat(u, alpha):
        u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1]
                                               - 4 * u[t, x, y])

    heat.emit("openmp", tmp_path / "heat")
    load = tmp_path / "loadavg"
    flags = f"CFLAGS=-O1 -fopenmp -std=c11 -DMSC_LOADAVG='\"{load}\"'"
    proc = subprocess.run(["make", "-C", str(tmp_path / "heat"), flags], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    np.save(tmp_path / "u0.npy", np.random.default_rng(0).random((20, 20)))
    cores = len(os.sched_getaffinity(0))

    def note(running: int, *options: str, env: dict[str, str] | None = None) -> str:
        load.write_text(f"0.50 0.40 0.30 {running}/300 4242\n")
        environment = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | (env or {})
        done = subprocess.run([str(tmp_path / "heat" / "heat"), "--steps", "3", "--param", "alpha=0.1", "--in",
                               f"u={tmp_path / 'u0.npy'}", *options], capture_output=True, text=True, env=environment)
        assert done.returncode == 0, done.stderr
        return done.stderr

    busy = note(cores + 5)  # every other core busy: one thread, and the program says so
    assert (f"other processes keep {cores - 1} of {cores} core(s) busy: 1 OpenMP thread(s)" in busy) == (cores > 1)
    assert note(1) == ""  # only this program runs: every core
    assert note(cores + 5, "--threads", "2") == "" and note(cores + 5, env={"OMP_NUM_THREADS": "2"}) == ""

    # a schedule's with_threads(n) was dropped: it is the program's count now, as in process (--threads still wins)
    heat.emit("openmp", tmp_path / "heat", schedule=msc.Schedule().with_threads(2))
    proc = subprocess.run(["make", "-C", str(tmp_path / "heat"), flags], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert note(cores + 5) == "" and "int nthreads = 2;" in (tmp_path / "heat" / "main.c").read_text()
    usage = subprocess.run([str(tmp_path / "heat" / "heat"), "--help"], capture_output=True, text=True)
    assert "--threads N: OpenMP threads (default: 2, the schedule's)" in usage.stdout + usage.stderr


def test_every_level_out_continues_the_run(tmp_path, assert_matches):
    """`--out NAME=A.npy,B.npy,...` writes every level the next step reads,
    oldest first: fed back as --in, the run goes on as one run (how an athread
    Simulation advances its program); another count of files is refused before
    anything runs."""
    case = generate(3)  # 1D dirichlet, two fields of 3 levels
    program = _build(case.stencil, tmp_path / "src", case.dtype)
    fields = case.stencil.ir.written_fields
    first = case.steps // 2
    cmd = [str(program), "--steps", str(first), *program_arguments(case.inputs, tmp_path)]
    for f in fields:
        cmd += ["--out", f"{f.name}=" + ",".join(str(tmp_path / f"mid_{f.name}{k}.npy") for k in range(f.window))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    middle = dict(case.inputs, **{f.name: [np.load(tmp_path / f"mid_{f.name}{k}.npy") for k in range(f.window)]
                                  for f in fields})
    result, _ = _run(program, case.steps - first, middle, tmp_path, [f.name for f in fields])
    assert_matches(result, case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs), case.dtype, case)
    two = f"{fields[0].name}={tmp_path / 'a.npy'},{tmp_path / 'b.npy'}"
    bad = subprocess.run([*cmd[:3], *program_arguments(case.inputs, tmp_path), "--out", two], capture_output=True, text=True)
    assert bad.returncode != 0 and "wrong number of time levels (one file, or 3)" in bad.stderr
    assert not (tmp_path / "a.npy").exists() and "GStencil/s" not in bad.stdout


@msc.stencil
def averaged(u):  # no parameters: the driver reads none
    u[t + 1, x, y] = 0.25 * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1])


@msc.stencil
def scaled(u, a):
    u[t + 1, x, y] = a * u[t, x - 1, y]


@pytest.mark.parametrize("stencil", [averaged, scaled], ids=["no parameters", "a parameter"])
@pytest.mark.parametrize("target", ["openmp", "openmp+mpi"])
def test_the_driver_compiles_without_a_warning(stencil, target, tmp_path):
    """A stencil without parameters left the driver's parameter array set and never read (nvcc warned), and
    -O1 found two messages that could be cut short."""
    out = stencil.emit(target, tmp_path / "tree")
    flags = "CFLAGS=-O1 -fopenmp -std=gnu11 -Wall -Wextra -Werror"
    proc = subprocess.run(["make", "-s", "-C", str(out), flags], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
