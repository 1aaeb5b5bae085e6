"""Geometric multigrid for a scalar operator on a structured grid: the hierarchy and its V-cycle.

Level 0 is the operator itself, applied matrix-free by compiled stencils
(msc.pde.matfree). Each coarser level halves every axis that still has room
(msc.pde.coarsen: odd and even sizes, dirichlet and periodic); its operator is
the Galerkin product R A P, kept as a coefficient stencil and compiled too. The
coarsest level (at most COARSEST unknowns, or when no axis can halve) is
assembled from its coefficients and factored (swCholesky when SPD). Smoothing
is weighted Jacobi, omega = 4 / (3 rho) with rho a Gershgorin bound on the
spectral radius of D^-1 A per level (2/3 for the Laplacian): `sweeps` sweeps
before and after the coarse correction, so the V-cycle is symmetric and serves
as CG's preconditioner.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from msc.errors import StencilArgumentError
from msc.pde.coarsen import (
    Axis1D,
    Coefficients,
    diagonal,
    galerkin_axis,
    gershgorin_ratio,
    prolong_axis,
    restrict_axis,
    sparse_matrix,
)
from msc.pde.direct import Factorization
from msc.pde.matfree import CompiledOperator, from_coefficients

COARSEST = 2000


@dataclass
class Level:
    """One grid: its operator, and the transfers to the next coarser grid (None: axis kept)."""

    shape: tuple[int, ...]
    op: CompiledOperator | None
    axes: list[Axis1D | None]


def _axes(shape: tuple[int, ...], periodic: bool) -> list[Axis1D | None]:
    least = 6 if periodic else 3
    return [Axis1D.of(n, periodic) if n >= least else None for n in shape]


def _coarser(shape: tuple[int, ...], axes: list[Axis1D | None]) -> tuple[int, ...]:
    return tuple(ax.m if ax is not None else n for n, ax in zip(shape, axes))


class Multigrid:
    """The hierarchy below `fine` (whose coefficient stencil is `coefs`, on `shape` unknowns)."""

    def __init__(self, fine: CompiledOperator, coefs: Coefficients, shape: tuple[int, ...], periodic: bool,
                 what: str, symmetric: bool, sweeps: int = 2, target: str = "openmp", threads: int | None = None) -> None:
        if not isinstance(sweeps, int) or isinstance(sweeps, bool) or sweeps < 1:
            raise StencilArgumentError(f"{what}: sweeps must be a positive integer, got {sweeps!r}")
        start = time.perf_counter()
        self.sweeps = sweeps
        self.levels: list[Level] = []
        op: CompiledOperator | None = fine
        while True:
            axes = _axes(shape, periodic)
            coarse = _coarser(shape, axes)
            if int(np.prod(shape)) <= COARSEST or coarse == shape:
                break  # the coarsest level: solved directly
            if op is None:
                op = from_coefficients(coefs, shape, periodic, symmetric, target, threads)
            self._smoothing(op, coefs, shape, what)
            self.levels.append(Level(shape, op, axes))
            for d, ax in enumerate(axes):
                if ax is not None:
                    coefs = galerkin_axis(coefs, self._partial(shape, axes, d), d, ax)
            shape, op = coarse, None
        self.levels.append(Level(shape, None, []))
        self.coarse = Factorization()
        self.coarse.factor(sparse_matrix(coefs, shape, periodic), f"{what} (coarsest multigrid level)")
        self.setup_s = time.perf_counter() - start

    @staticmethod
    def _partial(shape: tuple[int, ...], axes: list[Axis1D | None], d: int) -> tuple[int, ...]:
        """The grid while coarsening axis d: axes before d already coarse."""
        return tuple(ax.m if ax is not None and k < d else n for k, (n, ax) in enumerate(zip(shape, axes)))

    @staticmethod
    def _smoothing(op: CompiledOperator | None, coefs: Coefficients, shape: tuple[int, ...], what: str) -> None:
        if op is None:
            return
        diag = diagonal(coefs, shape)
        if np.any(diag == 0):
            raise StencilArgumentError(f"{what}: multigrid's Jacobi smoother needs a nonzero diagonal; the operator "
                                       "has a zero on it: use method='direct'")
        omega = 4.0 / (3.0 * gershgorin_ratio(coefs, shape))
        op.set_weight(omega / diag)

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        return [level.shape for level in self.levels]

    def vcycle(self, b: np.ndarray) -> np.ndarray:
        """One V-cycle from zero for A x = b (b over the fine grid): x ~ A^-1 b (a fresh array)."""
        return self._cycle(0, b).copy()

    def _cycle(self, k: int, b: np.ndarray) -> np.ndarray:
        level = self.levels[k]
        if level.op is None:
            return self.coarse.solve(b.reshape(-1)).reshape(level.shape)
        op = level.op
        op.u[...] = 0.0
        op.set_rhs(b)
        op.sweep(self.sweeps)
        r = op.residual()
        for d, ax in enumerate(level.axes):
            if ax is not None:
                r = restrict_axis(r, d, ax)
        e = self._cycle(k + 1, r)
        coarsened = [d for d, ax in enumerate(level.axes) if ax is not None]
        for d in coarsened:  # the last one adds the correction into u
            e = prolong_axis(e, d, level.axes[d], op.u if d == coarsened[-1] else None)  # type: ignore[arg-type]
        op.sweep(self.sweeps)
        return op.u
