"""Iterative solves of alpha*u + beta*L(u) = b for a scalar operator: multigrid-preconditioned Krylov.

The operator is applied matrix-free (compiled stencils, msc.pde.matfree) and
preconditioned by one geometric multigrid V-cycle (msc.pde.multigrid). CG is
used when the operator is symmetric and its diagonal has one sign (the linear
form's coefficients tell: msc.pde.coarsen.is_symmetric), GMRES otherwise.
Every result is checked by its true residual ||b - A x|| / ||b||.

The Krylov method runs in float64; the V-cycle of a linear operator runs in
float32 (PRECONDITIONER_DTYPE: its kernels, buffers and transfers), which
halves the memory traffic of most of an iteration and leaves the iterations
as they were (ADR 0059). CG's vectors are those of b / ||b||, so the V-cycle
sees values of order one whatever b's scale. A float64 hierarchy stays for
an operator with a constant part (a source term in L, folded into b: in
float32 the kernels' K(0) would not cancel to within the tolerance) and for
one whose diagonal leaves SINGLE_DIAGONAL (float32 would overflow or
underflow on the V-cycle's values).
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from msc.errors import ConvergenceError, StencilArgumentError
from msc.pde.assemble import coefficient_stencil
from msc.pde.coarsen import Coefficients, diagonal, gershgorin_ratio, is_symmetric
from msc.pde.krylov import Monitor, cg, gmres
from msc.pde.matfree import CompiledOperator, from_operator
from msc.pde.multigrid import Multigrid
from msc.pde.nullspace import check_annihilates_constants, check_not_singular_by_constants
from msc.pde.vectors import Vectors
from msc.runtime.progress import ResidualProgress
from msc.solvers.numeric import blas_threads

if TYPE_CHECKING:
    from msc.pde.operator import Operator

METHODS = ("auto", "direct", "multigrid", "cg", "gmres")
MAXITER = 200
PRECONDITIONER_DTYPE = "float32"  # the V-cycle's, for a linear operator (module docstring)
SINGLE_DIAGONAL = (1e-30, 1e30)  # ... whose diagonal's magnitudes lie in this range (float32's ends are 1e-38, 3e38)


@dataclass
class SolveInfo:
    """What a solve did: `info.iterations`, `info.residuals` (relative, one per iteration), ...

    Also a read-only mapping of those names (`info["solver"]`, `"solver" in info`, `dict(info)`)."""

    method: str
    solver: str
    iterations: int = 0
    residuals: list[float] = field(default_factory=list)
    levels: list[tuple[int, ...]] = field(default_factory=list)
    setup_s: float = 0.0
    solve_s: float = 0.0
    assembly_s: float = 0.0
    factor_s: float = 0.0
    ranks: int = 1
    halo_bytes_per_iteration: float = 0.0  # over MPI ranks: halo bytes all ranks sent, per Krylov iteration
    halo_face_bytes_per_iteration: float = 0.0  # ... the least of it: faces only (edges and corners left out)
    gather_bytes_per_iteration: float = 0.0  # ... bytes agglomeration moves between ranks (restrictions gathered
    # onto fewer ranks or rank 0, corrections sent back)
    levels_in_blocks: int = 0  # ... the multigrid levels that run in blocks over ranks (the rest on rank 0)
    ranks_per_level: list[int] = field(default_factory=list)  # ... and how many ranks hold each level
    rhs_mean_removed: float = 0.0  # nullspace="constant": the mean taken from the rhs (msc.pde.nullspace)

    def keys(self) -> list[str]:
        return [f.name for f in fields(self)] + ["convergence_factor"]

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    @property
    def convergence_factor(self) -> float:
        """The mean residual reduction per iteration."""
        if self.iterations == 0 or not self.residuals or self.residuals[-1] == 0.0:
            return 0.0
        return float(self.residuals[-1] ** (1.0 / self.iterations))


def check_method(what: str, method: Any, tol: Any, maxiter: Any) -> None:
    if method not in METHODS:
        raise StencilArgumentError(f"{what}: method must be one of {', '.join(map(repr, METHODS))}, got {method!r}")
    if not isinstance(tol, numbers.Real) or isinstance(tol, bool) or not 0 < tol < 1:
        raise StencilArgumentError(f"{what}: tol must be a number between 0 and 1, got {tol!r}")
    if maxiter is not None and (not isinstance(maxiter, numbers.Integral) or isinstance(maxiter, bool)
                                or maxiter < 1):
        raise StencilArgumentError(f"{what}: maxiter must be a positive integer, got {maxiter!r}")


def check_scalar(L: Operator, what: str, method: str, keyword: str = "method") -> None:
    """StencilArgumentError unless `L` has one unknown; `keyword` is the caller's name for `method`."""
    if len(L.ir.unknowns) != 1:
        remedy = (f"use {keyword}='direct'" if keyword in ("method", "solver")
                  else f"{keyword}={method!r} is not available for systems")
        raise StencilArgumentError(
            f"{what}: {keyword} {method!r} solves operators of one unknown; operator '{L.name}' has "
            f"{', '.join(L.ir.unknowns)} (a system): {remedy}")


def preconditioner_dtype(L: Operator, diag: np.ndarray) -> str:
    """The V-cycle's element type (module docstring): PRECONDITIONER_DTYPE for an operator without a
    constant part whose diagonal's magnitudes lie in SINGLE_DIAGONAL, else float64."""
    magnitude = np.abs(diag)
    linear = all(L.linear_forms[u].constant is None for u in L.ir.unknowns)
    if linear and SINGLE_DIAGONAL[0] <= magnitude.min() and magnitude.max() <= SINGLE_DIAGONAL[1]:
        return PRECONDITIONER_DTYPE
    return "float64"


def cg_direction(fine: CompiledOperator, cycled: CompiledOperator) -> tuple[np.ndarray, Callable[[], np.ndarray]]:
    """Where CG's direction p lives in `fine`'s kernel buffers, and A p for it as a view: u's buffers
    when the V-cycle runs on a twin (`cycled`), no more memory than the operator's own; buffers of
    its own when the V-cycle runs on u's."""
    if cycled is fine:
        return fine.direction, fine.applied_direction
    return fine.u, fine.applied_to_u


def cycle_sweeps(coefs: Coefficients, alpha: float) -> int:
    """The smoothing sweeps (Chebyshev: the polynomial's degree) before and after each coarse
    correction: V(3,3) on a constant-coefficient operator without a shift, whose sweeps are cheap
    next to the rest of a CG iteration (3D Poisson 128^3: 6 iterations instead of 8, 15% less time;
    2D 1023^2 the same); V(2,2) otherwise (with coefficient fields or a shift, as fast or faster)."""
    return 3 if all(np.ndim(c) == 0 for c in coefs.values()) and not alpha else 2


class IterativeSolver:
    """alpha*u + beta*L(u) on arrays of `shape` (ring included): setup once, `solve(b)` many times."""

    def __init__(self, L: Operator, shape: tuple[int, ...], inputs: Mapping[str, Any], alpha: float, beta: float,
                 method: str, tol: float, maxiter: int | None, what: str, target: str = "openmp",
                 threads: int | None = None, sweeps: int | None = None, smoother: str = "jacobi",
                 nullspace: bool = False) -> None:
        """`nullspace`: the operator is singular by the constants (msc.pde.nullspace; checked here); the
        right-hand sides given to `solve` must have zero mean."""
        check_scalar(L, what, method)
        start = time.perf_counter()
        self.what, self.tol, self.maxiter = what, float(tol), maxiter or MAXITER
        params = {k: v for k, v in inputs.items() if k in L.ir.coefficients or k in L.ir.params}
        self.n = L.interior_shape(shape)
        periodic = L.ir.boundary == "periodic"
        coefs = {o: beta * c for o, c in coefficient_stencil(L, shape, params).items()}
        zero = (0,) * len(self.n)
        if alpha:
            coefs[zero] = coefs.get(zero, 0.0) + alpha
        self.fine = from_operator(L, shape, params, alpha, beta, target, threads)
        diag = diagonal(coefs, self.n)
        definite = bool(np.all(diag > 0) or np.all(diag < 0))
        symmetric = definite and is_symmetric(coefs, self.n, periodic)
        if method == "cg" and not symmetric:
            raise StencilArgumentError(f"{what}: CG needs a symmetric operator with a one-signed diagonal, and "
                                       f"operator '{L.name}' is not one: use method='gmres'")
        self.krylov = "gmres" if method == "gmres" or not symmetric else "cg"
        if sweeps is None:
            sweeps = cycle_sweeps(coefs, alpha)
        dtype = preconditioner_dtype(L, diag)
        cycled = self.fine  # the V-cycle's fine level
        if dtype != "float64":
            cycled = from_operator(L, shape, params, alpha, beta, target, self.fine.threads, dtype=dtype)
        # before the hierarchy is built: L(1) against ||A||_inf's bound, as below
        scale = gershgorin_ratio(coefs, self.n) * float(np.max(np.abs(diag)))
        ones = self.fine.applied(np.ones(self.n))
        if nullspace:
            check_annihilates_constants(what, ones, scale, symmetric)
        else:
            check_not_singular_by_constants(what, ones, scale)
        self.mg = Multigrid(cycled, coefs, self.n, periodic, what, symmetric, sweeps, target, smoother=smoother,
                            applied=self.fine, pinned=nullspace)
        self._vectors = Vectors(self.fine.threads)  # kept: its scratch vectors serve every solve
        self._direction, self._applied_direction = cg_direction(self.fine, cycled)
        rho = self.mg.levels[0].rho or gershgorin_ratio(coefs, self.n)  # the fine level's, where it smooths
        self._norm = rho * float(np.max(np.abs(diag)))  # >= ||A||_inf
        self.setup_s = time.perf_counter() - start

    @property
    def solver(self) -> str:
        return f"multigrid-{self.krylov}"

    def solve(self, b: np.ndarray, progress: bool = False,
              out: np.ndarray | None = None) -> tuple[np.ndarray, list[float]]:
        """x with ||b - A x|| <= tol ||b|| (checked on the true residual), and the residual history;
        `progress=True` shows a bar on stderr; `out`: where x goes (the interior's shape, zero on
        entry, a view into the whole array may be given: nothing is copied there afterwards);
        default a fresh flat vector.

        BLAS is held to one thread meanwhile: its idle threads spin after each dot product and
        take the cores from the compiled kernels (measured: the kernels ran 5x slower)."""
        with blas_threads().limit(limits=1, user_api="blas"), \
                ResidualProgress(f"{self.what} ({self.solver})", self.tol, progress) as bar:
            return self._solve(b, bar, np.zeros(b.size) if out is None else out)

    def _applied_view(self, v: np.ndarray) -> np.ndarray:
        """A v as a view into the kernel buffers (GMRES's: its vector operations read views in place)."""
        return self.fine.applied(v.reshape(self.n))

    def _applied_to_direction(self, p: np.ndarray) -> np.ndarray:
        """A p for CG's direction p, which lives in the fine operator's buffers (`_direction`), as a view into the
        kernel buffers (CG's vector operations read views in place)."""
        assert p is self._direction
        return self._applied_direction()

    def _cycled_view(self, r: np.ndarray | None) -> np.ndarray:
        """One V-cycle for r (None: r is in the fine level's right-hand side), as a view into the fine
        level's kernel buffers."""
        return self.mg.cycled(None if r is None else r.reshape(self.n))

    def _residual_vector(self, size: int) -> np.ndarray:
        """CG's residual: a vector kept between solves (its memory paged in once per solver)."""
        return self._vectors.scratch("residual", 1, size)[0]

    def _residual_norm(self, x: np.ndarray, b: np.ndarray) -> float:
        """||b - A x||, A x by the operator's kernel on the direction's buffers, b - A x in the residual's
        vector (memory a solve has used already: none is paged in for it)."""
        vectors = self._vectors
        vectors.scale(1.0, x, self._direction)
        r = self._residual_vector(b.size)
        vectors.scale(1.0, b, r)
        return float(np.sqrt(vectors.residual_update(1.0, r, self._applied_direction())))

    def _solve(self, b: np.ndarray, monitor: Monitor, x: np.ndarray) -> tuple[np.ndarray, list[float]]:
        """CG runs on views into the kernel buffers: the operator's and the V-cycle's results are read
        where the kernels wrote them, and the direction lives in the fine operator's buffers."""
        if self.krylov == "cg":
            apply, precondition = self._applied_to_direction, self._cycled_view
            level = self.mg.levels[0].op
            into = level.rhs if level is not None and level.shift is None else None  # b there as is
            method: Any = partial(cg, residual=self._residual_vector(b.size), direction=self._direction,
                                  residual_into=into)
        else:
            method, apply, precondition = gmres, self._applied_view, self._cycled_view
        vectors = self._vectors
        x, history = method(apply, precondition, b, self.tol, self.maxiter, self.what, vectors, monitor, x)
        bnorm = float(np.sqrt(vectors.dot(b, b)))
        true = self._residual_norm(x, b) / bnorm if bnorm else 0.0
        if true > self.tol:  # the recurrence drifted from the true residual: go on from x once
            left = self.maxiter - (len(history) - 1)
            if left < 1:
                raise ConvergenceError(f"{self.what}: the true residual {true:.2e} is above tol={self.tol:g}",
                                       history)
            r = b - self._applied_view(x).reshape(-1)
            dx, more = method(apply, precondition, r, self.tol * bnorm / float(np.linalg.norm(r)),
                              left, self.what, vectors, monitor)
            x += dx.reshape(x.shape)
            history += [h * true for h in more[1:]]
            true = self._residual_norm(x, b) / bnorm
            if true > self.tol:
                raise ConvergenceError(f"{self.what}: the true residual {true:.2e} is above tol={self.tol:g}"
                                       f"{self._floor_hint(x, bnorm)}", history)
        history[-1] = true
        return x, history

    def _floor_hint(self, x: np.ndarray, bnorm: float) -> str:
        """Where tol lies below what float64 can reach for this problem, a sentence saying so: rounding
        in A x alone leaves a relative residual of about eps ||A|| ||x|| / ||b|| (a direct solve's
        residual is of that order too)."""
        floor = np.finfo(np.float64).eps * self._norm * float(np.sqrt(self._vectors.dot(x, x))) / bnorm
        if floor < self.tol:
            return ""
        return (f"; tol is below what float64 reaches for this problem: rounding in A x alone leaves about "
                f"{floor:.1e} (machine epsilon x ||A|| ||x|| / ||b||): ask for a tol above that")
