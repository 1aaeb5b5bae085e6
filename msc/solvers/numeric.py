"""Numeric factorization: runs supernodal.c's queued left-looking kernel over
the schedule and gathers queue statistics. One level of parallelism, on the
solver's own OpenMP threads, with single-threaded BLAS throughout:
independent subtrees first, then the top of the tree one supernode after
another, where the large supernodes (the top separators) are split into
tiles factored as tasks. Threaded BLAS on the top separators lost 2.5x of
its speed when another process held a core (each BLAS call splits its work
evenly and waits for the slowest thread), and on small blocks it costs more
in thread wake-ups than it saves (a 2-thread run of a 3D 20^3 grid took
0.2-2 s against 0.03 s single-threaded)."""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from msc.solvers import native
from msc.solvers.errors import OptionError
from msc.solvers.memory import factor_values
from msc.solvers.schedule import Schedule, supernode_work
from msc.solvers.symbolic import SupernodalStructure, integral

TOP_SPLIT_FLOPS = 1e8  # top supernodes with at least this work are split into tiles
TILE_MAX = 256  # columns per tile: the largest (most efficient BLAS calls) ...
TILE_MIN = 64  # ... and the smallest, for supernodes too narrow for TILES_PER_SUPERNODE of TILE_MAX
TILES_PER_SUPERNODE = 6  # column blocks wanted per split supernode, to keep the threads busy

STAT_NAMES = (
    "inst_updates", "inst_flops", "inst_seconds",
    "tpq_updates", "tpq_flops", "tpq_seconds", "tpq_batches",
    "dpq_updates", "dpq_flops", "dpq_seconds",
    "diag_c", "diag_lapack", "diag_seconds",
    "assemble_seconds",
    "subtrees_seconds", "top_seconds",
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
        for name, low, high in (("inst_max", 0, 64), ("tpq_max", 0, None), ("tpq_batch", 1, None),
                                ("diag_small", 0, None)):
            value = getattr(self, name)
            if not integral(value) or value < low or (high is not None and value > high):
                span = f"in [{low}, {high}]" if high is not None else f">= {low}"
                raise OptionError(f"QueueParams: {name} must be an integer {span}, got {value!r}")

    def as_array(self) -> np.ndarray:
        return np.array([self.inst_max, self.tpq_max, self.tpq_batch, self.diag_small], dtype=np.int64)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@functools.lru_cache(maxsize=1)
def blas_threads() -> ThreadpoolController:
    """Controls the BLAS thread count (inspecting the loaded libraries once)."""
    return ThreadpoolController()


def top_tiles(S: SupernodalStructure, top: np.ndarray) -> np.ndarray:
    """Columns per tile of each top supernode (int32, aligned with top), 0 for
    those factored whole by one thread: about TILES_PER_SUPERNODE column blocks,
    in multiples of 32 within [TILE_MIN, TILE_MAX]. Measured on 2 threads, 3D
    64^3: tiles of 256 columns took 0.9x the time of 128 idle, 0.8x under load."""
    ncols = np.diff(S.super)[top]
    tiles = np.clip(-(-ncols // (32 * TILES_PER_SUPERNODE)) * 32, TILE_MIN, TILE_MAX)
    return np.where(supernode_work(S.super, S.Sp)[top] >= TOP_SPLIT_FLOPS, tiles, 0).astype(np.int32)


def factorize(S: SupernodalStructure, Ax: np.ndarray, schedule: Schedule,
              params: QueueParams) -> tuple[np.ndarray, int, dict[str, float]]:
    """(Lx, failing column in permuted numbering or -1, statistics)."""
    Lx = factor_values(int(S.Px[-1]), schedule.nthreads)
    ns = max(S.nsuper, 1)
    head, nxt, lpos = np.full(ns, -1, dtype=np.int32), np.empty(ns, dtype=np.int32), np.zeros(ns, dtype=np.int64)
    stats = np.zeros(len(STAT_NAMES))
    with blas_threads().limit(limits=1, user_api="blas"):
        fail = int(native.numeric_lib().chol_factor(
            S.n, S.nsuper, S.super, S.snode_of, S.Sp, S.Si, S.Px, S.pattern.indptr, S.pattern.indices,
            Ax, Lx, head, nxt, lpos, schedule.phase1_lo.shape[0], schedule.phase1_lo, schedule.phase1_hi,
            schedule.top.shape[0], schedule.top, top_tiles(S, schedule.top), schedule.nthreads,
            params.as_array(), *native.blas_pointers(), stats))
    out = dict(zip(STAT_NAMES, (float(v) for v in stats)))
    return Lx, fail, out
