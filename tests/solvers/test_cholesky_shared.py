"""Every shared test matrix: read it, factor it, and check the normwise
backward error of the solve, ||Ax - b|| / (||A|| ||x|| + ||b||) in the
infinity norm, which a backward-stable Cholesky keeps at a small multiple of
the machine epsilon whatever the condition number."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import backward_stable

from msc.solvers import cholesky
from msc.solvers import io as mio

ROOT = mio.matrices_dir()
HAVE = (ROOT / "MANIFEST.csv").is_file()
ROWS = mio.manifest(ROOT) if HAVE else []
MISSING = (f"the shared SPD matrices are not at {ROOT}: these tests of every shared matrix are skipped; "
           "set MSC_MATRICES to the folder holding MANIFEST.csv to run them")
NEEDS = pytest.mark.skipif(not HAVE, reason=MISSING)


def test_manifest_present() -> None:
    if not HAVE:
        pytest.skip(MISSING)
    assert len(ROWS) == 20


@NEEDS
@pytest.mark.parametrize("row", ROWS, ids=[r["matrix"] for r in ROWS])
def test_read_and_solve(row: dict[str, str]) -> None:
    A = mio.read_matrix(ROOT / row["local_path"])
    assert A.shape == (int(row["n"]), int(row["n"]))
    assert A.nnz == int(row["nnz_full"])
    F = cholesky(A)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    x = F.solve(b)
    assert backward_stable(A, x, b)
    X = F.solve(np.column_stack([b, -2.0 * b, np.ones_like(b)]))  # the several-right-hand-side path
    for k in range(X.shape[1]):
        bk = b if k == 0 else (-2.0 * b if k == 1 else np.ones_like(b))
        assert backward_stable(A, X[:, k], bk)
    # fill of our ordering is in the range of SuperLU's MMD on the same matrix
    assert F.nnz <= 1.5 * int(row["nnzL_superlu_mmd"])
