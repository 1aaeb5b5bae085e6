"""Preconditioned Krylov methods on flat vectors: CG for symmetric definite operators, GMRES otherwise.

Both take `apply(v) -> A v` and `precondition(r) -> ~A^-1 r` (a multigrid
V-cycle; each may return the same buffer every call: neither result is kept
past the next call; CG's may return views into kernel buffers, of v's size)
and stop when ||b - A x|| <= tol ||b|| (2-norms). The history of relative
residuals is returned; a solve that does not reach `tol` within
`maxiter` raises ConvergenceError carrying it. CG works unchanged for negative
definite A with a negative definite preconditioner (the signs cancel).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from msc.errors import ConvergenceError
from msc.pde.vectors import Vectors

Apply = Callable[[np.ndarray], np.ndarray]
Precondition = Callable[[np.ndarray | None], np.ndarray]  # None: its input is in place (cg's `residual_into`)
Monitor = Callable[[float], None]


def _ignore(_residual: float) -> None:
    pass


def _fail(method: str, what: str, tol: float, history: list[float]) -> ConvergenceError:
    return ConvergenceError(
        f"{what}: {method} did not reach the relative residual {tol:g} in {len(history) - 1} iterations "
        f"(last {history[-1]:.2e}); raise maxiter=, loosen tol=, or check that the operator is definite",
        history)


def cg(apply: Apply, precondition: Precondition, b: np.ndarray, tol: float, maxiter: int,
       what: str, vectors: Vectors, monitor: Monitor = _ignore, x: np.ndarray | None = None,
       residual: np.ndarray | None = None, direction: np.ndarray | None = None,
       residual_into: np.ndarray | None = None) -> tuple[np.ndarray, list[float]]:
    """Preconditioned conjugate gradients from x = 0 (`monitor` sees each new relative residual;
    `x`: where the solution goes, b's size, zero on entry, a view may be given; default a fresh
    array; `residual`: where the residual lives, b's size, a view the preconditioner may read in
    place; default a flat array of its own; `direction`: where the direction lives, a view `apply`
    may read in place; default a flat array of its own; `residual_into`: a view each updated
    residual is written into as well, in the same pass (float32 may be), where
    `precondition(None)` reads it).

    The residual and the direction are those of b / ||b||, of order one whatever b's scale (a
    single-precision preconditioner neither overflows nor underflows on them); the steps along p
    are scaled back as x takes them (alpha does not depend on that scale)."""
    x = np.zeros_like(b) if x is None else x
    bnorm = np.sqrt(vectors.dot(b, b))
    if bnorm == 0.0:
        return x, [0.0]
    bnorm = float(bnorm)
    r = np.empty(b.size) if residual is None else residual
    vectors.scale(1.0 / bnorm, b, r)
    history = [1.0]
    z = precondition(r)
    p = np.empty(b.size) if direction is None else direction
    vectors.scale(1.0, z, p)
    rz = vectors.dot(r, z)
    for _ in range(maxiter):
        q = apply(p)
        curvature = float(vectors.dot(p, q))
        if curvature == 0.0 or not np.isfinite(curvature):  # p'Ap: zero or not finite on a singular operator
            raise ConvergenceError(f"{what}: CG broke down after {len(history) - 1} iterations (p'Ap = "
                                   f"{curvature:g}): the operator is singular or not definite", history)
        alpha = rz / curvature
        history.append(float(np.sqrt(vectors.residual_update(alpha, r, q, residual_into))))
        monitor(history[-1])
        if history[-1] <= tol:
            vectors.axpy(alpha * bnorm, p, x)
            return x, history
        z = precondition(None if residual_into is not None else r)
        rz_new = vectors.dot(r, z)
        vectors.cg_step(alpha * bnorm, x, z, rz_new / rz, p)  # x's step along p, then the new p
        rz = rz_new
    raise _fail("CG", what, tol, history)


def gmres(apply: Apply, precondition: Apply, b: np.ndarray, tol: float, maxiter: int, what: str,
          vectors: Vectors, monitor: Monitor = _ignore, x: np.ndarray | None = None,
          restart: int = 30) -> tuple[np.ndarray, list[float]]:
    """Right-preconditioned restarted GMRES(restart) from x = 0 (Givens rotations; `x` as CG's);
    `apply` and `precondition` may return views into kernel buffers, valid until their next call."""
    dot = vectors.dot
    x = np.zeros_like(b) if x is None else x
    bnorm = float(np.sqrt(dot(b, b)))
    if bnorm == 0.0:
        return x, [0.0]
    history = [1.0]
    r = b.copy()
    while len(history) - 1 < maxiter:
        beta = float(np.sqrt(dot(r, r)))
        m = min(restart, maxiter - (len(history) - 1))
        V = vectors.scratch("gmres basis", m + 1, b.size)
        Z = vectors.scratch("gmres preconditioned basis", m, b.size)
        H = np.zeros((m + 1, m))
        cs, sn = np.zeros(m), np.zeros(m)
        g = np.zeros(m + 1)
        g[0] = beta
        vectors.scale(1.0 / beta, r, V[0])
        k = 0
        for k in range(m):
            vectors.scale(1.0, precondition(V[k]), Z[k])
            w = apply(Z[k])
            for i in range(k + 1):  # modified Gram-Schmidt, in place
                H[i, k] = dot(V[i], w)
                vectors.axpy(-H[i, k], V[i], w)
            H[k + 1, k] = np.sqrt(dot(w, w))
            if H[k + 1, k] != 0.0:
                vectors.scale(1.0 / H[k + 1, k], w, V[k + 1])
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
        x += (y @ Z[:k + 1]).reshape(x.shape)
        r = b - apply(x).reshape(b.shape)
        history[-1] = float(np.sqrt(dot(r, r))) / bnorm  # the true residual at the end of a cycle
        if history[-1] <= tol:
            return x, history
    raise _fail("GMRES", what, tol, history)
