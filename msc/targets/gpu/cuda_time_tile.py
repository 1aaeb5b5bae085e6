"""Temporal blocking in shared memory for the CUDA target.

For `time_tile(depth, ...)` on a dirichlet stencil, every dimension tiled,
one launch advances `depth` steps between the two ring slots: global memory
is read and written once per `depth` steps instead of once per step, at the
price of a recomputed halo. In 2D and 3D the tiles are streamed
(msc/targets/gpu/cuda_stream.py, which also gives the stencil's default
launch, a streamed tile of one step): any statements reading levels up to t,
a tile of several steps taking at least as many as a written field keeps
past levels (`cuda_stream.reason`; such a field's launches alternate between
two sets of its levels, `level_sets_loop`). In 1D a tile is a box, for one
statement whose field keeps one past level (`qualifies`): each block loads
its tile plus a halo of depth x radius into shared memory once, runs up to
`depth` steps there (each step on a region shrunk by the radius,
`__syncthreads()` between steps), and writes the tile's interior; the block
is the loaded region, at most 1024 threads.

Other time-tiled schedules (or a block over the limit) keep the general
skewed tiles of the kernel IR, run in global memory (`passes/cuda.py`);
`reason_not_shared` says why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen.lower import field_name, ring_buffer, ring_slot
from msc.poly.schedule import LoweredSchedule, Schedule, shrink_tile
from msc.targets.gpu import cuda_stream as stream
from msc.targets.gpu.cuda_pass import AXES, MAX_THREADS, DeviceFunction, level_points
from msc.targets.gpu.cuda_stream import MIN_USEFUL, StreamedTile, blocks, conjunction, tile_loops, tile_parameters

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

    def grid(self) -> tuple[ix.Expr, ...]:
        """Blocks of a launch, x first."""
        ndim = self.stencil.ndim
        return tuple(blocks(ix.Var(f"P{d}"), self.tile[d], 65535 if AXES[ndim - 1 - d] != "x" else 0)
                     for d in reversed(range(ndim)))

    def block(self) -> tuple[int, ...]:
        return self.region[::-1]

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
    why = qualifies(stencil) if stencil.ndim == 1 else stream.reason(stencil, s.time_depth)
    if why is not None:
        return why
    if set(tiles) != set(stencil.dims):
        return f"not every dimension is tiled (tile {', '.join(stencil.dims)} for shared memory)"
    if s.order or s.vector_loop or s.parallel_loop not in (None, *(f"{d}_tile" for d in stencil.dims)):
        return "reorder/vectorize, or parallel() on a point loop, choose loops of the skewed tiles"
    if s.unrolls and (stencil.ndim != 3 or len(s.unrolls) > 1 or s.unrolls[0][0] != stencil.dims[1]):
        return (f"unroll() of streamed tiles takes the middle dimension of a 3D stencil (its points per thread), "
                f"not {', '.join(name for name, _ in s.unrolls)}")
    return tile_plan(stencil, s.time_depth, tiles, points_per_thread(s)).too_large()


def points_per_thread(schedule: Schedule) -> int:
    """Points per thread along the middle dimension of a streamed 3D tile: `unroll(y, rows)`."""
    return schedule.unrolls[0][1] if schedule.unrolls else 1


def tile_plan(stencil: ir.StencilIR, depth: int, tiles: dict[str, int], rows: int = 1) -> SharedTimeTile | StreamedTile:
    """A shared-memory time tile of `depth` steps and these sizes: streamed in 2D and 3D
    (`rows` points per thread along a 3D stencil's middle dimension), a box in 1D."""
    if stencil.ndim > 1:
        return stream.streamed_tile(stencil, depth, tiles, rows)
    return SharedTimeTile(stencil, depth, tuple(tiles[d] for d in stencil.dims))


def default_tile(stencil: ir.StencilIR, depth: int, block: tuple[int, ...]) -> dict[str, int]:
    """The tile of `time_tile(depth)`: in 2D and 3D the streamed default where its
    tiles run in shared memory, else `block` (the block of skewed tiles in global
    memory); in 1D `block` halved until tile plus halo fits a block (or is 1 point)."""
    if stencil.ndim > 1:
        tiles = stream.default_tile(stencil, depth)
        if stream.reason(stencil, depth) is None and stream.streamed_tile(stencil, depth, tiles).too_large() is None:
            return tiles
        return dict(zip(stencil.dims, block))
    tile = shrink_tile(block, lambda sides: math.prod(t + 2 * depth * r for t, r in zip(sides, stencil.radius))
                       <= MAX_THREADS)
    return dict(zip(stencil.dims, tile))


def pays(stencil: ir.StencilIR, depth: int, tiles: dict[str, int], rows: int = 1) -> bool:
    """Whether a block of this time tile fits and computes outputs with at least
    MIN_USEFUL of the points it loads: below that, the halo's redundant work costs
    more than the steps it fuses save (a 1x1 tile, say)."""
    plan = tile_plan(stencil, depth, tiles, rows)
    return plan.too_large() is None and plan.useful() >= MIN_USEFUL


def default_stream(stencil: ir.StencilIR) -> StreamedTile | None:
    """The stencil's default launch as a streamed tile of one step (None: the kernel IR's mapping)."""
    if default_stream_reason(stencil) is not None:
        return None
    return stream.streamed_tile(stencil, 1, stream.default_tile(stencil, 1))


def default_stream_reason(stencil: ir.StencilIR) -> str | None:
    """Why the stencil's default launch maps its points onto threads instead of streaming (None: it streams)."""
    if stencil.ndim < 2:
        return f"stencil '{stencil.name}' is {stencil.ndim}D; streamed tiles are 2D or 3D"
    if stencil.boundary != "dirichlet":
        return f"stencil '{stencil.name}' is {stencil.boundary}; streamed tiles are dirichlet"
    return stream.reason(stencil, 1) or stream.streamed_tile(stencil, 1, stream.default_tile(stencil, 1)).too_large()


def shared_time_tile(stencil: ir.StencilIR, schedule: LoweredSchedule) -> SharedTimeTile | StreamedTile | None:
    """The shared-memory form of the schedule's launches (None: the kernel IR's mapping);
    `prefetch(d)` sets how many planes ahead a streamed tile's loads run."""
    s = schedule.schedule
    if _default_launch(s):
        plan = default_stream(stencil)
    elif not s.time_depth or reason_not_shared(stencil, schedule) is not None:
        return None
    else:
        plan = tile_plan(stencil, s.time_depth, dict(s.tiles), points_per_thread(s))
    return replace(plan, prefetch=s.prefetch_distance) if isinstance(plan, StreamedTile) else plan


def prefetch_reason(stencil: ir.StencilIR, schedule: LoweredSchedule) -> str | None:
    """Why `prefetch(d)` cannot set how far this schedule's loads run ahead (None: it can):
    the launch does not stream, or its blocks stream fewer than d planes."""
    s = schedule.schedule
    if s.tensor_core_precision:
        return "tensor-core kernels stage their tiles themselves"
    if _default_launch(s):
        why = default_stream_reason(stencil)
        if why is not None:
            return f"the default launch maps points onto threads: {why}"
    elif not s.time_depth:
        return "tile(), parallel() and the other loop primitives map points onto threads; only the default launch " \
               "and time_tile(d) in shared memory stream"
    elif stencil.ndim == 1:
        return "a 1D time tile in shared memory loads its region once; it does not stream"
    elif (why := reason_not_shared(stencil, schedule)) is not None:
        return f"its time tiles run in global memory: {why}"
    plan = shared_time_tile(stencil, schedule)
    assert isinstance(plan, StreamedTile)
    if s.prefetch_distance > plan.planes:
        return f"a block streams {plan.planes} planes, so its loads run at most {plan.planes} ahead"
    return None


def _default_launch(schedule: Schedule) -> bool:
    """Whether the schedule asks for the default launch, whatever its loads' prefetch distance."""
    return replace(schedule, prefetch_distance=0) == Schedule()


def leftover_step(plan: StreamedTile) -> StreamedTile:
    """The default launch (a streamed tile of one step) that runs a time tile's steps left
    over where a launch writes several levels of a field, its loads as far ahead as the tile's."""
    step = default_stream(plan.stencil)
    assert step is not None, "a stencil whose time tiles stream streams one step"
    return replace(step, prefetch=plan.prefetch)


def _box_function(plan: SharedTimeTile, name: str) -> DeviceFunction:
    """The `__global__` function of the plan's box tiles, as kernel IR."""
    st, ndim, depth = plan.stencil, plan.stencil.ndim, plan.depth
    statement, r, region = st.statements[0], st.radius, plan.region
    axes = [AXES[ndim - 1 - d] for d in range(ndim)]  # the last dimension on .x
    local = [ix.Var(f"l{d}") for d in range(ndim)]
    glob = [ix.Var(f"g{d}") for d in range(ndim)]
    extents = [ix.Var(f"P{d}") for d in range(ndim)]
    q, s, h, steps = ix.Var("q"), ix.Var("s"), ix.Var("h"), ix.Var("steps")

    def access(read: ir.FieldRead) -> ix.Expr:
        if read.name == statement.target:
            return k.Load(k.Ref("a", ix.linear(local, region, read.offsets), k.Space.SHARED))
        return k.Load(k.Ref(field_name(read.name), ix.linear(glob, extents, read.offsets)))

    value = k.Compute(statement.expr, tuple((read, access(read)) for read in ir.reads_of(statement.expr)), st.dtype)
    interior = ix.Var("interior")
    valid = [c for d in range(ndim) for c in (local[d].ge(r[d] * h), local[d].lt(region[d] - r[d] * h))]
    in_tile = [c for d in range(ndim) for c in (local[d].ge(depth * r[d]), local[d].lt(depth * r[d] + plan.tile[d]))]
    glob_index = ix.linear(glob, extents)
    step = k.Block((
        k.Decl("a", "const pointer", k.Address(_buffer(s & 1, ix.Lit(0))), restrict=False),
        k.Decl("b", "pointer", k.Address(_buffer((s + 1) & 1, ix.Lit(0))), restrict=False),
        k.Comment("the region still valid after this step is h radii in"),
        k.Decl("h", "index", s + 1),
        k.If(conjunction([ix.Var("in_array"), *valid]), k.Block((
            k.Store(k.Ref("b", q, k.Space.SHARED),
                    ix.Select(interior, value, k.Load(k.Ref("a", q, k.Space.SHARED)))),))),
        k.Barrier()))
    tile = [*(k.Decl(f"g{d}", "index", ix.Var(f"b{d}") * plan.tile[d] - depth * r[d] + local[d]) for d in range(ndim)),
            k.Decl("in_array", "flag", conjunction([c for d in range(ndim)
                                                     for c in (glob[d].ge(0), glob[d].lt(extents[d]))])),
            k.Decl("interior", "flag", conjunction([c for d in range(ndim)
                                                     for c in (glob[d].ge(r[d]), glob[d].lt(extents[d] - r[d]))])),
            k.Store(_buffer(ix.Lit(0), q), ix.Select(ix.Var("in_array"), k.Load(k.Ref("src", glob_index)),
                                                     ix.Cast("real", ix.Lit(0)))),
            k.Barrier(),
            k.Loop("s", ix.Lit(0), s.lt(steps), step),
            k.If(conjunction([interior, *in_tile]),
                 k.Block((k.Store(k.Ref("dst", glob_index), k.Load(_buffer(steps & 1, q))),))),
            k.Comment("before the block's next tile overwrites shared memory"),
            k.Barrier()]
    body = k.Block((k.Buffer(BUFFER, k.Space.SHARED, (2, math.prod(region)), rows=1),
                    *(k.Decl(f"l{d}", "index", ix.Var(f"threadIdx.{axes[d]}")) for d in range(ndim)),
                    k.Decl("q", "index", ix.linear(local, region)),
                    *tile_loops(st, plan.tile, axes, tile).body))
    return DeviceFunction(name, body, plan.grid(), plan.block(), tile_parameters(st), indexed=True)


def _buffer(copy: ix.Expr, at: ix.Expr) -> k.Ref:
    """Point `at` of one of the block's two copies of its region."""
    return k.Ref(BUFFER, at, k.Space.SHARED, rows=(copy,))


def writes_level_sets(plan: SharedTimeTile | StreamedTile) -> bool:
    """Whether a launch of the plan writes several levels of a field (a streamed tile of
    several steps of a field keeping several past levels): its loop is `level_sets_loop`."""
    return plan.depth > 1 and any(f.window > 1 for f in plan.stencil.written_fields)


def device_functions(plan: SharedTimeTile | StreamedTile, name: str) -> list[DeviceFunction]:
    """The `__global__` functions of the plan's tiles, as kernel IR: its tile's, and where a
    launch writes several levels of a field, the default launch (a streamed tile of one
    step) for the steps left over."""
    if not isinstance(plan, StreamedTile):
        return [_box_function(plan, name)]
    out = [stream.device_function(plan, name)]
    if writes_level_sets(plan):
        out.append(stream.device_function(leftover_step(plan), f"{name}_step"))
    return out


def host_loop(plan: SharedTimeTile | StreamedTile, functions: Sequence[DeviceFunction]) -> k.Block:
    """The time loop of the plan's launches (`ring_loop`, or `level_sets_loop` with the
    default launch for the steps left over: `device_functions`' order)."""
    level_sets = writes_level_sets(plan)
    step = leftover_step(plan) if level_sets and isinstance(plan, StreamedTile) else None
    shared = [tiles.dynamic_shared for tiles in (plan, step) if tiles is not None]
    setup = [k.SharedLimit(f.name, n, f.indexed) for f, n in zip(functions, shared) if n]
    launches = [_launcher(f, n, level_points(plan.stencil.ndim)) for f, n in zip(functions, shared)]
    if level_sets:
        return level_sets_loop(plan.stencil, plan.depth, plan.describe(), launches[0], launches[1], setup)
    return ring_loop(plan.stencil, plan.depth, plan.describe(), launches[0], setup)


def _launcher(function: DeviceFunction, shared: int, points: ix.Expr) -> Callable[[Sequence[ix.Expr]], k.Node]:
    """A launch of `function` given the pointers it takes first (its other arguments by name);
    an indexed function's by the `points` of a level."""
    def launch(pointers: Sequence[ix.Expr]) -> k.Node:
        return k.Launch(function.name, function.grid, function.block,
                        (*pointers, *(ix.Var(name) for _, name in function.scope[len(pointers):])), shared,
                        points if function.indexed else None)

    return launch


def level_sets_loop(stencil: ir.StencilIR, depth: int, comment: str, launch: Callable[[Sequence[ix.Expr]], k.Node],
                    step: Callable[[Sequence[ix.Expr]], k.Node], setup: Sequence[k.Node] = ()) -> k.Block:
    """The time loop of launches that write several levels of a field: `launch(pointers)` of
    `depth` steps while as many are left, between the two sets of each field's levels
    (`msc_level` in the kernel template: its ring's slots, and w - 1 scratch levels that
    start as copies of a level, dirichlet ring included); then each level copied to its
    ring slot (`msc_place_levels`), and the steps left over one `step` each, in the
    ring's slots. The pointers are `cuda_stream.tile_parameters`' levels. The scratch
    levels are freed when the loop's block ends, however it ends."""
    fields, t, volume, t0 = stencil.written_fields, ix.Var("t"), ix.Var("V"), ix.Var("t0")
    full, level_set = ix.Var("msc_full"), ix.Var("set")
    nodes: list[k.Node] = [k.Comment(comment), *setup]
    scratch: dict[str, ix.Expr] = {}
    for f in fields:
        ring = ix.Var(ring_buffer(f.name))
        if f.window > 1:
            name = f"msc_scratch_{field_name(f.name)}"
            first = ring + t0 % f.slots * volume
            nodes += [k.DeviceScratch(name, first, f.window, volume), k.Call("msc_allocated", (ix.Var(name),))]
        scratch[f.name] = ix.Var(name) if f.window > 1 else ix.Lit(0)

    def level(field: str, in_set: ix.Expr, back: int) -> ix.Expr:
        ring, window = ix.Var(ring_buffer(field)), stencil.field(field).window
        return ix.Call("msc_level", (ring, scratch[field], ix.Lit(window), t0, in_set, ix.Lit(back), volume))

    pointers = [level(field, 1 - level_set, back) for field, back in stream.destinations(stencil, depth)]
    pointers += [level(lv.field, level_set, -lv.at) for lv in stream.sources(stencil)]
    nodes += [k.Decl("msc_full", "index", ix.Op("/", ix.Var("T"), ix.Lit(depth)) * depth),
              k.Loop("t", ix.Lit(0), t.lt(full), k.Block((
                  k.Decl("steps", "index", ix.Lit(depth)),
                  k.Decl("set", "index", ix.Op("/", t, ix.Lit(depth)) % 2),
                  launch(pointers))), step=ix.Lit(depth)),
              *(k.Call("msc_place_levels", (ix.Var(ring_buffer(f.name)), scratch[f.name], ix.Lit(f.window), t0, full,
                                            ix.Op("/", full, ix.Lit(depth)) % 2, volume)) for f in fields),
              k.Loop("t", full, t.lt(ix.Var("T")), k.Block((k.Decl("steps", "index", ix.Lit(1)),
                                                            step(slot_pointers(stencil, t)))))]
    return k.Block(tuple(nodes))


def slot_pointers(stencil: ir.StencilIR, t: ix.Expr) -> list[ix.Expr]:
    """The pointers of a one-step launch at step t in the ring's slots: the level each
    written field gets, then the levels it reads (`cuda_stream.tile_parameters`' order)."""
    def at(field: str, dt: int) -> ix.Expr:
        slots = stencil.field(field).slots
        return ix.Var(ring_buffer(field)) + ring_slot(t, dt, slots) * ix.Var("V")

    return [at(f.name, 1) for f in stencil.written_fields] + [at(lv.field, lv.at) for lv in stream.sources(stencil)]


def ring_loop(stencil: ir.StencilIR, depth: int, comment: str, launch: Callable[[Sequence[ix.Expr]], k.Node],
              setup: Sequence[k.Node] = ()) -> k.Block:
    """The time loop: `launch(pointers)` (up to `steps` steps, at most `depth`) per `depth`
    steps, the pointers to the level each written field gets and to the levels it reads
    (`cuda_stream.tile_parameters`' order). Fields keeping one past level alternate
    between their two ring slots, and the newest level moves to the slot the ring
    convention gives it at the end (when the number of launches leaves it in the
    other); with more past levels (a step per launch) every level is in its own slot."""
    fields, t, volume = stencil.written_fields, ix.Var("t"), ix.Var("V")
    periods = ix.Var("t0") + ix.Var("T")

    def at(field: str, slot: ix.Expr) -> ix.Expr:
        return ix.Var(ring_buffer(field)) + slot * volume

    steps = k.Decl("steps", "index", ix.min_(depth, ix.Var("T") - t))
    if any(f.window != 1 for f in fields):
        assert depth == 1, "a launch of several steps of several levels runs in level_sets_loop"
        return k.Block((k.Comment(comment), *setup,
                        k.Loop("t", ix.Lit(0), t.lt(ix.Var("T")), k.Block((steps, launch(slot_pointers(stencil, t)))))))
    slot = ix.Var("slot")
    pointers = [at(f.name, 1 - slot) for f in fields] + [at(f.name, slot) for f in fields]
    return k.Block((
        k.Comment(comment),
        *setup,
        k.Decl("slot", "index", ix.Var("t0") % 2, const=False),
        k.Loop("t", ix.Lit(0), t.lt(ix.Var("T")), k.Block((steps, launch(pointers), k.Set("slot", 1 - slot))),
               step=ix.Lit(depth)),
        k.If(slot.ne(periods % 2), k.Block(tuple(
            k.DeviceCopy(at(f.name, periods % 2), at(f.name, slot), volume) for f in fields)))))
