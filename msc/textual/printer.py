"""Printing StencilIR as .msc text, so that parse_stencil(print_stencil(ir)) == ir.

Expressions get the fewest parentheses the grammar's precedence allows;
constants are printed with repr(float), which reads back exactly.
"""

from __future__ import annotations

from msc import ir

# Binding strength of each form, as in grammar.lark (higher binds tighter).
_PRECEDENCE = {"|": 1, "&": 2, "<": 3, "<=": 3, ">": 3, ">=": 3, "==": 3, "!=": 3,
               "+": 4, "-": 4, "*": 5, "/": 5, "**": 7}
_UNARY = 6
_ATOM = 8


def print_stencil(stencil: ir.StencilIR) -> str:
    """The .msc text of `stencil`: options, declarations in IR order, statements."""
    lines = [f"stencil {stencil.name} {{", f"    boundary {stencil.boundary};", f"    dtype {stencil.dtype};"]
    for f in stencil.fields:
        dims = ", ".join(ir.DIM_NAMES[: f.ndim])
        lines.append(f"    field {f.name}[{dims}] window {f.window};" if f.written else f"    input {f.name}[{dims}];")
    if stencil.params:
        lines.append(f"    param {', '.join(stencil.params)};")
    lines.append("")
    for s in stencil.statements:
        target = ir.FieldRead(s.target, 1, (0,) * stencil.field(s.target).ndim)
        lines.append(f"    {_access(target)} = {print_expr(s.expr)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def print_expr(e: ir.Expr) -> str:
    return _Text().visit(e)[0]


class _Text(ir.Visitor[tuple[str, int]]):
    """The text of an expression and the precedence of its outermost form."""

    def const(self, e: ir.Const) -> tuple[str, int]:
        text = repr(float(e.value))
        return text, _UNARY if text.startswith("-") else _ATOM

    def param_ref(self, e: ir.ParamRef) -> tuple[str, int]:
        return e.name, _ATOM

    def field_read(self, e: ir.FieldRead) -> tuple[str, int]:
        return _access(e), _ATOM

    def neg(self, e: ir.Neg) -> tuple[str, int]:
        # `-4.0` reads back as the constant -4.0, so a negated constant keeps its parentheses.
        operand = f"({print_expr(e.operand)})" if isinstance(e.operand, ir.Const) else self._operand(e.operand, _UNARY)
        return f"-{operand}", _UNARY

    def not_(self, e: ir.Not) -> tuple[str, int]:
        return f"!{self._operand(e.operand, _UNARY)}", _UNARY

    def bin_op(self, e: ir.BinOp) -> tuple[str, int]:
        p = _PRECEDENCE[e.op]
        if e.op == "**":  # right-associative; its exponent may be a unary form
            left, right = _ATOM, _UNARY
        elif p == _PRECEDENCE["<"]:  # comparisons do not chain
            left, right = p + 1, p + 1
        else:
            left, right = p, p + 1
        return f"{self._operand(e.lhs, left)} {e.op} {self._operand(e.rhs, right)}", p

    def call(self, e: ir.Call) -> tuple[str, int]:
        return f"{e.func}({', '.join(print_expr(a) for a in e.args)})", _ATOM

    def where(self, e: ir.Where) -> tuple[str, int]:
        return f"where({print_expr(e.cond)}, {print_expr(e.then)}, {print_expr(e.otherwise)})", _ATOM

    def _operand(self, e: ir.Expr, needed: int) -> str:
        text, precedence = self.visit(e)
        return f"({text})" if precedence < needed else text


def _access(read: ir.FieldRead) -> str:
    parts = [] if read.dt is None else [_index("t", read.dt)]
    parts += [_index(ir.DIM_NAMES[d], o) for d, o in enumerate(read.offsets)]
    return f"{read.name}[{', '.join(parts)}]"


def _index(sym: str, offset: int) -> str:
    return sym if offset == 0 else f"{sym}{offset:+d}"
