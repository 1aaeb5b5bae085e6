"""msc.solvers: swCholesky, a supernodal sparse Cholesky solver; `cholesky` (here) analyses,
optionally tunes (msc.solvers.tune) and factors.

    from msc.solvers import cholesky, analyze, NotPositiveDefiniteError
    F = cholesky(A); x = F.solve(b); F.logdet(); F.perm; F.L
    S = analyze(A); F = S.factorize(A_new_values)
"""

from __future__ import annotations

from msc.solvers import tune as tuner
from msc.solvers.cholesky import Ordering, Symbolic, analyze, check_options
from msc.solvers.errors import (
    FactorTooLargeError,
    InvalidMatrixError,
    MatrixReadError,
    NotPositiveDefiniteError,
    NotSymmetricError,
    OptionError,
    OrderingError,
    RightHandSideError,
    SolverError,
)
from msc.solvers.factor import Factor
from msc.solvers.matrix import DEFAULT_SYMMETRY_RTOL, Triangle, lower_triangle
from msc.solvers.memory import small_pages
from msc.solvers.numeric import QueueParams
from msc.solvers.symbolic import Amalgamation


@small_pages()
def cholesky(A: object, ordering: Ordering = "auto", tune: bool = False, *, uplo: Triangle = "full",
             amalgamation: Amalgamation | None = None, queues: QueueParams | None = None,
             threads: int | None = None, max_factor_bytes: int | None = None,
             symmetry_rtol: float = DEFAULT_SYMMETRY_RTOL) -> Factor:
    """Factor A = P^T L L^T P. tune=True takes amalgamation and queue parameters
    from the auto-tuner's cache for this machine and matrix class (tuning and
    storing them on a miss); explicit parameters override the tuned ones."""
    check_options(threads, max_factor_bytes, symmetry_rtol, amalgamation, queues, tune)
    lower = lower_triangle(A, uplo, symmetry_rtol)
    tuning = None
    if tune:
        tuning = tuner.tune_lower(lower, ordering, threads=threads)
        amalgamation = amalgamation or tuning.amalgamation
        queues = queues or tuning.queues
    sym = Symbolic(lower, ordering, uplo=uplo, amalgamation=amalgamation, queues=queues,
                   threads=threads, max_factor_bytes=max_factor_bytes, symmetry_rtol=symmetry_rtol)
    factor = sym.factorize_lower(lower)
    if tuning is not None:
        if tuning.from_cache and tuner.needs_recheck(tuning, factor.timings["numeric"], factor.flops):
            tuning = tuner.recheck(lower, ordering, tuning, threads=threads)
        factor.stats["tuning"] = tuning.report()
    return factor


__all__ = [
    "Amalgamation", "Factor", "FactorTooLargeError", "InvalidMatrixError", "MatrixReadError",
    "NotPositiveDefiniteError", "NotSymmetricError", "OptionError", "OrderingError", "QueueParams",
    "RightHandSideError", "SolverError", "Symbolic", "analyze", "cholesky",
]
