"""Shared test set-up: a private kernel cache per test session, and helpers."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

# every test session builds its kernels from scratch, in a private cache
os.environ.setdefault("MSC_CACHE_DIR", tempfile.mkdtemp(prefix="msc-test-cache-"))


def max_rel_error(a: np.ndarray, b: np.ndarray) -> float:
    scale = max(float(np.max(np.abs(b), initial=0.0)), 1e-300)
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0)) / scale


TOLERANCE = {"float64": 1e-12, "float32": 1e-5}


@pytest.fixture
def assert_matches():
    def check(result: dict, expected: dict, dtype: str = "float64", context: object = "") -> None:
        assert result.keys() == expected.keys(), context
        for name in expected:
            assert result[name].shape == expected[name].shape, (name, context)
            assert result[name].dtype == expected[name].dtype, (name, context)
            err = max_rel_error(result[name], expected[name])
            assert err <= TOLERANCE[dtype], f"{name}: relative error {err:.3e} for {context}"

    return check


@pytest.fixture(scope="module")
def without_counters():
    """For a module that checks results only: its emulated CUDA/HIP libraries are built
    without the memory counters (cuda_emu.COUNTERS_SWITCH), whose runs take 6-11x as long."""
    from msc.runtime import cuda_emu

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cuda_emu.COUNTERS_SWITCH, "0")
        yield
