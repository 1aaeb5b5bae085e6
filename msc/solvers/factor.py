"""The numeric factor: supernodal solves, log-determinant, L as scipy.sparse."""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from msc.solvers import native
from msc.solvers.errors import RightHandSideError
from msc.solvers.memory import small_pages
from msc.solvers.symbolic import SupernodalStructure


class Factor:
    """P A P^T = L L^T with P = I[perm], as returned by cholesky() / factorize().

    Attributes: perm, L (scipy.sparse CSC, lower, of the *permuted* matrix),
    nnz (entries of L), nnz_stored (including amalgamation zeros), flops,
    timings (seconds per phase) and stats (queue statistics and sizes)."""

    def __init__(self, structure: SupernodalStructure, Lx: np.ndarray,
                 timings: dict[str, float], stats: dict[str, object]) -> None:
        self._S = structure
        self._Lx = Lx
        self.timings = timings
        self.stats = stats
        self._L: sp.csc_array | None = None

    @property
    def n(self) -> int:
        return self._S.n

    @property
    def perm(self) -> np.ndarray:
        """The fill-reducing permutation: L L^T = A[perm][:, perm]."""
        return self._S.perm

    @property
    def nnz(self) -> int:
        """Entries of L (exact column counts, without amalgamation zeros)."""
        return self._S.nnz_L

    @property
    def nnz_stored(self) -> int:
        """Entries the supernodal factor stores (lower triangles of the blocks)."""
        return self._S.nnz_L_stored

    @property
    def flops(self) -> float:
        """Floating-point operations of the factorization, sum of colcount^2."""
        return self._S.flops

    @property
    def L(self) -> sp.csc_array:
        """L of the permuted matrix (CSC, sorted rows), amalgamation zeros included."""
        if self._L is None:
            S = self._S
            Lp = np.empty(S.n + 1, dtype=np.int64)
            Li = np.empty(S.nnz_L_stored, dtype=np.int32)
            Lv = np.empty(S.nnz_L_stored, dtype=np.float64)
            native.numeric_lib().chol_to_csc(S.nsuper, S.super, S.Sp, S.Si, S.Px, self._Lx, Lp, Li, Lv)
            self._L = sp.csc_array((Lv, Li, Lp), shape=(S.n, S.n))
        return self._L

    def diagonal(self) -> np.ndarray:
        """Diagonal of L."""
        S = self._S
        cols = np.arange(S.n)
        s = S.snode_of
        local = cols - S.super[s]
        return self._Lx[S.Px[s] + local * np.diff(S.Sp)[s] + local]

    def rcond(self) -> float:
        """CHOLMOD's cheap reciprocal condition estimate, (min diag(L) / max diag(L))^2: near machine
        epsilon when A is singular and rounding left a tiny positive pivot (the factorisation then
        succeeds, and its solutions are meaningless); 1.0 for a diagonal A of equal entries."""
        d = self.diagonal()
        return float((d.min() / d.max()) ** 2) if d.size else 1.0

    def logdet(self) -> float:
        """log(det(A)) = 2 * sum(log(diag(L)))."""
        return float(2.0 * np.sum(np.log(self.diagonal())))

    @small_pages()
    def solve(self, b: object) -> np.ndarray:
        """Solve A x = b for b of shape (n,) or (n, k); returns float64 of b's shape."""
        t0 = time.perf_counter()
        if sp.issparse(b):
            raise RightHandSideError(f"right-hand side must be a dense numpy array, got a scipy.sparse "
                                     f"{type(b).__name__} (pass b.toarray())")
        B = np.asarray(b)
        if B.ndim not in (1, 2) or B.shape[0] != self.n:
            raise RightHandSideError(
                f"right-hand side must have shape ({self.n},) or ({self.n}, k), got {B.shape}")
        if B.dtype.kind not in "fiub":
            raise RightHandSideError(f"right-hand side must be real, got dtype {B.dtype}")
        if not np.isfinite(B).all():
            raise RightHandSideError("right-hand side has NaN or Inf entries")
        X = np.ascontiguousarray(B, dtype=np.float64)
        out = np.empty_like(X)
        S = self._S
        if X.size:
            status = native.numeric_lib().chol_solve(
                S.n, S.nsuper, S.super, S.Sp, S.Si, S.Px, self._Lx, S.perm, X, np.empty_like(X), out,
                1 if X.ndim == 1 else X.shape[1])
            if status != 0:
                raise MemoryError(f"no memory for the solve's workspace ({X.shape[0]} x {X.size // max(X.shape[0], 1)})")
        self.timings["solve"] = time.perf_counter() - t0
        return out

    def __call__(self, b: object) -> np.ndarray:
        return self.solve(b)

    def __repr__(self) -> str:
        return (f"Factor(n={self.n}, nnz(L)={self.nnz:,}, supernodes={self._S.nsuper:,}, "
                f"ordering={self.stats.get('ordering')!r})")
