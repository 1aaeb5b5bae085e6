"""Fill-reducing orderings: AMD (SuiteSparse's), METIS nested dissection
(through pymetis), the natural order and user permutations.

AMD is called directly (ctypes) on the library shipped inside the cvxopt
wheel, or the system's libamd: its core routine amd_2 gets the graph of
A + A^T (built in symbolic.c, sorted, without the diagonal) and all its
workspace from here. amd_order would check that graph, count it again and
rebuild it in memory of its own (fresh pages at every call): the same
permutation, 15-25% slower on 2D 1000^2. The cvxopt.amd.order path (kept
as the fallback) first converts the triangle element by element into a
cvxopt matrix, which took longer than the ordering itself.

Every ordering is returned as `perm` with the convention of scikit-sparse:
the factor is of A[perm][:, perm], i.e. row k of the permuted matrix is row
perm[k] of A."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from msc.solvers import native
from msc.solvers.errors import OrderingError

METHODS = ("auto", "amd", "metis", "natural")


def natural(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64)


def _amd_iwlen(nz: int, n: int) -> int:
    """AMD's workspace for a graph of nz entries: the graph, 20% elbow room
    and n more, as amd_order allocates."""
    return nz + nz // 5 + n


def _adjacency(lower: sp.csc_array) -> tuple[np.ndarray, np.ndarray]:
    """The symmetric graph of the matrix without self loops, columns sorted:
    (indptr, indices), int32 (built in symbolic.c) when AMD's workspace for it
    fits in int32, else int64."""
    n = lower.shape[0]
    if _amd_iwlen(2 * lower.nnz, n) < np.iinfo(np.int32).max:
        Gp = np.empty(n + 1, dtype=np.int32)
        Gi = np.empty(2 * lower.nnz, dtype=np.int32)
        count = native.symbolic_lib().sym_adjacency32(
            n, lower.indptr.astype(np.int64, copy=False), lower.indices.astype(np.int32, copy=False), Gp, Gi,
            np.empty(n + 1, dtype=np.int64))
        return Gp, Gi[:count]
    strict = sp.tril(lower, k=-1, format="csr")
    graph = (strict + strict.T).tocsr()
    graph.sort_indices()
    return graph.indptr.astype(np.int64), graph.indices.astype(np.int64)


@functools.lru_cache(maxsize=1)
def _libamd() -> ctypes.CDLL | None:
    """SuiteSparse AMD as a shared library: cvxopt's bundled copy, else the system's."""
    candidates: list[str] = []
    try:
        import cvxopt
        import cvxopt.amd  # loads the bundled libamd's own dependencies

        candidates += [str(p) for p in sorted((Path(cvxopt.__file__).parent.parent / "cvxopt.libs").glob("libamd*.so*"))]
    except ImportError:  # pragma: no cover - depends on the installation
        pass
    system = ctypes.util.find_library("amd")
    if system:
        candidates.append(system)
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
            for name, integer in (("amd_2", ctypes.c_int32), ("amd_l2", ctypes.c_int64)):
                fn = getattr(lib, name)
                fn.restype = None
                # n, Pe, Iw, Len, iwlen, pfree, Nv, Next, Last, Head, Elen, Degree, W, Control, Info
                fn.argtypes = [integer, *[ctypes.c_void_p] * 3, integer, integer, *[ctypes.c_void_p] * 9]
        except (OSError, AttributeError):  # pragma: no cover - depends on the installation
            continue
        return lib
    return None


def _amd_cvxopt(lower: sp.csc_array) -> np.ndarray:
    try:
        import cvxopt
        import cvxopt.amd
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise OrderingError("ordering='amd' needs the cvxopt package (pip install cvxopt)") from exc
    n = lower.shape[0]
    coo = lower.tocoo()
    pattern = cvxopt.spmatrix(
        1.0, cvxopt.matrix(coo.row.astype(np.int64)), cvxopt.matrix(coo.col.astype(np.int64)), (n, n)
    )
    return np.asarray(cvxopt.amd.order(pattern, "L"), dtype=np.int64).ravel()


def amd(lower: sp.csc_array) -> np.ndarray:
    """Approximate minimum degree (SuiteSparse AMD, default controls)."""
    n = lower.shape[0]
    if n == 0:
        return natural(0)
    lib = _libamd()
    if lib is None:  # pragma: no cover - depends on the installation
        return _amd_cvxopt(lower)
    Gp, Gi = _adjacency(lower)  # A + A^T without the diagonal, sorted
    nz = int(Gp[-1])
    iwlen = _amd_iwlen(nz, n)
    Iw = np.empty(iwlen, dtype=Gp.dtype)
    Iw[:nz] = Gi
    Pe, Len = Gp[:-1].copy(), np.diff(Gp).astype(Gp.dtype)
    # Last (the permutation), then Nv, Next, Head, Elen, Degree, W: workspace
    perm, nv, nxt, head, elen, degree, w = (np.empty(n, dtype=Gp.dtype) for _ in range(7))
    # 32-bit AMD runs about twice as fast as the 64-bit one
    (lib.amd_2 if Gp.dtype == np.int32 else lib.amd_l2)(
        n, *(a.ctypes.data for a in (Pe, Iw, Len)), iwlen, nz,
        *(a.ctypes.data for a in (nv, nxt, perm, head, elen, degree, w)), None, None)
    return perm.astype(np.int64)


def metis(lower: sp.csc_array) -> np.ndarray:
    """METIS nested dissection (pymetis)."""
    try:
        import pymetis
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise OrderingError("ordering='metis' needs the pymetis package (pip install pymetis)") from exc
    n = lower.shape[0]
    Gp, Gi = _adjacency(lower)
    if Gi.shape[0] == 0:
        return natural(n)
    adjacency = pymetis.CSRAdjacency(Gp.astype(np.int64), Gi.astype(np.int64))
    perm, _ = pymetis.nested_dissection(adjacency)
    return np.asarray(perm, dtype=np.int64)


def available() -> list[str]:
    """The fill-reducing methods whose library can be imported here."""
    found = ["natural"]
    if _libamd() is not None:
        found.append("amd")
    for method, module in (("amd", "cvxopt.amd"), ("metis", "pymetis")):
        if method in found:
            continue
        try:
            __import__(module)
            found.append(method)
        except ImportError:  # pragma: no cover - depends on the installation
            pass
    return found


def user_permutation(perm: object, n: int) -> np.ndarray:
    """Validate a user permutation (any integer sequence of 0..n-1)."""
    p = np.asarray(perm)
    if p.ndim == 0:
        raise OrderingError(f"ordering must be one of {METHODS} or a permutation array, got {perm!r}")
    if p.ndim != 1 or p.shape[0] != n or (n > 0 and not np.issubdtype(p.dtype, np.integer)):
        raise OrderingError(f"a permutation must be a 1-D integer array of length {n}, got shape {p.shape}, dtype {p.dtype}")
    p = p.astype(np.int64)
    seen = np.zeros(n, dtype=bool)
    if n and (p.min() < 0 or p.max() >= n):
        raise OrderingError(f"permutation entries must lie in [0, {n}), got min {p.min()} max {p.max()}")
    seen[p] = True
    if not seen.all():
        missing = int(np.flatnonzero(~seen)[0])
        raise OrderingError(f"not a permutation: {missing} is missing (and some entry repeats)")
    return p


def compute(method: str, lower: sp.csc_array) -> np.ndarray:
    """The permutation of one named method ('amd', 'metis' or 'natural')."""
    if method == "amd":
        return amd(lower)
    if method == "metis":
        return metis(lower)
    if method == "natural":
        return natural(lower.shape[0])
    raise OrderingError(f"unknown ordering {method!r}: use one of {METHODS} or a permutation array")
