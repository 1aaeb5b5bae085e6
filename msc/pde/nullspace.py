"""Operators singular by the constants (periodic or pure-Neumann Poisson): msc.solve's nullspace="constant".

Such an operator determines u only up to a constant, and L(u) = rhs has a
solution only when rhs has zero sum (the range of a symmetric operator is
orthogonal to its null space). With nullspace="constant", msc.solve:
- checks that the operator is scalar and symmetric and sends constants to
  zero (`check_annihilates_constants`);
- removes the rhs's mean (`projected`), warning when that changes the
  problem by more than the tolerance (the result is then the least-squares
  solution);
- factors the matrix with its last unknown pinned to zero
  (`PinnedFactorization`: nonsingular when the constants are the whole null
  space), directly or on multigrid's coarsest level; the Krylov method needs
  nothing else, since the rhs has no part along the null space;
- returns the solution of zero mean.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from msc.errors import MscError, StencilArgumentError
from msc.pde.direct import Factorization, singular

if TYPE_CHECKING:
    import scipy.sparse as sp

NULLSPACES = (None, "constant")
ANNIHILATION_RTOL = 1e-10  # |L(1)| against the operator's size that still counts as zero


def check_nullspace(what: str, nullspace: Any) -> bool:
    """True for nullspace="constant", False for None; anything else is a StencilArgumentError."""
    if nullspace not in NULLSPACES:
        raise StencilArgumentError(f"{what}: nullspace must be None or 'constant' (an operator singular by the "
                                   f"constants, as a periodic Poisson operator), got {nullspace!r}")
    return nullspace == "constant"


def check_annihilates_constants(what: str, applied_to_ones: np.ndarray, scale: float, symmetric: bool,
                                origin: tuple[int, ...] = ()) -> None:
    """StencilArgumentError unless the operator is symmetric and L(1) = 0 (`applied_to_ones`, against
    `scale` >= ||L||; over MPI ranks a block whose first point is `origin`): nullspace='constant' would
    otherwise solve another problem than the one asked."""
    if not symmetric:
        raise StencilArgumentError(f"{what}: nullspace='constant' needs a symmetric operator (its range is then "
                                   "the vectors of zero mean); this one is not symmetric")
    worst = float(np.max(np.abs(applied_to_ones), initial=0.0))
    if worst > ANNIHILATION_RTOL * scale:
        at = np.unravel_index(int(np.argmax(np.abs(applied_to_ones))), applied_to_ones.shape)
        where = tuple(int(i) + int(o) for i, o in zip(at, origin or (0,) * len(at)))
        raise StencilArgumentError(
            f"{what}: nullspace='constant' is for an operator that sends constants to zero, and this one does "
            f"not: L(1) = {float(applied_to_ones[at]):.3g} at {where} (interior indices); a Dirichlet ring or a "
            "term in u alone makes the operator nonsingular: solve without nullspace=")


def check_not_singular_by_constants(what: str, applied_to_ones: np.ndarray, scale: float) -> None:
    """MscError when L(1) = 0 (`applied_to_ones`, against `scale` >= ||L||): without nullspace='constant'
    such an operator has no unique solution, and a solver would return one blown up along the constants
    (a factorisation whose rounding hides the zero pivot) or break down."""
    if float(np.max(np.abs(applied_to_ones), initial=0.0)) <= ANNIHILATION_RTOL * scale:
        raise MscError(singular(what, " (the operator sends constants to zero)"))


def _here(value: float) -> float:
    return value


def projected(what: str, b: np.ndarray, tol: float, total: Callable[[float], float] = _here,
              size: int | None = None, warn: bool = True) -> tuple[np.ndarray, float]:
    """b without its mean, and the mean; a UserWarning (where `warn`) when the mean's part of b is above
    `tol` (then L(u) = b has no solution and the result solves L(u) = b - mean: the least-squares
    solution). Over MPI ranks b is a rank's block, `total` sums over the ranks and `size` is the
    whole grid's."""
    size = b.size if size is None else size
    mean = total(float(np.sum(b))) / size if size else 0.0
    norm = float(np.sqrt(total(float(np.vdot(b, b)))))
    part = abs(mean) * float(np.sqrt(size))
    if warn and norm and part > tol * norm:
        warnings.warn(f"{what}: the rhs has mean {mean:.3g} ({part / norm:.1e} of its norm), and L(u) = rhs has "
                      "a solution only for a rhs of zero mean; msc solved L(u) = rhs - mean (the least-squares "
                      "solution)", UserWarning, stacklevel=3)
    return b - mean, mean


class PinnedFactorization(Factorization):
    """A factorization of M with its last unknown pinned to zero (its row and column dropped): for M
    singular by the constants alone, the rest is nonsingular, and a solve of a rhs of zero sum is exact."""

    def factor(self, M: sp.csr_array, what: str) -> None:
        n = M.shape[0] - 1
        if n < 1:
            raise StencilArgumentError(f"{what}: nullspace='constant' needs at least 2 unknowns")
        try:
            super().factor(M[:n, :n].tocsr(), what)
        except MscError as err:
            raise MscError(f"{what}: the matrix stays singular with one unknown pinned: its null space is larger "
                           "than the constants (a stencil that couples only every other point, for one)") from err

    def solve(self, b: np.ndarray) -> np.ndarray:
        out = np.zeros(b.size)
        out[:-1] = super().solve(b[:-1])
        return out
