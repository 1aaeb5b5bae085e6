"""Schedules: the user's chain of primitives, and its lowering to an isl map.

    s = msc.Schedule().tile(x=32, y=256).parallel("x_tile").vectorize("y")
    s = msc.Schedule().time_tile(8, x=32).parallel("x_tile")

Loops are named after what they iterate: "t", "x", "y", "z" (points),
"x_tile" ... (spatial tiles), and under time tiling "wave" (the wavefront of
tiles), "t_tile" (a pipelined time tile has no "wave": "t_tile" is outermost).
Lowering builds one isl schedule map for all statements;
every lowered schedule is checked against the PolyIR's dependences, and a
loop asked to run in parallel must carry none. Violations raise a
ScheduleError that names a violated dependence and the statements involved.
"""

from __future__ import annotations

import ast
import difflib
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import islpy as isl
import numpy as np

from msc import ir
from msc.errors import ScheduleError
from msc.poly import PolyIR, PolyStatement


@dataclass(frozen=True)
class Schedule:
    """An immutable chain of schedule primitives (each call returns a new Schedule)."""

    tiles: tuple[tuple[str, int], ...] = ()
    time_depth: int = 0
    order: tuple[str, ...] = ()
    fuse_at: str | None = None
    cached_reads: tuple[str, ...] = ()
    cached_writes: tuple[str, ...] = ()
    parallel_loop: str | None = None
    vector_loop: str | None = None
    unrolls: tuple[tuple[str, int], ...] = ()
    streaming: bool = False
    prefetch_distance: int = 0
    threads: int | None = None
    tensor_core_precision: str | None = None
    tensor_core_lossy: bool = False  # tf32/fp16 accepted on float64 fields
    pipelined: bool = False
    in_place: bool = False

    def tile(self, **sizes: int) -> Schedule:
        """Split the named space dimensions into tiles: tile(x=32, y=256)."""
        sizes = _check_sizes("tile", sizes)
        if self.time_depth:
            raise ScheduleError("tile() and time_tile() cannot be combined: time_tile already tiles space")
        for name in sizes:
            if name in dict(self.tiles):
                raise ScheduleError(f"tile: {name!r} is tiled already ({self.describe()}); give each dimension "
                                    "one size")
        return replace(self, tiles=self.tiles + tuple(sizes.items()))

    def time_tile(self, depth: int, **sizes: int) -> Schedule:
        """Tile time by `depth` steps and the named space dimensions, with skewed
        (parallelogram) tiles executed in wavefronts: time_tile(8, x=32). With no
        sizes, time_tile(8), the target chooses the tile (its platform's default)."""
        depth = _count(depth, "time_tile depth must be a positive integer")
        sizes = _check_sizes("time_tile", sizes)
        if self.tiles and not self.time_depth:
            raise ScheduleError("tile() and time_tile() cannot be combined: time_tile already tiles space")
        if self.time_depth:
            raise ScheduleError(f"time_tile is given already ({self.describe()}); give it once")
        return replace(self, tiles=tuple(sizes.items()), time_depth=depth)

    def reorder(self, *loops: str) -> Schedule:
        """Put the named space loops in this order, outermost first (others keep their place)."""
        if len(set(loops)) != len(loops):
            raise ScheduleError(f"reorder names a loop twice: {loops}")
        _once(self, "reorder", self.order, loops)
        return replace(self, order=loops)

    def compute_at(self, loop: str) -> Schedule:
        """Compute all statements of a step together inside the tile loop `loop`
        (instead of one full sweep per statement); each producer is shifted to
        run ahead of the statements that read it, so its values are still in
        cache when they are consumed."""
        _once(self, "compute_at", self.fuse_at, loop)
        return replace(self, fuse_at=loop)

    def cache_read(self, field: str) -> Schedule:
        """Stage each tile's input footprint of `field` (every level read) in a
        thread-local buffer before computing the tile (needs tile() or
        time_tile() on every dimension). Under time_tile the whole time tile
        is staged: every level of `field` it reads, so a written field needs
        cache_write too."""
        return replace(self, cached_reads=self.cached_reads + (field,))

    def cache_write(self, field: str) -> Schedule:
        """Compute each tile of `field` into a thread-local buffer and copy it
        out when the tile is done (needs tile() or time_tile() on every
        dimension; under time_tile, with cache_read of a field that is read)."""
        return replace(self, cached_writes=self.cached_writes + (field,))

    def parallel(self, loop: str) -> Schedule:
        """Run `loop` across threads (checked: it must carry no dependence)."""
        _once(self, "parallel", self.parallel_loop, loop)
        return replace(self, parallel_loop=loop)

    def vectorize(self, loop: str) -> Schedule:
        """Ask for SIMD on `loop` (the innermost loop; checked like parallel)."""
        _once(self, "vectorize", self.vector_loop, loop)
        return replace(self, vector_loop=loop)

    def unroll(self, loop: str, factor: int) -> Schedule:
        factor = _count(factor, "unroll factor must be a positive integer")
        if loop in dict(self.unrolls):
            raise ScheduleError(f"unroll: loop {loop!r} is unrolled already ({self.describe()}); unroll it once")
        return replace(self, unrolls=self.unrolls + ((loop, factor),))

    def stream_stores(self) -> Schedule:
        """Write results with non-temporal (streaming) stores, whole cache
        lines at a time, bypassing the cache: a sweep over fields larger than
        the last-level cache then moves one read and one write per point
        instead of also reading each written line first. Slower when the
        written level is read again soon (small fields, time tiles)."""
        return replace(self, streaming=True)

    def prefetch(self, distance: int) -> Schedule:
        """Prefetch each field's leading row (the read furthest ahead in
        memory) `distance` points ahead of the innermost loop, once per cache
        line: the loads that miss the cache are asked for before the hardware
        prefetcher would. On 'cuda' and 'hip', where the launch is a streamed
        tile, each thread's loads run `distance` planes ahead of the plane it
        computes (at most the planes a block streams; ADR 0071)."""
        distance = _count(distance, "prefetch distance must be a positive integer")
        return replace(self, prefetch_distance=distance)

    def tensor_cores(self, precision: str, lossy: bool = False) -> Schedule:
        """Run each statement's weighted sum as matrix products on tensor cores
        (target 'cuda'): "fp64" (DMMA m8n8k4, sm_80+), "tf32" or "fp16" (operands
        rounded, fp32 accumulation; error bound in docs/tensor_cores.md). Every
        statement must be linear in its field reads with constant or
        scalar-parameter weights (checked when the kernel is generated). On a
        float64 stencil tf32 and fp16 lose all but about 3 of its 16 digits, so
        they are refused there unless `lossy=True` says that is what is wanted."""
        if precision not in TENSOR_CORE_PRECISIONS:
            raise ScheduleError(f"tensor_cores: precision must be one of {', '.join(map(repr, TENSOR_CORE_PRECISIONS))}, "
                                f"got {precision!r}")
        if not isinstance(lossy, bool):
            raise ScheduleError(f"tensor_cores: lossy must be True or False, got {lossy!r}")
        return replace(self, tensor_core_precision=precision, tensor_core_lossy=lossy)

    def pipeline(self) -> Schedule:
        """Run a time tile's tiles in a pipeline instead of wavefronts: band by band
        (`depth` steps), the threads share the first tiled dimension's tiles (its
        columns), each running a column's tiles in order along the second, a tile
        waiting only for the tile of the column before at the same place (no barrier
        per wavefront). Each tile finds its neighbours' faces just written, in cache.
        Needs time_tile over two or more dimensions (an OpenMP option)."""
        return replace(self, pipelined=True)

    def update_in_place(self) -> Schedule:
        """Write each step over the level it reads (a 3D sweep of tile(y=B)): the threads share the
        x-planes in runs, each sweeps its run y tile by y tile, keeps the old planes its points still
        read in a ring of plane tiles in cache and writes every point where it read it, so no written
        line is read from memory first (a streaming store's saving, with ordinary stores). The last
        step of a run, and the first of an even number, write the other level's slot as usual: levels
        end where they always do. Needs one statement whose field of two levels it reads at t only, a
        dirichlet boundary (an OpenMP option)."""
        return replace(self, in_place=True)

    def with_threads(self, threads: int) -> Schedule:
        """Run with `threads` threads (a CPU option; the tuner records its choice so)."""
        threads = _count(threads, "with_threads: threads must be a positive integer")
        return replace(self, threads=threads)

    def describe(self) -> str:
        parts = []
        if self.time_depth:
            parts.append(f"time_tile({', '.join([str(self.time_depth), *([_kw(self.tiles)] if self.tiles else [])])})")
        elif self.tiles:
            parts.append(f"tile({_kw(self.tiles)})")
        if self.order:
            parts.append(f"reorder({', '.join(map(repr, self.order))})")
        if self.fuse_at:
            parts.append(f"compute_at({self.fuse_at!r})")
        parts += [f"cache_read({f!r})" for f in self.cached_reads]
        parts += [f"cache_write({f!r})" for f in self.cached_writes]
        if self.parallel_loop:
            parts.append(f"parallel({self.parallel_loop!r})")
        if self.vector_loop:
            parts.append(f"vectorize({self.vector_loop!r})")
        parts += [f"unroll({name!r}, {f})" for name, f in self.unrolls]
        if self.streaming:
            parts.append("stream_stores()")
        if self.prefetch_distance:
            parts.append(f"prefetch({self.prefetch_distance})")
        if self.pipelined:
            parts.append("pipeline()")
        if self.in_place:
            parts.append("update_in_place()")
        if self.threads:
            parts.append(f"with_threads({self.threads})")
        if self.tensor_core_precision:
            parts.append(f"tensor_cores({self.tensor_core_precision!r}{', lossy=True' if self.tensor_core_lossy else ''})")
        return "Schedule()" + "".join("." + p for p in parts)

    def __str__(self) -> str:
        return self.describe()

    __repr__ = __str__

    def __getattr__(self, name: str) -> Any:
        """A misspelt primitive (Schedule().tiel) names the closest primitive and all of them."""
        if name.startswith("_"):
            raise AttributeError(name)
        close = difflib.get_close_matches(name, PRIMITIVES, n=1)
        hint = f"did you mean {close[0]}()? " if close else ""
        raise UnknownPrimitiveError(f"Schedule has no primitive {name!r}: {hint}the primitives are "
                                    f"{', '.join(PRIMITIVES)}")


    def target_options(self) -> list[str]:
        """The target options this schedule uses (TARGET_OPTIONS), by primitive name."""
        return [name for name, used in TARGET_OPTIONS.items() if used(self)]


#: A schedule is a target-neutral core (tiles, time tiles, order, fusion,
#: caches, parallel/vector/unroll marks) and these target options, by primitive:
#: whether a schedule uses it. A target lists the options it takes
#: (`schedule_options`); msc.codegen.check_schedule_options refuses the others
#: with one error naming the targets that take the option.
TARGET_OPTIONS: dict[str, Callable[[Schedule], bool]] = {
    "stream_stores": lambda s: s.streaming,
    "prefetch": lambda s: s.prefetch_distance > 0,
    "with_threads": lambda s: s.threads is not None,
    "tensor_cores": lambda s: s.tensor_core_precision is not None,
    "pipeline": lambda s: s.pipelined,
    "update_in_place": lambda s: s.in_place,
}


class UnknownPrimitiveError(ScheduleError, AttributeError):
    """A name that is not a schedule primitive (an AttributeError too, for hasattr and getattr)."""


TENSOR_CORE_PRECISIONS = ("fp64", "tf32", "fp16")


def _kw(pairs: tuple[tuple[str, int], ...]) -> str:
    return ", ".join(f"{k}={v}" for k, v in pairs)


def shrink_tile(tile: tuple[int, ...], fits: Callable[[tuple[int, ...]], bool],
                fixed: frozenset[int] = frozenset()) -> tuple[int, ...]:
    """`tile` with its longest side not in `fixed` halved (the first of equal
    ones), again and again, until `fits(tile)` or no such side is longer than 1
    (how a target fits a tile to its memory or its block size)."""
    sides = list(tile)
    while not fits(tuple(sides)):
        free = [d for d in range(len(sides)) if d not in fixed and sides[d] > 1]
        if not free:
            break
        longest = max(free, key=lambda d: sides[d])
        sides[longest] //= 2
    return tuple(sides)


def _once(schedule: Schedule, primitive: str, given: Any, new: Any) -> None:
    """ScheduleError when `primitive`, which takes one choice, is given another one after `given`."""
    if given and given != new:
        raise ScheduleError(f"{primitive} is given already ({schedule.describe()}); it takes one choice: "
                            f"drop one of the two")


def _count(value: Any, rule: str) -> int:
    """`value` as a Python int when it is an integer >= 1 (numpy's too, never a bool); else a ScheduleError
    saying `rule`."""
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)) or value < 1:
        raise ScheduleError(f"{rule}, got {value!r}")
    return int(value)


def _check_sizes(what: str, sizes: dict[str, Any]) -> dict[str, int]:
    for name in sizes:
        if name not in ir.DIM_NAMES:
            raise ScheduleError(f"{what}: unknown dimension {name!r}; space dimensions are x, y, z")
    return {name: _count(size, f"{what}: size of {name} must be a positive integer") for name, size in sizes.items()}


@dataclass
class LoweredSchedule:
    """An isl schedule map plus what codegen needs to decorate its loops."""

    schedule: Schedule
    map: isl.UnionMap
    names: list[str]  # loop name of each schedule dimension ("" for constant ones)
    time_dim: int
    parallel_dims: set[int] = field(default_factory=set)  # legal ones, from the dependences
    tiles: dict[int, tuple[int, int]] = field(default_factory=dict)  # tile loop dim -> (space dim, size)
    parallel_dim: int | None = None  # the loop whose iterations are shared among the workers
    vector_dim: int | None = None  # the loop asked to run in SIMD lanes
    unroll: dict[int, int] = field(default_factory=dict)

    def dim(self, loop: str) -> int:
        if loop not in self.names:
            loops = ", ".join(repr(n) for n in self.names if n)
            raise ScheduleError(f"no loop named {loop!r} in this schedule; its loops are {loops}")
        return self.names.index(loop)


def lower(schedule: Schedule | None, poly: PolyIR) -> LoweredSchedule:
    """Build, check and decorate the isl schedule for `poly`."""
    schedule = schedule or Schedule()
    stencil = poly.ir
    tiles = dict(schedule.tiles)
    for name in tiles:
        if name not in stencil.dims:
            raise ScheduleError(f"stencil '{stencil.name}' is {stencil.ndim}D: it has no dimension {name!r}")
    if stencil.boundary == "periodic" and (schedule.time_depth or schedule.fuse_at):
        what, within = ("time_tile", "no time tile can contain") if schedule.time_depth else \
            ("compute_at", "the statements of one tile cannot wait for")
        raise ScheduleError(
            f"stencil '{stencil.name}': {what} needs a dirichlet boundary (a periodic level is "
            f"wrapped as a whole after each step, which {within})"
        )
    if schedule.time_depth and not tiles:
        raise ScheduleError(f"time_tile({schedule.time_depth}) names no sizes: a target chooses them when it "
                            "compiles or emits the stencil (lower a schedule with sizes, e.g. time_tile(8, x=32))")
    build = _time_tiled if schedule.time_depth else _space_tiled
    names, rows = build(schedule, poly, tiles)
    text = "; ".join(f"{poly.instance(st)} -> [{', '.join(r)}]" for st, r in zip(poly.statements, rows))
    umap = isl.UnionMap(f"[{', '.join(poly.params)}] -> {{ {text} }}").intersect_domain(poly.domain)
    lowered = LoweredSchedule(schedule, umap, names, names.index("t"))
    lowered.tiles = {names.index(f"{d}_tile"): (k, tiles[d]) for k, d in enumerate(stencil.dims) if d in tiles}
    _check_caches(poly, lowered)
    _check_legal(poly, lowered)
    if schedule.pipelined:
        _check_pipeline(poly, lowered)
    lowered.parallel_dims = poly.parallel_dims(umap)
    _decorate(poly, lowered)
    _check_staged_workers(poly, lowered)
    return lowered


def _space_order(schedule: Schedule, band: list[str]) -> list[str]:
    """Apply reorder(): the named loops take the named order in their own slots."""
    for name in schedule.order:
        if name not in band:
            raise ScheduleError(f"reorder: no loop named {name!r}; the space loops are {', '.join(band)}")
    slots = [k for k, n in enumerate(band) if n in schedule.order]
    out = list(band)
    for slot, name in zip(slots, schedule.order):
        out[slot] = name
    return out


def _space_tiled(schedule: Schedule, poly: PolyIR, tiles: dict[str, int]) -> tuple[list[str], list[list[str]]]:
    """[t, statement, band] — or, with compute_at(loop), [t, band up to loop,
    statement, rest of band] with producers shifted ahead of their consumers."""
    stencil = poly.ir
    dims = stencil.dims
    band = [f"{d}_tile" for d in dims if d in tiles] + list(dims)
    band = _space_order(schedule, band)
    fuse = 0
    if schedule.fuse_at is not None:
        if schedule.fuse_at not in band or not schedule.fuse_at.endswith("_tile"):
            tile_loops = ", ".join(n for n in band if n.endswith("_tile")) or "none: tile() first"
            raise ScheduleError(f"compute_at: {schedule.fuse_at!r} is not a tile loop (tile loops: {tile_loops})")
        fuse = band.index(schedule.fuse_at) + 1
        if any(not n.endswith("_tile") for n in band[:fuse]):
            raise ScheduleError(f"compute_at: point loops must stay inside {schedule.fuse_at!r}")
    nst = len(stencil.statements)
    rows = []
    for pos, st in enumerate(poly.statements):
        expr = {}
        for d, i, r in zip(dims, poly.dims, stencil.radius):
            expr[d] = i if st.stmt else "0"
            if d in tiles:
                fused = f"{d}_tile" in band[:fuse]
                shift = (nst - 1 - st.index) * r if fused else 0
                expr[f"{d}_tile"] = f"floor(({i} - {shift})/{tiles[d]})" if st.stmt else "0"
        row = [expr[n] for n in band]
        rows.append(["t"] + row[:fuse] + [str(pos)] + row[fuse:])
    return ["t"] + band[:fuse] + [""] + band[fuse:], rows


def _time_tiled(schedule: Schedule, poly: PolyIR, tiles: dict[str, int]) -> tuple[list[str], list[list[str]]]:
    """Skewed tiles: space coordinate d becomes i_d + s_d*t + k*r_d for the k-th
    statement, with s_d = statements * r_d, so that every dependence has a
    non-negative distance in every tiled coordinate; tiles then run in
    wavefronts (t_tile + sum of space tiles), the tiles of one wavefront in parallel.
    Pipelined (pipeline()): the tiles of a band in plain order, [t_tile, space tiles, ...]."""
    stencil = poly.ir
    nst = len(stencil.statements)
    depth = schedule.time_depth
    tiled = [d for d in stencil.dims if d in tiles]
    points = _space_order(schedule, list(stencil.dims))
    rows = []
    for pos, st in enumerate(poly.statements):
        assert st.stmt is not None  # periodic (ghost refresh) stencils are rejected before
        k = st.index
        tile_expr = {}
        for d, i, r in zip(stencil.dims, poly.dims, stencil.radius):
            if d in tiles:
                tile_expr[d] = f"floor(({i} + {nst * r}*t + {k * r})/{tiles[d]})"
        t_tile = f"floor(t/{depth})"
        wave = " + ".join([t_tile] + [tile_expr[d] for d in tiled])
        point = dict(zip(stencil.dims, poly.dims))
        order = [t_tile] + [tile_expr[d] for d in tiled] if schedule.pipelined else \
            [wave] + [tile_expr[d] for d in tiled] + [t_tile]
        rows.append(order + ["t", str(pos)] + [point[d] for d in points])
    tile_loops = [f"{d}_tile" for d in tiled]
    names = ["t_tile"] + tile_loops if schedule.pipelined else ["wave"] + tile_loops + ["t_tile"]
    return names + ["t", ""] + points, rows


# A stencil with a statement of this many reads or more is printed for the
# compiler's sake: no whole-line stores unless asked for (they print each
# statement three times), and that statement reads through row pointers
# (msc/codegen/lower.py, msc/targets/cpu/x86_pass.py).
LARGE_READS = 64


def _check_caches(poly: PolyIR, lowered: LoweredSchedule) -> None:
    s, stencil = lowered.schedule, poly.ir
    if not (s.cached_reads or s.cached_writes):
        return
    what = f"cache_read/cache_write on stencil '{stencil.name}'"
    if len(lowered.tiles) != stencil.ndim:
        sizes = ", ".join(d + "=32" for d in stencil.dims)
        example = f"time_tile({s.time_depth}, {sizes})" if s.time_depth else f"tile({sizes})"
        raise ScheduleError(f"{what}: tile every dimension first, e.g. {example}")
    if max(lowered.tiles) > min(lowered.names.index(d) for d in stencil.dims):
        raise ScheduleError(f"{what}: tile loops must be outside the point loops")
    if s.fuse_at:  # the statements of a step share a tile: what one writes, the next reads from memory
        same_step = {a.name for st in stencil.statements for a in st.reads if a.dt == 1}
        for name in sorted(same_step & set(s.cached_reads) | same_step & set(s.cached_writes)):
            side = "cache_read: a copy made before the tile" if name in s.cached_reads else \
                "cache_write: a buffer copied out after the tile"
            raise ScheduleError(
                f"{what}: under compute_at a statement reads the new level of {name!r} its producer writes in the "
                f"same tile, which {side} does not hold; stage only levels of earlier steps, or use time_tile()")
    if s.time_depth:
        read = {a.name for st in stencil.statements for a in st.reads}
        for name in sorted(f.name for f in stencil.written_fields if f.name in read):
            if (name in s.cached_reads) != (name in s.cached_writes):
                raise ScheduleError(
                    f"{what}: under time_tile a field that is written and read is staged whole, its later steps "
                    f"reading what earlier ones wrote: use both cache_read({name!r}) and cache_write({name!r})")
    read = {a.name for st in stencil.statements for a in st.reads}
    written = {f.name for f in stencil.written_fields}
    for name in s.cached_reads:
        if name not in read:
            raise ScheduleError(f"cache_read: stencil '{stencil.name}' reads no field {name!r}")
    for name in s.cached_writes:
        if name not in written:
            raise ScheduleError(f"cache_write: stencil '{stencil.name}' writes no field {name!r}")


def _check_pipeline(poly: PolyIR, lowered: LoweredSchedule) -> None:
    """pipeline(): a time tile over two or more dimensions, no staging, and every dependence inside a band
    between two columns (the first tile loop) going forward along the second tile loop too: a tile waits
    only for the column before it up to its own place there (and its own column before it)."""
    s, name = lowered.schedule, poly.ir.name
    loops = [lowered.names[d] for d in sorted(lowered.tiles)]  # the space tile loops, outermost first
    if poly.ir.ndim == 1:
        raise ScheduleError(f"pipeline() on stencil '{name}': a 1D stencil has one dimension to tile, and a band "
                            "of its time tile is a chain of tiles, which wavefronts already run")
    if not s.time_depth or len(loops) < 2:
        why = "with one, a band is a chain of tiles" if s.time_depth else "there is no time tile"
        raise ScheduleError(f"pipeline() on stencil '{name}' runs the tiles of a time tile over two or more "
                            f"dimensions ({why}): e.g. time_tile(16, x=8, y=32).pipeline()")
    if s.cached_reads or s.cached_writes:
        raise ScheduleError(f"pipeline() on stencil '{name}' cannot stage tiles (cache_read/cache_write): a "
                            "staged time tile copies its footprint in and out in wavefront order; drop one of them")
    if s.parallel_loop not in (None, loops[0]):
        raise ScheduleError(f"pipeline() shares the columns of the time tile, loop {loops[0]!r}, among threads: "
                            f"drop parallel({s.parallel_loop!r})")
    band, column, row = (lowered.names.index(n) for n in ("t_tile", *loops[:2]))
    sched = lowered.map
    backwards = isl.UnionMap("{ }")
    maps: list[isl.Map] = []
    poly.dependences.apply_domain(sched).apply_range(sched).foreach_map(maps.append)
    for m in maps:
        m = m.equate(isl.dim_type.in_, band, isl.dim_type.out, band)
        m = m.order_lt(isl.dim_type.in_, column, isl.dim_type.out, column)
        backwards = backwards.union(isl.UnionMap.from_map(m.order_gt(isl.dim_type.in_, row, isl.dim_type.out, row)))
    if not backwards.is_empty():
        back = backwards.apply_domain(sched.reverse()).apply_range(sched.reverse())
        raise ScheduleError(f"pipeline() is illegal for stencil '{name}': a tile would wait for the column before "
                            f"it only up to its own {loops[1]!r}, but the dependence {_example(poly, back)} goes "
                            f"back along {loops[1]!r}")


def _check_staged_workers(poly: PolyIR, lowered: LoweredSchedule) -> None:
    """A write buffer, and a staged time tile, are one worker's: each holds the
    whole tile, which its copy-out writes back. (Read buffers of spatial
    tiles may be shared: every worker copies the tile in for itself.)"""
    s = lowered.schedule
    staged = bool(s.time_depth and (s.cached_reads or s.cached_writes))
    if not (staged or s.cached_writes) or lowered.parallel_dim is None or lowered.parallel_dim in lowered.tiles:
        return
    name = lowered.names[lowered.parallel_dim]
    what = "a staged time tile belongs to one thread" if staged else \
        "a cache_write buffer holds one thread's whole tile, which it copies out"
    shareable = [lowered.names[d] for d in sorted(lowered.tiles) if d in lowered.parallel_dims]
    hint = (f"share a tile loop, e.g. parallel({shareable[0]!r})" if shareable else
            "no tile loop of this schedule can be shared (each carries a dependence): drop the cache_write")
    raise ScheduleError(
        f"cache_read/cache_write on stencil '{poly.ir.name}': {what}, but loop {name!r} inside the tile is "
        f"shared among threads; {hint}")


def _check_legal(poly: PolyIR, lowered: LoweredSchedule) -> None:
    violated = poly.violated(lowered.map)
    if not violated.is_empty():
        raise ScheduleError(
            f"schedule {lowered.schedule} is illegal for stencil '{poly.ir.name}': it reverses the "
            f"dependence {_example(poly, violated)}"
        )


def _example(poly: PolyIR, deps: isl.UnionMap) -> str:
    """One concrete dependence: in the user's terms (which statement, which read, how far
    apart in time and space), then as isl prints it, with the statements' source lines."""
    sample = deps.sample()
    text = str(sample).split("{", 1)[-1].rsplit("}", 1)[0].strip()
    names = [st for st in poly.statements if f"{st.name}[" in text]
    where = "; ".join(_describe(st) for st in names)
    isl_text = f"{text} ({where})" if where else text
    plain = _in_user_terms(poly, sample)
    return f"{plain}; in isl: {isl_text})" if plain else isl_text


def _in_user_terms(poly: PolyIR, sample: isl.BasicMap) -> str:
    """'of u[t+1] at heat.py:7 on u[t, x-1, y], written 1 step earlier by u[t+1] at heat.py:7 (the
    schedule must run that write first' for a dependence between two statements ('' for the periodic
    wrap); the caller closes the parenthesis."""
    by_name = {st.name: st for st in poly.statements}
    src = by_name.get(sample.get_tuple_name(isl.dim_type.in_))
    dst = by_name.get(sample.get_tuple_name(isl.dim_type.out))
    if src is None or dst is None or src.stmt is None or dst.stmt is None:
        return ""
    point = sample.wrap().sample_point()
    n = sample.dim(isl.dim_type.in_)
    coords = [point.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(2 * n)]
    (t0, *at), (t1, *to) = coords[:n], coords[n:]
    steps = t1 - t0
    apart = "in the same step" if steps == 0 else f"{steps} step{'s' * (steps != 1)} earlier"
    if isl.Map.from_basic_map(sample).is_subset(poly.flow_dependences.extract_map(sample.get_space())):
        read = _read_text(src.target, 1 - steps, [a - b for a, b in zip(at, to)])
        return (f"of {dst.target}[t+1] at {dst.stmt.loc} on {read}, written {apart} by {src.target}[t+1] at "
                f"{src.stmt.loc} (the schedule must run that write first")
    return (f"of {dst.target}[t+1] at {dst.stmt.loc}, which overwrites a ring slot of '{dst.target}' that "
            f"{src.target}[t+1] at {src.stmt.loc} reads {apart} (the schedule must run that read first")


def _read_text(field: str, dt: int, offsets: list[int]) -> str:
    """A read as the user writes it: u[t, x-1, y]."""
    def shifted(symbol: str, offset: int) -> str:
        return symbol if offset == 0 else f"{symbol}{offset:+d}"

    return f"{field}[{', '.join([shifted('t', dt), *map(shifted, ir.DIM_NAMES, offsets)])}]"


def _describe(st: PolyStatement) -> str:
    if st.stmt is None:
        return f"{st.name} = periodic wrap of {st.target}[t+1]"
    return f"{st.name} = {st.target}[t+1] at {st.stmt.loc}"


def carried_example(poly: PolyIR, lowered: LoweredSchedule, dim: int) -> str:
    sched = lowered.map
    deps = poly.dependences
    in_sched = deps.apply_domain(sched).apply_range(sched)
    carried = isl.UnionMap("{ }")
    maps: list[isl.Map] = []
    in_sched.foreach_map(maps.append)
    for m in maps:
        eq = m
        for e in range(dim):
            eq = eq.equate(isl.dim_type.in_, e, isl.dim_type.out, e)
        lt = eq.order_lt(isl.dim_type.in_, dim, isl.dim_type.out, dim)
        if not lt.is_empty():
            carried = carried.union(isl.UnionMap.from_map(lt))
            break
    if carried.is_empty():
        return "a dependence"
    back = carried.apply_domain(sched.reverse()).apply_range(sched.reverse())
    return _example(poly, back)


#: loops the default schedule never shares among threads (time, and a time tile's wavefront and time tiles)
NEVER_SHARED = ("t", "wave", "t_tile")


def _decorate(poly: PolyIR, lowered: LoweredSchedule) -> None:
    s = lowered.schedule
    loops = [k for k, n in enumerate(lowered.names) if n]
    if s.pipelined:  # the columns: the first space tile loop, checked by _check_pipeline
        lowered.parallel_dim = min(lowered.tiles)
    elif s.parallel_loop is not None:
        d = lowered.dim(s.parallel_loop)
        if s.parallel_loop == "t_tile" and s.time_depth:  # one iteration: the wavefront and space tiles fix it
            space = ", ".join(repr(n) for n in lowered.names if n.endswith("_tile") and n != "t_tile")
            raise ScheduleError(
                f"loop 't_tile' of stencil '{poly.ir.name}' cannot run in parallel: under time_tile it is "
                f"fixed by the wavefront and the space tiles (one iteration each); share a space tile loop "
                f"instead ({space}), as time_tile does by default")
        if d not in lowered.parallel_dims:
            raise ScheduleError(
                f"loop {s.parallel_loop!r} of stencil '{poly.ir.name}' cannot run in parallel: it carries "
                f"the dependence {carried_example(poly, lowered, d)}"
            )
        lowered.parallel_dim = d
    else:  # the outermost parallel loop below time (for time tiles: below the wavefront)
        start = 0 if lowered.schedule.time_depth else lowered.time_dim + 1
        lowered.parallel_dim = next((k for k in loops if k >= start and k in lowered.parallel_dims
                                    and lowered.names[k] not in NEVER_SHARED), None)
    if s.vector_loop is not None:
        d = lowered.dim(s.vector_loop)
        if d != loops[-1]:
            raise ScheduleError(f"vectorize: {s.vector_loop!r} is not the innermost loop ({lowered.names[loops[-1]]!r} is)")
        if d not in lowered.parallel_dims:
            raise ScheduleError(
                f"vectorize: loop {s.vector_loop!r} carries the dependence {carried_example(poly, lowered, d)}"
            )
        lowered.vector_dim = d
    for name, factor in s.unrolls:
        d = lowered.dim(name)
        if d == lowered.parallel_dim and s.parallel_loop is None:
            others = [n for k, n in enumerate(lowered.names) if k in lowered.parallel_dims and k != d
                      and n and n not in NEVER_SHARED]
            instead = (f"parallel({others[0]!r}) shares another" if others else
                       f"tile it first (tile({name}=16).unroll({name!r}, {factor})): threads then share the tiles")
            raise ScheduleError(f"unroll: loop {name!r} is shared among threads by default; unroll another loop, "
                                f"or {instead}")
        if d in (lowered.parallel_dim, lowered.vector_dim):
            raise ScheduleError(
                f"unroll: loop {name!r} is already {'shared among threads' if d == lowered.parallel_dim else 'vectorized'}; "
                "unroll another loop"
            )
        lowered.unroll[d] = factor


def describe_loops(lowered: LoweredSchedule) -> str:
    return ", ".join(n for n in lowered.names if n)


def as_schedule(value: Any) -> Schedule | None:
    """Accept None / "default" / a Schedule; anything else is an error."""
    if value is None or value == "default":
        return None
    if isinstance(value, Schedule):
        return value
    if value == "auto":
        raise ScheduleError(
            "schedule='auto' is tuned for a problem size when a kernel runs: use "
            "compile(schedule='auto'), run it, then pass its .report.schedule here"
        )
    raise ScheduleError(f"schedule must be a msc.Schedule, 'default' or 'auto', got {value!r}")


PRIMITIVES = ("tile", "time_tile", "reorder", "compute_at", "cache_read", "cache_write", "parallel",
              "vectorize", "unroll", "stream_stores", "prefetch", "pipeline", "update_in_place", "with_threads",
              "tensor_cores")


def parse_schedule(text: str) -> Schedule | str:
    """A schedule written as text (the command line's --schedule): "auto"
    (returned as is), "default", or a chain of primitives as str(Schedule)
    prints it, with or without the leading "Schedule().", e.g.
    "time_tile(8, x=32).parallel('x_tile')". Only primitives with literal
    arguments are accepted; nothing is evaluated."""
    text = text.strip()
    if text == "auto":
        return text
    if text == "default":
        return Schedule()
    what = f"schedule {text!r}"
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise ScheduleError(f"{what} is not a chain of primitives like tile(x=32).parallel('x_tile'): {e.msg}") from None
    calls: list[ast.Call] = []
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        calls.append(node)
        node = node.func.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id != "Schedule" or node.args or node.keywords:
            calls.append(node)
    else:
        raise ScheduleError(f"{what} is not a chain of primitives like tile(x=32).parallel('x_tile')")
    schedule = Schedule()
    for call in reversed(calls):
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "?")
        if name not in PRIMITIVES:
            raise ScheduleError(f"{what}: unknown primitive {name!r}; the primitives are {', '.join(PRIMITIVES)}")
        try:
            args = [ast.literal_eval(a) for a in call.args]
            kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg is not None}
        except ValueError:
            raise ScheduleError(f"{what}: the arguments of {name}() must be numbers and quoted names") from None
        try:
            schedule = getattr(schedule, name)(*args, **kwargs)
        except TypeError as e:
            raise ScheduleError(f"{what}: {name}(): {e}") from None
    return schedule
