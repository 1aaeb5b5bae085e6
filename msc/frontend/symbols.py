"""The user-facing symbolic values of the DSL: index symbols t/x/y/z, traced
expressions with Python operators, and the math functions (msc.sqrt, ...).

A traced value wraps an IR expression node; operators build new nodes. Any
misuse (scaled indices, Python `if` on a traced value) raises a
StencilDefinitionError through the active tracer, which adds the stencil name
and the user's file:line.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import numbers
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable, NoReturn

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


def _no_operation(what: str, instead: str) -> StencilDefinitionError:
    return context.definition_error(
        f"{what} is not an msc operation (msc has + - * / **, comparisons, and & | ~ on conditions): {instead}"
    )


def _refused(what: str, instead: str) -> Callable[..., NoReturn]:
    """An operator method that refuses the operation `what` (_no_operation)."""
    def refuse(self: Any, *operands: Any) -> NoReturn:
        raise _no_operation(what, instead)
    return refuse


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

    def _describe(self) -> str:
        return "a traced value"

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
        if ufunc.__name__ in ("fmin", "fmax"):
            advice += f" (which gives NaN where either side is NaN, as np.{ours} does; {name} would skip it)"
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

    def __pow__(self, o: Any, modulo: Any = None) -> Traced:
        if modulo is not None:
            raise _no_operation("pow(a, b, m)", "use a**b and the remainder as a - m * msc.floor(a / m)")
        return self._bin("**", o)

    def __rpow__(self, o: Any) -> Traced:
        return self._bin("**", o, True)

    # Python operators msc has no operation for: each a definition error that says what to write instead
    __floordiv__ = __rfloordiv__ = _refused("floor division a // b", "use msc.floor(a / b)")
    __mod__ = __rmod__ = _refused("the remainder a % b", "use a - b * msc.floor(a / b) (Python's %, signed like b)")
    __divmod__ = __rdivmod__ = _refused("divmod(a, b)", "use msc.floor(a / b) and a - b * msc.floor(a / b)")
    __xor__ = __rxor__ = _refused("the exclusive or a ^ b", "for conditions a and b, use (a | b) & ~(a & b)")
    __lshift__ = __rlshift__ = _refused("the shift a << b", "use a * 2**b")
    __rshift__ = __rrshift__ = _refused("the shift a >> b", "use msc.floor(a / 2**b)")
    __matmul__ = __rmatmul__ = _refused("the matrix product a @ b",
                                        "a stencil computes one number per point: write the sum of products out")

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

    def __abs__(self) -> Traced:
        return _call("abs", self)

    def __index__(self) -> NoReturn:
        raise self._runtime_value(
            "used as a Python integer (a range() bound, or an index of a list or a NumPy array)",
            "loop bounds and indices must be Python integers, such as a constant or a variable of the enclosing scope",
        )

    def __int__(self) -> NoReturn:
        raise self._runtime_value("passed to int()", "msc.floor(a) rounds down")

    def __trunc__(self) -> NoReturn:
        raise self._runtime_value("passed to math.trunc()", "msc.floor(a) rounds down")

    def __len__(self) -> NoReturn:
        raise self._runtime_value("asked for its length (len() or iteration)",
                                  "a stencil expression is one number per point, not a sequence")

    def __iter__(self) -> NoReturn:
        raise self._runtime_value("iterated over", "a stencil expression is one number per point, not a sequence")

    def __round__(self, ndigits: Any = None) -> NoReturn:
        raise self._runtime_value("passed to round()", "msc.floor(a + 0.5) rounds to the nearest whole number")

    def __float__(self) -> NoReturn:
        raise self._runtime_value(
            "converted to a Python number (by float() or a math.* function)",
            f"use it in the expression as it is, and msc's functions ({', '.join(FUNCTIONS)}) in place of math's",
        )

    def _runtime_value(self, use: str, instead: str) -> StencilDefinitionError:
        return context.raised(context.definition_error(
            f"{self._describe()} was {use}, but it has a value only when the stencil runs: {instead}"
        ))

    def __bool__(self) -> bool:
        loc = context.user_location()
        advice = "use msc.where(cond, a, b) and the operators & | ~ instead"
        if re.search(r"(?<![\w.])(min|max)\s*\(", linecache.getline(loc.file, loc.line)):
            advice = "Python's min() and max() decide with an if: use msc.minimum(a, b) and msc.maximum(a, b)"
        raise context.raised(context.definition_error(
            f"a traced value was used in Python control flow (if/while/and/or/not, min/max): {advice}", loc))

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
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        return ir.Const(float(value))  # a numpy number, as numpy hands it to __array_ufunc__ in a comparison
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


def _checked_arguments(func: Callable[..., Traced]) -> Callable[..., Traced]:
    """msc's function `func`, reporting a call with wrong arguments as a definition error."""
    signature = inspect.signature(func)
    takes = len(signature.parameters)
    usage = f"msc.{func.__name__}({', '.join(signature.parameters)}) takes {takes} argument{'s' if takes > 1 else ''}"

    @functools.wraps(func)
    def checked(*args: Any, **kwargs: Any) -> Traced:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as e:
            given = len(args) + len(kwargs)
            raise context.definition_error(f"{usage}, got {given}" + (f" ({e})" if kwargs else "")) from None
        return func(*args, **kwargs)

    return checked


@_checked_arguments
def sqrt(a: Any) -> Traced:
    return _call("sqrt", a)


@_checked_arguments
def exp(a: Any) -> Traced:
    return _call("exp", a)


@_checked_arguments
def log(a: Any) -> Traced:
    return _call("log", a)


@_checked_arguments
def sin(a: Any) -> Traced:
    return _call("sin", a)


@_checked_arguments
def cos(a: Any) -> Traced:
    return _call("cos", a)


@_checked_arguments
def tanh(a: Any) -> Traced:
    return _call("tanh", a)


@_checked_arguments
def floor(a: Any) -> Traced:
    return _call("floor", a)


@_checked_arguments
def abs(a: Any) -> Traced:  # noqa: A001 - the DSL's name
    return _call("abs", a)


@_checked_arguments
def minimum(a: Any, b: Any) -> Traced:
    return _call("minimum", a, b)


@_checked_arguments
def maximum(a: Any, b: Any) -> Traced:
    return _call("maximum", a, b)


@_checked_arguments
def atan2(a: Any, b: Any) -> Traced:
    """The angle of the point (b, a), as numpy's arctan2(a, b) and C's atan2(a, b)."""
    return _call("atan2", a, b)


@_checked_arguments
def where(cond: Any, a: Any, b: Any) -> Traced:
    """`a` where `cond` holds, else `b` (element-wise)."""
    return Traced(ir.Where(as_expr(cond), as_expr(a), as_expr(b)))
