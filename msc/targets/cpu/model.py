"""The CPU cost model the tuner ranks candidates by (msc/tune/tuner.py): it
decides which few schedules are timed, and is never reported as a timing.

Per step, the largest of
  memory   the bytes a sweep moves from memory (each level read once, each
           written level once, twice without streaming stores or an in-place
           sweep: the line is read before it is written), a time tile's
           divided by its depth, at the measured memory bandwidth;
  cache    a time tile's sweeps inside the tile, each step reading the tile
           and its halo of one radius again, at the bandwidth of the cache
           level that holds what one step hands the next (the tile and its
           halo, every level: per core L2, or the core's share of L3;
           CACHE_SPEEDUP times memory's), or memory's when none does;
  compute  flops per point (after row sums: msc/codegen/row_sums.py) x points
           / (cores x CORE_GFLOPS).
"""

from __future__ import annotations

import math

from msc.codegen.row_sums import summed_flops
from msc.poly import PolyIR
from msc.poly.schedule import Schedule
from msc.runtime.threads import usable_cores
from msc.tune.machine import cache_bytes, memory_bandwidth
from msc.tune.tuner import Estimate

CACHE_SPEEDUP = {2: 4.0, 3: 2.0}  # a cache level's bandwidth over memory's, for a core streaming through it
#: what a vectorised stencil loop sustains per core: heat2d's and box2d9p's best time tiles at 4096^2 ran
#: 25-30 GFlop/s per core on the 2-core reference machine (8 before: every 2D time tile tied at the compute
#: bound, so the model could not rank the one whose step fits the L2 first)
CORE_GFLOPS = 25.0


def estimate(poly: PolyIR, shape: tuple[int, ...], schedule: Schedule) -> Estimate:
    stencil = poly.ir
    itemsize = 4 if stencil.dtype == "float32" else 8
    interior = [n - 2 * r if stencil.boundary == "dirichlet" else n for n, r in zip(shape, stencil.radius)]
    points = math.prod(interior)
    levels = len({(a.name, a.dt) for st in stencil.statements for a in st.reads})
    writes = len(stencil.statements) * (1 if schedule.streaming or schedule.in_place else 2)
    sweep = points * (levels + writes) * itemsize
    bandwidth, cores = memory_bandwidth(), usable_cores()
    in_cache = bool(schedule.time_depth)
    compute = points * sum(summed_flops(st, in_cache) for st in stencil.statements) / (cores * CORE_GFLOPS * 1e9)
    memory = sweep / bandwidth
    cache = 0.0
    if schedule.time_depth:
        depth, tiles = schedule.time_depth, dict(schedule.tiles)
        step = math.prod(tiles[d] + 2 * r if d in tiles else n for d, r, n in zip(stencil.dims, stencil.radius, shape))
        halo = step / math.prod(min(tiles.get(d, n), n) for d, n in zip(stencil.dims, interior))
        slots = sum(f.slots if f.written else 1 for f in stencil.fields)
        working = step * slots * itemsize
        caches = cache_bytes()
        fits = [level for level, size in ((2, caches.get(2, 0)), (3, caches.get(3, 0) // cores)) if working <= size]
        if fits:
            memory /= depth
            cache = sweep * halo / (bandwidth * CACHE_SPEEDUP[fits[0]])
        else:
            memory *= halo
    ms = 1e3 * max(memory, cache, compute)
    return Estimate(ms, text=f"{schedule}: {ms:.3f} ms/step modelled (memory {memory * 1e3:.3f}, "
                             f"cache {cache * 1e3:.3f}, compute {compute * 1e3:.3f})")
