"""A compiled stencil kernel: a loaded shared library plus its calling convention."""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np

from msc import ir
from msc.arguments import bind_arguments
from msc.errors import StencilArgumentError
from msc.runtime.buffers import pack, padded_shape, unpack
from msc.runtime.build import build_shared_library, load_library


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
        lib = load_library(self.library_path)
        self._fn = lib.msc_run
        nfields = len(self.ir.fields)
        self._fn.argtypes = (
            [ctypes.c_void_p] * nfields
            + [ctypes.c_double] * len(self.ir.params)
            + [ctypes.c_long] * self.ir.ndim
            + [ctypes.c_long, ctypes.c_long, ctypes.c_int]
        )
        self._fn.restype = ctypes.c_int

    @classmethod
    def build(cls, stencil: ir.StencilIR, source: str, target: str, threads: int | None,
              schedule: Any = None) -> CompiledKernel:
        path = build_shared_library(source, f"msc_{stencil.name}")
        return cls(stencil, source, path, target, threads, schedule)

    @overload
    def run(self, steps: int, threads: int | None = None, comm: None = None, dims: Any = None,
            **inputs: Any) -> dict[str, np.ndarray]: ...
    @overload
    def run(self, steps: int, threads: int | None = None, *, comm: Any, dims: Any = None,
            **inputs: Any) -> dict[str, np.ndarray] | None: ...

    def run(self, steps: int, threads: int | None = None, comm: Any = None, dims: Any = None,
            **inputs: Any) -> dict[str, np.ndarray] | None:
        """Advance `steps` steps; returns the newest level of each written field.

        With an mpi4py communicator `comm`, the run is spread over its ranks
        (process grid `dims`, None to let MPI choose): global arrays on rank 0,
        None on the others; rank 0 gets the result, the others None
        (msc.runtime.distributed).
        """
        if comm is not None:
            from msc.runtime.distributed import run_distributed

            return run_distributed(self, comm, steps, inputs, dims=dims, threads=threads, schedule=self.schedule)
        args = bind_arguments(self.ir, steps, inputs)
        nthreads = threads if threads is not None else (self.threads or 0)
        if not isinstance(nthreads, int) or nthreads < 0:
            raise StencilArgumentError(f"threads must be a positive integer, got {threads!r}")
        buffers = pack(self.ir, args)
        extents = padded_shape(self.ir, args.shape)
        call_args: list[Any] = [buffers[f.name].ctypes.data for f in self.ir.fields]
        call_args += [args.scalars[p] for p in self.ir.params]
        call_args += list(extents)
        start = time.perf_counter()
        self._fn(*call_args, 0, steps, nthreads)
        seconds = time.perf_counter() - start
        interior = int(np.prod([n - 2 * r for n, r in zip(extents, self.ir.radius)]))
        self.last_run = RunStats(seconds, steps, interior * len(self.ir.statements))
        return unpack(self.ir, buffers, steps)

