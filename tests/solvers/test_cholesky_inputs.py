"""Unusual but valid matrix encodings give the same factor and solution as
the clean float64 matrix: explicit zeros, duplicate entries (summed, as
scipy does), unsorted indices, integer and float32 values."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import laplacian, relative_residual

from msc.solvers import InvalidMatrixError, analyze, cholesky


def clean() -> sp.csc_array:
    return sp.csc_array(laplacian(12, 2) * 4.0)  # integer-valued entries: int encodings are exact


def with_explicit_zeros(A: sp.csc_array) -> sp.csc_array:
    """Adds stored zeros at symmetric positions outside the pattern."""
    n = A.shape[0]
    rows = np.array([0, 5, 7, 30])
    cols = np.array([n - 1, 40, 90, 3])
    Z = sp.coo_array((np.zeros(8), (np.r_[rows, cols], np.r_[cols, rows])), shape=A.shape)
    out = sp.csc_array(A.tocoo())
    coo = out.tocoo()
    M = sp.csc_array((np.r_[coo.data, Z.data], (np.r_[coo.row, Z.row], np.r_[coo.col, Z.col])), shape=A.shape)
    assert (M.data == 0).sum() == 8  # the zeros are stored
    return M


def with_duplicates(A: sp.csc_array) -> sp.coo_array:
    """Every entry split into two halves stored separately."""
    coo = A.tocoo()
    return sp.coo_array((np.r_[coo.data * 0.5, coo.data * 0.5], (np.r_[coo.row, coo.row], np.r_[coo.col, coo.col])),
                        shape=A.shape)


def with_unsorted_indices(A: sp.csc_array) -> sp.csc_array:
    M = sp.csc_array(A, copy=True)
    rng = np.random.default_rng(3)
    for j in range(M.shape[1]):
        lo, hi = M.indptr[j], M.indptr[j + 1]
        order = lo + rng.permutation(hi - lo)
        M.indices[lo:hi] = M.indices[order]
        M.data[lo:hi] = M.data[order]
    M.has_sorted_indices = False
    assert not all(np.all(np.diff(M.indices[M.indptr[j]:M.indptr[j + 1]]) > 0) for j in range(M.shape[1]))
    return M


ENCODINGS = {
    "explicit zeros": with_explicit_zeros,
    "duplicates": with_duplicates,
    "unsorted indices": with_unsorted_indices,
    "int64": lambda A: A.astype(np.int64),
    "int32 CSR": lambda A: sp.csr_array(A).astype(np.int32),
    "float32": lambda A: A.astype(np.float32),
}


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_encoding_gives_the_clean_result(name: str) -> None:
    A = clean()
    M = ENCODINGS[name](A)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    x_ref = cholesky(A).solve(b)
    F = cholesky(M)
    x = F.solve(b)
    assert relative_residual(A, x, b) < 1e-12
    np.testing.assert_allclose(x, x_ref, rtol=0, atol=1e-12 * np.abs(x_ref).max())
    assert F.logdet() == pytest.approx(cholesky(A).logdet(), rel=1e-12)


def test_explicit_zeros_stay_in_the_pattern() -> None:
    """analyze() on a matrix with stored zeros accepts new values there."""
    A = clean()
    M = with_explicit_zeros(A)
    S = analyze(M)
    filled = M.copy()
    filled.data[filled.data == 0] = -0.01  # small symmetric values where the zeros were
    b = np.ones(A.shape[0])
    x = S.factorize(filled).solve(b)
    assert relative_residual(filled, x, b) < 1e-12


def test_unsupported_dtypes_are_named() -> None:
    A = clean()
    with pytest.raises(InvalidMatrixError, match="complex"):
        cholesky(A.astype(np.complex128))
    with pytest.raises(InvalidMatrixError, match="dtype"):
        cholesky(np.array([["a", "b"], ["b", "a"]]))
