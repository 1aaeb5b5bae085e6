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
launch. A ring keeps 2 x radius + 2 planes: the plane a stage overwrites is
one the next stage finished reading before the previous barrier, so one
`__syncthreads()` per stage and plane orders everything.

The default launch of a qualifying stencil (2D or 3D, dirichlet, one
statement, one past level: `cuda_time_tile.reason_not_shared`) is a streamed
tile of depth 1; `time_tile(depth, ...)` tiles are streamed tiles of that
depth, the outermost dimension's size being the chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from msc import ir
from msc.codegen.lower import field_name, param_name
from msc.codegen.printers.cexpr import c_expr
from msc.targets.gpu.cuda_pass import AXES, MAX_THREADS

RING = "msc_ring"  # the stages' rings of planes in shared memory
STATIC_SHARED = 48 << 10  # static shared memory of a block; beyond it, dynamic shared memory opted into
SHARED_BYTES = 99 << 10  # dynamic shared memory a block of every device of compute capability 8.0 or later may have
CHUNK = 32  # planes a block streams through by default, at least: and 8 x depth x radius (a halo of at most 25%)
AHEAD = 2  # planes each thread's loads run ahead of the one computed (loads in flight per thread)
INNER_THREADS = {2: (128,), 3: (16, 32)}  # threads of a default block per inner dimension, outer first


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

    @property
    def slots(self) -> int:
        """Planes in a stage's ring."""
        return 2 * self.stencil.radius[0] + 2

    @property
    def shared_bytes(self) -> int:
        itemsize = 4 if self.stencil.dtype == "float32" else 8
        return self.depth * self.slots * math.prod(self.threads) * itemsize

    @property
    def target(self) -> ir.FieldDecl:
        name = self.stencil.statements[0].target
        return next(f for f in self.stencil.fields if f.name == name)

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
    threads = INNER_THREADS[stencil.ndim]
    tile = [max(4, n - 2 * depth * r) for n, r in zip(threads, stencil.radius[1:])]
    return dict(zip(stencil.dims, (max(CHUNK, 8 * depth * stencil.radius[0]), *tile)))


def streamed_tile(stencil: ir.StencilIR, depth: int, tiles: dict[str, int]) -> StreamedTile:
    dims = stencil.dims
    return StreamedTile(stencil, depth, tiles[dims[0]], tuple(tiles[d] for d in dims[1:]))


def linear_index(terms: list[str], extents: list[str]) -> str:
    index = terms[0]
    for term, extent in zip(terms[1:], extents[1:]):
        index = f"({index}) * {extent} + {term}"
    return index


def _plus(c: str, o: int) -> str:
    return f"{c} + {o}" if o > 0 else f"{c} - {-o}" if o < 0 else c


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
            shift = sum(o * math.prod(threads[d:]) for d, o in enumerate(read.offsets[1:], 1))
            return f"{RING}[{stage - 1}][({_plus('p', read.offsets[0])}) % {slots}][{_plus('q', shift)}]"
        coords = [_plus(c, o) for c, o in zip(glob, read.offsets)]
        return f"{field_name(read.name)}[{linear_index(coords, extents)}]"

    inputs = [f"const real *__restrict__ {field_name(f.name)}" for f in st.fields if f.time_invariant]
    params = inputs + [f"const real {param_name(p)}" for p in st.params] + [f"const long {e}" for e in extents]
    lines = [(f"__global__ void __launch_bounds__({plane}) {name}(real *__restrict__ dst, const real *__restrict__ src, "
              f"{', '.join(params)}, const long steps)"), "{"]
    if plan.dynamic_shared:
        lines += ["    MSC_DYNAMIC_SHARED(real, msc_shared);",
                  f"    real (*const {RING})[{slots}][{plane}] = reinterpret_cast<real (*)[{slots}][{plane}]>(msc_shared);"]
    else:
        lines.append(f"    __shared__ real {RING}[{depth}][{slots}][{plane}];")
    lines += [f"    const int l{d} = threadIdx.{axis[d]};" for d in inner]
    local = [f"l{d}" for d in inner]
    lines.append(f"    const int q = {linear_index(local, [str(n) for n in threads])};")
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

    def load(j: str) -> str:  # the block's plane j at the thread's column, 0 outside the array or the planes
        g0 = f"first + {j}"
        return f"in_plane && {j} < planes && {g0} >= 0 && {g0} < P0 ? src[({g0}) * plane + column] : (real)0"

    lines += [f"{pad}const bool in_plane = {in_plane}, interior = {interior}, in_tile = {tile};",
              f"{pad}const long column = {linear_index(glob[1:], extents[1:])};",
              f"{pad}const long first = b0 * {plan.chunk} - {depth * r0};  /* the block's first plane */",
              f"{pad}const int planes = (int)msc_imin({plan.chunk + 2 * depth * r0}, P0 + {depth * r0} - first);",
              *(f"{pad}real next{k} = {load(str(k))};" for k in range(AHEAD)),
              f"{pad}for (int j = 0; j < planes; j++) {{",
              f"{pad}    {RING}[0][j % {slots}][q] = next0;",
              *(f"{pad}    next{k} = next{k + 1};" for k in range(AHEAD - 1)),
              f"{pad}    next{AHEAD - 1} = {load(f'j + {AHEAD}')};",
              f"{pad}    __syncthreads();"]
    for stage in range(1, depth + 1):
        valid = " && ".join(f"l{d} >= {stage * r[d]} && l{d} < {threads[d - 1] - stage * r[d]}" for d in inner)
        expr = c_expr(statement.expr, st.dtype, lambda read, s=stage: access(read, s), param_name)
        body = [f"{pad}    {{  /* step {stage}: plane p, {stage} x {r0} behind the loaded one */",
                f"{pad}        const int p = j - {stage * r0};",
                f"{pad}        const long g0 = first + p;",
                f"{pad}        if (p >= {stage * r0}) {{",
                f"{pad}            real v = {RING}[{stage - 1}][p % {slots}][q];",
                f"{pad}            if ({stage} <= steps && interior && g0 >= {r0} && g0 < P0 - {r0} && {valid})",
                f"{pad}                v = {expr};"]
        if stage < depth:
            body += [f"{pad}            {RING}[{stage}][p % {slots}][q] = v;", f"{pad}        }}", f"{pad}    }}",
                     f"{pad}    __syncthreads();"]
        else:
            body += [f"{pad}            if (in_tile && interior && p < {depth * r0 + plan.chunk} && g0 >= {r0} "
                     f"&& g0 < P0 - {r0})",
                     f"{pad}                dst[g0 * plane + column] = v;", f"{pad}        }}", f"{pad}    }}"]
        lines += body
    lines += [f"{pad}}}", f"{pad}__syncthreads();  /* before the block's next tile refills the rings */"]
    return close_tiles(lines, pad, st)


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
