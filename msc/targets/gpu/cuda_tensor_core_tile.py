"""Tensor cores fused with time tiles: one launch advances up to `depth` steps of a
2D statement's tensor-core plan (msc/targets/gpu/tensor_core.py) in shared memory.

`Schedule().tensor_cores(p).time_tile(depth[, x=rows, y=cols])` on a 2D dirichlet
stencil of one statement whose field keeps one past level (the shared-memory
time tiles' condition, `cuda_time_tile.qualifies`). A block owns `rows` x `cols`
output points (`default_tile` when the schedule names no sizes):

* Each step but the last computes the *frame*: fragments covering the tile
  and a halo of (depth - 1) x radius (columns rounded up to k, so wmma's
  256-bit alignment holds), from one copy of the stepped level into the
  other. Only interior points are written, so the ring keeps its boundary
  values and points past the array stay zero. The frame's warps take units
  of `tiles` fragments side by side. Points near the frame's edge read
  stale neighbours, but the region still valid shrinks by the radius per
  step: after `steps` steps exactly the tile is valid. In fp64, where the
  output columns lie on 32-byte boundaries (`FusedTile.direct`), the
  accumulators start at the constant and are stored straight into the other
  copy, and a unit reaching past the interior puts back what the staging put
  there; elsewhere they go through the warp's output tiles.
* Each source is staged once, the frame and the plan's halo (the first
  step's reads); the level it steps goes into both copies.
* The last step computes the tile's own fragments into global memory.

Each step adds the plan's constant and rounds to the operand type as the
one-step kernel's output is rounded when the next step stages it, so `steps`
fused steps equal `steps` one-step launches (`replay` stepped; tests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as kir
from msc.codegen.lower import field_name, param_name
from msc.errors import ScheduleError
from msc.poly.schedule import Schedule
from msc.targets.gpu import cuda_tensor_core as tc
from msc.targets.gpu import cuda_time_tile
from msc.targets.gpu.cuda_pass import DeviceFunction
from msc.targets.gpu.cuda_stream import conjunction
from msc.targets.gpu.tensor_core import MMA_SHAPES, MmaShape, TensorCorePlan, tensor_core_plan

WARPS = 8  # warps of a block: a frame has many units of fragments
DEFAULT_BUDGET = 112 * 1024  # shared memory of a default tile: two blocks fit an SM of sm_90 (228 KiB)


@dataclass(frozen=True)
class FusedTile:
    """Where a block's fragments lie, relative to its first output point (rows, then columns)."""

    shape: MmaShape
    tiles: int  # fragments side by side in a unit (one accumulator each)
    depth: int
    rows: int
    cols: int
    halo: tuple[int, int]  # the frame's reach beyond the tile: (depth - 1) x radius (columns rounded up to k)
    direct: bool  # steps store their accumulators straight into the next copy (fp64, output columns aligned)

    @property
    def warps(self) -> int:
        """Warps of a block: one per unit of the frame, at most WARPS."""
        return min(WARPS, math.prod(self.frame))

    @property
    def unit_cols(self) -> int:
        return self.tiles * self.shape.n

    @property
    def frame(self) -> tuple[int, int]:
        """Fragment rows and units of a step before the last, from `halo` before the tile."""
        return (math.ceil((self.rows + 2 * self.halo[0]) / self.shape.m),
                math.ceil((self.cols + 2 * self.halo[1]) / self.unit_cols))

    @property
    def last(self) -> tuple[int, int]:
        """Fragment rows and units of the last step, from the tile's first point."""
        return math.ceil(self.rows / self.shape.m), math.ceil(self.cols / self.unit_cols)

    @property
    def end(self) -> tuple[int, int]:
        """Rows and columns after the tile's first point that some step's fragments reach."""
        (fr, fu), (lr, lu) = self.frame, self.last
        return (max(fr * self.shape.m - self.halo[0], lr * self.shape.m),
                max(fu * self.unit_cols - self.halo[1], lu * self.unit_cols))

    def fragments_per_update(self) -> float:
        """MMA output points the block computes per output point it advances a step (1.0: no halo or tail)."""
        (fr, fu), (lr, lu) = self.frame, self.last
        computed = ((self.depth - 1) * fr * fu + lr * lu) * self.shape.m * self.unit_cols
        return computed / (self.rows * self.cols * self.depth)


def reason(stencil: ir.StencilIR, schedule: Schedule) -> str | None:
    """Why tensor cores cannot fuse this schedule's time tiles (None: they can)."""
    precision = schedule.tensor_core_precision
    if precision is not None and tc.tiles_per_warp(MMA_SHAPES[precision]) == 1:
        return (f"{precision}'s fragments of {MMA_SHAPES[precision].n} columns are fewer than 32 bytes, and a "
                "frame's fragments must start on 32-byte boundaries (wmma's alignment); fp64 and tf32 fuse")
    if stencil.ndim != 2:
        return f"fused time tiles are 2D, stencil '{stencil.name}' is {stencil.ndim}D"
    why = cuda_time_tile.qualifies(stencil)
    if why is not None:
        return why
    used = [p for p, on in (("cache_read", schedule.cached_reads), ("cache_write", schedule.cached_writes),
                            ("compute_at", schedule.fuse_at), ("reorder", schedule.order), ("unroll", schedule.unrolls),
                            ("vectorize", schedule.vector_loop), ("parallel", schedule.parallel_loop)) if on]
    if used:
        return f"the fused kernel stages and steps its tile itself, without {', '.join(f'{p}()' for p in used)}"
    return None


def _geometry(plan: TensorCorePlan, stencil: ir.StencilIR, depth: int, rows: int, cols: int) -> FusedTile:
    shape = plan.shape
    reach = depth - 1  # what the steps after the first still need; the first's reads are the plan's halo
    halo = (reach * stencil.radius[0], math.ceil(reach * stencil.radius[1] / shape.k) * shape.k)
    # the stepped level's output columns lie on 32-byte boundaries where its input operands' column
    # (modulo k) does; fp64 accumulators are its operands
    direct = shape.operand == "double" and plan.column_alignment((plan.target, 0)) == 0
    return FusedTile(shape, tc.tiles_per_warp(shape), depth, rows, cols, halo, direct)


def _staging(plan: TensorCorePlan, tile: FusedTile) -> list[tc.Staging]:
    return tc.staging_of(plan, tile.halo, tile.end, stepped=(plan.target, 0), stored=tile.direct)


def default_tile(stencil: ir.StencilIR, precision: str, depth: int) -> dict[str, int]:
    """The tile of `time_tile(depth)` with tensor cores: of the tiles whose frame or last step is
    whole fragment rows and whole units, the one that computes fewest fragments per update (then
    the largest) within DEFAULT_BUDGET of shared memory."""
    plan = tensor_core_plan(stencil, 0, precision)
    shape = plan.shape
    unit = _geometry(plan, stencil, depth, 1, 1)  # the halo and unit width, whatever the tile
    rows = {r for f in range(2, 9) for r in (f * shape.m, f * shape.m - 2 * unit.halo[0]) if r >= shape.m}
    cols = {c for u in range(1, 9) for c in (u * unit.unit_cols, u * unit.unit_cols - 2 * unit.halo[1])
            if c >= shape.n}
    fitting = [tile for tile in (_geometry(plan, stencil, depth, r, c) for r in sorted(rows) for c in sorted(cols))
               if tc.shared_bytes(shape, _staging(plan, tile), tile.warps, tile.tiles) <= DEFAULT_BUDGET]
    if not fitting:
        raise ScheduleError(f"tensor_cores with time_tile({depth}) on stencil '{stencil.name}': no tile with a halo of "
                            f"{depth - 1} x radius fits {DEFAULT_BUDGET} bytes of shared memory; take a smaller depth")
    best = min(fitting, key=lambda tile: (tile.fragments_per_update(), -tile.rows * tile.cols))
    return {stencil.dims[0]: best.rows, stencil.dims[1]: best.cols}


@dataclass(frozen=True)
class FusedKernel:
    """The fused kernel (its code and host helpers) and where its fragments lie."""

    kernel: tc.TensorCoreKernel
    tile: FusedTile

    def describe(self) -> str:
        (rows, units), tile = self.tile.frame, self.tile
        return (f"tensor cores ({self.kernel.plan.precision}) fused with time tiles of {tile.depth} steps: tile "
                f"{tile.rows} x {tile.cols}, {self.kernel.warps} warps; each step before the last computes "
                f"{rows} fragment rows x {units} units of {tile.tiles} fragments "
                f"({tile.fragments_per_update():.2f} MMA outputs per update)")


def entry_loop(stencil: ir.StencilIR, schedule: Schedule, name: str) -> tuple[str, kir.Block]:
    """The fused kernel's source (named `<name>_tc`) and the entry's time loop, a launch per
    `depth` steps; ScheduleError if the schedule cannot fuse (`reason`) or loses precision unasked."""
    depth = schedule.time_depth
    why = reason(stencil, schedule)
    if why is not None:
        raise ScheduleError(f"tensor_cores with time_tile({depth}) on stencil '{stencil.name}': {why}")
    tc.check_loss(stencil, schedule)
    assert schedule.tensor_core_precision is not None
    fused = generate(stencil, schedule.tensor_core_precision, depth, dict(schedule.tiles), f"{name}_tc")
    stepped = (stencil.statements[0].target, 0)

    def launch(pointers: Sequence[ix.Expr]) -> kir.Node:
        dst, src = pointers
        sources = [src if s == stepped else ix.Var(field_name(s[0])) for s in fused.kernel.sources]
        return kir.Call(f"{fused.kernel.name}_launch", (
            dst, *sources, *(ix.Cast("double", ix.Var(param_name(p))) for p in stencil.params),
            *(ix.Cast("int", ix.Var(f"P{d}") - 2 * r) for d, r in enumerate(stencil.radius)),
            ix.Cast("int", ix.Var("steps"))))

    return fused.kernel.code, cuda_time_tile.ring_loop(stencil, depth, fused.describe(), launch)


def generate(stencil: ir.StencilIR, precision: str, depth: int, tiles: dict[str, int], name: str) -> FusedKernel:
    """The fused kernel of the stencil's statement: up to `depth` steps per launch on tiles of these sizes."""
    plan = tensor_core_plan(stencil, 0, precision)
    shape = plan.shape
    if set(tiles) != set(stencil.dims) or min(tiles.values()) < 1:
        raise ScheduleError(f"tensor_cores with time_tile({depth}) on stencil '{stencil.name}': name a size of at "
                            f"least 1 for both {' and '.join(stencil.dims)} (rows, then columns of a block's tile), "
                            "or none to let the target choose")
    rows, cols = (tiles[d] for d in stencil.dims)
    tile = _geometry(plan, stencil, depth, rows, cols)
    staging = _staging(plan, tile)
    shared = tc.shared_bytes(shape, staging, tile.warps, tile.tiles)
    if shared > tc.MAX_SHARED:
        raise ScheduleError(f"tensor_cores with time_tile({depth}, {stencil.dims[0]}={rows}, {stencil.dims[1]}={cols}) "
                            f"on stencil '{stencil.name}': the tile and its halo need {shared} bytes of shared memory, "
                            f"over the {tc.MAX_SHARED} bytes of a block; take a smaller tile or depth")
    kernel = tc.TensorCoreKernel(name, plan, stencil.dtype, stencil.params, stencil.radius, False, tile.warps,
                                 tile.tiles, tuple(staging), shared, tc.band_elements(plan), "", fused=True)
    return FusedKernel(replace(kernel, code=tc.printed(kernel, device_function(kernel, tile))), tile)


def device_function(kern: tc.TensorCoreKernel, tile: FusedTile) -> DeviceFunction:
    """The fused kernel's `__global__` function as kernel IR."""
    m = tile.shape.m
    width, t = tile.unit_cols, ("double" if kern.dtype == "float64" else "float")
    n0, n1 = tc.extents(2)
    e, u, cur = ix.Var("e"), ix.Var("u"), ix.Var("cur")
    ur, uc, fr, fc, r, c = (ix.Var(v) for v in ("ur", "uc", "fr", "fc", "r", "c"))
    stepped = next(s for s in kern.staging if s.copies == 2)

    def at(s: tc.Staging, row: ix.Expr, col: ix.Expr) -> ix.Expr:
        return (row + s.row_below) * s.pitch + (col + s.column_offset)

    def operand(s: tc.Staging, o: tuple[int, ...], i: int) -> ix.Expr:
        base = ix.Var("stage") + (s.offset + cur * s.size if s.copies == 2 else ix.Lit(s.offset))
        return base + at(s, ur + o[-2], uc + (o[-1] + i * tile.shape.n))

    body: list[kir.Node] = [*tc.buffers(kern),
                            kir.Decl("r0", "int", ix.Var("blockIdx.y") * tile.rows),
                            kir.Decl("c0", "int", ix.Var("blockIdx.x") * tile.cols)]
    body += [*tc.lane_ids(),
             *(tc.staged_rows(kern, s, [], ix.Lit(0)) for s in kern.staging),
             kir.Barrier(), *tc.warp_fragments(kern)]
    value = ix.Op("+", tc.tile_value(kern, ix.Var("i"), e), ix.Var("constant"))
    inside = conjunction([r.ge(0), r.lt(n0), c.ge(0), c.lt(n1)])
    column = [kir.Decl("fc", "int", uc + e), kir.Decl("c", "int", ix.Var("c0") + fc)]
    row = [kir.Decl("fr", "int", ur + ix.Var("i")), kir.Decl("r", "int", ix.Var("r0") + fr)]

    def through_tiles(write: kir.Node, rows: int | None = None, cols: int | None = None) -> list[kir.Node]:
        """The unit's tiles stored to the warp's output tiles, its points in the interior (and, where
        given, in the tile's first `rows` and `cols`) written by `write`."""
        column_ok = conjunction([*([fc.lt(cols)] if cols is not None else []), c.ge(0), c.lt(n1)])
        row_ok = conjunction([*([fr.lt(rows)] if rows is not None else []), r.ge(0), r.lt(n0)])
        return [*tc.stored_tiles(kern), tc.down_columns(kern, column, column_ok, row, row_ok, write),
                kir.Comment("before the warp's next unit overwrites its tiles"),
                kir.Barrier("warp")]

    def units(count: tuple[int, int], before: tuple[int, int], finish: list[kir.Node],
              start: ix.Expr | None = None) -> kir.Loop:
        rows, across = count
        return kir.Loop("u", ix.Var("warp"), u.lt(rows * across), kir.Block((
            kir.Decl("ur", "int", ix.Op("/", u, ix.Lit(across)) * m - before[0]),
            kir.Decl("uc", "int", u % across * width - before[1]),
            *tc.products_of(kern, operand, start), *finish)), step=ix.Lit(kern.warps), kind="int")

    following = stepped.offset + (1 - cur) * stepped.size
    if tile.direct:  # fp64, the output columns aligned: the accumulators (started at the constant) go straight in
        # a unit reaching past the interior puts back what the staging put there (the ring, zeros past the array)
        edge = conjunction([(ix.Var("r0") + ur).ge(0), (ix.Var("r0") + ur + m).le(n0),
                            (ix.Var("c0") + uc).ge(0), (ix.Var("c0") + uc + width).le(n1)]).not_()
        restore = kir.Store(kir.Ref("stage", following + at(stepped, fr, fc), kir.Space.SHARED),
                            tc.staged_value(kern, stepped.source, [r, c]))
        step = units(tile.frame, tile.halo, [
            *(kir.MatrixStore(ix.Var("stage") + following + at(stepped, ur, uc + i * tile.shape.n), f"acc{i}",
                              stepped.pitch) for i in range(kern.tiles)),
            kir.If(edge, kir.Block((
                kir.Barrier("warp"),
                tc.down_columns(kern, column, None, row, None, kir.If(inside.not_(), kir.Block((restore,)))))))],
            ix.Var("constant"))
    else:
        step = units(tile.frame, tile.halo, through_tiles(kir.Store(
            kir.Ref("stage", following + at(stepped, fr, fc), kir.Space.SHARED),
            tc.to_operand(tile.shape.operand, value))))
    result = kir.Store(kir.Ref("out", tc.element(kern, [r, c])), ix.Cast(t, value))
    s_ = ix.Var("s")
    body += [kir.Comment(f"steps before the last: the frame, {tile.frame[0]} fragment rows x {tile.frame[1]} units "
                         f"from ({-tile.halo[0]}, {-tile.halo[1]})"),
             kir.Loop("s", ix.Lit(0), s_.lt(ix.Var("steps") - 1), kir.Block((
                 kir.Decl("cur", "int", s_ % 2), step,
                 kir.Comment("before the next step reads what this one wrote"),
                 kir.Barrier())), kind="int"),
             kir.Comment("the last step: the tile, into global memory"),
             kir.Decl("cur", "int", (ix.Var("steps") - 1) % 2),
             units(tile.last, (0, 0), through_tiles(result, tile.rows, tile.cols))]
    grid = (ix.Op("/", n1 + (tile.cols - 1), ix.Lit(tile.cols)), ix.Op("/", n0 + (tile.rows - 1), ix.Lit(tile.rows)),
            ix.Lit(1))
    return DeviceFunction(f"{kern.name}_kernel", kir.Block(tuple(body)), grid, (32 * kern.warps,),
                          tc.scope(kern, ("int", "steps")))
