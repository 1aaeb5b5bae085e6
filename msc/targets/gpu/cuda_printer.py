"""The kernel IR as CUDA C++ statements: the C printer, with CUDA's spelling
of what differs (`__restrict__`, `#pragma unroll`), loops mapped onto the
grid (`msc/targets/gpu/cuda_pass.py`), shared-memory buffers (static, or
placed in the launch's dynamic shared memory), copies shared among a
block's threads, `__syncthreads()` and `__syncwarp()` for barriers, the
matrix unit's fragments as wmma calls, kernel launches and their host
calls, and host helpers (the periodic wrap) whose error status is passed on."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen.printers.c import ADDITIVE, INDENT, MULTIPLICATIVE, CPrinter, c_int, c_ref

WMMA = "nvcuda::wmma"  # the matrix unit's API
DYNAMIC_SHARED = "msc_shared"  # the block's dynamic shared memory, as bytes

# a mapped loop starts at its share of the grid and strides by the grid's size (in the index type {i})
_START = {"block": "({i})blockIdx.{a}", "thread": "({i})threadIdx.{a}",
          "global": "(({i})blockIdx.{a} * ({i})blockDim.{a} + ({i})threadIdx.{a})"}
_STRIDE = {"block": "({i})gridDim.{a}", "thread": "({i})blockDim.{a}",
           "global": "(({i})gridDim.{a} * ({i})blockDim.{a})"}
WARP = 32  # threads of a warp: a grid-mapped innermost loop starts its warps on multiples of it, so that a
# warp's row of points is as few memory sectors as the row's own alignment allows (docs/cuda.md "Counters")
BLOCK_THREAD = "({i})(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))"
BLOCK_SIZE = "({i})(blockDim.x * blockDim.y * blockDim.z)"


INDEX_TYPE = "index_t"  # the index type's template parameter of an indexed device function


@dataclass(frozen=True)
class CudaPrinter(CPrinter):
    """`index`: the C type of index variables (declarations and parameters of kind "index"):
    INDEX_TYPE in an indexed device function (cuda_pass.DeviceFunction.indexed).
    `barrier_unroll`: whether a loop holding a barrier keeps its unroll hint (clang, hipcc's
    compiler, refuses to unroll one by a trip count known at run time only, an error with
    -Werror, so the HIP target's printer drops it)."""

    index: str = "long"
    barrier_unroll: bool = True
    restrict = "__restrict__"
    elements = {**CPrinter.elements, "float16": "__half"}

    @property
    def types(self) -> dict[str, str]:  # type: ignore[override]
        return {**CPrinter.types, "flag": "bool", "index": self.index}

    def lines(self, node: k.Node, depth: int = 0) -> list[str]:
        pad = INDENT * depth
        if isinstance(node, k.Buffer) and node.space == k.Space.SHARED:
            return self._shared(node, pad)
        if isinstance(node, k.Copy) and k.Space.SHARED in (node.src.space, node.dst.space):
            return self._shared_copy(node, depth)
        if isinstance(node, k.Barrier):
            return [f"{pad}{'__syncwarp()' if node.workers == 'warp' else '__syncthreads()'};"]
        if isinstance(node, k.MATRIX_NODES):
            return self._matrix(node, pad)
        if isinstance(node, k.Launch):
            grid, block = ", ".join(map(c_int, node.grid)), ", ".join(map(str, node.block))
            args = "".join(f", {c_int(a)}" for a in node.args)
            if node.points is not None:
                return [f"{pad}MSC_LAUNCH_INDEXED({node.name}, {c_int(node.points)}, dim3({grid}), dim3({block}), "
                        f"{node.shared_bytes}{args});"]
            return [f"{pad}MSC_LAUNCH({node.name}, dim3({grid}), dim3({block}), {node.shared_bytes}{args});"]
        if isinstance(node, k.SharedLimit):
            names = [f"{node.name}<{t}>" for t in ("int", "long")] if node.indexed else [node.name]
            return [f"{pad}MSC_CUDA_CHECK(cudaFuncSetAttribute((const void *){name}, "
                    f"cudaFuncAttributeMaxDynamicSharedMemorySize, {node.shared_bytes}));" for name in names]
        if isinstance(node, k.DeviceScratch):  # the kernel template's msc_scratch frees them at the block's end
            return [f"{pad}const msc_scratch {node.name}_levels({c_int(node.level)}, {node.window}, "
                    f"{c_int(node.volume)});",
                    f"{pad}real *const {node.name} = {node.name}_levels.levels;"]
        if isinstance(node, k.DeviceCopy):
            return [f"{pad}MSC_CUDA_CHECK(cudaMemcpy({c_int(node.dst)}, {c_int(node.src)}, sizeof(real) * "
                    f"{c_int(node.count, MULTIPLICATIVE + 1)}, cudaMemcpyDeviceToDevice));"]
        if isinstance(node, k.Call):  # a host helper that launches kernels returns their status
            call = super().lines(node)[0].rstrip(";")
            return [f"{pad}if (const int msc_status = {call}) return msc_status;"]
        return super().lines(node, depth)

    def _shared(self, buffer: k.Buffer, pad: str) -> list[str]:
        """A block's shared array: static, or at its offset in the launch's dynamic shared
        memory (the buffer at offset 0 declares it)."""
        shape = [*buffer.shape[:buffer.rows], math.prod(buffer.shape[buffer.rows:])]
        assert all(isinstance(n, int) for n in shape), f"shared buffer {buffer.name} of a size known at run time only"
        element = self.element(buffer.element)
        if buffer.offset is None:
            return [f"{pad}MSC_SHARED({element}, {buffer.name}, {''.join(f'[{n}]' for n in shape)});"]
        rows = "".join(f"[{n}]" for n in shape[1:buffer.rows + 1])
        at = DYNAMIC_SHARED + (f" + {buffer.offset}" if buffer.offset else "")
        pointer = f"(*const {buffer.name}){rows}" if rows else f"*const {buffer.name}"
        cast = f"{element} (*){rows}" if rows else f"{element} *"
        arena = [f"{pad}MSC_DYNAMIC_SHARED(unsigned char, {DYNAMIC_SHARED});"] if buffer.offset == 0 else []
        return [*arena, f"{pad}{element} {pointer} = reinterpret_cast<{cast}>({at});"]

    def parameter(self, ctype: str, name: str) -> str:
        """A device function's parameter: pointers to one level (or an input) are restrict;
        a whole ring buffer is not; `ctype` "index" is the printer's index type."""
        if ctype.endswith("*"):
            return f"{ctype}{'' if name.endswith('_buf') else '__restrict__ '}{name}"
        return f"const {self.index if ctype == 'index' else ctype} {name}"

    def _matrix(self, node: k.Node, pad: str) -> list[str]:
        if isinstance(node, k.Fragment):
            m, n, kk = node.shape
            layout = "" if node.role == "accumulator" else f", {WMMA}::row_major"
            role = "accumulator" if node.role == "accumulator" else f"matrix_{node.role}"
            element = f"{WMMA}::precision::tf32" if node.element == "tf32" else self.elements[node.element]
            return [f"{pad}{WMMA}::fragment<{WMMA}::{role}, {m}, {n}, {kk}, {element}{layout}> {node.name};"]
        if isinstance(node, k.MatrixFill):
            return [f"{pad}{WMMA}::fill_fragment({node.fragment}, {c_int(node.value)});"]
        if isinstance(node, k.MatrixLoad):
            return [f"{pad}{WMMA}::load_matrix_sync({node.fragment}, {c_int(node.address)}, {node.stride});"]
        if isinstance(node, k.MatrixMultiply):
            acc = node.accumulator
            return [f"{pad}{WMMA}::mma_sync({acc}, {node.a}, {node.b}, {acc});"]
        assert isinstance(node, k.MatrixStore)
        return [f"{pad}{WMMA}::store_matrix_sync({c_int(node.address)}, {node.fragment}, {node.stride}, "
                f"{WMMA}::mem_row_major);"]

    def _each(self, nodes: tuple[k.Node, ...], depth: int) -> list[str]:
        """The nodes in order, without declarations nothing after them reads
        (nvcc warns about them: a launch's share of a step uses some levels only)."""
        kept: list[list[str]] = []
        after = ""
        for node in reversed(nodes):
            lines = self.lines(node, depth)
            if isinstance(node, k.Decl) and not re.search(rf"\b{re.escape(node.name)}\b", after):
                continue
            kept.append(lines)
            after += "\n".join(lines)
        return [line for lines in reversed(kept) for line in lines]

    def _loop(self, loop: k.Loop, depth: int) -> list[str]:
        if loop.mapping is None:
            if not loop.unroll or (not self.barrier_unroll and any(isinstance(n, k.Barrier) for n in k.walk(loop))):
                return super()._loop(replace(loop, unroll=0), depth)
            pad = INDENT * depth
            plain = super()._loop(loop, depth)  # its first line is GCC's spelling of the unroll
            return [f"{pad}#pragma unroll {loop.unroll}", *plain[1:]]
        kind, axis = loop.mapping.split(".")
        pad = INDENT * depth
        assert loop.init is not None and loop.cond is not None
        it, cond, unit = loop.iterator, c_int(loop.cond), loop.step == ix.Lit(1)
        scale = "" if unit else f" * {c_int(loop.step, MULTIPLICATIVE + 1)}"
        index = self.index
        stride = f"{_STRIDE[kind].format(a=axis, i=index)}{scale}"
        if (kind, axis, unit) == ("global", "x", True):  # warps start on a multiple of 32 points
            start = f"{c_int(ix.floordiv(loop.init, WARP) * WARP)} + {_START[kind].format(a=axis, i=index)}"
            return [f"{pad}for ({index} {it} = {start}; {cond}; {it} += {stride}) {{",
                    f"{pad}{INDENT}if ({c_int(ix.Var(it).lt(loop.init))}) continue;",
                    *self.lines(loop.body, depth + 1), f"{pad}}}"]
        start = f"{c_int(loop.init, ADDITIVE)} + {_START[kind].format(a=axis, i=index)}{scale}"
        return [f"{pad}for ({index} {it} = {start}; {cond}; {it} += {stride}) {{",
                *self.lines(loop.body, depth + 1), f"{pad}}}"]

    def _shared_copy(self, copy: k.Copy, depth: int) -> list[str]:
        """The box copied point by point, the points dealt out to the block's threads."""
        pad, inner = INDENT * depth, INDENT * (depth + 1)
        n = len(copy.iterators)
        extents = [c_int(ix.max_(0, hi - lo)) for lo, hi in copy.region]
        out = [f"{pad}{{"]
        index = self.index
        out += [f"{inner}const {index} msc_n{d} = {e};" for d, e in enumerate(extents)]
        total = " * ".join(f"msc_n{d}" for d in range(n))
        out.append(f"{inner}for ({index} msc_q = {BLOCK_THREAD.format(i=index)}; msc_q < {total}; "
                   f"msc_q += {BLOCK_SIZE.format(i=index)}) {{")
        rest = "msc_q"
        for d in reversed(range(n)):
            it, (lo, _) = copy.iterators[d], copy.region[d]
            value = f"{rest} % msc_n{d}" if d else rest
            out.append(f"{inner}{INDENT}const {index} {it} = {c_int(lo, ADDITIVE)} + {value};")
            rest = f"{rest} / msc_n{d}" if d else rest
        out.append(f"{inner}{INDENT}{c_ref(copy.dst)} = {c_ref(copy.src)};")
        return out + [f"{inner}}}", f"{pad}}}"]
