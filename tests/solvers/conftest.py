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


BACKWARD_ERROR_EPS = 64  # allowed backward error, in units of the machine epsilon


def backward_error(A: sp.sparray, x: np.ndarray, b: np.ndarray) -> float:
    """Normwise backward error ||Ax - b|| / (||A|| ||x|| + ||b||), infinity norms: a backward-stable
    Cholesky keeps it at a small multiple of the machine epsilon whatever the condition number."""
    norm_A = float(abs(A).sum(axis=1).max())
    r = np.abs(A @ x - b).max()
    return float(r / (norm_A * np.abs(x).max() + np.abs(b).max()))


def backward_stable(A: sp.sparray, x: np.ndarray, b: np.ndarray) -> bool:
    """The solve's backward error is within BACKWARD_ERROR_EPS machine epsilons."""
    return backward_error(A, x, b) <= BACKWARD_ERROR_EPS * np.finfo(np.float64).eps


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
