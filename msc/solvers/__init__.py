"""msc.solvers: swCholesky, a supernodal sparse Cholesky solver.

    from msc.solvers import cholesky, analyze, NotPositiveDefiniteError
    F = cholesky(A); x = F.solve(b); F.logdet(); F.perm; F.L
    S = analyze(A); F = S.factorize(A_new_values)
"""

from msc.solvers.cholesky import Symbolic, analyze, cholesky
from msc.solvers.errors import (
    FactorTooLargeError,
    InvalidMatrixError,
    MatrixReadError,
    NotPositiveDefiniteError,
    NotSymmetricError,
    OrderingError,
    RightHandSideError,
    SolverError,
)
from msc.solvers.factor import Factor
from msc.solvers.numeric import QueueParams
from msc.solvers.symbolic import Amalgamation

__all__ = [
    "Amalgamation", "Factor", "FactorTooLargeError", "InvalidMatrixError", "MatrixReadError",
    "NotPositiveDefiniteError", "NotSymmetricError", "OrderingError", "QueueParams",
    "RightHandSideError", "SolverError", "Symbolic", "analyze", "cholesky",
]
