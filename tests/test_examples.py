"""Every example runs as a user would run it (with small sizes), and what it
prints is checked against values computed here independently: hand-written
numpy time steps for the stencils, scipy's direct solver for the Cholesky
example. The `.msc` examples are emitted, built, run as programs and
checked the same way."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from msc.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, *args: str, cwd: Path) -> str:
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def numbers_after(label: str, text: str) -> list[float]:
    """The numbers printed right after each occurrence of `label`."""
    return [float(v) for v in re.findall(re.escape(label) + r"\s*([-+0-9.e]+)", text)]


def laplacian(u: np.ndarray) -> np.ndarray:
    """The 5-point Laplacian of the interior of `u` (shape reduced by 2 in each dimension)."""
    return u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]


def heat_steps(u0: np.ndarray, alpha: float, steps: int) -> np.ndarray:
    u = u0.copy()
    for _ in range(steps):
        u[1:-1, 1:-1] = u[1:-1, 1:-1] + alpha * laplacian(u)
    return u


def test_heat2d(tmp_path):
    out = run_example("heat2d.py", "64", "10", cwd=tmp_path)
    assert "10 steps on 64x64" in out
    # the example compares its kernel with msc's reference; that difference must be rounding only
    (difference,) = numbers_after("max difference to the reference", out)
    assert difference <= 1e-12
    assert (tmp_path / "build" / "heat2d" / "kernel.c").exists()


def test_wave_coupled(tmp_path):
    n, steps = 48, 10
    out = run_example("wave_coupled.py", str(n), str(steps), cwd=tmp_path)
    grid = np.linspace(-1, 1, n)
    X, Y = np.meshgrid(grid, grid, indexing="ij")
    p_old = p = np.exp(-200 * (X**2 + Y**2))
    c2 = np.where(X > 0.3, 0.5, 1.0) ** 2
    for _ in range(steps):
        new = p.copy()
        new[1:-1, 1:-1] = 2 * p[1:-1, 1:-1] - p_old[1:-1, 1:-1] + 0.2 * c2[1:-1, 1:-1] * laplacian(p)
        p_old, p = p, new
    (max_p,) = numbers_after("max |p|", out)
    assert max_p == pytest.approx(np.max(np.abs(p)), abs=1e-3)
    (difference,) = numbers_after("difference to the reference", out)
    assert difference <= 1e-12


def test_yee2d(tmp_path):
    """The staggered scheme against hand-written numpy steps: ex and ey read hz's new level."""
    n, steps, c = 40, 30, 0.5
    out = run_example("yee2d.py", str(n), str(steps), cwd=tmp_path)
    grid = np.linspace(-1, 1, n)
    X, Y = np.meshgrid(grid, grid, indexing="ij")
    ex, ey, hz = np.zeros((n, n)), np.zeros((n, n)), np.exp(-100 * (X**2 + Y**2))
    start = np.sum(hz**2)
    inner = (slice(1, -1), slice(1, -1))
    for _ in range(steps):
        hz[inner] -= c * (ey[2:, 1:-1] - ey[1:-1, 1:-1] - ex[1:-1, 2:] + ex[1:-1, 1:-1])
        ex[inner] += c * (hz[1:-1, 1:-1] - hz[1:-1, :-2])
        ey[inner] -= c * (hz[1:-1, 1:-1] - hz[:-2, 1:-1])
    (max_hz,) = numbers_after("max |hz|", out)
    assert max_hz == pytest.approx(np.max(np.abs(hz)), abs=1e-6)
    energies = re.search(r"energy ([-+0-9.e]+) at the start, ([-+0-9.e]+) at the end", out)
    assert energies is not None, out
    assert [float(e) for e in energies.groups()] == pytest.approx([start, np.sum(ex**2 + ey**2 + hz**2)], abs=1e-5)
    (difference,) = numbers_after("difference to the reference", out)
    assert difference <= 1e-12


def test_schedules(tmp_path):
    out = run_example("schedules.py", "96", "8", cwd=tmp_path)
    lines = out.strip().splitlines()
    assert [line.split()[0] for line in lines[:4]] == [
        "Schedule()", "Schedule().tile(x=32,", "Schedule().stream_stores().prefetch(512)", "Schedule().time_tile(8,"]
    assert len(lines) == 5 and lines[4].startswith("Schedule()")  # the tuned one
    errors = numbers_after("error", out)
    assert len(errors) == 5 and max(errors) <= 1e-12


def test_cholesky_poisson(tmp_path):
    m = 40
    out = run_example("cholesky_poisson.py", str(m), cwd=tmp_path)
    h = 1.0 / (m + 1)
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    A = sp.csc_array(sp.kron(T, sp.eye_array(m)) + sp.kron(sp.eye_array(m), T)) / h**2
    xs = np.arange(1, m + 1) * h
    exact = np.outer(np.sin(np.pi * xs), np.sin(np.pi * xs)).ravel()
    u = spla.spsolve(A, 2 * np.pi**2 * exact)
    assert f"n = {m * m:,}," in out
    (residual,) = numbers_after("||Au - f|| / ||f|| =", out)
    assert residual <= 1e-12
    (error,) = numbers_after("max error against sin(pi x) sin(pi y) =", out)
    assert error == pytest.approx(np.abs(u - exact).max(), rel=1e-2)


def test_every_python_example_is_exercised():
    tested = {"heat2d.py", "wave_coupled.py", "yee2d.py", "schedules.py", "cholesky_poisson.py",
              "distributed_heat.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} <= tested


@pytest.mark.mpi
def test_distributed_example_on_two_ranks(tmp_path):
    mpiexec = Path(sys.executable).parent / "mpiexec"
    exe = str(mpiexec) if mpiexec.exists() else shutil.which("mpiexec")
    assert exe, "mpiexec not found: the test extra installs mpi4py and the mpich wheel"
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    n, steps = 66, 10
    proc = subprocess.run([exe, "-n", "2", sys.executable, str(EXAMPLES / "distributed_heat.py"), "--size", str(n),
                           "--steps", str(steps)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "2 ranks, process grid" in proc.stdout
    i, j = np.ix_(np.arange(n), np.arange(n))
    u0 = np.where((abs(i - n / 2) < n / 10) & (abs(j - n / 2) < n / 10), 1.0, 0.0)
    u0[[0, -1], :] = u0[:, [0, -1]] = 0.0
    u = heat_steps(u0, 0.2, steps)[1:-1, 1:-1]
    assert numbers_after("total heat", proc.stdout) == [pytest.approx(u.sum(), abs=1e-6)]
    assert numbers_after("hottest point", proc.stdout) == [pytest.approx(u.max(), abs=1e-6)]


def _advection1d(u: np.ndarray, c: np.ndarray, dt_dx: float) -> np.ndarray:
    left, right = np.roll(u, 1), np.roll(u, -1)
    return u - dt_dx * np.where(c > 0, c * (u - left), c * (right - u))


def _grayscott(u: np.ndarray, v: np.ndarray, du: float, dv: float, feed: float, kill: float,
               dt: float) -> tuple[np.ndarray, np.ndarray]:
    def lap(a: np.ndarray) -> np.ndarray:
        return np.roll(a, 1, 0) + np.roll(a, -1, 0) + np.roll(a, 1, 1) + np.roll(a, -1, 1) - 4 * a

    uv2 = u * v**2
    return u + dt * (du * lap(u) - uv2 + feed * (1 - u)), v + dt * (dv * lap(v) + uv2 - (feed + kill) * v)


def _heat2d(u: np.ndarray, alpha: float) -> np.ndarray:
    return heat_steps(u, alpha, 1)


MSC_EXAMPLES = {
    # name: (steps, params, fields (name -> shape), written fields, one numpy step)
    "heat2d.msc": (7, {"alpha": 0.2}, {"u": (20, 23)}, ["u"], lambda s, p: {"u": _heat2d(s["u"], p["alpha"])}),
    "advection1d.msc": (9, {"dt_dx": 0.8}, {"u": (50,), "c": (50,)}, ["u"],
                        lambda s, p: {"u": _advection1d(s["u"], s["c"], p["dt_dx"])}),
    "grayscott.msc": (6, {"du": 0.16, "dv": 0.08, "feed": 0.035, "kill": 0.06, "dt": 1.0},
                      {"u": (17, 19), "v": (17, 19)}, ["u", "v"],
                      lambda s, p: dict(zip("uv", _grayscott(s["u"], s["v"], **p)))),
}


def _wave2d_check(tmp_path: Path, program: Path) -> None:
    rng = np.random.default_rng(5)
    u_old, u, speed2 = rng.random((19, 22)), rng.random((19, 22)), 0.5 + 0.5 * rng.random((19, 22))
    for name, value in {"u0": u_old, "u1": u, "s": speed2}.items():
        np.save(tmp_path / f"{name}.npy", value)
    steps, courant2 = 8, 0.1
    _run_program(program, ["--steps", str(steps), "--param", f"courant2={courant2}",
                           "--in", f"u={tmp_path / 'u0.npy'},{tmp_path / 'u1.npy'}", "--in", f"speed2={tmp_path / 's.npy'}",
                           "--out", f"u={tmp_path / 'out_u.npy'}"])
    u_old[[0, -1], :], u_old[:, [0, -1]] = u[[0, -1], :], u[:, [0, -1]]  # the ring comes from the newest level
    for _ in range(steps):
        new = u.copy()
        new[1:-1, 1:-1] = 2 * u[1:-1, 1:-1] - u_old[1:-1, 1:-1] + courant2 * speed2[1:-1, 1:-1] * laplacian(u)
        u_old, u = u, new
    np.testing.assert_allclose(np.load(tmp_path / "out_u.npy"), u, rtol=1e-12, atol=1e-12)


def _run_program(program: Path, args: list[str]) -> None:
    proc = subprocess.run([str(program), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.msc")), ids=lambda p: p.name)
def test_msc_example_runs_as_a_program(path, tmp_path):
    assert main(["emit", str(path), "-o", str(tmp_path / "out")]) == 0
    assert subprocess.run(["make", "-s", "-C", str(tmp_path / "out")], capture_output=True).returncode == 0
    programs = [p for p in (tmp_path / "out").iterdir() if p.is_file() and os.access(p, os.X_OK)]
    assert len(programs) == 1, programs
    if path.name == "wave2d.msc":
        _wave2d_check(tmp_path, programs[0])
        return
    steps, params, shapes, written, step = MSC_EXAMPLES[path.name]
    rng = np.random.default_rng(len(path.name))
    state = {name: rng.random(shape) for name, shape in shapes.items()}
    if "c" in state:
        state["c"] = state["c"] - 0.5  # the velocity changes sign
    args = ["--steps", str(steps)]
    args += [a for name, value in params.items() for a in ("--param", f"{name}={value!r}")]
    for name, value in state.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--in", f"{name}={tmp_path / f'{name}.npy'}"]
    args += [a for name in written for a in ("--out", f"{name}={tmp_path / f'out_{name}.npy'}")]
    _run_program(programs[0], args)
    for _ in range(steps):
        state.update(step(state, params))
    for name in written:
        np.testing.assert_allclose(np.load(tmp_path / f"out_{name}.npy"), state[name], rtol=1e-12, atol=1e-12)
