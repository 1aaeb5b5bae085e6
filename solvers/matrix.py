"""Input checks and the canonical form the solver works on: the lower
triangle of a symmetric float64 matrix in CSC with sorted indices."""

from __future__ import annotations

from typing import Literal

import numpy as np
import scipy.sparse as sp

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
        D = (C - C.T).tocoo()
        if D.nnz:
            k = int(np.argmax(np.abs(D.data)))
            worst = float(abs(D.data[k]))
            scale = float(np.abs(C.data).max())
            if worst > symmetry_rtol * scale:
                raise NotSymmetricError(
                    f"matrix is not symmetric: |A - A^T| max {worst:.3g} at ({int(D.row[k])}, {int(D.col[k])})"
                    f" (max |A| {scale:.3g}, tolerance {symmetry_rtol:g} relative); pass uplo='lower' or"
                    " 'upper' to use one triangle"
                )
            C = ((C + C.T) * 0.5).tocsc()
        L = sp.tril(C, format="csc")
    elif uplo == "lower":
        L = sp.tril(C, format="csc")
    else:
        L = sp.triu(C, format="csc").T.tocsc()
    L = sp.csc_array(L)
    L.sort_indices()
    return L
