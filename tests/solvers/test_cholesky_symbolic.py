"""Symbolic analysis against a brute-force boolean elimination on small
random matrices: elimination tree, column counts, supernode structures."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_spd

from msc.solvers import analyze
from msc.solvers.matrix import lower_triangle
from msc.solvers.symbolic import Amalgamation, fundamental_supernodes, permute, tree_and_counts


def brute_force_pattern(dense_pattern: np.ndarray) -> np.ndarray:
    """Boolean pattern of L by symbolic elimination (no cancellation)."""
    M = dense_pattern.copy()
    n = M.shape[0]
    for k in range(n):
        rows = np.flatnonzero(M[k + 1:, k]) + k + 1
        M[np.ix_(rows, rows)] = True
    return np.tril(M)


def reference(A: np.ndarray, perm: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    P = A[np.ix_(perm, perm)] != 0
    Lp = brute_force_pattern(P | P.T)
    n = A.shape[0]
    colcount = Lp.sum(axis=0)
    parent = np.array([next((i for i in range(k + 1, n) if Lp[i, k]), -1) for k in range(n)])
    return Lp, parent, colcount


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("ordering", ["natural", "amd", "metis"])
def test_tree_and_counts_match_brute_force(seed: int, ordering: str) -> None:
    n = 30 + 7 * seed
    A = random_spd(n, 0.06, seed)
    lower = lower_triangle(A)
    S = analyze(A, ordering=ordering)
    perm = S.perm
    Lp, parent, colcount = reference(A.toarray(), perm)
    got_parent, _, got_count = tree_and_counts(n, permute(lower, perm))
    np.testing.assert_array_equal(got_parent, parent)
    np.testing.assert_array_equal(got_count, colcount)
    assert S.nnz == int(colcount.sum())
    assert S.flops == pytest.approx(float((colcount.astype(float) ** 2).sum()))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("amal", [Amalgamation(), Amalgamation((0, 0, 0), (0.0, 0.0, 0.0))],
                         ids=["relaxed", "exact"])
def test_supernode_structure_is_union_of_columns(seed: int, amal: Amalgamation) -> None:
    n = 40 + 5 * seed
    A = random_spd(n, 0.05, 100 + seed)
    S = analyze(A, amalgamation=amal).structure
    Lp, parent, colcount = reference(A.toarray(), S.perm)
    np.testing.assert_array_equal(S.parent, parent)  # the final order is postordered
    assert np.all((S.parent == -1) | (S.parent > np.arange(n)))
    for s in range(S.nsuper):
        first, last = S.super[s], S.super[s + 1]
        rows = S.Si[S.Sp[s]:S.Sp[s + 1]]
        assert np.all(np.diff(rows) > 0)
        expected = np.flatnonzero(Lp[:, first:last].any(axis=1) | (np.arange(n) >= first) & (np.arange(n) < last))
        np.testing.assert_array_equal(rows, expected)


def test_fundamental_supernodes_of_a_chain() -> None:
    # dense matrix: a single chain, one fundamental supernode
    n = 6
    parent = np.append(np.arange(1, n), -1).astype(np.int32)
    colcount = np.arange(n, 0, -1).astype(np.int32)
    np.testing.assert_array_equal(fundamental_supernodes(parent, colcount), [0, n])
    # a star of leaves under one root: every leaf is its own supernode
    parent = np.array([4, 4, 4, 4, -1], dtype=np.int32)
    colcount = np.array([2, 2, 2, 2, 1], dtype=np.int32)
    np.testing.assert_array_equal(fundamental_supernodes(parent, colcount), [0, 1, 2, 3, 4, 5])


def _solver_lines_executed(fn) -> int:  # type: ignore[no-untyped-def]
    """Python lines run inside the solver package while fn() runs."""
    import sys

    import msc.solvers

    root = msc.solvers.__path__[0]
    count = 0

    def tracer(frame, event, arg):  # type: ignore[no-untyped-def]
        nonlocal count
        if not frame.f_code.co_filename.startswith(root):
            return None
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


@pytest.mark.parametrize("ordering", ["amd", "metis", "auto"])
def test_analysis_has_no_python_loop_over_the_matrix(ordering: str) -> None:
    """The analysis runs the same Python lines whatever the size: every loop
    over columns, nonzeros or supernodes is in C or numpy. A per-column
    Python loop would multiply the count by 16 between these two grids."""
    from conftest import laplacian

    small, large = laplacian(20, 2), laplacian(80, 2)
    analyze(small, ordering=ordering, threads=1)  # load the libraries first
    lines_small = _solver_lines_executed(lambda: analyze(small, ordering=ordering, threads=1))
    lines_large = _solver_lines_executed(lambda: analyze(large, ordering=ordering, threads=1))
    assert lines_small > 50  # the tracer sees the package
    assert lines_large <= lines_small + 20


@pytest.mark.parametrize("case", ["grid", "random", "dense row", "diagonal"])
def test_amd_gives_amd_order_permutation(case: str) -> None:
    """ordering.amd calls AMD's core (amd_2) on its own graph and workspace: the
    permutation must be the one the library's amd_order gives for the matrix."""
    import ctypes

    import scipy.sparse as sp
    from conftest import laplacian

    from msc.solvers import ordering

    lib = ordering._libamd()
    if lib is None:
        pytest.skip("no AMD shared library here (the cvxopt.amd.order fallback is used)")
    A = {"grid": lambda: laplacian(12, 2), "random": lambda: random_spd(300, 0.02, 5),
         "dense row": lambda: sp.csc_array(random_spd(400, 0.005, 6) + sp.csc_array(
             (np.full(400, 1.0), (np.zeros(400, dtype=int), np.arange(400))), shape=(400, 400))
             + sp.csc_array((np.full(400, 1.0), (np.arange(400), np.zeros(400, dtype=int))), shape=(400, 400))),
         "diagonal": lambda: sp.csc_array(sp.eye_array(7))}[case]()
    full = sp.csc_array(A)
    full.sort_indices()
    n = full.shape[0]
    expected = np.empty(n, dtype=np.int32)
    lib.amd_order.restype = ctypes.c_int32
    lib.amd_order.argtypes = [ctypes.c_int32] + [ctypes.c_void_p] * 5
    indptr, indices = full.indptr.astype(np.int32), full.indices.astype(np.int32)
    assert lib.amd_order(n, indptr.ctypes.data, indices.ctypes.data, expected.ctypes.data, None, None) == 0
    got = ordering.amd(lower_triangle(A, "full", 1e-12))
    np.testing.assert_array_equal(got, expected)
