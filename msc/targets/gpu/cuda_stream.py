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

With `unroll(y, k)` on a 3D tile, each thread owns k consecutive points of
the middle dimension instead of one (`StreamedTile.rows`): it loads, computes
and writes all k, and its partial sums read each neighbour once for all k.

Several statements and levels: each written field has its own rings, one per
`Level` a step reads with neighbours (the loaded level t of every written
field, an older level read with a nonzero offset, and each step's result but
the last), and every statement of a step computes its field's plane (a
level t+1 an earlier statement wrote is read at the point from its
register; at a neighbour from its ring, the reader lagging behind the
writer as far as the chain of such reads reaches ahead, `chains`, the halo
wider on each side by the chain's length towards it, ADR 0069). An older
level read only at the point itself (u[t-1] of a wave equation) is read
from global memory, as inputs are; a statement of such a field that is
otherwise a weighted sum of its level t is partial sums too, each step but
the first taking level t-1 from the registers of the step before
(`Sums.older`). A launch of several
steps writes as many levels of each field as the field keeps, the last
steps' results (the next launch reads them: `destinations`); `reason` says
which stencils stream.

The default launch of a qualifying stencil (2D or 3D, dirichlet, `reason`
None) is a streamed tile of depth 1; `time_tile(depth, ...)` tiles are
streamed tiles of that depth, the outermost dimension's size being the chunk.
With no sizes the target chooses the tile (`default_tile`): of a block of
INNER_THREADS for the default launch, of TIME_TILE_THREADS for a time tile
where its rings fit (ADR 0070).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Sequence

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen.lower import field_name, level_name, param_name
from msc.ir.linear import NonLinearError, linear_form
from msc.targets.gpu.cuda_pass import AXES, MAX_THREADS, STATIC_SHARED, DeviceFunction

RING = "msc_ring"  # the stages' rings of planes in shared memory
SHARED_BYTES = 64 << 10  # dynamic shared memory a block may have on every device msc targets (AMD CDNA's LDS)
CHUNK = 32  # planes a block streams through by default, at least: and 8 x depth x radius (a halo of at most 25%)
AHEAD = 2  # loads in flight per thread: planes its loads run ahead of the one computed, times its points per plane
INNER_THREADS = {2: (128,), 3: (16, 32)}  # threads of a default block per inner dimension, outer first
#: threads of a default time tile's block (depth > 1) per inner dimension, outer first. In 3D a time
#: tile's halo takes a larger share of a smaller block (depth 4, radius 1: 8 x 24 outputs of 16 x 32
#: threads, 24 x 24 of 32 x 32), and what a block computes for its halo costs shared-memory accesses and
#: instructions: at 66 x 258 x 258, float64, the 32 x 32 block counts 22% fewer shared wavefronts per
#: update on heat3d (20% on box3d27p) and, by its SASS, 33% fewer instructions per update, 48% with its
#: plane loop unrolled (PLANE_UNROLL; docs/cuda.md "Larger 3D time tiles"). Its rings fit 64 KiB up to
#: depth 4 in float64 (else the INNER_THREADS block).
TIME_TILE_THREADS = {2: (128,), 3: (32, 32)}
MIN_USEFUL = 0.25  # the share of a time tile's threads that must compute outputs for it to be tried
Terms = dict[int, list[tuple[tuple[int, ...], ir.Expr]]]  # a statement's weighted reads by streamed offset


def reason(stencil: ir.StencilIR, depth: int) -> str | None:
    """Why the stencil's tiles of `depth` steps cannot stream (None: they can): a
    field that changes in time but no statement computes, a step that reads no
    field at t or before (nothing to stream), or, with several steps, fewer steps
    than a written field keeps past levels (a launch writes the levels the next
    one reads)."""
    for f in stencil.fields:
        if not f.written and not f.time_invariant:
            return f"field '{f.name}' changes in time but is not computed by a statement"
        if 1 < depth < f.window:
            return (f"field '{f.name}' keeps {f.window} past levels, and a time tile in shared memory writes them "
                    f"all: it takes at least {f.window} steps")
    if depth == 1 and not any(read.dt is not None and read.dt <= 0 for s in stencil.statements for read in s.reads):
        return "no statement reads a field at t or before: a step has no planes to stream"
    return None


ABOVE, BELOW = 1, -1  # the sides of a dimension: towards higher indices (along the streamed one, ahead), lower


def writers(stencil: ir.StencilIR) -> dict[str, int]:
    """The statement (its index) that writes each written field."""
    return {s.target: i for i, s in enumerate(stencil.statements)}


def chains(stencil: ir.StencilIR, side: int) -> tuple[tuple[int, ...], ...]:
    """Per statement and dimension, how far inside the valid points of the step's first
    statements its own end on `side` (ABOVE or BELOW): the sum of the offsets towards that
    side along its chain of level t+1 reads (0 where none reaches that way). ABOVE along
    the streamed dimension, it is also how many planes the statement lags behind them: it
    reads that far ahead."""
    out: list[tuple[int, ...]] = []
    writer = writers(stencil)
    for statement in stencil.statements:  # a level t+1 is read only where an earlier statement wrote it
        chain = [0] * stencil.ndim
        for read in statement.reads:
            if read.dt is not None and read.dt > 0:
                chain = [max(c, before + side * o) for c, before, o in zip(chain, out[writer[read.name]], read.offsets)]
        out.append(tuple(chain))
    return tuple(out)


def reach(stencil: ir.StencilIR, side: int) -> tuple[int, ...]:
    """Per dimension, how far a step's valid points shrink on `side` from the step before's:
    the radius, more where a statement reads a past level of a field whose statement's
    chain on that side is longer than its own (`chains`)."""
    chain, out, writer = chains(stencil, side), list(stencil.radius), writers(stencil)
    for i, statement in enumerate(stencil.statements):
        for read in statement.reads:
            if read.dt is not None and read.dt <= 0 and read.name in writer:
                out = [max(r, side * o + c - own)
                       for r, o, c, own in zip(out, read.offsets, chain[writer[read.name]], chain[i])]
    return tuple(out)


def halo(stencil: ir.StencilIR, depth: int, side: int) -> tuple[int, ...]:
    """Per dimension, the points a tile of `depth` steps loads on `side` of its outputs:
    depth x radius, more along chains of level t+1 reads at neighbours (`reach`, `chains`)."""
    chain = chains(stencil, side)
    return tuple(depth * r + max(c[d] for c in chain) for d, r in enumerate(reach(stencil, side)))


@dataclass(frozen=True)
class Level:
    """Level t + `at` of a written field, relative to a tile's first step: at <= 0
    a level loaded from global memory (t, t-1, ...), at >= 1 the result of step `at`."""

    field: str
    at: int


@dataclass(frozen=True)
class Sums:
    """A statement as partial sums (`partial_sums`): its field's reads at level t with
    constant weights by streamed offset, a constant (None: none), and the weight of its
    read of level t-1 at the point (None: none; a wave equation's)."""

    terms: Terms
    constant: ir.Expr | None
    older: ir.Expr | None


@dataclass(frozen=True)
class StreamedTile:
    """Geometry of one stencil's streamed tiles: `chunk` outputs along the
    outermost dimension, `tile` along each inner one (outer first)."""

    stencil: ir.StencilIR
    depth: int
    chunk: int
    tile: tuple[int, ...]
    rows: int = 1  # 3D: consecutive points per thread along the middle dimension (`unroll(y, rows)`)
    prefetch: int = 0  # planes the loads run ahead (`prefetch(d)`); 0: AHEAD loads in flight per thread

    @property
    def ahead(self) -> int:
        """Planes a thread's loads run ahead of the one computed: `prefetch`, else AHEAD loads
        in flight per thread."""
        return self.prefetch or max(1, AHEAD // self.rows)

    @property
    def points(self) -> tuple[int, ...]:
        """Points of a plane per inner dimension, outer first: the tile and its halo
        (in 3D the middle dimension rounded up to whole rows of threads)."""
        points = [t + lo + hi for t, lo, hi in zip(self.tile, self.below[1:], self.above[1:])]
        points[0] = -(-points[0] // self.rows) * self.rows
        return tuple(points)

    @cached_property
    def below(self) -> tuple[int, ...]:
        """Points loaded below the outputs, per dimension (`halo`; along the streamed one, behind)."""
        return halo(self.stencil, self.depth, BELOW)

    @cached_property
    def above(self) -> tuple[int, ...]:
        """Points loaded above the outputs, per dimension (`halo`; along the streamed one, ahead)."""
        return halo(self.stencil, self.depth, ABOVE)

    @cached_property
    def _chains(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        return {side: chains(self.stencil, side) for side in (ABOVE, BELOW)}

    @cached_property
    def _reach(self) -> dict[int, tuple[int, ...]]:
        return {side: reach(self.stencil, side) for side in (ABOVE, BELOW)}

    def inset(self, stage: int, statement: int, side: int) -> tuple[int, ...]:
        """Per dimension, how far in from the block's loaded points on `side` the statement's
        values of step `stage` depend on loaded points only: `stage` x reach and its chain.
        Along the streamed dimension, ABOVE: how many planes behind the loaded one it
        computes (`behind`); BELOW: the block's first plane it computes (`settled`)."""
        return tuple(stage * r + c for r, c in zip(self._reach[side], self._chains[side][statement]))

    @property
    def threads(self) -> tuple[int, ...]:
        """Threads per inner dimension, outer first: a thread per point, but one per
        `rows` points along the middle dimension of a 3D stencil."""
        return (self.points[0] // self.rows, *self.points[1:])

    @property
    def single(self) -> bool:
        """One statement whose field keeps one past level (without partial sums, its rings keep
        the 2 x radius + 1 planes a step reads, `slots`)."""
        st = self.stencil
        return len(st.statements) == 1 and st.field(st.statements[0].target).window == 1

    @cached_property
    def rings(self) -> tuple[Level, ...]:
        """The levels kept in rings of planes in shared memory, in the order of the ring
        buffer's rows: the loaded ones (level t of every written field a statement reads
        at t or before, an older level where a step reads it with a nonzero offset), then
        each step's result but the last's, and the last's of a field a statement reads at
        t+1 from a ring (`from_ring`). An older level read only at the point is read
        from global memory; a field no statement reads at t or before is not loaded (no
        step's output depends on it)."""
        st, written = self.stencil, self.stencil.written_fields
        reads = [read for statement in st.statements for read in statement.reads
                 if read.dt is not None and read.dt <= 0]
        older = {Level(read.name, stage - 1 + read.dt) for stage in range(1, self.depth + 1) for read in reads
                 if stage - 1 + read.dt < 0 and any(read.offsets)}
        loaded = [Level(f.name, 0) for f in written if any(read.name == f.name for read in reads)]
        loaded += sorted(older, key=lambda level: (-level.at, level.field))
        ringed = dict.fromkeys(read.name for i, statement in enumerate(st.statements) for read in statement.reads
                               if self.from_ring(i, read))
        return (*loaded, *(Level(f.name, at) for at in range(1, self.depth) for f in written),
                *(Level(name, self.depth) for name in ringed))

    @cached_property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        """The statements of a step in runs computing the same plane from the same first
        one on (`behind`, `settled`), a run also ending before a statement that reads a
        level t+1 another thread wrote in the same iteration (`waits`): a barrier comes
        before it."""
        planes = [(self.behind(1, i), self.settled(1, i)) for i in range(len(self.stencil.statements))]
        out: list[list[int]] = []
        for i, plane in enumerate(planes):
            if out and planes[out[-1][-1]] == plane and not self.waits(i):
                out[-1].append(i)
            else:
                out.append([i])
        return tuple(tuple(group) for group in out)

    def waits(self, statement: int) -> bool:
        """Whether the statement reads a level t+1 at an in-plane neighbour in the plane
        its writer computes in the same iteration (an older plane was written before the
        iteration's first barrier, a point's own column by the thread itself)."""
        st, chain, writer = self.stencil, self._chains[ABOVE], writers(self.stencil)
        return any(read.dt is not None and read.dt > 0 and any(read.offsets[1:])
                   and chain[statement][0] - read.offsets[0] == chain[writer[read.name]][0]
                   for read in st.statements[statement].reads)

    def from_ring(self, statement: int, read: ir.FieldRead) -> bool:
        """Whether the statement's read of a level t+1 comes from the level's ring (a
        neighbour, or a point of a statement of another run, `groups`) rather than from
        the register of the statement that wrote it."""
        if read.dt is None or read.dt <= 0:
            return False
        writer = writers(self.stencil)[read.name]
        return any(read.offsets) or not any({statement, writer} <= set(group) for group in self.groups)

    @property
    def loaded(self) -> tuple[Level, ...]:
        """The rings the block loads from global memory."""
        return tuple(level for level in self.rings if level.at <= 0)

    @cached_property
    def sums(self) -> Sums | None:
        """The statement as partial sums (`partial_sums`; None: the steps read rings of planes):
        one statement whose field keeps one past level, or two where it reads level t-1 at the
        point only (a wave equation)."""
        st = self.stencil
        return partial_sums(st) if len(st.statements) == 1 else None

    @property
    def loaded_in_registers(self) -> bool:
        """Whether step 1 takes each point's loaded value in registers, as each step takes
        its point's own value from the step before: time tiles of partial sums. The default
        launch (one step) reads it back from shared memory (see `_hand_on`)."""
        return self.sums is not None and self.depth > 1

    @cached_property
    def slots(self) -> int:
        """Planes in a ring: summed, the newest plane, double-buffered; else the 2 x radius
        + 1 a step reads, and with one step one more, for the loaded plane is stored before
        the iteration's only barrier. With several fields or levels, the most any read
        reaches back from its ring's newest plane (a step reading a level older than the
        step before's reaches further, a statement lagging behind the one it reads too),
        one more where the last step reads a loaded ring."""
        r0 = self.stencil.radius[0]
        if self.sums is not None:
            return 2
        if self.single:
            return 2 * r0 + (2 if self.depth == 1 else 1)
        st, most, writer = self.stencil, 0, writers(self.stencil)
        for stage in range(1, self.depth + 1):
            for i, statement in enumerate(st.statements):
                reads = [(read.name, read.dt, read.offsets[0]) for read in statement.reads
                         if read.dt is not None and (read.dt <= 0 or self.from_ring(i, read))]
                for name, dt, along in [*reads, (statement.target, 0, 0)]:  # and the step's own value
                    level = Level(name, stage - 1 + dt)
                    if level not in self.rings:
                        continue
                    # planes from the one read to the newest
                    span = self.behind(stage, i) - along - (self.behind(level.at, writer[name]) if level.at > 0 else 0)
                    most = max(most, span + 1 + (level.at <= 0 and stage == self.depth))
        return most

    def behind(self, stage: int, statement: int) -> int:
        """How many planes behind the loaded one the statement computes in step `stage`."""
        return self.inset(stage, statement, ABOVE)[0]

    def settled(self, stage: int, statement: int) -> int:
        """The first plane of the block where the statement's value of step `stage` depends
        on loaded planes only (not on the planes before the block's first)."""
        return self.inset(stage, statement, BELOW)[0]

    @property
    def shared_bytes(self) -> int:
        itemsize = 4 if self.stencil.dtype == "float32" else 8
        return len(self.rings) * self.slots * math.prod(self.points) * itemsize

    @property
    def dynamic_shared(self) -> int:
        """Bytes of dynamic shared memory a launch asks for (0: the rings are static)."""
        return self.shared_bytes if self.shared_bytes > STATIC_SHARED else 0

    def too_large(self) -> str | None:
        """Why a block of this tile cannot run (None: it can)."""
        threads = math.prod(self.threads)
        if threads > MAX_THREADS:
            return (f"its blocks of {' x '.join(map(str, self.threads))} threads (tile plus {self.depth} x radius "
                    f"on each side{self._per_thread()}) would be {threads} threads, more than {MAX_THREADS}")
        if self.shared_bytes > SHARED_BYTES:
            return (f"its {len(self.rings)} rings of {self.slots} planes of {math.prod(self.points)} points would take "
                    f"{self.shared_bytes} bytes of shared memory, more than {SHARED_BYTES}")
        return None

    def shift(self, offsets: tuple[int, ...]) -> int:
        """Where a neighbour at these inner offsets (outer first) lies in a plane buffer, from the thread's point."""
        return sum(o * math.prod(self.points[d:]) for d, o in enumerate(offsets, 1))

    @property
    def planes(self) -> int:
        """Planes a block streams through: its chunk and the halo's planes behind and ahead."""
        return self.chunk + self.below[0] + self.above[0]

    def useful(self) -> float:
        """The share of the loaded points the block writes out (the rest is halo)."""
        return math.prod(self.tile) * self.chunk / (math.prod(self.points) * self.planes)

    def grid(self) -> tuple[ix.Expr, ...]:
        """Blocks of a launch, x first: the innermost dimension, ..., the streamed one."""
        sizes = [*self.tile[::-1], self.chunk]
        dims = [ix.Var(f"P{d}") for d in reversed(range(self.stencil.ndim))]
        return tuple(blocks(p, s, 65535 if a else 0) for a, (p, s) in enumerate(zip(dims, sizes)))

    def block(self) -> tuple[int, ...]:
        return self.threads[::-1]

    def describe(self) -> str:
        tile = " x ".join(map(str, (self.chunk, *self.tile)))
        return (f"streamed tiles of {self.depth} step{'s' if self.depth > 1 else ''} in shared memory: tile {tile}, "
                f"blocks of {' x '.join(map(str, self.threads))} threads{self._per_thread()} marching along "
                f"{self.stencil.dims[0]}")

    def _per_thread(self) -> str:
        return "" if self.rows == 1 else f", {self.rows} points of {self.stencil.dims[1]} per thread"


def blocks(points: ix.Expr, size: int, cap: int) -> ix.Expr:
    """The blocks that cover `points` `size` at a time, at most `cap` (0: any number; the kernel template's helper)."""
    return ix.Call("msc_blocks", (points, ix.Lit(size), ix.Lit(cap)))


def default_tile(stencil: ir.StencilIR, depth: int) -> dict[str, int]:
    """The tile of a default streamed launch (depth 1) or of `time_tile(depth)`: that of
    a block of TIME_TILE_THREADS where depth > 1 and its rings fit in shared memory, else
    of INNER_THREADS (`fitting_tile`)."""
    if depth > 1:
        tile = fitting_tile(stencil, depth, TIME_TILE_THREADS[stencil.ndim])
        if streamed_tile(stencil, depth, tile).too_large() is None:
            return tile
    return fitting_tile(stencil, depth, INNER_THREADS[stencil.ndim])


def fitting_tile(stencil: ir.StencilIR, depth: int, block: tuple[int, ...]) -> dict[str, int]:
    """The tile of a block of these threads per inner dimension (outer first) less its
    halo, widened where the halo would leave fewer than 4 points; where its rings would
    not fit in shared memory (many fields, a Maxwell system in 3D), its outer inner
    dimension halved until they fit, while the tile keeps 4 points and MIN_USEFUL of
    what a block loads (else the target falls back to another form)."""
    threads = [max(n, 4 + h) for n, h in zip(block, _both_sides(stencil, depth)[1:])]
    tile = block_tile(stencil, depth, tuple(threads))
    assert tile is not None
    while streamed_tile(stencil, depth, tile).too_large() is not None:
        threads[0] //= 2
        smaller = block_tile(stencil, depth, tuple(threads))
        if smaller is None or streamed_tile(stencil, depth, smaller).useful() < MIN_USEFUL:
            break
        tile = smaller
    return tile


def block_tile(stencil: ir.StencilIR, depth: int, threads: tuple[int, ...], rows: int = 1) -> dict[str, int] | None:
    """The tile of a block of `threads` per inner dimension (outer first) streaming
    `depth` steps, with `rows` points per thread along a 3D stencil's middle dimension:
    the block's points less their halo, through a chunk of at least CHUNK and 4 x the
    halo's planes (8 x depth x radius where no chain widens it: a halo of at most a
    quarter); None where the halo would leave fewer than 4 points along a dimension."""
    points = (threads[0] * rows, *threads[1:])
    around = _both_sides(stencil, depth)
    tile = [n - h for n, h in zip(points, around[1:])]
    if min(tile) < 4:
        return None
    return dict(zip(stencil.dims, (max(CHUNK, 4 * around[0]), *tile)))


def _both_sides(stencil: ir.StencilIR, depth: int) -> list[int]:
    """Per dimension, the halo of a tile of `depth` steps below and above together."""
    return [lo + hi for lo, hi in zip(halo(stencil, depth, BELOW), halo(stencil, depth, ABOVE))]


def streamed_tile(stencil: ir.StencilIR, depth: int, tiles: dict[str, int], rows: int = 1) -> StreamedTile:
    dims = stencil.dims
    return StreamedTile(stencil, depth, tiles[dims[0]], tuple(tiles[d] for d in dims[1:]), rows)


def partial_sums(stencil: ir.StencilIR) -> Sums | None:
    """The statement as a weighted sum of its field's reads at level t with constant
    weights (and a constant, and level t-1 at the point where the field keeps two past
    levels), the reads grouped by their offset along the streamed dimension: then each
    plane is read once per step, its neighbourhood weighted into the 2 x radius + 1
    outputs it contributes to (partial sums in registers) instead of each output reading
    2 x radius + 1 planes. None for any other statement (weights that read a field, a
    term not linear in the field, an older level or one read at a neighbour)."""
    statement = stencil.statements[0]
    if stencil.field(statement.target).window > 2:
        return None
    try:
        form = linear_form(statement.expr, {statement.target})
    except NonLinearError:
        return None
    weights = [*form.terms.values(), *([form.constant] if form.constant is not None else [])]
    if any(ir.reads_of(w) for w in weights):
        return None
    terms: Terms = {}
    older = None
    for (_, dt, offsets), weight in form.terms.items():
        if dt == -1 and not any(offsets):
            older = weight
        elif dt == 0:
            terms.setdefault(offsets[0], []).append((offsets[1:], weight))
        else:
            return None
    # a zero constant (a sum written from 0.0) is left out: the GPU would add it per point and step
    return Sums(terms, None if form.constant == ir.Const(0.0) else form.constant, older)


def conjunction(conditions: Sequence[ix.Expr]) -> ix.Expr:
    """All of `conditions` (`&&`, left to right)."""
    return functools.reduce(ix.Expr.and_, conditions)


def tag(stencil: ir.StencilIR, level: Level) -> str:
    """The suffix of the names of a level's pointer and registers: where several fields are
    written, the level's name (`level_name`: field and level, distinct for any names);
    else m1, m2, ... for levels t-1, t-2, ... and none for level t."""
    if len(stencil.written_fields) > 1:
        return "_" + level_name(level.field, level.at)
    return f"_m{-level.at}" if level.at < 0 else ""


def destination(stencil: ir.StencilIR, field: str, back: int = 0) -> str:
    """The pointer to the level of `field` a launch writes `back` levels before its newest."""
    return "dst" + tag(stencil, Level(field, -back if back else 1))


def destinations(stencil: ir.StencilIR, depth: int) -> tuple[tuple[str, int], ...]:
    """The levels a launch of `depth` steps writes, in call order, as (field, back): the
    newest of each written field, and with several steps as many as the field keeps
    (the next launch reads them)."""
    return tuple((f.name, back) for f in stencil.written_fields for back in range(f.window if depth > 1 else 1))


def source(stencil: ir.StencilIR, level: Level) -> str:
    """The pointer to a loaded level."""
    return "src" + tag(stencil, level)


def sources(stencil: ir.StencilIR) -> tuple[Level, ...]:
    """The levels a launch reads, in call order: of each written field, t, t-1, ..."""
    return tuple(Level(f.name, -m) for f in stencil.written_fields for m in range(f.window))


def tile_parameters(stencil: ir.StencilIR, depth: int = 1) -> tuple[tuple[str, str], ...]:
    """A time tile's device function's parameters (type, name), in call order: the levels
    a launch of `depth` steps writes (`destinations`) and reads (`sources`), the inputs,
    the scalars, the extents, the steps."""
    return (*(("real *", destination(stencil, field, back)) for field, back in destinations(stencil, depth)),
            *(("const real *", source(stencil, level)) for level in sources(stencil)),
            *(("const real *", field_name(f.name)) for f in stencil.fields if f.time_invariant),
            *(("real", param_name(p)) for p in stencil.params), *(("index", f"P{d}") for d in range(stencil.ndim)),
            ("index", "steps"))


def tile_loops(stencil: ir.StencilIR, sizes: Sequence[int], axes: Sequence[str], body: list[k.Node]) -> k.Block:
    """`body` in the loops over the grid's tiles of `sizes` points (one per dimension,
    each on the grid's `axes`), block-stride: every thread of a block runs them alike."""
    for d in reversed(range(stencil.ndim)):
        b, extent = ix.Var(f"b{d}"), ix.Var(f"P{d}")
        tiles = ix.Op("/", extent + (sizes[d] - 1), ix.Lit(sizes[d]))
        body = [k.Loop(f"b{d}", ix.Var(f"blockIdx.{axes[d]}"), b.lt(tiles), k.Block(tuple(body)),
                       step=ix.Var(f"gridDim.{axes[d]}"))]
    return k.Block(tuple(body))


@dataclass(frozen=True)
class _Point:
    """One of a thread's points of each plane (one per thread, or `rows` along the
    middle dimension of a 3D stencil): its index per inner dimension in the block's
    plane, its index in a plane buffer, and the suffix of its variables' names."""

    local: dict[int, ix.Expr]
    q: ix.Expr
    suffix: str

    def var(self, name: str) -> ix.Var:
        return ix.Var(name + self.suffix)

    def glob(self, d: int) -> str:
        """The name of its global index along inner dimension d (only the middle one is its own)."""
        return f"g{d}" + (self.suffix if d == 1 else "")


def _points(plan: StreamedTile, local: dict[int, ix.Var], q: ix.Var) -> list[_Point]:
    if plan.rows == 1:
        return [_Point(dict(local), q, "")]
    return [_Point({1: local[1] * plan.rows + i, 2: local[2]}, q + i * plan.points[1], f"_{i}")
            for i in range(plan.rows)]


#: The plane loop of a one-step tile of partial sums (the default launch of a sum of weighted reads) is
#: unrolled by 2: each copy's plane slot (j & 1) is a constant and the own values' registers move no more.
#: ptxas (sm_90, 32-bit indices, the eight benchmark stencils in both dtypes): 3-10% fewer SASS
#: instructions per plane on 15 of 16 (star2d4r fp64: 2% more), occupancy the same or higher on all (four
#: rise: box2d9p and box3d27p fp64 to 100%). So is a time tile's in blocks of MAX_THREADS (3D's default,
#: TIME_TILE_THREADS): `__launch_bounds__` holds it at 64 registers, and one such block per multiprocessor
#: is 50% occupancy from 33 registers to 64, so the unroll is free where the loop took more than 32 (heat3d
#: and box3d27p, depths 2-4, both dtypes: 16-24% fewer instructions per plane, no spills; occupancy the
#: same but box3d27p float32 at depth 3, 100% to 50%; a 13-point star of radius 2 at depths 2-4 and
#: heat2d's tiles of 1024 threads: 11-26% fewer, no spills). Smaller blocks of time tiles and several points per
#: thread keep their loop: there it saves 14-22% of the instructions but costs up to 28 registers
#: (occupancy 44% to 25% on box2d25p's tile of 4 steps). HIP's printer drops the hint (clang will not
#: unroll a barrier loop of a run-time count).
PLANE_UNROLL = 2


def device_function(plan: StreamedTile, name: str) -> DeviceFunction:
    """The `__global__` function of the plan's streamed tiles, as kernel IR."""
    st, ndim, depth = plan.stencil, plan.stencil.ndim, plan.depth
    r, r0, slots, sides = st.radius, st.radius[0], plan.slots, plan.points
    below, reached = plan.below, reach(st, ABOVE)
    inner = range(1, ndim)
    axes = (AXES[ndim - 1], *(AXES[ndim - 1 - d] for d in inner))  # the streamed dimension's blocks, the last on .x
    extents = [ix.Var(f"P{d}") for d in range(ndim)]
    local = {d: ix.Var(f"l{d}") for d in inner}
    q, p, j = ix.Var("q"), ix.Var("p"), ix.Var("j")
    first, planes, g0 = ix.Var("first"), ix.Var("planes"), ix.Var("g0")
    summed = plan.sums
    points = _points(plan, local, q)

    def glob(point: _Point, plane: ix.Var = g0) -> list[ix.Var]:
        return [plane, *(ix.Var(point.glob(d)) for d in inner)]

    def load(level: Level, point: _Point, ahead: int, loaded: ix.Expr | None = None) -> ix.Expr:
        """The level's plane `loaded` + `ahead` of the block at the point's column; 0 outside
        the array or the planes."""
        at, g = (ix.Lit(ahead), first + ahead) if loaded is None else (loaded + ahead, first + loaded + ahead)
        inside = conjunction([point.var("in_plane"), at.lt(planes), g.ge(0), g.lt(extents[0])])
        return ix.Select(inside, k.Load(k.Ref(source(st, level), g * ix.Var("plane") + point.var("column"))),
                         ix.Cast("real", ix.Lit(0)))

    def next_(a: int, level: Level, point: _Point) -> str:
        """The register holding the level's plane `a` ahead of the newest loaded one."""
        return f"next{a}{tag(st, level)}{point.suffix}"

    indices: dict[str, k.Node] = {}  # each global index once: the points share all but the middle one
    for point in points:
        for d in inner:
            start = ix.Var(f"b{d}") * plan.tile[d - 1] - below[d]  # the block's first point along d
            indices.setdefault(point.glob(d), k.Decl(point.glob(d), "index", start + point.local[d]))
    lines: list[k.Node] = list(indices.values())
    for point in points:
        g = glob(point)
        lines += [k.Decl("in_plane" + point.suffix, "flag",
                         conjunction([c for d in inner for c in (g[d].ge(0), g[d].lt(extents[d]))])),
                  k.Decl("interior" + point.suffix, "flag",
                         conjunction([c for d in inner for c in (g[d].ge(r[d]), g[d].lt(extents[d] - r[d]))])),
                  k.Decl("in_tile" + point.suffix, "flag", conjunction([c for d in inner for c in (
                      point.local[d].ge(below[d]), point.local[d].lt(below[d] + plan.tile[d - 1]))])),
                  k.Decl("column" + point.suffix, "index", ix.linear(g[1:], extents[1:]))]
    lines += [k.Comment("the block's first plane"),
              k.Decl("first", "index", ix.Var("b0") * plan.chunk - below[0]),
              k.Decl("planes", "int", ix.Cast("int", ix.min_(plan.planes,
                                                             extents[0] + plan.above[0] - first))),
              *(k.Decl(next_(a, level, point), "value", load(level, point, a), const=False)
                for level in plan.loaded for a in range(plan.ahead) for point in points)]
    if summed is not None:
        lines.append(k.Comment("partial sums, own column's planes"))
        lines += [k.Decl(f"{v}{s}_{m}{point.suffix}", "value", ix.Lit(0), const=False)
                  for v, n in (("a", 2 * r0 + 1), ("w", r0 + 1)) for s in range(1, depth + 1) for m in range(n)
                  for point in points]
        if summed.older is not None:  # step s >= 2's level t-1 at the point: the own values of step s - 1
            lines += [k.Decl(f"o{s}_{m}{point.suffix}", "value", ix.Lit(0), const=False)
                      for s in range(2, depth + 1) for m in range(r0 + 1) for point in points]
    slot = j & 1 if summed is not None else j % slots
    step: list[k.Node] = []
    for level in plan.loaded:
        step += [*(k.Store(ring(plan.rings.index(level), slot, point.q), ix.Var(next_(0, level, point)))
                   for point in points),
                 *(node for point in points if plan.loaded_in_registers
                   for node in _hand_on(plan, 1, point, point.var("next0"))),
                 *(k.Set(next_(a, level, point), ix.Var(next_(a + 1, level, point)))
                   for a in range(plan.ahead - 1) for point in points),
                 *(k.Set(next_(plan.ahead - 1, level, point), load(level, point, plan.ahead, j)) for point in points)]
    step.append(k.Barrier())
    for stage in range(1, depth + 1):
        last = stage == depth
        if summed is None:
            body = _ring_stage(plan, stage, points, glob)
        else:
            valid = [_valid(plan, stage, point) for point in points]
            done = [_done(plan, stage, point, g0, ok) for point, ok in zip(points, valid)]
            body = _summed_stage(plan, stage, summed, points, [conjunction(ok) for ok in valid], done)
            target = st.statements[0].target
            back = depth - stage  # the last step's level, or one before it that the launch writes too
            body += [_output(plan, p, point, target, back) for point in points if back < st.field(target).window]
            if not last:
                body += [k.Store(ring(stage, p & 1, point.q), point.var("v")) for point in points]
                body += [node for point in points for node in _hand_on(plan, stage + 1, point, point.var("v"))]
                if summed.older is not None:  # its own values: level t-1 of the next step
                    body += [node for point in points
                             for node in _hand_on(plan, stage + 1, point, point.var(f"w{stage}_0"), "o")]
        step += [k.Block((k.Comment(f"step {stage}: plane p, {stage} x {reached[0]} behind the loaded one"
                                    + ("" if summed is None else ", done; partial sums of plane n")), *body),
                         scoped=True),
                 *([] if last else [k.Barrier()])]
    registers_free = depth == 1 or math.prod(plan.threads) == MAX_THREADS  # see PLANE_UNROLL
    unroll = PLANE_UNROLL if summed is not None and plan.rows == 1 and registers_free else 0
    lines += [k.Loop("j", ix.Lit(0), j.lt(planes), k.Block(tuple(step)), kind="int", unroll=unroll),
              k.Comment("before the block's next tile refills the rings"), k.Barrier()]
    plane = functools.reduce(ix.mul, extents[1:])
    dynamic = 0 if plan.dynamic_shared else None  # rings over STATIC_SHARED go to dynamic shared memory
    function = k.Block((k.Buffer(RING, k.Space.SHARED, (len(plan.rings), slots, math.prod(sides)), rows=2,
                                 offset=dynamic),
                        *(k.Decl(f"l{d}", "int", ix.Var(f"threadIdx.{axes[d]}")) for d in inner),
                        k.Decl("q", "int", ix.linear(list(points[0].local.values()), sides)),
                        k.Decl("plane", "index", plane),
                        *tile_loops(st, [plan.chunk, *plan.tile], axes, lines).body))
    return DeviceFunction(name, function, plan.grid(), plan.block(), tile_parameters(st, depth), indexed=True)


def _valid(plan: StreamedTile, stage: int, point: _Point, statement: int = 0) -> list[ix.Expr]:
    """Where the point's value of the statement in step `stage` depends on loaded points
    only (not on the plane buffers' edges): `StreamedTile.inset` from each edge, along
    each inner dimension."""
    sides, low, high = plan.points, plan.inset(stage, statement, BELOW), plan.inset(stage, statement, ABOVE)
    return [c for d in range(1, plan.stencil.ndim)
            for c in (point.local[d].ge(low[d]), point.local[d].lt(sides[d - 1] - high[d]))]


def _done(plan: StreamedTile, stage: int, point: _Point, plane: ix.Var, valid: list[ix.Expr]) -> ix.Expr:
    """Whether step `stage` computes the point (at global plane `plane`): a step the launch
    takes, an interior point, valid (`_valid`)."""
    r0, extent = plan.stencil.radius[0], ix.Var("P0")
    return conjunction([ix.Lit(stage).le(ix.Var("steps")), point.var("interior"), plane.ge(r0), plane.lt(extent - r0),
                        *valid])


def _ring_stage(plan: StreamedTile, stage: int, points: list[_Point],
                glob: Callable[[_Point, ix.Var], list[ix.Var]]) -> list[k.Node]:
    """Step `stage` of the iteration reading rings of planes: each run of statements
    (`StreamedTile.groups`) computes its plane, `behind` the loaded one (p, or p_<lag>
    for a run lagging behind the first), a barrier before a run that reads a level t+1
    another thread wrote (`StreamedTile.waits`); each statement's value goes to the ring
    of its level, or out."""
    st, depth, slots = plan.stencil, plan.depth, plan.slots
    extents = [ix.Var(f"P{d}") for d in range(st.ndim)]
    last = stage == depth
    body: list[k.Node] = []
    planes: dict[int, tuple[ix.Var, ix.Var]] = {}  # lag -> the run's plane in the buffer and in the array
    for group in plan.groups:
        lag = plan.behind(stage, group[0]) - plan.behind(stage, 0)  # the first statement reads no level t+1
        if lag not in planes:
            p, g0 = (ix.Var("p"), ix.Var("g0")) if not planes else (ix.Var(f"p_{lag}"), ix.Var(f"g0_{lag}"))
            planes[lag] = p, g0
            body += [k.Decl(p.name, "int", ix.Var("j") - plan.behind(stage, group[0])),
                     k.Decl(g0.name, "index", ix.Var("first") + p)]
        p, g0 = planes[lag]
        if plan.waits(group[0]):
            body.append(k.Barrier())  # its first statement reads a level t+1 other threads wrote
        out: list[k.Node] = []
        for point in points:
            for i in group:
                statement = st.statements[i]
                at = {read: access(plan, read, stage, i, p, point, glob(point, g0), extents)
                      for read in ir.reads_of(statement.expr)}
                value = k.Compute(statement.expr, tuple(at.items()), st.dtype)
                v = "v" + tag(st, Level(statement.target, 1)) + point.suffix
                before = Level(statement.target, stage - 1)  # its value where the step computes none
                own = (k.Load(ring(plan.rings.index(before), p % slots, point.q)) if before in plan.rings
                       else ix.Cast("real", ix.Lit(0)))  # a level no statement reads: never written out
                back = depth - stage  # a level before the newest the launch writes too
                newest = Level(statement.target, stage)
                finished = _done(plan, stage, point, g0, _valid(plan, stage, point, i))
                out += [k.Decl(v, "value", own, const=False),
                        k.If(finished, k.Block((k.Set(v, value),))),
                        *([_output(plan, p, point, statement.target, back, g0)]
                          if 0 < back < st.field(statement.target).window else []),
                        *([_output(plan, p, point, statement.target, plane=g0,
                                   guarded=plan.settled(stage, i) >= plan.below[0])] if last else []),
                        *([k.Store(ring(plan.rings.index(newest), p % slots, point.q), ix.Var(v))]
                          if newest in plan.rings else [])]
        body.append(k.If(p.ge(plan.settled(stage, group[0])), k.Block(tuple(out))))
    return body


def ring(index: int, slot: ix.Expr, at: ix.Expr) -> k.Ref:
    """Point `at` of plane `slot` of ring `index` (of `StreamedTile.rings`; with one
    written field of one past level, the ring of step `index`'s results, 0: the loaded planes)."""
    return k.Ref(RING, at, k.Space.SHARED, rows=(ix.Lit(index), slot))


def access(plan: StreamedTile, read: ir.FieldRead, stage: int, statement: int, p: ix.Expr, point: _Point,
           glob: list[ix.Var], extents: list[ix.Var]) -> ix.Expr:
    """A read of the statement in step `stage` at plane p: a level in a ring from there
    (the level the step before computed or loaded, a level t+1 `from_ring`), level t+1 at
    the point from the register of the statement that wrote it, any other from global
    memory (an input, or an older level read at the point only)."""
    if read.dt is None:
        return k.Load(k.Ref(field_name(read.name), ix.linear(glob, extents, read.offsets)))
    if read.dt > 0 and not plan.from_ring(statement, read):
        return ix.Var("v" + tag(plan.stencil, Level(read.name, 1)) + point.suffix)
    level = Level(read.name, stage - 1 + read.dt)
    if level in plan.rings:
        return k.Load(ring(plan.rings.index(level), (p + read.offsets[0]) % plan.slots,
                           point.q + plan.shift(read.offsets[1:])))
    return k.Load(k.Ref(source(plan.stencil, level), ix.linear(glob, extents, read.offsets)))


def _output(plan: StreamedTile, p: ix.Expr, point: _Point, field: str, back: int = 0, plane: ix.Var = ix.Var("g0"),
            guarded: bool = False) -> k.If:
    """A step's value of a point of `field` (at plane p of the block, `plane` of the array)
    written out where it is an output of the block's tile: the last step's, or the one
    `back` steps before it (a level the next launch reads); `guarded`: p is known to lie
    past the halo behind."""
    reach = plan.below[0]
    g0, r0, extent = plane, plan.stencil.radius[0], ix.Var("P0")
    where = [*([] if guarded else [p.ge(reach)]), point.var("in_tile"), point.var("interior"),
             p.lt(reach + plan.chunk), g0.ge(r0), g0.lt(extent - r0)]
    value = ix.Var("v" + tag(plan.stencil, Level(field, 1)) + point.suffix)
    stored = k.Store(k.Ref(destination(plan.stencil, field, back), g0 * ix.Var("plane") + point.var("column")), value)
    return k.If(conjunction(where), k.Block((stored,)))


def _summed_stage(plan: StreamedTile, stage: int, summed: Sums, points: list[_Point],
                  valid: list[ix.Expr], done: list[ix.Expr]) -> list[k.Node]:
    """Step `stage` of the iteration as partial sums: the newest plane n of the stage
    before is weighted into the partial sums of the outputs n - r0 .. n + r0 (a{stage}_m
    is output p + m), output p = n - r0 is then complete (or its own value, w{stage}_0,
    kept where the step does not compute it), and the sums move down one plane. A
    thread's points share the neighbours they read: each is read once."""
    st, r0, s = plan.stencil, plan.stencil.radius[0], stage
    terms, constant = summed.terms, summed.constant
    j, n = ix.Var("j"), ix.Var("n")

    def weight(e: ir.Expr) -> ix.Expr:
        return k.Compute(e, (), st.dtype)

    out: list[k.Node] = [k.Decl("n", "int", j - (s - 1) * r0), k.Decl("p", "int", j - s * r0),
                         k.Decl("g0", "index", ix.Var("first") + ix.Var("p")),
                         k.Decl("plane_n", "const pointer", k.Address(ring(s - 1, n & 1, ix.Lit(0))), restrict=False)]
    if s == 1 and not plan.loaded_in_registers:  # the default launch reads the loaded value back
        out += [node for point in points
                for node in _hand_on(plan, 1, point, k.Load(k.Ref("plane_n", point.q, k.Space.SHARED)))]
    # each neighbour of the plane read once (a point's own value is its w{s}_{r0}); in
    # 3D with several points a thread's neighbours are rows (relative to its first
    # point's) and columns: `row` points apart
    row = plan.points[1] if plan.rows > 1 else 0
    own = {i * row: f"w{s}_{r0}{point.suffix}" for i, point in enumerate(points)}
    reads = {i * row + plan.shift(offsets): i + offsets[0] for i in range(len(points))
             for group in terms.values() for offsets, _ in group}
    shifts = sorted(set(reads) - set(own))
    value = {**{shift: ix.Var(name) for shift, name in own.items()},
             **{shift: ix.Var(f"u{i}") for i, shift in enumerate(shifts)}}
    sums: list[k.Node] = [k.Decl(f"u{i}", "value", _neighbour(plan, shift, reads[shift]))
                          for i, shift in enumerate(shifts)]
    for i, (point, ok) in enumerate(zip(points, valid)):
        adds: list[k.Node] = []
        for dz in sorted(terms):
            parts = [ix.Op("*", weight(w), value[i * row + plan.shift(offsets)]) for offsets, w in terms[dz]]
            adds.append(k.Set(f"a{s}_{r0 - dz}{point.suffix}", functools.reduce(lambda a, b: ix.Op("+", a, b), parts),
                              op="+="))
        sums += adds if len(points) == 1 else [k.If(ok, k.Block(tuple(adds)))]
    out.append(k.If(valid[0] if len(points) == 1 else functools.reduce(ix.Expr.or_, valid), k.Block(tuple(sums))))
    for point, finished in zip(points, done):
        complete = point.var(f"a{s}_0")
        if constant is not None:
            complete = ix.Op("+", complete, weight(constant))
        if summed.older is not None:  # level t-1 at the point: from global memory in step 1, else from registers
            loaded = k.Load(k.Ref(source(st, Level(st.statements[0].target, -1)),
                                  ix.Var("g0") * ix.Var("plane") + point.var("column")))
            # the planes before step 1's settled one (its sums lack the planes before the block's) are never used
            older = (ix.Select(ix.Var("p").ge(plan.settled(1, 0)), loaded, ix.Cast("real", ix.Lit(0)))
                     if s == 1 else point.var(f"o{s}_0"))
            complete = ix.Op("+", complete, ix.Op("*", weight(summed.older), older))
        out.append(k.Decl("v" + point.suffix, "value", ix.Select(finished, complete, point.var(f"w{s}_0"))))
        out += [k.Set(f"a{s}_{m}{point.suffix}", point.var(f"a{s}_{m + 1}")) for m in range(2 * r0)]
        out.append(k.Set(f"a{s}_{2 * r0}{point.suffix}", ix.Lit(0)))
    return out


def _hand_on(plan: StreamedTile, stage: int, point: _Point, value: ix.Expr, queue: str = "w") -> list[k.Node]:
    """The point's newest plane for step `stage`: its planes w{stage}_0 .. w{stage}_{r0}
    move down one and `value` is the newest. In a time tile the loaded value and each
    step's own value are handed on in registers, right after they are stored for the
    neighbours, so no step reads a point's own value back from shared memory. A tile of
    one step (the default launch) reads the loaded value back: handed on in registers,
    it let ptxas pipeline that launch's loads at 60 registers a thread instead of 31
    (heat3d, float64, sm_90: occupancy 50% instead of 100%). `queue` "o": the level t-1
    at the point a wave equation's step `stage` reads, planes p .. p + r0 as its w holds
    level t's: the own values of step `stage` - 1, r0 planes behind that step's w."""
    r0, suffix = plan.stencil.radius[0], point.suffix
    return [*(k.Set(f"{queue}{stage}_{m}{suffix}", point.var(f"{queue}{stage}_{m + 1}")) for m in range(r0)),
            k.Set(f"{queue}{stage}_{r0}{suffix}", value)]


def _neighbour(plan: StreamedTile, shift: int, row: int) -> ix.Expr:
    """The newest plane's value `shift` from the thread's first point, in `row` from its
    first point's. With several points per thread, a neighbour in a row above or below
    the thread's own is read only where that row is in the plane (0 elsewhere: no valid
    point of the thread uses it)."""
    load = k.Load(k.Ref("plane_n", ix.Var("q") + shift, k.Space.SHARED))
    if plan.rows == 1 or 0 <= row < plan.rows:
        return load
    at = ix.Var("l1") * plan.rows + row
    return ix.Select(at.ge(0) if row < 0 else at.lt(plan.points[0]), load, ix.Cast("real", ix.Lit(0)))
