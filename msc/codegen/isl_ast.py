"""isl AST expressions as integer-expression text (the syntax C, CUDA C++
and Sunway C share), and the helpers that text relies on."""

from __future__ import annotations

import islpy as isl

_BINARY_OPS = {
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

def int_helpers(qualifier: str = "static inline") -> str:
    """The integer helpers the printed expressions rely on (every generated file
    includes them), declared with `qualifier` (a GPU's: callable on host and device)."""
    return (f"{qualifier} long msc_imin(long a, long b) {{ return a < b ? a : b; }}\n"
            f"{qualifier} long msc_imax(long a, long b) {{ return a > b ? a : b; }}\n"
            f"{qualifier} long msc_floord(long a, long b) {{ return a >= 0 ? a / b : -((-a + b - 1) / b); }}\n")


def c_of(e: isl.AstExpr, top: bool = False, rename: dict[str, str] | None = None) -> str:
    """C source of an isl AST expression (`top`: no parentheses around it,
    as OpenMP wants for a loop's controlling predicate; `rename`: C text to
    print in place of some identifiers)."""
    kind = e.get_type()
    if kind == isl.ast_expr_type.id:
        name = e.id_get_id().get_name()
        return rename.get(name, name) if rename else name
    if kind == isl.ast_expr_type.int:
        return str(e.int_get_val().to_python())
    op = e.op_get_type()
    args = [c_of(e.op_get_arg(i), rename=rename) for i in range(e.op_get_n_arg())]
    if op in _BINARY_OPS:
        text = f"{args[0]} {_BINARY_OPS[op]} {args[1]}"
        return text if top else f"({text})"
    if op == isl.ast_expr_op_type.minus:
        return f"(-{args[0]})"
    if op in (isl.ast_expr_op_type.min, isl.ast_expr_op_type.max):
        fn = "msc_imin" if op == isl.ast_expr_op_type.min else "msc_imax"
        out = args[0]
        for a in args[1:]:
            out = f"{fn}({out}, {a})"
        return out
    if op == isl.ast_expr_op_type.fdiv_q:
        return f"msc_floord({args[0]}, {args[1]})"
    if op in (isl.ast_expr_op_type.cond, isl.ast_expr_op_type.select):
        return f"({args[0]} ? {args[1]} : {args[2]})"
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
