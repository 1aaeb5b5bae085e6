"""Errors raised by the sparse Cholesky solver (all are msc.errors.MscError)."""

from __future__ import annotations

from msc.errors import MscError


class SolverError(MscError):
    """Base class of every sparse-solver error."""


class InvalidMatrixError(SolverError, ValueError):
    """The matrix is not usable: not square, not float, NaN/Inf, bad triangle, ..."""


class NotSymmetricError(InvalidMatrixError):
    """The full matrix given is not symmetric within the tolerance."""


class NotPositiveDefiniteError(SolverError, ArithmeticError):
    """Factorization met a non-positive pivot; `.column` is in the user's numbering."""

    def __init__(self, message: str, column: int) -> None:
        super().__init__(message)
        self.column = column


class FactorTooLargeError(SolverError, MemoryError):
    """The symbolic analysis predicts a factor larger than the memory limit."""

    def __init__(self, message: str, predicted_bytes: int, limit_bytes: int) -> None:
        super().__init__(message)
        self.predicted_bytes = predicted_bytes
        self.limit_bytes = limit_bytes


class RightHandSideError(SolverError, ValueError):
    """The right-hand side has the wrong shape or non-finite values."""


class OrderingError(SolverError, ValueError):
    """An unknown ordering, an unavailable ordering library or an invalid permutation."""


class OptionError(SolverError, ValueError):
    """An option of analyze/cholesky is not usable (threads, max_factor_bytes, symmetry_rtol)."""


class MatrixReadError(SolverError, OSError):
    """A matrix file could not be parsed."""
