"""The kernel IR as C statements (shared by the C-family targets).

A loop's `mapping` is printed as `#pragma <mapping>` before it (a target
whose passes set none prints plain loops); unrolling as `#pragma GCC unroll`.
"""

from __future__ import annotations

from dataclasses import dataclass

from msc.codegen import kernel_ir as k
from msc.codegen.lower import param_name
from msc.codegen.printers.cexpr import c_expr

C_TYPES = {"float64": "double", "float32": "float"}
INDENT = "    "


def c_ref(ref: k.Ref) -> str:
    return f"{ref.array}[{ref.index}]"


def _arg(a: str | k.Address) -> str:
    return a if isinstance(a, str) else f"&{c_ref(a.ref)}"


@dataclass(frozen=True)
class CPrinter:
    """Prints with values of type `real` (typedef'd by the file) of `dtype`;
    `param` names a scalar parameter."""

    dtype: str

    def lines(self, node: k.Node, depth: int = 0) -> list[str]:
        pad = INDENT * depth
        if isinstance(node, k.Block):
            if node.scoped:
                return [f"{pad}{{", *self._each(node.body, depth + 1), f"{pad}}}"]
            return self._each(node.body, depth)
        if isinstance(node, k.Loop):
            return self._loop(node, depth)
        if isinstance(node, k.If):
            out = [f"{pad}if ({node.cond}) {{", *self.lines(node.then, depth + 1)]
            if node.otherwise is not None:
                out += [f"{pad}}} else {{", *self.lines(node.otherwise, depth + 1)]
            return out + [f"{pad}}}"]
        if isinstance(node, k.Assign):
            loads = dict(node.loads)
            rhs = c_expr(node.rhs, self.dtype, lambda a: c_ref(loads[a]), param_name)
            return [f"{pad}{c_ref(node.lhs)} = {rhs};"]
        if isinstance(node, k.Decl):
            if node.kind == "index":
                return [f"{pad}{'const ' if node.const else ''}long {node.name} = {node.init};"]
            const = "const " if node.kind == "const pointer" else ""
            return [f"{pad}{const}real *restrict {node.name} = {node.init};"]
        if isinstance(node, k.Buffer):
            points = node.points()
            size = str(points) if points is not None else " * ".join(map(str, node.shape))
            align = f"_Alignas({node.align}) " if node.align else ""
            return [f"{pad}{align}real {node.name}[{size}];"]
        if isinstance(node, k.Copy):
            out = []
            for d, (it, (lo, hi)) in enumerate(zip(node.iterators, node.region)):
                out.append(f"{pad}{INDENT * d}for (long {it} = {lo}; {it} < {hi}; {it}++)")
            return out + [f"{pad}{INDENT * len(node.iterators)}{c_ref(node.dst)} = {c_ref(node.src)};"]
        if isinstance(node, k.Call):
            return [f"{pad}{node.func}({', '.join(_arg(a) for a in node.args)});"]
        if isinstance(node, k.Barrier):
            raise TypeError("a barrier is left in the kernel IR: the target's passes must implement or remove it")
        raise TypeError(f"not a kernel IR node: {node!r}")

    def _each(self, nodes: tuple[k.Node, ...], depth: int) -> list[str]:
        out: list[str] = []
        for n in nodes:
            out += self.lines(n, depth)
        return out

    def _loop(self, loop: k.Loop, depth: int) -> list[str]:
        pad = INDENT * depth
        body = self.lines(loop.body, depth + 1)
        if loop.degenerate:
            return [f"{pad}{{", f"{pad}{INDENT}const long {loop.iterator} = {loop.init};", *body, f"{pad}}}"]
        head = [f"{pad}#pragma GCC unroll {loop.unroll}"] if loop.unroll else []
        if loop.mapping:
            head.append(f"{pad}#pragma {loop.mapping}")
        init = "" if loop.init is None else f"long {loop.iterator} = {loop.init}"
        step = f"{loop.iterator}++" if loop.step == "1" else f"{loop.iterator} += {loop.step}"
        return [*head, f"{pad}for ({init}; {loop.cond}; {step}) {{", *body, f"{pad}}}"]
