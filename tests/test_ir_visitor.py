"""StencilIR nodes check their operator and function names when made, and
ir.Visitor is the one traversal the printers and the interpreter share."""

from __future__ import annotations

import pytest

from msc import ir
from msc.codegen.printers.cexpr import c_expr
from msc.textual.printer import print_expr

U = ir.FieldRead("u", 0, (1,))


@pytest.mark.parametrize("bad", ["%", "and", "//", ""])
def test_unknown_operator_is_refused(bad):
    with pytest.raises(ValueError, match=f"BinOp: unknown operator {bad!r}"):
        ir.BinOp(bad, U, ir.Const(1.0))


def test_unknown_function_or_arity_is_refused():
    with pytest.raises(ValueError, match="unknown function 'erf'"):
        ir.Call("erf", (U,))
    with pytest.raises(ValueError, match="minimum takes 2 argument"):
        ir.Call("minimum", (U,))
    with pytest.raises(ValueError, match="sqrt takes 1 argument"):
        ir.Call("sqrt", (U, U))


def test_a_visitor_sees_every_node_kind():
    class Count(ir.Visitor[int]):
        def const(self, e): return 1
        def param_ref(self, e): return 1
        def field_read(self, e): return 1
        def neg(self, e): return 1 + self.visit(e.operand)
        def not_(self, e): return 1 + self.visit(e.operand)
        def bin_op(self, e): return 1 + self.visit(e.lhs) + self.visit(e.rhs)
        def call(self, e): return 1 + sum(self.visit(a) for a in e.args)
        def where(self, e): return 1 + self.visit(e.cond) + self.visit(e.then) + self.visit(e.otherwise)

    e = ir.Where(ir.Not(ir.BinOp("<", U, ir.ParamRef("a"))), ir.Neg(ir.Call("maximum", (U, ir.Const(2.0)))), U)
    assert Count().visit(e) == len(list(ir.walk(e))) == 10
    assert print_expr(e) == "where(!(u[t, x+1] < a), -maximum(u[t, x+1], 2.0), u[t, x+1])"
    assert c_expr(e, "float32", lambda r: "U", lambda p: f"p_{p}") == "(((!(U < p_a))) ? (-msc_max(U, 2.0f)) : U)"
    with pytest.raises(NotImplementedError):
        ir.Visitor[int]().visit(U)
