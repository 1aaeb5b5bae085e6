"""Symbolic analysis: permutation of the pattern, elimination tree,
postorder, column counts (without forming L), fundamental supernodes,
relaxed amalgamation and the row structure of every supernode. The loops
that are inherently sequential run in symbolic.c; everything else is
vectorized numpy. Cost is near-linear in nnz(A) plus the size of the
supernodal structure."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from msc.solvers import native
from msc.solvers.errors import FactorTooLargeError, OptionError, SolverError


@dataclass(frozen=True)
class Amalgamation:
    """Relaxed amalgamation rule (CHOLMOD's): a child supernode merges into its
    parent when the merged one has <= nrelax[0] columns, or <= nrelax[1] and
    a fraction of explicit zeros < zrelax[0], or <= nrelax[2] and < zrelax[1],
    or any size and < zrelax[2]; a merge never makes a supernode wider than
    max_columns (a fundamental supernode, which needs no merge, stays whole).
    Values out of range raise OptionError."""

    nrelax: tuple[int, int, int] = (4, 16, 48)
    zrelax: tuple[float, float, float] = (0.8, 0.1, 0.05)
    max_columns: int = 1 << 30

    def __post_init__(self) -> None:
        def bad(what: str, value: object) -> OptionError:
            return OptionError(f"Amalgamation: {what}, got {value!r}")

        try:
            nrelax = tuple(self.nrelax)
            zrelax = tuple(self.zrelax)
        except TypeError:
            raise bad("nrelax and zrelax are sequences of three values", (self.nrelax, self.zrelax)) from None
        if len(nrelax) != 3 or not all(integral(v) and v >= 0 for v in nrelax):
            raise bad("nrelax takes three non-negative integers (column counts)", self.nrelax)
        if len(zrelax) != 3 or not all(_real(v) and 0 <= v <= 1 for v in zrelax):
            raise bad("zrelax takes three fractions of explicit zeros in [0, 1]", self.zrelax)
        if not (integral(self.max_columns) and self.max_columns >= 1):
            raise bad("max_columns takes a positive integer", self.max_columns)
        object.__setattr__(self, "nrelax", tuple(int(v) for v in nrelax))
        object.__setattr__(self, "zrelax", tuple(float(v) for v in zrelax))


def _bytes(count: int) -> str:
    """A byte count in the largest binary unit that keeps it at 1 or more (GiB, MiB, KiB), else in bytes."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.2f} {unit}"
    return f"{count} bytes"


def integral(value: object) -> bool:
    """Whether `value` is an integer (Python's or numpy's), not a bool: what the solver's options take."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _real(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
        and bool(np.isfinite(value))


@dataclass(frozen=True)
class PermutedPattern:
    """Lower triangle of P A P^T in CSC (sorted rows); value_map[k] is the
    position in the input's lower-CSC data of the k-th stored entry. rowptr /
    rowind: the same pattern by rows (row i lists its columns j <= i, unsorted)."""

    indptr: np.ndarray  # int64, n+1
    indices: np.ndarray  # int32
    value_map: np.ndarray  # int64
    rowptr: np.ndarray  # int64, n+1
    rowind: np.ndarray  # int32


def permute(lower: sp.csc_array, perm: np.ndarray) -> PermutedPattern:
    """Lower triangle of A[perm][:, perm] by columns and by rows, and the map
    of values (two counting sorts in symbolic.c)."""
    n = lower.shape[0]
    pinv = np.empty(n, dtype=np.int64)
    pinv[perm] = np.arange(n, dtype=np.int64)
    nnz = lower.nnz
    out = PermutedPattern(np.empty(n + 1, dtype=np.int64), np.empty(nnz, dtype=np.int32),
                          np.empty(nnz, dtype=np.int64), np.empty(n + 1, dtype=np.int64),
                          np.empty(nnz, dtype=np.int32))
    native.symbolic_lib().sym_permute(
        n, lower.indptr.astype(np.int64, copy=False), lower.indices.astype(np.int32, copy=False), pinv,
        out.indptr, out.indices, out.value_map, out.rowptr, out.rowind, np.empty(max(nnz, 1), dtype=np.int64))
    return out


def tree_and_counts(n: int, pattern: PermutedPattern) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(parent, post, colcount) of the permuted matrix; colcount includes the diagonal."""
    lib = native.symbolic_lib()
    parent = np.empty(n, dtype=np.int32)
    post = np.empty(n, dtype=np.int32)
    colcount = np.empty(n, dtype=np.int32)
    work = np.empty(max(4 * n, 1), dtype=np.int32)
    lib.sym_etree(n, pattern.rowptr, pattern.rowind, parent, work)
    lib.sym_postorder(n, parent, post, work)
    lib.sym_colcounts(n, pattern.indptr, pattern.indices, parent, post, colcount, work)
    return parent, post, colcount


def predicted_cost(colcount: np.ndarray) -> tuple[int, float]:
    """(nnz(L), flops) for a simplicial factor with these column counts."""
    c = colcount.astype(np.float64)
    return int(colcount.sum(dtype=np.int64)), float(np.dot(c, c))


def default_memory_limit() -> int:
    """Half the machine's physical memory."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 << 30


@dataclass
class SupernodalStructure:
    """Everything the numeric phase needs, in the final (postordered) numbering."""

    n: int
    perm: np.ndarray  # int64: factor is of A[perm][:, perm]
    pattern: PermutedPattern  # lower triangle of the permuted matrix
    parent: np.ndarray  # column elimination tree
    colcount: np.ndarray  # exact column counts of L (fundamental)
    super: np.ndarray  # int32, ns+1: first column of each supernode
    snode_of: np.ndarray  # int32, n
    sparent: np.ndarray  # int32, ns
    Sp: np.ndarray  # int64, ns+1: row-list pointers
    Si: np.ndarray  # int32: sorted rows of each supernode
    Px: np.ndarray  # int64, ns+1: value-block offsets
    n_fundamental: int
    nnz_L: int  # entries of L (exact, no amalgamation zeros)
    nnz_L_stored: int  # entries stored (lower triangles of the blocks)
    flops: float
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def nsuper(self) -> int:
        return int(self.super.shape[0] - 1)

    @property
    def factor_bytes(self) -> int:
        return int(self.Px[-1]) * 8 + int(self.Si.shape[0]) * 4


def fundamental_supernodes(parent: np.ndarray, colcount: np.ndarray) -> np.ndarray:
    """First column of each fundamental supernode (postordered tree), plus n."""
    n = parent.shape[0]
    if n == 0:
        return np.zeros(1, dtype=np.int32)
    nchild = np.bincount(parent[parent >= 0], minlength=n)
    j = np.arange(n - 1)
    cont = (parent[:-1] == j + 1) & (colcount[:-1] == colcount[1:] + 1) & (nchild[1:] == 1)
    starts = np.flatnonzero(np.concatenate(([True], ~cont)))
    return np.append(starts, n).astype(np.int32)


def _tree_of(super_: np.ndarray, parent: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    ns = super_.shape[0] - 1
    snode_of = np.repeat(np.arange(ns, dtype=np.int32), np.diff(super_))
    p = parent[super_[1:] - 1]
    sparent = np.where(p >= 0, snode_of[np.maximum(p, 0)] if n else p, -1).astype(np.int32)
    return snode_of, sparent


def analyze_structure(
    lower: sp.csc_array,
    perm: np.ndarray,
    amalgamation: Amalgamation = Amalgamation(),
    max_factor_bytes: int | None = None,
    counted: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> SupernodalStructure:
    """The full symbolic analysis for a fill-reducing permutation. counted:
    tree_and_counts() of permute(lower, perm), when the caller has it."""
    lib = native.symbolic_lib()
    n = lower.shape[0]
    parent0, post, colcount0 = counted if counted is not None else tree_and_counts(n, permute(lower, perm))
    # Relabel in postorder (subtrees become contiguous): the tree and the
    # column counts of the postordered matrix are those of perm, renumbered.
    perm = perm[post].astype(np.int64)
    pattern = permute(lower, perm)
    newlabel = np.empty(n + 1, dtype=np.int32)
    newlabel[post] = np.arange(n, dtype=np.int32)
    newlabel[n] = -1
    parent = newlabel[parent0[post]]  # parent -1 indexes newlabel[n] = -1
    colcount = colcount0[post]

    fsuper = fundamental_supernodes(parent, colcount)
    nfs = fsuper.shape[0] - 1
    _, fsparent = _tree_of(fsuper, parent, n)
    lnz = colcount[fsuper[:-1]].astype(np.int64)
    merge_next = np.zeros(nfs, dtype=np.int32)
    nscol = np.zeros(nfs, dtype=np.int32)
    zeros = np.zeros(nfs, dtype=np.float64)
    a = amalgamation
    lib.sym_amalgamate(nfs, fsuper, fsparent, lnz, *a.nrelax, *a.zrelax, int(min(a.max_columns, 2**31 - 1)),
                       merge_next, nscol, zeros)
    keep = np.concatenate(([True], merge_next[:-1] == 0)) if nfs else np.zeros(0, dtype=bool)
    super_ = np.append(fsuper[:-1][keep], n).astype(np.int32)
    nrows = lnz[keep]
    ncols = np.diff(super_).astype(np.int64)
    snode_of, sparent = _tree_of(super_, parent, n)
    ns = super_.shape[0] - 1

    Sp = np.concatenate(([0], np.cumsum(nrows))).astype(np.int64)
    Px = np.concatenate(([0], np.cumsum(nrows * ncols))).astype(np.int64)
    nnz_stored = int(np.sum(nrows * ncols - ncols * (ncols - 1) // 2))
    predicted = int(Px[-1]) * 8 + int(Sp[-1]) * 4
    limit = default_memory_limit() if max_factor_bytes is None else int(max_factor_bytes)
    if predicted > limit:
        raise FactorTooLargeError(
            f"the factor would need {_bytes(predicted)} (nnz(L) = {nnz_stored:,} with "
            f"{n:,} columns) but the limit is {_bytes(limit)}; pass max_factor_bytes to raise "
            "it, or try another ordering",
            predicted_bytes=predicted,
            limit_bytes=limit,
        )

    Si = np.empty(int(Sp[-1]), dtype=np.int32)
    status = lib.sym_structure(n, ns, super_, sparent, snode_of, pattern.rowptr, pattern.rowind, Sp, Si,
                               np.empty(max(ns, 1), dtype=np.int64), np.empty(max(ns, 1), dtype=np.int32))
    if status != 0:
        raise SolverError(f"internal error: supernode {-status - 1} structure disagrees with its column count")
    nnz_L, flops = predicted_cost(colcount)
    return SupernodalStructure(
        n=n, perm=perm, pattern=pattern, parent=parent, colcount=colcount, super=super_,
        snode_of=snode_of, sparent=sparent, Sp=Sp, Si=Si, Px=Px, n_fundamental=nfs,
        nnz_L=nnz_L, nnz_L_stored=nnz_stored, flops=flops,
    )
