"""Temporal blocking in shared memory for the CUDA target.

For `time_tile(depth, ...)` on a stencil of one statement whose field keeps
one past level (it reads its own level t only, and otherwise time-invariant
inputs), dirichlet, every dimension tiled, one launch advances `depth` steps
between the two ring slots: global memory is read and written once per
`depth` steps instead of once per step, at the price of a recomputed halo.
In 2D and 3D the tiles are streamed (msc/targets/gpu/cuda_stream.py, which
also gives such a stencil's default launch, a streamed tile of one step). In
1D a tile is a box: each block loads its tile plus a halo of depth x radius
into shared memory once, runs up to `depth` steps there (each step on a
region shrunk by the radius, `__syncthreads()` between steps), and writes
the tile's interior; the block is the loaded region, at most 1024 threads.

Other time-tiled schedules (several statements or levels, or a block over
the limit) keep the general skewed tiles of the kernel IR, run in global
memory (`passes/cuda.py`); `reason_not_shared` says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from msc import ir
from msc.codegen.lower import field_name, param_name, ring_buffer
from msc.codegen.printers.cexpr import c_expr
from msc.poly.schedule import LoweredSchedule, Schedule, shrink_tile
from msc.targets.gpu import cuda_stream as stream
from msc.targets.gpu.cuda_pass import AXES, MAX_THREADS
from msc.targets.gpu.cuda_stream import StreamedTile, close_tiles, linear_index

BUFFER = "msc_tt"  # the block's two shared-memory copies of its region


@dataclass(frozen=True)
class SharedTimeTile:
    """Geometry of one stencil's box time tiles (x first in `dims`)."""

    stencil: ir.StencilIR
    depth: int
    tile: tuple[int, ...]  # per space dimension, in order

    dynamic_shared = 0  # bytes of dynamic shared memory of a launch

    @property
    def region(self) -> tuple[int, ...]:
        """The points a block loads, one thread each: the tile and its halo."""
        return tuple(t + 2 * self.depth * r for t, r in zip(self.tile, self.stencil.radius))

    def too_large(self) -> str | None:
        """Why a block of this tile cannot run (None: it can)."""
        threads = math.prod(self.region)
        if threads > MAX_THREADS:
            return (f"its region of {' x '.join(map(str, self.region))} points (tile plus {self.depth} x radius on "
                    f"each side) would need {threads} threads per block, more than {MAX_THREADS}")
        return None

    def useful(self) -> float:
        """The share of the loaded points the block writes out (the rest is halo)."""
        return math.prod(self.tile) / math.prod(self.region)

    def grid(self) -> str:
        ndim = self.stencil.ndim
        return ", ".join(f"msc_blocks(P{d}, {self.tile[d]}, {65535 if AXES[ndim - 1 - d] != 'x' else 0})"
                         for d in reversed(range(ndim)))

    def block(self) -> str:
        return ", ".join(str(self.region[d]) for d in reversed(range(self.stencil.ndim)))

    def describe(self) -> str:
        return (f"time tiles of {self.depth} steps in shared memory: tile {' x '.join(map(str, self.tile))}, "
                f"blocks of {' x '.join(map(str, self.region))} threads")


def qualifies(stencil: ir.StencilIR) -> str | None:
    """Why no tile of the stencil can run in shared memory (None: tiles can)."""
    if len(stencil.statements) != 1:
        return f"{len(stencil.statements)} statements (shared-memory time tiles take one)"
    target = stencil.statements[0].target
    for f in stencil.fields:
        if f.name == target and f.window != 1:
            return f"field '{f.name}' keeps {f.window} past levels (shared-memory time tiles keep one)"
        if f.name != target and not f.time_invariant:
            return f"field '{f.name}' changes in time but is not computed by the statement"
    return None


def reason_not_shared(stencil: ir.StencilIR, schedule: LoweredSchedule) -> str | None:
    """Why the schedule's time tiles cannot run in shared memory (None: they can)."""
    s = schedule.schedule
    tiles = dict(s.tiles)
    why = qualifies(stencil)
    if why is not None:
        return why
    if set(tiles) != set(stencil.dims):
        return f"not every dimension is tiled (tile {', '.join(stencil.dims)} for shared memory)"
    if s.order or s.unrolls or s.vector_loop or s.parallel_loop not in (None, *(f"{d}_tile" for d in stencil.dims)):
        return "reorder/unroll/vectorize, or parallel() on a point loop, choose loops of the skewed tiles"
    return tile_plan(stencil, s.time_depth, tiles).too_large()


def tile_plan(stencil: ir.StencilIR, depth: int, tiles: dict[str, int]) -> SharedTimeTile | StreamedTile:
    """A shared-memory time tile of `depth` steps and these sizes: streamed in 2D and 3D, a box in 1D."""
    if stencil.ndim > 1:
        return stream.streamed_tile(stencil, depth, tiles)
    return SharedTimeTile(stencil, depth, tuple(tiles[d] for d in stencil.dims))


MIN_USEFUL = 0.25  # the share of a time tile's threads that must compute outputs for it to be tried


def default_tile(stencil: ir.StencilIR, depth: int, block: tuple[int, ...]) -> dict[str, int]:
    """The tile of `time_tile(depth)`: in 2D and 3D the streamed default; in 1D
    `block` halved until tile plus halo fits a block (or is 1 point)."""
    if stencil.ndim > 1:
        return stream.default_tile(stencil, depth)
    tile = shrink_tile(block, lambda sides: math.prod(t + 2 * depth * r for t, r in zip(sides, stencil.radius))
                       <= MAX_THREADS)
    return dict(zip(stencil.dims, tile))


def pays(stencil: ir.StencilIR, depth: int, tiles: dict[str, int]) -> bool:
    """Whether a block of this time tile fits and computes outputs with at least
    MIN_USEFUL of the points it loads: below that, the halo's redundant work costs
    more than the steps it fuses save (a 1x1 tile, say)."""
    plan = tile_plan(stencil, depth, tiles)
    return plan.too_large() is None and plan.useful() >= MIN_USEFUL


def default_stream(stencil: ir.StencilIR) -> StreamedTile | None:
    """The stencil's default launch as a streamed tile of one step (None: the kernel IR's mapping)."""
    if stencil.ndim < 2 or stencil.boundary != "dirichlet" or qualifies(stencil) is not None:
        return None
    plan = stream.streamed_tile(stencil, 1, stream.default_tile(stencil, 1))
    return plan if plan.too_large() is None else None


def shared_time_tile(stencil: ir.StencilIR, schedule: LoweredSchedule) -> SharedTimeTile | StreamedTile | None:
    """The shared-memory form of the schedule's launches (None: the kernel IR's mapping)."""
    if schedule.schedule == Schedule():
        return default_stream(stencil)
    if not schedule.schedule.time_depth or reason_not_shared(stencil, schedule) is not None:
        return None
    return tile_plan(stencil, schedule.schedule.time_depth, dict(schedule.schedule.tiles))


def _box_source(plan: SharedTimeTile, name: str) -> tuple[str, list[str]]:
    st, ndim = plan.stencil, plan.stencil.ndim
    statement = st.statements[0]
    axis = {d: AXES[ndim - 1 - d] for d in range(ndim)}  # the last dimension on .x
    n = [str(v) for v in plan.region]
    local = [f"l{d}" for d in range(ndim)]
    glob = [f"g{d}" for d in range(ndim)]
    extents = [f"P{d}" for d in range(ndim)]

    def access(read: ir.FieldRead) -> str:
        if read.name == statement.target:
            return f"a[{linear_index(local, plan.region, read.offsets)}]"
        return f"{field_name(read.name)}[{linear_index(glob, extents, read.offsets)}]"

    expr = c_expr(statement.expr, st.dtype, access, param_name)
    inputs = [f"const real *__restrict__ {field_name(f.name)}" for f in st.fields if f.time_invariant]
    params = inputs + [f"const real {param_name(p)}" for p in st.params] + [f"const long {e}" for e in extents]
    r, depth = st.radius, plan.depth
    volume = 1
    for v in plan.region:
        volume *= v
    lines = [(f"__global__ void __launch_bounds__({volume}) {name}(real *__restrict__ dst, const real *__restrict__ src, "
              f"{', '.join(params)}, const long steps)"), "{",
             f"    MSC_SHARED(real, {BUFFER}, [2][{volume}]);"]
    lines += [f"    const long l{d} = threadIdx.{axis[d]};" for d in range(ndim)]
    lines.append(f"    const long q = {linear_index(local, plan.region)};")
    pad = "    "
    for d in range(ndim):  # every tile of the grid, block-stride (uniform in the block)
        tiles = f"(P{d} + {plan.tile[d] - 1}) / {plan.tile[d]}"
        lines.append(f"{pad}for (long b{d} = blockIdx.{axis[d]}; b{d} < {tiles}; b{d} += gridDim.{axis[d]}) {{")
        pad += "    "
    lines += [f"{pad}const long g{d} = b{d} * {plan.tile[d]} - {depth * r[d]} + l{d};" for d in range(ndim)]
    inside = " && ".join(f"g{d} >= 0 && g{d} < P{d}" for d in range(ndim))
    interior = " && ".join(f"g{d} >= {r[d]} && g{d} < P{d} - {r[d]}" for d in range(ndim))
    gidx = linear_index(glob, extents)
    valid = " && ".join(f"l{d} >= {r[d]} * h && l{d} < {n[d]} - {r[d]} * h" for d in range(ndim))
    tile = " && ".join(f"l{d} >= {depth * r[d]} && l{d} < {depth * r[d] + plan.tile[d]}" for d in range(ndim))
    lines += [f"{pad}const bool in_array = {inside}, interior = {interior};",
              f"{pad}{BUFFER}[0][q] = in_array ? src[{gidx}] : (real)0;",
              f"{pad}__syncthreads();",
              f"{pad}for (long s = 0; s < steps; s++) {{",
              f"{pad}    const real *a = {BUFFER}[s & 1];",
              f"{pad}    real *b = {BUFFER}[(s + 1) & 1];",
              f"{pad}    const long h = s + 1;  /* the region still valid after this step is h radii in */",
              f"{pad}    if (in_array && {valid})",
              f"{pad}        b[q] = interior ? {expr} : a[q];",
              f"{pad}    __syncthreads();",
              f"{pad}}}",
              f"{pad}if (interior && {tile})",
              f"{pad}    dst[{gidx}] = {BUFFER}[steps & 1][q];",
              f"{pad}__syncthreads();  /* before the block's next tile overwrites shared memory */"]
    return close_tiles(lines, pad, st)


def kernel_source(plan: SharedTimeTile | StreamedTile, name: str) -> tuple[str, list[str]]:
    """The `__global__` function and its parameters after the two level pointers, in call order."""
    if isinstance(plan, StreamedTile):
        return stream.kernel_source(plan, name)
    return _box_source(plan, name)


def host_body(plan: SharedTimeTile | StreamedTile, kernel: str, args: list[str]) -> list[str]:
    """The time loop: one launch per `depth` steps between the two ring slots,
    then the newest level moved to the slot the ring convention gives it (when the
    number of launches leaves it in the other)."""
    buf = ring_buffer(plan.stencil.statements[0].target)
    grid, block, shared = plan.grid(), plan.block(), plan.dynamic_shared
    opt_in = [(f"MSC_CUDA_CHECK(cudaFuncSetAttribute((const void *){kernel}, cudaFuncAttributeMaxDynamicSharedMemorySize, "
               f"{shared}));")] if shared else []
    return [
        f"/* {plan.describe()} */",
        *opt_in,
        "long slot = t0 % 2;",
        f"for (long t = 0; t < T; t += {plan.depth}) {{",
        f"    const long steps = msc_imin({plan.depth}, T - t);",
        (f"    MSC_LAUNCH({kernel}, dim3({grid}), dim3({block}), {shared}, {buf} + (1 - slot) * V, {buf} + slot * V, "
         f"{', '.join(args)}, steps);"),
        "    slot = 1 - slot;",
        "}",
        "if (slot != (t0 + T) % 2)",
        (f"    MSC_CUDA_CHECK(cudaMemcpy({buf} + ((t0 + T) % 2) * V, {buf} + slot * V, sizeof(real) * V, "
         "cudaMemcpyDeviceToDevice));"),
    ]
