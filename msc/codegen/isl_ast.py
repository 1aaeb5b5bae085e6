"""Reading isl ASTs: their expressions as the kernel IR's integer expressions,
and the statements below a node."""

from __future__ import annotations

import islpy as isl

from msc.codegen import index as ix

_OPS = {
    isl.ast_expr_op_type.add: "+",
    isl.ast_expr_op_type.sub: "-",
    isl.ast_expr_op_type.mul: "*",
    isl.ast_expr_op_type.div: "/",
    isl.ast_expr_op_type.pdiv_q: "/",
    isl.ast_expr_op_type.pdiv_r: "%",
    isl.ast_expr_op_type.zdiv_r: "%",
    isl.ast_expr_op_type.and_: "&&",
    isl.ast_expr_op_type.and_then: "&&",
    isl.ast_expr_op_type.or_: "||",
    isl.ast_expr_op_type.or_else: "||",
    isl.ast_expr_op_type.eq: "==",
    isl.ast_expr_op_type.le: "<=",
    isl.ast_expr_op_type.lt: "<",
    isl.ast_expr_op_type.ge: ">=",
    isl.ast_expr_op_type.gt: ">",
}
_FUNCTIONS = {isl.ast_expr_op_type.min: ix.min_, isl.ast_expr_op_type.max: ix.max_,
              isl.ast_expr_op_type.fdiv_q: ix.floordiv}


def index_of(e: isl.AstExpr) -> ix.Expr:
    """The integer expression of an isl AST expression."""
    kind = e.get_type()
    if kind == isl.ast_expr_type.id:
        return ix.Var(e.id_get_id().get_name())
    if kind == isl.ast_expr_type.int:
        return ix.Lit(e.int_get_val().to_python())
    op = e.op_get_type()
    args = [index_of(e.op_get_arg(i)) for i in range(e.op_get_n_arg())]
    if op in _OPS:
        return ix.Op(_OPS[op], args[0], args[1])
    if op == isl.ast_expr_op_type.minus:
        return ix.Neg(args[0])
    if op in _FUNCTIONS:
        return _FUNCTIONS[op](*args)
    if op in (isl.ast_expr_op_type.cond, isl.ast_expr_op_type.select):
        return ix.Select(*args)
    raise NotImplementedError(f"isl AST operation {op} is not supported")


def user_statements(node: isl.AstNode) -> set[str]:
    """Names of the statements that occur anywhere below `node`."""
    kind = node.get_type()
    if kind == isl.ast_node_type.user:
        return {node.user_get_expr().op_get_arg(0).id_get_id().get_name()}
    if kind == isl.ast_node_type.for_:
        return user_statements(node.for_get_body())
    if kind == isl.ast_node_type.mark:
        return user_statements(node.mark_get_node())
    if kind == isl.ast_node_type.if_:
        names = user_statements(node.if_get_then_node())
        return names | (user_statements(node.if_get_else_node()) if node.if_has_else_node() else set())
    children = node.block_get_children()
    return set().union(*(user_statements(children.get_at(k)) for k in range(children.n_ast_node())))
