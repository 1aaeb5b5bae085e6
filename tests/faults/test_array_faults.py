"""Unusual arrays given to `reference` and `run`: NaN/Inf-laden, Fortran-ordered,
non-contiguous, read-only and byte-swapped arrays give the correct result;
other dtypes and problems larger than the machine's memory give a named error
whose advice works."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import diffuse, heat

from msc.errors import NonFiniteWarning, StencilArgumentError


@pytest.fixture(scope="module")
def kernel():
    return heat.compile(threads=2)


def _u() -> np.ndarray:
    return np.random.default_rng(5).random((20, 23))


def _special(u: np.ndarray) -> np.ndarray:
    u = u.copy()
    u[5, 5], u[10, 12], u[15, 3] = np.nan, np.inf, -np.inf
    return u


VARIANTS = {
    "nan-inf": _special,
    "fortran": np.asfortranarray,
    "strided": lambda u: np.repeat(u, 2, axis=1)[:, ::2],
    "transposed-view": lambda u: np.ascontiguousarray(u.T).T,
    "read-only": lambda u: (lambda a: (a.setflags(write=False), a)[1])(u.copy()),
    "big-endian": lambda u: u.astype(">f8"),
}


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf - inf in the reference
@pytest.mark.filterwarnings("ignore::msc.errors.NonFiniteWarning")  # NaN and inf given on purpose
@pytest.mark.parametrize("variant", VARIANTS)
def test_unusual_layouts_give_the_reference_result(kernel, variant):
    plain = _u() if variant != "nan-inf" else _special(_u())
    given = VARIANTS[variant](_u())
    before = given.copy()
    expected = heat.reference(steps=6, u=plain, alpha=0.1)["u"]
    for result in (heat.reference(steps=6, u=given, alpha=0.1)["u"], kernel.run(steps=6, u=given, alpha=0.1)["u"]):
        assert result.dtype == np.float64 and result.flags.c_contiguous
        np.testing.assert_allclose(result, expected, rtol=1e-12, equal_nan=True)
    np.testing.assert_array_equal(given, before)  # the caller's array is untouched


def test_nan_spreads_as_in_the_reference(kernel):
    u = np.zeros((12, 12))
    u[6, 6] = np.nan
    given = r"field 'u' is not finite \(NaN or inf in float64\) before step 0 runs, as given"
    with pytest.warns(NonFiniteWarning, match=given):
        out = kernel.run(steps=2, u=u, alpha=0.1)["u"]
    with pytest.warns(NonFiniteWarning, match=given):  # the reference says so too
        expected = heat.reference(steps=2, u=u, alpha=0.1)["u"]
    assert np.array_equal(np.isnan(out), np.isnan(expected))
    assert np.isnan(out).sum() == 13  # the diamond of radius 2


@pytest.mark.parametrize("dtype", ["int64", "int32", ">i8", "float16", "bool"])
def test_other_dtypes_get_advice_that_works(kernel, dtype):
    u = _u().astype(dtype)
    with pytest.raises(StencilArgumentError) as info:
        kernel.run(steps=2, u=u, alpha=0.1)
    message = str(info.value)
    assert "'u' has dtype" in message and "a.astype(np.float64)" in message
    assert "float64 or float32" in message
    assert f"dtype='{dtype}'" not in message and f"dtype='{np.dtype(dtype).name}'" not in message
    kernel.run(steps=2, u=u.astype(np.float64), alpha=0.1)  # the advice works


def test_float32_array_suggests_running_in_float32(kernel):
    u = _u().astype(np.float32)
    with pytest.raises(StencilArgumentError, match=r"or run the stencil in float32 \(dtype='float32'\)"):
        kernel.run(steps=2, u=u, alpha=0.1)
    assert heat.reference(steps=2, dtype="float32", u=u, alpha=0.1)["u"].dtype == np.float32


@pytest.mark.parametrize("dtype", ["float16", "int64", ">f8", "float128", "not a dtype"])
def test_unsupported_compile_dtype_is_an_msc_error(dtype):
    for call in (lambda: heat.compile(dtype=dtype), lambda: heat.emit("openmp", "never", dtype=dtype),
                 lambda: heat.reference(steps=1, dtype=dtype, u=_u(), alpha=0.1)):
        with pytest.raises(StencilArgumentError, match=f"stencil 'heat': dtype must be one of float64, float32, "
                                                       f"got '{dtype}'"):
            call()


@pytest.mark.parametrize("dtype", [np.float32, np.dtype("float32"), "f4"])
def test_compile_dtype_may_be_a_numpy_dtype(dtype):
    u = _u().astype(np.float32)
    got = heat.compile(dtype=dtype).run(steps=2, u=u, alpha=0.1)["u"]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, heat.reference(steps=2, dtype="float32", u=u, alpha=0.1)["u"], rtol=1e-6)


def test_shape_larger_than_memory_is_refused_before_allocation(kernel):
    huge = np.broadcast_to(np.float64(0.0), (200_000, 200_000))  # a view: no memory behind it
    for call in (lambda: kernel.run(steps=1, u=huge, alpha=0.1), lambda: heat.reference(steps=1, u=huge, alpha=0.1),
                 lambda: diffuse.reference(steps=1, u=huge, c=huge)):
        with pytest.raises(StencilArgumentError, match=r"arrays of shape \(200000, 200000\) need .* GiB of buffers "
                                                       r".*more than this machine's .* GiB of memory"):
            call()
