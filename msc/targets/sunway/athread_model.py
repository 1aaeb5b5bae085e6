"""The athread cost model behind `compile(target="athread", schedule="auto")`.

No Sunway processor can be timed here, so the tile shape is chosen by an
explicit model, not by measurement: for each candidate tile that fits the
LDM (all buffers, double buffers included, plus the stack reserve), the
DMA bytes and transfers per step are counted exactly as the generated code
issues them (the emulator's counters agree: tests/test_athread_target.py),
and the step time is predicted as

    spatial tiles, per statement: max(DMA time, compute time) + the first tile's fetch
    time tiles (single-buffered), per step: (DMA time + compute time) / depth
    DMA time     = the busiest CPE's bytes / (the core group's DMA bandwidth / 64)
                   + the busiest CPE's transfers x the per-transfer cost
    compute time = the busiest CPE's points (a time tile's redundant halo
                   points included) x flops per point / the CPE's flop rate

(double buffering overlaps a tile's compute with the next tile's DMA). The
inputs and their sources are in `CHIP_FACTS` and docs/athread.md; the
prediction is printed and is a model, never a measurement.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from msc import ir
from msc.ir.counts import flops
from msc.poly.schedule import Schedule
from msc.runtime import athread_emu
from msc.targets.sunway.athread_plan import TileKernel, TimeTileKernel, athread_schedule, ldm_capacity, slave_kernels
from msc.tune.tuner import Estimate


@dataclass(frozen=True)
class ChipFacts:
    """What the model knows of one core group of a chip (sources: docs/athread.md, 'The model')."""

    name: str
    clock_ghz: float  # CPE clock
    flops_per_cycle: int  # double-precision flops per CPE and cycle (vector FMA)
    dma_gb_s: float  # the core group's memory bandwidth, shared by its 64 CPEs' DMA
    transfer_us: float  # fixed cost of one DMA transfer (the project's assumption: no source gives it)

    @property
    def cpe_gflops(self) -> float:
        return self.clock_ghz * self.flops_per_cycle


CHIP_FACTS = {
    # 1.45 GHz, 8 DP flops/cycle per CPE (11.6 GFLOPS); 136.51 GB/s per chip over 4 core groups
    "sw26010": ChipFacts("sw26010", 1.45, 8, 136.51 / 4, 0.5),
    # 2.25 GHz, 512-bit vectors: 13.8 TFLOPS over 384 CPEs (16 DP flops/cycle); 51.2 GB/s DDR4 per core group
    "sw26010pro": ChipFacts("sw26010pro", 2.25, 16, 51.2, 0.5),
}


def interior(stencil: ir.StencilIR, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The computed points per dimension of arrays of `shape`."""
    if stencil.boundary == "periodic":
        return shape
    return tuple(n - 2 * r for n, r in zip(shape, stencil.radius))


def _sizes(n: int, t: int) -> list[int]:
    return [min(t, n - i) for i in range(0, n, t)]


@dataclass(frozen=True)
class Counts:
    """DMA of one statement per step, summed over the CPEs, and the busiest CPE's share."""

    get_bytes: int
    put_bytes: int
    transfers: int
    tiles: int
    cpe_bytes: int  # the busiest CPE (as many full tiles as any CPE has)
    cpe_transfers: int
    cpe_points: int
    tile_get_bytes: int  # one full tile's fetch
    tile_get_transfers: int


def counts(tk: TileKernel, n: tuple[int, ...], itemsize: int) -> Counts:
    """What the slave function of `tk` moves on an interior of n points per dimension, as the
    generated code issues it: per tile, one transfer per level and one for the output (3D: per plane)."""
    ndim = len(n)
    sizes = [_sizes(n[d], tk.tile[d]) for d in range(ndim)]
    tiles = math.prod(len(s) for s in sizes)
    get_bytes = transfers = 0
    tile_get = tile_transfers = 0
    for lv in tk.levels:
        span = [h - lo for h, lo in zip(lv.hi, lv.lo)]
        get_bytes += math.prod(sum(h + span[d] for h in sizes[d]) for d in range(ndim)) * itemsize
        tile_get += math.prod(tk.tile[d] + span[d] for d in range(ndim)) * itemsize
        if ndim == 3:
            transfers += sum(h + span[0] for h in sizes[0]) * len(sizes[1]) * len(sizes[2])
            tile_transfers += tk.tile[0] + span[0]
        else:
            transfers += tiles
            tile_transfers += 1
    put_bytes = math.prod(n) * itemsize
    transfers += (sum(sizes[0]) * len(sizes[1]) * len(sizes[2])) if ndim == 3 else tiles
    out_transfers = tk.tile[0] if ndim == 3 else 1
    per_cpe = math.ceil(tiles / athread_emu.CPES)
    tile_points = math.prod(tk.tile)
    return Counts(get_bytes, put_bytes, transfers, tiles, per_cpe * (tile_get + tile_points * itemsize),
                  per_cpe * (tile_transfers + out_transfers), per_cpe * tile_points, tile_get, tile_transfers)


@dataclass(frozen=True)
class Prediction:
    """The model's view of one schedule on one problem (per time step)."""

    schedule: Schedule
    chip: str
    points: int  # computed points per step and statement
    get_bytes: float  # per step (a time tile's spawn moves `depth` steps' worth)
    put_bytes: float
    transfers: float
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

    def describe(self) -> str:
        return (f"msc: athread schedule='auto' on {self.chip} chose {self.schedule} by a cost model (a prediction, "
                f"not a measurement: no Sunway processor was timed): {self.step_s * 1e3:.3f} ms/step predicted "
                f"(DMA {self.dma_s * 1e3:.3f} ms, compute {self.compute_s * 1e3:.3f} ms); "
                f"{self.get_bytes + self.put_bytes:.0f} DMA bytes/step ({self.bytes_per_point:.2f} per point, "
                f"minimum {self.min_bytes_per_point:.2f}) in {self.transfers:.0f} transfers; "
                f"LDM {self.ldm_bytes} of {ldm_capacity(self.chip)} bytes per CPE")


def time_tile_counts(tt: TimeTileKernel, n: tuple[int, ...], itemsize: int) -> Counts:
    """What one spawn of a time tile of full depth moves (the generated code's transfers: per tile, every
    level buffer's clipped box and, per written field, its window of levels' tiles; 3D: per plane)."""
    ndim = len(n)
    radius, halo = tt.stencil.radius, tt.halo()
    sizes = [_sizes(n[d], tt.tile[d]) for d in range(ndim)]
    tiles = math.prod(len(s) for s in sizes)
    boxes = []  # per dimension: the clipped box extent of each tile
    for d in range(ndim):
        extent, origin = n[d] + 2 * radius[d], radius[d]
        row = []
        for h in sizes[d]:
            row.append(min(extent, origin + h + halo[d]) - max(0, origin - halo[d]))
            origin += h
        boxes.append(row)
    buffers = sum(count for _, count in tt.arrays())
    levels_out = sum(f.window for f in tt.stencil.written_fields)
    get = buffers * math.prod(sum(b) for b in boxes) * itemsize
    put = levels_out * math.prod(n) * itemsize
    if ndim == 3:
        transfers = buffers * sum(boxes[0]) * len(sizes[1]) * len(sizes[2])
        transfers += levels_out * sum(sizes[0]) * len(sizes[1]) * len(sizes[2])
        tile_transfers = buffers * tt.extent()[0] + levels_out * tt.tile[0]
    else:
        transfers = (buffers + levels_out) * tiles
        tile_transfers = buffers + levels_out
    per_cpe = math.ceil(tiles / athread_emu.CPES)
    tile_get = buffers * math.prod(tt.extent()) * itemsize
    nst = len(tt.stencil.statements)
    points = 0  # computed by one full tile (its region shrinks by the radius per statement)
    for c in range(1, tt.depth * nst + 1):
        points += math.prod(tt.tile[d] + 2 * (halo[d] - c * radius[d]) for d in range(ndim))
    return Counts(get, put, transfers, tiles, per_cpe * (tile_get + levels_out * math.prod(tt.tile) * itemsize),
                  per_cpe * tile_transfers, per_cpe * points, tile_get, tile_transfers)


def predict(stencil: ir.StencilIR, shape: tuple[int, ...], schedule: Schedule, chip: str) -> Prediction:
    """The model's prediction for `schedule` (a dimension it leaves untiled gets the target's default)."""
    facts = CHIP_FACTS[chip]
    itemsize = 4 if stencil.dtype == "float32" else 8
    full = athread_schedule(schedule, stencil, chip)
    kernels = slave_kernels(stencil, tuple(size for _, size in full.tiles), full.time_depth)
    n = interior(stencil, shape)
    get = put = transfers = 0
    dma = compute = step = 0.0
    cpe_bw = facts.dma_gb_s * 1e9 / athread_emu.CPES
    levels = {(a.name, a.dt) for st in stencil.statements for a in st.reads}
    minimum = (len(levels) + len(stencil.statements)) * math.prod(n) * itemsize
    ldm = max(tk.ldm_bytes(itemsize) for tk in kernels)
    if isinstance(kernels[0], TimeTileKernel):  # single-buffered: fetch, compute `depth` steps, write back
        tt, depth = kernels[0], full.time_depth
        c = time_tile_counts(tt, n, itemsize)
        t_dma = c.cpe_bytes / cpe_bw + c.cpe_transfers * facts.transfer_us * 1e-6
        work = sum(flops(st) for st in stencil.statements) / len(stencil.statements)
        t_compute = c.cpe_points * work / (facts.cpe_gflops * 1e9)
        return Prediction(full, chip, math.prod(n), c.get_bytes / depth, c.put_bytes / depth,
                          c.transfers / depth, ldm, minimum, t_dma / depth, t_compute / depth,
                          (t_dma + t_compute) / depth)
    for tk in kernels:
        assert isinstance(tk, TileKernel)
        c = counts(tk, n, itemsize)
        get, put, transfers = get + c.get_bytes, put + c.put_bytes, transfers + c.transfers
        t_dma = c.cpe_bytes / cpe_bw + c.cpe_transfers * facts.transfer_us * 1e-6
        t_compute = c.cpe_points * flops(tk.statement) / (facts.cpe_gflops * 1e9)
        fill = c.tile_get_bytes / cpe_bw + c.tile_get_transfers * facts.transfer_us * 1e-6
        dma, compute, step = dma + t_dma, compute + t_compute, step + max(t_dma, t_compute) + fill
    return Prediction(full, chip, math.prod(n), get, put, transfers, ldm, minimum, dma, compute, step)


TIME_DEPTHS = (2, 4, 8)


def candidates(stencil: ir.StencilIR, shape: tuple[int, ...], chip: str) -> list[Schedule]:
    """Tile shapes of powers of two (and the whole interior) per dimension whose buffers fit the LDM,
    as spatial tiles and (dirichlet stencils) as time tiles of TIME_DEPTHS steps."""
    itemsize = 4 if stencil.dtype == "float32" else 8
    n = interior(stencil, shape)
    options = []
    for extent in n:
        sizes = {1 << k for k in range(max(extent, 1).bit_length()) if 1 << k <= extent} | {extent}
        options.append(sorted(sizes))
    depths = (0, *TIME_DEPTHS) if stencil.boundary == "dirichlet" else (0,)
    out = []
    for depth in depths:
        for tile in itertools.product(*options):
            if max(tk.ldm_bytes(itemsize) for tk in slave_kernels(stencil, tile, depth)) <= ldm_capacity(chip):
                sizes = dict(zip(stencil.dims, tile))
                out.append(Schedule().time_tile(depth, **sizes) if depth else Schedule().tile(**sizes))
    return out


def estimate(stencil: ir.StencilIR, shape: tuple[int, ...], schedule: Schedule, chip: str) -> Estimate:
    """The tuner's view of `predict` (msc/tune/tuner.py ranks by it: the least
    predicted step time, ties broken by fewer DMA bytes, then fewer transfers)."""
    p = predict(stencil, shape, schedule, chip)
    return Estimate(p.step_s * 1e3, (p.get_bytes + p.put_bytes, p.transfers), p, p.describe())
