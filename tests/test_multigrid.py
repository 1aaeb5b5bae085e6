"""Matrix-free Krylov and geometric multigrid (msc.solve method=..., msc.implicit solver="multigrid").

Every solution is checked by its residual against the matrix msc assembles
independently (L.matrix), and against the direct solve where one exists; the
grid transfers and Galerkin products against explicit matrices built here.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import msc
from msc import x, y, z
from msc.pde.coarsen import (
    Axis1D,
    diagonal,
    first_centre,
    galerkin,
    galerkin_axis,
    galerkin_block,
    sparse_matrix,
    uniform_region,
)
from msc.pde.matfree import from_coefficients
from msc.pde.transfer import Transfer


@pytest.fixture(autouse=True)
def small_coarsest(monkeypatch):
    """Small grids, deep hierarchies: coarsen down to at most 50 unknowns."""
    from msc.pde import multigrid

    monkeypatch.setattr(multigrid, "COARSEST", 50)


def interpolation_1d(ax: Axis1D) -> np.ndarray:
    """P along one axis, written out point by point (the definition in msc.pde.coarsen's docstring)."""
    P = np.zeros((ax.n, ax.m))
    for i in range(ax.m):
        c = 2 * i if ax.periodic else 2 * i + 1
        P[c, i] = 1.0
        for nb in (c - 1, c + 1):
            if ax.periodic:
                nb %= ax.n
                if nb % 2 == 0:  # a coarse point itself (odd n: across the wrap)
                    continue
            elif not 0 <= nb < ax.n:
                continue
            P[nb, i] += 0.5
    return P


@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("shape", [(7, 9), (8, 6), (10, 11), (6, 12, 7)])
def test_transfers_and_galerkin_product_match_explicit_matrices(periodic, shape):
    rng = np.random.default_rng(len(shape) + sum(shape))
    ndim = len(shape)
    offsets = [o for o in itertools.product((-1, 0, 1), repeat=ndim) if sum(map(abs, o)) <= 1] + [(1,) * ndim]
    coefs = {o: rng.random(shape) for o in offsets}
    coefs[offsets[0]] = 2.5  # a constant coefficient stays a number
    axes = [Axis1D.of(n, periodic) for n in shape]
    Ps = [interpolation_1d(ax) for ax in axes]
    P = Ps[0]
    for Q in Ps[1:]:
        P = np.kron(P, Q)
    A = sparse_matrix(coefs, shape, periodic).toarray()
    c, s = coefs, shape
    for d, ax in enumerate(axes):
        c = galerkin_axis(c, s, d, ax)
        s = tuple(ax.m if k == d else n for k, n in enumerate(s))
    assert np.abs(sparse_matrix(c, s, periodic).toarray() - P.T @ A @ P).max() <= 1e-12 * np.abs(A).max()


@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("shape,kept", [((7,), ()), ((8,), ()), ((7, 9), ()), ((8, 6), (1,)), ((10, 11), ()),
                                        ((6, 12, 7), ()), ((9, 2, 8), (1,)), ((6, 7, 5), (0, 2))])
def test_compiled_transfers_match_explicit_matrices_on_buffer_views(periodic, shape, kept):
    """R = P^T and P over every coarsened axis at once (kept axes: the identity), on strided views
    inside larger buffers as the V-cycle passes them; prolongation adds into what is there."""
    rng = np.random.default_rng(len(shape) + sum(shape))
    axes = [None if d in kept else Axis1D.of(n, periodic) for d, n in enumerate(shape)]
    P = np.ones((1, 1))
    for n, ax in zip(shape, axes):
        P = np.kron(P, np.eye(n) if ax is None else interpolation_1d(ax))
    t = Transfer(shape, axes)
    fine_buffer, coarse_buffer = rng.random(tuple(n + 3 for n in shape)), rng.random(tuple(m + 3 for m in t.coarse))
    fine = fine_buffer[tuple(slice(1, 1 + n) for n in shape)]
    coarse = coarse_buffer[tuple(slice(2, 2 + m) for m in t.coarse)]
    before, around = fine.copy(), coarse_buffer.copy()
    t.restrict(fine, coarse, threads=2)
    assert np.allclose(coarse.ravel(), P.T @ fine.ravel())
    around[tuple(slice(2, 2 + m) for m in t.coarse)] = coarse
    assert np.array_equal(coarse_buffer, around)  # nothing written outside the view
    t.prolong_add(coarse, fine, threads=2)
    assert np.allclose(fine.ravel(), before.ravel() + P @ coarse.ravel())
    with pytest.raises(ValueError, match="shape"):
        t.restrict(coarse, coarse, threads=1)


@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("shape,splits", [((14,), ((0, 5, 9, 14),)), ((11, 12), ((0, 4, 11), (0, 6, 12))),
                                          ((10, 12, 8), ((0, 3, 10), (0, 7, 12), (0, 8))),
                                          ((12, 9), ((0, 2, 5, 12), (0, 9)))])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_block_transfers_equal_the_whole_grid_s(periodic, shape, splits, dtype):
    """Over MPI ranks each block restricts its residual with one layer around it (zero beyond a
    dirichlet edge, wrapped if periodic) to the coarse points centred in it, and interpolates from the
    coarse slab one point wider on each side: block by block, the whole grid's R and P."""
    if periodic and any(n % 2 for n in shape):
        shape = tuple(n + n % 2 for n in shape)
        splits = tuple(axis[:-1] + (n,) for axis, n in zip(splits, shape))
    rng = np.random.default_rng(sum(shape))
    axes = [Axis1D.of(n, periodic) for n in shape]
    whole = Transfer(shape, axes)
    fine, coarse = rng.random(shape).astype(dtype), rng.random(whole.coarse).astype(dtype)
    restricted = whole.restrict(fine, np.empty(whole.coarse, dtype), threads=1)
    prolonged = np.zeros(shape, dtype)
    whole.prolong_add(coarse, prolonged, threads=1)
    wrap = lambda a, idx: a[np.ix_(*[i % n for i, n in zip(idx, a.shape)])] if periodic else \
        np.pad(a, 1)[np.ix_(*[np.clip(i + 1, 0, n + 1) for i, n in zip(idx, a.shape)])]  # noqa: E731
    base = 0 if periodic else 1
    for block in itertools.product(*[list(zip(axis, axis[1:])) for axis in splits]):
        t = Transfer.for_block([(s, e, base) for s, e in block])
        layered = wrap(fine, [np.arange(s - 1, e + 1) for s, e in block])
        centres = [((s - base + 1) // 2, (e - base + 1) // 2) for s, e in block]
        ours = t.restrict(layered, np.empty(t.restricted[1], dtype), threads=2)
        assert np.allclose(ours, restricted[tuple(slice(i0, i1) for i0, i1 in centres)], rtol=1e-6)
        slab = wrap(coarse, [np.arange(i0 - 1, i1 + 1) for i0, i1 in centres])
        into = np.ones(tuple(e - s for s, e in block), dtype)
        t.prolong_add(slab, into, threads=2)
        assert np.allclose(into - 1, prolonged[tuple(slice(s, e) for s, e in block)], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("shape,splits", [((14, 11), ((0, 5, 14), (0, 6, 11))), ((12, 10), ((0, 3, 8, 12), (0, 10))),
                                          ((9, 10, 8), ((0, 4, 9), (0, 7, 10), (0, 3, 8)))])
@pytest.mark.parametrize("kind", ["variable", "constant"])
def test_galerkin_on_blocks_equals_the_whole_grid_s(periodic, shape, splits, kind):
    """Over MPI ranks each block forms its part of the coarse operator R A P from its coefficients with
    one point around it: block by block, the whole grid's, variable or constant coefficients."""
    if periodic:
        shape = tuple(n + n % 2 for n in shape)
        splits = tuple(axis[:-1] + (n,) for axis, n in zip(splits, shape))
    rng = np.random.default_rng(sum(shape))
    ndim = len(shape)
    offsets = [o for o in itertools.product((-1, 0, 1), repeat=ndim) if sum(map(abs, o)) <= 1 or kind == "variable"]
    coefs = {o: (rng.random(shape) if kind == "variable" else np.asarray(rng.random())) for o in offsets}
    whole, coarse_shape = galerkin(coefs, shape, [Axis1D.of(n, periodic) for n in shape])
    base = 0 if periodic else 1
    for block in itertools.product(*[list(zip(axis, axis[1:])) for axis in splits]):
        start, count = tuple(s for s, _ in block), tuple(e - s for s, e in block)
        idx = [np.arange(s - 1, s + c + 1) for s, c in zip(start, count)]
        if periodic:
            ringed = {o: c if np.ndim(c) == 0 else c[np.ix_(*[i % n for i, n in zip(idx, shape)])]
                      for o, c in coefs.items()}
        else:
            ringed = {o: c if np.ndim(c) == 0 else np.pad(c, 1)[np.ix_(*[i + 1 for i in idx])]
                      for o, c in coefs.items()}
        ours = galerkin_block(ringed, shape, start, count, periodic)
        centres = tuple(slice((s - base + 1) // 2, (s + c - base + 1) // 2) for s, c in zip(start, count))
        for o in set(ours) | set(whole):
            theirs = np.broadcast_to(whole.get(o, 0.0), coarse_shape)[centres]
            mine = np.broadcast_to(ours.get(o, 0.0), theirs.shape)
            assert np.allclose(mine, theirs, rtol=1e-13, atol=1e-13), (o, block)


def galerkin_hierarchy(ndim, n, periodic, levels, by_class=False):
    """The coefficient stencils of the 2*ndim+1 point Laplacian's first coarse levels (by_class: as
    multigrid computes them, per class where a proxy grid allows: ClassCoefficients)."""
    coefs = {(0,) * ndim: np.asarray(-2.0 * ndim)}
    for d in range(ndim):
        for side in (-1, 1):
            coefs[tuple(side if e == d else 0 for e in range(ndim))] = np.asarray(1.0)
    shape, out = (n,) * ndim, []
    for _ in range(levels):
        axes = [Axis1D.of(m, periodic) for m in shape]
        if by_class:
            coefs, shape = galerkin(coefs, shape, axes)
            out.append((coefs, shape))
            continue
        for d, ax in enumerate(axes):
            coefs = galerkin_axis(coefs, shape, d, ax)
            shape = tuple(ax.m if k == d else m for k, m in enumerate(shape))
        out.append((dict(coefs), shape))
    return out


@pytest.mark.parametrize("ndim,sizes", [(2, (40, 47)), (2, (64, 64)), (3, (41, 41, 41)), (3, (50, 40, 33))])
@pytest.mark.parametrize("radius", [1, 2])
def test_galerkin_through_a_proxy_grid_equals_the_product(ndim, sizes, radius):
    """Constant (and anisotropic) operators coarsen through a small grid of the same point classes;
    every level equals the axis-by-axis product on the whole grid (to rounding). Radius 2 differs on
    two boundary points per side: the proxy notices and the whole grid is used."""
    from msc.pde.coarsen import _by_proxy, galerkin

    coefs = {(0,) * ndim: np.asarray(-2.0 * ndim - 0.5)}
    for d in range(ndim):
        for r in range(1, radius + 1):
            for side in (-r, r):
                coefs[tuple(side if e == d else 0 for e in range(ndim))] = np.asarray((1.0 + 0.3 * d) / r)
    shape, proxied = tuple(sizes), 0
    while min(shape) > 8:
        axes = [Axis1D.of(n, False) for n in shape]
        proxied += _by_proxy(coefs, shape, axes) is not None
        fast, fast_shape = galerkin(coefs, shape, axes)
        slow, slow_shape = coefs, shape
        for d, ax in enumerate(axes):
            slow = galerkin_axis(slow, slow_shape, d, ax)
            slow_shape = tuple(ax.m if k == d else m for k, m in enumerate(slow_shape))
        assert fast_shape == slow_shape and set(fast) == set(slow)
        scale = np.abs(slow[(0,) * ndim]).max()
        for o in slow:
            assert np.allclose(np.broadcast_to(fast[o], fast_shape), np.broadcast_to(slow[o], slow_shape),
                               rtol=0, atol=1e-13 * scale)
        coefs, shape = slow, slow_shape
    assert (proxied > 0) == (radius == 1)


@pytest.mark.parametrize("ndim,n,shell", [(3, 32, 3), (3, 31, 0), (2, 20, 2), (2, 19, 0)])
def test_uniform_region_of_galerkin_operators(ndim, n, shell):
    """A constant operator's Galerkin coarse stencil is constant but next to the boundary: odd sizes
    nowhere, even sizes on the last plane of each axis; variable coefficients have no such box."""
    for coefs, shape in galerkin_hierarchy(ndim, n, False, 2):
        region = uniform_region(coefs, shape, False)
        assert region is not None and len(region.shell) == shell
        covered = np.zeros(shape, int)
        for lo, hi in (region.inside, *region.shell):
            covered[tuple(slice(a, b) for a, b in zip(lo, hi))] += 1
        assert np.all(covered == 1)  # the boxes tile the grid
        inside = np.zeros(shape, bool)
        inside[tuple(slice(a, b) for a, b in zip(*region.inside))] = True
        for o, c in coefs.items():  # where x + o is off the grid, c_o(x) multiplies a zero: not compared
            neighbour_on_grid = np.zeros(shape, bool)
            neighbour_on_grid[tuple(slice(max(0, -k), m - max(0, k)) for k, m in zip(o, shape))] = True
            here = inside & neighbour_on_grid
            assert np.all(np.broadcast_to(c, shape)[here] == region.values[o])
    noisy = {o: c * (1 + 0.1 * np.random.default_rng(1).random(shape)) for o, c in coefs.items()}
    assert uniform_region(noisy, shape, False) is None


@pytest.mark.parametrize("ndim,n,periodic,by_class", [(3, 16, False, False), (3, 15, False, False),
                                                      (2, 22, False, False), (3, 12, True, False),
                                                      (3, 48, False, True), (2, 64, False, True)])
def test_coefficient_operators_match_their_matrix(ndim, n, periodic, by_class, monkeypatch):
    """from_coefficients (split into a constant box and its shell, or into constant pieces, constant
    everywhere, or fields) applies the Galerkin operator's matrix: residual, one weighted Jacobi
    sweep, and two from zero."""
    from msc.pde import matfree

    monkeypatch.setattr(matfree, "SPLIT_LEAST", 0)  # small grids split too
    rng = np.random.default_rng(n)
    forms = set()
    for coefs, shape in galerkin_hierarchy(ndim, n, periodic, 2, by_class):
        A = sparse_matrix(coefs, shape, periodic)
        op = from_coefficients(coefs, shape, periodic, True, "openmp", 2)
        w = 0.5 / diagonal(coefs, shape)
        op.set_weight(w)
        u, b = rng.random(shape), rng.random(shape)
        op.u[...] = u
        op.rhs[...] = b
        expected = b.ravel() - A @ u.ravel()
        assert np.allclose(op.residual().ravel(), expected, rtol=1e-12, atol=1e-12)
        op.sweep(1)
        weights = np.broadcast_to(w, shape).ravel()
        assert np.allclose(op.u.ravel(), u.ravel() + weights * expected, rtol=1e-12)
        op.sweep_from_zero(2)  # u = 0, then two sweeps; the first reads no u
        first = weights * b.ravel()
        assert np.allclose(op.u.ravel(), first + weights * (b.ravel() - A @ first), rtol=1e-12)
        op.set_scales((0.5, 2.0, 1.5))  # a polynomial smoother: each sweep's own factor on the weights
        op.sweep_from_zero(3)
        expected = 0.5 * weights * b.ravel()
        for factor in (2.0, 1.5):
            expected = expected + factor * weights * (b.ravel() - A @ expected)
        assert np.allclose(op.u.ravel(), expected, rtol=1e-12, atol=1e-12)
        op.sweep(2, 1)  # the second and third factors
        for factor in (2.0, 1.5):
            expected = expected + factor * weights * (b.ravel() - A @ expected)
        assert np.allclose(op.u.ravel(), expected, rtol=1e-12, atol=1e-12)
        forms.add("pieces" if op._pieces else "split" if op._inside is not None
                  else "fields" if "mg_c0" in op._buffers else "constant")
    assert forms == {(3, 16): {"split", "fields"}, (3, 15): {"constant"}, (2, 22): {"split"}, (3, 12): {"constant"},
                     (3, 48): {"pieces"}, (2, 64): {"pieces"}}[ndim, n]


def laplacian(ndim, boundary="dirichlet", shift=0.0):
    @msc.operator(boundary=boundary, name=f"lap{ndim}{boundary[0]}")
    def lap(u, h):
        axes = [(x, y, z)[d] for d in range(ndim)]
        total = -2 * ndim * u[tuple(axes)] - shift * u[tuple(axes)] * h**2
        for d in range(ndim):
            for s in (-1, 1):
                total = total + u[tuple(a + s if e == d else a for e, a in enumerate(axes))]
        return total / h**2
    return lap


def check_residual(L, u, rhs, tol, **inputs):
    """||L(u) - rhs|| / ||rhs - g|| from the matrix msc assembles (not the matrix-free path)."""
    A, g = L.matrix(shape=u.shape, **inputs, u=u)
    inner = tuple(slice(r, n - r) for r, n in zip(L.radius, u.shape)) if L.ir.boundary == "dirichlet" else ...
    b = rhs.reshape(-1) - g
    assert np.linalg.norm(A @ u[inner].reshape(-1) - b) <= tol * np.linalg.norm(b)
    return A, b


@pytest.mark.parametrize("ndim,n,boundary", [(2, 33, "dirichlet"), (2, 40, "dirichlet"), (3, 17, "dirichlet"),
                                             (3, 20, "dirichlet"), (2, 36, "periodic"), (2, 35, "periodic"),
                                             (3, 18, "periodic"), (3, 15, "periodic")])
def test_multigrid_solves_poisson_odd_and_even_sizes(ndim, n, boundary):
    L = laplacian(ndim, boundary, shift=0.0 if boundary == "dirichlet" else 5.0)  # periodic: shifted, definite
    h = 1.0 / (n + 1)
    rng = np.random.default_rng(n)
    rhs = rng.random((n,) * ndim)
    ring = np.zeros((n + 2,) * ndim) if boundary == "dirichlet" else None
    if ring is not None:
        ring[(0,) + (slice(None),) * (ndim - 1)] = 1.0  # a nonzero ring value goes into the right-hand side
    given = {"u": ring} if ring is not None else {}
    u, info = msc.solve(L, rhs, h=h, method="multigrid", tol=1e-9, full_output=True, **given)
    check_residual(L, u, rhs, 1e-9, h=h)
    assert info.solver == "multigrid-cg" and info.iterations <= 15 and len(info.levels) >= 3
    assert info.residuals[0] == 1.0 and info.residuals[-1] <= 1e-9 and info["method"] == "cg"
    direct = msc.solve(L, rhs, h=h, method="direct", **given)
    assert np.abs(u - direct).max() <= 1e-6 * np.abs(direct).max()
    if ring is not None:
        assert np.array_equal(u[0], ring[0])  # the ring is kept


def divergence_form():
    @msc.operator
    def div3(u, k, h):
        return (k[x + 1, y, z] * (u[x + 1, y, z] - u[x, y, z]) - k[x, y, z] * (u[x, y, z] - u[x - 1, y, z])
                + k[x, y + 1, z] * (u[x, y + 1, z] - u[x, y, z]) - k[x, y, z] * (u[x, y, z] - u[x, y - 1, z])
                + k[x, y, z + 1] * (u[x, y, z + 1] - u[x, y, z]) - k[x, y, z] * (u[x, y, z] - u[x, y, z - 1])) / h**2
    return div3


@pytest.mark.parametrize("contrast,most", [(None, 15), (1e3, 40)])
def test_variable_coefficients_coarsen_by_galerkin(contrast, most):
    L = divergence_form()
    n = 23
    h = 1.0 / (n + 1)
    X, Y, Z = np.meshgrid(*[np.linspace(0, 1, n + 2)] * 3, indexing="ij")
    if contrast is None:
        k = 1 + 0.9 * np.sin(2 * np.pi * X) * np.sin(2 * np.pi * Y) * np.sin(2 * np.pi * Z)
    else:
        k = np.where((abs(X - 0.5) < 0.2) & (abs(Y - 0.5) < 0.2) & (abs(Z - 0.5) < 0.2), contrast, 1.0)
    rhs = np.random.default_rng(3).random((n,) * 3)
    u, info = msc.solve(L, rhs, k=k, h=h, method="cg", full_output=True)
    check_residual(L, u, rhs, 1e-8, k=k, h=h)
    assert info.iterations <= most


def convection_diffusion():
    @msc.operator
    def cd(u, h, v):
        return (u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y]) / h**2 \
            - v * (u[x + 1, y] - u[x - 1, y]) / (2 * h)
    return cd


def test_nonsymmetric_operator_goes_to_gmres_and_cg_is_refused():
    L, n = convection_diffusion(), 47
    h, rhs = 1.0 / (n + 1), np.ones((n, n))
    u, info = msc.solve(L, rhs, h=h, v=30.0, method="multigrid", full_output=True)
    assert info.solver == "multigrid-gmres" and info.iterations <= 30
    check_residual(L, u, rhs, 1e-8, h=h, v=30.0)
    with pytest.raises(msc.StencilArgumentError, match="CG needs a symmetric operator.*method='gmres'"):
        msc.solve(L, rhs, h=h, v=30.0, method="cg")


def test_not_converging_raises_with_the_history():
    L, n = convection_diffusion(), 31
    with pytest.raises(msc.ConvergenceError, match="GMRES did not reach the relative residual 1e-12 in 2 iterations") \
            as err:
        msc.solve(L, np.ones((n, n)), h=1.0 / (n + 1), v=30.0, method="gmres", tol=1e-12, maxiter=2)
    assert len(err.value.residuals) == 3 and err.value.residuals[0] == 1.0
    with pytest.raises(msc.ConvergenceError):
        msc.solve(laplacian(3), np.ones((15,) * 3), h=0.1, method="cg", tol=1e-12, maxiter=1)


def test_a_tol_below_what_float64_reaches_is_named_in_the_error():
    """Periodic Helmholtz on 128 x 96 with h = 1/128: ||A|| ||x|| / ||b|| is about 4e4, so rounding in A x
    alone leaves a relative residual of about 1e-11 (a direct solve's was measured at 2.7e-12): tol=1e-12
    fails after the restart from the true residual, and the error says why; 1e-10 converges."""
    @msc.operator(boundary="periodic")
    def helmholtz(u, h):
        return (u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y]) / h**2 - 3 * u[x, y]

    b = np.random.default_rng(7).random((128, 96))
    with pytest.raises(msc.ConvergenceError, match=r"tol is below what float64 reaches for this problem: rounding "
                                                   r"in A x alone leaves about \d\.\de-1[12]") as err:
        msc.solve(helmholtz, b, method="multigrid", tol=1e-12, h=1.0 / 128)
    assert err.value.residuals[-1] <= 1e-12  # the recurrence's own residual got there; the true one did not
    u, info = msc.solve(helmholtz, b, method="multigrid", tol=1e-10, h=1.0 / 128, full_output=True)
    A, _ = helmholtz.matrix((128, 96), h=1.0 / 128)
    assert np.linalg.norm(b.ravel() - A @ u.ravel()) <= 1e-10 * np.linalg.norm(b)


def test_bad_arguments_and_systems_are_refused():
    L = laplacian(2)
    rhs = np.ones((9, 9))
    with pytest.raises(msc.StencilArgumentError, match="method must be one of"):
        msc.solve(L, rhs, h=0.1, method="jacobi")
    with pytest.raises(msc.StencilArgumentError, match="tol must be"):
        msc.solve(L, rhs, h=0.1, method="cg", tol=0)
    with pytest.raises(msc.StencilArgumentError, match="maxiter must be"):
        msc.solve(L, rhs, h=0.1, method="cg", maxiter=0)
    with pytest.raises(msc.StencilArgumentError, match="blocks=True needs comm="):
        msc.solve(L, rhs, h=0.1, method="multigrid", blocks=True)

    @msc.operator
    def pair(a, b):
        return {a: a[x - 1, y] + a[x + 1, y] - 2 * a[x, y] + b[x, y], b: b[x, y - 1] + b[x, y + 1] - 2 * b[x, y]}
    with pytest.raises(msc.StencilArgumentError, match="one unknown.*a, b.*method='direct'"):
        msc.solve(pair, {"a": rhs, "b": rhs}, method="multigrid")
    with pytest.raises(msc.StencilArgumentError, match="solver must be 'direct' or 'multigrid'"):
        msc.implicit(L, 0.1, shape=(11, 11), h=0.1, solver="cg")


def test_auto_picks_direct_for_small_problems_and_multigrid_for_large():
    from msc.pde.steps import AUTO_DIRECT_LIMIT

    L = laplacian(3)
    small = round(AUTO_DIRECT_LIMIT[3] ** (1 / 3)) - 2
    _, info = msc.solve(L, np.ones((small,) * 3), h=0.1, full_output=True)
    assert info.method == "direct" and info.solver == "swCholesky"
    large = round(AUTO_DIRECT_LIMIT[3] ** (1 / 3)) + 2
    u, info = msc.solve(L, np.ones((large,) * 3), h=0.1, full_output=True)
    assert info.method == "cg" and info["solver"] == "multigrid-cg"
    check_residual(L, u, np.ones((large,) * 3), 1e-8, h=0.1)


@pytest.mark.parametrize("method", ["backward_euler", "crank_nicolson"])
def test_implicit_steps_with_multigrid_match_the_factored_steps(method):
    L = divergence_form()
    n = 15
    h = 1.0 / (n + 1)
    k = 1.0 + np.random.default_rng(0).random((n + 2,) * 3)
    u0 = np.zeros((n + 2,) * 3)
    u0[1:-1, 1:-1, 1:-1] = np.random.default_rng(1).random((n,) * 3)
    dt = 20 * h * h
    mg = msc.implicit(L, dt, method, shape=u0.shape, k=k, h=h, solver="multigrid", tol=1e-11)
    direct = msc.implicit(L, dt, method, shape=u0.shape, k=k, h=h)
    a, b = mg.run(steps=3, u=u0)["u"], direct.run(steps=3, u=u0)["u"]
    assert mg.solver == "multigrid-cg" and len(mg.iterations) == 3 and "multigrid-cg" in repr(mg)
    assert np.abs(a - b).max() <= 1e-8 * np.abs(b).max()


@pytest.mark.parametrize("boundary,n", [("dirichlet", 19), ("periodic", 18)])
def test_chebyshev_smoother_converges_in_fewer_iterations(boundary, n):
    L = laplacian(3, boundary, shift=0.0 if boundary == "dirichlet" else 5.0)
    rhs = np.random.default_rng(n).random((n,) * 3)
    h = 1.0 / (n + 1)
    u, cheb = msc.solve(L, rhs, h=h, method="cg", smoother="chebyshev", full_output=True)
    check_residual(L, u, rhs, 1e-8, h=h)
    _, jacobi = msc.solve(L, rhs, h=h, method="cg", full_output=True)
    assert cheb.iterations <= jacobi.iterations
    with pytest.raises(msc.StencilArgumentError, match="smoother must be one of 'jacobi', 'chebyshev'"):
        msc.solve(L, rhs, h=h, method="cg", smoother="sor")


def test_progress_shows_the_residual_falling(capsys):
    L = laplacian(2)
    u = msc.solve(L, np.ones((40, 40)), h=0.1, method="cg", progress=True)
    err = capsys.readouterr().err
    assert "msc.solve with operator 'lap2d' (multigrid-cg): iteration 1, residual" in err and "100%" in err
    check_residual(L, u, np.ones((40, 40)), 1e-8, h=0.1)
    msc.solve(L, np.ones((40, 40)), h=0.1, method="cg")
    assert capsys.readouterr().err == ""  # silent unless asked


@pytest.mark.parametrize("shape", [(7,), (5, 9), (4, 6, 11)])
def test_compiled_vector_operations_match_numpy(shape):
    """The solvers' fused vector updates, and copies between flat vectors and buffer views."""
    from msc.pde.vectors import Vectors, gather, scatter

    rng = np.random.default_rng(sum(shape))
    x, p, r, q, z = (rng.random(int(np.prod(shape))) for _ in range(5))
    v = Vectors(threads=2)
    assert np.isclose(v.dot(p, q), p @ q)
    r1 = r - 0.3 * q
    assert np.isclose(v.residual_update(0.3, r, q), r1 @ r1) and np.allclose(r, r1)
    x1, p1 = x + 0.3 * p, z + 0.7 * p
    v.cg_step(0.3, x, z, 0.7, p)
    assert np.allclose(x, x1) and np.allclose(p, p1)
    buffer = rng.random(tuple(n + 2 for n in shape))
    view = buffer[tuple(slice(1, 1 + n) for n in shape)]
    flat = np.empty(view.size)
    gather(view, flat, threads=2)
    assert np.array_equal(flat, view.ravel())
    around = buffer.copy()
    scatter(x, view, threads=2)
    around[tuple(slice(1, 1 + n) for n in shape)] = x.reshape(shape)
    assert np.array_equal(buffer, around)
    with pytest.raises(ValueError, match="C-contiguous"):
        gather(view, np.empty((view.size, 2))[:, 0], threads=1)
    # CG's operations with one operand a view into a buffer (its kernels' results, read in place)
    flat_view = view.ravel()
    assert np.isclose(v.dot(p, view), p @ flat_view) and np.isclose(v.dot(view, p), p @ flat_view)
    r2 = r - 0.3 * flat_view
    assert np.isclose(v.residual_update(0.3, r, view), r2 @ r2) and np.allclose(r, r2)
    x2, p2 = x + 0.3 * p, flat_view + 0.7 * p
    v.cg_step(0.3, x, view, 0.7, p)
    assert np.allclose(x, x2) and np.allclose(p, p2)
    # ... and several views at once (CG's residual and direction in buffers too)
    other = rng.random(buffer.shape)[tuple(slice(1, 1 + n) for n in shape)]
    assert np.isclose(v.dot(view, other), flat_view @ other.ravel())
    r3 = other.ravel() - 0.3 * flat_view
    assert np.isclose(v.residual_update(0.3, other, view), r3 @ r3) and np.allclose(other.ravel(), r3)
    direction = rng.random(buffer.shape)[tuple(slice(1, 1 + n) for n in shape)]
    x4, d4 = x + 0.3 * direction.ravel(), flat_view + 0.7 * direction.ravel()
    v.cg_step(0.3, x, view, 0.7, direction)
    assert np.allclose(x, x4) and np.allclose(direction.ravel(), d4)
    x5 = x + 0.2 * direction.ravel()
    v.axpy(0.2, direction, x)
    assert np.allclose(x, x5)
    v.scale(2.0, view, x)  # GMRES's copies out of the kernel buffers
    assert np.allclose(x, 2.0 * flat_view)


def test_an_operator_with_a_source_term_solves_as_the_direct_solve_does():
    """L(u) = A u + g with g != 0: the constant part is folded into b, and the V-cycle's first sweep
    from zero (which otherwise reads only b) must not count it twice."""
    @msc.operator(name="lap_source")
    def lap(u, h):
        return (u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y]) / h**2 + 3.0

    n = 40
    rhs = np.random.default_rng(5).random((n, n))
    direct = msc.solve(lap, rhs, shape=(n + 2, n + 2), h=1.0 / (n + 1), method="direct")
    mg, info = msc.solve(lap, rhs, shape=(n + 2, n + 2), h=1.0 / (n + 1), method="multigrid", tol=1e-11,
                         full_output=True)
    assert np.allclose(mg, direct, rtol=0, atol=1e-8 * np.abs(direct).max())
    assert info.iterations <= 12


@pytest.mark.parametrize("shape", [(9,), (5, 9), (4, 6, 11)])
def test_vector_operations_take_single_precision_operands(shape):
    """The V-cycle's result z and right-hand side may be float32 views: dot, cg_step, scale, gather and
    scatter read or write them as such (the sums in double), the others stay float64."""
    from msc.pde.vectors import Vectors, gather, scatter

    rng = np.random.default_rng(len(shape))
    x, p, r = (rng.random(int(np.prod(shape))) for _ in range(3))
    buffer = rng.random(tuple(n + 2 for n in shape)).astype(np.float32)
    z = buffer[tuple(slice(1, 1 + n) for n in shape)]
    z64 = z.astype(np.float64).ravel()
    v = Vectors(threads=2)
    assert np.isclose(v.dot(r, z), r @ z64, rtol=1e-12) and np.isclose(v.dot(z, r), r @ z64, rtol=1e-12)
    flat32 = z.ravel().copy()
    assert np.isclose(v.dot(r, flat32), r @ z64, rtol=1e-12)  # both flat
    x1, p1 = x + 0.3 * p, z64 + 0.7 * p
    v.cg_step(0.3, x, z, 0.7, p)
    assert np.allclose(x, x1, rtol=1e-14) and np.allclose(p, p1, rtol=1e-14)
    out = np.empty(z.size)
    v.scale(2.0, z, out)
    assert np.array_equal(out, 2.0 * z64)
    gather(z, out, threads=2)
    assert np.array_equal(out, z64)
    around = buffer.copy()
    scatter(r, z, threads=2)
    around[tuple(slice(1, 1 + n) for n in shape)] = r.reshape(shape)  # rounded to float32 as numpy does
    assert np.array_equal(buffer, around)
    q = rng.random(r.size)
    r1 = r - 0.3 * q
    assert np.isclose(v.residual_update(0.3, r, q, into=z), r1 @ r1, rtol=1e-12) and np.allclose(r, r1, rtol=1e-14)
    assert np.array_equal(z, r1.reshape(shape).astype(np.float32))  # CG's residual, into the V-cycle's b
    with pytest.raises(ValueError, match="float64 or float32"):
        v.scale(1.0, z.astype(np.float16), out)


@pytest.mark.parametrize("shape,kept", [((9,), ()), ((8, 6), (1,)), ((6, 12, 7), ())])
def test_single_precision_transfers_match_double_ones(shape, kept):
    rng = np.random.default_rng(sum(shape))
    axes = [None if d in kept else Axis1D.of(n, False) for d, n in enumerate(shape)]
    t = Transfer(shape, axes)
    fine = rng.random(shape)
    coarse64, coarse32 = np.empty(t.coarse), np.empty(t.coarse, np.float32)
    t.restrict(fine, coarse64, threads=2)
    t.restrict(fine.astype(np.float32), coarse32, threads=2)
    assert np.allclose(coarse32, coarse64, rtol=1e-6, atol=0)
    into64, into32 = fine.copy(), fine.astype(np.float32)
    t.prolong_add(coarse64, into64, threads=2)
    t.prolong_add(coarse32, into32, threads=2)
    assert np.allclose(into32, into64, rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="fine array is float32 and the coarse array float64"):
        t.restrict(fine.astype(np.float32), coarse64, threads=1)


@pytest.mark.parametrize("ndim,n,kind", [(3, 30, "constant"), (3, 21, "variable"), (2, 63, "constant"),
                                         (2, 40, "periodic")])
def test_a_single_precision_v_cycle_takes_the_iterations_of_a_double_one(ndim, n, kind, monkeypatch):
    """The V-cycle of a linear operator runs in float32 under a float64 Krylov method: the solution
    meets tol on its float64 true residual, with the iterations a float64 V-cycle takes (within one),
    down to tolerances far below float32's precision."""
    from msc.pde import iterative

    if kind == "variable":
        L = divergence_form()
        X, Y, Z = np.meshgrid(*[np.linspace(0, 1, n + 2)] * 3, indexing="ij")
        inputs = {"k": np.where((abs(X - 0.5) < 0.2) & (abs(Y - 0.4) < 0.3), 100.0, 1.0), "h": 1.0 / (n + 1)}
    else:
        L = laplacian(ndim, "periodic" if kind == "periodic" else "dirichlet", shift=5.0 if kind == "periodic" else 0.0)
        inputs = {"h": 1.0 / (n + 1)}
    rhs = np.random.default_rng(n).random((n,) * ndim)
    counts = {}
    for dtype in ("float64", "float32"):
        monkeypatch.setattr(iterative, "PRECONDITIONER_DTYPE", dtype)
        solver = iterative.IterativeSolver(L, (n + 2,) * ndim if kind != "periodic" else (n,) * ndim, inputs, 0.0,
                                           1.0, "multigrid", 1e-12, None, "test")
        assert all(level.op.dtype == dtype for level in solver.mg.levels if level.op is not None)
        assert solver.fine.dtype == np.float64
        u, history = solver.solve(rhs.reshape(-1))
        counts[dtype] = len(history) - 1
        assert history[-1] <= 1e-12
        check_residual(L, _whole(u, n, ndim, kind), rhs, 1e-12, **inputs)
    assert abs(counts["float32"] - counts["float64"]) <= 1


def _whole(u, n, ndim, kind):
    if kind == "periodic":
        return u.reshape((n,) * ndim)
    out = np.zeros((n + 2,) * ndim)
    out[(slice(1, -1),) * ndim] = u.reshape((n,) * ndim)
    return out


def test_an_operator_with_a_constant_part_keeps_a_double_precision_v_cycle():
    from msc.pde.iterative import IterativeSolver

    @msc.operator(name="lap_source32")
    def lap(u, h):
        return (u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y]) / h**2 + 3.0

    plain = laplacian(2, "dirichlet", shift=0.0)
    assert IterativeSolver(lap, (42, 42), {"h": 0.1}, 0.0, 1.0, "multigrid", 1e-8, None, "t").mg.levels[0].op.dtype \
        == np.float64
    assert IterativeSolver(plain, (42, 42), {"h": 0.1}, 0.0, 1.0, "multigrid", 1e-8, None, "t").mg.levels[0].op.dtype \
        == np.float32


def test_operators_of_one_stencil_share_its_kernels_whatever_their_threads():
    """A level's kernels are built once per process: a later operator of the same stencil, on any
    thread count, finds them built (so a solve's setup starts no build threads for them)."""
    coefs = {(0, 0): np.asarray(-5.0), (1, 0): np.asarray(1.0), (-1, 0): np.asarray(1.0), (0, 1): np.asarray(1.0),
             (0, -1): np.asarray(1.0), (2, 0): np.asarray(0.5), (-2, 0): np.asarray(0.5)}  # this test's own stencil
    a = from_coefficients(coefs, (9, 11), False, True, "openmp", 1)
    a.u[...] = 1.0
    first = a.residual().copy()
    b = from_coefficients(coefs, (9, 11), False, True, "openmp", 2)
    assert b.unbuilt(("residual",)) == [] and b.kernels["residual"].kernel is a.kernels["residual"].kernel
    b.u[...] = 1.0
    assert np.array_equal(b.residual(), first)
    c = from_coefficients(coefs, (9, 11), False, True, "openmp", 2, dtype="float32")
    assert c.unbuilt(("residual",)) == [c.kernels["residual"]]  # another type: another kernel


@pytest.mark.parametrize("scale", [1e-100, 1e-36, 1e36, 1e100])
def test_the_right_hand_side_s_scale_changes_nothing_but_the_solution_s(scale):
    """CG runs on b / ||b||, so the float32 V-cycle sees values of order one whatever b's scale."""
    L, n = laplacian(3), 18
    rhs = np.random.default_rng(7).random((n,) * 3)
    u1, one = msc.solve(L, rhs, h=1.0 / (n + 1), method="multigrid", tol=1e-10, full_output=True)
    u, info = msc.solve(L, rhs * scale, h=1.0 / (n + 1), method="multigrid", tol=1e-10, full_output=True)
    assert info.iterations == one.iterations and info.residuals[-1] <= 1e-10
    assert np.allclose(u, u1 * scale, rtol=1e-8, atol=0)


def test_a_diagonal_float32_cannot_hold_keeps_a_double_precision_v_cycle():
    from msc.pde.iterative import IterativeSolver

    L, n = laplacian(3), 14
    huge = IterativeSolver(L, (n + 2,) * 3, {"h": 1e-17}, 0.0, 1.0, "multigrid", 1e-10, None, "t")  # diagonal 6e34
    assert huge.mg.levels[0].op.dtype == np.float64
    u, history = huge.solve(np.ones(n**3))
    assert history[-1] <= 1e-10
    assert IterativeSolver(L, (n + 2,) * 3, {"h": 1e-3}, 0.0, 1.0, "multigrid", 1e-10, None, "t").mg.levels[0] \
        .op.dtype == np.float32


@pytest.mark.parametrize("method", ["multigrid", "cg"])
def test_the_solution_is_the_same_on_any_number_of_threads(method, monkeypatch):
    """The thread count follows the machine's load; the solvers' dot products add in fixed chunks
    (vectors.c), so a solve on 1 thread and on 2 give the same bits."""
    from msc.runtime import threads

    L, n = laplacian(2), 65
    rhs = np.random.default_rng(9).random((n, n))
    solutions = []
    for count in (1, 2):
        monkeypatch.setattr(threads, "free_cores", lambda *args, _count=count, **kwargs: _count)
        solutions.append(msc.solve(L, rhs, h=1.0 / (n + 1), method=method))
    assert np.array_equal(solutions[0], solutions[1])


def test_values_inside_the_given_unknown_do_not_change_the_solution():
    """u= gives the ring; whatever its interior holds, the solve starts from zero there."""
    L, n = laplacian(2), 33
    rhs = np.random.default_rng(9).random((n, n))
    ring = np.zeros((n + 2, n + 2))
    ring[0] = 1.0
    filled = ring.copy()
    filled[1:-1, 1:-1] = np.random.default_rng(10).random((n, n)) * 1e3
    clean = msc.solve(L, rhs, h=1.0 / (n + 1), method="multigrid", u=ring)
    assert np.array_equal(msc.solve(L, rhs, h=1.0 / (n + 1), method="multigrid", u=filled), clean)
    assert np.array_equal(filled[1:-1, 1:-1] != 0, np.ones((n, n), bool))  # the caller's array is not touched


@pytest.mark.parametrize("n, dims, periodic", [((256, 256, 256), (2, 2, 2), False), ((37, 36, 35), (2, 2, 1), False),
                                               ((128, 96), (4, 1), True), ((126, 96), (4, 1), True),
                                               ((130, 99), (3, 2), False), ((64, 64, 64), (8, 2, 1), False),
                                               ((256, 256, 256), (4, 4, 4), False), ((96, 80), (3, 5), True)])
def test_coarse_levels_in_blocks_are_the_coarse_centres_of_the_blocks_above(n, dims, periodic):
    """Over MPI ranks each coarse level in blocks gives every rank that holds it the coarse points
    centred in its blocks above (its own, or its children's where the level agglomerates onto fewer
    ranks: the process grid halved along its most split axis), its levels are one process's, and it
    keeps at least `least` points per rank and blocks of 2 points, else stops on rank 0."""
    from msc.pde import multigrid
    from msc.pde.distributed import coarse_plan, even_bounds

    plan = coarse_plan(n, dims, periodic, radius=1, least=64)
    shape, above_dims, bounds, shift = n, dims, even_bounds(n, dims), (0,) * len(n)
    base = 0 if periodic else 1
    for planned in plan:
        assert planned.n == tuple(Axis1D.of(m, periodic).m for m in shape)  # as one process coarsens
        for axis in range(len(n)):
            merged = planned.shift[axis] - shift[axis]  # halvings of the process grid along the axis
            assert merged >= 0 and planned.dims[axis] == -(-above_dims[axis] // (1 << merged))
            centres = np.array([c for c in range(planned.n[axis]) if 0 <= 2 * c + base < shape[axis]])
            for parent in range(planned.dims[axis]):
                children = [k for k in range(above_dims[axis]) if k >> merged == parent]
                lo, hi = bounds[axis][children[0]], bounds[axis][children[-1] + 1]
                mine = centres[(2 * centres + base >= lo) & (2 * centres + base < hi)]
                assert planned.bounds[axis][parent:parent + 2] == (first_centre(lo, base), first_centre(hi, base)) \
                    == (mine[0], mine[-1] + 1)
        assert int(np.prod(planned.n)) > multigrid.COARSEST
        assert int(np.prod(planned.n)) >= 64 * int(np.prod(planned.dims)) and min(
            b1 - b0 for axis in planned.bounds for b0, b1 in zip(axis, axis[1:])) >= 2
        shape, above_dims, bounds, shift = planned.n, planned.dims, planned.bounds, planned.shift
    assert coarse_plan(n, (1,) * len(n), periodic, radius=1, least=1) == []  # one rank
    if (n, dims) == ((256, 256, 256), (2, 2, 2)):  # 128^3, 64^3, 32^3 in blocks; 16^3 has 512 points per rank
        assert [(p.n, p.dims) for p in coarse_plan(n, dims, periodic, radius=1)] == [
            ((128,) * 3, dims), ((64,) * 3, dims), ((32,) * 3, dims)]
    if (n, dims) == ((256, 256, 256), (4, 4, 4)):  # 32^3 has 512 points on each of 64 ranks: onto 8 of them
        assert [(p.n, p.dims, p.shift) for p in coarse_plan(n, dims, periodic, radius=1)] == [
            ((128,) * 3, dims, (0, 0, 0)), ((64,) * 3, dims, (0, 0, 0)), ((32,) * 3, (2, 2, 2), (1, 1, 1))]
    if n == (64, 64, 64):  # 8 ranks along x: 32 points are blocks of 4, 16 would be blocks of 2: both thin enough
        assert [(p.n, p.dims) for p in plan[:2]] == [((32,) * 3, dims), ((16,) * 3, dims)]
        assert [(p.n, p.dims) for p in coarse_plan(n, dims, periodic, radius=3, least=64)[:2]] == [
            ((32,) * 3, dims), ((16,) * 3, (4, 2, 1))]  # blocks of 4 where radius 3 needs 3


def test_cg_that_breaks_down_says_so():
    """p'Ap = 0 (a singular operator the constants check does not see) is a ConvergenceError naming the
    breakdown, not a division by zero."""
    from msc.pde.krylov import cg
    from msc.pde.vectors import Vectors

    b = np.random.default_rng(5).random(64)
    with pytest.raises(msc.ConvergenceError, match="CG broke down after 0 iterations"):
        cg(lambda p: np.zeros_like(p), lambda r: r.copy(), b, 1e-8, 10, "a test", Vectors(threads=1))
