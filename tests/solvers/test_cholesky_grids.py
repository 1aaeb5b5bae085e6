"""Grid Laplacians and small matrices: residuals, P A P^T = L L^T, logdet,
reuse of the analysis, triangles, threads, queues and orderings."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import backward_stable, laplacian, random_spd, relative_residual

from msc.solvers import Amalgamation, QueueParams, analyze, cholesky


@pytest.mark.parametrize("ordering", ["auto", "amd", "metis", "natural"])
@pytest.mark.parametrize("m,dim", [(40, 2), (120, 2), (12, 3), (24, 3)])
def test_laplacian_residual(m: int, dim: int, ordering: str, rng: np.random.Generator) -> None:
    A = laplacian(m, dim)
    b = rng.standard_normal(A.shape[0])
    F = cholesky(A, ordering=ordering)
    assert backward_stable(A, F.solve(b), b)


@pytest.mark.parametrize("A", [laplacian(10, 2), laplacian(5, 3), random_spd(60, 0.08, 3)],
                         ids=["lap2d", "lap3d", "random"])
def test_factor_reproduces_permuted_matrix(A: sp.csc_array, rng: np.random.Generator) -> None:
    F = cholesky(A)
    P = F.perm
    L = F.L
    assert sp.issparse(L) and L.shape == A.shape
    assert sp.triu(L, k=1).nnz == 0
    Ad = A.toarray()[np.ix_(P, P)]
    np.testing.assert_allclose((L @ L.T).toarray(), Ad, atol=1e-12 * abs(Ad).max())
    assert F.nnz <= L.nnz == F.nnz_stored
    assert F.logdet() == pytest.approx(np.linalg.slogdet(A.toarray())[1], rel=1e-10)
    b = rng.standard_normal(A.shape[0])
    assert relative_residual(A, F.solve(b), b) < 1e-12


@pytest.mark.parametrize("m,dim,k", [(30, 2, 19), (12, 3, 19), (30, 2, 9)])
def test_many_right_hand_sides(rng: np.random.Generator, m: int, dim: int, k: int) -> None:
    """k = 19: two full chunks of 8 right-hand sides, then 3 in the scalar tail; k = 9: a tail of one."""
    A = laplacian(m, dim)
    B = rng.standard_normal((A.shape[0], k))
    F = cholesky(A)
    assert int(np.diff(F._S.super).max()) > 8  # column blocks of 8 and a partial one
    X = F.solve(B)
    assert X.shape == B.shape
    for j in range(k):
        assert backward_stable(A, X[:, j], B[:, j]), f"right-hand side {j} of {k}"
    # one column goes through the single right-hand-side sweeps: same answer up to rounding
    for j in (0, k // 2, k - 2):
        np.testing.assert_allclose(F.solve(B[:, j]), X[:, j], rtol=0, atol=1e-12 * np.abs(X[:, j]).max())
    np.testing.assert_allclose(F.solve(B[:, :1])[:, 0], X[:, 0], rtol=0, atol=1e-12 * np.abs(X[:, 0]).max())


def test_analyze_then_factorize_new_values(rng: np.random.Generator) -> None:
    A = laplacian(25, 2)
    S = analyze(A)
    A2 = sp.csc_array(A + sp.diags_array(rng.uniform(0.1, 2.0, A.shape[0])))
    for M in (A, A2):
        F = S.factorize(M)
        b = rng.standard_normal(M.shape[0])
        assert relative_residual(M, F.solve(b), b) < 1e-11
        np.testing.assert_array_equal(F.perm, S.perm)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("uplo", ["full", "lower", "upper"])
def test_formats_and_triangles(fmt: str, uplo: str, rng: np.random.Generator) -> None:
    A = random_spd(80, 0.05, 7)
    given = {"full": A, "lower": sp.tril(A), "upper": sp.triu(A)}[uplo].asformat(fmt)
    F = cholesky(given, uplo=uplo)
    b = rng.standard_normal(80)
    assert relative_residual(A, F.solve(b), b) < 1e-12


def test_user_permutation_is_used(rng: np.random.Generator) -> None:
    A = laplacian(15, 2)
    perm = rng.permutation(A.shape[0])
    F = cholesky(A, ordering=perm)
    # the factor is postordered: same matrix class, possibly relabelled within the tree
    L = F.L
    P = F.perm
    np.testing.assert_allclose((L @ L.T).toarray(), A.toarray()[np.ix_(P, P)], atol=1e-12)
    b = rng.standard_normal(A.shape[0])
    assert relative_residual(A, F.solve(b), b) < 1e-12
    assert F.stats["ordering"] == "user"


def test_auto_picks_least_predicted_fill() -> None:
    F = cholesky(laplacian(25, 3))  # AMD's fill is high here, so METIS is tried too
    tried = F.stats["orderings_tried"]
    assert set(tried) == {"amd", "metis"}
    assert F.stats["nnz_L"] == min(t["nnz_L"] for t in tried.values())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "queues",
    [QueueParams(), QueueParams(inst_max=0, tpq_max=0), QueueParams(inst_max=64, tpq_max=1 << 20, tpq_batch=3),
     QueueParams(diag_small=0), QueueParams(diag_small=1000)],
    ids=["default", "all-dpq", "no-dpq", "lapack-diag", "c-diag"],
)
def test_queues_and_threads(queues: QueueParams, threads: int, rng: np.random.Generator) -> None:
    A = laplacian(14, 3)
    F = cholesky(A, queues=queues, threads=threads)
    b = rng.standard_normal(A.shape[0])
    assert relative_residual(A, F.solve(b), b) < 1e-11
    q = F.stats["queue_stats"]
    n_updates = q["inst_updates"] + q["tpq_updates"] + q["dpq_updates"]
    assert n_updates > 0
    if queues.tpq_max == 0:
        assert q["inst_updates"] == q["tpq_updates"] == 0
    if queues.tpq_max == 1 << 20:
        assert q["dpq_updates"] == 0 and q["tpq_batches"] > 0


def test_default_queues_all_used() -> None:
    F = cholesky(laplacian(22, 3), ordering="metis")
    q = F.stats["queue_stats"]
    assert q["inst_updates"] > 0 and q["tpq_updates"] > 0 and q["dpq_updates"] > 0
    assert F.stats["phase1_subtrees"] >= 1
    assert set(F.timings) >= {"ordering", "symbolic", "numeric"}


@pytest.mark.parametrize("amal", [Amalgamation((0, 0, 0), (0.0, 0.0, 0.0)), Amalgamation((64, 128, 256), (1.0, 1.0, 1.0))],
                         ids=["none", "aggressive"])
def test_amalgamation_parameters(amal: Amalgamation, rng: np.random.Generator) -> None:
    A = laplacian(30, 2)
    F = cholesky(A, amalgamation=amal)
    b = rng.standard_normal(A.shape[0])
    assert relative_residual(A, F.solve(b), b) < 1e-11
    base = cholesky(A)
    if amal.nrelax[0] == 0:
        assert F.stats["supernodes"] >= base.stats["supernodes"]
        assert F.nnz_stored == F.nnz  # no explicit zeros
    else:
        assert F.stats["supernodes"] < base.stats["supernodes"]
        assert F.nnz_stored > F.nnz


def test_threads_give_same_factor() -> None:
    A = laplacian(40, 2)
    L1 = cholesky(A, threads=1, ordering="metis")
    L2 = cholesky(A, threads=2, ordering=L1.perm)
    np.testing.assert_allclose(L1.L.toarray(), L2.L.toarray(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("split,tile_min,tile_max", [("all", 8, 8), ("all", 24, 40), ("half", 16, 256), ("none", 64, 256)],
                         ids=["all split, tiles of 8", "all split, tiles of 24-40", "half split", "none split"])
@pytest.mark.parametrize("m,dim", [(40, 2), (9, 3)])
def test_split_top_supernodes_give_same_factor(split: str, tile_min: int, tile_max: int, m: int, dim: int,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Top supernodes factored as tasks over tiles (column blocks that do not
    divide the supernode, rows below it) give the factor of one thread."""
    from msc.solvers import numeric

    A = laplacian(m, dim)
    ref = cholesky(A, threads=1, ordering="metis")
    S = analyze(A, threads=4, ordering=ref.perm)
    work = numeric.supernode_work(S.structure.super, S.structure.Sp)[S.schedule.top]
    threshold = {"all": 0.0, "half": float(np.median(work)) + 1, "none": float(work.max()) + 1}[split]
    monkeypatch.setattr(numeric, "TOP_SPLIT_FLOPS", threshold)
    monkeypatch.setattr(numeric, "TILE_MIN", tile_min)
    monkeypatch.setattr(numeric, "TILE_MAX", tile_max)
    tiles = numeric.top_tiles(S.structure, S.schedule.top)
    assert tiles.shape == S.schedule.top.shape and tiles.shape[0] > 1
    split_count = np.count_nonzero(tiles)
    assert {"all": split_count == tiles.shape[0], "half": 0 < split_count < tiles.shape[0],
            "none": split_count == 0}[split]
    assert ((tiles == 0) | ((tiles >= tile_min) & (tiles <= tile_max))).all()
    F = S.factorize(A)
    np.testing.assert_allclose(F.L.toarray(), ref.L.toarray(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("where", [0, 0.5, 1], ids=["first", "middle", "last"])
def test_split_top_supernode_names_failing_column(where: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """A matrix that is not positive definite at a column of the root
    supernode, factored in tiles of 8 columns, fails at that column."""
    from msc.solvers import NotPositiveDefiniteError, numeric

    monkeypatch.setattr(numeric, "TOP_SPLIT_FLOPS", 0.0)
    monkeypatch.setattr(numeric, "TILE_MIN", 8)
    monkeypatch.setattr(numeric, "TILE_MAX", 8)
    A = laplacian(20, 2)
    S = analyze(A, threads=3, ordering="metis")
    root = int(S.schedule.top[-1])
    first, last = int(S.structure.super[root]), int(S.structure.super[root + 1]) - 1
    assert last - first + 1 > 8  # several tiles
    bad = int(S.perm[first + round(where * (last - first))])
    B = A.tolil()
    B[bad, bad] = -10.0
    with pytest.raises(NotPositiveDefiniteError) as info:
        S.factorize(sp.csc_array(B))
    assert info.value.column == bad
