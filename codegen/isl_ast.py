"""Walking an isl AST into C statements.

The walker owns loops, conditions and isl's integer expressions; what a
statement instance does, and what to put around a loop (pragmas, per-step
pointer set-up), is asked of the backend through `AstHooks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

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

# helpers the printed expressions rely on; every generated file includes them
C_HELPERS = """\
static inline long msc_imin(long a, long b) { return a < b ? a : b; }
static inline long msc_imax(long a, long b) { return a > b ? a : b; }
static inline long msc_floord(long a, long b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
"""


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


class AstHooks(Protocol):
    def statement(self, name: str, args: list[str], enclosing: list[int], into: str | None = None) -> list[str]:
        """C lines for one statement instance, given its instance coordinates
        and the schedule dimensions of the loops around it (`into`: the
        lvalue to store to instead of the statement's own field)."""

    def before_loop(self, dim: int, enclosing: list[int]) -> list[str]:
        """Lines (pragmas) before the loop over schedule dimension `dim`,
        inside loops over the schedule dimensions `enclosing` (outermost first)."""

    def loop_prologue(self, dim: int, iterator: str, statements: set[str]) -> list[str]:
        """Lines at the top of the body of the loop over schedule dimension `dim`,
        which contains instances of `statements`."""

    def loop_epilogue(self, dim: int, iterator: str, statements: set[str]) -> list[str]:
        """Lines at the end of the body of that loop."""

    def store_address(self, dim: int, name: str, args: list[str], enclosing: list[int]) -> str | None:
        """Where a statement instance stores, if the loop over `dim` around it
        (inside the loops over `enclosing`) is to write whole cache lines (else None)."""

    def line_prefetches(self, name: str, args: list[str]) -> list[str]:
        """Lines issued once per cache line of such a loop, before the line
        starting at the instance `args` is computed (prefetches)."""

    def row_pointers(self, name: str, args: list[str], iterator: str, enclosing: list[int]) -> list[str]:
        """Declarations before an innermost loop (over `iterator`, inside the
        loops over `enclosing`) of pointers its statement may then read
        through, until `end_rows`."""

    def end_rows(self) -> None:
        """The loop that `row_pointers` prepared is printed."""


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


@dataclass
class AstPrinter:
    hooks: AstHooks
    indent: str = "    "
    _loops: list[int] = field(default_factory=list)

    def print(self, node: isl.AstNode, depth: int = 0) -> list[str]:
        pad = self.indent * depth
        kind = node.get_type()
        if kind == isl.ast_node_type.block:
            lines: list[str] = []
            children = node.block_get_children()
            for k in range(children.n_ast_node()):
                lines += self.print(children.get_at(k), depth)
            return lines
        if kind == isl.ast_node_type.for_:
            return self._for(node, depth)
        if kind == isl.ast_node_type.if_:
            lines = [f"{pad}if ({c_of(node.if_get_cond())}) {{"]
            lines += self.print(node.if_get_then_node(), depth + 1)
            if node.if_has_else_node():
                lines.append(f"{pad}}} else {{")
                lines += self.print(node.if_get_else_node(), depth + 1)
            return lines + [f"{pad}}}"]
        if kind == isl.ast_node_type.user:
            call = node.user_get_expr()
            name = call.op_get_arg(0).id_get_id().get_name()
            args = [c_of(call.op_get_arg(i)) for i in range(1, call.op_get_n_arg())]
            return [pad + line for line in self.hooks.statement(name, args, list(self._loops))]
        if kind == isl.ast_node_type.mark:
            return self.print(node.mark_get_node(), depth)
        raise NotImplementedError(f"isl AST node {kind} is not supported")

    def _for(self, node: isl.AstNode, depth: int) -> list[str]:
        """The loop; an innermost one inside a block with the row pointers its statement reads through."""
        body = node.for_get_body()
        if body.get_type() != isl.ast_node_type.user:
            return self._loop(node, depth)
        call = body.user_get_expr()
        name = call.op_get_arg(0).id_get_id().get_name()
        args = [c_of(call.op_get_arg(i)) for i in range(1, call.op_get_n_arg())]
        it = node.for_get_iterator().id_get_id().get_name()
        rows = self.hooks.row_pointers(name, args, it, list(self._loops))
        try:
            if not rows:
                return self._loop(node, depth)
            pad = self.indent * depth
            return [f"{pad}{{", *[pad + self.indent + ln for ln in rows], *self._loop(node, depth + 1), f"{pad}}}"]
        finally:
            self.hooks.end_rows()

    def _loop(self, node: isl.AstNode, depth: int) -> list[str]:
        pad = self.indent * depth
        it = node.for_get_iterator().id_get_id().get_name()
        dim = int(it.lstrip("c"))
        init = c_of(node.for_get_init())
        body_pad = self.indent * (depth + 1)
        inside = user_statements(node)
        prologue = [body_pad + ln for ln in self.hooks.loop_prologue(dim, it, inside)]
        head = [pad + ln for ln in self.hooks.before_loop(dim, list(self._loops))]
        self._loops.append(dim)
        body = self.print(node.for_get_body(), depth + 1)
        self._loops.pop()
        epilogue = [body_pad + ln for ln in self.hooks.loop_epilogue(dim, it, inside)]
        body += epilogue
        if node.for_is_degenerate():
            return [f"{pad}{{", f"{body_pad}const long {it} = {init};", *prologue, *body, f"{pad}}}"]
        cond = c_of(node.for_get_cond(), top=True)
        inc = c_of(node.for_get_inc())
        if inc == "1" and not prologue and not epilogue:
            in_lines = self._lines(node, dim, it, init, depth)
            if in_lines is not None:
                return in_lines
        step = f"{it}++" if inc == "1" else f"{it} += {inc}"
        return [*head, f"{pad}for (long {it} = {init}; {cond}; {step}) {{", *prologue, *body, f"{pad}}}"]

    def _lines(self, node: isl.AstNode, dim: int, it: str, init: str, depth: int) -> list[str] | None:
        """The loop over `dim` as whole cache lines: scalar iterations up to
        the first aligned store, then MSC_LINE points at a time computed
        into an aligned line buffer and put out with one aligned (or
        streaming) store, then the scalar rest. None when the loop body is
        not one statement whose store the backend writes in lines."""
        body = node.for_get_body()
        if body.get_type() != isl.ast_node_type.user:
            return None
        call = body.user_get_expr()
        name = call.op_get_arg(0).id_get_id().get_name()
        exprs = [call.op_get_arg(i) for i in range(1, call.op_get_n_arg())]
        args = [c_of(e) for e in exprs]
        enclosing = [*self._loops, dim]
        address = self.hooks.store_address(dim, name, args, enclosing)
        if address is None:
            return None
        base_args = [c_of(e, rename={it: "msc_base"}) for e in exprs]
        line_address = self.hooks.store_address(dim, name, base_args, enclosing)
        pad, inner = self.indent * depth, self.indent * (depth + 1)
        deeper = inner + self.indent
        scalar = [deeper + ln for ln in self.hooks.statement(name, args, enclosing)]
        into_line = [deeper + self.indent + ln
                     for ln in self.hooks.statement(name, args, enclosing, into=f"msc_line[{it} - msc_base]")]
        cond = c_of(node.for_get_cond(), top=True)
        last_cond = c_of(node.for_get_cond(), top=True, rename={it: f"({it} + MSC_LINE - 1)"})
        return [
            f"{pad}{{",
            f"{inner}long {it} = {init};",
            f"{inner}for (; {cond} && !msc_line_aligned({address}); {it}++) {{", *scalar, f"{inner}}}",
            f"{inner}for (; {last_cond}; {it} += MSC_LINE) {{",
            f"{deeper}_Alignas(64) real msc_line[MSC_LINE];",
            f"{deeper}const long msc_base = {it};",
            *[deeper + ln for ln in self.hooks.line_prefetches(name, base_args)],
            f"{deeper}#pragma omp simd",
            f"{deeper}for (long {it} = msc_base; {it} < msc_base + MSC_LINE; {it}++) {{", *into_line, f"{deeper}}}",
            f"{deeper}msc_put_line({line_address}, msc_line);",
            f"{inner}}}",
            f"{inner}for (; {cond}; {it}++) {{", *scalar, f"{inner}}}",
            f"{pad}}}",
        ]
