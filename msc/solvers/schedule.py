"""Parallel schedule of the numeric factorization: the supernodal tree is cut
into independent subtrees, handed to the threads largest first (each free
thread takes the next), and the supernodes above the cut form the top part,
run after them. The cut is deepened while that lowers the estimated time
max(thread load) + top work / threads, with the loads of a greedy packing."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from msc.solvers import native

OVERHEAD_FLOPS = 2000.0  # per-supernode fixed cost, in flop equivalents
MAX_CUTS = 256


@dataclass(frozen=True)
class Schedule:
    """Tasks are inclusive ranges of postordered supernodes, largest first."""

    phase1_lo: np.ndarray  # int32
    phase1_hi: np.ndarray
    top: np.ndarray  # int32: supernodes of the top part, ascending
    nthreads: int
    balance: float  # max thread load / mean thread load in phase 1
    top_fraction: float  # share of the work in the top part


def supernode_work(super_: np.ndarray, Sp: np.ndarray) -> np.ndarray:
    """Flops of each supernode's own factorization plus the updates it sends."""
    ncols = np.diff(super_).astype(np.float64)
    nrows = np.diff(Sp).astype(np.float64)
    # sum over the supernode's columns t = 0..ncols-1 of (nrows - t)^2
    k = ncols
    s2 = k * nrows**2 - nrows * k * (k - 1) + (k - 1) * k * (2 * k - 1) / 6
    return s2 + OVERHEAD_FLOPS


def build(super_: np.ndarray, sparent: np.ndarray, Sp: np.ndarray, nthreads: int) -> Schedule:
    ns = sparent.shape[0]
    empty = np.zeros(0, dtype=np.int32)
    if nthreads <= 1 or ns < 2:
        one = np.array([0], dtype=np.int32)
        lo, hi = (one, np.array([ns - 1], dtype=np.int32)) if ns else (empty, empty)
        return Schedule(lo, hi, empty, 1, 1.0, 0.0)
    work = supernode_work(super_, Sp)
    subtree = np.empty(ns)
    size = np.empty(ns, dtype=np.int32)
    native.symbolic_lib().sym_subtree_sum(ns, sparent, work, subtree, size)
    has_parent = sparent >= 0
    order = np.argsort(sparent[has_parent], kind="stable")
    child_list = np.flatnonzero(has_parent)[order]
    child_ptr = np.searchsorted(sparent[has_parent][order], np.arange(ns + 1))

    cands = [(-subtree[s], int(s)) for s in np.flatnonzero(~has_parent)]
    heapq.heapify(cands)
    top: list[int] = []
    top_work = 0.0
    best: tuple[float, list[tuple[float, int]], list[int]] | None = None
    for _ in range(MAX_CUTS):
        loads = [0.0] * nthreads
        for neg, _s in sorted(cands):
            t = loads.index(min(loads))
            loads[t] -= neg
        estimate = max(loads) + top_work / nthreads
        if best is None or estimate < best[0]:
            best = (estimate, list(cands), list(top))
        if not cands or max(loads) <= 1.02 * sum(loads) / nthreads:
            break
        _, s = heapq.heappop(cands)
        top.append(s)
        top_work += float(work[s])
        for c in child_list[child_ptr[s]:child_ptr[s + 1]]:
            heapq.heappush(cands, (-subtree[c], int(c)))
    assert best is not None
    _, chosen, top_nodes = best
    loads = [0.0] * nthreads
    lo, hi = [], []
    for neg, s in sorted(chosen):  # largest subtree first
        t = loads.index(min(loads))
        loads[t] -= neg
        lo.append(s - size[s] + 1)
        hi.append(s)
    total = float(work.sum())
    mean = sum(loads) / nthreads
    return Schedule(
        np.asarray(lo, dtype=np.int32),
        np.asarray(hi, dtype=np.int32),
        np.sort(np.asarray(top_nodes, dtype=np.int32)),
        nthreads,
        max(loads) / mean if mean > 0 else 1.0,
        1.0 - sum(loads) / total if total > 0 else 0.0,
    )
