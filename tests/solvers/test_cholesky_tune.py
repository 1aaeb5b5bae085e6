"""The auto-tuner: searches, stores per machine and matrix class, reuses,
survives a damaged cache file, and re-checks a cached choice that runs slow."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest
from conftest import laplacian, relative_residual

from msc.solvers import Amalgamation, QueueParams, cholesky
from msc.solvers import tune as tuner

# 1 baseline + 3 other amalgamations + (3 + 2 + 1 + 2) queue values off the defaults
EXPECTED_TRIALS = 1 + (len(tuner.AMALGAMATIONS) - 1) + sum(len(v) - 1 for v in tuner.QUEUE_CHOICES.values())


@pytest.fixture
def cache(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuner, "REPEATS", 1)
    return tmp_path


def test_tune_stores_and_reuses(cache) -> None:  # type: ignore[no-untyped-def]
    A = laplacian(40, 2)
    first = tuner.tune(A)
    assert not first.from_cache and first.trials == EXPECTED_TRIALS == len(first.history)
    # every trial is a distinct configuration, the first one the defaults
    configs = [(a, q) for a, q, _ in first.history]
    assert len(set(configs)) == len(configs)
    assert configs[0] == (Amalgamation(), QueueParams())
    times = [t for _, _, t in first.history]
    assert first.baseline_seconds == times[0]
    # the kept choice is the fastest trial, and the reported gain is its ratio to the defaults
    k = int(np.argmin(times))
    assert (first.amalgamation, first.queues) == configs[k]
    assert first.best_seconds == times[k]
    assert first.gain == pytest.approx(times[0] / times[k])
    stored = json.loads(tuner.cache_path().read_text())
    (machine, classes), = stored.items()
    assert first.matrix_class in classes
    again = tuner.tune(A)
    assert again.from_cache and again.queues == first.queues and again.amalgamation == first.amalgamation
    assert again.best_seconds == first.best_seconds and again.history == []
    F = cholesky(A, tune=True)
    assert F.stats["tuning"]["from_cache"] and F.stats["queues"] == first.queues.as_dict()
    b = np.ones(A.shape[0])
    assert relative_residual(A, F.solve(b), b) < 1e-11


def test_tuner_keeps_the_fastest_configuration(cache, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """With made-up timings, coordinate descent must land on the fastest one."""
    fast_amal = tuner.AMALGAMATIONS[2]

    def fake(lower, ordering, amal, queues, threads):  # type: ignore[no-untyped-def]
        t = 1.0
        t *= 0.5 if amal == fast_amal else 1.0
        t *= 0.8 if queues.inst_max == 16 else 1.0
        t *= 0.9 if queues.diag_small == 32 else 1.0
        return t, 1e6

    monkeypatch.setattr(tuner, "_measure", fake)
    result = tuner.tune(laplacian(20, 2))
    assert result.amalgamation == fast_amal
    assert result.queues == QueueParams(inst_max=16, diag_small=32)
    assert result.best_seconds == pytest.approx(0.5 * 0.8 * 0.9)
    assert result.gain == pytest.approx(1 / (0.5 * 0.8 * 0.9))


def test_measure_takes_the_median(cache, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from msc.solvers.cholesky import Symbolic

    runs = iter([5.0, 0.1, 0.2, 9.0])
    original = Symbolic.factorize_lower

    def timed(self, lower, queues=None):  # type: ignore[no-untyped-def]
        F = original(self, lower, queues)
        F.timings["numeric"] = next(runs)
        return F

    monkeypatch.setattr(Symbolic, "factorize_lower", timed)
    monkeypatch.setattr(tuner, "REPEATS", 3)
    from msc.solvers.matrix import lower_triangle

    seconds, flops = tuner._measure(lower_triangle(laplacian(10, 2)), "amd", Amalgamation(), QueueParams(), 1)
    assert seconds == statistics.median([5.0, 0.1, 0.2]) == 0.2
    assert flops > 0


def test_tune_runs_on_a_miss_through_cholesky(cache) -> None:  # type: ignore[no-untyped-def]
    A = laplacian(9, 3)
    F = cholesky(A, tune=True)
    report = F.stats["tuning"]
    assert not report["from_cache"] and report["trials"] == EXPECTED_TRIALS
    assert json.loads(tuner.cache_path().read_text())  # stored
    b = np.ones(A.shape[0])
    assert relative_residual(A, F.solve(b), b) < 1e-11


@pytest.mark.parametrize("damage", ["truncated", "not a mapping", "bad entry", "missing field"])
def test_damaged_cache_is_rebuilt_with_one_warning(cache, damage: str) -> None:  # type: ignore[no-untyped-def]
    A = laplacian(12, 2)
    first = tuner.tune(A)
    path = tuner.cache_path()
    text = path.read_text()
    data = json.loads(text)
    (machine, classes), = data.items()
    if damage == "truncated":
        path.write_text(text[: len(text) // 2])
    elif damage == "not a mapping":
        path.write_text("[1, 2, 3]")
    elif damage == "bad entry":
        classes[first.matrix_class]["queues"]["inst_max"] = "big"
        path.write_text(json.dumps(data))
    else:
        del classes[first.matrix_class]["best_seconds"]
        path.write_text(json.dumps(data))
    with pytest.warns(RuntimeWarning, match="rebuil") as caught:
        again = tuner.tune(A)
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == 1
    assert not again.from_cache  # re-tuned
    rebuilt = json.loads(path.read_text())
    assert tuner._from_cache(rebuilt[machine][first.matrix_class], first.matrix_class).from_cache
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuner.tune(A).from_cache  # the rebuilt file reads back silently


def test_slow_cached_choice_is_rechecked(cache, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A cache entry promising an impossible time makes cholesky() measure
    again; the slowness is confirmed, so the entry is re-tuned and rewritten."""
    monkeypatch.setattr(tuner, "RECHECK_MIN_SECONDS", 0.0)
    A = laplacian(15, 2)
    first = tuner.tune(A)
    path = tuner.cache_path()
    data = json.loads(path.read_text())
    (machine, classes), = data.items()
    classes[first.matrix_class]["best_seconds"] = 1e-15
    path.write_text(json.dumps(data))
    F = cholesky(A, tune=True)
    report = F.stats["tuning"]
    assert report["rechecked"] and not report["from_cache"]
    stored = json.loads(path.read_text())[machine][first.matrix_class]
    assert stored["best_seconds"] > 1e-15
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
