"""The athread cost model behind `compile(target="athread", schedule="auto")`.

No Sunway processor can be timed here, so the tile shape is chosen by an
explicit model, not by measurement: for each candidate tile that fits the
LDM (all buffers, double buffers included, plus the stack reserve), the
DMA bytes and transfers per step are counted exactly as the generated code
issues them (the emulator's counters agree: tests/test_athread_target.py),
and the step time is predicted as

    spatial tiles, per statement: max(DMA time, compute time) + the first tile's fetch
    time tiles, per step: (max(DMA time, compute time) + the fetch a CPE waits for) / depth
                          (2D, 3D: streamed, each tile's first row; 1D: double-buffered, the first tile)
    DMA time     = sum over the busiest CPE's transfers of bytes / (bandwidth(block) / 64)
                   + the busiest CPE's transfers x the per-transfer cost
    compute time = the busiest CPE's points (a time tile's redundant halo
                   points included) x flops per point / the CPE's flop rate

(double buffering overlaps a tile's compute with the next tile's DMA), where
bandwidth(block) is the core group's DMA bandwidth for contiguous blocks of
that size (`dma_gb_s`: measured on SW26010; an assumption on the Pro). The
inputs and their sources are in `chips.py` and docs/athread.md; the
prediction is printed and is a model, never a measurement. Candidates whose
DMA stays above a floor (blocks of 1 KB on average, at 75% of the ceiling)
rank before the rest, where the table is least certain (ADR 0056).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass

from msc import ir
from msc.ir.counts import flops
from msc.poly.schedule import Schedule
from msc.runtime import athread_emu
from msc.runtime.buffers import padded_shape
from msc.targets.sunway.athread_plan import TileKernel, TimeTileKernel, athread_schedule, slave_kernels
from msc.targets.sunway.chips import Chip, as_chip
from msc.tune.tuner import Estimate


def interior(stencil: ir.StencilIR, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The computed points per dimension of arrays of `shape`."""
    if stencil.boundary == "periodic":
        return shape
    return tuple(n - 2 * r for n, r in zip(shape, stencil.radius))


def _sizes(n: int, t: int) -> list[int]:
    return [min(t, n - i) for i in range(0, n, t)]


def _boxes(sizes: list[list[int]]) -> list[tuple[tuple[int, ...], int]]:
    """The distinct tile shapes of a tiling (sizes per dimension) and how many tiles have each."""
    per_dim = [sorted(Counter(s).items()) for s in sizes]
    return [(tuple(e for e, _ in combo), math.prod(c for _, c in combo)) for combo in itertools.product(*per_dim)]


@dataclass
class Traffic:
    """DMA as the generated code issues it (msc_dma in the slave template): a box of an array whose rows
    hold `row` points moves in one transfer (3D: one per plane) of one contiguous block when its rows are
    whole, else of one block per row; `seconds` at the chip's bandwidth for those blocks, whole core group."""

    chip: Chip
    itemsize: int
    row: int
    bytes: int = 0
    transfers: int = 0
    blocks: int = 0
    seconds: float = 0.0

    def box(self, extent: tuple[int, ...], times: int = 1) -> None:
        planes = extent[0] if len(extent) == 3 else 1
        rows = extent[-2] if len(extent) > 1 else 1
        plane = rows * extent[-1] * self.itemsize
        block = plane if extent[-1] == self.row or len(extent) == 1 else extent[-1] * self.itemsize
        self.bytes += times * planes * plane
        self.transfers += times * planes
        self.blocks += times * planes * (plane // block)
        self.seconds += times * planes * plane / (self.chip.dma_gb_s(block) * 1e9)

    def move(self, extent: tuple[int, ...], times: int = 1, *, streamed: bool, rows: int | None = None) -> None:
        """A box of `extent`, `times` over: whole, or streamed a row at a time (3D: a plane), `rows` of them
        (all by default)."""
        if not streamed:
            self.box(extent, times)
            return
        one_row = extent[1:] if len(extent) == 2 else (1, *extent[1:])
        self.box(one_row, times * (extent[0] if rows is None else rows))


@dataclass(frozen=True)
class Counts:
    """DMA of one statement per step, summed over the CPEs, and the busiest CPE's share."""

    get_bytes: int
    put_bytes: int
    transfers: int
    blocks: int
    seconds: float  # all of it at the core group's bandwidth for its block sizes
    tiles: int
    cpe_seconds: float  # the busiest CPE's DMA (as many full tiles as any CPE has), at a 64th of the bandwidth
    cpe_transfers: int
    cpe_points: int
    fill_seconds: float  # what the busiest CPE waits for before it computes (DMA not overlapped), by one CPE
    fill_transfers: int


def _counts(get: Traffic, put: Traffic, tile: tuple[Traffic, Traffic], fill: Traffic, tiles: int, points: int,
            waits: int) -> Counts:
    """Counts from the traffic of every tile (`get`, `put`), of one full tile (`tile`: its gets and puts) and
    of one fill, which the busiest CPE waits for `waits` times."""
    per_cpe, cpes = math.ceil(tiles / athread_emu.CPES), athread_emu.CPES
    return Counts(get.bytes, put.bytes, get.transfers + put.transfers, get.blocks + put.blocks,
                  get.seconds + put.seconds, tiles, per_cpe * (tile[0].seconds + tile[1].seconds) * cpes,
                  per_cpe * (tile[0].transfers + tile[1].transfers), per_cpe * points,
                  waits * fill.seconds * cpes, waits * fill.transfers)


def counts(tk: TileKernel, n: tuple[int, ...], row: int, chip: Chip, itemsize: int) -> Counts:
    """What the slave function of `tk` moves on an interior of n points per dimension (arrays of `row` points
    per row), as the generated code issues it: streamed (2D, 3D), per tile one transfer per row of each level
    and of the output; in 1D, per tile one transfer per level and one for the output. The fill, what a CPE
    waits for before it can compute: streamed, the first window of every tile; in 1D, the first tile."""
    sizes = [_sizes(n[d], tk.tile[d]) for d in range(len(n))]
    tiles = math.prod(len(s) for s in sizes)
    get, put, tile_get, tile_put, fill = (Traffic(chip, itemsize, row) for _ in range(5))
    streamed = tk.streamed
    for lv in tk.levels:
        span = [h - lo for h, lo in zip(lv.hi, lv.lo)]
        for box, times in _boxes(sizes):
            get.move(tuple(h + s for h, s in zip(box, span)), times, streamed=streamed)
        footprint = tuple(t + s for t, s in zip(tk.tile, span))
        tile_get.move(footprint, streamed=streamed)
        fill.move(footprint, streamed=streamed, rows=min(footprint[0], tk.reach + 1) if streamed else None)
    for box, times in _boxes(sizes):
        put.move(box, times, streamed=streamed)
    tile_put.move(tk.tile, streamed=streamed)
    waits = math.ceil(tiles / athread_emu.CPES) if streamed else 1
    return _counts(get, put, (tile_get, tile_put), fill, tiles, math.prod(tk.tile), waits)


@dataclass(frozen=True)
class Prediction:
    """The model's view of one schedule on one problem (per time step)."""

    schedule: Schedule
    chip: Chip
    points: int  # computed points per step and statement
    get_bytes: float  # per step (a time tile's spawn moves `depth` steps' worth)
    put_bytes: float
    transfers: float
    dma_blocks: float  # contiguous blocks, per step
    moving_s: float  # the DMA bytes at the core group's bandwidth for their block sizes, per step
    ldm_bytes: int  # the largest slave function's buffers per CPE
    min_bytes: int  # every level read once and every field written once
    dma_s: float
    compute_s: float
    step_s: float

    @property
    def bytes_per_point(self) -> float:
        return (self.get_bytes + self.put_bytes) / self.points

    @property
    def min_bytes_per_point(self) -> float:
        return self.min_bytes / self.points

    @property
    def mean_dma_block(self) -> float:
        return (self.get_bytes + self.put_bytes) / self.dma_blocks

    @property
    def dma_gb_s(self) -> float:
        """The core group's DMA bandwidth these block sizes reach (per-transfer costs aside)."""
        return (self.get_bytes + self.put_bytes) / self.moving_s / 1e9

    def describe(self) -> str:
        return (f"athread schedule='auto' on {self.chip} chose {self.schedule} by a cost model (a prediction, "
                f"not a measurement: no Sunway processor was timed): {self.step_s * 1e3:.3f} ms/step predicted "
                f"(DMA {self.dma_s * 1e3:.3f} ms, compute {self.compute_s * 1e3:.3f} ms); "
                f"{self.get_bytes + self.put_bytes:.0f} DMA bytes/step ({self.bytes_per_point:.2f} per point, "
                f"minimum {self.min_bytes_per_point:.2f}) in {self.transfers:.0f} transfers of "
                f"{self.mean_dma_block:.0f}-byte blocks on average ({self.dma_gb_s:.1f} GB/s of "
                f"{self.chip.ceiling_gb_s:.1f} predicted); "
                f"LDM {self.ldm_bytes} of {self.chip.ldm_capacity} bytes per CPE")


def time_tile_counts(tt: TimeTileKernel, n: tuple[int, ...], row: int, chip: Chip, itemsize: int) -> Counts:
    """What one spawn of a time tile of full depth moves (the generated code's transfers: per tile, the
    clipped box of every level the first step reads and, per written field, its window of levels' tiles;
    2D and 3D a row (plane) at a time). The fill a CPE waits for: streamed, each tile's first row; in 1D,
    the first tile's box (the next ones are fetched while a tile computes)."""
    ndim = len(n)
    radius, halo = tt.stencil.radius, tt.halo()
    sizes = [_sizes(n[d], tt.tile[d]) for d in range(ndim)]
    tiles = math.prod(len(s) for s in sizes)
    boxes = []  # per dimension: the clipped box extent of each tile
    for d in range(ndim):
        extent, origin = n[d] + 2 * radius[d], radius[d]
        widths = []
        for h in sizes[d]:
            widths.append(min(extent, origin + h + halo[d]) - max(0, origin - halo[d]))
            origin += h
        boxes.append(widths)
    buffers = sum(f.window if f.written else 1 for f, _ in tt.arrays())  # the levels fetched
    levels_out = sum(f.window for f in tt.stencil.written_fields)
    get, put, tile_get, tile_put, fill = (Traffic(chip, itemsize, row) for _ in range(5))
    streamed = tt.streamed  # (2D, 3D) a row (plane) at a time
    for box, times in _boxes(boxes):
        get.move(box, buffers * times, streamed=streamed)
    for box, times in _boxes(sizes):
        put.move(box, levels_out * times, streamed=streamed)
    tile_get.move(tt.extent(), buffers, streamed=streamed)
    tile_put.move(tt.tile, levels_out, streamed=streamed)
    fill.move(tt.extent(), buffers, streamed=streamed, rows=1 if streamed else None)
    nst = len(tt.stencil.statements)
    points = 0  # computed by one full tile (its region shrinks by the radius per statement)
    for c in range(1, tt.depth * nst + 1):
        points += math.prod(tt.tile[d] + 2 * (halo[d] - c * radius[d]) for d in range(ndim))
    waits = math.ceil(tiles / athread_emu.CPES) if streamed else 1
    return _counts(get, put, (tile_get, tile_put), fill, tiles, points, waits)


def predict(stencil: ir.StencilIR, shape: tuple[int, ...], schedule: Schedule, chip: Chip | str) -> Prediction:
    """The model's prediction for `schedule` (a dimension it leaves untiled gets the target's default)."""
    chip = as_chip(chip)
    itemsize = 4 if stencil.dtype == "float32" else 8
    full = athread_schedule(schedule, stencil, chip)
    kernels = slave_kernels(stencil, tuple(size for _, size in full.tiles), full.time_depth)
    n = interior(stencil, shape)
    row = padded_shape(stencil, shape)[-1]
    levels = {(a.name, a.dt) for st in stencil.statements for a in st.reads}
    minimum = (len(levels) + len(stencil.statements)) * math.prod(n) * itemsize
    ldm = max(tk.ldm_bytes(itemsize) for tk in kernels)
    fixed = chip.transfer_us * 1e-6
    if isinstance(kernels[0], TimeTileKernel):
        tt, depth = kernels[0], full.time_depth
        c = time_tile_counts(tt, n, row, chip, itemsize)
        t_dma = c.cpe_seconds + c.cpe_transfers * fixed
        work = sum(flops(st) for st in stencil.statements) / len(stencil.statements)
        t_compute = c.cpe_points * work / (chip.cpe_gflops * 1e9)
        # streamed (2D, 3D): the next row's fetch overlaps this row's stages, after each tile's first row;
        # 1D: the next tile's box is fetched while this one computes, after the first tile's
        t_step = max(t_dma, t_compute) + c.fill_seconds + c.fill_transfers * fixed
        return Prediction(full, chip, math.prod(n), c.get_bytes / depth, c.put_bytes / depth, c.transfers / depth,
                          c.blocks / depth, c.seconds / depth, ldm, minimum, t_dma / depth, t_compute / depth,
                          t_step / depth)
    get = put = transfers = blocks = 0
    moving = dma = compute = step = 0.0
    for tk in kernels:
        assert isinstance(tk, TileKernel)
        c = counts(tk, n, row, chip, itemsize)
        get, put, transfers, blocks = get + c.get_bytes, put + c.put_bytes, transfers + c.transfers, blocks + c.blocks
        t_dma = c.cpe_seconds + c.cpe_transfers * fixed
        t_compute = c.cpe_points * flops(tk.statement) / (chip.cpe_gflops * 1e9)
        fill = c.fill_seconds + c.fill_transfers * fixed
        moving, dma, compute = moving + c.seconds, dma + t_dma, compute + t_compute
        step += max(t_dma, t_compute) + fill
    return Prediction(full, chip, math.prod(n), get, put, transfers, blocks, moving, ldm, minimum, dma, compute, step)


TIME_DEPTHS = (2, 4, 8)

#: The DMA floor: `schedule="auto"` ranks candidates whose DMA moves blocks of at least MIN_DMA_BLOCK bytes on
#: average, at MIN_DMA_SHARE or more of the chip's ceiling, before every other (where the grid allows any).
MIN_DMA_BLOCK = 1024
MIN_DMA_SHARE = 0.75


def candidates(stencil: ir.StencilIR, shape: tuple[int, ...], chip: Chip | str) -> list[Schedule]:
    """Tile shapes of powers of two (and the whole interior) per dimension, along the rows also three times
    powers of two (a row as long as the LDM allows moves the longest DMA blocks), whose buffers fit the LDM,
    as spatial tiles and (dirichlet stencils) as time tiles of TIME_DEPTHS steps."""
    itemsize = 4 if stencil.dtype == "float32" else 8
    n = interior(stencil, shape)
    options = []
    for d, extent in enumerate(n):
        sizes = {1 << k for k in range(max(extent, 1).bit_length()) if 1 << k <= extent} | {extent}
        if d == len(n) - 1:
            sizes |= {3 << k for k in range(max(extent, 1).bit_length()) if 3 << k <= extent}
        options.append(sorted(sizes))
    depths = (0, *TIME_DEPTHS) if stencil.boundary == "dirichlet" else (0,)
    out, capacity = [], as_chip(chip).ldm_capacity
    for depth in depths:
        for tile in itertools.product(*options):
            if max(tk.ldm_bytes(itemsize) for tk in slave_kernels(stencil, tile, depth)) <= capacity:
                sizes = dict(zip(stencil.dims, tile))
                out.append(Schedule().time_tile(depth, **sizes) if depth else Schedule().tile(**sizes))
    return out


def fastest(stencil: ir.StencilIR, shape: tuple[int, ...], chip: Chip | str) -> Prediction:
    """The model's least predicted step time over every candidate, whatever its DMA blocks: what the choice
    above the DMA floor is weighed against (docs/athread.md)."""
    every = (predict(stencil, shape, s, chip) for s in candidates(stencil, shape, chip))
    return min(every, key=lambda p: (p.step_s, p.get_bytes + p.put_bytes, p.transfers))


def caveat(p: Prediction) -> str:
    """Why the model trusts its prediction for `p` less (empty: it does not): DMA below the floor, where the
    measured table is widest and the per-transfer cost an assumption (ADR 0056)."""
    floor = MIN_DMA_SHARE * p.chip.ceiling_gb_s
    if p.mean_dma_block >= MIN_DMA_BLOCK and p.dma_gb_s >= floor:
        return ""
    return (f"its DMA moves {p.mean_dma_block:.0f}-byte blocks on average at {p.dma_gb_s:.1f} GB/s, below the floor "
            f"the model ranks first ({MIN_DMA_BLOCK}-byte blocks at {floor:.1f} GB/s, {MIN_DMA_SHARE:.0%} of the "
            f"{p.chip.ceiling_gb_s:.1f} GB/s ceiling), where its bandwidth table is least certain")


def estimate(stencil: ir.StencilIR, shape: tuple[int, ...], schedule: Schedule, chip: Chip | str) -> Estimate:
    """The tuner's view of `predict` (msc/tune/tuner.py ranks by it: candidates above the DMA floor first, then
    the least predicted step time, ties broken by fewer DMA bytes, then fewer transfers)."""
    p = predict(stencil, shape, schedule, chip)
    return Estimate(p.step_s * 1e3, (p.get_bytes + p.put_bytes, p.transfers), p, p.describe(), caveat(p))
