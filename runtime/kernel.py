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
from msc.arguments import bind_arguments
from msc.errors import NonFiniteWarning, StencilArgumentError
from msc.runtime.buffers import ghost_width, pack, padded_shape
from msc.runtime.build import load_library

ENTRY = "msc_run"  # every compiled kernel's entry point
BOX_ENTRY = "msc_run_box"  # the same on a box of the domain (a kernel compiled with box=True)


def not_finite(fields: Mapping[str, np.ndarray]) -> list[str]:
    """The names of the fields holding NaN or inf (one read of each array)."""
    return [name for name, level in fields.items() if not np.isfinite(level).all()]


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


@dataclass
class RunStats:
    """Timing of the last run: seconds inside the compiled time loop."""

    seconds: float = 0.0
    steps: int = 0
    points: int = 0

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

    def arguments(self, buffers: dict[str, np.ndarray], scalars: dict[str, float], extents: Any) -> list[Any]:
        """The leading arguments of the C entry points for packed `buffers`."""
        call: list[Any] = [buffers[f.name].ctypes.data for f in self.ir.fields]
        return call + [scalars[p] for p in self.ir.params] + list(extents)

    def advance(self, call: list[Any], t0: int, steps: int, nthreads: int) -> None:
        """Run steps t0 .. t0+steps-1 on already packed buffers (`arguments`)."""
        self._fn(*call, t0, steps, nthreads)

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
        if comm is not None:
            from msc.runtime.distributed import run_distributed

            return run_distributed(self, comm, steps, inputs, dims=dims, threads=threads, schedule=self.schedule)
        sim = self.start(threads, **inputs)
        sim.advance(steps, _stacklevel=3)
        return {name: level.copy() for name, level in sim.fields.items()}

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
        if comm is not None:
            from msc.runtime.distributed import start_distributed

            return start_distributed(self, comm, inputs, dims=dims, threads=threads, schedule=self.schedule)
        args = bind_arguments(self.ir, 0, inputs)
        nthreads = threads if threads is not None else (self.threads or 0)
        if not isinstance(nthreads, int) or isinstance(nthreads, bool) or nthreads < 0:
            raise StencilArgumentError(f"threads must be a positive integer, got {threads!r}")
        buffers = pack(self.ir, args)
        return Simulation(self, buffers, self.arguments(buffers, args.scalars, padded_shape(self.ir, args.shape)),
                          nthreads)


class Simulation:
    """A run of a compiled kernel in progress (`CompiledKernel.start`).

    It owns the kernel's ring buffers: `advance` calls the compiled time loop
    on them directly, starting at step `step`, and `fields` views the newest
    level without copying. A view shows whatever its ring slot holds: it
    changes under later `advance` calls (copy it to keep it).
    """

    def __init__(self, kernel: CompiledKernel, buffers: dict[str, np.ndarray], call: list[Any], nthreads: int) -> None:
        self.kernel = kernel
        self.step = 0
        self._buffers = buffers
        self._call = call
        self._nthreads = nthreads
        stencil = kernel.ir
        extents = buffers[stencil.fields[0].name].shape[-stencil.ndim:]
        self._domain = tuple(slice(g, n - g) for g, n in zip(ghost_width(stencil), extents))
        interior = int(np.prod([n - 2 * r for n, r in zip(extents, stencil.radius)]))
        self._points = interior * len(stencil.statements)
        self._blown_up = False  # warned once that a field is no longer finite

    def advance(self, steps: int, _stacklevel: int = 2) -> None:
        """Run `steps` more steps in place (timed into `kernel.last_run`); warns once
        (NonFiniteWarning) when a written field is no longer finite."""
        if not isinstance(steps, numbers.Integral) or isinstance(steps, bool) or steps < 0:
            raise StencilArgumentError(f"stencil '{self.kernel.ir.name}': steps must be a non-negative integer, "
                                       f"got {steps!r}")
        start = time.perf_counter()
        self.kernel.advance(self._call, self.step, int(steps), self._nthreads)
        seconds = time.perf_counter() - start
        first, self.step = self.step, self.step + int(steps)
        self.kernel.last_run = RunStats(seconds, int(steps), self._points)
        if not self._blown_up and steps:
            self._blown_up = warn_not_finite(self.kernel.ir.name, not_finite(self.fields), first, self.step,
                                            _stacklevel)

    @property
    def fields(self) -> dict[str, np.ndarray]:
        """Read-only views of the newest level of each written field (with the
        dirichlet ring; a periodic field without its ghost cells)."""
        out = {}
        for f in self.kernel.ir.written_fields:
            view = self._buffers[f.name][self.step % f.slots][self._domain]
            view.flags.writeable = False
            out[f.name] = view
        return out
