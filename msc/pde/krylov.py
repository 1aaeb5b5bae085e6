"""Preconditioned Krylov methods on flat vectors: CG for symmetric definite operators, GMRES otherwise.

Both take `apply(v) -> A v` and `precondition(r) -> ~A^-1 r` (a multigrid
V-cycle; each may return the same buffer every call: neither result is kept
past the next call) and stop when ||b - A x|| <= tol ||b|| (2-norms). The history of
relative residuals is returned; a solve that does not reach `tol` within
`maxiter` raises ConvergenceError carrying it. CG works unchanged for negative
definite A with a negative definite preconditioner (the signs cancel).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np

from msc.errors import ConvergenceError
from msc.runtime import build_shared_library, load_library

Apply = Callable[[np.ndarray], np.ndarray]
Monitor = Callable[[float], None]


def _ignore(_residual: float) -> None:
    pass


@functools.lru_cache(maxsize=None)
def _library() -> ctypes.CDLL:
    lib = load_library(build_shared_library((Path(__file__).resolve().parent / "vectors.c").read_text(),
                                            "msc_krylov_vectors"))
    vec = np.ctypeslib.ndpointer(np.float64, flags="C_CONTIGUOUS")
    long, double, int_ = ctypes.c_long, ctypes.c_double, ctypes.c_int
    for name, restype, argtypes in (("vec_dot", double, [long, vec, vec, int_]),
                                    ("vec_cg_update", double, [long, double, vec, vec, vec, vec, int_]),
                                    ("vec_xpay", None, [long, vec, double, vec, int_])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def _local(part: float) -> float:
    return part


class Vectors:
    """The Krylov methods' vector operations, compiled and fused (vectors.c) on `threads` threads;
    `total` sums a dot product's local part over MPI ranks (the identity in one process)."""

    def __init__(self, threads: int, total: Callable[[float], float] = _local) -> None:
        self.threads, self.total = threads, total

    def dot(self, a: np.ndarray, b: np.ndarray) -> float:
        return self.total(_library().vec_dot(a.size, a, b, self.threads))

    def cg_update(self, alpha: float, x: np.ndarray, p: np.ndarray, r: np.ndarray, q: np.ndarray) -> float:
        """x += alpha p, r -= alpha q, in one pass; returns r . r."""
        return self.total(_library().vec_cg_update(x.size, alpha, x, p, r, q, self.threads))

    def xpay(self, z: np.ndarray, beta: float, p: np.ndarray) -> None:
        """p = z + beta p, in place."""
        _library().vec_xpay(p.size, z, beta, p, self.threads)


def _fail(method: str, what: str, tol: float, history: list[float]) -> ConvergenceError:
    return ConvergenceError(
        f"{what}: {method} did not reach the relative residual {tol:g} in {len(history) - 1} iterations "
        f"(last {history[-1]:.2e}); raise maxiter=, loosen tol=, or check that the operator is definite",
        history)


def cg(apply: Apply, precondition: Apply, b: np.ndarray, tol: float, maxiter: int,
       what: str, vectors: Vectors, monitor: Monitor = _ignore) -> tuple[np.ndarray, list[float]]:
    """Preconditioned conjugate gradients from x = 0 (`monitor` sees each new relative residual)."""
    x = np.zeros_like(b)
    bnorm = np.sqrt(vectors.dot(b, b))
    if bnorm == 0.0:
        return x, [0.0]
    bnorm = float(bnorm)
    r = b.copy()
    history = [1.0]
    z = precondition(r)
    p = z.copy()
    rz = vectors.dot(r, z)
    for _ in range(maxiter):
        q = apply(p)
        alpha = rz / vectors.dot(p, q)
        history.append(float(np.sqrt(vectors.cg_update(alpha, x, p, r, q)) / bnorm))
        monitor(history[-1])
        if history[-1] <= tol:
            return x, history
        z = precondition(r)
        rz_new = vectors.dot(r, z)
        vectors.xpay(z, rz_new / rz, p)
        rz = rz_new
    raise _fail("CG", what, tol, history)


def gmres(apply: Apply, precondition: Apply, b: np.ndarray, tol: float, maxiter: int, what: str,
          vectors: Vectors, monitor: Monitor = _ignore, restart: int = 30) -> tuple[np.ndarray, list[float]]:
    """Right-preconditioned restarted GMRES(restart) from x = 0 (Givens rotations)."""
    dot = vectors.dot
    x = np.zeros_like(b)
    bnorm = float(np.sqrt(dot(b, b)))
    if bnorm == 0.0:
        return x, [0.0]
    history = [1.0]
    r = b.copy()
    while len(history) - 1 < maxiter:
        beta = float(np.sqrt(dot(r, r)))
        m = min(restart, maxiter - (len(history) - 1))
        V = np.empty((m + 1, b.size))
        Z = np.empty((m, b.size))
        H = np.zeros((m + 1, m))
        cs, sn = np.zeros(m), np.zeros(m)
        g = np.zeros(m + 1)
        g[0] = beta
        V[0] = r / beta
        k = 0
        for k in range(m):
            Z[k] = precondition(V[k])
            w = apply(Z[k])
            for i in range(k + 1):  # modified Gram-Schmidt
                H[i, k] = dot(V[i], w)
                w -= H[i, k] * V[i]
            H[k + 1, k] = np.sqrt(dot(w, w))
            if H[k + 1, k] != 0.0:
                V[k + 1] = w / H[k + 1, k]
            for i in range(k):
                H[i, k], H[i + 1, k] = cs[i] * H[i, k] + sn[i] * H[i + 1, k], -sn[i] * H[i, k] + cs[i] * H[i + 1, k]
            denom = np.hypot(H[k, k], H[k + 1, k])
            cs[k], sn[k] = H[k, k] / denom, H[k + 1, k] / denom
            H[k, k], H[k + 1, k] = denom, 0.0
            g[k], g[k + 1] = cs[k] * g[k], -sn[k] * g[k]
            history.append(float(abs(g[k + 1])) / bnorm)
            monitor(history[-1])
            if history[-1] <= tol:
                break
        y = np.linalg.solve(np.triu(H[:k + 1, :k + 1]), g[:k + 1])
        x += y @ Z[:k + 1]
        r = b - apply(x)
        history[-1] = float(np.sqrt(dot(r, r))) / bnorm  # the true residual at the end of a cycle
        if history[-1] <= tol:
            return x, history
    raise _fail("GMRES", what, tol, history)
