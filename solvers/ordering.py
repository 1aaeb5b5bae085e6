"""Fill-reducing orderings: AMD (SuiteSparse's, through cvxopt), METIS nested
dissection (through pymetis), the natural order and user permutations.

Every ordering is returned as `perm` with the convention of scikit-sparse:
the factor is of A[perm][:, perm], i.e. row k of the permuted matrix is row
perm[k] of A."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from msc.solvers.errors import OrderingError

METHODS = ("auto", "amd", "metis", "natural")


def natural(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64)


def _adjacency(lower: sp.csc_array) -> sp.csr_array:
    """The symmetric graph of the matrix, without self loops."""
    strict = sp.tril(lower, k=-1, format="csr")
    graph = (strict + strict.T).tocsr()
    graph.sort_indices()
    return graph


def amd(lower: sp.csc_array) -> np.ndarray:
    """Approximate minimum degree (SuiteSparse AMD as shipped in cvxopt)."""
    try:
        import cvxopt
        import cvxopt.amd
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise OrderingError("ordering='amd' needs the cvxopt package (pip install cvxopt)") from exc
    n = lower.shape[0]
    if n == 0:
        return natural(0)
    coo = lower.tocoo()
    pattern = cvxopt.spmatrix(
        1.0, cvxopt.matrix(coo.row.astype(np.int64)), cvxopt.matrix(coo.col.astype(np.int64)), (n, n)
    )
    return np.asarray(cvxopt.amd.order(pattern, "L"), dtype=np.int64).ravel()


def metis(lower: sp.csc_array) -> np.ndarray:
    """METIS nested dissection (pymetis)."""
    try:
        import pymetis
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise OrderingError("ordering='metis' needs the pymetis package (pip install pymetis)") from exc
    n = lower.shape[0]
    graph = _adjacency(lower)
    if graph.nnz == 0:
        return natural(n)
    adjacency = pymetis.CSRAdjacency(graph.indptr.astype(np.int64), graph.indices.astype(np.int64))
    perm, _ = pymetis.nested_dissection(adjacency)
    return np.asarray(perm, dtype=np.int64)


def available() -> list[str]:
    """The fill-reducing methods whose library can be imported here."""
    found = ["natural"]
    for method, module in (("amd", "cvxopt.amd"), ("metis", "pymetis")):
        try:
            __import__(module)
            found.append(method)
        except ImportError:  # pragma: no cover - depends on the installation
            pass
    return found


def user_permutation(perm: object, n: int) -> np.ndarray:
    """Validate a user permutation (any integer sequence of 0..n-1)."""
    p = np.asarray(perm)
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
