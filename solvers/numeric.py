"""Numeric factorization: runs supernodal.c's queued left-looking kernel over
the schedule and gathers queue statistics. One level of parallelism at a
time: independent subtrees on the OpenMP threads with single-threaded BLAS,
then the top of the tree one supernode after another, where only the large
supernodes (the top separators) get threaded BLAS. Threaded BLAS on small
blocks costs more in thread wake-ups than it saves, and on a busy machine
the waits dominate (measured: a 2-thread run of a 3D 20^3 grid took 0.2-2 s
against 0.03 s single-threaded)."""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from msc.solvers import native
from msc.solvers.schedule import Schedule, supernode_work
from msc.solvers.symbolic import SupernodalStructure

TOP_THREADED_FLOPS = 1e8  # top supernodes below this work run with single-threaded BLAS

STAT_NAMES = (
    "inst_updates", "inst_flops", "inst_seconds",
    "tpq_updates", "tpq_flops", "tpq_seconds", "tpq_batches",
    "dpq_updates", "dpq_flops", "dpq_seconds",
    "diag_c", "diag_lapack", "diag_seconds",
    "assemble_seconds",
)


@dataclass(frozen=True)
class QueueParams:
    """Size classes of descendant updates (see supernodal.c).

    inst_max: InstQ when ndrow1, ndrow3 and ndcol are all <= inst_max.
    tpq_max: TPQ when (ndrow1 + ndrow3) * (ndcol + 1) <= tpq_max doubles.
    tpq_batch: TPQ items run together (at most).
    diag_small: supernodes with at most this many columns are factored in C,
    the others by dpotrf + dtrsm."""

    inst_max: int = 32
    tpq_max: int = 7168
    tpq_batch: int = 64
    diag_small: int = 16

    def __post_init__(self) -> None:
        if not 0 <= self.inst_max <= 64:
            raise ValueError(f"inst_max must be in [0, 64], got {self.inst_max}")
        if self.tpq_max < 0 or self.tpq_batch < 1 or self.diag_small < 0:
            raise ValueError(f"invalid queue parameters {self}")

    def as_array(self) -> np.ndarray:
        return np.array([self.inst_max, self.tpq_max, self.tpq_batch, self.diag_small], dtype=np.int64)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@functools.lru_cache(maxsize=1)
def blas_threads() -> ThreadpoolController:
    """Controls the BLAS thread count (inspecting the loaded libraries once)."""
    return ThreadpoolController()


def _run(S: SupernodalStructure, Ax: np.ndarray, Lx: np.ndarray, lists: tuple[np.ndarray, ...],
         lo: np.ndarray, hi: np.ndarray, nthreads: int,
         params: QueueParams, stats: np.ndarray) -> int:
    head, nxt, lpos = lists
    return int(native.numeric_lib().chol_factor(
        S.n, S.nsuper, S.super, S.snode_of, S.Sp, S.Si, S.Px, S.pattern.indptr, S.pattern.indices,
        Ax, Lx, head, nxt, lpos, lo.shape[0], lo, hi, nthreads, params.as_array(),
        *native.blas_pointers(), stats,
    ))


def top_segments(S: SupernodalStructure, top: np.ndarray) -> list[tuple[np.ndarray, bool]]:
    """The top supernodes (ascending) in runs of the same BLAS mode: threaded
    for those whose own work is at least TOP_THREADED_FLOPS."""
    if top.shape[0] == 0:
        return []
    big = supernode_work(S.super, S.Sp)[top] >= TOP_THREADED_FLOPS
    cuts = np.flatnonzero(np.diff(big.astype(np.int8))) + 1
    return [(seg, bool(big[start])) for seg, start in zip(np.split(top, cuts), np.r_[0, cuts])]


def factorize(S: SupernodalStructure, Ax: np.ndarray, schedule: Schedule,
              params: QueueParams) -> tuple[np.ndarray, int, dict[str, float]]:
    """(Lx, failing column in permuted numbering or -1, statistics)."""
    Lx = np.empty(int(S.Px[-1]), dtype=np.float64)
    ns = S.nsuper
    lists = (np.full(max(ns, 1), -1, dtype=np.int32), np.empty(max(ns, 1), dtype=np.int32),
             np.zeros(max(ns, 1), dtype=np.int64))
    stats = np.zeros(len(STAT_NAMES))
    t0 = time.perf_counter()
    with blas_threads().limit(limits=1, user_api="blas"):
        fail = _run(S, Ax, Lx, lists, schedule.phase1_lo, schedule.phase1_hi, schedule.nthreads, params, stats)
    t1 = time.perf_counter()
    for segment, threaded in top_segments(S, schedule.top):
        if fail >= 0:
            break
        with blas_threads().limit(limits=schedule.nthreads if threaded else 1, user_api="blas"):
            fail = _run(S, Ax, Lx, lists, segment, segment, 1, params, stats)
    t2 = time.perf_counter()
    out = dict(zip(STAT_NAMES, (float(v) for v in stats)))
    out["subtrees_seconds"] = t1 - t0
    out["top_seconds"] = t2 - t1
    return Lx, fail, out
