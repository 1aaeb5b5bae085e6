"""MPI over a node target: "<node>+mpi" (registered: openmp+mpi).

`emit` writes a standalone tree that builds with mpicc and runs with
`mpiexec -n P`: one node kernel per phase of the halo plan (the node
target's source under the given schedule, its entry points renamed at
compile time; step by step, each exchange overlaps the next phase's inner
box, computed by the box entry point; a time-tiled schedule exchanges deeper
halos every time-tile depth steps, see codegen/halo_plan.py), the driver
mpi_main.c.j2, the halo library runtime/halo.c and a Makefile. `compile`
gives the node target's in-process kernel; distribute it with
`run(..., comm=comm)`, which compiles its phases with the same node target.
"""

from __future__ import annotations

from pathlib import Path

import msc
from msc.codegen import get_target, register
from msc.codegen.ctarget import CTarget, signature
from msc.codegen.halo_plan import plan
from msc.codegen.printers.c import C_TYPES
from msc.codegen.templates_env import render
from msc.errors import ScheduleError
from msc.poly import PolyIR
from msc.runtime.build import write_tree
from msc.runtime.halo import HERE as RUNTIME_DIR
from msc.runtime.kernel import CompiledKernel
from msc.schedule import as_schedule

MPI_TYPES = {"float64": "MPI_DOUBLE", "float32": "MPI_FLOAT"}


class MPITarget:
    """MPI ranks, each running the node target `node` on its block."""

    def __init__(self, node: str) -> None:
        target = get_target(node)
        assert isinstance(target, CTarget), f"{node} is not a C node target"
        self.node = target
        self.name = f"{node}+mpi"
        self.compile_options: tuple[str, ...] = ()
        self.emit_options: tuple[str, ...] = ()

    def compile(self, poly: PolyIR, *, threads: int | None = None, schedule: object = None) -> CompiledKernel:
        if schedule not in (None, "default"):
            raise ScheduleError(
                f"compile(target={self.name!r}) takes no schedule (got {schedule!r}): pass it to "
                f"msc.runtime.distributed.DistributedKernel(..., schedule=...), or emit({self.name!r}, schedule=...)"
            )
        kernel = self.node.compile(poly, threads=threads)
        assert isinstance(kernel, CompiledKernel)
        return kernel

    def emit(self, poly: PolyIR, directory: Path, *, schedule: object = None) -> Path:
        """main.c, halo.c, halo.h, npy.h, one kernel_phase<k>.c per phase and a Makefile."""
        sched = as_schedule(schedule)
        stencil = poly.ir
        halo_plan = plan(stencil, sched)
        ctype = C_TYPES[stencil.dtype]
        names = [f.name for f in stencil.fields]
        overlap = halo_plan.depth == 1
        phases = [dict(file=f"kernel_phase{k}.c", function=f"msc_run_phase{k}", box_function=f"msc_run_box_phase{k}",
                       exchange=[names.index(n) for n in p.exchange])
                  for k, p in enumerate(halo_plan.phases)]
        call_args = [f"buffers[{k}]" for k in range(len(stencil.fields))]
        call_args += [f"params[{k}]" for k in range(len(stencil.params))]
        call_args += [f"padded[{3 - stencil.ndim + d}]" for d in range(stencil.ndim)]
        call_args += ["t", "n", "nthreads"]
        lead = [0] * (3 - stencil.ndim)
        values = dict(
            version=msc.__version__,
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
        )
        files = {p["file"]: self.node.source(PolyIR(ph.stencil), sched, box=overlap)
                 for p, ph in zip(phases, halo_plan.phases)}
        files.update({
            "main.c": render("mpi_main.c.j2", **values),
            "halo.c": (RUNTIME_DIR / "halo.c").read_text(),
            "halo.h": (RUNTIME_DIR / "halo.h").read_text(),
            "npy.h": render("npy.h"),
            "Makefile": render("mpi_Makefile.j2", **values),
        })
        return write_tree(directory, files)


register("openmp+mpi", lambda: MPITarget("openmp"))
