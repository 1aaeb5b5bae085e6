"""The PDE examples run (small sizes) and draw their pictures into a temporary folder."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
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
                                                            "poisson3d_multigrid"}


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
