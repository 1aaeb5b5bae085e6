"""Operation counts of StencilIR statements: the flops per point the cost
models of the targets charge (every arithmetic operation and call counts one)."""

from __future__ import annotations

from msc import ir


class _Flops(ir.Visitor[int]):
    """Arithmetic operations of an expression (each operator and function call counts 1)."""

    def const(self, e: ir.Const) -> int:
        return 0

    def param_ref(self, e: ir.ParamRef) -> int:
        return 0

    def field_read(self, e: ir.FieldRead) -> int:
        return 0

    def neg(self, e: ir.Neg) -> int:
        return 1 + self.visit(e.operand)

    def not_(self, e: ir.Not) -> int:
        return self.visit(e.operand)

    def bin_op(self, e: ir.BinOp) -> int:
        return 1 + self.visit(e.lhs) + self.visit(e.rhs)

    def call(self, e: ir.Call) -> int:
        return 1 + sum(self.visit(a) for a in e.args)

    def where(self, e: ir.Where) -> int:
        return 1 + self.visit(e.cond) + self.visit(e.then) + self.visit(e.otherwise)


def expr_flops(e: ir.Expr) -> int:
    return _Flops().visit(e)


def flops(statement: ir.Statement) -> int:
    return expr_flops(statement.expr)
