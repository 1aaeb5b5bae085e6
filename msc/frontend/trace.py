"""Tracing a decorated Python function into StencilIR.

Each parameter of the function is replaced by a proxy. Indexing a proxy with
t/x/y/z makes it a field (a read, or a statement when assigned); using it in
arithmetic makes it a scalar parameter. Python loops in the body simply run,
so they unroll. The rules of the contract are checked as the body runs, so
an error points at the user's offending line.
"""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

from msc import ir
from msc.frontend import context
from msc.frontend.symbols import IndexExpr, Operand, Traced, as_expr


@dataclass
class _FieldUse:
    ndim: int
    timed: bool
    first_loc: ir.SourceLoc


@dataclass
class _Tracer:
    name: str
    fields: dict[str, _FieldUse] = field(default_factory=dict)
    scalars: dict[str, ir.SourceLoc] = field(default_factory=dict)
    statements: list[ir.Statement] = field(default_factory=list)
    ndim: int | None = None
    ndim_loc: ir.SourceLoc | None = None

    def written(self, name: str) -> ir.Statement | None:
        return next((s for s in self.statements if s.target == name), None)

    # -- indexing ---------------------------------------------------------

    def parse_index(self, name: str, key: Any) -> tuple[int | None, tuple[int, ...]]:
        """Split `u[t+1, x-1, y]` into (dt, offsets); check form and dimensionality."""
        items = key if isinstance(key, tuple) else (key,)
        for item in items:
            if not isinstance(item, IndexExpr):
                raise context.definition_error(
                    f"{name}[{_show_key(items)}]: index {item!r} is not t, x, y or z plus an "
                    "integer offset (a scalar parameter cannot be indexed)"
                )
        dt: int | None = None
        spatial = list(items)
        if spatial and spatial[0].sym == "t":
            dt = spatial.pop(0).offset
        ndim = len(spatial)
        if ndim == 0 or ndim > 3:
            raise context.definition_error(
                f"{name}[{_show_key(items)}]: a field needs 1 to 3 spatial indices (x, y, z)"
            )
        for pos, item in enumerate(spatial):
            if item.sym == "t":
                raise context.definition_error(
                    f"{name}[{_show_key(items)}]: 't' comes first, before the spatial indices "
                    f"(e.g. {name}[t, {', '.join(ir.DIM_NAMES[:ndim - 1])}])")
            if item.sym != ir.DIM_NAMES[pos]:
                raise context.definition_error(
                    f"{name}[{_show_key(items)}]: spatial index {pos + 1} must use "
                    f"'{ir.DIM_NAMES[pos]}' (indices come in the order t, x, y, z), got '{item}'"
                )
        self._note_field(name, ndim, dt is not None, items)
        return dt, tuple(i.offset for i in spatial)

    def _note_field(self, name: str, ndim: int, timed: bool, items: tuple[Any, ...]) -> None:
        loc = context.user_location()
        if name in self.scalars:
            raise context.definition_error(
                f"'{name}' is indexed as a field here but used bare (as a scalar) at "
                f"{self.scalars[name]}; a field must always be indexed"
            )
        if self.ndim is None:
            self.ndim, self.ndim_loc = ndim, loc
        elif ndim != self.ndim:
            raise context.definition_error(
                f"{name}[{_show_key(items)}] is {ndim}D but the stencil is {self.ndim}D "
                f"(first access at {self.ndim_loc}): all fields must have the same dimensionality"
            )
        use = self.fields.get(name)
        if use is None:
            self.fields[name] = _FieldUse(ndim, timed, loc)
        elif use.timed != timed:
            raise context.definition_error(
                f"{name}[{_show_key(items)}]: '{name}' is indexed "
                f"{'without' if use.timed else 'with'} t at {use.first_loc}; a field is either "
                "time-dependent (always indexed with t) or a time-invariant input (never)"
            )

    def read(self, name: str, key: Any) -> Traced:
        dt, offsets = self.parse_index(name, key)
        if dt is not None and dt > 0:
            writer = self.written(name)
            if dt > 1 or writer is None:
                raise context.definition_error(
                    f"reads {name}[{_show_access(dt, offsets)}], a level not yet computed: only "
                    f"t+1 of a field written by an earlier statement may be read"
                )
        return Traced(ir.FieldRead(name, dt, offsets))

    def write(self, name: str, key: Any, value: Any) -> None:
        loc = context.user_location()
        dt, offsets = self.parse_index(name, key)
        where = f"{name}[{_show_access(dt, offsets)}]"
        if dt is None:
            raise context.definition_error(
                f"assigns {where}: a statement must write the next time level, {name}[t+1, ...]"
            )
        if dt < 1:
            raise context.definition_error(
                f"writes {where}, a past level: statements write the next level {name}[t+1, ...]"
            )
        if dt > 1:
            raise context.definition_error(
                f"writes {where}: statements write exactly one level ahead, {name}[t+1, ...]"
            )
        if any(offsets):
            raise context.definition_error(
                f"writes {where} at a spatial offset: statements write at the point itself "
                f"({', '.join(ir.DIM_NAMES[: len(offsets)])})"
            )
        previous = self.written(name)
        if previous is not None:
            raise context.definition_error(
                f"two statements write {name}[t+1]: the first at {previous.loc}; "
                "write each field's next level once (use a temporary field for stages)"
            )
        expr = ir.balanced(as_expr(value))
        levels = ir.depth(expr)
        if levels > ir.MAX_DEPTH:
            raise context.definition_error(
                f"the expression assigned to {where} nests {levels} levels deep, more than the "
                f"{ir.MAX_DEPTH} msc handles (long sums and products are fine); compute parts of it "
                "in earlier statements that write temporary fields"
            )
        self.statements.append(ir.Statement(name, expr, loc))

    def scalar(self, name: str) -> ir.Expr:
        if name in self.fields:
            raise context.definition_error(
                f"field '{name}' is used bare (without [t, x, ...]) in an expression; "
                f"index it, e.g. {name}[{', '.join(['t'] + list(ir.DIM_NAMES[: self.fields[name].ndim]))}]"
            )
        self.scalars.setdefault(name, context.user_location())
        return ir.ParamRef(name)


class _ParamProxy(Operand):
    """Stands for one parameter of the traced function."""

    def __init__(self, tracer: _Tracer, name: str) -> None:
        self._tracer = tracer
        self._name = name

    def __getitem__(self, key: Any) -> Traced:
        return self._tracer.read(self._name, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._tracer.write(self._name, key, value)

    def _expr(self) -> ir.Expr:
        return self._tracer.scalar(self._name)

    def _describe(self) -> str:
        return f"parameter '{self._name}'"

    def __repr__(self) -> str:
        return f"<msc parameter {self._name}>"


def _show_access(dt: int | None, offsets: tuple[int, ...]) -> str:
    parts = [] if dt is None else [str(IndexExpr("t", dt))]
    parts += [str(IndexExpr(ir.DIM_NAMES[d], o)) for d, o in enumerate(offsets)]
    return ", ".join(parts)


def _show_key(items: tuple[Any, ...]) -> str:
    return ", ".join(str(i) for i in items)


def parameter_names(func: Callable[..., Any], def_loc: ir.SourceLoc, reserved: Sequence[str]) -> list[str]:
    """The names of `func`'s parameters (the fields and scalar parameters it is traced with); a definition
    error for *args/**kwargs, a default value (ignored when the stencil runs) or a `reserved` name."""
    params = []
    for p in inspect.signature(func).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise context.definition_error(f"parameter '{p.name}': *args and **kwargs are not allowed; name every "
                                           "field and scalar parameter", def_loc)
        if p.default is not p.empty:
            raise context.definition_error(
                f"parameter '{p.name}' has a default value ({reprlib.repr(p.default)}); every field and parameter "
                f"is given by name when the stencil runs, and a default would be ignored: remove it (a value the "
                "function needs from outside can be a global or a closure variable)", def_loc)
        if p.name in reserved:
            raise context.definition_error(
                f"parameter '{p.name}' has the name of a keyword of the calls that take the fields and parameters "
                f"({', '.join(reserved)}): rename it", def_loc)
        params.append(p.name)
    return params


def trace(func: Callable[..., Any], *, name: str | None = None, boundary: str = "dirichlet") -> ir.StencilIR:
    """Run `func` on proxies and return its StencilIR (float64)."""
    stencil_name = name or func.__name__
    code = func.__code__
    def_loc = ir.SourceLoc(code.co_filename, code.co_firstlineno)
    with context.tracing(stencil_name):
        if boundary not in ir.BOUNDARIES:
            raise context.definition_error(
                f"boundary={boundary!r} is not one of {', '.join(ir.BOUNDARIES)}", def_loc
            )
        params = parameter_names(func, def_loc, ir.CALL_KEYWORDS)
        tracer = _Tracer(stencil_name)
        returned = func(*[_ParamProxy(tracer, p) for p in params])
        if not tracer.statements:
            raise context.definition_error(
                "the stencil writes no field: add a statement like u[t+1, x] = ...", def_loc
            )
        if returned is not None:
            raise context.definition_error(
                "the stencil returns a value, which would be ignored: a stencil "
                "assigns its new levels (u[t+1, x] = ...) and returns nothing (an @msc.operator returns its "
                "expression)", def_loc
            )
        for fname, use in tracer.fields.items():
            if use.timed and tracer.written(fname) is None:
                raise context.definition_error(
                    f"field '{fname}' is read at time levels but never written; index it without t "
                    f"(e.g. {fname}[x, ...]) for a time-invariant input",
                    use.first_loc,
                )
        assert tracer.ndim is not None
        fields = tuple(
            _declare(fname, tracer.ndim, tracer.statements, use.timed) for fname, use in _ordered(params, tracer.fields)
        )
        scalars = tuple(p for p in params if p not in tracer.fields)
        return ir.StencilIR(
            name=stencil_name,
            ndim=tracer.ndim,
            fields=fields,
            params=scalars,
            statements=tuple(tracer.statements),
            boundary=boundary,
            loc=def_loc,
        )


def _ordered(params: list[str], uses: dict[str, _FieldUse]) -> list[tuple[str, _FieldUse]]:
    return [(p, uses[p]) for p in params if p in uses]


def _declare(name: str, ndim: int, statements: list[ir.Statement], timed: bool) -> ir.FieldDecl:
    if not timed:
        return ir.FieldDecl(name, ndim, "float64", window=0, written=False)
    oldest = min(
        (a.dt for s in statements for a in s.reads if a.name == name and a.dt is not None and a.dt <= 0),
        default=0,
    )
    return ir.FieldDecl(name, ndim, "float64", window=1 - oldest, written=True)
