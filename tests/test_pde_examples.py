"""The PDE examples run (small sizes) and draw their pictures into a temporary folder."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import msc

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "pde"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000


def test_poisson_lshape(tmp_path):
    result = load("poisson_lshape").main(["--n", "48", "--picture", str(tmp_path / "l.png")])
    assert result["solver"] == "swCholesky"
    assert result["residual"] < 1e-8 and result["outside"] < 1e-12
    assert 0.03 < result["max_u"] < 0.045   # -laplace(u) = 1 on this L shape peaks near 0.037
    assert_png(tmp_path / "l.png")


def test_implicit_heat(tmp_path):
    result = load("heat_implicit").main(["--n", "40", "--steps", "5", "--picture", str(tmp_path / "h.png")])
    u0, u = result["u0"], result["u"]
    assert result["solver"] == "swCholesky" and result["cfl"] > 1
    assert u[1:-1, 1:-1].max() <= u0.max() and u.min() >= -1e-12   # the discrete maximum principle
    # Crank-Nicolson on the whole grid with a Laplacian built here (ring rows zero: the ring is held)
    n, h, dt = 40, 1.0 / 39, 2e-4
    second = sp.diags_array([np.ones(n - 1), -2 * np.ones(n), np.ones(n - 1)], offsets=[-1, 0, 1]).tolil()
    second[0, :] = 0
    second[n - 1, :] = 0
    inner = sp.diags_array(np.r_[0.0, np.ones(n - 2), 0.0])
    A = (sp.kron(second, inner) + sp.kron(inner, second)).tocsc() / h**2
    M = sp.identity(n * n, format="csc") - dt / 2 * A
    v = u0.ravel()
    for _ in range(5):
        v = spla.spsolve(M, v + dt / 2 * (A @ v))
    np.testing.assert_allclose(u, v.reshape(n, n), rtol=0, atol=1e-12)
    assert_png(tmp_path / "h.png")


def test_explicit_blows_up_implicit_does_not(tmp_path):
    result = load("stability").main(["--n", "24", "--steps", "60", "--picture", str(tmp_path / "s.png")])
    assert result["explicit_max"] > 1e3
    assert result["implicit_max"] <= 1.0
    stable = load("stability").main(["--n", "24", "--steps", "60", "--factor", "0.9",
                                         "--picture", str(tmp_path / "s2.png")])
    assert stable["explicit_max"] <= 1.0
    assert_png(tmp_path / "s.png")


def test_gray_scott_explicit(tmp_path):
    module = load("grayscott")
    result = module.main(["--n", "32", "--steps", "20", "--picture", str(tmp_path / "g.png")])
    ref = msc.explicit(module.gray_scott, 1.0, "euler").reference(steps=20, u=result["u0"], v=result["v0"],
                                                                   **result["params"])
    np.testing.assert_allclose(result["v"], ref["v"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result["u"], ref["u"], rtol=1e-12, atol=1e-12)
    assert_png(tmp_path / "g.png")


def test_every_pde_example_is_exercised():
    assert {p.stem for p in EXAMPLES.glob("*.py")} == {"poisson_lshape", "heat_implicit", "stability", "grayscott",
                                                            "poisson3d_multigrid", "poisson3d_mpi", "periodic_poisson"}


@pytest.mark.parametrize("method", ["direct", "multigrid"])
def test_periodic_poisson(tmp_path, method):
    """The singular periodic problem (nullspace="constant"): the zero-mean solution, second order in h."""
    errors = []
    for n in (32, 64):
        picture = str(tmp_path / "p.png")
        result = load("periodic_poisson").main(["--n", str(n), "--method", method, "--picture", picture])
        assert result["solver"] == ("swCholesky" if method == "direct" else "multigrid-cg")
        assert result["residual"] <= 1e-9 and abs(result["mean"]) <= 1e-12 and abs(result["rhs_mean_removed"]) <= 1e-12
        errors.append(result["error"])
    assert 3.5 <= errors[0] / errors[1] <= 4.5  # halving h quarters the error
    assert_png(tmp_path / "p.png")


def test_poisson3d_multigrid(tmp_path):
    result = load("poisson3d_multigrid").main(["--n", "24", "--picture", str(tmp_path / "p.png")])
    assert result["solver"] == "multigrid-cg" and result["iterations"] <= 15 and result["residual"] <= 1e-8
    u = result["u"]
    peak = np.unravel_index(np.argmax(u), u.shape)
    assert u.min() >= -1e-12 and all(abs(i - 12.5) <= 1 for i in peak)   # a source in the middle: u > 0, peaks there
    assert_png(tmp_path / "p.png")


def test_implicit_heat_with_multigrid_matches_the_factored_steps(tmp_path):
    heat = load("heat_implicit")
    direct = heat.main(["--n", "40", "--steps", "5", "--picture", str(tmp_path / "d.png")])
    mg = heat.main(["--n", "40", "--steps", "5", "--solver", "multigrid", "--picture", str(tmp_path / "m.png")])
    assert mg["solver"] == "multigrid-cg"
    np.testing.assert_allclose(mg["u"], direct["u"], rtol=0, atol=1e-8)


@pytest.mark.mpi
def test_poisson3d_mpi_on_two_ranks(tmp_path):
    """The MPI example (each rank fills and gets its own block) on 2 ranks: the sum and the lowest value of u
    as the one-process solve of the same problem gives them, and the residual it prints within tol."""
    mpiexec = Path(sys.executable).parent / "mpiexec"
    exe = str(mpiexec) if mpiexec.exists() else shutil.which("mpiexec")
    assert exe, "mpiexec not found: the test extra installs mpi4py and the mpich wheel"
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    n = 48  # 48^3 and 24^3 in blocks on both ranks, 12^3 on rank 0
    proc = subprocess.run([exe, "-n", "2", sys.executable, str(EXAMPLES / "poisson3d_mpi.py"), "--n", str(n)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"{n}^3 unknowns on 2 ranks: multigrid-cg" in out and "held by [2, 2, 1] ranks" in out
    residual = float(re.search(r"relative residual ([0-9.e+-]+)", out).group(1))
    total = float(re.search(r"sum of u = ([0-9.e+-]+)", out).group(1))
    lowest = float(re.search(r"lowest u = ([0-9.e+-]+)", out).group(1))
    example = load("poisson3d_mpi")
    h = 1.0 / (n + 1)
    everything = (slice(0, n + 2),) * 3
    k = example.coefficient(*example.coordinates(everything, h))
    f = example.source(*example.coordinates((slice(1, n + 1),) * 3, h))
    u = msc.solve(example.diffusion, f, k=k, h=h, method="direct")[1:-1, 1:-1, 1:-1]
    A, g = example.diffusion.matrix(shape=(n + 2,) * 3, k=k, h=h)
    assert residual <= 1e-8 and np.linalg.norm(A @ u.ravel() + g - f.ravel()) <= 1e-10 * np.linalg.norm(f)
    assert total == pytest.approx(u.sum(), rel=1e-6) and lowest == pytest.approx(u.min(), rel=1e-5)

