"""A compiled stencil kernel: a loaded shared library plus its calling convention."""

from __future__ import annotations

import ctypes
import numbers
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np

from msc import ir
from msc.errors import CheckpointError, MscError, NonFiniteWarning, StencilArgumentError, TargetError
from msc.ir.arguments import bind_arguments, check_dtype
from msc.runtime.buffers import field_buffer, ghost_width, on_ring, pack, padded_shape, put_level, slot_points
from msc.runtime.build import load_library
from msc.runtime.finite import not_finite
from msc.runtime.threads import MAX_THREADS, usable_cores

ENTRY = "msc_run"  # every compiled kernel's entry point
BOX_ENTRY = "msc_run_box"  # the same on a box of the domain (a kernel compiled with box=True)


_distributed: Any = None  # the MPI driver, msc.runtime.distributed: it plugs itself in when imported


def use_distributed_driver(driver: Any) -> None:
    """Let `run`/`start`/`resume` with `comm=` go to `driver` (its run_distributed,
    start_distributed and resume_distributed). The driver builds on this module, so
    it is plugged in from above rather than imported from here."""
    global _distributed
    _distributed = driver


def distributed_driver() -> Any:
    if _distributed is None:  # msc imports the driver: only a partial import of msc lands here
        raise MscError("runs over MPI ranks need msc.runtime.distributed: import msc first")
    return _distributed


def warn_not_finite(stencil: str, bad: list[str], first: int, last: int, stacklevel: int) -> bool:
    """Warn (NonFiniteWarning) that the fields `bad` hold NaN or inf after steps first..last-1;
    True when it did. `stacklevel` counts from the caller of this function to the user's line."""
    if bad:
        which = f"field '{bad[0]}' is" if len(bad) == 1 else f"fields {', '.join(repr(b) for b in bad)} are"
        warnings.warn(f"stencil '{stencil}': {which} no longer finite (NaN or inf) after steps {first}..{last - 1}; "
                      "an explicit step past its stability limit blows up like this (a smaller time step or "
                      "coefficient, or an implicit method, keeps it finite)", NonFiniteWarning,
                      stacklevel=stacklevel + 1)
    return bool(bad)


def warn_inputs_not_finite(stencil: ir.StencilIR, arrays: Mapping[str, np.ndarray], scalars: Mapping[str, float],
                           step: int, threads: int, stacklevel: int) -> bool:
    """Warn (NonFiniteWarning) that fields among `arrays` or `scalars` (as the kernel's dtype holds them) are
    not finite before step `step` runs: the run's results will not be either, and no step is to blame.
    True when it did. `stacklevel` as warn_not_finite's."""
    with np.errstate(over="ignore"):
        odd = [f"parameter '{k}' = {v!r}" for k, v in scalars.items()
               if not np.isfinite(np.asarray(v, dtype=stencil.dtype))]
    odd += [f"field '{name}'" for name in not_finite(arrays, threads)]
    if odd:
        warnings.warn(f"stencil '{stencil.name}': {', '.join(odd)} {'is' if len(odd) == 1 else 'are'} not finite "
                      f"(NaN or inf in {stencil.dtype}) before step {step} runs, as given; the results of the steps "
                      "that follow will not be finite either", NonFiniteWarning, stacklevel=stacklevel + 1)
    return bool(odd)


@dataclass
class RunStats:
    """Timing of the last run: seconds inside the compiled time loop, `points`
    computed per step (interior points x statements), `updates` (interior points
    x steps) and, after a run under the CUDA emulator, its memory counters
    (`gpu`: msc.runtime.cuda_emu.COUNTERS and the bank-conflict ratio);
    `threads`: the CPU threads it ran on (per rank; 0 for a GPU or Sunway run),
    which may be fewer than the schedule's with_threads on a busy machine."""

    seconds: float = 0.0
    steps: int = 0
    points: int = 0
    updates: int = 0
    gpu: dict[str, float] | None = None
    threads: int = 0

    @property
    def gstencils_per_second(self) -> float:
        return self.points * self.steps / self.seconds / 1e9 if self.seconds > 0 else 0.0


@dataclass
class CompiledKernel:
    """Runs one stencil with compiled code; `run` mirrors `Stencil.reference`."""

    ir: ir.StencilIR
    source: str
    library_path: Path
    target: str = "openmp"
    threads: int | None = None
    schedule: Any = None  # the msc.Schedule it was compiled with (None: the default)
    last_run: RunStats = field(default_factory=RunStats)

    @property
    def compile_options(self) -> dict[str, Any]:
        """The target's own compile options this kernel was built with (`Stencil.compile(**options)`):
        a distributed run compiles its phases with them too."""
        return {}

    def __repr__(self) -> str:
        return (f"<msc kernel '{self.ir.name}' target={self.target} dtype={self.ir.dtype} "
                f"schedule={self.schedule or 'default'} threads={self.threads or 'default'}>")

    def _repr_html_(self) -> str:
        from msc.runtime.output import table_html

        rows = {"target": self.target, "dtype": self.ir.dtype, "schedule": str(self.schedule or "default"),
                "threads": str(self.threads or "default"), "source": f"{len(self.source.splitlines())} lines: k.source"}
        return table_html(f"msc kernel of '{self.ir.name}'", rows)

    def __post_init__(self) -> None:
        self._lib = load_library(self.library_path)
        self._fn = self._entry(ENTRY, box=False)
        self._box_fn: Any = None

    def _entry(self, name: str, box: bool) -> Any:
        """A C entry point typed for ctypes: fields, scalars, extents, [lo, hi,] t0, T, nthreads."""
        fn = getattr(self._lib, name)
        bounds = [ctypes.POINTER(ctypes.c_long)] * 2 if box else []
        fn.argtypes = (
            [ctypes.c_void_p] * len(self.ir.fields)
            + [ctypes.c_double] * len(self.ir.params)
            + [ctypes.c_long] * self.ir.ndim
            + bounds
            + [ctypes.c_long, ctypes.c_long, ctypes.c_int]
        )
        fn.restype = ctypes.c_int
        return fn

    def counters(self) -> Any:
        """What the compiled code has counted so far (None: it counts nothing; the
        CUDA emulator's libraries count memory accesses)."""
        return None

    def counters_since(self, before: Any) -> dict[str, float] | None:
        """What it counted since `counters()` returned `before`, for RunStats.gpu."""
        return None

    def arguments(self, buffers: dict[str, np.ndarray], scalars: dict[str, float], extents: Any) -> list[Any]:
        """The leading arguments of the C entry points for packed `buffers` (`field_buffer`s: the
        generated code finds a ring's slots at their stride, so a plain copy of one would be overrun)."""
        for f in self.ir.written_fields:
            buffer = buffers[f.name]
            stride = slot_points(self.ir, int(np.prod(buffer.shape[1:]))) * buffer.itemsize
            if buffer.strides[0] != stride or not buffer[0].flags.c_contiguous:
                raise TargetError(f"stencil '{self.ir.name}': the buffer of '{f.name}' is not a ring buffer "
                                  f"(runtime.buffers.field_buffer: slots {stride} bytes apart)")
        call: list[Any] = [buffers[f.name].ctypes.data for f in self.ir.fields]
        return call + [scalars[p] for p in self.ir.params] + list(extents)

    def advance(self, call: list[Any], t0: int, steps: int, nthreads: int) -> None:
        """Run steps t0 .. t0+steps-1 on already packed buffers (`arguments`)."""
        if self._fn(*call, t0, steps, nthreads) != 0:
            raise MemoryError(f"stencil '{self.ir.name}': the kernel could not allocate its buffers "
                              f"({self.schedule}: each thread's ring of planes and the saved rows)")

    def advance_box(self, call: list[Any], lo: Any, hi: Any, t0: int, steps: int, nthreads: int) -> None:
        """Like `advance`, on the points lo[d] <= i_d < hi[d] only (a kernel compiled with box=True)."""
        if self._box_fn is None:
            self._box_fn = self._entry(BOX_ENTRY, box=True)
        bounds = [(ctypes.c_long * len(b))(*b) for b in (lo, hi)]
        self._box_fn(*call, *bounds, t0, steps, nthreads)

    @overload
    def run(self, steps: int, threads: int | None = None, comm: None = None, dims: Any = None,
            **inputs: Any) -> dict[str, np.ndarray]: ...
    @overload
    def run(self, steps: int, threads: int | None = None, *, comm: Any, dims: Any = None,
            **inputs: Any) -> dict[str, np.ndarray] | None: ...

    def run(self, steps: int, threads: int | None = None, comm: Any = None, dims: Any = None,
            **inputs: Any) -> dict[str, np.ndarray] | None:
        """Advance `steps` steps; returns the newest level of each written field.

        The one-shot call: it copies the inputs into fresh buffers and the
        result out again (`start` keeps its buffers between calls instead).
        With an mpi4py communicator `comm`, the run is spread over its ranks
        (process grid `dims`, None to let MPI choose): global arrays on rank 0,
        None on the others; rank 0 gets the result, the others None
        (msc.runtime.distributed).
        """
        check_threads(threads)
        check_comm(comm)
        if comm is not None:
            return distributed_driver().run_distributed(self, comm, steps, inputs, dims=dims, threads=threads, schedule=self.schedule)
        sim = self.start(threads, **inputs)
        sim.advance(steps, _stacklevel=3)
        return {name: level.copy() for name, level in sim.fields.items()}

    def _threads_of(self, threads: int | None) -> int:
        """The threads a run uses: `threads`, else the kernel's, else the free cores (msc.runtime.threads).
        0 means the default too, as None does (`msc run --threads 0`, as an emitted program's `--threads 0`)."""
        from msc.runtime.threads import default_threads

        nthreads = threads if threads is not None else self.threads
        check_threads(nthreads)
        return nthreads or default_threads()

    @overload
    def start(self, threads: int | None = None, comm: None = None, dims: Any = None,
              **inputs: Any) -> Simulation: ...
    @overload
    def start(self, threads: int | None = None, *, comm: Any, dims: Any = None, **inputs: Any) -> Any: ...

    def start(self, threads: int | None = None, comm: Any = None, dims: Any = None, **inputs: Any) -> Any:
        """A run that keeps its buffers between calls: `sim.advance(steps)`,
        then `sim.fields[name]`, a read-only view of the newest level (no copy).
        Takes the same inputs as `run`, copied once, here. With `comm`: the
        same over MPI ranks (msc.runtime.distributed.GlobalSimulation)."""
        check_threads(threads)
        check_comm(comm)
        if comm is not None:
            return distributed_driver().start_distributed(self, comm, inputs, dims=dims, threads=threads, schedule=self.schedule)
        args = bind_arguments(self.ir, 0, inputs)
        return self.simulation(pack(self.ir, args), args.scalars, self._threads_of(threads))

    def follow(self, previous: Simulation, threads: int | None = None) -> Simulation:
        """A simulation of this kernel that goes on from where `previous`, a simulation of a kernel
        of the same stencil on the same shape, stands: its step, parameters and host buffers, taken
        over (`previous` is not advanced again). No memory to allocate, copy or page in: the
        tuner's trials run one after another this way, on one copy of the inputs."""
        if previous.kernel.ir.name != self.ir.name or [f.name for f in previous.kernel.ir.fields] != \
                [f.name for f in self.ir.fields]:
            raise ValueError(f"follow: a simulation of stencil '{previous.kernel.ir.name}' cannot go on as one "
                             f"of '{self.ir.name}'")
        return self.simulation(previous.host_buffers, previous.scalars, self._threads_of(threads), previous.step)

    def simulation(self, buffers: dict[str, np.ndarray], scalars: dict[str, float], nthreads: int,
                   step: int = 0) -> Simulation:
        """A simulation of this kernel on packed host `buffers` (`start`, `resume`)."""
        return Simulation(self, buffers, scalars, nthreads, step)

    def resume(self, path: str | Path, threads: int | None = None, comm: Any = None, dims: Any = None) -> Any:
        """A simulation continued from the checkpoint `path` (`sim.save`): it goes on
        bitwise as if never stopped. With `comm`: over MPI ranks, any number of them,
        from a checkpoint of a run on any number (msc.runtime.distributed)."""
        from msc.runtime.checkpoint import checkpoint_path

        check_threads(threads)
        check_comm(comm)
        if comm is not None:
            return distributed_driver().resume_distributed(self, comm, checkpoint_path(path), dims=dims,
                                                           threads=threads, schedule=self.schedule)
        buffers, scalars, step = resumed_buffers(self.ir, checkpoint_path(path))
        return self.simulation(buffers, scalars, self._threads_of(threads), step)


def resumed_buffers(stencil: ir.StencilIR, path: Path) -> tuple[dict[str, np.ndarray], dict[str, float], int]:
    """The packed ring buffers, parameters and step of the single-process checkpoint `path` of
    `stencil` (a kernel's `resume`); a checkpoint of a run over MPI ranks is a CheckpointError."""
    from msc.runtime.checkpoint import check_fits, fill, int_tuple, open_file, scalars_of

    with open_file(path) as data:
        attrs = dict(data.attrs)
    check_fits(path, attrs, stencil)
    if "msc_blocks" in attrs:
        raise CheckpointError(f"checkpoint {path} is of a run over MPI ranks: resume it with comm=")
    shape = int_tuple(attrs["msc_shape"])
    padded = padded_shape(stencil, shape)
    indices = [(np.arange(p) - g) % n for p, g, n in zip(padded, ghost_width(stencil), shape)]
    buffers = {f.name: field_buffer(stencil, f, padded) for f in stencil.fields}
    step = int(attrs["step"])
    fill(path, stencil, buffers, indices, step, [path])
    return buffers, scalars_of(attrs, stencil), step


class Simulation:
    """A run of a compiled kernel in progress (`CompiledKernel.start`, `resume`).

    It owns the kernel's ring buffers: `advance` calls the compiled time loop
    on them directly, starting at step `step`, and `fields` views the newest
    level without copying. A view shows whatever its ring slot holds: it
    changes under later `advance` calls (copy it to keep it). Between calls
    `set` changes parameters and fields in place, `levels` views every level
    a field keeps, `save` writes a checkpoint and `to_xarray` a Dataset.
    """

    def __init__(self, kernel: CompiledKernel, buffers: dict[str, np.ndarray], scalars: dict[str, float],
                 nthreads: int, step: int = 0) -> None:
        self.kernel = kernel
        self.step = step
        self._buffers = buffers
        self._scalars = dict(scalars)
        self._nthreads = nthreads
        stencil = kernel.ir
        self._extents = buffers[stencil.fields[0].name].shape[-stencil.ndim:]
        self._call = kernel.arguments(buffers, self._scalars, self._extents)
        self._domain = tuple(slice(g, n - g) for g, n in zip(ghost_width(stencil), self._extents))
        self._interior = int(np.prod([n - 2 * r for n, r in zip(self._extents, stencil.radius)]))
        self._points = self._interior * len(stencil.statements)
        self._blown_up = False  # warned once that a field is no longer finite
        self._inputs_checked = False  # the first advance checks the inputs it starts from

    def __repr__(self) -> str:
        return f"<msc.Simulation of '{self.kernel.ir.name}' at step {self.step}, {self.kernel.target}>"

    @property
    def host_buffers(self) -> dict[str, np.ndarray]:
        """The ring buffers in host memory, ghosts and every slot, up to date (`CompiledKernel.follow`
        takes them over)."""
        return self._host_buffers()

    @property
    def scalars(self) -> dict[str, float]:
        """The scalar parameters' values (a copy; `set` changes them)."""
        return dict(self._scalars)

    def advance(self, steps: int, progress: bool = False, every: int | None = None, out: str | Path | None = None,
                _stacklevel: int = 2) -> None:
        """Run `steps` more steps in place (timed into `kernel.last_run`); warns once
        (NonFiniteWarning) when a written field is no longer finite. `progress=True`
        shows a bar on stderr; `every=N, out=path` appends the fields to the netCDF
        time series `path` at every step that N divides (msc.runtime.output).
        Ctrl-C takes effect when the compiled loop returns (between chunks of about
        0.2 s with a bar, or at each snapshot): `step` then counts the steps run."""
        from msc.runtime.progress import Progress, chunks, interrupts_held

        stencil = self.kernel.ir
        check_steps(stencil.name, steps)
        writer = None
        if out is not None or every is not None:
            from msc.runtime.output import SeriesWriter

            shape = tuple(d.stop - d.start for d in self._domain)
            writer = SeriesWriter.checked(stencil, every, out, self.step, shape)
        if not self._inputs_checked:
            self._inputs_checked = True
            inputs = dict(self.fields)
            inputs.update({f.name: self._host_buffers()[f.name][self._domain] for f in stencil.fields if not f.written})
            self._blown_up = warn_inputs_not_finite(stencil, inputs, self._scalars, self.step, self._nthreads,
                                                    _stacklevel)
        first, seconds = self.step, 0.0
        counted = self.kernel.counters()
        with Progress(stencil.name, int(steps), self._points, progress) as bar:
            for count in chunks(self.step, int(steps), every, bar):
                with interrupts_held():  # Ctrl-C lands after the steps are counted, never between
                    start = time.perf_counter()
                    self._steps(count)
                    spent = time.perf_counter() - start
                    self.step += count
                seconds += spent
                bar.update(count, spent)
                if writer is not None and self.step % writer.every == 0:
                    with interrupts_held():  # a snapshot is written whole
                        writer.append(self.fields, self.step)
        self.kernel.last_run = RunStats(seconds, int(steps), self._points, self._interior * int(steps),
                                        self.kernel.counters_since(counted), self._nthreads)
        if not self._blown_up and steps:
            self._blown_up = warn_not_finite(stencil.name, not_finite(self.fields, self._nthreads), first,
                                               self.step, _stacklevel)

    def _steps(self, count: int) -> None:
        """`count` steps from `self.step` on the buffers."""
        self.kernel.advance(self._call, self.step, count, self._nthreads)

    def _host_buffers(self) -> dict[str, np.ndarray]:
        """The packed host buffers, up to date (a device-resident simulation copies them back first)."""
        return self._buffers

    @property
    def fields(self) -> dict[str, np.ndarray]:
        """Read-only views of the newest level of each written field (with the
        dirichlet ring; a periodic field without its ghost cells)."""
        return {f.name: levels[-1] for f, levels in zip(self.kernel.ir.written_fields, self.levels.values())}

    @property
    def levels(self) -> dict[str, list[np.ndarray]]:
        """Read-only views of every level each written field keeps, oldest first
        (the newest is `fields[name]`; the oldest may be the one the next step overwrites)."""
        out = {}
        for f in self.kernel.ir.written_fields:
            views = []
            for age in reversed(range(f.slots)):
                view = self._host_buffers()[f.name][(self.step - age) % f.slots][self._domain]
                view.flags.writeable = False
                views.append(view)
            out[f.name] = views
        return out

    def set(self, **values: Any) -> None:
        """Change scalar parameters, and write arrays into the newest level of a written
        field or into a time-invariant input (the whole array, ring included), in place."""
        stencil = self.kernel.ir
        for name, value in values.items():
            field = next((f for f in stencil.fields if f.name == name), None)
            if field is None:
                self._scalars[name] = parameter_value(stencil, name, value)
                continue
            buffers = self._host_buffers()
            target = buffers[name][self.step % field.slots] if field.written else buffers[name]
            array = field_value(stencil, name, value, target[self._domain].shape)
            put_level(stencil, target, array)
            ring = on_ring(stencil, [np.arange(n) for n in array.shape], array.shape)
            if field.written and ring is not None:  # the ring is the boundary of every level, as at start
                for slot in buffers[name]:
                    slot[self._domain][ring] = array[ring]
        self._call = self.kernel.arguments(self._buffers, self._scalars, self._extents)

    @property
    def parameters(self) -> dict[str, float]:
        """The scalar parameters the next steps use."""
        return dict(self._scalars)

    def save(self, path: str | Path) -> Path:
        """Write a checkpoint that `kernel.resume(path)` continues bitwise (msc.runtime.checkpoint)."""
        from msc.runtime.checkpoint import Block, check_save_target, checkpoint_path, header, write_block

        path = checkpoint_path(path)
        check_save_target(path)
        stencil = self.kernel.ir
        buffers = self._host_buffers()
        levels = {f.name: [buffers[f.name][(self.step - age) % f.slots][self._domain] for age in range(f.slots)]
                  for f in stencil.written_fields}
        inputs = {f.name: buffers[f.name][self._domain] for f in stencil.fields if not f.written}
        shape = levels[stencil.written_fields[0].name][0].shape
        write_block(path, stencil, header(stencil, self.step, self._scalars, shape),
                    Block((0,) * stencil.ndim, levels, inputs))
        return path

    def to_xarray(self, spacing: float | tuple[float, ...] | None = None) -> Any:
        """An xarray Dataset of the newest levels (copies), with coordinates when a grid
        spacing is given (one for every axis, or one per axis)."""
        from msc.runtime.output import dataset

        return dataset(self.kernel.ir, self.fields, self.step, spacing)

    def _repr_html_(self) -> str:
        from msc.runtime.output import simulation_html

        return simulation_html(self)


def parameter_value(stencil: ir.StencilIR, name: str, value: Any) -> float:
    """`sim.set(name=value)` for a name that is no field: the parameter's new value, or StencilArgumentError."""
    if name not in stencil.params:
        raise StencilArgumentError(f"stencil '{stencil.name}' has no parameter or field '{name}'; it has "
                                   f"{', '.join([*stencil.params, *(f.name for f in stencil.fields)])}")
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise StencilArgumentError(f"stencil '{stencil.name}': parameter '{name}' takes a number, "
                                   f"got {type(value).__name__}")
    return float(value)


def field_value(stencil: ir.StencilIR, name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """`sim.set(name=value)` for field `name`: the array (of `shape`, ring included), or StencilArgumentError;
    an array of the other precision is refused, as run and start refuse it."""
    if isinstance(value, np.ndarray):
        check_dtype(stencil, name, value)
    array = np.asarray(value)
    if array.shape != tuple(shape):
        raise StencilArgumentError(f"stencil '{stencil.name}': '{name}' has shape {tuple(shape)}, "
                                   f"got an array of shape {array.shape}")
    return array


#: what a field or parameter passed by position, where threads= or comm= stand, is told
BY_NAME = "fields and parameters go by name, as run(steps, u=u0, alpha=0.1)"


def _shown(value: Any) -> str:
    """A value as an argument error names it: a number or string itself, anything else by its type."""
    return repr(value) if isinstance(value, (int, float, str)) else f"an object of type {type(value).__name__}"


def check_threads(threads: Any) -> None:
    """Refuse (StencilArgumentError) a thread count other than None or an integer >= 0 (0: the default, as None)."""
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 0):
        hint = "" if isinstance(threads, int) else f"; {BY_NAME}"  # a field or a parameter given by position?
        raise StencilArgumentError(f"threads must be a positive integer (or 0: the default), got {_shown(threads)}"
                                   f"{hint}")
    if threads is not None and threads > MAX_THREADS:
        raise StencilArgumentError(f"threads={threads} is more than msc starts (at most {MAX_THREADS}; "
                                   f"this process may use {usable_cores()} CPUs)")


def check_comm(comm: Any) -> None:
    """Refuse (StencilArgumentError) a `comm` that is neither None nor an MPI communicator (mpi4py's)."""
    if comm is not None and not all(hasattr(comm, a) for a in ("Get_rank", "Get_size", "allgather")):
        raise StencilArgumentError(f"comm must be an mpi4py communicator (as MPI.COMM_WORLD), got {_shown(comm)}; "
                                   f"{BY_NAME}")


def check_steps(stencil: str, steps: Any) -> None:
    if not isinstance(steps, numbers.Integral) or isinstance(steps, bool) or steps < 0:
        raise StencilArgumentError(f"stencil '{stencil}': steps must be a non-negative integer, got {steps!r}")
