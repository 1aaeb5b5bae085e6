"""The reference interpreter against hand-written numpy, so the ground truth
itself is checked, plus the semantics every backend shares."""

from __future__ import annotations

import numpy as np
import pytest

import msc
from msc import t, x, y, z


@msc.stencil
def heat(u, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y])


@msc.stencil
def wave(u, c2):
    u[t + 1, x] = 2 * u[t, x] - u[t - 1, x] + c2 * (u[t, x - 1] - 2 * u[t, x] + u[t, x + 1])


@msc.stencil(boundary="periodic")
def advect(u, nu):
    u[t + 1, x] = u[t, x] - nu * (u[t, x] - u[t, x - 1])


@msc.stencil
def coupled(u, v, k):
    v[t + 1, x, y, z] = k * (u[t, x + 1, y, z] - u[t, x - 1, y, z])
    u[t + 1, x, y, z] = u[t, x, y, z] + 0.5 * (v[t + 1, x, y, z] + v[t + 1, x, y, z + 1])


def _heat_numpy(u, alpha, steps):
    u = u.copy()
    for _ in range(steps):
        new = u.copy()
        new[1:-1, 1:-1] = u[1:-1, 1:-1] + alpha * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1])
        u = new
    return u


def test_heat_matches_handwritten_numpy():
    u0 = np.random.default_rng(1).random((20, 30))
    out = heat.reference(steps=7, u=u0, alpha=0.2)["u"]
    np.testing.assert_allclose(out, _heat_numpy(u0, 0.2, 7), rtol=0, atol=1e-15)


def test_a_blow_up_warns_as_run_does_and_numpy_stays_quiet():
    u0 = np.random.default_rng(2).random((12, 12))
    with pytest.warns(msc.NonFiniteWarning, match="field 'u' is no longer finite") as caught:
        out = heat.reference(steps=400, u=u0, alpha=10.0)["u"]
    assert not np.isfinite(out).all()
    assert all(issubclass(w.category, msc.NonFiniteWarning) for w in caught)  # no RuntimeWarning from numpy


@msc.stencil
def counted(u, c):
    u[t + 1, x] = (-(u[t, x] > c[x]) + u[t, x] + (u[t, x - 1] > 0.5) + (u[t, x + 1] > 0.5) - (u[t, x] < 0.2)
                   + msc.sqrt(u[t, x] > 0.3))


def test_comparisons_count_as_one_or_zero_in_arithmetic_as_in_c(assert_matches):
    """-(a > b) raised numpy's TypeError, and (a > b) + (c > d) was True, not 2, in the reference."""
    u, c = np.random.default_rng(5).random(14), np.full(14, 0.5)
    expected = counted.reference(steps=3, u=u, c=c)
    by_hand = u.copy()
    for _ in range(3):
        v = by_hand
        inner = (-(v[1:-1] > 0.5).astype(float) + v[1:-1] + (v[:-2] > 0.5) + (v[2:] > 0.5) - (v[1:-1] < 0.2)
                 + np.sqrt((v[1:-1] > 0.3).astype(float)))
        by_hand = np.concatenate([v[:1], inner, v[-1:]])
    np.testing.assert_allclose(expected["u"], by_hand, rtol=0, atol=1e-15)
    assert_matches(counted.compile(threads=1).run(steps=3, u=u, c=c), expected)


def test_wave_uses_two_levels_oldest_first():
    rng = np.random.default_rng(2)
    older, old = rng.random(16), rng.random(16)
    out = wave.reference(steps=3, u=[older, old], c2=0.3)["u"]
    a, b = older.copy(), old.copy()
    a[[0, -1]] = b[[0, -1]]  # the fixed ring comes from the newest level
    for _ in range(3):
        new = b.copy()
        new[1:-1] = 2 * b[1:-1] - a[1:-1] + 0.3 * (b[:-2] - 2 * b[1:-1] + b[2:])
        a, b = b, new
    np.testing.assert_allclose(out, b, rtol=0, atol=1e-15)


def test_periodic_wraps_around():
    u0 = np.random.default_rng(3).random(11)
    out = advect.reference(steps=4, u=u0, nu=0.4)["u"]
    u = u0.copy()
    for _ in range(4):
        u = u - 0.4 * (u - np.roll(u, 1))
    np.testing.assert_allclose(out, u, rtol=0, atol=1e-15)


def test_later_statement_reads_new_level_of_earlier_one():
    rng = np.random.default_rng(4)
    u0, v0 = rng.random((6, 7, 8)), rng.random((6, 7, 8))
    out = coupled.reference(steps=1, u=u0, v=v0, k=0.7)
    assert coupled.ir.radius == (1, 0, 1)  # the ring is as wide as the reads in each dimension
    v = v0.copy()
    v[1:-1, :, 1:-1] = 0.7 * (u0[2:, :, 1:-1] - u0[:-2, :, 1:-1])
    u = u0.copy()
    u[1:-1, :, 1:-1] = u0[1:-1, :, 1:-1] + 0.5 * (v[1:-1, :, 1:-1] + v[1:-1, :, 2:])
    np.testing.assert_allclose(out["v"], v, rtol=0, atol=1e-15)
    np.testing.assert_allclose(out["u"], u, rtol=0, atol=1e-15)


def test_zero_steps_returns_the_input_newest_level():
    u0 = np.random.default_rng(5).random((8, 8))
    np.testing.assert_array_equal(heat.reference(steps=0, u=u0, alpha=0.1)["u"], u0)


@pytest.mark.parametrize("runner", ["reference", "openmp"])
def test_callers_arrays_are_never_modified(runner):
    rng = np.random.default_rng(6)
    older, old = rng.random(16), rng.random(16)
    saved = older.copy(), old.copy()
    if runner == "reference":
        wave.reference(steps=3, u=[older, old], c2=0.3)
    else:
        wave.compile().run(steps=3, u=[older, old], c2=0.3)
    np.testing.assert_array_equal(older, saved[0])
    np.testing.assert_array_equal(old, saved[1])


def test_float32_stays_float32():
    u0 = np.random.default_rng(7).random((12, 12)).astype(np.float32)
    out = heat.reference(steps=2, dtype="float32", u=u0, alpha=0.1)["u"]
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, _heat_numpy(u0.astype(np.float64), 0.1, 2), rtol=1e-6)


def test_math_functions_and_where():
    @msc.stencil
    def mix(u):
        u[t + 1, x] = msc.where(u[t, x] > 0.5, msc.sqrt(u[t, x]) + msc.exp(-u[t, x - 1]),
                                msc.maximum(msc.abs(msc.sin(u[t, x + 1])), msc.cos(u[t, x]) ** 2) + msc.log(1 + u[t, x]))

    u0 = np.random.default_rng(8).random(30)
    out = mix.reference(steps=1, u=u0)["u"]
    c, l, r = u0[1:-1], u0[:-2], u0[2:]
    want = np.where(c > 0.5, np.sqrt(c) + np.exp(-l), np.maximum(np.abs(np.sin(r)), np.cos(c) ** 2) + np.log(1 + c))
    np.testing.assert_allclose(out[1:-1], want, rtol=1e-15)
    np.testing.assert_allclose(mix.compile().run(steps=1, u=u0)["u"], out, rtol=1e-13)


def test_python_loops_unroll():
    c = [0.1, 0.2, 0.4, 0.2, 0.1]

    @msc.stencil
    def smooth(u):
        u[t + 1, x] = sum(c[k + 2] * u[t, x + k] for k in range(-2, 3))

    assert smooth.ir.radius == (2,)
    u0 = np.random.default_rng(9).random(20)
    want = sum(c[k + 2] * u0[2 + k : 18 + k] for k in range(-2, 3))
    np.testing.assert_allclose(smooth.reference(steps=1, u=u0)["u"][2:-2], want, rtol=1e-15)


def test_user_names_never_clash_with_generated_c():
    """Fields and parameters named like C keywords or the kernel's own variables."""

    def body(c2, T, V, double):
        c2[t + 1, x, y] = c2[t, x, y] + V * (c2[t, x + 1, y] - c2[t, x - 1, y]) * T[x, y] + double

    st = msc.stencil(body)
    rng = np.random.default_rng(10)
    args = dict(c2=rng.random((9, 9)), T=rng.random((9, 9)), V=0.3, double=0.01)
    np.testing.assert_allclose(st.compile().run(steps=3, **args)["c2"], st.reference(steps=3, **args)["c2"], rtol=1e-13)


@msc.stencil
def leapfrog_x(u):  # radius 0 in y: no ring along y, and an older level is read
    u[t + 1, x, y] = u[t - 1, x, y] + 0.25 * (u[t, x + 1, y] - u[t, x - 1, y])


def test_older_levels_keep_their_values_where_there_is_no_ring():
    """The ring (width 1 in x, 0 in y) is taken from the newest level; the rest
    of an older level is the caller's, including the columns at the y edges."""
    rng = np.random.default_rng(9)
    older, newer = rng.random((8, 6)), rng.random((8, 6))
    out = leapfrog_x.reference(steps=3, u=[older, newer])["u"]
    prev, cur = older.copy(), newer.copy()
    prev[[0, -1], :] = newer[[0, -1], :]
    for _ in range(3):
        nxt = cur.copy()
        nxt[1:-1, :] = prev[1:-1, :] + 0.25 * (cur[2:, :] - cur[:-2, :])
        prev, cur = cur, nxt
    np.testing.assert_allclose(out, cur, rtol=0, atol=1e-15)
    assert np.array_equal(leapfrog_x.compile().run(steps=3, u=[older, newer])["u"], out)
