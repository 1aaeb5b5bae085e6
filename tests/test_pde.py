"""The PDE layer: operator matrices against hand-assembled ones and the reference
interpreter, non-linear errors, convergence orders, implicit steps against a
scipy stepper, explicit kernels compiled against the reference."""

from __future__ import annotations

import inspect
import itertools
import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import msc
from msc import ir, x, y, z
from msc.ir.linear import linear_form

SYMS = (x, y, z)


def at(f, off):
    return f[tuple(s + o for s, o in zip(SYMS, off))]


def tridiag(n: int, h: float = 1.0) -> sp.csr_array:
    return sp.diags_array([np.ones(n - 1), -2 * np.ones(n), np.ones(n - 1)], offsets=[-1, 0, 1]).tocsr() / h**2


def kron_laplacian(ns: tuple[int, ...], h: float = 1.0) -> sp.csr_array:
    A = None
    for d in range(len(ns)):
        parts = [tridiag(n, h) if e == d else sp.identity(n) for e, n in enumerate(ns)]
        term = parts[0]
        for p in parts[1:]:
            term = sp.kron(term, p)
        A = term if A is None else A + term
    return sp.csr_array(A)


def assert_same_matrix(A, B, tol=1e-12):
    assert isinstance(A, sp.csr_array)
    assert A.shape == B.shape
    diff = abs(A - B)
    assert diff.nnz == 0 or diff.max() <= tol * max(1.0, abs(B).max())


def assert_ring_kept(out: np.ndarray, given: np.ndarray, width: int = 1) -> None:
    """Every point of the ring (all sides, corners included) is the one given."""
    ring = np.ones(given.shape, dtype=bool)
    ring[(slice(width, -width),) * given.ndim] = False
    np.testing.assert_array_equal(out[ring], given[ring])


@msc.operator
def lap5(u, h):
    return (u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y]) / h**2


@msc.operator
def lap9(u):
    s = 0
    for i in (-1, 0, 1):
        for j in (-1, 0, 1):
            s = s + (-8 if i == j == 0 else 1) * u[x + i, y + j]
    return s


@msc.operator
def lap7(u):
    return (u[x - 1, y, z] + u[x + 1, y, z] + u[x, y - 1, z] + u[x, y + 1, z]
            + u[x, y, z - 1] + u[x, y, z + 1] - 6 * u[x, y, z])


@msc.operator
def divkgrad(u, k):
    kxp = 0.5 * (k[x, y] + k[x + 1, y])
    kxm = 0.5 * (k[x, y] + k[x - 1, y])
    kyp = 0.5 * (k[x, y] + k[x, y + 1])
    kym = 0.5 * (k[x, y] + k[x, y - 1])
    return kxp * (u[x + 1, y] - u[x, y]) - kxm * (u[x, y] - u[x - 1, y]) \
        + kyp * (u[x, y + 1] - u[x, y]) - kym * (u[x, y] - u[x, y - 1])


@msc.operator(boundary="periodic")
def periodic_lap(u, c):
    return c * (u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y])


@msc.operator
def coupled(u, v, a):
    return {u: u[x - 1, y] + u[x + 1, y] - 2 * u[x, y] + a * v[x, y],
            v: v[x, y - 1] + v[x, y + 1] - 2 * v[x, y] - a * u[x, y] + 1.0}


def test_five_point_laplacian_matches_kron():
    h = 0.1
    A, g = lap5.matrix(shape=(9, 7), h=h)
    assert_same_matrix(A, kron_laplacian((7, 5), h))
    assert np.all(g == 0)


def test_nine_point_laplacian_matches_hand_assembly():
    n, m = 6, 5
    T = sp.diags_array([np.ones(n - 1), np.ones(n), np.ones(n - 1)], offsets=[-1, 0, 1])
    S = sp.diags_array([np.ones(m - 1), np.ones(m), np.ones(m - 1)], offsets=[-1, 0, 1])
    B = sp.kron(T, S) - 9 * sp.identity(n * m)
    A, _ = lap9.matrix(shape=(n + 2, m + 2))
    assert_same_matrix(A, B)


def test_seven_point_3d_laplacian_matches_kron():
    A, _ = lap7.matrix(shape=(6, 5, 7))
    assert_same_matrix(A, kron_laplacian((4, 3, 5)))


def test_variable_coefficient_matches_hand_assembly():
    rng = np.random.default_rng(1)
    shape = (7, 6)
    k = 1 + rng.random(shape)
    A, g = divkgrad.matrix(shape=shape, k=k)
    n, m = shape[0] - 2, shape[1] - 2
    B = sp.lil_array((n * m, n * m))
    for i, j in itertools.product(range(n), range(m)):
        row = i * m + j
        for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            kf = 0.5 * (k[i + 1, j + 1] + k[i + 1 + di, j + 1 + dj])
            B[row, row] -= kf
            ii, jj = i + di, j + dj
            if 0 <= ii < n and 0 <= jj < m:
                B[row, ii * m + jj] += kf
    assert_same_matrix(A, B.tocsr())
    assert np.all(g == 0)


def test_periodic_operator_wraps():
    n, m = 5, 4
    A, _ = periodic_lap.matrix(shape=(n, m), c=2.0)
    def ring(k):
        return sp.diags_array([np.ones(k - 1), -2 * np.ones(k), np.ones(k - 1), [1.0], [1.0]],
                              offsets=[-1, 0, 1, k - 1, -(k - 1)])
    B = 2.0 * (sp.kron(ring(n), sp.identity(m)) + sp.kron(sp.identity(n), ring(m)))
    assert_same_matrix(A, B)


def test_two_field_system_is_a_block_matrix():
    n, m, a = 4, 3, 0.7
    A, g = coupled.matrix(shape=(n + 2, m + 2), a=a)
    Ix, Iy = sp.identity(n), sp.identity(m)
    Luu = sp.kron(tridiag(n), Iy)
    Lvv = sp.kron(Ix, tridiag(m))
    B = sp.block_array([[Luu, a * sp.identity(n * m)], [-a * sp.identity(n * m), Lvv]])
    assert_same_matrix(A, B)
    assert np.all(g[: n * m] == 0) and np.all(g[n * m:] == 1.0)


def test_ring_values_go_into_g():
    rng = np.random.default_rng(2)
    u = rng.random((6, 5))
    A, g = lap5.matrix(shape=u.shape, h=0.5, u=u)
    ref = lap5.apply(u=u, h=0.5)["u"]
    np.testing.assert_allclose(A @ u[1:-1, 1:-1].ravel() + g, ref.ravel(), rtol=1e-12, atol=1e-12)
    assert np.abs(g).max() > 0


def _random_operator(rng: np.random.Generator, ndim: int, radius: int, periodic: bool):
    """A linear operator with random offsets (up to `radius`), scalar and field coefficients."""
    offsets = {tuple(rng.integers(-radius, radius + 1, ndim)) for _ in range(6)}
    offsets.add(tuple([radius] + [0] * (ndim - 1)))
    terms = [(off, float(rng.normal()), rng.integers(3)) for off in sorted(offsets)]
    koff = tuple(rng.integers(-radius, radius + 1, ndim))

    def gen(u, k, a):
        e = 0.25 * k[SYMS[:ndim]] + 1.5
        for off, c, kind in terms:
            if kind == 0:
                e = e + c * at(u, off)
            elif kind == 1:
                e = e - a * c * at(u, off) / 2
            else:
                e = e + at(k, koff) * at(u, off) * c
        return e

    return msc.operator(gen, boundary="periodic" if periodic else "dirichlet")


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("radius", [1, 2, 3, 4])
def test_generated_linear_operators_match_reference(ndim, radius):
    rng = np.random.default_rng(100 * ndim + radius)
    for periodic in (False, True):
        L = _random_operator(rng, ndim, radius, periodic)
        base = {1: 11, 2: 7, 3: 4}[ndim]
        shape = tuple(base + (0 if periodic else 2 * r) + d for d, r in enumerate(L.radius))
        u, k = rng.normal(size=shape), rng.normal(size=shape)
        A, g = L.matrix(shape=shape, u=u, k=k, a=0.3)
        inner = tuple(slice(None) if periodic else slice(r, n - r) for r, n in zip(L.radius, shape))
        ref = L.apply(u=u, k=k, a=0.3)["u"]
        np.testing.assert_allclose(A @ u[inner].ravel() + g, ref.ravel(), rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("dtype", ["float32", np.float32])
def test_float32_matrix(dtype):
    A, _ = lap5.matrix(shape=(6, 6), dtype=dtype, h=1.0)
    assert A.dtype == np.float32


def test_nonlinear_term_is_named_with_its_line():
    @msc.operator
    def burgers(u, nu):
        diffusion = nu * (u[x - 1] - 2 * u[x] + u[x + 1])
        advection = u[x] * (u[x + 1] - u[x - 1])
        return diffusion - advection

    src, first = inspect.getsourcelines(burgers.func)
    line = first + next(i for i, text in enumerate(src) if "advection = " in text)

    with pytest.raises(msc.NonLinearError) as err:
        burgers.matrix(shape=(8,), nu=0.1)
    msg = str(err.value)
    assert f"test_pde.py:{line}:" in msg and "burgers" in msg
    assert "u[x] * (u[x+1] - u[x-1])" in msg

    @msc.operator
    def wrapped(u):
        return msc.sqrt(u[x]) + u[x + 1]

    with pytest.raises(msc.NonLinearError, match=r"sqrt\(u\[x\]\)"):
        wrapped.matrix(shape=(5,))


def test_linear_form_on_stencil_ir_keeps_time_levels():
    @msc.stencil
    def wave(u, c, dt2):
        u[msc.t + 1, x] = 2 * u[msc.t, x] - u[msc.t - 1, x] + dt2 * c[x] * (u[msc.t, x - 1] - 2 * u[msc.t, x])

    form = linear_form(wave.ir.statements[0].expr, {"u"})
    assert set(form.terms) == {("u", 0, (0,)), ("u", -1, (0,)), ("u", 0, (-1,))}
    assert form.constant is None


def test_operator_errors_point_at_the_line():
    with pytest.raises(msc.StencilDefinitionError, match=r"test_pde.py:\d+: .*indexed with t"):
        @msc.operator
        def timed(u):
            return u[msc.t, x]
    with pytest.raises(msc.StencilDefinitionError, match=r"test_pde.py:\d+: .*not an affine index"):
        @msc.operator
        def scaled(u):
            return u[2 * x]
    with pytest.raises(msc.StencilDefinitionError, match=r"test_pde.py:\d+: in stencil 'silent': the operator returns"):
        @msc.operator
        def silent(u):
            u[x] + 1
    with pytest.raises(msc.StencilDefinitionError, match=r"the returned dict has key 'u' \(the name of the "
                                                         r"parameter 'u': write the parameter itself, u, not its name\)"):
        @msc.operator
        def named(u, v):
            return {"u": u[x - 1] - u[x], v: v[x + 1] - v[x]}
    with pytest.raises(msc.StencilArgumentError, match="missing argument"):
        lap5.matrix(shape=(5, 5))


# ---------------------------------------------------------------- convergence


def _slopes(errors: list[float], hs: list[float]) -> list[float]:
    """Observed orders of accuracy between successive refinements."""
    return [float(np.log(e0 / e1) / np.log(h0 / h1)) for e0, e1, h0, h1 in zip(errors, errors[1:], hs, hs[1:])]


@pytest.mark.parametrize("ndim,sizes", [(2, (7, 15, 31, 63)), (3, (3, 7, 15, 31))])
def test_poisson_manufactured_solution_converges_second_order(ndim, sizes):
    @msc.operator
    def lap(u, h):
        return sum((at(u, tuple(s if e == d else 0 for e in range(ndim))) for d in range(ndim) for s in (-1, 1)),
                   -2 * ndim * at(u, (0,) * ndim)) / h**2

    errors, hs = [], []
    for n in sizes:
        h = 1.0 / (n + 1)
        hs.append(h)
        grid = np.linspace(0, 1, n + 2)
        X = np.meshgrid(*[grid] * ndim, indexing="ij")
        exact = np.prod([np.sin(np.pi * c) for c in X], axis=0) + X[0]  # the linear part lives on the ring
        rhs = -ndim * np.pi**2 * np.prod([np.sin(np.pi * c) for c in X], axis=0)
        ring = exact.copy()
        ring[(slice(1, -1),) * ndim] = 0
        u = msc.solve(lap, rhs[(slice(1, -1),) * ndim], h=h, u=ring, method="direct")  # exact to rounding
        A, g = lap.matrix(shape=u.shape, h=h, u=u)
        residual = A @ u[(slice(1, -1),) * ndim].ravel() + g - rhs[(slice(1, -1),) * ndim].ravel()
        assert np.abs(residual).max() <= 1e-8 * np.abs(rhs).max()
        assert_ring_kept(u, ring)
        errors.append(float(np.abs(u - exact).max()))
    slopes = _slopes(errors, hs)
    print(f"\nPoisson {ndim}D max errors {[f'{e:.2e}' for e in errors]}, slopes {[f'{s:.2f}' for s in slopes]}")
    assert all(s > 1.8 for s in slopes)


def test_crank_nicolson_heat_converges_second_order():
    errors, hs = [], []
    T = 0.05
    for n in (7, 15, 31, 63):
        h = 1.0 / (n + 1)
        hs.append(h)
        steps = (n + 1) // 2
        grid = np.linspace(0, 1, n + 2)
        X, Y = np.meshgrid(grid, grid, indexing="ij")
        u0 = np.sin(np.pi * X) * np.sin(np.pi * Y)
        stepper = msc.implicit(lap5, T / steps, "crank_nicolson", shape=u0.shape, h=h)
        assert stepper.solver == "swCholesky"
        u = stepper.run(steps=steps, u=u0)["u"]
        errors.append(float(np.abs(u - u0 * np.exp(-2 * np.pi**2 * T)).max()))
    slopes = _slopes(errors, hs)
    print(f"\nCrank-Nicolson heat max errors {[f'{e:.2e}' for e in errors]}, slopes {[f'{s:.2f}' for s in slopes]}")
    assert all(s > 1.8 for s in slopes)


# ---------------------------------------------------------------- implicit
#
# The implicit steppers are checked against a stepper on the whole grid built here from
# hand-written numpy operators (slices and np.roll), independent of msc's assembly: the
# matrix of the affine map u -> L(u) taken column by column, ring rows zero (the ring holds
# its values), and each step a dense solve.


def _whole_grid_steps(apply, u0: np.ndarray, dt: float, theta: float, steps: int) -> np.ndarray:
    """`steps` theta-method steps of du/dt = apply(u) on whole arrays (apply leaves the ring at zero)."""
    shape, n = u0.shape, u0.size
    g = apply(np.zeros(shape)).ravel()
    A = np.empty((n, n))
    for j in range(n):
        e = np.zeros(n)
        e[j] = 1.0
        A[:, j] = apply(e.reshape(shape)).ravel() - g
    M = np.identity(n) - theta * dt * A
    v = u0.ravel().astype(np.float64)
    for _ in range(steps):
        v = np.linalg.solve(M, v + dt * g + (1 - theta) * dt * (A @ v))
    return v.reshape(shape)


def _on_interior(values: np.ndarray) -> np.ndarray:
    """A whole array holding `values` inside a zero ring of width 1."""
    out = np.zeros(tuple(n + 2 for n in values.shape))
    out[(slice(1, -1),) * values.ndim] = values
    return out


def _lap5_np(u: np.ndarray, h: float) -> np.ndarray:
    return _on_interior((u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]) / h**2)


def _divkgrad_np(u: np.ndarray, k: np.ndarray) -> np.ndarray:
    c = (slice(1, -1), slice(1, -1))
    out = 0.0
    for sx, sy in (((slice(2, None), slice(1, -1))), (slice(None, -2), slice(1, -1)),
                   (slice(1, -1), slice(2, None)), (slice(1, -1), slice(None, -2))):
        out = out + 0.5 * (k[c] + k[sx, sy]) * (u[sx, sy] - u[c])
    return _on_interior(out)


def _periodic_lap_np(u: np.ndarray, c: float) -> np.ndarray:
    return c * (np.roll(u, 1, 0) + np.roll(u, -1, 0) + np.roll(u, 1, 1) + np.roll(u, -1, 1) - 4 * u)


@pytest.mark.parametrize("method,theta", [("backward_euler", 1.0), ("crank_nicolson", 0.5)])
def test_implicit_steps_match_a_whole_grid_stepper(method, theta):
    rng = np.random.default_rng(5)
    k = 1 + rng.random((12, 10))
    u0 = rng.random((12, 10))
    stepper = msc.implicit(divkgrad, 0.3, method, shape=u0.shape, k=k)
    assert stepper.solver == "swCholesky"
    out = stepper.run(steps=4, u=u0)["u"]
    ref = _whole_grid_steps(lambda u: _divkgrad_np(u, k), u0, 0.3, theta, 4)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-10)
    assert_ring_kept(out, u0)


def test_implicit_refactorizes_with_the_saved_analysis():
    u0 = np.random.default_rng(6).random((9, 9))
    stepper = msc.implicit(lap5, 0.01, "backward_euler", shape=u0.shape, h=0.1)
    first = stepper.run(steps=2, u=u0)["u"]
    again = stepper.run(steps=2, u=u0, h=0.1)
    assert stepper.refactorizations == 0
    np.testing.assert_array_equal(first, again["u"])
    second = stepper.run(steps=2, u=u0, h=0.2)["u"]
    assert stepper.refactorizations == 1 and stepper._factor.analyses == 1
    np.testing.assert_allclose(second, _whole_grid_steps(lambda u: _lap5_np(u, 0.2), u0, 0.01, 1.0, 2), atol=1e-10)


def test_implicit_sees_a_partly_changed_coefficient_beside_an_unchanged_one():
    @msc.operator
    def absorb(u, k, c):
        return divkgrad.func(u, k) - c[x, y] * u[x, y]

    rng = np.random.default_rng(11)
    k, c, u0 = 1 + rng.random((9, 8)), rng.random((9, 8)), rng.random((9, 8))
    stepper = msc.implicit(absorb, 0.2, "crank_nicolson", shape=u0.shape, k=k, c=c)
    stepper.run(steps=1, u=u0)
    k2 = k.copy()
    k2[2:5, 3:6] *= 3.0  # part of k changes; c is passed again unchanged (another array, same values)
    out = stepper.run(steps=3, u=u0, k=k2, c=c.copy())["u"]
    assert stepper.refactorizations == 1
    ref = _whole_grid_steps(lambda u: _divkgrad_np(u, k2) - _on_interior(c[1:-1, 1:-1] * u[1:-1, 1:-1]),
                            u0, 0.2, 0.5, 3)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-10)


@pytest.mark.parametrize("solver", ["direct", "multigrid"])
def test_implicit_sees_a_coefficient_changed_in_place_and_survives_a_failed_run(solver):
    """The stepper keeps copies: a coefficient array changed in place and passed again is a change
    (the steps before used what they were given); a run that fails (an unknown argument, a matrix
    that cannot be factored) leaves the stepper as it was."""
    rng = np.random.default_rng(13)
    k, u0 = 1 + rng.random((12, 10)), rng.random((12, 10))
    stepper = msc.implicit(divkgrad, 0.3, shape=u0.shape, k=k, solver=solver)
    stepper.run(steps=1, u=u0)
    k *= 5
    out = stepper.run(steps=2, u=u0, k=k)["u"]
    assert stepper.refactorizations == 1
    ref = _whole_grid_steps(lambda u: _divkgrad_np(u, k), u0, 0.3, 1.0, 2)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-7 if solver == "multigrid" else 1e-10)
    with pytest.raises(msc.StencilArgumentError, match="unknown argument"):
        stepper.run(steps=1, u=u0, kk=k)
    bad = k.copy()
    bad[3, 4] = np.inf
    with pytest.raises(msc.MscError):
        stepper.run(steps=1, u=u0, k=bad)
    np.testing.assert_array_equal(stepper.run(steps=2, u=u0)["u"], out)
    assert stepper.refactorizations == 1


def test_implicit_periodic_operator():
    u0 = np.random.default_rng(12).random((7, 6))
    stepper = msc.implicit(periodic_lap, 0.05, "crank_nicolson", shape=u0.shape, c=2.0)
    out = stepper.run(steps=3, u=u0)["u"]
    ref = _whole_grid_steps(lambda u: _periodic_lap_np(u, 2.0), u0, 0.05, 0.5, 3)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-10)
    assert out.sum() == pytest.approx(u0.sum(), rel=1e-12)  # a periodic Laplacian conserves the total


def test_nonsymmetric_operator_falls_back_to_lu():
    @msc.operator
    def advect_diffuse(u):
        return u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y] - 0.8 * (u[x + 1, y] - u[x - 1, y])

    def advect_diffuse_np(u):
        return _lap5_np(u, 1.0) - 0.8 * _on_interior(u[2:, 1:-1] - u[:-2, 1:-1])

    u0 = np.random.default_rng(7).random((8, 9))
    stepper = msc.implicit(advect_diffuse, 0.1, "crank_nicolson", shape=u0.shape)
    assert stepper.solver == "splu"
    out = stepper.run(steps=3, u=u0)["u"]
    np.testing.assert_allclose(out, _whole_grid_steps(advect_diffuse_np, u0, 0.1, 0.5, 3), atol=1e-10)


def test_two_field_system_implicit_and_steady():
    @msc.operator
    def pair(u, v):
        return {u: u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y] + 0.5 * v[x, y],
                v: v[x - 1, y] + v[x + 1, y] + v[x, y - 1] + v[x, y + 1] - 4 * v[x, y] + 0.5 * u[x, y]}

    rng = np.random.default_rng(8)
    u0, v0 = rng.random((8, 7)), rng.random((8, 7))
    stepper = msc.implicit(pair, 0.2, "backward_euler", shape=u0.shape)
    assert stepper.solver == "swCholesky"
    out = stepper.run(steps=3, u=u0, v=v0)

    def pair_np(w):  # w stacks u and v
        inner = (slice(1, -1), slice(1, -1))
        return np.stack([_lap5_np(w[0], 1.0) + 0.5 * _on_interior(w[1][inner]),
                         _lap5_np(w[1], 1.0) + 0.5 * _on_interior(w[0][inner])])

    ref = _whole_grid_steps(pair_np, np.stack([u0, v0]), 0.2, 1.0, 3)
    np.testing.assert_allclose(out["u"], ref[0], atol=1e-10)
    np.testing.assert_allclose(out["v"], ref[1], atol=1e-10)
    rhs = {"u": rng.random((6, 5)), "v": rng.random((6, 5))}
    sol = msc.solve(pair, rhs, u=u0, v=v0)  # negative definite: solved by swCholesky after a sign flip
    applied = pair.apply(u=sol["u"], v=sol["v"])
    for f in ("u", "v"):
        np.testing.assert_allclose(applied[f], rhs[f], atol=1e-10)


# ---------------------------------------------------------------- explicit


def _rk_by_matrix(A, g, v, dt, method):
    def L(w):
        return A @ w + g
    if method == "euler":
        return v + dt * L(v)
    if method == "rk2":
        return v + dt * L(v + dt / 2 * L(v))
    k1 = L(v)
    k2 = L(v + dt / 2 * k1)
    k3 = L(v + dt / 2 * k2)
    k4 = L(v + dt * k3)
    return v + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


@pytest.mark.parametrize("method", ["euler", "rk2", "rk4"])
def test_explicit_methods_match_the_matrix_form(method):
    rng = np.random.default_rng(9)
    k = 1 + rng.random((9, 8))
    u0 = rng.random((9, 8))
    st = msc.explicit(divkgrad, 0.05, method)
    assert isinstance(st, msc.Stencil)
    out = st.reference(steps=1, u=u0, k=k)
    assert set(out) == {"u"}
    A, g = divkgrad.matrix(shape=u0.shape, k=k, u=u0)
    expected = _rk_by_matrix(A, g, u0[1:-1, 1:-1].ravel(), 0.05, method)
    np.testing.assert_allclose(out["u"][1:-1, 1:-1].ravel(), expected, atol=1e-12)


@pytest.mark.parametrize("method", ["euler", "rk4"])
def test_explicit_compiled_with_openmp_matches_reference(method):
    rng = np.random.default_rng(10)
    k = 1 + rng.random((20, 18))
    u0 = rng.random((20, 18))
    st = msc.explicit(divkgrad, 0.02, method)
    ref = st.reference(steps=7, u=u0, k=k)["u"]
    kernel = st.compile(target="openmp", threads=2)
    out = kernel.run(steps=7, u=u0, k=k)["u"]
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    sim = kernel.start(u=u0, k=k)  # stepped: the stages filled as run fills them
    sim.advance(3)
    sim.advance(4)
    np.testing.assert_array_equal(sim.fields["u"], out)


def test_explicit_two_field_nonlinear_periodic_compiles():
    @msc.operator(boundary="periodic")
    def gray_scott(u, v, du, dv, feed, kill):
        def lap(f):
            return f[x - 1, y] + f[x + 1, y] + f[x, y - 1] + f[x, y + 1] - 4 * f[x, y]
        reaction = u[x, y] * v[x, y] ** 2
        return {u: du * lap(u) - reaction + feed * (1 - u[x, y]),
                v: dv * lap(v) + reaction - (feed + kill) * v[x, y]}

    rng = np.random.default_rng(11)
    u0, v0 = 1 - 0.1 * rng.random((16, 16)), 0.1 * rng.random((16, 16))
    params = {"du": 0.16, "dv": 0.08, "feed": 0.035, "kill": 0.065}
    st = msc.explicit(gray_scott, 1.0, "rk2")
    ref = st.reference(steps=5, u=u0, v=v0, **params)
    out = st.compile(threads=2).run(steps=5, u=u0, v=v0, **params)
    for f in ("u", "v"):
        np.testing.assert_allclose(out[f], ref[f], rtol=1e-12, atol=1e-12)
    src, first = inspect.getsourcelines(gray_scott.func)
    line = first + next(i for i, text in enumerate(src) if "reaction = " in text)
    with pytest.raises(msc.NonLinearError, match=rf"test_pde.py:{line}: in operator 'gray_scott': "
                       r"non-linear term 'v\[x, y\] \*\* 2'"):
        gray_scott.matrix(shape=(8, 8), **params)


@pytest.mark.slow
def test_pde_benchmark_quick_run(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "pde.json"
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "pde.py"
    run = subprocess.run([sys.executable, str(script), "--quick", "--repeat", "1", "--steps", "2", "--json", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    data = json.loads(out.read_text())
    assert [c["case"] for c in data["cases"]] == ["2D 200^2", "3D 24^3"]
    for case in data["cases"]:
        assert case["assembly"]["msc_s"] > 0 and case["assembly"]["scipy_kron_s"] > 0
        for result in (*case["steady"].values(), *(r for r in case["implicit_step"].values() if isinstance(r, dict))):
            assert result.get("finished", True) and result["residual"] < 1e-8
        assert case["implicit_step"]["msc"]["solver"] == "swCholesky"
    (mg,) = data["multigrid"]
    assert mg["case"] == "3D Poisson 24^3" and mg["msc_multigrid"]["residual"] < 1e-8
    assert mg["msc_multigrid"]["iterations"] <= 15 and mg["msc_direct"]["residual"] < 1e-8


def test_long_sums_are_analysed_without_deep_recursion():
    @msc.operator
    def box(u):
        s = 0
        for i in range(-4, 5):
            for j in range(-4, 5):
                for k in range(-4, 5):
                    s = s + (i * i + j + 2 * k + 1) * u[x + i, y + j, z + k]
        return s

    form = box.linear_forms["u"]
    assert len(form.terms) == 729
    assert form.terms[("u", None, (4, -1, 2))] == ir.Const(16 - 1 + 4 + 1)


def test_singular_steady_problem_is_reported():
    with pytest.raises(msc.MscError, match="msc.solve with operator 'periodic_lap': the matrix is singular"):
        msc.solve(periodic_lap, np.ones((6, 6)), c=1.0)


@pytest.mark.parametrize("method", ["direct", "multigrid", "cg", "gmres", "auto"])
@pytest.mark.parametrize("shape", [(50, 50), (24, 24, 24)], ids=["2d-50", "3d-24"])
def test_an_operator_singular_by_the_constants_is_refused_by_every_method(method, shape):
    """At these sizes rounding hid the zero pivot: the direct solve returned a solution of 1e13 whose
    residual passed its check, multigrid divided by zero or called the rhs non-finite."""
    operator = periodic_lap if len(shape) == 2 else periodic_lap3
    rhs = np.random.default_rng(24).standard_normal(shape)
    inputs = {"c": 1.0} if operator is periodic_lap else {}
    with pytest.raises(msc.MscError, match="the matrix is singular \\(the operator sends constants to zero\\)"):
        msc.solve(operator, rhs, method=method, **inputs)


@msc.operator(boundary="periodic")
def periodic_lap3(u):
    return (u[x - 1, y, z] + u[x + 1, y, z] + u[x, y - 1, z] + u[x, y + 1, z] + u[x, y, z - 1] + u[x, y, z + 1]
            - 6 * u[x, y, z])


@msc.operator(boundary="periodic")
def periodic_upwind(u):
    return u[x - 1, y] + u[x, y - 1] - 2 * u[x, y]


@msc.operator(boundary="periodic")
def every_other_point(u):
    return u[x - 2, y] + u[x + 2, y] + u[x, y - 2] + u[x, y + 2] - 4 * u[x, y]


def _periodic_laplacian(u: np.ndarray) -> np.ndarray:
    return sum(np.roll(u, s, axis) for axis in range(u.ndim) for s in (1, -1)) - 2 * u.ndim * u


@pytest.mark.parametrize("method", ["direct", "multigrid"])
@pytest.mark.parametrize("shape", [(24, 20), (64, 64), (16, 12, 20)])
def test_nullspace_constant_gives_the_zero_mean_solution_of_a_periodic_poisson_problem(method, shape):
    rng = np.random.default_rng(len(shape))
    f = rng.standard_normal(shape)
    f -= f.mean()
    op, args = (periodic_lap, {"c": 1.0}) if len(shape) == 2 else (periodic_lap3, {})
    u, info = msc.solve(op, f, nullspace="constant", method=method, full_output=True, **args)
    assert np.linalg.norm(_periodic_laplacian(u) - f) <= 1e-7 * np.linalg.norm(f)
    assert abs(u.mean()) <= 1e-12 * np.abs(u).max()
    assert info.solver == ("multigrid-cg" if method == "multigrid" else "swCholesky")
    assert abs(info.rhs_mean_removed) < 1e-15
    shifted = msc.solve(op, f, nullspace="constant", method=method, **args)  # the same answer every time
    assert np.allclose(shifted, u, atol=1e-7 * np.abs(u).max())


def test_nullspace_constant_solves_for_the_rhs_without_its_mean_and_warns_where_that_matters():
    rng = np.random.default_rng(3)
    f = rng.standard_normal((16, 16))
    with pytest.warns(UserWarning, match=r"msc.solve with operator 'periodic_lap': the rhs has mean .* msc solved "
                                         r"L\(u\) = rhs - mean \(the least-squares solution\)"):
        u, info = msc.solve(periodic_lap, f, nullspace="constant", full_output=True, c=1.0)
    assert info.rhs_mean_removed == pytest.approx(f.mean(), abs=1e-15)
    assert np.allclose(_periodic_laplacian(u), f - f.mean(), atol=1e-10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a mean within tol is rounding: no warning
        msc.solve(periodic_lap, f - f.mean() + 1e-12, nullspace="constant", c=1.0)


def test_apply_names_its_arguments_when_given_an_array_by_position():
    with pytest.raises(msc.StencilArgumentError, match=re.escape("operator 'lap5': apply() takes its arrays and values "
                                                                 "by name, apply(u=..., h=...); got 1 positional")):
        lap5.apply(np.zeros((6, 6)), h=1.0)


def test_nullspace_constant_refuses_operators_it_does_not_fit():
    rhs = np.add.outer(np.arange(8.0), np.arange(8.0)) - 7.0  # of zero mean
    for call, error, said in [
        (lambda: msc.solve(periodic_lap, rhs, nullspace="constants", c=1.0), msc.StencilArgumentError,
         "nullspace must be None or 'constant'"),
        (lambda: msc.solve(lap5, np.ones((6, 6)), nullspace="constant", h=1.0), msc.StencilArgumentError,
         "nullspace='constant' is for an operator that sends constants to zero, and this one does not: "
         "L(1) = -2 at (0, 0)"),
        (lambda: msc.solve(periodic_upwind, rhs, nullspace="constant", method="direct"), msc.StencilArgumentError,
         "nullspace='constant' needs a symmetric operator"),
        (lambda: msc.solve(periodic_upwind, rhs, nullspace="constant", method="multigrid"),
         msc.StencilArgumentError, "nullspace='constant' needs a symmetric operator"),
        (lambda: msc.solve(every_other_point, rhs, nullspace="constant", method="direct"), msc.MscError,
         "its null space is larger than the constants"),
        (lambda: msc.solve(coupled, {"u": np.ones((6, 6)), "v": np.ones((6, 6))}, nullspace="constant", a=0.5),
         msc.StencilArgumentError, "nullspace 'constant' solves operators of one unknown"),
    ]:
        with pytest.raises(error, match=re.escape(said)):
            call()


def test_unknown_methods_and_non_operators_are_msc_errors_naming_the_choices():
    with pytest.raises(msc.StencilArgumentError,
                       match=r"implicit\(\): method='bdf2' is not one of 'backward_euler', 'crank_nicolson'"):
        msc.implicit(lap5, 0.1, "bdf2", shape=(6, 6), h=1.0)
    with pytest.raises(msc.StencilArgumentError, match=r"explicit\(\): method='rk3' is not one of 'euler', 'rk2', 'rk4'"):
        msc.explicit(lap5, 0.1, "rk3")
    with pytest.raises(msc.StencilArgumentError, match="implicit\\(\\) takes an msc.operator, got function"):
        msc.implicit(lambda u: u, 0.1, shape=(6, 6))


def test_implicit_multigrid_on_a_system_names_the_solver_keyword():
    with pytest.raises(msc.StencilArgumentError, match=r"solver 'multigrid' solves operators of one unknown; "
                                                       r"operator 'coupled' has u, v \(a system\): use solver='direct'"):
        msc.implicit(coupled, 0.1, shape=(8, 8), a=0.5, solver="multigrid")


@pytest.mark.parametrize("method", ["direct", "multigrid"])
def test_a_zero_step_is_named_with_the_operator_not_by_the_solver(method):
    """h=0 made 1/h**2 infinite: the solver layer said 'matrix has a non-finite entry inf at (0, 0)'."""
    with pytest.raises(msc.StencilArgumentError, match=r"^operator 'lap5': a coefficient of the operator is not "
                                                       r"finite \(NaN or inf\) with the arguments given \(h=0.0\)"):
        msc.solve(lap5, np.ones((8, 8)), h=0.0, method=method)


def test_nullspace_on_a_system_says_it_is_not_available_for_systems():
    with pytest.raises(msc.StencilArgumentError, match=r"operator 'coupled' has u, v \(a system\): "
                                                       r"nullspace='constant' is not available for systems$"):
        msc.solve(coupled, {u: np.ones((8, 8)) for u in coupled.unknowns}, a=0.5, nullspace="constant")


def test_solve_names_what_is_wrong_with_its_arguments_and_its_info_is_a_mapping():
    rhs, h = np.ones((8, 8)), 0.1
    for call, said in [
        (lambda: msc.solve(lap5, rhs + 1j, h=h), "rhs for 'u' is complex"),
        (lambda: msc.solve(lap5, rhs, h=h, u=np.zeros((12, 10))),
         "rhs for 'u' must have the interior's shape (10, 8) (the interior of 'u', whose shape is (12, 10))"),
        (lambda: msc.solve(lambda u: u, rhs), "msc.solve() takes an msc.operator, got function"),
        (lambda: msc.solve(lap5, rhs, h=h, u=[[0.0] * 10] * 10), "'u' (its ring values) must be a numpy array"),
        (lambda: msc.solve(lap5, rhs, h=np.nan), "scalar parameter 'h' is nan"),
        (lambda: msc.solve(lap5, np.where(rhs > 0, np.inf, 0), h=h), "rhs for 'u' is inf at (0, 0) (interior "
                                                                       "indices) and at 63 more points"),
        (lambda: msc.solve(divkgrad, rhs, k=np.where(np.arange(10) == 3, np.nan, np.ones((10, 10)))),
         "coefficient 'k' is nan at (0, 3) and at 9 more points"),
        (lambda: msc.solve(lap5, rhs, h=h, method="direct", smoother="jacobbi"), "smoother must be one of"),
    ]:
        with pytest.raises(msc.StencilArgumentError, match=re.escape(said)):
            call()
    u, info = msc.solve(lap5, rhs, h=h, method="cg", tol=np.float32(1e-6), maxiter=np.int64(50), full_output=True)
    assert info.residuals[-1] <= 1e-6
    assert "solver" in info and dict(info)["method"] == "cg" and info.get("nope") is None
    with pytest.raises(KeyError):
        info["nope"]


@pytest.mark.parametrize("method", ["direct", "multigrid", "cg", "gmres"])
def test_a_fortran_ordered_ring_is_taken_by_every_method(method):
    """u= in Fortran order (its ring's values): the iterative methods wrote into a copy that kept that
    layout and refused it deep inside their vector operations."""
    ring = np.asfortranarray(np.zeros((34, 34)))
    ring[0, :] = 1.0
    rhs = np.ones((32, 32))
    expected = msc.solve(lap5, rhs, u=np.ascontiguousarray(ring), h=0.1, method="direct")
    result = msc.solve(lap5, rhs, u=ring, h=0.1, method=method, tol=1e-12)
    assert np.allclose(result, expected, rtol=0, atol=1e-9 * np.abs(expected).max())


def test_a_direct_factorisation_with_a_tiny_cholesky_pivot_counts_as_singular():
    """A singular SPD matrix that rounding lets Cholesky factor (a path graph's Laplacian, shifted by 1e-15)
    is refused as LU's tiny pivots are, not solved into a blown-up answer."""
    import scipy.sparse as sp

    from msc.pde.direct import Factorization

    n = 20
    path = sp.diags_array([-np.ones(n - 1), np.r_[1.0, 2 * np.ones(n - 2), 1.0], -np.ones(n - 1)], offsets=[-1, 0, 1])
    with pytest.raises(msc.MscError, match=r"^a test: the matrix is singular \(Cholesky pivot ratio \d"):
        Factorization().factor(sp.csr_array(path + 1e-15 * sp.identity(n)), "a test")
    shifted = Factorization()
    shifted.factor(sp.csr_array(path + 1e-3 * sp.identity(n)), "a test")
    assert shifted.solver == "swCholesky"
