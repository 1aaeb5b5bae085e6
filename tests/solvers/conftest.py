"""Shared helpers for the swCholesky tests: grid Laplacians and residuals."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp


def laplacian(m: int, dim: int) -> sp.csc_array:
    """The 5-point (2D) or 7-point (3D) Laplacian on an m^dim grid, Dirichlet."""
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    I = sp.eye_array(m)
    if dim == 2:
        A = sp.kron(T, I) + sp.kron(I, T)
    else:
        A = sp.kron(sp.kron(T, I), I) + sp.kron(sp.kron(I, T), I) + sp.kron(sp.kron(I, I), T)
    return sp.csc_array(A)


def random_spd(n: int, density: float, seed: int) -> sp.csc_array:
    """A random sparse SPD matrix (diagonally dominant)."""
    rng = np.random.default_rng(seed)
    R = sp.random_array((n, n), density=density, rng=rng)
    S = R + R.T
    d = np.asarray(abs(S).sum(axis=1)).ravel() + 1.0
    return sp.csc_array(S + sp.diags_array(d))


def relative_residual(A: sp.sparray, x: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(A @ x - b) / np.linalg.norm(b))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
