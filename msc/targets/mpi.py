"""MPI over any node target: "<node>+mpi", registered with the node by
`register_node` (openmp+mpi, serial+mpi).

`emit` writes a standalone tree that builds with mpicc and runs with
`mpiexec -n P`: one node kernel per phase of the halo plan (the node
target's files under the given schedule, entry points msc_run_phase<k>;
step by step, each exchange overlaps the next phase's inner box, computed
by the box entry point; a time-tiled schedule exchanges deeper halos every
time-tile depth steps, see msc/codegen/halo_plan.py), the driver
mpi_main.c.j2, the halo library msc/runtime/halo.c and a Makefile. What the
node target supplies (files, Make rules, flags, threads) is the interface
of msc/targets/node.py; nothing here knows a node target. `compile` gives the
node target's in-process kernel; distribute it with `run(..., comm=comm)`,
which compiles its phases with the same node target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from msc.codegen import get_target, register_wrapper
from msc.codegen.halo_plan import plan
from msc.codegen.printers.c import C_TYPES
from msc.errors import ScheduleError, TargetError
from msc.poly import PolyIR
from msc.poly.schedule import as_schedule
from msc.runtime.buffers import slot_spread
from msc.runtime.build import write_tree
from msc.runtime.halo import HERE as RUNTIME_DIR
from msc.targets.ctarget import schedule_threads, signature
from msc.targets.node import NodeTarget
from msc.targets.templates_env import render
from msc.version import __version__

MPI_TYPES = {"float64": "MPI_DOUBLE", "float32": "MPI_FLOAT"}


class MPITarget:
    """MPI ranks, each running the node target `node` on its block."""

    def __init__(self, node: str) -> None:
        target = get_target(node)
        if not all(callable(getattr(target, m, None)) for m in ("node_build", "node_kernel")):
            raise TargetError(f"target {node!r} cannot run under MPI: it does not implement the node "
                              "interface (node_build, node_kernel: see msc.targets.node)")
        self.node: NodeTarget = target  # type: ignore[assignment]
        self.name = f"{node}+mpi"
        self.compile_options: tuple[str, ...] = target.compile_options
        self.emit_options: tuple[str, ...] = target.emit_options
        self.schedule_options: tuple[str, ...] = target.schedule_options

    def compile(self, poly: PolyIR, *, threads: int | None = None, schedule: object = None, **options: Any) -> Any:
        if schedule not in (None, "default"):
            raise ScheduleError(
                f"compile(target={self.name!r}) takes no schedule (got {schedule!r}): pass it to "
                f"msc.runtime.distributed.DistributedKernel(..., schedule=...), or emit({self.name!r}, schedule=...)"
            )
        return self.node.compile(poly, threads=threads, **options)

    def emit(self, poly: PolyIR, directory: Path, *, schedule: object = None, **options: Any) -> Path:
        """main.c, halo.c, halo.h, npy.h, the node's files for each phase (and its
        support files) and a Makefile."""
        sched = as_schedule(schedule)
        stencil = poly.ir
        halo_plan = plan(stencil, sched)
        ctype = C_TYPES[stencil.dtype]
        names = [f.name for f in stencil.fields]
        overlap = halo_plan.depth == 1
        build = self.node.node_build(**options)
        kernels = [self.node.node_kernel(PolyIR(p.stencil), sched, f"phase{k}", overlap, **options)
                   for k, p in enumerate(halo_plan.phases)]
        phases = [dict(function=kernel.entry, box_function=kernel.box_entry,
                       exchange=[names.index(n) for n in p.exchange])
                  for kernel, p in zip(kernels, halo_plan.phases)]
        call_args = [f"buffers[{k}]" for k in range(len(stencil.fields))]
        call_args += [f"params[{k}]" for k in range(len(stencil.params))]
        call_args += [f"padded[{3 - stencil.ndim + d}]" for d in range(stencil.ndim)]
        call_args += ["t", "n", "nthreads"]
        lead = [0] * (3 - stencil.ndim)
        values = dict(
            slot_spread=slot_spread(stencil),
            version=__version__,
            name=stencil.name,
            ndim=stencil.ndim,
            ctype=ctype,
            mpi_type=MPI_TYPES[stencil.dtype],
            descr="<f8" if stencil.dtype == "float64" else "<f4",
            params=stencil.params,
            fields=stencil.fields,
            periodic=stencil.boundary == "periodic",
            radius3=lead + list(stencil.radius),
            halo3=lead + list(halo_plan.halo),
            directions=[[list(v) for v in halo_plan.directions.get(n, ())] for n in names],
            phases=phases,
            depth=halo_plan.depth,
            parameters=signature(stencil).c_parameters(),
            box_parameters=signature(stencil).c_parameters(box=True),
            overlap=overlap,
            call_args=call_args,
            statements=len(stencil.statements),
            threads=build.threads,
            schedule_threads=schedule_threads(sched),
            build=build,
            rules=[*build.rules, *(rule for kernel in kernels for rule in kernel.rules)],
        )
        files = {
            "main.c": render("mpi_main.c.j2", **values),
            "halo.c": (RUNTIME_DIR / "halo.c").read_text(),
            "halo.h": (RUNTIME_DIR / "halo.h").read_text(),
            "npy.h": render("npy.h"),
            "Makefile": render("mpi_Makefile.j2", **values),
        }
        for extra in [build.files or {}, *(kernel.files for kernel in kernels)]:
            clash = set(files) & set(extra)
            if clash:
                raise TargetError(f"target {self.node.name!r} emits {', '.join(sorted(clash))} twice in one MPI program")
            files.update(extra)
        return write_tree(directory, files)


register_wrapper("mpi", MPITarget)
