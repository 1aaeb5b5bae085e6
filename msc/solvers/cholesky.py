"""swCholesky's analysis and factorization: analyze(A) -> Symbolic,
Symbolic.factorize(A) -> Factor (msc.solvers.cholesky(A) does both, optionally auto-tuned)."""

from __future__ import annotations

import os
import time
from typing import Any, Union

import numpy as np
import scipy.sparse as sp

from msc.runtime.threads import MAX_THREADS
from msc.solvers import ordering as orderings
from msc.solvers import schedule as schedules
from msc.solvers.errors import InvalidMatrixError, NotPositiveDefiniteError, OptionError
from msc.solvers.factor import Factor
from msc.solvers.matrix import DEFAULT_SYMMETRY_RTOL, Triangle, lower_triangle
from msc.solvers.memory import small_pages
from msc.solvers.numeric import QueueParams, factorize
from msc.solvers.symbolic import Amalgamation, analyze_structure, integral, permute, predicted_cost, tree_and_counts

Ordering = Union[str, np.ndarray, list[int]]

# CHOLMOD's rule: METIS is tried when AMD's fill is high.
METIS_FILL_RATIO = 5.0
METIS_FLOPS_PER_NNZ = 500.0


def default_threads() -> int:
    """OMP_NUM_THREADS if set, else the CPUs this process may use."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


Counted = tuple[np.ndarray, np.ndarray, np.ndarray]  # (parent, post, colcount) of the permuted pattern


def choose_ordering(lower: sp.csc_array, ordering: Ordering
                    ) -> tuple[np.ndarray, str, dict[str, dict[str, float]], Counted | None]:
    """(perm, name, predicted nnz(L) and flops of every candidate tried, and
    the elimination tree and counts of the chosen one when computed)."""
    n = lower.shape[0]
    if not isinstance(ordering, str):
        return orderings.user_permutation(ordering, n), "user", {}, None
    if ordering != "auto":
        return orderings.compute(ordering, lower), ordering, {}, None
    tried: dict[str, dict[str, float]] = {}
    found: dict[str, tuple[np.ndarray, Counted]] = {}

    def consider(method: str) -> None:
        perm = orderings.compute(method, lower)
        counted = tree_and_counts(n, permute(lower, perm))
        lnz, flops = predicted_cost(counted[2])
        found[method] = (perm, counted)
        tried[method] = {"nnz_L": lnz, "flops": flops}

    have = orderings.available()
    first = "amd" if "amd" in have else ("metis" if "metis" in have else "natural")
    consider(first)
    stats = tried[first]
    high_fill = (stats["nnz_L"] >= METIS_FILL_RATIO * max(lower.nnz, 1)
                 and stats["flops"] >= METIS_FLOPS_PER_NNZ * stats["nnz_L"])
    if first == "amd" and high_fill and "metis" in have:
        consider("metis")
    best = min(tried, key=lambda m: (tried[m]["nnz_L"], tried[m]["flops"]))
    return found[best][0], best, tried, found[best][1]


class Symbolic:
    """The symbolic analysis of a sparsity pattern: ordering, elimination tree,
    supernodes and parallel schedule. factorize(A) reuses it for any matrix
    with the same pattern (and the same uplo)."""

    @small_pages()
    def __init__(self, lower: sp.csc_array, ordering: Ordering = "auto", *, uplo: Triangle = "full",
                 amalgamation: Amalgamation | None = None, queues: QueueParams | None = None,
                 threads: int | None = None, max_factor_bytes: int | None = None,
                 symmetry_rtol: float = DEFAULT_SYMMETRY_RTOL) -> None:
        check_options(threads, max_factor_bytes, symmetry_rtol, amalgamation, queues)
        t0 = time.perf_counter()
        self.uplo: Triangle = uplo
        self.symmetry_rtol = symmetry_rtol
        self.amalgamation = amalgamation or Amalgamation()
        self.queues = queues or QueueParams()
        self.threads = max(1, threads or default_threads())
        self._indptr = lower.indptr.copy()
        self._indices = lower.indices.copy()
        perm, name, tried, counted = choose_ordering(lower, ordering)
        t1 = time.perf_counter()
        self.structure = analyze_structure(lower, perm, self.amalgamation, max_factor_bytes, counted)
        t2 = time.perf_counter()
        S = self.structure
        self.schedule = schedules.build(S.super, S.sparent, S.Sp, self.threads)
        t3 = time.perf_counter()
        self.ordering = name
        self.timings = {"ordering": t1 - t0, "symbolic": t2 - t1, "schedule": t3 - t2}
        self.stats: dict[str, object] = {
            "ordering": name, "orderings_tried": tried, "n": S.n, "nnz_A_lower": int(lower.nnz),
            "nnz_L": S.nnz_L, "nnz_L_stored": S.nnz_L_stored, "flops": S.flops,
            "supernodes": S.nsuper, "fundamental_supernodes": S.n_fundamental,
            "factor_bytes": S.factor_bytes, "threads": self.threads,
            "phase1_subtrees": int(self.schedule.phase1_lo.shape[0]),
            "top_supernodes": int(self.schedule.top.shape[0]),
            "top_work_fraction": self.schedule.top_fraction,
            "thread_balance": self.schedule.balance,
            "amalgamation": {"nrelax": self.amalgamation.nrelax, "zrelax": self.amalgamation.zrelax},
            "queues": self.queues.as_dict(),
        }

    @property
    def perm(self) -> np.ndarray:
        return self.structure.perm

    @property
    def nnz(self) -> int:
        return self.structure.nnz_L

    @property
    def flops(self) -> float:
        return self.structure.flops

    @small_pages()
    def factorize(self, A: object, queues: QueueParams | None = None) -> Factor:
        """Numeric factorization of A (same pattern as analyzed)."""
        lower = lower_triangle(A, self.uplo, self.symmetry_rtol)
        return self.factorize_lower(lower, queues)

    @small_pages()
    def factorize_lower(self, lower: sp.csc_array, queues: QueueParams | None = None) -> Factor:
        """As factorize(), for an already checked lower triangle."""
        if lower.shape[0] != self.structure.n or not (
            np.array_equal(lower.indptr, self._indptr) and np.array_equal(lower.indices, self._indices)
        ):
            raise InvalidMatrixError(
                f"matrix pattern differs from the analyzed one (n={lower.shape[0]} vs {self.structure.n},"
                f" nnz={lower.nnz} vs {self._indices.shape[0]} in the lower triangle); call analyze() again")
        t0 = time.perf_counter()
        S = self.structure
        Ax = np.ascontiguousarray(lower.data[S.pattern.value_map])
        t1 = time.perf_counter()
        q = queues or self.queues
        Lx, fail, qstats = factorize(S, Ax, self.schedule, q)
        t2 = time.perf_counter()
        if fail >= 0 and self.threads > 1:  # threads stop at whichever failure they meet first: in order,
            one = schedules.build(S.super, S.sparent, S.Sp, 1)  # the first failing pivot, on every run
            fail = factorize(S, Ax, one, q)[1]
        if fail >= 0:
            col = int(S.perm[fail])
            raise NotPositiveDefiniteError(
                f"matrix is not positive definite: pivot {fail} of the permuted matrix (column {col} of A)"
                " is not positive", column=col)
        timings = dict(self.timings)
        timings.update({"permute_values": t1 - t0, "numeric": t2 - t1})
        stats = dict(self.stats)
        stats["queues"] = q.as_dict()
        stats["queue_stats"] = qstats
        stats["gflops"] = S.flops / max(t2 - t1, 1e-12) / 1e9
        return Factor(S, Lx, timings, stats)


def check_options(threads: Any, max_factor_bytes: Any, symmetry_rtol: Any, amalgamation: Any = None,
                  queues: Any = None, tune: Any = False) -> None:
    """OptionError naming the first option out of range (the public entry points ask first)."""
    if threads is not None and (not integral(threads) or threads < 0):
        raise OptionError(f"threads must be a non-negative integer (0 or None: the default), got {threads!r}")
    if threads is not None and threads > MAX_THREADS:
        raise OptionError(f"threads={threads} is more than swCholesky starts (at most {MAX_THREADS}; "
                          f"this process may use {default_threads()} CPUs)")
    for name, value, kind in (("amalgamation", amalgamation, Amalgamation), ("queues", queues, QueueParams)):
        if value is not None and not isinstance(value, kind):
            raise OptionError(f"{name} must be an msc.solvers.{kind.__name__} (or None: the default), "
                              f"got {type(value).__name__} {value!r}")
    if not isinstance(tune, (bool, np.bool_)):
        raise OptionError(f"tune must be True or False, got {tune!r}")
    if max_factor_bytes is not None and (not integral(max_factor_bytes) or max_factor_bytes <= 0):
        raise OptionError(f"max_factor_bytes must be a positive integer (None: half the physical memory), "
                          f"got {max_factor_bytes!r}")
    if (not isinstance(symmetry_rtol, (float, int, np.floating, np.integer)) or isinstance(symmetry_rtol, bool)
            or not 0 <= symmetry_rtol < 1):
        raise OptionError(f"symmetry_rtol must be a number in [0, 1), got {symmetry_rtol!r}")


@small_pages()
def analyze(A: object, ordering: Ordering = "auto", *, uplo: Triangle = "full",
            amalgamation: Amalgamation | None = None, queues: QueueParams | None = None,
            threads: int | None = None, max_factor_bytes: int | None = None,
            symmetry_rtol: float = DEFAULT_SYMMETRY_RTOL) -> Symbolic:
    """Symbolic analysis of A (scipy.sparse CSR/CSC/COO or dense, float64).

    uplo: 'full' (both triangles, checked for symmetry), 'lower' or 'upper'
    (only that triangle is read). ordering: 'auto' (AMD, or METIS when it
    predicts less fill, as CHOLMOD does), 'amd', 'metis', 'natural' or a
    permutation array. Raises FactorTooLargeError when the predicted factor
    exceeds max_factor_bytes (default: half the physical memory)."""
    check_options(threads, max_factor_bytes, symmetry_rtol, amalgamation, queues)
    lower = lower_triangle(A, uplo, symmetry_rtol)
    return Symbolic(lower, ordering, uplo=uplo, amalgamation=amalgamation, queues=queues,
                    threads=threads, max_factor_bytes=max_factor_bytes, symmetry_rtol=symmetry_rtol)
