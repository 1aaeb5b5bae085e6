"""The OpenMP C target: an x86/CPU platform x the C printer x gcc.

The whole time loop runs in C inside one `omp parallel` region; the loop
the schedule makes parallel gets `omp for`, a vector loop `omp simd`, and
the innermost loop stores whole aligned cache lines (streaming on request,
with prefetches on request: `passes/x86.py`). Written fields live in ring
buffers of `slots` levels, addressed through restrict pointers declared
once per time step, so no level is ever copied.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen import register_node
from msc.codegen.lower import extent
from msc.codegen.printers.c import c_int
from msc.codegen.row_sums import row_sums
from msc.poly import PolyIR
from msc.poly.schedule import LoweredSchedule, Schedule
from msc.targets import ctarget
from msc.targets.cpu import in_place, model
from msc.targets.cpu import openmp_pass as openmp
from msc.targets.cpu import x86_pass as x86
from msc.tune.tuner import Estimate

NAME = "openmp"
# cache_read/cache_write buffers live on a thread's stack; all of a thread's
# buffers together get what one buffer of 65536 float64 points took before
STACK_BYTES = 512 << 10


#: time tiles with at least this many tiled dimensions hand out a wavefront's tiles one at a time: 3D tiles
#: ran 5-12% faster so (heat3d 256^3 time_tile(32, x=16, y=32) 4.79-5.00 against 5.16-5.52 ms/step, box3d27p
#: time_tile(8, x=32, y=64) 9.53-10.02 against 10.53-10.76; 2 threads, AVX2); 2D tiles of one tiled dimension
#: ran as fast or slower (heat2d 4096^2 time_tile(8, x=32): 3.65-4.63 static, 4.23-5.07 dynamic)
DYNAMIC_TILED_DIMS = 2


def wavefront_tiles(lowered: LoweredSchedule) -> bool:
    """Whether the parallel loop runs the tiles of a time tile's wavefront with DYNAMIC_TILED_DIMS or more
    tiled dimensions (not the points inside a tile, as `parallel("x")` asks)."""
    par = lowered.parallel_dim
    return (bool(lowered.schedule.time_depth) and len(lowered.tiles) >= DYNAMIC_TILED_DIMS
            and par is not None and par in lowered.tiles)


def pipeline_columns(poly: PolyIR, lowered: LoweredSchedule) -> ix.Expr:
    """At least the columns of one band of a pipelined time tile: the column of a point at step t of
    statement k is floor((i + s*t + k*r) / size), with s = statements x r, over i < P and depth steps."""
    assert lowered.parallel_dim is not None
    d, size = lowered.tiles[lowered.parallel_dim]
    statements, r = len(poly.ir.statements), poly.ir.radius[d]
    return ix.Op("/", extent(d) + statements * r * (lowered.schedule.time_depth + 1), ix.Lit(size)) + 2


class CPUPlatform(ctarget.Platform):
    name = "x86 (OpenMP)"
    kernel_template = "openmp_kernel.c.j2"
    fused_multiply_add = True
    capacity: ClassVar[dict[k.Space, int]] = {k.Space.STACK: STACK_BYTES}
    tunes = True
    thread_counts = True

    def tuning_space(self, poly: PolyIR, shape: tuple[int, ...], steps: int) -> list[Schedule]:
        """Single sweeps (2.5D blocks in 3D, with and without streaming stores
        and prefetching) and skewed time tiles of several depths and widths
        (in 3D pipelined, not in wavefronts)."""
        stencil = poly.ir
        base = Schedule()
        out = [base]
        dims = stencil.dims
        if stencil.boundary == "dirichlet":
            widths = [8, 16, 32, 64] if stencil.ndim > 1 else [256, 1024, 4096]
            # fixed depths, plus the ones that split this run into one or two whole time tiles
            depths = sorted({4, 8, 16} | {d for d in (steps // 2, steps) if 4 < d <= 32})
            for depth in depths:
                for w in widths:
                    # 3D tiles pipelined (Schedule.pipeline): a band's tiles in plain order, each finding its
                    # neighbours' faces in cache, ran 1.08-1.23x faster than in wavefronts on 21 tile shapes
                    # (heat3d and box3d27p 256^3, 64 steps, 2 threads, a Xeon with AVX-512: heat3d
                    # time_tile(16, x=8, y=32) 8.02 against 9.07 ms/step, box3d27p time_tile(32, x=8, y=32)
                    # 9.08 against 10.00; 1 thread 16.5 against 19.7). With another process holding a core,
                    # wavefronts on 2 threads ran 1.1-1.2x faster, both slower than the pipeline on 1 thread.
                    if stencil.ndim == 3:
                        for w2 in (16, 32, 64):
                            out.append(base.time_tile(depth, x=w, y=w2).pipeline())
                    else:
                        out.append(base.time_tile(depth, **{dims[0]: w}))
        if in_place.refusal(stencil) is None:
            # first among the sweeps, which the model ranks by bytes with the streamed ones: heat3d 256^3 ran
            # tile(y=128).update_in_place() 8.8-9.2 ms/step against 9.6-10.1 for tile(y=128).prefetch(512)
            out += [base.tile(y=b).update_in_place() for b in (64, 128, 32)]
        sweeps = [base]
        if stencil.ndim == 3:  # 2.5D blocking: y blocks swept along x keep three x-planes in cache
            sweeps += [base.tile(y=b) for b in (16, 32, 64, 128)]
            sweeps += [base.tile(x=16, y=b) for b in (16, 32)]
        if stencil.ndim == 2:
            sweeps += [base.tile(y=b) for b in (512, 1024)]
        if stencil.ndim == 1:
            sweeps += [base.tile(x=b) for b in (4096, 16384)]
        # streaming stores and prefetching pay off once the fields outgrow the caches: only timing tells
        lined = [s for s in sweeps if s.tiles or stencil.ndim > 1]  # whole cache lines need a private innermost loop
        if stencil.ndim == 2:
            # rows jammed in pairs or fours (a line of each in turn: as many streams from memory as rows) ran
            # streamed sweeps 1.2-1.4x faster at 4096^2 (heat2d 8.23 and 7.74 ms/step against 10.94, box2d9p
            # 9.01 and 8.70 against 10.96; 2 threads, Xeon), 3D ones no faster (heat3d 13.79 against 12.59).
            # First among the streamed sweeps, which the cost model cannot tell apart: these are timed.
            out += [base.tile(x=64).unroll("x", rows).stream_stores().prefetch(d) for rows in (2, 4)
                    for d in (256, 512)]
        out += sweeps + [s.stream_stores() for s in lined] + [s.stream_stores().prefetch(512) for s in lined]
        if lined:
            out += [lined[0].prefetch(d) for d in (256, 512, 1024)]
            out += [lined[0].stream_stores().prefetch(d) for d in (256, 1024)]
        return list(dict.fromkeys(out))

    def refinements(self, schedule: Schedule, max_threads: int) -> list[Schedule]:
        """Prefetching for a sweep that streams from memory (not for a time tile: its
        working set stays in cache; measured at 256^3, heat3d and box3d27p, a prefetching
        time tile was within 2% of the plain one either way, and timing two more variants
        cost a first tuning about 4 s), a streamed sweep with ordinary stores (the model
        ranks it by the bytes the streamed stores save, which need not buy time: heat3d's
        tile(y=128).prefetch(512) ran 9.64-9.82 ms/step against 10.27-10.32 streamed at
        256^3 on 2 threads, the reads of three planes bounding both), and fewer threads:
        halves (memory-bound kernels may run as fast on fewer cores)."""
        plain_sweep = not (schedule.prefetch_distance or schedule.time_depth or schedule.in_place)
        out = [schedule.prefetch(64), schedule.prefetch(256)] if plain_sweep else []
        if schedule.streaming and not schedule.time_depth:
            out.append(replace(schedule, streaming=False))
        n = max_threads
        while n > 1:
            n //= 2
            out.append(schedule.with_threads(n))
        return out

    def cost(self, poly: PolyIR, shape: tuple[int, ...], steps: int, schedule: Schedule) -> Estimate:
        """The model that decides which candidates are timed (msc/targets/cpu/model.py)."""
        return model.estimate(poly, shape, schedule)

    def rewrite(self, kernel: k.Kernel, poly: PolyIR, schedule: LoweredSchedule) -> tuple[k.Kernel, dict[str, Any]]:
        if schedule.schedule.in_place:
            in_place.check(poly, schedule)
        rows = x86.row_dim(poly, schedule)
        if rows is not None:
            kernel = row_sums(kernel, rows, in_cache=bool(schedule.schedule.time_depth),
                              ring_dim=x86.column_dim(poly, schedule))
        kernel, lines = x86.line_stores(kernel, poly, schedule)
        if schedule.schedule.streaming:
            kernel = x86.stream_fences(kernel)
        kernel = openmp.map_loops(kernel, tiles_dynamic=wavefront_tiles(schedule))
        columns = None
        if schedule.schedule.pipelined:
            kernel = openmp.pipeline_waits(kernel, schedule.names.index("t_tile"), schedule.parallel_dim)
            columns = c_int(pipeline_columns(poly, schedule))
        rings = None  # the buffers the template allocates around msc_run (a box entry runs the plain sweep)
        if schedule.schedule.in_place:
            if not kernel.box:
                kernel = in_place.in_place_kernel(kernel, poly, schedule)
            rings = dict(thread=c_int(in_place.thread_points(poly, schedule)),
                         saved=c_int(in_place.saved_points(poly, schedule)))
        return kernel, dict(lines=lines, streaming=schedule.schedule.streaming,
                            suffix="pd" if poly.ir.dtype == "float64" else "ps", pipeline_columns=columns,
                            in_place=rings)


class OpenMPTarget(ctarget.CTarget):
    """OpenMP C: JIT-compiled in process, or emitted as a standalone tree."""

    def __init__(self) -> None:
        super().__init__(NAME, CPUPlatform(), ctarget.Toolchain(),
                         schedule_options=("stream_stores", "prefetch", "pipeline", "update_in_place",
                                           "with_threads"))


def generate(poly: PolyIR, schedule: LoweredSchedule, box: bool = False) -> str:
    """The OpenMP C source of the kernel for `poly` under a lowered `schedule`."""
    return OpenMPTarget().generate(poly, schedule, box)


def kernel_key(stencil: ir.StencilIR, schedule: Schedule | None, box: bool) -> str:
    """The kernel index key of an OpenMP kernel."""
    return ctarget.kernel_key(NAME, stencil, schedule, box)


register_node(NAME, OpenMPTarget)
