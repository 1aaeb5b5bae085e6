"""The finiteness check after each run and advance (msc/runtime/finite.py): the OpenMP
library and numpy must agree on every kind of array the runtime hands it."""

from __future__ import annotations

import numpy as np
import pytest

from msc.runtime import finite
from msc.runtime.buffers import aligned_empty


def test_the_library_builds() -> None:
    # without it every check silently falls back to numpy's slower one
    assert finite._library() is not None


def _arrays(dtype: str) -> list[tuple[str, np.ndarray]]:
    """Large arrays (the library's path) laid out as the runtime's levels and views are."""
    padded = aligned_empty((42, 46, 50), dtype)
    padded[...] = 1.0
    plane = aligned_empty((300, 310), dtype)
    plane[...] = 2.0
    return [
        ("3d", padded),
        ("3d interior view", padded[1:-1, 2:-2, 3:-3]),
        ("2d", plane),
        ("2d interior view", plane[1:-1, 1:-1]),
        ("1d", aligned_empty((finite.LARGE + 7,), dtype)),
        ("transposed (numpy's path)", plane.T),
    ]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_one_value_that_is_not_finite_is_found(dtype: str, bad: float, where: str) -> None:
    for name, a in _arrays(dtype):
        a[...] = 0.5
        assert a.size >= finite.LARGE, name
        assert finite.all_finite(a), name
        index = {"first": 0, "middle": a.size // 2 + 3, "last": a.size - 1}[where]
        a[np.unravel_index(index, a.shape)] = bad
        for threads in (0, 1, 2):
            assert not finite.all_finite(a, threads), (name, threads)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_largest_finite_values_are_finite(dtype: str) -> None:
    big = np.finfo(dtype).max
    for name, a in _arrays(dtype):
        a[...] = big
        a.flat[::7] = -big
        assert finite.all_finite(a, 2), name


def test_a_view_ignores_what_lies_outside_it() -> None:
    a = aligned_empty((40, 50, 60), "float64")
    a[...] = np.nan
    a[1:-1, 1:-1, 1:-1] = 3.0
    assert finite.all_finite(a[1:-1, 1:-1, 1:-1], 2)
    assert finite.not_finite({"u": a[1:-1, 1:-1, 1:-1], "v": a}, 2) == ["v"]


def test_small_and_integer_arrays_are_checked_by_numpy() -> None:
    assert not finite.all_finite(np.array([1.0, np.inf]))
    assert finite.all_finite(np.arange(finite.LARGE * 2))
