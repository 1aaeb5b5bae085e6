"""Printing StencilIR expressions as C (shared by every C-family printer)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeGuard

from msc import ir

_C_FUNC = {"sqrt": "sqrt", "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "tanh": "tanh", "floor": "floor",
           "abs": "fabs", "atan2": "atan2"}
_C_HELPER = {"minimum": "msc_min", "maximum": "msc_max"}  # defined by every kernel template
_C_OP = {"&": "&&", "|": "||"}


def c_literal(value: float, dtype: str) -> str:
    text = repr(float(value))
    if text in ("inf", "-inf", "nan"):
        return {"inf": "INFINITY", "-inf": "(-INFINITY)", "nan": "NAN"}[text]
    if "e" not in text and "." not in text:
        text += ".0"
    return f"{text}f" if dtype == "float32" else text


@dataclass
class _CExpr(ir.Visitor[str]):
    dtype: str
    access: Callable[[ir.FieldRead], str]
    param: Callable[[str], str]
    fused: bool = False

    def const(self, e: ir.Const) -> str:
        return c_literal(e.value, self.dtype)

    def param_ref(self, e: ir.ParamRef) -> str:
        return self.param(e.name)

    def field_read(self, e: ir.FieldRead) -> str:
        return self.access(e)

    def neg(self, e: ir.Neg) -> str:
        return f"(-{self.visit(e.operand)})"

    def not_(self, e: ir.Not) -> str:
        return f"(!{self.visit(e.operand)})"

    def bin_op(self, e: ir.BinOp) -> str:
        if e.op == "**":
            if isinstance(e.rhs, ir.Const) and e.rhs.value in (1.0, 2.0, 3.0):
                return "(" + " * ".join([self.visit(e.lhs)] * int(e.rhs.value)) + ")"
            if isinstance(e.rhs, ir.Const) and e.rhs.value == 0.5:  # as numpy, which takes sqrt: nan at -inf
                return f"sqrt{self._suffix()}({self.visit(e.lhs)})"
            return f"pow{self._suffix()}({self.visit(e.lhs)}, {self.visit(e.rhs)})"
        if self.fused and e.op in ("+", "-"):
            fused = self._fused(e)
            if fused is not None:
                return fused
        return f"({self.visit(e.lhs)} {_C_OP.get(e.op, e.op)} {self.visit(e.rhs)})"

    def _fused(self, e: ir.BinOp) -> str | None:
        """`a + b * c` (or `a - b * c`, `b * c +- a`) as one multiply-add rounded once, the
        right-hand product first: the C says how each value rounds, whatever the compiler's
        contraction, so every kernel of a point computes it bitwise alike."""
        fma = f"fma{self._suffix()}"
        if _is_product(e.rhs):
            b, c = e.rhs.lhs, e.rhs.rhs
            factor = self.visit(b) if e.op == "+" else f"(-{self.visit(b)})"
            return f"{fma}({factor}, {self.visit(c)}, {self.visit(e.lhs)})"
        if _is_product(e.lhs):
            b, c = e.lhs.lhs, e.lhs.rhs
            addend = self.visit(e.rhs) if e.op == "+" else f"(-{self.visit(e.rhs)})"
            return f"{fma}({self.visit(b)}, {self.visit(c)}, {addend})"
        return None

    def call(self, e: ir.Call) -> str:
        name = _C_HELPER.get(e.func) or f"{_C_FUNC[e.func]}{self._suffix()}"
        return f"{name}({', '.join(self.visit(a) for a in e.args)})"

    def where(self, e: ir.Where) -> str:
        return f"(({self.visit(e.cond)}) ? {self.visit(e.then)} : {self.visit(e.otherwise)})"

    def _suffix(self) -> str:
        return "f" if self.dtype == "float32" else ""


def _is_product(e: ir.Expr) -> TypeGuard[ir.BinOp]:
    return isinstance(e, ir.BinOp) and e.op == "*"


def c_expr(e: ir.Expr, dtype: str, access: Callable[[ir.FieldRead], str], param: Callable[[str], str],
           fused: bool = False) -> str:
    """C source for `e`; `access` prints a field read, `param` names a scalar parameter; `fused`: each
    sum or difference with a product as an operand is one `fma` (rounded once)."""
    return _CExpr(dtype, access, param, fused).visit(e)
