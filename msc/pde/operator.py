"""`@msc.operator`: a spatial operator traced once, then used as a matrix, an
explicit kernel or an implicit step.

An operator is a function of fields indexed by space only (`u[x-1, y]`)
returning an expression, or a dict `{u: ..., v: ...}` for a system. It is
traced with the stencil frontend (same index rules, same errors with
file:line); in addition every traced operation records the user's line, so
the linear-form analysis can name where a non-linear term was written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, overload

import numpy as np
from numpy.typing import DTypeLike

from msc import ir
from msc.errors import StencilArgumentError
from msc.frontend import context
from msc.frontend.symbols import Operand, Traced, as_expr
from msc.frontend.trace import _ParamProxy, _Tracer, parameter_names
from msc.ir.linear import LinearForm, linear_form
from msc.ir.reference import run_reference


class _Locations:
    """Where each traced node was made (by object id; the nodes are kept alive)."""

    def __init__(self) -> None:
        self.loc: dict[int, ir.SourceLoc] = {}
        self._keep: list[ir.Expr] = []

    def track(self, node: ir.Expr) -> _OpTraced:
        self.loc.setdefault(id(node), context.user_location())
        self._keep.append(node)
        return _OpTraced(node, self)


class _Tracking(Operand):
    """Operators that keep results tracked; the reflected ones are defined here too so
    Python prefers them over a plain Traced on the left (e.g. `msc.sqrt(k[x]) * u[x]`)."""

    _locs: _Locations

    def _bin(self, op: str, other: Any, reverse: bool = False) -> Traced:
        return self._locs.track(super()._bin(op, other, reverse).node)

    def __neg__(self) -> Traced:
        return self._locs.track(ir.Neg(self._expr()))

    def __invert__(self) -> Traced:
        return self._locs.track(ir.Not(self._expr()))

    def __radd__(self, o: Any) -> Traced:
        return self._bin("+", o, True)

    def __rsub__(self, o: Any) -> Traced:
        return self._bin("-", o, True)

    def __rmul__(self, o: Any) -> Traced:
        return self._bin("*", o, True)

    def __rtruediv__(self, o: Any) -> Traced:
        return self._bin("/", o, True)

    def __rpow__(self, o: Any) -> Traced:
        return self._bin("**", o, True)

    def __rand__(self, o: Any) -> Traced:
        return self._bin("&", o, True)

    def __ror__(self, o: Any) -> Traced:
        return self._bin("|", o, True)

    __hash__ = object.__hash__


class _OpTraced(_Tracking, Traced):
    def __init__(self, node: ir.Expr, locs: _Locations) -> None:
        Traced.__init__(self, node)
        self._locs = locs


class _OpParam(_Tracking, _ParamProxy):
    def __init__(self, tracer: _Tracer, name: str, locs: _Locations) -> None:
        _ParamProxy.__init__(self, tracer, name)
        self._locs = locs

    def __getitem__(self, key: Any) -> Traced:
        node = self._tracer.read(self._name, key).node
        assert isinstance(node, ir.FieldRead)
        if node.dt is not None:
            raise context.definition_error(
                f"{self._name}[...] is indexed with t: an operator is spatial; index fields with x, y, z "
                "only (msc.explicit/msc.implicit add the time levels)")
        return self._locs.track(node)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise context.definition_error(
            f"assigns {self._name}[...]: an operator returns its expression (or a dict "
            "{field: expression} for a system) instead of assigning")


@dataclass(frozen=True)
class OperatorIR:
    """A traced operator: `exprs[f]` is the right-hand side for unknown `f` (dict order)."""

    name: str
    ndim: int
    unknowns: tuple[str, ...]
    coefficients: tuple[str, ...]
    params: tuple[str, ...]
    exprs: dict[str, ir.Expr]
    boundary: str
    loc: ir.SourceLoc

    @property
    def radius(self) -> tuple[int, ...]:
        r = [0] * self.ndim
        for e in self.exprs.values():
            for a in ir.reads_of(e):
                for d, o in enumerate(a.offsets):
                    r[d] = max(r[d], abs(o))
        return tuple(r)


def trace_operator(func: Callable[..., Any], *, name: str | None = None,
                   boundary: str = "dirichlet") -> tuple[OperatorIR, Callable[[ir.Expr], str]]:
    """Trace `func`; returns its OperatorIR and a function naming a node's file:line."""
    op_name = name or func.__name__
    code = func.__code__
    def_loc = ir.SourceLoc(code.co_filename, code.co_firstlineno)
    locs = _Locations()
    with context.tracing(op_name):
        if boundary not in ir.BOUNDARIES:
            raise context.definition_error(f"boundary={boundary!r} is not one of {', '.join(ir.BOUNDARIES)}",
                                           def_loc)
        params = parameter_names(func, def_loc, OPERATOR_KEYWORDS)
        if not params:
            raise context.definition_error("an operator takes its unknown field as first parameter", def_loc)
        tracer = _Tracer(op_name)
        proxies = {p: _OpParam(tracer, p, locs) for p in params}
        result = func(*proxies.values())
        if result is None:
            raise context.definition_error(
                "the operator returns nothing: return its expression, or a dict {field: expression} "
                "for a system", def_loc)
        if isinstance(result, Mapping):
            exprs: dict[str, ir.Expr] = {}
            for key, value in result.items():
                if not isinstance(key, _OpParam):
                    named = (f" (the name of the parameter {key!r}: write the parameter itself, {key}, "
                             "not its name)" if isinstance(key, str) and key in proxies else "")
                    raise context.definition_error(
                        f"the returned dict has key {key!r}{named}: its keys must be the unknown fields "
                        "(parameters of the operator), e.g. {u: ..., v: ...}", def_loc)
                exprs[key._name] = as_expr(value)
        else:
            exprs = {params[0]: as_expr(result)}
        for f in exprs:
            if f not in tracer.fields:
                raise context.definition_error(
                    f"unknown field '{f}' is never indexed: write it as {f}[{', '.join(ir.DIM_NAMES[:1])}, ...] "
                    "(the unknowns are the dict's keys, or the first parameter)", def_loc)
        assert tracer.ndim is not None
        unknowns = tuple(exprs)
        coefficients = tuple(p for p in params if p in tracer.fields and p not in exprs)
        scalars = tuple(p for p in params if p not in tracer.fields)
        op = OperatorIR(op_name, tracer.ndim, unknowns, coefficients, scalars, exprs, boundary, def_loc)

    def where(node: ir.Expr) -> str:
        return f"{_locate(node, op, locs) or def_loc}: in operator '{op_name}'"

    return op, where


def _locate(node: ir.Expr, op: OperatorIR, locs: _Locations) -> ir.SourceLoc | None:
    """The line that made `node`, else that of its nearest tracked ancestor, else of a descendant."""
    def path_to(root: ir.Expr) -> list[ir.Expr] | None:
        if root is node:
            return [root]
        for c in ir.children(root):
            p = path_to(c)
            if p is not None:
                return [root, *p]
        return None

    for e in op.exprs.values():
        path = path_to(e)
        if path is None:
            continue
        for n in reversed(path):
            if id(n) in locs.loc:
                return locs.loc[id(n)]
    for n in ir.walk(node):
        if id(n) in locs.loc:
            return locs.loc[id(n)]
    return None


def substitute(e: ir.Expr, fn: Callable[[ir.FieldRead], ir.Expr]) -> ir.Expr:
    """`e` with every field read replaced by fn(read)."""
    if isinstance(e, ir.FieldRead):
        return fn(e)
    if isinstance(e, ir.Neg):
        return ir.Neg(substitute(e.operand, fn))
    if isinstance(e, ir.Not):
        return ir.Not(substitute(e.operand, fn))
    if isinstance(e, ir.BinOp):
        return ir.BinOp(e.op, substitute(e.lhs, fn), substitute(e.rhs, fn))
    if isinstance(e, ir.Call):
        return ir.Call(e.func, tuple(substitute(a, fn) for a in e.args))
    if isinstance(e, ir.Where):
        return ir.Where(substitute(e.cond, fn), substitute(e.then, fn), substitute(e.otherwise, fn))
    return e


class Operator:
    """A traced spatial operator L: `matrix`, `apply`, and the input of
    msc.explicit / msc.implicit / msc.solve."""

    def __init__(self, func: Callable[..., Any], *, boundary: str = "dirichlet", name: str | None = None) -> None:
        self.func = func
        self.ir, self._where = trace_operator(func, name=name, boundary=boundary)
        self.name = self.ir.name
        self.__doc__ = getattr(func, "__doc__", None)

    def __repr__(self) -> str:
        return (f"<msc.Operator {self.name} ({self.ir.ndim}D, unknowns {', '.join(self.ir.unknowns)}, "
                f"{self.ir.boundary})>")

    @property
    def unknowns(self) -> tuple[str, ...]:
        return self.ir.unknowns

    @property
    def radius(self) -> tuple[int, ...]:
        return self.ir.radius

    @cached_property
    def linear_forms(self) -> dict[str, LinearForm]:
        """Per unknown, the affine form of its right-hand side (NonLinearError if it is not affine)."""
        return {f: linear_form(e, self.ir.unknowns, self._where) for f, e in self.ir.exprs.items()}

    def interior_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if self.ir.boundary == "periodic":
            return tuple(shape)
        return tuple(n - 2 * r for n, r in zip(shape, self.radius))

    def matrix(self, shape: tuple[int, ...], dtype: DTypeLike = "float64", **inputs: Any) -> tuple[Any, np.ndarray]:
        """(A, g) with L(u) = A @ u_interior + g over the interior unknowns (C order, fields stacked).

        `shape` is the arrays' shape, ring included; coefficient fields and scalars are given by
        name; an unknown's array (optional) supplies its boundary ring values to g."""
        from msc.pde.assemble import assemble

        return assemble(self, tuple(shape), dtype, inputs, matrix=True)

    def stencil_ir(self, statements: list[tuple[str, ir.Expr]], extra_fields: tuple[str, ...] = (),
                   name: str | None = None) -> ir.StencilIR:
        """A StencilIR writing `statements` (target, expr over timed reads); `extra_fields` are stage fields."""
        written = list(self.ir.unknowns) + list(extra_fields)
        fields = [ir.FieldDecl(f, self.ir.ndim, "float64", window=1, written=True) for f in written]
        fields += [ir.FieldDecl(c, self.ir.ndim, "float64", window=0, written=False) for c in self.ir.coefficients]
        stmts = tuple(ir.Statement(target, expr, self.ir.loc) for target, expr in statements)
        return ir.StencilIR(name or self.name, self.ir.ndim, tuple(fields), self.ir.params, stmts,
                            boundary=self.ir.boundary, loc=self.ir.loc)

    def timed(self, f: str, source: Mapping[str, tuple[str, int]]) -> ir.Expr:
        """L_f with each unknown read `u[x..]` replaced by `name[t+dt, x..]` for source[u] = (name, dt)."""
        def swap(r: ir.FieldRead) -> ir.Expr:
            if r.name in source:
                name, dt = source[r.name]
                return ir.FieldRead(name, dt, r.offsets)
            return r
        return substitute(self.ir.exprs[f], swap)

    def apply(self, *given: Any, dtype: DTypeLike = None, **inputs: Any) -> dict[str, np.ndarray]:
        """L applied by the reference interpreter: {unknown: L_f(u) over the interior}; arrays by name."""
        if given:
            names = ", ".join(f"{n}=..." for n in (*self.ir.unknowns, *self.ir.coefficients, *self.ir.params))
            raise StencilArgumentError(f"operator '{self.name}': apply() takes its arrays and values by name, "
                                       f"apply({names}); got {len(given)} positional")
        now = {f: (f, 0) for f in self.ir.unknowns}
        st = self.stencil_ir([(f, self.timed(f, now)) for f in self.ir.unknowns], name=f"{self.name}_apply")
        out = run_reference(st if dtype is None else st.with_dtype(dtype), 1, inputs)
        inner = _interior_slices(self, next(iter(out.values())).shape)
        return {f: out[f][inner] for f in self.ir.unknowns}


#: ... and for an operator also those of msc.solve, msc.implicit and Operator.matrix (an operator is stepped as a
#: stencil too, msc.explicit)
OPERATOR_KEYWORDS = (*ir.CALL_KEYWORDS, "L", "rhs", "shape", "full_output", "method", "tol", "maxiter", "smoother",
                     "progress", "blocks", "nullspace", "dt", "solver")


def _interior_slices(op: Operator, shape: tuple[int, ...]) -> tuple[slice, ...]:
    if op.ir.boundary == "periodic":
        return tuple(slice(None) for _ in shape)
    return tuple(slice(r, n - r) for r, n in zip(op.radius, shape))


@overload
def operator(func: Callable[..., Any]) -> Operator: ...
@overload
def operator(*, boundary: str = "dirichlet", name: str | None = None) -> Callable[[Callable[..., Any]], Operator]: ...


def operator(func: Callable[..., Any] | None = None, *, boundary: str = "dirichlet", name: str | None = None) -> Any:
    """Decorate a function of space-indexed fields returning an expression (or {field: expr}).

    `@msc.operator` or `@msc.operator(boundary="periodic")`."""
    if func is None:
        return lambda f: Operator(f, boundary=boundary, name=name)
    return Operator(func, boundary=boundary, name=name)
