"""Every shared test matrix: read it, factor it, check the residual against
the manifest's condition estimate."""

from __future__ import annotations

import numpy as np
import pytest

from msc.solvers import cholesky
from msc.solvers import io as mio

ROOT = mio.matrices_dir()
HAVE = (ROOT / "MANIFEST.csv").is_file()
ROWS = mio.manifest(ROOT) if HAVE else []
NEEDS = pytest.mark.skipif(not HAVE, reason=f"shared matrices not found at {ROOT} (set MSC_MATRICES)")


def test_manifest_present() -> None:
    if not HAVE:
        pytest.skip(f"shared matrices not found at {ROOT} (set MSC_MATRICES)")
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
    residual = np.linalg.norm(A @ x - b) / np.linalg.norm(b)
    assert residual <= 1e-10 * max(1.0, float(row["cond_est"]))
    # fill of our ordering is in the range of SuperLU's MMD on the same matrix
    assert F.nnz <= 1.5 * int(row["nnzL_superlu_mmd"])
