"""The kernel IR as C statements (shared by the C-family targets).

A loop's `mapping` is printed as `#pragma <mapping>` before it (a target
whose passes set none prints plain loops); unrolling as `#pragma GCC unroll`.
"""

from __future__ import annotations

from dataclasses import dataclass

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen.lower import param_name
from msc.codegen.printers.cexpr import c_expr

C_TYPES = {"float64": "double", "float32": "float"}
INDENT = "    "

# C's precedence of each integer operation (higher binds tighter)
ATOM, UNARY, MULTIPLICATIVE, ADDITIVE, RELATIONAL, SELECT = 16, 14, 13, 12, 10, 3
_PRECEDENCE = {"*": MULTIPLICATIVE, "/": MULTIPLICATIVE, "%": MULTIPLICATIVE, "+": ADDITIVE, "-": ADDITIVE,
               "<": RELATIONAL, "<=": RELATIONAL, ">": RELATIONAL, ">=": RELATIONAL, "==": 9, "!=": 9, "&": 8,
               "&&": 5, "||": 4}
_FUNCTIONS = dict(zip(ix.FUNCTIONS, ("msc_imin", "msc_imax", "msc_floord")))  # the helpers of `int_helpers`


def int_helpers(qualifier: str = "static inline") -> str:
    """The integer helpers printed expressions rely on (every generated file
    includes them), declared with `qualifier` (a GPU's: callable on host and device)."""
    return (f"{qualifier} long msc_imin(long a, long b) {{ return a < b ? a : b; }}\n"
            f"{qualifier} long msc_imax(long a, long b) {{ return a > b ? a : b; }}\n"
            f"{qualifier} long msc_floord(long a, long b) {{ return a >= 0 ? a / b : -((-a + b - 1) / b); }}\n")


def _precedence(e: ix.Expr) -> int:
    if isinstance(e, ix.Op):
        return _PRECEDENCE[e.op]
    if isinstance(e, k.Compute):  # printed by `c_expr`, which parenthesises all but a read, a literal and a call
        if isinstance(e.expr, ir.FieldRead):
            return _precedence(dict(e.loads)[e.expr])
        return UNARY if isinstance(e.expr, ir.Const) and e.expr.value < 0 else ATOM
    if isinstance(e, (ix.Neg, ix.Not, ix.Cast, k.Address)) or (isinstance(e, ix.Lit) and e.value < 0):
        return UNARY
    return SELECT if isinstance(e, ix.Select) else ATOM


def c_int(e: ix.Expr, within: int = 0) -> str:
    """C source of an integer (or value) expression, parenthesised where the operations
    around it (of precedence `within`) would bind tighter. Parentheses keep
    the tree's shape, and set off a comparison or connective inside another."""
    text = _c_int(e)
    return f"({text})" if _precedence(e) < within else text


def _set_off(outer: str, inner: str) -> bool:
    """Whether C compilers ask for parentheses around `inner` inside `outer`: a
    comparison in a comparison, `&&` in `||` (or the reverse), arithmetic or a
    comparison in a bitwise and."""
    return ((outer in ix.COMPARISONS and inner in ix.COMPARISONS)
            or (outer in ix.LOGICAL and inner in ix.LOGICAL and inner != outer)
            or (outer in ix.BITWISE and inner in ix.ARITHMETIC + ix.COMPARISONS))


def _c_int(e: ix.Expr) -> str:
    if isinstance(e, ix.Var):
        return e.name
    if isinstance(e, ix.Lit):
        return str(e.value)
    if isinstance(e, ix.Op):
        p = _PRECEDENCE[e.op]

        def side(o: ix.Expr, tighter: int) -> str:
            if isinstance(o, ix.Op) and _set_off(e.op, o.op):
                return f"({_c_int(o)})"
            return c_int(o, tighter)
        return f"{side(e.lhs, p)} {e.op} {side(e.rhs, p + 1)}"
    if isinstance(e, (ix.Neg, ix.Not)):
        return f"{'-' if isinstance(e, ix.Neg) else '!'}{c_int(e.operand, UNARY + 1)}"
    if isinstance(e, ix.Cast):
        return f"({e.to}){c_int(e.operand, UNARY + 1)}"
    if isinstance(e, ix.Call):
        return f"{_FUNCTIONS.get(e.func, e.func)}({', '.join(c_int(a) for a in e.args)})"
    if isinstance(e, ix.Select):
        return f"{c_int(e.cond, SELECT + 1)} ? {c_int(e.then, SELECT + 1)} : {c_int(e.otherwise, SELECT + 1)}"
    if isinstance(e, k.Address):
        return f"&{c_ref(e.ref)}"
    if isinstance(e, k.Load):
        return c_ref(e.ref)
    if isinstance(e, k.Compute):
        loads = dict(e.loads)
        return c_expr(e.expr, e.dtype, lambda read: c_int(loads[read]), param_name)
    raise TypeError(f"not an integer expression: {e!r}")


def c_ref(ref: k.Ref) -> str:
    return f"{ref.array}{''.join(f'[{c_int(r)}]' for r in ref.rows)}[{c_int(ref.index)}]"


@dataclass(frozen=True)
class CPrinter:
    """Prints with values of type `real` (typedef'd by the file) of `dtype`; `fused`: multiply-adds
    as `fma` (cexpr.c_expr)."""

    dtype: str
    fused: bool = False
    restrict = "restrict"  # how the language says that no other pointer reaches a pointer's values
    types = {"index": "long", "int": "int", "flag": "_Bool", "value": "real"}  # of a Decl's (or Loop's) kind
    elements = C_TYPES  # of a buffer's or pointer's values of another type than the stencil's

    def lines(self, node: k.Node, depth: int = 0) -> list[str]:
        pad = INDENT * depth
        if isinstance(node, k.Block):
            if node.scoped:
                return [f"{pad}{{", *self._each(node.body, depth + 1), f"{pad}}}"]
            return self._each(node.body, depth)
        if isinstance(node, k.Loop):
            return self._loop(node, depth)
        if isinstance(node, k.If):
            out = [f"{pad}if ({c_int(node.cond)}) {{", *self.lines(node.then, depth + 1)]
            if node.otherwise is not None:
                out += [f"{pad}}} else {{", *self.lines(node.otherwise, depth + 1)]
            return out + [f"{pad}}}"]
        if isinstance(node, k.Assign):
            loads = dict(node.loads)
            rhs = c_expr(node.rhs, self.dtype, lambda a: c_ref(loads[a]), param_name, self.fused)
            return [f"{pad}{c_ref(node.lhs)} = {rhs};"]
        if isinstance(node, k.Store):
            return [f"{pad}{c_ref(node.ref)} = {c_int(node.value)};"]
        if isinstance(node, k.Set):
            return [f"{pad}{node.name} {node.op} {c_int(node.value)};"]
        if isinstance(node, k.Comment):
            return [f"{pad}/* {node.text} */"]
        if isinstance(node, k.Decl):
            if node.kind in self.types:
                const = "const " if node.const else ""
                return [f"{pad}{const}{self.types[node.kind]} {node.name} = {c_int(node.init)};"]
            const = "const " if node.kind == "const pointer" else ""
            restrict = f"{self.restrict} " if node.restrict else ""
            return [f"{pad}{const}{self.element(node.element)} *{restrict}{node.name} = {c_int(node.init)};"]
        if isinstance(node, k.Buffer):
            points = node.points()
            size = str(points) if points is not None else " * ".join(
                str(n) if isinstance(n, int) else c_int(n, ATOM) for n in node.shape)
            align = f"_Alignas({node.align}) " if node.align else ""
            return [f"{pad}{align}real {node.name}[{size}];"]
        if isinstance(node, k.Copy):
            out = []
            for d, (it, (lo, hi)) in enumerate(zip(node.iterators, node.region)):
                bound = c_int(hi, RELATIONAL + 1)
                out.append(f"{pad}{INDENT * d}for (long {it} = {c_int(lo)}; {it} < {bound}; {it}++)")
            return out + [f"{pad}{INDENT * len(node.iterators)}{c_ref(node.dst)} = {c_ref(node.src)};"]
        if isinstance(node, k.Call):
            return [f"{pad}{node.func}({', '.join(c_int(a) for a in node.args)});"]
        if isinstance(node, k.Barrier):
            raise TypeError("a barrier is left in the kernel IR: the target's passes must implement or remove it")
        if isinstance(node, k.MATRIX_NODES):
            raise TypeError(f"{type(node).__name__} is left in the kernel IR: "
                            "only a printer for a matrix unit prints it")
        if isinstance(node, (k.Launch, k.SharedLimit, k.DeviceCopy, k.DeviceScratch)):
            raise TypeError(f"{type(node).__name__} is left in the kernel IR: only a GPU printer prints launches "
                            "and their host calls")
        raise TypeError(f"not a kernel IR node: {node!r}")

    def element(self, element: str | None) -> str:
        """The language's type of values of `element` (`Buffer.element`; None: the stencil's, `real`)."""
        return "real" if element is None else self.elements[element]

    def _each(self, nodes: tuple[k.Node, ...], depth: int) -> list[str]:
        out: list[str] = []
        for n in nodes:
            out += self.lines(n, depth)
        return out

    def _loop(self, loop: k.Loop, depth: int) -> list[str]:
        pad = INDENT * depth
        body = self.lines(loop.body, depth + 1)
        if loop.degenerate:
            assert loop.init is not None
            return [f"{pad}{{", f"{pad}{INDENT}const {self.types[loop.kind]} {loop.iterator} = {c_int(loop.init)};",
                    *body, f"{pad}}}"]
        head = [f"{pad}#pragma GCC unroll {loop.unroll}"] if loop.unroll else []
        if loop.mapping:
            head.append(f"{pad}#pragma {loop.mapping}")
        assert loop.cond is not None
        init = "" if loop.init is None else f"{self.types[loop.kind]} {loop.iterator} = {c_int(loop.init)}"
        step = f"{loop.iterator}++" if loop.step == ix.Lit(1) else f"{loop.iterator} += {c_int(loop.step)}"
        return [*head, f"{pad}for ({init}; {c_int(loop.cond)}; {step}) {{", *body, f"{pad}}}"]
