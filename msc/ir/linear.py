"""Linear-form analysis of StencilIR expressions.

`linear_form(expr, unknowns)` splits an expression that is affine in the
reads of the `unknowns` fields into

    sum over reads (field, dt, offsets) of coefficient * read  +  constant

where each coefficient and the constant are IR expressions free of unknown
reads (scalar parameters, constants, coefficient fields, math on those), so
variable coefficients such as `k[x+1, y]` in div(k grad u) stay symbolic and
are evaluated per point by whoever uses the form (matrix assembly, a
tensor-core path). A term that is not affine in the unknowns raises
NonLinearError naming that term and its file:line.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from msc import ir
from msc.errors import StencilDefinitionError

Key = tuple[str, "int | None", tuple[int, ...]]


class NonLinearError(StencilDefinitionError):
    """An expression is not affine in its unknowns."""


@dataclass(frozen=True)
class LinearForm:
    """`terms[(field, dt, offsets)]` is the coefficient of that read; `constant` the rest (None: 0)."""

    terms: dict[Key, ir.Expr]
    constant: ir.Expr | None

    @property
    def keys(self) -> list[Key]:
        return list(self.terms)


ZERO = ir.Const(0.0)
ONE = ir.Const(1.0)


def linear_form(expr: ir.Expr, unknowns: Collection[str],
                where: Callable[[ir.Expr], str] | None = None) -> LinearForm:
    """The affine decomposition of `expr` in the reads of `unknowns`.

    `where(node)` names the source location of a node for error messages
    (for example "file.py:12: in operator 'lap'").
    """
    return _Linear(frozenset(unknowns), where or (lambda _node: "")).visit(expr)


@dataclass
class _Linear(ir.Visitor[LinearForm]):
    unknown: frozenset[str]
    locate: Callable[[ir.Expr], str]

    def _nonlinear(self, node: ir.Expr, why: str) -> NonLinearError:
        prefix = self.locate(node)
        return NonLinearError(f"{prefix + ': ' if prefix else ''}non-linear term '{show(node)}': {why}")

    def _opaque(self, e: ir.Expr, kind: str) -> LinearForm:
        """A node no unknown may reach (a function, a comparison, ...): a constant of the form."""
        parts = [self.visit(c) for c in ir.children(e)]
        if any(p.terms for p in parts):
            raise self._nonlinear(e, f"{kind} applied to the unknowns")
        return LinearForm({}, e)

    def const(self, e: ir.Const) -> LinearForm:
        return LinearForm({}, e)

    def param_ref(self, e: ir.ParamRef) -> LinearForm:
        return LinearForm({}, e)

    def field_read(self, e: ir.FieldRead) -> LinearForm:
        if e.name in self.unknown:
            return LinearForm({(e.name, e.dt, e.offsets): ONE}, None)
        return LinearForm({}, e)

    def neg(self, e: ir.Neg) -> LinearForm:
        return _map(self.visit(e.operand), _neg)

    def not_(self, e: ir.Not) -> LinearForm:
        return self._opaque(e, "not")

    def call(self, e: ir.Call) -> LinearForm:
        return self._opaque(e, f"{e.func}(...)")

    def where(self, e: ir.Where) -> LinearForm:
        return self._opaque(e, "where")

    def bin_op(self, e: ir.BinOp) -> LinearForm:
        if e.op in ("+", "-"):
            return self._sum(e)
        if e.op == "*":
            a, b = self.visit(e.lhs), self.visit(e.rhs)
            if a.terms and b.terms:
                raise self._nonlinear(e, "a product of two factors that both depend on the unknowns")
            if a.terms:
                a, b = b, a
            factor = a.constant or ZERO  # a is free of unknowns: scale b by it
            return _map(b, lambda c: _mul(factor, c))
        if e.op == "/":
            a, b = self.visit(e.lhs), self.visit(e.rhs)
            if b.terms:
                raise self._nonlinear(e, "division by an expression that depends on the unknowns")
            divisor = b.constant or ZERO
            return _map(a, lambda c: _div(c, divisor))
        return self._opaque(e, f"'{e.op}'")

    def _sum(self, e: ir.BinOp) -> LinearForm:
        """A chain of + and -: a left-deep one (s = s + ...) is walked by a loop, not by recursion."""
        summands: list[tuple[bool, ir.Expr]] = []
        node: ir.Expr = e
        while isinstance(node, ir.BinOp) and node.op in ("+", "-"):
            summands.append((node.op == "-", node.rhs))
            node = node.lhs
        summands.append((False, node))
        terms: dict[Key, ir.Expr] = {}
        constant: ir.Expr | None = None
        for negate, part in reversed(summands):
            b = self.visit(part)
            if negate:
                b = _map(b, _neg)
            for k, c in b.terms.items():
                terms[k] = _add(terms[k], c) if k in terms else c
            constant = _add_opt(constant, b.constant)
        return LinearForm(terms, constant)


def _map(f: LinearForm, fn: Callable[[ir.Expr], ir.Expr]) -> LinearForm:
    return LinearForm({k: fn(c) for k, c in f.terms.items()},
                      None if f.constant is None else fn(f.constant))


def _neg(a: ir.Expr) -> ir.Expr:
    if isinstance(a, ir.Const):
        return ir.Const(-a.value)
    if isinstance(a, ir.Neg):
        return a.operand
    return ir.Neg(a)


def _add(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    if isinstance(a, ir.Const) and isinstance(b, ir.Const):
        return ir.Const(a.value + b.value)
    return ir.BinOp("+", a, b)


def _add_opt(a: ir.Expr | None, b: ir.Expr | None) -> ir.Expr | None:
    if a is None:
        return b
    if b is None:
        return a
    return _add(a, b)


def _mul(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    if isinstance(a, ir.Const) and isinstance(b, ir.Const):
        return ir.Const(a.value * b.value)
    if a == ONE:
        return b
    if b == ONE:
        return a
    return ir.BinOp("*", a, b)


def _div(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    if isinstance(a, ir.Const) and isinstance(b, ir.Const) and b.value != 0:
        return ir.Const(a.value / b.value)
    return ir.BinOp("/", a, b)


def show(e: ir.Expr) -> str:
    """A short Python-like rendering of an expression for messages."""
    return _Show().visit(e)


class _Show(ir.Visitor[str]):
    def const(self, e: ir.Const) -> str:
        return f"{e.value:g}"

    def param_ref(self, e: ir.ParamRef) -> str:
        return e.name

    def field_read(self, e: ir.FieldRead) -> str:
        idx = [] if e.dt is None else ["t" if e.dt == 0 else f"t{e.dt:+d}"]
        idx += [d if o == 0 else f"{d}{o:+d}" for d, o in zip(ir.DIM_NAMES, e.offsets)]
        return f"{e.name}[{', '.join(idx)}]"

    def neg(self, e: ir.Neg) -> str:
        return f"-{_paren(e.operand)}"

    def not_(self, e: ir.Not) -> str:
        return f"~{_paren(e.operand)}"

    def bin_op(self, e: ir.BinOp) -> str:
        return f"{_paren(e.lhs)} {e.op} {_paren(e.rhs)}"

    def call(self, e: ir.Call) -> str:
        return f"{e.func}({', '.join(self.visit(a) for a in e.args)})"

    def where(self, e: ir.Where) -> str:
        return f"where({self.visit(e.cond)}, {self.visit(e.then)}, {self.visit(e.otherwise)})"


def _paren(e: ir.Expr) -> str:
    s = show(e)
    return f"({s})" if isinstance(e, (ir.BinOp, ir.Neg)) else s
