"""The math functions of the language (tanh, floor, atan2 among them) on every
target against numpy written by hand, and numpy's own functions on a traced
value refused with msc's name for them."""

from __future__ import annotations

import numpy as np
import pytest

import msc
from msc import t, x, y
from msc.textual import parse_stencil


@msc.stencil
def shaped(u, w, a):
    u[t + 1, x, y] = (msc.tanh(u[t, x - 1, y] - u[t, x + 1, y]) + 0.25 * msc.floor(3 * u[t, x, y] + a)
                      + 0.1 * msc.atan2(u[t, x, y + 1] - 0.5, w[x, y]))


def by_hand(u: np.ndarray, w: np.ndarray, a: float, steps: int) -> np.ndarray:
    u = u.copy()
    for _ in range(steps):
        c = u[1:-1, 1:-1]
        new = (np.tanh(u[:-2, 1:-1] - u[2:, 1:-1]) + 0.25 * np.floor(3 * c + a)
               + 0.1 * np.arctan2(u[1:-1, 2:] - 0.5, w[1:-1, 1:-1]))
        u[1:-1, 1:-1] = new
    return u


def inputs(dtype: str = "float64") -> dict:
    rng = np.random.default_rng(3)
    return {"u": rng.random((10, 37)).astype(dtype), "w": (rng.random((10, 37)) - 0.5).astype(dtype), "a": 0.5}


def test_reference_matches_numpy_by_hand():
    data = inputs()
    out = shaped.reference(steps=3, **data)["u"]
    np.testing.assert_allclose(out, by_hand(data["u"], data["w"], 0.5, 3), rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("target,options,dtype", [
    ("openmp", {}, "float64"), ("openmp", {}, "float32"),  # float32 names (tanhf, ...) are printed alike everywhere
    ("serial", {}, "float64"), ("cuda", {"emulate": True}, "float64"), ("athread", {}, "float64")])
def test_every_target_matches_the_reference(target, options, dtype, assert_matches):
    expected = shaped.reference(steps=3, dtype=dtype, **inputs(dtype))
    kernel = shaped.compile(target=target, dtype=dtype, **options)
    assert_matches(kernel.run(steps=3, **inputs(dtype)), expected, dtype, target)


@msc.stencil
def clipped(u):
    u[t + 1, x, y] = msc.minimum(u[t, x, y], 0.5) + msc.maximum(0.25, u[t, x - 1, y]) - msc.minimum(0.5, u[t, x + 1, y])


@pytest.mark.parametrize("target,options,dtype", [
    ("openmp", {}, "float64"), ("openmp", {}, "float32"), ("serial", {}, "float64"),
    ("cuda", {"emulate": True}, "float64"), ("athread", {}, "float64")])
def test_minimum_and_maximum_pass_nan_on_as_numpy_does_whichever_side_it_is(target, options, dtype):
    """C's `a < b ? a : b` gave 0.5 for minimum(nan, 0.5) and nan for minimum(0.5, nan); numpy gives nan."""
    u = np.random.default_rng(4).random((6, 9)).astype(dtype)
    u[2, 3] = u[4, 5] = np.nan
    with pytest.warns(msc.NonFiniteWarning):
        expected = clipped.reference(steps=1, dtype=dtype, u=u)["u"]
    with pytest.warns(msc.NonFiniteWarning):
        got = clipped.compile(target=target, dtype=dtype, **options).run(steps=1, u=u)["u"]
    assert np.array_equal(np.isnan(got), np.isnan(expected)) and np.isnan(expected).sum() == 5
    np.testing.assert_allclose(got, expected, rtol=1e-6, equal_nan=True)


@msc.stencil
def rooted(u):
    u[t + 1, x] = u[t, x] ** 0.5 + u[t, x - 1] ** 1.5


def test_a_square_root_by_power_matches_numpy_at_minus_infinity(assert_matches):
    """C's pow(-inf, 0.5) is +inf; numpy takes sqrt for ** 0.5 and gives nan."""
    u = np.array([4.0, -np.inf, 9.0, 1.0, 0.25, 2.0])
    with pytest.warns(msc.NonFiniteWarning):
        expected = rooted.reference(steps=1, u=u)["u"]
    with pytest.warns(msc.NonFiniteWarning):
        got = rooted.compile(threads=1).run(steps=1, u=u)["u"]
    np.testing.assert_array_equal(got[:3], expected[:3])  # the ring, nan, inf
    np.testing.assert_allclose(got, expected, rtol=1e-14)


def test_the_text_language_knows_them():
    text = """stencil shaped {
      field u[x, y];
      input w[x, y];
      param a;
      u[t+1, x, y] = tanh(u[t, x-1, y] - u[t, x+1, y]) + 0.25 * floor(3 * u[t, x, y] + a)
                     + 0.1 * atan2(u[t, x, y+1] - 0.5, w[x, y]);
    }"""
    assert parse_stencil(text, "shaped.msc").statements[0].expr == shaped.ir.statements[0].expr


def test_numpy_numbers_still_multiply_field_reads():
    weights = np.array([0.25, 0.5])

    @msc.stencil
    def weighted(u):
        u[t + 1, x] = weights[0] * u[t, x - 1] + u[t, x + 1] * np.float32(0.5) - np.float64(0.25) * u[t, x]

    data = np.random.default_rng(4).random(12)
    out = weighted.reference(steps=1, u=data)["u"]
    np.testing.assert_allclose(out[1:-1], 0.25 * data[:-2] + 0.5 * data[2:] - 0.25 * data[1:-1], rtol=1e-15)


@pytest.mark.parametrize("call,advice", [
    (lambda v: np.sin(v), "np.sin cannot take a traced value.*use msc.sin"),
    (lambda v: np.abs(v), "np.absolute cannot take a traced value.*use msc.abs"),
    (lambda v: np.arctan2(v, 1.0), "np.arctan2 cannot take a traced value.*use msc.atan2"),
    (lambda v: np.arcsinh(v), "np.arcsinh cannot take a traced value.*msc's functions are sqrt, exp, .*, where"),
    (lambda v: np.fmin(v, 0.5), r"np.fmin cannot take .*use msc.minimum \(which gives NaN where either side is NaN"),
])
def test_numpy_functions_on_traced_values_name_msc_s(call, advice):
    with pytest.raises(msc.StencilDefinitionError, match=rf"test_math_functions.py:\d+: in stencil 'bad': {advice}"):
        @msc.stencil
        def bad(u):
            u[t + 1, x] = call(u[t, x])
