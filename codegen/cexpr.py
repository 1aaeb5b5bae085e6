"""Printing StencilIR expressions as C (shared by every C-family backend)."""

from __future__ import annotations

from typing import Callable

from msc import ir

_C_FUNC = {"sqrt": "sqrt", "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "abs": "fabs"}
_C_OP = {"&": "&&", "|": "||"}


def c_literal(value: float, dtype: str) -> str:
    text = repr(float(value))
    if text in ("inf", "-inf", "nan"):
        return {"inf": "INFINITY", "-inf": "(-INFINITY)", "nan": "NAN"}[text]
    if "e" not in text and "." not in text:
        text += ".0"
    return f"{text}f" if dtype == "float32" else text


def c_expr(e: ir.Expr, dtype: str, access: Callable[[ir.FieldRead], str], param: Callable[[str], str]) -> str:
    """C source for `e`; `access` prints a field read, `param` names a scalar parameter."""

    def go(n: ir.Expr) -> str:
        if isinstance(n, ir.Const):
            return c_literal(n.value, dtype)
        if isinstance(n, ir.ParamRef):
            return param(n.name)
        if isinstance(n, ir.FieldRead):
            return access(n)
        if isinstance(n, ir.Neg):
            return f"(-{go(n.operand)})"
        if isinstance(n, ir.Not):
            return f"(!{go(n.operand)})"
        if isinstance(n, ir.BinOp):
            if n.op == "**":
                return _power(n, go)
            return f"({go(n.lhs)} {_C_OP.get(n.op, n.op)} {go(n.rhs)})"
        if isinstance(n, ir.Call):
            if n.func in ("minimum", "maximum"):
                return f"msc_{n.func[:3]}({go(n.args[0])}, {go(n.args[1])})"
            suffix = "f" if dtype == "float32" else ""
            return f"{_C_FUNC[n.func]}{suffix}({go(n.args[0])})"
        if isinstance(n, ir.Where):
            return f"(({go(n.cond)}) ? {go(n.then)} : {go(n.otherwise)})"
        raise TypeError(f"unknown expression node {n!r}")

    def _power(n: ir.BinOp, go: Callable[[ir.Expr], str]) -> str:
        if isinstance(n.rhs, ir.Const) and n.rhs.value in (1.0, 2.0, 3.0):
            base = go(n.lhs)
            return "(" + " * ".join([base] * int(n.rhs.value)) + ")"
        suffix = "f" if dtype == "float32" else ""
        return f"pow{suffix}({go(n.lhs)}, {go(n.rhs)})"

    return go(e)
