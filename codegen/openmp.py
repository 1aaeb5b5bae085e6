"""The OpenMP C target: an x86/CPU platform x the C printer x gcc.

The whole time loop runs in C inside one `omp parallel` region; the loop
the schedule makes parallel gets `omp for`, a vector loop `omp simd`, and
the innermost loop stores whole aligned cache lines (streaming on request,
with prefetches on request: `passes/x86.py`). Written fields live in ring
buffers of `slots` levels, addressed through restrict pointers declared
once per time step, so no level is ever copied.
"""

from __future__ import annotations

from typing import Any, ClassVar

from msc import ir
from msc.codegen import ctarget, register
from msc.codegen import kernel_ir as k
from msc.codegen.mpi import MPITarget
from msc.codegen.passes import openmp, x86
from msc.poly import PolyIR
from msc.schedule import LoweredSchedule, Schedule

NAME = "openmp"
# cache_read/cache_write buffers live on a thread's stack; all of a thread's
# buffers together get what one buffer of 65536 float64 points took before
STACK_BYTES = 512 << 10


class CPUPlatform(ctarget.Platform):
    name = "x86 (OpenMP)"
    kernel_template = "openmp_kernel.c.j2"
    capacity: ClassVar[dict[k.Space, int]] = {k.Space.STACK: STACK_BYTES}
    tunes = True

    def rewrite(self, kernel: k.Kernel, poly: PolyIR, schedule: LoweredSchedule) -> tuple[k.Kernel, dict[str, Any]]:
        kernel, lines = x86.line_stores(kernel, poly, schedule)
        if schedule.schedule.streaming:
            kernel = x86.stream_fences(kernel)
        kernel = openmp.map_loops(kernel)
        return kernel, dict(lines=lines, streaming=schedule.schedule.streaming,
                            suffix="pd" if poly.ir.dtype == "float64" else "ps")


class OpenMPTarget(ctarget.CTarget):
    """OpenMP C: JIT-compiled in process, or emitted as a standalone tree."""

    def __init__(self) -> None:
        super().__init__(NAME, CPUPlatform(), ctarget.Toolchain())


def generate(poly: PolyIR, schedule: LoweredSchedule, box: bool = False) -> str:
    """The OpenMP C source of the kernel for `poly` under a lowered `schedule`."""
    return OpenMPTarget().generate(poly, schedule, box)


def kernel_key(stencil: ir.StencilIR, schedule: Schedule | None, box: bool) -> str:
    """The kernel index key of an OpenMP kernel."""
    return ctarget.kernel_key(NAME, stencil, schedule, box)


register(NAME, OpenMPTarget)
register(f"{NAME}+mpi", lambda: MPITarget(NAME))
