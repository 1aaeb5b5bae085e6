"""The auto-tuner: searches, stores per machine and matrix class, reuses."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import laplacian, relative_residual

from msc.solvers import cholesky
from msc.solvers import tune as tuner


@pytest.fixture
def cache(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuner, "REPEATS", 1)
    return tmp_path


def test_tune_stores_and_reuses(cache) -> None:  # type: ignore[no-untyped-def]
    A = laplacian(40, 2)
    first = tuner.tune(A)
    assert not first.from_cache and first.trials > 5
    assert first.gain >= 1.0 and first.best_seconds <= first.baseline_seconds
    stored = json.loads(tuner.cache_path().read_text())
    (machine, classes), = stored.items()
    assert first.matrix_class in classes
    again = tuner.tune(A)
    assert again.from_cache and again.queues == first.queues and again.amalgamation == first.amalgamation
    F = cholesky(A, tune=True)
    assert F.stats["tuning"]["from_cache"] and F.stats["queues"] == first.queues.as_dict()
    b = np.ones(A.shape[0])
    assert relative_residual(A, F.solve(b), b) < 1e-11


def test_tune_runs_on_a_miss_through_cholesky(cache) -> None:  # type: ignore[no-untyped-def]
    A = laplacian(9, 3)
    F = cholesky(A, tune=True)
    report = F.stats["tuning"]
    assert not report["from_cache"] and report["gain"] >= 1.0
    b = np.ones(A.shape[0])
    assert relative_residual(A, F.solve(b), b) < 1e-11


def test_proxy_is_a_spd_patch(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from msc.solvers.matrix import lower_triangle

    lower = lower_triangle(laplacian(60, 2))
    monkeypatch.setattr(tuner, "PROXY_FLOPS", 1e5)
    patch = tuner.proxy(lower, flops=1e7)
    assert 1000 <= patch.shape[0] < lower.shape[0]
    F = cholesky(patch, uplo="lower")
    assert F.nnz > 0
