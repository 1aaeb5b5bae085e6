"""Every error case is a clear msc error, never a crash; edge sizes work."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import laplacian, relative_residual

from msc.errors import MscError
from msc.solvers import (
    Amalgamation,
    FactorTooLargeError,
    InvalidMatrixError,
    MatrixReadError,
    NotPositiveDefiniteError,
    NotSymmetricError,
    OptionError,
    OrderingError,
    QueueParams,
    RightHandSideError,
    analyze,
    cholesky,
)
from msc.solvers import io as mio


def test_not_square() -> None:
    with pytest.raises(InvalidMatrixError, match=r"not square: shape \(3, 4\)"):
        cholesky(sp.csr_array(np.ones((3, 4))))


def test_not_symmetric_names_the_worst_entry() -> None:
    A = sp.lil_array(laplacian(6, 2))
    A[12, 30] = 0.3
    with pytest.raises(NotSymmetricError, match=r"not symmetric: \|A - A\^T\| max 0.3 at \((12, 30|30, 12)\)"):
        cholesky(A.tocsr())


def test_tiny_asymmetry_within_tolerance_is_accepted() -> None:
    A = sp.lil_array(laplacian(6, 2))
    A[12, 13] = A[12, 13] * (1 + 1e-14)
    F = cholesky(A.tocsc())
    b = np.ones(36)
    assert relative_residual(A.tocsc(), F.solve(b), b) < 1e-12


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite(bad: float) -> None:
    A = sp.lil_array(laplacian(5, 2))
    A[3, 3] = bad
    with pytest.raises(InvalidMatrixError, match=r"non-finite entry .* at \(3, 3\)"):
        cholesky(A.tocsr())


@pytest.mark.parametrize("ordering", ["natural", "amd", "metis"])
def test_not_positive_definite_names_user_column(ordering: str) -> None:
    n = 50
    d = np.full(n, 4.0)
    d[37] = -1.0
    A = sp.csc_array(sp.diags_array(d) + sp.diags_array([np.full(n - 1, 0.1)] * 2, offsets=[-1, 1]))
    with pytest.raises(NotPositiveDefiniteError, match="column 37 of A") as info:
        cholesky(A, ordering=ordering)
    assert info.value.column == 37
    assert isinstance(info.value, MscError)


def test_indefinite_laplacian_shift() -> None:
    A = sp.csc_array(laplacian(10, 2) - 1.0 * sp.eye_array(100))
    with pytest.raises(NotPositiveDefiniteError) as info:
        cholesky(A)
    assert 0 <= info.value.column < 100


def test_the_failing_pivot_is_the_first_whatever_the_thread_count() -> None:
    """Threads stop at whichever failure they meet first (two independent blocks, one failing at
    its last pivot, one at its first: 199 or 200 before); the error names the first in order."""
    n = 400
    d = np.full(n, 4.0)
    d[199] = d[200] = -1.0
    off = np.full(n - 1, -1.0)
    off[199] = 0.0  # no coupling between the blocks 0..199 and 200..399
    A = sp.csc_array(sp.diags_array(d) + sp.diags_array([off, off], offsets=[-1, 1]))
    columns = set()
    for threads in (1, 2, 2, 2, 2, 4):
        with pytest.raises(NotPositiveDefiniteError, match="pivot 199 of the permuted matrix") as info:
            cholesky(A, ordering="natural", threads=threads)
        columns.add(info.value.column)
    assert columns == {199}


@pytest.mark.parametrize("options, said", [
    ({"threads": 1.5}, "threads must be a non-negative integer"),
    ({"threads": -2}, "threads must be a non-negative integer"),
    ({"max_factor_bytes": -1}, "max_factor_bytes must be a positive integer"),
    ({"symmetry_rtol": -1}, "symmetry_rtol must be a number in [0, 1)"),
])
def test_options_out_of_range_are_named(options: dict, said: str) -> None:
    with pytest.raises(OptionError, match=re.escape(said)):
        cholesky(laplacian(4, 2), **options)
    with pytest.raises(OptionError, match=re.escape(said)):
        analyze(laplacian(4, 2), **options)


@pytest.mark.parametrize("options, said", [
    ({"threads": 40_000}, "threads=40000 is more than swCholesky starts (at most 1024"),
    ({"amalgamation": (4, 16, 48)}, "amalgamation must be an msc.solvers.Amalgamation"),
    ({"queues": {"inst_max": 3}}, "queues must be an msc.solvers.QueueParams"),
])
def test_options_of_the_wrong_kind_or_too_many_threads_are_named(options: dict, said: str) -> None:
    """Before: the OpenMP runtime ended the process (40000 threads), or an AttributeError from inside."""
    with pytest.raises(OptionError, match=re.escape(said)):
        cholesky(laplacian(4, 2), **options)
    with pytest.raises(OptionError, match=re.escape(said)):
        analyze(laplacian(4, 2), **options)


def test_tune_takes_a_boolean() -> None:
    with pytest.raises(OptionError, match="tune must be True or False, got 'no'"):
        cholesky(laplacian(4, 2), tune="no")  # type: ignore[arg-type]


@pytest.mark.parametrize("make, said", [
    (lambda: Amalgamation(nrelax=(4, 16)), "nrelax takes three non-negative integers"),  # type: ignore[arg-type]
    (lambda: Amalgamation(nrelax=(-1, 2, 3)), "nrelax takes three non-negative integers"),
    (lambda: Amalgamation(zrelax=(5, 5, 5)), "zrelax takes three fractions of explicit zeros in [0, 1]"),
    (lambda: Amalgamation(zrelax=0.5), "nrelax and zrelax are sequences"),  # type: ignore[arg-type]
    (lambda: Amalgamation(max_columns=0), "max_columns takes a positive integer, got 0"),
    (lambda: QueueParams(tpq_batch=0), "QueueParams: tpq_batch must be an integer >= 1, got 0"),
    (lambda: QueueParams(inst_max=1000), "QueueParams: inst_max must be an integer in [0, 64], got 1000"),
    (lambda: QueueParams(diag_small=2.5), "QueueParams: diag_small must be an integer >= 0, got 2.5"),
])
def test_parameters_out_of_range_name_the_field(make, said: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(OptionError, match=re.escape(said)):
        make()


def test_amalgamation_takes_any_sequence() -> None:
    assert Amalgamation([1, 2, 3], [0.5, 0.2, 0.1]) == Amalgamation((1, 2, 3), (0.5, 0.2, 0.1))


def test_a_sparse_right_hand_side_is_named() -> None:
    with pytest.raises(RightHandSideError, match=r"dense numpy array, got a scipy.sparse .* \(pass b.toarray\(\)\)"):
        cholesky(laplacian(3, 2)).solve(sp.csr_array(np.ones((9, 1))))


def test_zero_diagonal_is_not_positive_definite() -> None:
    A = sp.csc_array(np.diag([1.0, 0.0, 2.0]))
    with pytest.raises(NotPositiveDefiniteError, match="column 1"):
        cholesky(A)


@pytest.mark.parametrize("shape", [(7,), (10, 2, 1), (11, 1), (0,)])
def test_wrong_right_hand_side_shape(shape: tuple[int, ...]) -> None:
    F = cholesky(laplacian(3, 2))
    with pytest.raises(RightHandSideError, match=r"shape \(9,\) or \(9, k\)"):
        F.solve(np.ones(shape))


def test_non_finite_right_hand_side() -> None:
    F = cholesky(laplacian(3, 2))
    with pytest.raises(RightHandSideError, match="NaN or Inf"):
        F.solve(np.array([1.0] * 8 + [np.nan]))


def test_empty_matrix() -> None:
    F = cholesky(sp.csc_array((0, 0)))
    assert F.solve(np.zeros(0)).shape == (0,)
    assert F.solve(np.zeros((0, 3))).shape == (0, 3)
    assert F.logdet() == 0.0 and F.nnz == 0 and F.L.shape == (0, 0)


def test_one_by_one() -> None:
    F = cholesky(sp.csr_array(np.array([[4.0]])))
    assert F.solve(np.array([2.0])) == pytest.approx([0.5])
    assert F.logdet() == pytest.approx(np.log(4.0))
    with pytest.raises(NotPositiveDefiniteError, match="column 0"):
        cholesky(sp.csr_array(np.array([[-4.0]])))


def test_rcond_is_the_pivot_ratio_squared_and_flags_a_singular_matrix_that_factors() -> None:
    assert cholesky(sp.identity(5, format="csr") * 3.0).rcond() == 1.0
    assert cholesky(sp.diags_array([4.0, 1.0, 1e-8])).rcond() == pytest.approx(1e-8 / 4.0)
    assert cholesky(sp.csc_array((0, 0))).rcond() == 1.0
    n = 20  # a path graph's Laplacian (singular by the constants) shifted by 1e-15: it factors
    path = sp.diags_array([-np.ones(n - 1), np.r_[1.0, 2 * np.ones(n - 2), 1.0], -np.ones(n - 1)], offsets=[-1, 0, 1])
    F = cholesky(sp.csr_array(path + 1e-15 * sp.identity(n)))
    d = F.diagonal()
    assert F.rcond() == pytest.approx((d.min() / d.max()) ** 2) and F.rcond() < 1e-13


def test_dtypes() -> None:
    with pytest.raises(InvalidMatrixError, match="complex"):
        cholesky(sp.csc_array(np.eye(3, dtype=complex)))
    with pytest.raises(InvalidMatrixError, match="scipy.sparse"):
        cholesky([[1.0]])
    F = cholesky(sp.csc_array(np.eye(3, dtype=np.int64) * 2))  # integers are converted
    assert F.solve(np.ones(3)) == pytest.approx([0.5] * 3)


def test_bad_orderings() -> None:
    A = laplacian(4, 2)
    with pytest.raises(OrderingError, match="unknown ordering 'colamd'"):
        cholesky(A, ordering="colamd")
    with pytest.raises(OrderingError, match="length 16"):
        cholesky(A, ordering=np.arange(15))
    with pytest.raises(OrderingError, match="not a permutation"):
        cholesky(A, ordering=np.zeros(16, dtype=int))
    with pytest.raises(OrderingError, match=r"\[0, 16\)"):
        cholesky(A, ordering=np.arange(1, 17))
    with pytest.raises(OrderingError, match=r"ordering must be one of .* or a permutation array, got None"):
        cholesky(A, ordering=None)  # type: ignore[arg-type]


def test_bad_uplo() -> None:
    with pytest.raises(InvalidMatrixError, match="uplo"):
        cholesky(laplacian(3, 2), uplo="both")  # type: ignore[arg-type]


def test_pattern_mismatch_on_refactorization() -> None:
    S = analyze(laplacian(5, 2))
    with pytest.raises(InvalidMatrixError, match="pattern differs"):
        S.factorize(laplacian(6, 2))


def test_factor_too_large_is_caught_before_numeric_work() -> None:
    A = laplacian(30, 2)
    with pytest.raises(FactorTooLargeError, match=r"would need \d+\.\d\d KiB .* the limit is 9.77 KiB; pass "
                                                  "max_factor_bytes") as info:
        analyze(A, max_factor_bytes=10_000)
    assert info.value.predicted_bytes > info.value.limit_bytes == 10_000
    assert isinstance(info.value, MemoryError)
    analyze(A, max_factor_bytes=info.value.predicted_bytes)  # a raised limit works


def test_random_graph_fill_is_predicted() -> None:
    """A random graph fills in almost completely: refused by the symbolic phase."""
    rng = np.random.default_rng(0)
    n = 20_000
    rows = rng.integers(0, n, 8 * n)
    cols = rng.integers(0, n, 8 * n)
    G = sp.csr_array((np.ones(8 * n), (rows, cols)), shape=(n, n))
    G = ((G + G.T) > 0).astype(float)
    A = sp.csc_array(sp.diags_array(np.asarray(G.sum(axis=1)).ravel() + 1.0) - G)
    with pytest.raises(FactorTooLargeError, match="GiB"):
        analyze(A, ordering="amd", max_factor_bytes=256 << 20)


def test_reader_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MatrixReadError, match="no such file"):
        mio.read_matrix(tmp_path / "missing.mtx")
    bad = tmp_path / "bad.tri"
    bad.write_text("3 3 2 -1\n1 1 2.0\n")
    with pytest.raises(MatrixReadError, match="promises 2 entries, found 1"):
        mio.read_matrix(bad)
    graph = tmp_path / "g.graph"
    graph.write_text("3 2\n2\n1 3\n")
    with pytest.raises(MatrixReadError, match="3 adjacency lines"):
        mio.read_matrix(graph)
    for text, said in (("3 2\n2\n1 3\n9\n", "line 4: vertex 3 lists neighbour 9, outside 1..3"),
                       ("3 2\n0\n1 3\n2\n", "line 2: vertex 1 lists neighbour 0, outside 1..3"),
                       ("3 2\n2\n1 x\n2\n", "line 3: vertex 2's neighbours are not integers"),
                       ("3 3\n2\n1 3\n2\n", "header says 3 edges, so 6 adjacency entries (each edge in both "
                                                "lists), but the lists hold 4"),
                       ("a b\n", "starts with the line 'vertices edges [fmt]'"), ("", "empty file")):
        graph.write_text(text)
        with pytest.raises(MatrixReadError, match=re.escape(said)):
            mio.read_matrix(graph)
    junk = tmp_path / "x.mat"
    junk.write_text("junk\n")
    with pytest.raises(MatrixReadError, match="not a readable MATLAB file"):
        mio.read_matrix(junk)
    with pytest.raises(MatrixReadError, match="a directory, not a matrix file"):
        mio.read_matrix(tmp_path)


def test_readers_roundtrip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    graph = tmp_path / "path.graph"
    graph.write_text("3 2\n2\n1 3\n2\n")
    A = mio.read_matrix(graph).toarray()
    np.testing.assert_array_equal(A, [[2, -1, 0], [-1, 3, -1], [0, -1, 2]])
    tri = tmp_path / "m.tri"
    tri.write_text("% comment\n2 2 3 -1\n1 1 4.0\n2 1 1.0\n2 2 3.0\n")
    np.testing.assert_array_equal(mio.read_matrix(tri).toarray(), [[4, 1], [1, 3]])
    csparse = tmp_path / "m"
    csparse.write_text("0 0 4.0\n1 0 1.0\n1 1 3.0\n")
    np.testing.assert_array_equal(mio.read_matrix(csparse).toarray(), [[4, 1], [1, 3]])
    csparse.write_text("1 1 4.0\n2 1 1.0\n2 2 3.0\n")  # no index 0: 1-based (before, an empty row 0)
    np.testing.assert_array_equal(mio.read_matrix(csparse).toarray(), [[4, 1], [1, 3]])


@pytest.mark.parametrize("seed", range(4))
def test_lower_triangle_of_full_matches_the_definition(seed: int) -> None:
    """The one-pass lower triangle equals tril((A + A^T) / 2) on patterns that
    are not symmetric (entries whose mirror is missing, above and below the
    diagonal), and names the largest |A - A^T| with its position: an upper or
    a lower entry without a mirror, or a pair that differs."""
    from msc.solvers.matrix import lower_triangle

    rng = np.random.default_rng(seed)
    n = 40
    S = sp.random_array((n, n), density=0.15, rng=rng) * 1e-13  # tiny, unsymmetric in pattern
    A = sp.csc_array(sp.eye_array(n) * 4.0 + S)
    L = lower_triangle(A, symmetry_rtol=1e-10)
    np.testing.assert_array_equal(L.toarray(), np.tril((A + A.T).toarray() * 0.5))
    P = sp.csc_array(A + S.T * 1.5)  # a symmetric pattern whose values differ a little
    np.testing.assert_array_equal(lower_triangle(P).toarray(), np.tril((P + P.T).toarray() * 0.5))
    dense = A.toarray()
    empty = [(i, j) for i in range(n) for j in range(n) if i != j and dense[i, j] == 0 and dense[j, i] == 0]
    upper = next((i, j) for i, j in empty if i < j)
    lower = next((i, j) for i, j in empty if i > j)
    pair = next((i, j) for i in range(n) for j in range(i) if dense[i, j] != 0 and dense[j, i] != 0)
    for i, j in (upper, lower, pair):
        bad = sp.lil_array(A)
        bad[i, j] = bad[i, j] + 1.0
        with pytest.raises(NotSymmetricError) as info:
            lower_triangle(sp.csc_array(bad))
        assert f"at ({i}, {j})" in str(info.value) or f"at ({j}, {i})" in str(info.value)


def test_a_triangle_read_with_nothing_off_the_diagonal_warns_when_the_other_has_entries() -> None:
    """uplo names the triangle read (as CHOLMOD's stype); given only the other one, the factor
    would be of the diagonal alone: a warning names it, and the named triangle factors silently."""
    upper = sp.triu(laplacian(4, 2)).tocsr()
    with pytest.warns(UserWarning, match=r"uplo='lower': the lower triangle has no entry off the diagonal and the "
                                         r"other has 24, which are ignored"):
        cholesky(upper, uplo="lower")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F = cholesky(upper, uplo="upper")
        b = np.ones(16)
        assert relative_residual(laplacian(4, 2), F.solve(b), b) < 1e-12
        cholesky(sp.csr_array(np.diag(np.arange(1.0, 5.0))), uplo="lower")  # diagonal: nothing to warn of
