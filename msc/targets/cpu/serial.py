"""The serial C target: the same kernel IR and C printer as OpenMP, on one
core, with no OpenMP pass, pragma or runtime (built without -fopenmp). The
tests run generated stencils through it against the reference; it shows
what a new target is: a platform, a template and a registration."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from msc.codegen import kernel_ir as k
from msc.codegen import register_node
from msc.poly import PolyIR
from msc.poly.schedule import LoweredSchedule
from msc.runtime.build import DEFAULT_CFLAGS
from msc.targets import ctarget

NAME = "serial"


class SerialPlatform(ctarget.Platform):
    name = "one core"
    kernel_template = "serial_kernel.c.j2"
    fused_multiply_add = True
    capacity: ClassVar[dict[k.Space, int]] = {k.Space.STACK: 512 << 10}  # as target 'openmp'

    def rewrite(self, kernel: k.Kernel, poly: PolyIR, schedule: LoweredSchedule) -> tuple[k.Kernel, dict[str, Any]]:
        return k.transform_kernel(kernel, _one_worker), {}


def _one_worker(node: k.Node) -> k.Node:
    """One worker never waits for others: no barriers."""
    if isinstance(node, k.Block) and any(isinstance(n, k.Barrier) for n in node.body):
        return replace(node, body=tuple(n for n in node.body if not isinstance(n, k.Barrier)))
    return node


class SerialTarget(ctarget.CTarget):
    """Plain C on one core (in process only)."""

    def __init__(self) -> None:
        flags = tuple(f for f in DEFAULT_CFLAGS if f != "-fopenmp")
        super().__init__(NAME, SerialPlatform(), ctarget.Toolchain(flags=flags, main_template="", makefile_template=""),
                         schedule_options=("with_threads",))


register_node(NAME, SerialTarget)
