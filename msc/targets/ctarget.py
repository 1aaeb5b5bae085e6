"""C-family node targets as a composition: platform x printer x toolchain.

- A `Platform` says how the kernel IR maps to hardware: its passes (loop
  mappings, line stores, fences), the capacity of each memory space per
  worker, the file scaffolding around the entry points (parallel region,
  runtime helpers), and whether `schedule="auto"` can tune on it.
- The printer (`printers/c.py`) turns the kernel IR into C statements.
- A `Toolchain` is the compiler and its flags for the JIT build, and the
  templates of an emitted tree.

`CTarget` composes them into a target: `source` (lower, check capacities,
run the platform's passes, print), `compile` (through the kernel index:
a kernel built before is loaded without any isl work) and `emit`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, TypeVar

from msc import ir
from msc.codegen import check_schedule_options
from msc.codegen import kernel_ir as k
from msc.codegen.lower import field_name, lower_kernel, param_name
from msc.codegen.printers.c import C_TYPES, CPrinter, int_helpers
from msc.errors import ScheduleError, TargetError
from msc.poly import PolyIR
from msc.poly.schedule import LoweredSchedule, Schedule, as_schedule, describe_loops, lower
from msc.runtime.buffers import slot_spread
from msc.runtime.build import (
    DEFAULT_CC,
    DEFAULT_CFLAGS,
    atomic_write_text,
    build_shared_library,
    cache_dir,
    generator_fingerprint,
    host_identity,
    is_intact,
    write_tree,
)
from msc.runtime.kernel import BOX_ENTRY, ENTRY, CompiledKernel
from msc.targets.templates_env import render
from msc.version import __version__

if TYPE_CHECKING:
    from msc.targets.node import NodeBuild, NodeKernel
    from msc.tune.tuner import AutoKernel, Estimate

Loaded = TypeVar("Loaded")  # what a kernel index entry loads into

@dataclass(frozen=True)
class KernelSignature:
    """What the caller passes to msc_run, in order."""

    fields: tuple[ir.FieldDecl, ...]
    params: tuple[str, ...]
    ndim: int

    def c_parameters(self, box: bool = False, restrict: str = "restrict") -> list[str]:
        """msc_run's parameters; `box`: msc_run_box's, which adds the box
        lo[d] <= i_d < hi[d] (within the domain r_d <= i_d < P_d - r_d) after the extents;
        `restrict`: how the language spells it."""
        out = []
        for f in self.fields:
            c = field_name(f.name)
            out.append(f"real *{restrict} {c}_buf" if f.written else f"const real *{restrict} {c}")
        out += [f"double {param_name(p)}_arg" for p in self.params]
        out += [f"long P{d}" for d in range(self.ndim)]
        out += ["const long *lo", "const long *hi"] if box else []
        return out + ["long t0", "long T", "int nthreads"]


def signature(stencil: ir.StencilIR) -> KernelSignature:
    return KernelSignature(stencil.fields, stencil.params, stencil.ndim)


class Platform:
    """How a kernel maps to one kind of hardware (subclassed per platform).

    Tuning (`schedule="auto"`, msc/tune/tuner.py): a platform that `tunes` offers
    `tuning_space`, the schedules worth trying for a stencil, problem size
    and step count. A platform that `measures` has them timed on its
    hardware (compiled kernels report `last_run.seconds`: wall time on a
    CPU, device time on a GPU), the finalists again with `refinements` of
    the winner; one that does not (a simulator, a chip not at hand) ranks
    them by its `cost` model and runs nothing.
    """

    name = ""
    kernel_template = ""  # the C file around the entry points
    capacity: ClassVar[dict[k.Space, int]] = {}  # bytes of each per-worker memory space
    tunes = False  # schedule="auto" chooses among tuning_space on this platform
    measures = True  # by timing kernels (else by `cost`)
    thread_counts = False  # kernels run on a thread count the chosen schedule records (with_threads)
    fused_multiply_add = False  # multiply-adds print as fma (rounded once): where the hardware fuses them

    def rewrite(self, kernel: k.Kernel, poly: PolyIR, schedule: LoweredSchedule) -> tuple[k.Kernel, dict[str, Any]]:
        """The kernel after this platform's passes, and the values its template needs."""
        return kernel, {}

    def tuning_space(self, poly: PolyIR, shape: tuple[int, ...], steps: int) -> list[Schedule]:
        """The schedules worth trying on arrays of `shape` for runs of `steps` steps."""
        return [Schedule()]

    def refinements(self, schedule: Schedule, max_threads: int) -> list[Schedule]:
        """Variants of the winning `schedule` timed against it in a last round."""
        return []

    def trial_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The inputs candidates are timed on (a kernel that runs arrays in place
        gets copies, so that trial runs leave the user's arrays alone)."""
        return inputs

    def default_time_tile(self, stencil: ir.StencilIR, depth: int) -> dict[str, int]:
        """The tile of `time_tile(depth)` when the schedule names no sizes: on a CPU, the outer
        dimensions in widths the tuner finds good on most stencils (32 rows in 2D, 16 x 32 in 3D,
        2048 points in 1D), the innermost untiled."""
        dims = stencil.dims
        return {dims[0]: 2048} if stencil.ndim == 1 else {dims[0]: 32} if stencil.ndim == 2 else {
            dims[0]: 16, dims[1]: 32}

    def cost(self, poly: PolyIR, shape: tuple[int, ...], steps: int, schedule: Schedule) -> Estimate:
        """The modelled time per step of `schedule` (a platform that does not measure
        must give it; a ScheduleError for a candidate the model refuses)."""
        raise NotImplementedError(f"platform {self.name!r} has no cost model")


@dataclass(frozen=True)
class Toolchain:
    cc: str = DEFAULT_CC  # the default; $CC overrides it
    flags: tuple[str, ...] = DEFAULT_CFLAGS
    main_template: str = "main.c.j2"
    makefile_template: str = "Makefile.j2"


def check_capacity(kernel: k.Kernel, poly: PolyIR, schedule: LoweredSchedule, platform: Platform, target: str) -> None:
    """Every per-worker buffer of the kernel fits its memory space: else a
    ScheduleError naming the buffers' fields, the tile and both sizes."""
    itemsize = 4 if poly.ir.dtype == "float32" else 8
    used: dict[k.Space, list[k.Buffer]] = {}
    for node in kernel.body.body:
        if isinstance(node, k.Buffer) and node.field is not None:
            used.setdefault(node.space, []).append(node)
    for space, buffers in used.items():
        need = sum((b.points() or 0) * itemsize for b in buffers)
        have = platform.capacity.get(space)
        if have is None:
            raise ScheduleError(f"target '{target}' has no {space.value} memory for the buffers of "
                                f"{', '.join(sorted({b.field for b in buffers if b.field}))}")
        if need > have:
            tile = ", ".join(f"{d}={v}" for d, v in schedule.schedule.tiles)
            parts = ", ".join(f"{b.field} {'x'.join(map(str, b.shape))} ({(b.points() or 0) * itemsize} bytes)"
                              for b in buffers)
            asked = schedule.schedule.cached_reads or schedule.schedule.cached_writes
            raise ScheduleError(
                f"{'cache_read/cache_write on ' if asked else ''}stencil '{poly.ir.name}': the {space.value} "
                f"buffers of a tile {tile} need {need} bytes ({parts}), more than the {have} bytes a worker has "
                f"on {platform.name} (target '{target}'); use smaller tiles")


@dataclass
class CTarget:
    """A C-family node target: JIT-compiled in process, or emitted as a standalone tree."""

    name: str
    platform: Platform
    toolchain: Toolchain = field(default_factory=Toolchain)
    compile_options: tuple[str, ...] = ()
    emit_options: tuple[str, ...] = ()
    schedule_options: tuple[str, ...] = ()

    def kernels(self, poly: PolyIR, schedule: LoweredSchedule, box: bool) -> tuple[list[k.Kernel], dict[str, Any]]:
        """The entry points' kernel IR after the platform's passes (checked against its capacities)."""
        check_schedule_options(self.name, schedule.schedule, self.schedule_options)
        out: list[k.Kernel] = []
        values: dict[str, Any] = {}
        for name, is_box in [(ENTRY, False)] + ([(BOX_ENTRY, True)] if box else []):
            kernel = lower_kernel(poly, schedule, name, is_box)
            check_capacity(kernel, poly, schedule, self.platform, self.name)
            kernel, values = self.platform.rewrite(kernel, poly, schedule)
            out.append(kernel)
        return out, values

    def generate(self, poly: PolyIR, schedule: LoweredSchedule, box: bool = False) -> str:
        """The complete C source of the kernel for `poly` under `schedule`
        (`box`: with the entry point msc_run_box too)."""
        stencil = poly.ir
        kernels, values = self.kernels(poly, schedule, box)
        printer = CPrinter(stencil.dtype, self.platform.fused_multiply_add)
        entries = [_entry(stencil, kernel, printer) for kernel in kernels]
        return render(
            self.platform.kernel_template,
            **stencil_values(stencil),
            schedule=f"{schedule.schedule} (loops: {describe_loops(schedule)})",
            work_shared=schedule.parallel_dim is not None,
            int_helpers=int_helpers(),
            entries=entries,
            **values,
        )

    def complete(self, poly: PolyIR, schedule: Schedule | None) -> Schedule | None:
        """The schedule with the platform's tile for a time tile that names no sizes (time_tile(8))."""
        if schedule is None or not schedule.time_depth or schedule.tiles:
            return schedule
        return replace(schedule, tiles=tuple(self.platform.default_time_tile(poly.ir, schedule.time_depth).items()))

    def source(self, poly: PolyIR, schedule: object = None, box: bool = False) -> str:
        """The kernel's C source (`box`: with the entry point msc_run_box too); a target option it does
        not take is refused before the schedule is lowered (whose checks would speak of something else)."""
        sched = self.complete(poly, as_schedule(schedule))
        check_schedule_options(self.name, sched, self.schedule_options)
        return self.generate(poly, lower(sched, poly), box)

    def compile(self, poly: PolyIR, *, threads: int | None = None, schedule: object = None,
                box: bool = False) -> CompiledKernel | AutoKernel:
        """A kernel built before (same target, IR, schedule text, generator,
        compiler and host) is loaded through the kernel index without any isl
        work; only a new one is lowered, checked, generated and built."""
        if schedule == "auto":
            if not self.platform.tunes:
                raise ScheduleError(f"target '{self.name}' has no tuner: pass a msc.Schedule or 'default'")
            from msc.tune.tuner import AutoKernel  # only a tuned kernel needs the tuner

            return AutoKernel(poly, lambda s, n: self.compile(poly, threads=n, schedule=s), threads,
                              platform=self.platform)
        sched = self.complete(poly, as_schedule(schedule))
        threads = threads or (sched.threads if sched else None)
        key = kernel_key(self.name, poly.ir, sched, box, self.toolchain)
        def build() -> tuple[str, Path]:
            source = self.source(poly, sched, box)
            cc = os.environ.get("CC", self.toolchain.cc)
            return source, build_shared_library(source, f"msc_{poly.ir.name}", cc=cc, flags=self.toolchain.flags)

        return through_index(
            key, lambda source, library: CompiledKernel(poly.ir, source, library, self.name, threads, sched), build)

    def emit(self, poly: PolyIR, directory: Path, *, schedule: object = None) -> Path:
        """kernel.c, main.c, npy.h and a Makefile in `directory` (written atomically)."""
        if not self.toolchain.main_template:
            raise TargetError(f"target '{self.name}' compiles in process only: it emits no source tree")
        values = program_values(poly.ir, as_schedule(schedule))
        files = {
            "kernel.c": self.source(poly, schedule),
            "main.c": render(self.toolchain.main_template, **values),
            "npy.h": render("npy.h"),
            "Makefile": render(self.toolchain.makefile_template, **values),
        }
        return write_tree(directory, files)

    # -- as the node target of a driver program (msc/targets/node.py)

    def node_build(self) -> NodeBuild:
        """The driver compiles with this target's flags (less those of a shared library)."""
        from msc.targets.node import NodeBuild  # only a driver program needs it

        flags = [f for f in self.toolchain.flags if f not in ("-fPIC", "-shared")]
        return NodeBuild(cflags=" ".join(flags), threads="-fopenmp" in flags)

    def node_kernel(self, poly: PolyIR, schedule: Schedule | None, tag: str, box: bool) -> NodeKernel:
        """kernel_<tag>.c, compiled by the driver's compiler with its entry points renamed."""
        from msc.targets.node import MakeRule, NodeKernel

        file, obj = f"kernel_{tag}.c", f"kernel_{tag}.o"
        entry, box_entry = f"{ENTRY}_{tag}", f"{BOX_ENTRY}_{tag}" if box else None
        renames = f"-D{ENTRY}={entry}" + (f" -D{BOX_ENTRY}={box_entry}" if box_entry else "")
        rule = MakeRule(obj, (file,), (f"$(MPICC) $(CFLAGS) {renames} -c {file} -o $@",))
        return NodeKernel({file: self.source(poly, schedule, box)}, (rule,), entry, box_entry)


def program_values(stencil: ir.StencilIR, schedule: Schedule | None = None) -> dict[str, Any]:
    """What the templates of a standalone program (main.c.j2, Makefile.j2) need; the schedule's
    with_threads(n) is the program's thread count when --threads does not give one."""
    call_args = [f"buffers[{n}]" for n in range(len(stencil.fields))]
    call_args += [f"params[{n}]" for n in range(len(stencil.params))]
    call_args += [f"padded[{3 - stencil.ndim + d}]" for d in range(stencil.ndim)]
    call_args += ["0", "steps", "nthreads"]
    return dict(
        version=__version__,
        name=stencil.name,
        ndim=stencil.ndim,
        ctype=C_TYPES[stencil.dtype],
        descr="<f8" if stencil.dtype == "float64" else "<f4",
        params=stencil.params,
        fields=stencil.fields,
        periodic=stencil.boundary == "periodic",
        radius3=[0] * (3 - stencil.ndim) + list(stencil.radius),
        parameters=signature(stencil).c_parameters(),
        call_args=call_args,
        statements=len(stencil.statements),
        slot_spread=slot_spread(stencil),
        schedule_threads=schedule_threads(schedule),
    )


def schedule_threads(schedule: Schedule | None) -> int:
    """A standalone program's thread count when --threads gives none: the schedule's with_threads(n), else 0."""
    return (schedule.threads if schedule is not None else None) or 0


def stencil_values(stencil: ir.StencilIR) -> dict[str, Any]:
    """What every kernel template says about the stencil itself."""
    return dict(version=__version__, name=stencil.name, ndim=stencil.ndim, boundary=stencil.boundary,
                dtype=stencil.dtype, ctype=C_TYPES[stencil.dtype], periodic=stencil.boundary == "periodic",
                slot_spread=slot_spread(stencil))


def entry_values(stencil: ir.StencilIR, box: bool) -> dict[str, Any]:
    """What an entry point's preamble (templates/entry_preamble.c.j2) needs: the scalar parameters
    (taken as `real`; a parameter may be read only in some launches, or none), whether it has a box."""
    return dict(params=[param_name(p) for p in stencil.params], box=box)


def _entry(stencil: ir.StencilIR, kernel: k.Kernel, printer: CPrinter) -> dict[str, object]:
    """Name, parameters, preamble and body of one entry point."""
    parameters = signature(stencil).c_parameters(kernel.box)
    return dict(name=kernel.name, parameters=parameters, **entry_values(stencil, kernel.box),
                body=printer.lines(kernel.body))


# -- the kernel index: (target, IR, schedule text, generator, compiler, host) -> built library

@functools.lru_cache(maxsize=1)
def ir_text(stencil: ir.StencilIR) -> str:
    """The IR as stable text, without source locations (they change no generated code)."""
    statements = [(s.target, s.expr) for s in stencil.statements]
    return repr((stencil.name, stencil.ndim, stencil.fields, stencil.params, statements,
                 stencil.boundary, stencil.dtype))


def _compiler_file(cc: str) -> str:
    """The compiler as a file (path, size, modification time): like its
    version banner, it changes when the compiler does, and costs no process."""
    exe = shutil.which(cc)
    if exe is None:
        return cc
    real = os.path.realpath(exe)
    info = os.stat(real)
    return f"{real} {info.st_size} {info.st_mtime_ns}"


def kernel_key(target: str, stencil: ir.StencilIR, schedule: Schedule | None, box: bool,
               toolchain: Toolchain | None = None) -> str:
    """The kernel index key: what decides the generated library, known before any isl work."""
    toolchain = toolchain or Toolchain()
    cc = os.environ.get("CC", toolchain.cc)
    parts = (target, generator_fingerprint(), ir_text(stencil), str(schedule or Schedule()), str(box),
             cc, _compiler_file(cc), " ".join(toolchain.flags), host_identity())
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def index_path(key: str) -> Path:
    return cache_dir() / "index" / key


def through_index(key: str, load: Callable[[str, Path], Loaded], build: Callable[[], tuple[str, Path]],
                  suffix: str = ".c") -> Loaded:
    """The kernel indexed under `key`, loaded by `load(source, library)`; when
    there is none (or its library is damaged), `build()` makes it and the index
    records it."""
    found = indexed(key, suffix)
    if found is not None:
        try:
            return load(*found)
        except OSError:
            pass  # a damaged library: build it again below
    source, library = build()
    atomic_write_text(index_path(key), library.name)
    return load(source, library)


def indexed(key: str, suffix: str = ".c") -> tuple[str, Path] | None:
    """(source, library path) of the kernel indexed under `key` (its source
    file ends in `suffix`), if both are still
    in the cache and the library matches its digest (a damaged one is rebuilt,
    with its warning, by the ordinary build path)."""
    try:
        library = cache_dir() / index_path(key).read_text(encoding="utf-8").strip()
        source = library.with_suffix(suffix).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return (source, library) if is_intact(library) else None
