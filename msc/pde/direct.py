"""Direct solves of assembled operators: swCholesky when (after a sign flip) SPD, else scipy's sparse LU.

Used by msc.solve and msc.implicit with the direct method, and by multigrid on its coarsest level.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from msc.errors import MscError

if TYPE_CHECKING:
    import scipy.sparse as sp


#: the smallest pivot over the largest (LU's |U_ii|; Cholesky's L_ii squared) at or below which a matrix
#: counts as singular: rounding leaves a zero pivot near machine epsilon times the largest
PIVOT_RATIO = 1e-13


def singular(what: str, why: str) -> str:
    """The message of a singular matrix (`why`: how it showed, in parentheses)."""
    return (f"{what}: the matrix is singular{why}; a periodic or pure-Neumann operator, for one, determines u "
            "only up to a constant (msc.solve(..., nullspace='constant') gives the solution of zero mean)")


class Factorization:
    """M = sign * (factored matrix): swCholesky when SPD (maybe after a sign flip), else sparse LU."""

    def __init__(self) -> None:
        self.solver = ""
        self._symbolic: Any = None
        self._solve: Callable[[np.ndarray], np.ndarray] | None = None
        self.sign = 1.0
        self.analyses = 0

    def factor(self, M: sp.csr_array, what: str) -> None:
        """Factor M; `what` names the problem in the error raised when M is singular."""
        from msc.solvers import InvalidMatrixError, NotPositiveDefiniteError, NotSymmetricError, analyze

        diag = M.diagonal()
        sign = 1.0 if np.all(diag > 0) else -1.0 if np.all(diag < 0) else 0.0
        if sign != 0.0:  # swCholesky checks symmetry itself (NotSymmetricError)
            S = sign * M
            try:
                try:
                    if self._symbolic is None:
                        raise InvalidMatrixError("not analysed yet")
                    F = self._symbolic.factorize(S)  # same pattern: the analysis is reused
                except InvalidMatrixError:
                    self._symbolic = analyze(S)
                    self.analyses += 1
                    F = self._symbolic.factorize(S)
                if F.rcond() <= PIVOT_RATIO:  # a zero pivot that rounding made tiny and positive
                    raise MscError(singular(what, f" (Cholesky pivot ratio {F.rcond():.1e})"))
                self.solver, self.sign, self._solve = "swCholesky", sign, F.solve
                return
            except (NotPositiveDefiniteError, NotSymmetricError):
                pass  # not symmetric, or indefinite: LU below
        try:
            from scipy.sparse.linalg import splu  # imported where used: `import msc` stays light

            lu = splu(M.tocsc())
        except RuntimeError as err:
            raise MscError(singular(what, f" ({err})")) from None
        pivots = np.abs(lu.U.diagonal())
        if pivots.size and pivots.min() <= PIVOT_RATIO * pivots.max():
            raise MscError(singular(what, f" (LU pivot ratio {pivots.min() / pivots.max():.1e})"))
        self.solver, self.sign, self._solve, self._symbolic = "splu", 1.0, lu.solve, None

    def solve(self, b: np.ndarray) -> np.ndarray:
        assert self._solve is not None
        return self._solve(b if self.sign == 1.0 else -b)


def check_residual(A: sp.csr_array, v: np.ndarray, b: np.ndarray, what: str) -> None:
    """Raise unless A v = b to a normwise backward error of 1e-8 (a singular A fails here)."""
    scale = float(abs(A).sum(axis=1).max()) * float(np.abs(v).max(initial=0.0)) + float(np.abs(b).max(initial=0.0))
    error = float(np.abs(A @ v - b).max(initial=0.0))
    if not np.isfinite(error) or error > 1e-8 * scale:
        raise MscError(f"{what}: the solution fails its residual check (|A u - b| = {error:.2e}, scale "
                       f"{scale:.2e}); the matrix is singular or nearly so (a periodic or pure-Neumann operator "
                       "determines u only up to a constant)")
