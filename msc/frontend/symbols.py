"""The user-facing symbolic values of the DSL: index symbols t/x/y/z, traced
expressions with Python operators, and the math functions (msc.sqrt, ...).

A traced value wraps an IR expression node; operators build new nodes. Any
misuse (scaled indices, Python `if` on a traced value) raises a
StencilDefinitionError through the active tracer, which adds the stencil name
and the user's file:line.
"""

from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from msc import ir
from msc.errors import StencilDefinitionError
from msc.frontend import context


@dataclass(frozen=True)
class IndexExpr:
    """`sym + offset`, e.g. x-1 or t+1: the only index form msc accepts."""

    sym: str
    offset: int = 0

    def __add__(self, other: Any) -> IndexExpr:
        if isinstance(other, numbers.Integral) and not isinstance(other, bool):
            return IndexExpr(self.sym, self.offset + int(other))
        raise _index_error(self, "+", other)

    __radd__ = __add__

    def __sub__(self, other: Any) -> IndexExpr:
        if isinstance(other, numbers.Integral) and not isinstance(other, bool):
            return IndexExpr(self.sym, self.offset - int(other))
        raise _index_error(self, "-", other)

    def __rsub__(self, other: Any) -> IndexExpr:
        raise _index_error(other, "-", self)

    def __mul__(self, other: Any) -> IndexExpr:
        raise _index_error(self, "*", other)

    def __rmul__(self, other: Any) -> IndexExpr:
        raise _index_error(other, "*", self)

    def __truediv__(self, other: Any) -> IndexExpr:
        raise _index_error(self, "/", other)

    __floordiv__ = __mod__ = __pow__ = __truediv__

    def __neg__(self) -> IndexExpr:
        raise _index_error("", "-", self)

    def __str__(self) -> str:
        if self.offset == 0:
            return self.sym
        return f"{self.sym}{self.offset:+d}"


def _index_error(a: Any, op: str, b: Any) -> StencilDefinitionError:
    return context.definition_error(
        f"index expression '{a}{op}{b}' is not an affine index: use a symbol plus or minus a "
        "whole number, like x+1 or t-1 (scaled, non-integer or combined indices are not supported)"
    )


t = IndexExpr("t")
x = IndexExpr("x")
y = IndexExpr("y")
z = IndexExpr("z")


class Operand:
    """Operator overloading shared by traced expressions and scalar parameters."""

    def _expr(self) -> ir.Expr:
        raise NotImplementedError

    def _bin(self, op: str, other: Any, reverse: bool = False) -> Traced:
        a, b = self._expr(), as_expr(other)
        return Traced(ir.BinOp(op, b, a) if reverse else ir.BinOp(op, a, b))

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """numpy's operators on a traced value (a numpy number times a field read) build
        expressions; its math functions are refused, naming msc's own."""
        arithmetic = _NUMPY_OPERATORS.get(ufunc)
        if arithmetic is not None and method == "__call__" and not kwargs:
            return arithmetic(*(v if isinstance(v, Operand) else Traced(as_expr(v)) for v in inputs))
        name = f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        ours = _NUMPY_EQUIVALENTS.get(ufunc.__name__)
        advice = f"use msc.{ours}" if ours else f"msc's functions are {', '.join(FUNCTIONS)}"
        raise context.definition_error(f"{name} cannot take a traced value (numpy computes on numbers, "
                                       f"not on stencil expressions): {advice}")

    def __add__(self, o: Any) -> Traced:
        return self._bin("+", o)

    def __radd__(self, o: Any) -> Traced:
        return self._bin("+", o, True)

    def __sub__(self, o: Any) -> Traced:
        return self._bin("-", o)

    def __rsub__(self, o: Any) -> Traced:
        return self._bin("-", o, True)

    def __mul__(self, o: Any) -> Traced:
        return self._bin("*", o)

    def __rmul__(self, o: Any) -> Traced:
        return self._bin("*", o, True)

    def __truediv__(self, o: Any) -> Traced:
        return self._bin("/", o)

    def __rtruediv__(self, o: Any) -> Traced:
        return self._bin("/", o, True)

    def __pow__(self, o: Any) -> Traced:
        return self._bin("**", o)

    def __rpow__(self, o: Any) -> Traced:
        return self._bin("**", o, True)

    def __neg__(self) -> Traced:
        return Traced(ir.Neg(self._expr()))

    def __pos__(self) -> Traced:
        return Traced(self._expr())

    def __lt__(self, o: Any) -> Traced:
        return self._bin("<", o)

    def __le__(self, o: Any) -> Traced:
        return self._bin("<=", o)

    def __gt__(self, o: Any) -> Traced:
        return self._bin(">", o)

    def __ge__(self, o: Any) -> Traced:
        return self._bin(">=", o)

    def __eq__(self, o: Any) -> Traced:  # type: ignore[override]
        return self._bin("==", o)

    def __ne__(self, o: Any) -> Traced:  # type: ignore[override]
        return self._bin("!=", o)

    def __and__(self, o: Any) -> Traced:
        return self._bin("&", o)

    def __rand__(self, o: Any) -> Traced:
        return self._bin("&", o, True)

    def __or__(self, o: Any) -> Traced:
        return self._bin("|", o)

    def __ror__(self, o: Any) -> Traced:
        return self._bin("|", o, True)

    def __invert__(self) -> Traced:
        return Traced(ir.Not(self._expr()))

    def __bool__(self) -> bool:
        raise context.definition_error(
            "a traced value was used in Python control flow (if/while/and/or/not): "
            "use msc.where(cond, a, b) and the operators & | ~ instead"
        )

    __hash__ = object.__hash__


class Traced(Operand):
    """A value computed from fields and parameters during tracing."""

    def __init__(self, node: ir.Expr) -> None:
        self.node = node

    def _expr(self) -> ir.Expr:
        return self.node

    def __repr__(self) -> str:
        return f"Traced({self.node})"


def as_expr(value: Any) -> ir.Expr:
    """Turn a traced value or a Python/numpy number into an IR expression."""
    if isinstance(value, Operand):
        return value._expr()
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return ir.Const(float(value))
    if isinstance(value, IndexExpr):
        raise context.definition_error(
            f"index symbol '{value}' used as a value: index symbols may only appear inside [...]"
        )
    raise context.definition_error(
        f"cannot use a value of type {type(value).__name__} ({value!r}) in a stencil expression"
    )


_NUMPY_OPERATORS: dict[np.ufunc, Callable[..., Any]] = {
    np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul, np.true_divide: operator.truediv,
    np.power: operator.pow, np.negative: operator.neg, np.positive: operator.pos, np.less: operator.lt,
    np.less_equal: operator.le, np.greater: operator.gt, np.greater_equal: operator.ge, np.equal: operator.eq,
    np.not_equal: operator.ne,
}
# numpy's name of a function -> msc's
_NUMPY_EQUIVALENTS = {"sqrt": "sqrt", "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "tanh": "tanh",
                      "floor": "floor", "absolute": "abs", "fabs": "abs", "minimum": "minimum", "fmin": "minimum",
                      "maximum": "maximum", "fmax": "maximum", "arctan2": "atan2"}
FUNCTIONS = (*ir.MATH_FUNCTIONS, *ir.BINARY_FUNCTIONS, "where")


def _call(func: str, *args: Any) -> Traced:
    return Traced(ir.Call(func, tuple(as_expr(a) for a in args)))


def sqrt(a: Any) -> Traced:
    return _call("sqrt", a)


def exp(a: Any) -> Traced:
    return _call("exp", a)


def log(a: Any) -> Traced:
    return _call("log", a)


def sin(a: Any) -> Traced:
    return _call("sin", a)


def cos(a: Any) -> Traced:
    return _call("cos", a)


def tanh(a: Any) -> Traced:
    return _call("tanh", a)


def floor(a: Any) -> Traced:
    return _call("floor", a)


def abs(a: Any) -> Traced:  # noqa: A001 - the DSL's name
    return _call("abs", a)


def minimum(a: Any, b: Any) -> Traced:
    return _call("minimum", a, b)


def maximum(a: Any, b: Any) -> Traced:
    return _call("maximum", a, b)


def atan2(a: Any, b: Any) -> Traced:
    """The angle of the point (b, a), as numpy's arctan2(a, b) and C's atan2(a, b)."""
    return _call("atan2", a, b)


def where(cond: Any, a: Any, b: Any) -> Traced:
    """`a` where `cond` holds, else `b` (element-wise)."""
    return Traced(ir.Where(as_expr(cond), as_expr(a), as_expr(b)))
