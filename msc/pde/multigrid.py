"""Geometric multigrid for a scalar operator on a structured grid: the hierarchy and its V-cycle.

Level 0 is the operator itself, applied matrix-free by compiled stencils
(msc.pde.matfree). Each coarser level halves every axis that still has room
(msc.pde.coarsen: odd and even sizes, dirichlet and periodic); its operator is
the Galerkin product R A P, kept as a coefficient stencil and compiled too; R
and P are compiled as well (msc.pde.transfer) and move values between the
levels' kernel buffers directly. The coarsest level (at most COARSEST
unknowns, or when no axis can halve) is assembled from its coefficients and
factored (swCholesky when SPD). Smoothing is weighted Jacobi, omega = 4d /
((2d + 1) rho) on a d-dimensional grid with rho a Gershgorin bound on the
spectral radius of D^-1 A per level (`jacobi_weight`), and from 2 sweeps on
one weight per sweep, the reciprocals of Chebyshev nodes (`jacobi_scales`):
`sweeps` sweeps before and after the coarse correction, the same polynomial
in D^-1 A, so the V-cycle is symmetric and serves as CG's preconditioner.
Every level runs in the fine operator's element type (float32 for the
iterative solvers' V-cycle, msc.pde.iterative); the coarsest solve in float64.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from msc.errors import StencilArgumentError
from msc.pde.coarsen import Axis1D, Coefficients, diagonal, galerkin, gershgorin_ratio, sparse_matrix
from msc.pde.direct import Factorization
from msc.pde.matfree import CompiledOperator, from_coefficients
from msc.pde.nullspace import PinnedFactorization
from msc.pde.transfer import Transfer
from msc.pde.vectors import gather
from msc.runtime.build import side_by_side

COARSEST = 2000
SMOOTHERS = ("jacobi", "chebyshev")
CHEBYSHEV_RATIO = 4.0
CHEBYSHEV_SPAN = 5.0  # Jacobi's per-sweep weights aim at [rho / CHEBYSHEV_SPAN, rho] (`jacobi_scales`)


@dataclass
class Level:
    """One grid: its operator, and the transfers to the next coarser grid (axes None: axis kept)."""

    shape: tuple[int, ...]
    op: CompiledOperator | None
    axes: list[Axis1D | None]
    transfer: Transfer | None = None
    inverse_diagonal: np.ndarray | None = None
    rho: float = 0.0  # a Gershgorin bound of the spectral radius of D^-1 A


def check_smoother(what: str, smoother: Any) -> None:
    """StencilArgumentError unless `smoother` is one of SMOOTHERS."""
    if smoother not in SMOOTHERS:
        raise StencilArgumentError(f"{what}: smoother must be one of {', '.join(map(repr, SMOOTHERS))}, "
                                   f"got {smoother!r}")


def jacobi_weight(rho: float, ndim: int) -> float:
    """Jacobi's omega for D^-1 A with spectrum in (0, rho]: the weight that damps [rho / 2d, rho], the
    upper part of the spectrum a coarse grid cannot represent, as evenly as it can (2 / (rho / 2d + rho);
    for the Laplacian, rho = 2: 2/3 in 1D, 4/5 in 2D, 6/7 in 3D, the classical optimal smoothing weights)."""
    return 4.0 * ndim / ((2 * ndim + 1) * rho)


def jacobi_scales(ndim: int, sweeps: int) -> tuple[float, ...]:
    """Each sweep's factor on `jacobi_weight`: from 2 sweeps on, the sweeps' weights are the reciprocals
    of the Chebyshev nodes of [rho / CHEBYSHEV_SPAN, rho], so that their product is the Chebyshev
    polynomial of that interval. Measured (CG to 1e-8), against one weight for every sweep:
    - 3D Poisson 64^3-160^3, 3 sweeps: 5 iterations instead of 6 (V-cycle factor 0.022-0.024
      instead of 0.037-0.040); on [rho / 6, rho] it stayed at 6;
    - implicit steps I - dt L, 3D 96^3, 2 sweeps: dt/h^2 = 1, 10, 100: 5, 6, 6 instead of 7, 7, 8;
    - div(k grad u), 2 sweeps: 3D 96^3 with a lognormal k 8 instead of 9, 2D 1023^2 7 as before.
    One sweep keeps the one weight. The factors do not depend on rho."""
    if sweeps < 2:
        return (1.0,) * sweeps
    reference = jacobi_weight(1.0, ndim)
    low = 1.0 / CHEBYSHEV_SPAN
    angles = [(2 * k - 1) * math.pi / (2 * sweeps) for k in range(1, sweeps + 1)]
    return tuple(1.0 / (((1 + low) / 2 + (1 - low) / 2 * math.cos(a)) * reference) for a in angles)


def _axes(shape: tuple[int, ...], periodic: bool) -> list[Axis1D | None]:
    least = 6 if periodic else 3
    return [Axis1D.of(n, periodic) if n >= least else None for n in shape]


def _coarser(shape: tuple[int, ...], axes: list[Axis1D | None]) -> tuple[int, ...]:
    return tuple(ax.m if ax is not None else n for n, ax in zip(shape, axes))


class Multigrid:
    """The hierarchy below `fine` (whose coefficient stencil is `coefs`, on `shape` unknowns)."""

    def __init__(self, fine: CompiledOperator, coefs: Coefficients, shape: tuple[int, ...], periodic: bool,
                 what: str, symmetric: bool, sweeps: int = 2, target: str = "openmp",
                 smoother: str = "jacobi", applied: CompiledOperator | None = None, pinned: bool = False) -> None:
        """`pinned`: the coarsest level is singular by the constants (msc.pde.nullspace): factor it with an
        unknown pinned."""
        if not isinstance(sweeps, int) or isinstance(sweeps, bool) or sweeps < 1:
            raise StencilArgumentError(f"{what}: sweeps must be a positive integer, got {sweeps!r}")
        check_smoother(what, smoother)
        start = time.perf_counter()
        self.sweeps, self.smoother = sweeps, smoother
        self.levels: list[Level] = []
        op: CompiledOperator | None = fine
        while True:
            axes = _axes(shape, periodic)
            coarse = _coarser(shape, axes)
            if int(np.prod(shape)) <= COARSEST or coarse == shape:
                break  # the coarsest level: solved directly
            if op is None:  # on the fine level's threads: one count for the whole hierarchy, looked up once
                op = from_coefficients(coefs, shape, periodic, symmetric, target, fine.threads, fine.dtype.name)
            self.levels.append(self._smoothing(Level(shape, op, axes, Transfer(shape, axes)), coefs, what))
            coefs, shape = galerkin(coefs, shape, axes)
            op = None
        self.levels.append(Level(shape, None, []))
        for level in self.levels[:-1]:
            assert level.op is not None
            level.op.set_scales(jacobi_scales(len(level.shape), sweeps))
        self.coarse = PinnedFactorization() if pinned else Factorization()
        self.coarse.factor(sparse_matrix(coefs, shape, periodic), f"{what} (coarsest multigrid level)")
        side_by_side([lambda lazy=lazy: lazy.kernel for lazy in self._kernels_to_build(applied or fine)])
        self.setup_s = time.perf_counter() - start

    def _kernels_to_build(self, applied: CompiledOperator) -> list[Any]:
        """The kernels the solve will run that are not built yet: each level's residual and (Jacobi)
        smoothing kernels, and the operator the Krylov method applies (`applied`)."""
        out = applied.unbuilt(("apply",))
        for level in self.levels:
            if level.op is not None:
                jacobi = (level.op.jacobi_kinds[0], *level.op.from_zero_kinds(self.sweeps))
                kinds = ("residual", *(jacobi if self.smoother == "jacobi" else ()))
                out += level.op.unbuilt(tuple(dict.fromkeys(kinds)))
        return out

    @staticmethod
    def _smoothing(level: Level, coefs: Coefficients, what: str) -> Level:
        """The level with its smoother's data: Jacobi weights omega / diag in the kernels, D^-1 and rho."""
        diag = diagonal(coefs, level.shape)
        if np.any(diag == 0):
            raise StencilArgumentError(f"{what}: multigrid's smoothers need a nonzero diagonal; the operator "
                                       "has a zero on it: use method='direct'")
        level.rho = gershgorin_ratio(coefs, level.shape)
        level.inverse_diagonal = 1.0 / diag
        assert level.op is not None
        level.op.set_weight(jacobi_weight(level.rho, len(level.shape)) / diag)
        return level

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        return [level.shape for level in self.levels]

    def cycled(self, b: np.ndarray | None) -> np.ndarray:
        """One V-cycle from zero for A x = b (b over the fine grid; None: b is in the fine level's
        `rhs` already): x ~ A^-1 b, as a view into the fine level's kernel buffers (valid until its
        next kernel call), or the coarsest solve's array."""
        first = self.levels[0]
        if first.op is None:
            assert b is not None
            return self.coarse.solve(b.reshape(-1)).reshape(first.shape)
        if b is not None:
            first.op.set_rhs(b)
        return self._cycle(0)

    def vcycle(self, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """One V-cycle as `cycled`, into `out` if given, else a fresh array."""
        first = self.levels[0]
        out = np.empty(first.shape) if out is None else out
        x = self.cycled(b)
        if first.op is None:
            out[...] = x
        else:
            gather(x, out, first.op.threads)
        return out

    def _cycle(self, k: int) -> np.ndarray:
        """The V-cycle from level k down, for the right-hand side already in level k's buffers."""
        level, below = self.levels[k], self.levels[k + 1]
        op, transfer = level.op, level.transfer
        assert op is not None and transfer is not None
        if self.smoother == "jacobi":
            op.sweep_from_zero(self.sweeps)
        else:
            op.u[...] = 0.0
            smooth(level, self.smoother, self.sweeps)
        r = op.residual()
        if below.op is None:
            coarse = transfer.restrict(r, np.empty(below.shape, r.dtype), op.threads)
            e = self.coarse.solve(coarse.reshape(-1).astype(np.float64)).reshape(below.shape).astype(r.dtype)
        else:
            transfer.restrict(r, below.op.rhs, op.threads)
            e = self._cycle(k + 1)
        transfer.prolong_add(e, op.u, op.threads)
        smooth(level, self.smoother, self.sweeps)
        return op.u


def smooth(level: Level, smoother: str, sweeps: int, one_at_a_time: bool = False) -> None:
    """`sweeps` Jacobi sweeps on the level's u (one kernel call, or one each when halos are exchanged
    between them), or a Chebyshev polynomial of degree `sweeps` in D^-1 A aimed at the upper part of
    its spectrum, [rho / CHEBYSHEV_RATIO, rho]."""
    op = level.op
    assert op is not None and level.inverse_diagonal is not None
    if smoother == "jacobi":
        if one_at_a_time:
            for k in range(sweeps):
                op.sweep(1, k)  # the k-th sweep's weights
        else:
            op.sweep(sweeps)
        return
    hi = level.rho
    lo = hi / CHEBYSHEV_RATIO
    theta, delta = (hi + lo) / 2, (hi - lo) / 2
    sigma = theta / delta
    rho = 1.0 / sigma
    d = level.inverse_diagonal * op.residual() / theta
    for i in range(sweeps):
        op.u[...] += d
        if i == sweeps - 1:
            break
        rho_next = 1.0 / (2.0 * sigma - rho)
        d *= rho_next * rho
        d += (2.0 * rho_next / delta) * level.inverse_diagonal * op.residual()
        rho = rho_next
