"""Time stepping and steady solves from one operator.

- `explicit(L, dt, method)`: an ordinary Stencil (StencilIR built from L's
  expressions), so compile/emit/schedules/MPI/tuner apply. Runge-Kutta
  stages are extra fields written each step (state form, so their Dirichlet
  ring is the unknown's ring); the returned stencil fills them from the
  unknowns' arrays when they are not given.
- `implicit(L, dt, method, shape, ...)`: assemble A once, factor
  M = I - theta*dt*A once (swCholesky when symmetric positive definite,
  after a sign flip when negative definite, else scipy's sparse LU), reuse
  the factor every step, refactor with the saved analysis when a parameter
  changes; or (solver="multigrid") solve each step matrix-free.
- `solve(L, rhs, method=...)`: L(u) = rhs for the interior unknowns, directly
  (msc.pde.direct), by multigrid-preconditioned Krylov (msc.pde.iterative),
  or over MPI ranks (msc.pde.distributed).
"""

from __future__ import annotations

import math
import numbers
import reprlib
import time
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from msc import ir
from msc.errors import StencilArgumentError
from msc.pde.assemble import assemble
from msc.pde.direct import Factorization, check_residual
from msc.pde.iterative import IterativeSolver, SolveInfo, check_method, check_scalar
from msc.pde.matfree import from_operator
from msc.pde.multigrid import check_smoother
from msc.pde.nullspace import (
    PinnedFactorization,
    check_annihilates_constants,
    check_not_singular_by_constants,
    check_nullspace,
    projected,
)
from msc.pde.operator import Operator
from msc.pde.problem import checked_problem
from msc.stencil import Stencil

EXPLICIT_METHODS = ("euler", "rk2", "rk4")
IMPLICIT_METHODS = ("backward_euler", "crank_nicolson")
#: unknowns up to which method="auto" solves directly: where direct still takes a few hundredths of a second
#: and multigrid gains little (benchmarks/pde.py --auto-only; docs/pde.md). Direct is exact and takes any
#: operator; multigrid takes over where it is several times faster.
AUTO_DIRECT_LIMIT = {1: 10**7, 2: 40_000, 3: 10_000}


def _check_method(caller: str, method: Any, methods: tuple[str, ...]) -> None:
    if method not in methods:
        raise StencilArgumentError(f"{caller}(): method={method!r} is not one of {', '.join(map(repr, methods))}")


def _checked_dt(caller: str, dt: Any) -> float:
    """The time step `dt` as a float; anything but a positive finite number is an error naming `caller`."""
    if not isinstance(dt, numbers.Real) or isinstance(dt, bool) or not (math.isfinite(dt) and dt > 0):
        raise StencilArgumentError(
            f"{caller}(): dt must be a positive number, the time step of every step; got {reprlib.repr(dt)}"
        )
    return float(dt)


def _c(v: float) -> ir.Const:
    return ir.Const(float(v))


def _plus(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return ir.BinOp("+", a, b)


def _times(a: float, b: ir.Expr) -> ir.Expr:
    return ir.BinOp("*", _c(a), b)


class ExplicitStencil(Stencil):
    """The Stencil of an explicit method; `stages` maps each stage field to its unknown."""

    def __init__(self, stencil_ir: ir.StencilIR, stages: dict[str, str]) -> None:
        super().__init__(None, stencil_ir=stencil_ir)
        self.stages = stages

    def with_stages(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """`inputs` plus each missing stage field, initialised from its unknown's array (ring included)."""
        full = dict(inputs)
        for stage, unknown in self.stages.items():
            if stage not in full:
                u = full.get(unknown)
                full[stage] = u[-1] if isinstance(u, (list, tuple)) else u
        return full

    def strip(self, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: v for k, v in out.items() if k not in self.stages}

    def reference(self, steps: int, dtype: DTypeLike = None, **inputs: Any) -> dict[str, np.ndarray]:
        return self.strip(super().reference(steps, dtype, **self.with_stages(inputs)))

    def compile(self, target: str = "openmp", dtype: DTypeLike = None, threads: int | None = None,
                schedule: Any = None) -> Any:
        kernel = super().compile(target, dtype=dtype, threads=threads, schedule=schedule)
        return kernel if not self.stages else _StageKernel(kernel, self)


class _StageKernel:
    """A compiled kernel that fills in the stage fields of an explicit method."""

    def __init__(self, kernel: Any, st: ExplicitStencil) -> None:
        self._kernel = kernel
        self._st = st

    def run(self, steps: int, *args: Any, **inputs: Any) -> Any:
        out = self._kernel.run(steps, *args, **self._st.with_stages(inputs))
        return self._st.strip(out) if isinstance(out, dict) else out

    def start(self, *args: Any, **inputs: Any) -> Any:
        """A simulation (`advance`, `save`; `kernel.resume` continues it), its stage fields filled
        as `run` fills them (they are among its fields, as in its checkpoints)."""
        return self._kernel.start(*args, **self._st.with_stages(inputs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)


def explicit(L: Operator, dt: float, method: str = "euler") -> ExplicitStencil:
    """The explicit update u <- u + dt*L(u) (euler), midpoint rk2, or classical rk4, as a Stencil."""
    if not isinstance(L, Operator):
        raise StencilArgumentError(f"explicit() takes an msc.operator, got {type(L).__name__}")
    _check_method("explicit", method, EXPLICIT_METHODS)
    dt = _checked_dt("explicit", dt)
    us = L.ir.unknowns
    taken = set(us) | set(L.ir.coefficients) | set(L.ir.params)

    def stage_names(k: int) -> dict[str, str]:
        names = {}
        for u in us:
            name = f"{u}_stage{k}"
            while name in taken:
                name += "_"
            taken.add(name)
            names[u] = name
        return names

    now = {u: (u, 0) for u in us}
    u0 = {u: ir.FieldRead(u, 0, (0,) * L.ir.ndim) for u in us}
    statements: list[tuple[str, ir.Expr]] = []
    stages: dict[str, str] = {}
    if method == "euler":
        statements = [(u, _plus(u0[u], _times(dt, L.timed(u, now)))) for u in us]
    else:
        fractions = [0.5] if method == "rk2" else [0.5, 0.5, 1.0]
        source = now
        names: list[dict[str, str]] = []
        for k, frac in enumerate(fractions, start=1):
            s = stage_names(k)
            statements += [(s[u], _plus(u0[u], _times(frac * dt, L.timed(u, source)))) for u in us]
            names.append(s)
            stages.update({s[u]: u for u in us})
            source = {u: (s[u], 1) for u in us}
        for u in us:
            last = L.timed(u, source)
            if method == "rk2":  # midpoint: u + dt L(u + dt/2 L(u))
                statements.append((u, _plus(u0[u], _times(dt, last))))
            else:  # u + dt/6 (L(u) + 2 L(S1) + 2 L(S2) + L(S3)), with L(S_k) read off the stages
                s1, s2, s3 = (ir.FieldRead(n[u], 1, (0,) * L.ir.ndim) for n in names)
                mix = _plus(_plus(_plus(ir.Neg(u0[u]), s1), _times(2.0, s2)), s3)
                statements.append((u, _plus(_times(1.0 / 3.0, mix), _times(dt / 6.0, last))))
    st = L.stencil_ir(statements, tuple(stages), name=f"{L.name}_{method}")
    return ExplicitStencil(st, stages)


class Implicit:
    """An implicit stepper: `run(steps=, u=u0, **changed_params)` returns {field: array with ring}.

    solver="direct" factors M = I - theta*dt*A once; solver="multigrid" solves
    each step matrix-free to `tol` (msc.pde.iterative, scalar operators)."""

    def __init__(self, L: Operator, dt: float, method: str, shape: tuple[int, ...], inputs: dict[str, Any],
                 solver: str = "direct", tol: float = 1e-8, maxiter: int | None = None) -> None:
        if not isinstance(L, Operator):
            raise StencilArgumentError(f"implicit() takes an msc.operator, got {type(L).__name__}")
        _check_method("implicit", method, IMPLICIT_METHODS)
        if solver not in ("direct", "multigrid"):
            raise StencilArgumentError(f"implicit(): solver must be 'direct' or 'multigrid', got {solver!r}")
        check_method(f"implicit step of operator '{L.name}'", "multigrid", tol, maxiter)
        if solver == "multigrid":
            check_scalar(L, f"implicit step of operator '{L.name}'", solver, "solver")
        self.L, self.dt, self.method, self.shape = L, _checked_dt("implicit", dt), method, tuple(shape)
        self.theta = 1.0 if method == "backward_euler" else 0.5
        self._multigrid = solver == "multigrid"
        self.tol, self.maxiter = tol, maxiter
        self._factor = Factorization()
        self.refactorizations = 0
        self.iterations: list[int] = []  # per multigrid step: the Krylov iterations it took
        self.params: dict[str, Any] = {}
        self._assemble({k: _kept(v) for k, v in inputs.items() if k not in L.ir.unknowns})

    @property
    def solver(self) -> str:
        """'swCholesky' or 'splu' (the factorization the steps use), or 'multigrid-cg'/'multigrid-gmres'."""
        return self._iterative.solver if self._multigrid else self._factor.solver

    def __repr__(self) -> str:
        unknowns = int(np.prod(self.L.interior_shape(self.shape))) * len(self.L.ir.unknowns)
        return (f"<msc.Implicit {self.method} step of '{self.L.name}', dt={self.dt:g}, shape {self.shape}, "
                f"{unknowns} unknowns, {self.solver}>")

    def _assemble(self, params: dict[str, Any]) -> None:
        """The step's matrices (or its multigrid solver) for `params`, taken on with them only once
        built and factored: a failure (a wrong argument, a singular matrix) leaves the stepper as it was."""
        what = f"implicit step of operator '{self.L.name}'"
        if self._multigrid:  # checked as the direct solver's assembly checks them: names, types, values
            assemble(self.L, self.shape, "float64", {**params, **{u: np.zeros(self.shape) for u in self.L.ir.unknowns}},
                     matrix=False)
            iterative = IterativeSolver(self.L, self.shape, params, 1.0, -self.theta * self.dt,
                                        "multigrid", self.tol, self.maxiter, what)
            apply_L = from_operator(self.L, self.shape, params, 0.0, 1.0, "openmp", None)
            self._iterative, self._apply_L, self.params = iterative, apply_L, params
            return
        A, _ = assemble(self.L, self.shape, "float64", params)
        assert A is not None
        import scipy.sparse as sp  # imported where used: `import msc` stays light

        M = (sp.identity(A.shape[0], format="csr") - (self.theta * self.dt) * A).tocsr()
        M.sort_indices()
        self._factor.factor(M, what)  # on failure it keeps the factor it had
        self.A, self.M, self.params = A, M, params

    def _A(self, v: np.ndarray) -> np.ndarray:
        if self._multigrid:
            n = self.L.interior_shape(self.shape)
            return self._apply_L.apply(v.reshape(n)).reshape(-1)
        return self.A @ v

    def _step(self, rhs: np.ndarray) -> np.ndarray:
        if not self._multigrid:
            return self._factor.solve(rhs)
        v, history = self._iterative.solve(rhs)
        self.iterations.append(len(history) - 1)
        return v

    def run(self, steps: int, **inputs: Any) -> dict[str, np.ndarray]:
        """`steps` implicit steps from the initial field(s) given by name; coefficients and parameters given
        here replace the stepper's (the matrix is refactored when one changes) and stay for later runs
        that do not give them."""
        L = self.L
        if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 0:
            raise StencilArgumentError(f"operator '{L.name}': steps must be a non-negative integer, got {steps!r}")
        missing = [u for u in L.ir.unknowns if u not in inputs]
        if missing:
            raise StencilArgumentError(f"operator '{L.name}': run() needs the initial field(s) {', '.join(missing)}")
        changed = {k: v for k, v in inputs.items() if k not in L.ir.unknowns}
        if any(not _same(self.params.get(k), v) for k, v in changed.items()):
            self._assemble({**self.params, **{k: _kept(v) for k, v in changed.items()}})
            self.refactorizations += 1
        arrays = {u: np.array(inputs[u], dtype=np.float64) for u in L.ir.unknowns}
        _, g = assemble(L, self.shape, "float64", {**self.params, **arrays}, matrix=False)
        inner = _interior(L, self.shape)
        v = np.concatenate([arrays[u][inner].reshape(-1) for u in L.ir.unknowns])
        explicit_part = (1.0 - self.theta) * self.dt
        for _ in range(int(steps)):
            rhs = v + self.dt * g
            if explicit_part:
                rhs = rhs + explicit_part * self._A(v)
            v = self._step(rhs)
        return _scatter(L, self.shape, v, arrays)


def _kept(value: Any) -> Any:
    """A parameter as the stepper keeps it: arrays copied, so that one changed in place after it was
    given is seen as changed when given again (and the steps before keep what they were given)."""
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and bool(np.all(a == b))
    return a == b


def _interior(L: Operator, shape: tuple[int, ...]) -> tuple[slice, ...]:
    if L.ir.boundary == "periodic":
        return tuple(slice(None) for _ in shape)
    return tuple(slice(r, n - r) for r, n in zip(L.radius, shape))


def _whole(L: Operator, shape: tuple[int, ...], rings: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Whole C-ordered arrays (whatever the rings' layout: the iterative solvers write into their interior in
    place): copies of `rings` (the ring's values; the interior is the caller's to fill), else zeros."""
    return {u: np.array(rings[u], dtype=np.float64, order="C") if u in rings else np.zeros(shape)
            for u in L.ir.unknowns}


def _scatter(L: Operator, shape: tuple[int, ...], v: np.ndarray, rings: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Whole arrays (ring from `rings`, zero without) with interior values from the stacked vector v."""
    inner = _interior(L, shape)
    n = L.interior_shape(shape)
    N = int(np.prod(n))
    out = _whole(L, shape, rings)
    for i, u in enumerate(L.ir.unknowns):
        out[u][inner] = v[i * N:(i + 1) * N].reshape(n)
    return out


def implicit(L: Operator, dt: float, method: str = "backward_euler", *, shape: tuple[int, ...],
             solver: str = "direct", tol: float = 1e-8, maxiter: int | None = None, **params: Any) -> Implicit:
    """An implicit stepper for du/dt = L(u): solver="direct" assembles and factors once here;
    solver="multigrid" builds the multigrid hierarchy here and solves each step to `tol`."""
    return Implicit(L, dt, method, shape, params, solver, tol, maxiter)


def auto_method(L: Operator, shape: tuple[int, ...]) -> str:
    """method='auto': direct below AUTO_DIRECT_LIMIT unknowns (by dimension; always for systems), else multigrid."""
    unknowns = int(np.prod(L.interior_shape(shape)))
    if len(L.ir.unknowns) > 1 or unknowns <= AUTO_DIRECT_LIMIT.get(L.ir.ndim, 0):
        return "direct"
    return "multigrid"


def solve(L: Operator, rhs: Any, *, shape: tuple[int, ...] | None = None, full_output: bool = False,
          method: str = "auto", tol: float = 1e-8, maxiter: int | None = None, smoother: str = "jacobi",
          progress: bool = False, comm: Any = None, dims: Any = None, blocks: bool = False,
          nullspace: str | None = None, **inputs: Any) -> Any:
    """Solve L(u) = rhs for the interior unknowns; returns the whole array (a dict for a system).

    `rhs` has the interior's shape (a dict by field for a system); the ring comes from the
    unknown's array given by name (zero without). method: 'direct' (swCholesky, or sparse LU
    when not SPD), 'multigrid' (matrix-free Krylov preconditioned by geometric multigrid: CG
    when symmetric, else GMRES), 'cg', 'gmres', or 'auto' (direct for small problems and
    systems). Iterative methods stop at ||b - A u|| <= tol ||b|| and raise ConvergenceError
    after `maxiter` iterations; `smoother` is multigrid's: 'jacobi' (weighted, 2 or 3 sweeps) or
    'chebyshev' (degree 2 or 3 in D^-1 A); `progress=True` shows the residual falling on stderr.
    full_output=True also returns a SolveInfo (method, solver,
    iterations, residuals, levels, times). With an mpi4py communicator `comm`: multigrid over
    its ranks (process grid `dims`), arrays on rank 0 (None elsewhere), the result on rank 0; with
    `blocks=True` and the global `shape` on every rank, each rank gives its own blocks and gets its
    block of the solution (msc.pde.distributed.owned_block). nullspace="constant": L is singular by the
    constants (a periodic Poisson operator); the rhs's mean is removed and the solution of zero mean
    returned (msc.pde.nullspace)."""
    if not isinstance(L, Operator):
        raise StencilArgumentError(f"msc.solve() takes an msc.operator, got {type(L).__name__}")
    what = f"msc.solve with operator '{L.name}'"
    check_method(what, method, tol, maxiter)
    check_smoother(what, smoother)  # whatever the method: a misspelt option is never ignored
    singular = check_nullspace(what, nullspace)
    if singular:
        check_scalar(L, what, "constant", keyword="nullspace")
    if comm is not None:
        from msc.pde.distributed import solve_distributed

        return solve_distributed(L, rhs, comm, shape, method, tol, maxiter, smoother, full_output, dims, progress,
                                 inputs, blocks, singular)
    if blocks:
        raise StencilArgumentError(f"{what}: blocks=True needs comm= (an MPI communicator)")
    shape, rhs_flat = checked_problem(L, rhs, inputs, shape)
    if method == "auto":
        method = auto_method(L, shape)
    t0 = time.perf_counter()
    rings = {u: inputs[u] for u in L.ir.unknowns if inputs.get(u) is not None}
    if method == "direct" or rings or any(L.linear_forms[u].constant is not None for u in L.ir.unknowns):
        A, g = assemble(L, shape, "float64", inputs, matrix=method == "direct")
        b = rhs_flat - g
    else:  # g = 0: no boundary values given and no constant part
        A, b = None, rhs_flat
    t1 = time.perf_counter()
    mean = 0.0
    if method == "direct":
        assert A is not None
        F = PinnedFactorization() if singular else Factorization()
        scale = float(abs(A).sum(axis=1).max())
        ones = A @ np.ones(A.shape[0])
        if singular:
            ones = ones.reshape(L.interior_shape(shape))
            check_annihilates_constants(what, ones, scale, abs(A - A.T).max() <= 1e-12 * scale)
            b, mean = projected(what, b, tol)
        else:
            check_not_singular_by_constants(what, ones, scale)
        F.factor(A, what)
        t2 = time.perf_counter()
        v = F.solve(b)
        if singular:
            v -= v.mean()
        t3 = time.perf_counter()
        check_residual(A, v, b, what)
        info = SolveInfo("direct", F.solver, assembly_s=t1 - t0, factor_s=t2 - t1, setup_s=t2 - t0, solve_s=t3 - t2,
                         rhs_mean_removed=mean)
        out = _scatter(L, shape, v, rings)
    else:
        it = IterativeSolver(L, shape, inputs, 0.0, 1.0, method, tol, maxiter, what, smoother=smoother,
                             nullspace=singular)
        if singular:
            b, mean = projected(what, b, tol)
        t2 = time.perf_counter()
        out = _whole(L, shape, rings)
        x = out[L.ir.unknowns[0]][_interior(L, shape)]  # the solution goes there, from zero
        if rings:
            x[...] = 0.0
        _, history = it.solve(b, progress, out=x)
        if singular:
            x -= x.mean()
        info = SolveInfo(it.krylov, it.solver, len(history) - 1, history, it.mg.shapes, setup_s=t2 - t0,
                         solve_s=time.perf_counter() - t2, assembly_s=t1 - t0, rhs_mean_removed=mean)
    result = out if len(L.ir.unknowns) > 1 else out[L.ir.unknowns[0]]
    return (result, info) if full_output else result
