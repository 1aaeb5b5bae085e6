"""Streamed tiles for the CUDA target (2.5D blocking; with depth > 1, AN5D's time tiles).

A block owns a tile of the inner dimensions (one thread per point of the tile
plus a halo of depth x radius on each side) and marches along the outermost
dimension through a chunk of planes: each thread loads one value per plane
(the loads of the next AHEAD planes are in flight while one is computed) into
a ring of planes in shared memory, and each of the `depth` steps ("stages")
computes its plane from the ring of the stage before, `radius` planes behind
it, reading every neighbour from shared memory. The last stage writes the
tile's interior to global memory. So a step reads and writes each point about
once from global memory (the halo planes and columns are read again by the
neighbouring blocks, mostly from L2), and `depth` steps are fused into one
launch. One `__syncthreads()` per stage and plane orders everything: after
the loaded plane is stored, and after each stage but the last. A ring keeps
the 2 x radius + 1 planes a step reads: the plane a stage overwrites was last
read by the next stage in the iteration before, and a barrier of this
iteration lies between (the loaded plane's store comes before the first
barrier, so with one step, where no barrier follows the step, its ring keeps
one plane more).

The default launch of a qualifying stencil (2D or 3D, dirichlet, one
statement, one past level: `cuda_time_tile.reason_not_shared`) is a streamed
tile of depth 1; `time_tile(depth, ...)` tiles are streamed tiles of that
depth, the outermost dimension's size being the chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

from msc import ir
from msc.codegen import index as ix
from msc.codegen.lower import field_name, param_name
from msc.codegen.printers.c import c_int
from msc.codegen.printers.cexpr import c_expr
from msc.ir.linear import NonLinearError, linear_form
from msc.targets.gpu.cuda_pass import AXES, MAX_THREADS

RING = "msc_ring"  # the stages' rings of planes in shared memory
STATIC_SHARED = 48 << 10  # static shared memory of a block; beyond it, dynamic shared memory opted into
SHARED_BYTES = 64 << 10  # dynamic shared memory a block may have on every device msc targets (AMD CDNA's LDS)
CHUNK = 32  # planes a block streams through by default, at least: and 8 x depth x radius (a halo of at most 25%)
AHEAD = 2  # planes each thread's loads run ahead of the one computed (loads in flight per thread)
INNER_THREADS = {2: (128,), 3: (16, 32)}  # threads of a default block per inner dimension, outer first
Terms = dict[int, list[tuple[tuple[int, ...], ir.Expr]]]  # a statement's weighted reads by streamed offset


@dataclass(frozen=True)
class StreamedTile:
    """Geometry of one stencil's streamed tiles: `chunk` outputs along the
    outermost dimension, `tile` along each inner one (outer first)."""

    stencil: ir.StencilIR
    depth: int
    chunk: int
    tile: tuple[int, ...]

    @property
    def threads(self) -> tuple[int, ...]:
        """Threads per inner dimension, outer first: the tile and its halo."""
        return tuple(t + 2 * self.depth * r for t, r in zip(self.tile, self.stencil.radius[1:]))

    @cached_property
    def sums(self) -> tuple[Terms, ir.Expr | None] | None:
        """The statement as partial sums (`partial_sums`; None: the steps read rings of planes)."""
        return partial_sums(self.stencil)

    @property
    def slots(self) -> int:
        """Planes in a stage's ring: summed, the newest plane, double-buffered; else the
        2 x radius + 1 a step reads, and with one step one more, for the loaded plane is
        stored before the iteration's only barrier."""
        if self.sums is not None:
            return 2
        return 2 * self.stencil.radius[0] + (2 if self.depth == 1 else 1)

    @property
    def shared_bytes(self) -> int:
        itemsize = 4 if self.stencil.dtype == "float32" else 8
        return self.depth * self.slots * math.prod(self.threads) * itemsize

    @property
    def dynamic_shared(self) -> int:
        """Bytes of dynamic shared memory a launch asks for (0: the rings are static)."""
        return self.shared_bytes if self.shared_bytes > STATIC_SHARED else 0

    def too_large(self) -> str | None:
        """Why a block of this tile cannot run (None: it can)."""
        threads = math.prod(self.threads)
        if threads > MAX_THREADS:
            return (f"its blocks of {' x '.join(map(str, self.threads))} threads (tile plus {self.depth} x radius "
                    f"on each side) would be {threads} threads, more than {MAX_THREADS}")
        if self.shared_bytes > SHARED_BYTES:
            return (f"its {self.depth} rings of {self.slots} planes of {threads} points would take "
                    f"{self.shared_bytes} bytes of shared memory, more than {SHARED_BYTES}")
        return None

    def shift(self, offsets: tuple[int, ...]) -> int:
        """Where a neighbour at these inner offsets (outer first) lies in a plane buffer, from the thread's point."""
        return sum(o * math.prod(self.threads[d:]) for d, o in enumerate(offsets, 1))

    def useful(self) -> float:
        """The share of the loaded points the block writes out (the rest is halo)."""
        halo = self.chunk + 2 * self.depth * self.stencil.radius[0]
        return math.prod(self.tile) * self.chunk / (math.prod(self.threads) * halo)

    def grid(self) -> str:
        ndim = self.stencil.ndim
        sizes = [*self.tile[::-1], self.chunk]  # x first: the innermost dimension, ..., the streamed one
        dims = [f"P{d}" for d in reversed(range(ndim))]
        return ", ".join(f"msc_blocks({p}, {s}, {65535 if a else 0})" for a, (p, s) in enumerate(zip(dims, sizes)))

    def block(self) -> str:
        return ", ".join(map(str, self.threads[::-1]))

    def describe(self) -> str:
        tile = " x ".join(map(str, (self.chunk, *self.tile)))
        return (f"streamed tiles of {self.depth} step{'s' if self.depth > 1 else ''} in shared memory: tile {tile}, "
                f"blocks of {' x '.join(map(str, self.threads))} threads marching along {self.stencil.dims[0]}")


def default_tile(stencil: ir.StencilIR, depth: int) -> dict[str, int]:
    """The tile of a default streamed launch (depth 1) or of `time_tile(depth)`: a
    default block less its halo, widened where the halo would leave fewer than 4 points."""
    threads = [max(n, 4 + 2 * depth * r) for n, r in zip(INNER_THREADS[stencil.ndim], stencil.radius[1:])]
    tile = block_tile(stencil, depth, tuple(threads))
    assert tile is not None
    return tile


def block_tile(stencil: ir.StencilIR, depth: int, threads: tuple[int, ...]) -> dict[str, int] | None:
    """The tile of a block of `threads` per inner dimension (outer first) streaming
    `depth` steps: the block less its halo, through a chunk of at least CHUNK and
    8 x depth x radius planes (a halo of at most a quarter); None where the halo
    would leave fewer than 4 points along a dimension."""
    tile = [n - 2 * depth * r for n, r in zip(threads, stencil.radius[1:])]
    if min(tile) < 4:
        return None
    return dict(zip(stencil.dims, (max(CHUNK, 8 * depth * stencil.radius[0]), *tile)))


def streamed_tile(stencil: ir.StencilIR, depth: int, tiles: dict[str, int]) -> StreamedTile:
    dims = stencil.dims
    return StreamedTile(stencil, depth, tiles[dims[0]], tuple(tiles[d] for d in dims[1:]))


def partial_sums(stencil: ir.StencilIR) -> tuple[Terms, ir.Expr | None] | None:
    """The statement as a weighted sum of its field's reads with constant weights (and
    a constant), the reads grouped by their offset along the streamed dimension: then
    each plane is read once per step, its neighbourhood weighted into the 2 x radius + 1
    outputs it contributes to (partial sums in registers) instead of each output reading
    2 x radius + 1 planes. None for any other statement (weights that read a field, or a
    term not linear in the field)."""
    statement = stencil.statements[0]
    try:
        form = linear_form(statement.expr, {statement.target})
    except NonLinearError:
        return None
    weights = [*form.terms.values(), *([form.constant] if form.constant is not None else [])]
    if any(ir.reads_of(w) for w in weights):
        return None
    terms: Terms = {}
    for (_, _, offsets), weight in form.terms.items():
        terms.setdefault(offsets[0], []).append((offsets[1:], weight))
    return terms, form.constant


def linear_index(coords: Sequence[str], extents: Sequence[int | str], offsets: Sequence[int] | None = None) -> str:
    """The row-major index (`ix.linear`) of the point `coords` (+ `offsets`) in an array of
    `extents` (sizes, or the names of variables holding them), as C."""
    return c_int(ix.linear([ix.Var(c) for c in coords], [e if isinstance(e, int) else ix.Var(e) for e in extents],
                           offsets))


def _plus(c: str, o: int) -> str:
    return c_int(ix.Var(c) + o)


def kernel_source(plan: StreamedTile, name: str) -> tuple[str, list[str]]:
    """The `__global__` function and its parameters after the two level pointers, in call order."""
    st, ndim, depth = plan.stencil, plan.stencil.ndim, plan.depth
    statement = st.statements[0]
    r, slots, threads = st.radius, plan.slots, plan.threads
    inner = list(range(1, ndim))
    axis = {d: AXES[ndim - 1 - d] for d in inner}  # the last dimension on .x
    stream = AXES[ndim - 1]  # the block index along the streamed dimension
    plane = math.prod(threads)
    extents = [f"P{d}" for d in range(ndim)]
    glob = [f"g{d}" for d in range(ndim)]

    def access(read: ir.FieldRead, stage: int) -> str:
        if read.name == statement.target:
            shift = plan.shift(read.offsets[1:])
            return f"{RING}[{stage - 1}][{c_int((ix.Var('p') + read.offsets[0]) % slots)}][{_plus('q', shift)}]"
        return f"{field_name(read.name)}[{linear_index(glob, extents, read.offsets)}]"

    inputs = [f"const real *__restrict__ {field_name(f.name)}" for f in st.fields if f.time_invariant]
    params = inputs + [f"const real {param_name(p)}" for p in st.params] + [f"const long {e}" for e in extents]
    lines = [(f"__global__ void __launch_bounds__({plane}) {name}(real *__restrict__ dst, const real *__restrict__ src, "
              f"{', '.join(params)}, const long steps)"), "{"]
    if plan.dynamic_shared:
        lines += ["    MSC_DYNAMIC_SHARED(real, msc_shared);",
                  f"    real (*const {RING})[{slots}][{plane}] = reinterpret_cast<real (*)[{slots}][{plane}]>(msc_shared);"]
    else:
        lines.append(f"    MSC_SHARED(real, {RING}, [{depth}][{slots}][{plane}]);")
    lines += [f"    const int l{d} = threadIdx.{axis[d]};" for d in inner]
    local = [f"l{d}" for d in inner]
    lines.append(f"    const int q = {linear_index(local, threads)};")
    lines.append(f"    const long plane = {' * '.join(extents[1:])};")
    pad = "    "
    sizes = [plan.chunk, *plan.tile]
    for d in range(ndim):  # every tile of the grid, block-stride (uniform in the block)
        a = stream if d == 0 else axis[d]
        lines.append(f"{pad}for (long b{d} = blockIdx.{a}; b{d} < (P{d} + {sizes[d] - 1}) / {sizes[d]}; "
                     f"b{d} += gridDim.{a}) {{")
        pad += "    "
    lines += [f"{pad}const long g{d} = b{d} * {plan.tile[d - 1]} - {depth * r[d]} + l{d};" for d in inner]
    in_plane = " && ".join(f"g{d} >= 0 && g{d} < P{d}" for d in inner)
    interior = " && ".join(f"g{d} >= {r[d]} && g{d} < P{d} - {r[d]}" for d in inner)
    tile = " && ".join(f"l{d} >= {depth * r[d]} && l{d} < {depth * r[d] + plan.tile[d - 1]}" for d in inner)
    r0 = r[0]
    summed = plan.sums
    registers = [f"a{s}_{m}" for s in range(1, depth + 1) for m in range(2 * r0 + 1)]
    registers += [f"w{s}_{k}" for s in range(1, depth + 1) for k in range(r0 + 1)]
    declared = [] if summed is None else [
        f"{pad}real {', '.join(f'{v} = 0' for v in registers)};  /* partial sums, own column's planes */"]

    def load(j: str) -> str:  # the block's plane j at the thread's column, 0 outside the array or the planes
        g0 = f"first + {j}"
        return f"in_plane && {j} < planes && {g0} >= 0 && {g0} < P0 ? src[({g0}) * plane + column] : (real)0"

    lines += [f"{pad}const bool in_plane = {in_plane}, interior = {interior}, in_tile = {tile};",
              f"{pad}const long column = {linear_index(glob[1:], extents[1:])};",
              f"{pad}const long first = b0 * {plan.chunk} - {depth * r0};  /* the block's first plane */",
              f"{pad}const int planes = (int)msc_imin({plan.chunk + 2 * depth * r0}, P0 + {depth * r0} - first);",
              *(f"{pad}real next{k} = {load(str(k))};" for k in range(AHEAD)),
              *declared,
              f"{pad}for (int j = 0; j < planes; j++) {{",
              f"{pad}    {RING}[0][j {'& 1' if summed is not None else f'% {slots}'}][q] = next0;",
              *(f"{pad}    next{k} = next{k + 1};" for k in range(AHEAD - 1)),
              f"{pad}    next{AHEAD - 1} = {load(f'j + {AHEAD}')};",
              f"{pad}    __syncthreads();"]
    window = f"g0 >= {r0} && g0 < P0 - {r0}"
    for stage in range(1, depth + 1):
        valid = " && ".join(f"l{d} >= {stage * r[d]} && l{d} < {threads[d - 1] - stage * r[d]}" for d in inner)
        if summed is None:
            expr = c_expr(statement.expr, st.dtype, lambda read, s=stage: access(read, s), param_name)
            body = [f"{pad}    {{  /* step {stage}: plane p, {stage} x {r0} behind the loaded one */",
                    f"{pad}        const int p = j - {stage * r0};",
                    f"{pad}        const long g0 = first + p;",
                    f"{pad}        if (p >= {stage * r0}) {{",
                    f"{pad}            real v = {RING}[{stage - 1}][p % {slots}][q];",
                    f"{pad}            if ({stage} <= steps && interior && {window} && {valid})",
                    f"{pad}                v = {expr};"]
            close = [f"{pad}        }}", f"{pad}    }}"]
            keep = f"{pad}            {RING}[{stage}][p % {slots}][q] = v;"
        else:
            body = _summed_stage(plan, stage, summed, valid, window, pad + "    ")
            close = [f"{pad}    }}"]
            keep = f"{pad}        {RING}[{stage}][p & 1][q] = v;"
        if stage < depth:
            body += [keep, *close, f"{pad}    __syncthreads();"]
        else:
            at = pad + ("            " if summed is None else "        ")
            output = f"p >= {depth * r0} && " if summed is not None else ""
            body += [f"{at}if ({output}in_tile && interior && p < {depth * r0 + plan.chunk} && {window})",
                     f"{at}    dst[g0 * plane + column] = v;", *close]
        lines += body
    lines += [f"{pad}}}", f"{pad}__syncthreads();  /* before the block's next tile refills the rings */"]
    return close_tiles(lines, pad, st)


def _summed_stage(plan: StreamedTile, stage: int, summed: tuple[Terms, ir.Expr | None], valid: str, window: str,
                  pad: str) -> list[str]:
    """Step `stage` of the iteration as partial sums: the newest plane n of the stage
    before is weighted into the partial sums of the outputs n - r0 .. n + r0 (a{stage}_m
    is output p + m), output p = n - r0 is then complete (or its own value, w{stage}_0,
    kept where the step does not compute it), and the sums move down one plane."""
    st, r0 = plan.stencil, plan.stencil.radius[0]
    terms, constant = summed
    s, inner = stage, pad + "    "

    def weight(e: ir.Expr) -> str:
        return c_expr(e, st.dtype, lambda read: "", param_name)

    out = [f"{pad}{{  /* step {s}: partial sums of plane n; plane p, {s} x {r0} behind the loaded one, done */",
           f"{inner}const int n = j - {(s - 1) * r0}, p = j - {s * r0};",
           f"{inner}const long g0 = first + p;",
           f"{inner}const real *const plane_n = {RING}[{s - 1}][n & 1];"]
    out += [f"{inner}w{s}_{k} = w{s}_{k + 1};" for k in range(r0)] + [f"{inner}w{s}_{r0} = plane_n[q];"]
    out.append(f"{inner}if ({valid}) {{")
    # each neighbour of the plane read once (the column's own value is w{s}_{r0})
    shifts = sorted({plan.shift(offsets) for group in terms.values() for offsets, _ in group} - {0})
    value = {0: f"w{s}_{r0}", **{k: f"u{i}" for i, k in enumerate(shifts)}}
    out += [f"{inner}    const real u{i} = plane_n[{_plus('q', k)}];" for i, k in enumerate(shifts)]
    for dz in sorted(terms):
        parts = [f"({weight(w)}) * {value[plan.shift(offsets)]}" for offsets, w in terms[dz]]
        out.append(f"{inner}    a{s}_{r0 - dz} += {' + '.join(parts)};")
    out.append(f"{inner}}}")
    done = f"a{s}_0" + (f" + ({weight(constant)})" if constant is not None else "")
    out += [f"{inner}const real v = {s} <= steps && interior && {window} && {valid} ? {done} : w{s}_0;"]
    out += [f"{inner}a{s}_{m} = a{s}_{m + 1};" for m in range(2 * r0)] + [f"{inner}a{s}_{2 * r0} = 0;"]
    return out


def close_tiles(lines: list[str], pad: str, stencil: ir.StencilIR) -> tuple[str, list[str]]:
    """`lines` with the loops over the block's tiles and the function closed: the
    source, and the arguments after the two level pointers, in call order."""
    for _ in range(stencil.ndim):
        pad = pad[:-4]
        lines.append(f"{pad}}}")
    lines.append("}")
    args = [field_name(f.name) for f in stencil.fields if f.time_invariant]
    args += [param_name(p) for p in stencil.params] + [f"P{d}" for d in range(stencil.ndim)]
    return "\n".join(lines) + "\n", args
