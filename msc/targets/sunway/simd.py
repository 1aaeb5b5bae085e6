"""SIMD on the CPEs: the innermost compute loop of the CPE code in the chip's vector type.

SW26010's CPEs have 256-bit vectors (doublev4, floatv4), SW26010-Pro's 512-bit
ones (doublev8, floatv8), both through the vendors' simd.h (simd_loadu,
simd_storeu, simd_set_<type>; the emulator's simd.h has the same names). A
loop the generator marks `vector` whose body is one assignment of +, -, *, /
over reads, constants and parameters is printed as vectors of MSC_VLEN
lanes (unaligned loads and stores: the rows' offsets in LDM are arbitrary),
constants and parameters broadcast once before it, then the points left
over one at a time; any other loop prints as scalar C.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen.lower import param_name
from msc.codegen.printers.c import INDENT, CPrinter, c_int, c_ref
from msc.codegen.printers.cexpr import c_literal

LANES = {"sw26010": 4, "sw26010pro": 8}  # 64-bit lanes: 256- and 512-bit vectors


def simd_values(chip: str, dtype: str) -> dict[str, object]:
    """What the CPE template declares: the vector type of `real`, its lanes, its broadcast call."""
    lanes = LANES[chip]
    vector = f"{'double' if dtype == 'float64' else 'float'}v{lanes}"
    return dict(type=vector, lanes=lanes, broadcast=f"simd_set_{vector}({', '.join(['(x)'] * lanes)})")


class _Scalar(Exception):
    """The expression has an operation without a vector form here: the loop stays scalar."""


@dataclass
class _VectorExpr(ir.Visitor[str]):
    access: Callable[[ir.FieldRead], str]
    broadcast: Callable[[str], str]  # a scalar C expression -> the name of its vector
    dtype: str

    def const(self, e: ir.Const) -> str:
        return self.broadcast(c_literal(e.value, self.dtype))

    def param_ref(self, e: ir.ParamRef) -> str:
        return self.broadcast(param_name(e.name))

    def field_read(self, e: ir.FieldRead) -> str:
        return self.access(e)

    def neg(self, e: ir.Neg) -> str:
        return f"(-{self.visit(e.operand)})"

    def bin_op(self, e: ir.BinOp) -> str:
        if e.op == "**" and isinstance(e.rhs, ir.Const) and e.rhs.value in (1.0, 2.0, 3.0):
            return "(" + " * ".join([self.visit(e.lhs)] * int(e.rhs.value)) + ")"
        if e.op not in ("+", "-", "*", "/"):
            raise _Scalar(e.op)
        return f"({self.visit(e.lhs)} {e.op} {self.visit(e.rhs)})"

    def not_(self, e: ir.Not) -> str:
        raise _Scalar("!")

    def call(self, e: ir.Call) -> str:
        raise _Scalar(e.func)

    def where(self, e: ir.Where) -> str:
        raise _Scalar("where")


@dataclass(frozen=True)
class SimdPrinter(CPrinter):
    """CPrinter whose `vector` loops of one assignment print in SIMD (module docstring)."""

    def _loop(self, loop: k.Loop, depth: int) -> list[str]:
        printed = self._vector_loop(loop, depth) if loop.vector else None
        return printed if printed is not None else super()._loop(loop, depth)

    def _vector_loop(self, loop: k.Loop, depth: int) -> list[str] | None:
        it = loop.iterator
        body = loop.body.body
        cond = loop.cond
        if loop.degenerate or loop.init is None or loop.step != ix.Lit(1) or len(body) != 1 \
                or not isinstance(body[0], k.Assign) \
                or not (isinstance(cond, ix.Op) and cond.op == "<" and cond.lhs == ix.Var(it)):
            return None
        node = body[0]
        loads = dict(node.loads)
        names = {read: f"msc_v{j}" for j, read in enumerate(loads)}
        broadcasts: dict[str, str] = {}
        try:
            expr = _VectorExpr(names.__getitem__, lambda s: broadcasts.setdefault(s, f"msc_k{len(broadcasts)}"),
                               self.dtype).visit(node.rhs)
        except _Scalar:
            return None
        pad, pad1, pad2 = (INDENT * (depth + n) for n in range(3))
        vectors_left = (ix.Var(it) + ix.Var("MSC_VLEN")).le(cond.rhs)
        return [f"{pad}{{", f"{pad1}long {it} = {c_int(loop.init)};",
                *(f"{pad1}const realv {name} = msc_vset({scalar});" for scalar, name in broadcasts.items()),
                f"{pad1}for (; {c_int(vectors_left)}; {it} += MSC_VLEN) {{",
                *(f"{pad2}realv {name};" for name in names.values()),
                *(f"{pad2}simd_loadu({names[read]}, &{c_ref(ref)});" for read, ref in loads.items()),
                f"{pad2}simd_storeu({expr}, &{c_ref(node.lhs)});", f"{pad1}}}",
                *super()._loop(replace(loop, init=None), depth + 1), f"{pad}}}"]
