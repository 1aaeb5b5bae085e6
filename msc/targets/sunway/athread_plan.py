"""The athread target's LDM plan, shared by the target and its cost model:
the chips and their usable LDM, what each slave function holds in LDM (the
levels a statement reads, a tile's buffers, a time tile's), and the schedule
completed with tile sizes that fit (`athread_schedule`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from msc import ir
from msc.codegen import check_schedule_options
from msc.codegen import kernel_ir as k
from msc.codegen.lower import array_name, field_name
from msc.errors import ScheduleError
from msc.poly.schedule import Schedule, shrink_tile
from msc.runtime import athread_emu
from msc.targets.sunway.chips import NAME, Chip, as_chip

SCHEDULE_OPTIONS: tuple[str, ...] = ()  # the schedule's target options it takes: none
CPES = athread_emu.CPES
# The tile a dimension gets when tile() does not name it, before it is halved to fit the LDM: 2D and 3D tiles
# are streamed along x (their LDM holds rows), so they are long in x and wide along the rows, whose DMA blocks
# are then 1-2 KB in float64 (docs/athread.md).
DEFAULT_TILE = {1: (4096,), 2: (32, 256), 3: (16, 4, 128)}

def ldm_capacity(chip: Chip | str) -> int:
    """LDM bytes per CPE that buffers may use (Chip.ldm_capacity)."""
    return as_chip(chip).ldm_capacity


# -- the LDM plan of one statement --------------------------------------------


@dataclass(frozen=True)
class Level:
    """A level a statement reads: array `array` (field `field`, time offset
    `dt`), of which a tile needs the box [o + lo, o + h + hi) per dimension."""

    field: str
    dt: int | None
    lo: tuple[int, ...]
    hi: tuple[int, ...]

    @property
    def array(self) -> str:
        return array_name(self.field, self.dt)

    def extent(self, tile: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(t + h - lo for t, h, lo in zip(tile, self.hi, self.lo))


@dataclass(frozen=True)
class TileKernel:
    """The slave function of statement `index` (writing `target`) on tiles of shape `tile`.

    In 2D and 3D a tile is streamed along its first dimension: a CPE walks the tile's rows (3D: planes), holding
    a window of `ring` rows of every level in LDM, fetching the row after the window while it computes one, and
    putting each output row from one of two buffers. Every DMA moves one row of the tile's footprint, so its
    blocks are as long as the tile is wide, and the LDM holds rows, not the whole tile. In 1D a tile is one
    block, double-buffered."""

    index: int
    statement: ir.Statement
    levels: tuple[Level, ...]
    tile: tuple[int, ...]

    @property
    def function(self) -> str:
        return f"msc_slave{self.index}"

    @property
    def streamed(self) -> bool:
        return len(self.tile) > 1

    @property
    def reach(self) -> int:
        """Rows of the first dimension any level reads beyond the output row (its largest span there)."""
        return max(lv.hi[0] - lv.lo[0] for lv in self.levels)

    @property
    def ring(self) -> int:
        """Rows of each level's window: the rows one output row reads, and the one being fetched."""
        return self.reach + 2

    def buffers(self) -> list[k.Buffer]:
        """The LDM buffers of one CPE: streamed, each level's window of rows and two output rows; in 1D, two
        (double buffering) of every level's footprint and of the output."""
        if self.streamed:
            out = [k.Buffer(f"l_{lv.array}", k.Space.LOCAL, (self.ring, *lv.extent(self.tile)[1:]), lv.field)
                   for lv in self.levels]
            return out + [k.Buffer("l_out", k.Space.LOCAL, (2, *self.tile[1:]), self.statement.target)]
        out = [k.Buffer(f"l_{lv.array}", k.Space.LOCAL, (2, *lv.extent(self.tile)), lv.field) for lv in self.levels]
        return out + [k.Buffer("l_out", k.Space.LOCAL, (2, *self.tile), self.statement.target)]

    def ldm_bytes(self, itemsize: int) -> int:
        return sum((b.points() or 0) for b in self.buffers()) * itemsize


def _levels(stmt: ir.Statement) -> tuple[Level, ...]:
    boxes: dict[tuple[str, int | None], list[tuple[int, ...]]] = {}
    for a in stmt.reads:
        boxes.setdefault((a.name, a.dt), []).append(a.offsets)
    out = []
    for (name, dt), offsets in sorted(boxes.items(), key=lambda kv: (kv[0][0], -99 if kv[0][1] is None else kv[0][1])):
        lo = tuple(min(o[d] for o in offsets) for d in range(len(offsets[0])))
        hi = tuple(max(o[d] for o in offsets) for d in range(len(offsets[0])))
        out.append(Level(name, dt, lo, hi))
    return tuple(out)


def tile_kernels(stencil: ir.StencilIR, tile: tuple[int, ...]) -> list[TileKernel]:
    return [TileKernel(n, s, _levels(s), tile) for n, s in enumerate(stencil.statements)]


@dataclass(frozen=True)
class TimeTileKernel:
    """The slave function of a time tile: `depth` steps of every statement on
    one LDM block. A CPE fetches the tile plus a halo of depth x statements x
    radius (clipped to the array) of the levels of every written field that
    the first step reads (the slot it writes gets a copy of the newest level,
    for the boundary ring that is fixed in time) and of each input, computes
    the steps in LDM on a region that shrinks by the radius per statement
    (overlapped tiles: neighbours compute their shared halo twice), and
    writes the tile of the levels later steps read back into the other set
    of ring buffers (the MPE keeps two, so no CPE overwrites what another
    still fetches). In 1D two sets of box buffers alternate, the next tile's
    box fetched while this one computes; in 2D and 3D the box is streamed
    along x instead (`rings`): the same stages, a row (3D: a plane) at a
    time, each level in flight a ring of rows."""

    stencil: ir.StencilIR
    tile: tuple[int, ...]
    depth: int
    function = "msc_slave_tt"

    def halo(self, depth: int | None = None) -> tuple[int, ...]:
        steps = self.depth if depth is None else depth
        return tuple(steps * len(self.stencil.statements) * r for r in self.stencil.radius)

    def extent(self) -> tuple[int, ...]:
        return tuple(t + 2 * h for t, h in zip(self.tile, self.halo()))

    def arrays(self) -> list[tuple[ir.FieldDecl, int]]:
        """Every field staged in LDM, with its number of level buffers."""
        read = {a.name for st in self.stencil.statements for a in st.reads}
        return [(f, f.slots if f.written else 1) for f in self.stencil.fields if f.written or f.name in read]

    @property
    def streamed(self) -> bool:
        """2D and 3D time tiles stream along x (`rings`); 1D ones hold whole boxes, two sets of them."""
        return len(self.tile) > 1

    @property
    def row(self) -> int:
        """Points of one ring row: a box's row (3D: plane) across the other dimensions, halos included."""
        return math.prod(self.extent()[1:])

    @property
    def stages(self) -> int:
        """The statements a full-depth tile computes, one after another: stage c = j x statements + s."""
        return self.depth * len(self.stencil.statements)

    def boundary_from_newest(self) -> set[str]:
        """Written fields whose statement does not read the field's level t: it copies the boundary ring of
        each row it makes from the newest fetched level (the others copy it from level t, whose row it reads)."""
        return {st.target for st in self.stencil.statements
                if not any(a.name == st.target and a.dt == 0 for a in st.reads)}

    def rings(self) -> list[Ring]:
        """A streamed time tile's LDM: a ring of rows for every level in flight (see Ring)."""
        stencil, r0 = self.stencil, self.stencil.radius[0]
        nst = len(stencil.statements)
        writer = {st.target: n for n, st in enumerate(stencil.statements)}
        last_reader: dict[tuple[str, int | None], int] = {}  # (field, k) -> the last stage that reads it
        for n, st in enumerate(stencil.statements):
            for a in st.reads:
                f = stencil.field(a.name)
                for j in range(self.depth):
                    key = (a.name, j + a.dt + f.window - 1) if f.written else (a.name, None)
                    last_reader[key] = max(last_reader.get(key, -1), j * nst + n)
        out, offset, row = [], 0, self.row
        for f, _ in self.arrays():
            if not f.written:
                levels: list[tuple[int | None, int]] = [(None, -1)]
            else:
                levels = [(kk, -1) for kk in range(f.window)]
                levels += [(kk, (kk - f.window) * nst + writer[f.name])
                           for kk in range(f.window, f.window + self.depth)]
            for kk, producer in levels:
                last = last_reader.get((f.name, kk), producer)
                if producer < 0:  # fetched a row ahead; the newest level may serve the stages' boundary ring
                    if kk == f.window - 1 and f.name in self.boundary_from_newest():
                        last = self.stages - 1
                    length = (last + 2) * r0 + 2
                else:
                    length = max(last - producer, 0) * r0 + r0 + 1 if last > producer else 1
                out.append(Ring(f.name, kk, length, offset))
                offset += length * row
        return out

    def buffers(self) -> list[k.Buffer]:
        written = ", ".join(f.name for f in self.stencil.written_fields)
        if self.streamed:
            rings = self.rings()
            rows = [k.Buffer(f"l_{field_name(f.name)}", k.Space.LOCAL,
                             (sum(r.length for r in rings if r.field == f.name), *self.extent()[1:]), f.name)
                    for f, _ in self.arrays()]
            return rows + [k.Buffer("l_out", k.Space.LOCAL, (2, *self.tile[1:]), f"{written} (output rows)")]
        out = [k.Buffer(f"l_{field_name(f.name)}", k.Space.LOCAL, (2, n, *self.extent()), f"{f.name} (two sets)")
               for f, n in self.arrays()]
        return out + [k.Buffer("l_out", k.Space.LOCAL, self.tile, f"{written} (output staging)")]

    def ldm_bytes(self, itemsize: int) -> int:
        return sum((b.points() or 0) for b in self.buffers()) * itemsize


@dataclass(frozen=True)
class Ring:
    """Rows (3D: planes) of one level of `field` in a streamed time tile: level k (t = step + k - window + 1;
    k < window are fetched, a row ahead of the stages; the others computed by stage (k - window) x statements
    + s) or, k None, an input. Row x of the box lives in row x mod `length`, `offset` elements into the LDM
    block. A ring holds the rows its last reading stage still needs when its producer writes a new one; the
    newest fetched level's also the rows every stage copies its boundary ring from."""

    field: str
    k: int | None
    length: int
    offset: int


SlaveKernel = TileKernel | TimeTileKernel


def slave_kernels(stencil: ir.StencilIR, tile: tuple[int, ...], depth: int = 0) -> list[SlaveKernel]:
    """The slave functions of a schedule with these tile sizes (and time-tile depth)."""
    if depth:
        return [TimeTileKernel(stencil, tile, depth)]
    return list(tile_kernels(stencil, tile))


def fitting_tile(stencil: ir.StencilIR, chip: Chip | str, start: tuple[int, ...],
                 fixed: frozenset[int] = frozenset(), depth: int = 0) -> tuple[int, ...]:
    """`start` with its dimensions not in `fixed` halved (the largest first)
    until every slave function's buffers fit the LDM (or they cannot shrink further)."""
    itemsize, capacity = _itemsize(stencil), ldm_capacity(chip)
    return shrink_tile(start, lambda tile: max(t.ldm_bytes(itemsize) for t in slave_kernels(stencil, tile, depth))
                       <= capacity, fixed)


def _itemsize(stencil: ir.StencilIR) -> int:
    return 4 if stencil.dtype == "float32" else 8


# -- schedules ------------------------------------------------------------------


def athread_schedule(schedule: Schedule | None, stencil: ir.StencilIR, chip: Chip | str) -> Schedule:
    """The schedule with a tile size for every dimension (the ones it lacks from
    the platform's default, halved to fit the LDM); what this target cannot
    do is a ScheduleError naming the primitive."""
    s = schedule or Schedule()
    check_schedule_options(NAME, s, SCHEDULE_OPTIONS)
    refused = [("compute_at()", s.fuse_at is not None), ("reorder()", bool(s.order)),
               ("vectorize()", s.vector_loop is not None)]
    for name, asked in refused:
        if asked:
            raise ScheduleError(f"target '{NAME}' has no {name}: a CPE computes one LDM tile at a time (its "
                                f"primitives: tile, time_tile, cache_read, cache_write, parallel on a tile loop, unroll)")
    given = dict(s.tiles)
    for name in given:
        if name not in stencil.dims:
            raise ScheduleError(f"stencil '{stencil.name}' is {stencil.ndim}D: it has no dimension {name!r}")
    if s.parallel_loop is not None and s.parallel_loop not in {f"{d}_tile" for d in given}:
        raise ScheduleError(f"target '{NAME}': parallel({s.parallel_loop!r}): the CPEs share the tiles, so only a "
                            f"tile loop can be parallel (tiled here: {', '.join(given) or 'none'})")
    for loop, _ in s.unrolls:
        if loop not in stencil.dims:
            raise ScheduleError(f"target '{NAME}': unroll({loop!r}): only a point loop "
                                f"({', '.join(stencil.dims)}) can be unrolled")
    default = DEFAULT_TILE[stencil.ndim]
    start = tuple(given.get(d, default[n]) for n, d in enumerate(stencil.dims))
    fixed = frozenset(n for n, d in enumerate(stencil.dims) if d in given)
    tile = fitting_tile(stencil, chip, start, fixed, s.time_depth)
    return replace(s, tiles=tuple(zip(stencil.dims, tile)))
