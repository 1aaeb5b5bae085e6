"""Input checks and the canonical form the solver works on: the lower
triangle of a symmetric float64 matrix in CSC with sorted indices."""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np
import scipy.sparse as sp

from msc.solvers import native
from msc.solvers.errors import InvalidMatrixError, NotSymmetricError

Triangle = Literal["full", "lower", "upper"]
DEFAULT_SYMMETRY_RTOL = 1e-10


def _as_sparse(A: object) -> sp.csc_array:
    if sp.issparse(A):
        M = A
    elif isinstance(A, np.ndarray):
        if A.ndim != 2:
            raise InvalidMatrixError(f"matrix must be 2-D, got an array of shape {A.shape}")
        M = A
    else:
        raise InvalidMatrixError(
            f"matrix must be a scipy.sparse matrix/array (CSR, CSC, COO, ...) or a 2-D numpy array, got {type(A).__name__}"
        )
    if M.shape[0] != M.shape[1]:
        raise InvalidMatrixError(f"matrix is not square: shape {M.shape}")
    dtype = np.dtype(M.dtype)
    if dtype.kind == "c":
        raise InvalidMatrixError(f"matrix must be real float64, got complex dtype {dtype}")
    if dtype.kind not in "fiub":
        raise InvalidMatrixError(f"matrix must be real float64, got dtype {dtype}")
    C = sp.csc_array(M, dtype=np.float64)
    C.sum_duplicates()
    return C


def lower_triangle(A: object, uplo: Triangle = "full", symmetry_rtol: float = DEFAULT_SYMMETRY_RTOL) -> sp.csc_array:
    """Check A and return its lower triangle (CSC, sorted, float64).

    uplo='full': A holds both triangles; it must be symmetric within
    symmetry_rtol * max|A| (the two triangles are then averaged).
    uplo='lower' / 'upper': only that triangle (and the diagonal) is read;
    entries of the other one are ignored, as CHOLMOD's stype does."""
    if uplo not in ("full", "lower", "upper"):
        raise InvalidMatrixError(f"uplo must be 'full', 'lower' or 'upper', got {uplo!r}")
    C = _as_sparse(A)
    if C.nnz and not np.isfinite(C.data).all():
        bad = np.flatnonzero(~np.isfinite(C.data))[0]
        col = int(np.searchsorted(C.indptr, bad, side="right") - 1)
        raise InvalidMatrixError(f"matrix has a non-finite entry {C.data[bad]} at ({int(C.indices[bad])}, {col})")
    if uplo == "full":
        return _lower_of_full(C, symmetry_rtol)
    _warn_if_only_the_other_triangle(C, uplo)
    if uplo == "lower":
        L = sp.tril(C, format="csc")
    else:
        L = sp.triu(C, format="csc").T.tocsc()
    L = sp.csc_array(L)
    L.sort_indices()
    return L


def _warn_if_only_the_other_triangle(C: sp.csc_array, uplo: str) -> None:
    """A UserWarning when the triangle `uplo` names holds nothing off the diagonal and the other
    does: its entries are ignored, so the matrix factored would be diagonal (a likely mistake)."""
    column = np.repeat(np.arange(C.shape[1]), np.diff(C.indptr))
    below = int(np.count_nonzero(C.indices > column))
    above = int(np.count_nonzero(C.indices < column))
    read, ignored = (below, above) if uplo == "lower" else (above, below)
    if ignored and not read:
        warnings.warn(f"uplo={uplo!r}: the {uplo} triangle has no entry off the diagonal and the other has {ignored}, "
                      "which are ignored, so the matrix factored is diagonal; pass uplo='full', or the triangle "
                      "that holds the entries", UserWarning, stacklevel=5)  # the user's line: cholesky or analyze


def _lower_of_full(C: sp.csc_array, symmetry_rtol: float) -> sp.csc_array:
    """The lower triangle of C (canonical CSC holding both triangles, finite),
    averaged with the upper one, after checking that they agree within
    symmetry_rtol * max|C| (symbolic.c: one pass, no transpose; 0.09 s of
    scipy transposes and sums on a 2D 1000^2 Laplacian)."""
    n = C.shape[0]
    Lp, Li, Lx = np.empty(n + 1, dtype=np.int64), np.empty(C.nnz, dtype=np.int32), np.empty(C.nnz)
    report = np.zeros(5)
    nnz = native.symbolic_lib().sym_lower_full(
        n, C.indptr.astype(np.int64, copy=False), C.indices.astype(np.int32, copy=False), C.data,
        Lp, Li, Lx, np.empty(n, dtype=np.int64), report)
    worst, row, col, scale, unmatched = report
    if worst > symmetry_rtol * scale:
        raise NotSymmetricError(
            f"matrix is not symmetric: |A - A^T| max {worst:.3g} at ({int(row)}, {int(col)})"
            f" (max |A| {scale:.3g}, tolerance {symmetry_rtol:g} relative); pass uplo='lower' or"
            " 'upper' to use one triangle"
        )
    if unmatched:  # the pattern is not symmetric: L has entries A's lower triangle lacks
        L = sp.csc_array(sp.tril((C + C.T) * 0.5, format="csc"))
        L.sort_indices()
        return L
    indptr = Lp.astype(np.int32) if nnz <= np.iinfo(np.int32).max else Lp  # scipy's own choice for tril
    L = sp.csc_array((Lx[:nnz], Li[:nnz], indptr), shape=(n, n))
    L.has_sorted_indices = True
    return L
