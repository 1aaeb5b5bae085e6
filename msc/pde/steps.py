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
  changes.
- `solve(L, rhs, ...)`: L(u) = rhs for the interior unknowns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from msc import ir
from msc.errors import MscError, StencilArgumentError
from msc.pde.assemble import assemble
from msc.pde.operator import Operator
from msc.stencil import Stencil

if TYPE_CHECKING:
    import scipy.sparse as sp

EXPLICIT_METHODS = ("euler", "rk2", "rk4")
IMPLICIT_METHODS = ("backward_euler", "crank_nicolson")


def _check_method(caller: str, method: Any, methods: tuple[str, ...]) -> None:
    if method not in methods:
        raise StencilArgumentError(f"{caller}(): method={method!r} is not one of {', '.join(map(repr, methods))}")


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

    def reference(self, steps: int, dtype: str | None = None, **inputs: Any) -> dict[str, np.ndarray]:
        return self.strip(super().reference(steps, dtype, **self.with_stages(inputs)))

    def compile(self, target: str = "openmp", dtype: str | None = None, threads: int | None = None,
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

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)


def explicit(L: Operator, dt: float, method: str = "euler") -> ExplicitStencil:
    """The explicit update u <- u + dt*L(u) (euler), midpoint rk2, or classical rk4, as a Stencil."""
    if not isinstance(L, Operator):
        raise StencilArgumentError(f"explicit() takes an msc.operator, got {type(L).__name__}")
    _check_method("explicit", method, EXPLICIT_METHODS)
    dt = float(dt)
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


def _split(L: Operator, values: Mapping[str, Any] | np.ndarray | None, what: str) -> dict[str, Any]:
    """A dict per unknown from a single array (one unknown) or a dict."""
    if values is None:
        return {}
    if isinstance(values, Mapping):
        return dict(values)
    if len(L.ir.unknowns) != 1:
        raise StencilArgumentError(
            f"operator '{L.name}' has unknowns {', '.join(L.ir.unknowns)}: give {what} as a dict by field")
    return {L.ir.unknowns[0]: values}


class _Factorization:
    """M = sign * (factored matrix): swCholesky when SPD (maybe after a sign flip), else sparse LU."""

    def __init__(self) -> None:
        self.solver = ""
        self._symbolic: Any = None
        self._solve: Callable[[np.ndarray], np.ndarray] | None = None
        self.sign = 1.0
        self.analyses = 0

    def factor(self, M: sp.csr_array, what: str) -> None:
        """Factor M; `what` names the problem in the error raised when M is singular."""
        from msc.solvers import InvalidMatrixError, NotPositiveDefiniteError, NotSymmetricError, analyze

        diag = M.diagonal()
        sign = 1.0 if np.all(diag > 0) else -1.0 if np.all(diag < 0) else 0.0
        if sign != 0.0:  # swCholesky checks symmetry itself (NotSymmetricError)
            S = sign * M
            try:
                try:
                    if self._symbolic is None:
                        raise InvalidMatrixError("not analysed yet")
                    F = self._symbolic.factorize(S)  # same pattern: the analysis is reused
                except InvalidMatrixError:
                    self._symbolic = analyze(S)
                    self.analyses += 1
                    F = self._symbolic.factorize(S)
                self.solver, self.sign, self._solve = "swCholesky", sign, F.solve
                return
            except (NotPositiveDefiniteError, NotSymmetricError):
                pass  # not symmetric, or indefinite: LU below
        singular = (f"{what}: the matrix is singular{{}}; a periodic or pure-Neumann operator determines u "
                    "only up to a constant")
        try:
            from scipy.sparse.linalg import splu  # imported where used: `import msc` stays light

            lu = splu(M.tocsc())
        except RuntimeError as err:
            raise MscError(singular.format(f" ({err})")) from None
        pivots = np.abs(lu.U.diagonal())
        if pivots.size and pivots.min() <= 1e-13 * pivots.max():
            raise MscError(singular.format(f" (LU pivot ratio {pivots.min() / pivots.max():.1e})"))
        self.solver, self.sign, self._solve, self._symbolic = "splu", 1.0, lu.solve, None

    def solve(self, b: np.ndarray) -> np.ndarray:
        assert self._solve is not None
        return self._solve(b if self.sign == 1.0 else -b)


def _check_residual(A: sp.csr_array, v: np.ndarray, b: np.ndarray, what: str) -> None:
    """Raise unless A v = b to a normwise backward error of 1e-8 (a singular A fails here)."""
    scale = float(abs(A).sum(axis=1).max()) * float(np.abs(v).max(initial=0.0)) + float(np.abs(b).max(initial=0.0))
    error = float(np.abs(A @ v - b).max(initial=0.0))
    if not np.isfinite(error) or error > 1e-8 * scale:
        raise MscError(f"{what}: the solution fails its residual check (|A u - b| = {error:.2e}, scale "
                       f"{scale:.2e}); the matrix is singular or nearly so (a periodic or pure-Neumann operator "
                       "determines u only up to a constant)")


class Implicit:
    """An implicit stepper: `run(steps=, u=u0, **changed_params)` returns {field: array with ring}."""

    def __init__(self, L: Operator, dt: float, method: str, shape: tuple[int, ...], inputs: dict[str, Any]) -> None:
        if not isinstance(L, Operator):
            raise StencilArgumentError(f"implicit() takes an msc.operator, got {type(L).__name__}")
        _check_method("implicit", method, IMPLICIT_METHODS)
        self.L, self.dt, self.method, self.shape = L, float(dt), method, tuple(shape)
        self.theta = 1.0 if method == "backward_euler" else 0.5
        self.params = {k: v for k, v in inputs.items() if k not in L.ir.unknowns}
        self._factor = _Factorization()
        self.refactorizations = 0
        self._assemble()

    @property
    def solver(self) -> str:
        """'swCholesky' or 'splu': which factorization the steps use."""
        return self._factor.solver

    def __repr__(self) -> str:
        return (f"<msc.Implicit {self.method} step of '{self.L.name}', dt={self.dt:g}, shape {self.shape}, "
                f"{self.A.shape[0]} unknowns, {self.solver}>")

    def _assemble(self) -> None:
        A, _ = assemble(self.L, self.shape, "float64", self.params)
        assert A is not None
        self.A = A
        import scipy.sparse as sp  # imported where used: `import msc` stays light

        self.M = (sp.identity(A.shape[0], format="csr") - (self.theta * self.dt) * A).tocsr()
        self.M.sort_indices()
        self._factor.factor(self.M, f"implicit step of operator '{self.L.name}'")

    def run(self, steps: int, **inputs: Any) -> dict[str, np.ndarray]:
        L = self.L
        if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 0:
            raise StencilArgumentError(f"operator '{L.name}': steps must be a non-negative integer, got {steps!r}")
        changed = {k: v for k, v in inputs.items() if k not in L.ir.unknowns}
        if changed and any(not _same(self.params.get(k), v) for k, v in changed.items()):
            self.params.update(changed)
            self._assemble()
            self.refactorizations += 1
        missing = [u for u in L.ir.unknowns if u not in inputs]
        if missing:
            raise StencilArgumentError(f"operator '{L.name}': run() needs the initial field(s) {', '.join(missing)}")
        arrays = {u: np.array(inputs[u], dtype=np.float64) for u in L.ir.unknowns}
        _, g = assemble(L, self.shape, "float64", {**self.params, **arrays}, matrix=False)
        inner = _interior(L, self.shape)
        v = np.concatenate([arrays[u][inner].reshape(-1) for u in L.ir.unknowns])
        explicit_part = (1.0 - self.theta) * self.dt
        for _ in range(int(steps)):
            rhs = v + self.dt * g
            if explicit_part:
                rhs = rhs + explicit_part * (self.A @ v)
            v = self._factor.solve(rhs)
        return _scatter(L, self.shape, v, arrays)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and bool(np.all(a == b))
    return a == b


def _interior(L: Operator, shape: tuple[int, ...]) -> tuple[slice, ...]:
    if L.ir.boundary == "periodic":
        return tuple(slice(None) for _ in shape)
    return tuple(slice(r, n - r) for r, n in zip(L.radius, shape))


def _scatter(L: Operator, shape: tuple[int, ...], v: np.ndarray, rings: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Whole arrays (ring from `rings`, zero without) with interior values from the stacked vector v."""
    inner = _interior(L, shape)
    n = L.interior_shape(shape)
    N = int(np.prod(n))
    out = {}
    for i, u in enumerate(L.ir.unknowns):
        a = np.array(rings[u], dtype=np.float64) if u in rings else np.zeros(shape)
        a[inner] = v[i * N:(i + 1) * N].reshape(n)
        out[u] = a
    return out


def implicit(L: Operator, dt: float, method: str = "backward_euler", *, shape: tuple[int, ...],
             **params: Any) -> Implicit:
    """An implicit stepper for du/dt = L(u): assembled and factored once here."""
    return Implicit(L, dt, method, shape, params)


def solve(L: Operator, rhs: Any, *, shape: tuple[int, ...] | None = None, full_output: bool = False,
          **inputs: Any) -> Any:
    """Solve L(u) = rhs for the interior unknowns; returns the whole array (a dict for a system).

    `rhs` has the interior's shape (a dict by field for a system); the ring comes from the
    unknown's array given by name (zero without). full_output=True also returns a dict with the
    solver used ('swCholesky' or 'splu') and the seconds spent assembling, factoring and solving."""
    rhs_by = _split(L, rhs, "rhs")
    if set(rhs_by) != set(L.ir.unknowns):
        raise StencilArgumentError(f"operator '{L.name}': rhs must give {', '.join(L.ir.unknowns)}")
    if shape is None:
        first = inputs.get(L.ir.unknowns[0])
        if first is not None:
            shape = first.shape
        else:
            grow = 0 if L.ir.boundary == "periodic" else 2
            shape = tuple(n + grow * r for n, r in zip(np.shape(rhs_by[L.ir.unknowns[0]]), L.radius))
    shape = tuple(shape)
    n = L.interior_shape(shape)
    for u in L.ir.unknowns:
        if np.shape(rhs_by[u]) != n:
            raise StencilArgumentError(
                f"operator '{L.name}': rhs for '{u}' must have the interior's shape {n}, got {np.shape(rhs_by[u])}")
    t0 = time.perf_counter()
    A, g = assemble(L, shape, "float64", inputs)
    assert A is not None
    b = np.concatenate([np.asarray(rhs_by[u], np.float64).reshape(-1) for u in L.ir.unknowns]) - g
    t1 = time.perf_counter()
    F = _Factorization()
    F.factor(A, f"msc.solve with operator '{L.name}'")
    t2 = time.perf_counter()
    v = F.solve(b)
    t3 = time.perf_counter()
    _check_residual(A, v, b, f"msc.solve with operator '{L.name}'")
    rings = {u: inputs[u] for u in L.ir.unknowns if inputs.get(u) is not None}
    out = _scatter(L, shape, v, rings)
    result = out if len(L.ir.unknowns) > 1 else out[L.ir.unknowns[0]]
    if not full_output:
        return result
    return result, {"solver": F.solver, "assembly_s": t1 - t0, "factor_s": t2 - t1, "solve_s": t3 - t2}
