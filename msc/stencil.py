"""The `@msc.stencil` decorator and the Stencil object users hold."""

from __future__ import annotations

import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, overload

import numpy as np
from numpy.typing import DTypeLike

from msc import ir
from msc.errors import MscError, StencilDefinitionWarning
from msc.frontend.trace import trace
from msc.ir.reference import run_reference
from msc.poly import PolyIR
from msc.textual import parse_stencil


class Stencil:
    """A traced stencil: run it with `reference`, `compile` it, or `emit` sources."""

    def __init__(self, func: Callable[..., Any] | None, *, boundary: str = "dirichlet",
                 name: str | None = None, stencil_ir: ir.StencilIR | None = None) -> None:
        self.func = func
        if stencil_ir is None:
            assert func is not None
            stencil_ir = trace(func, name=name, boundary=boundary)
            for param in ir.unread_params(stencil_ir):
                warnings.warn(f"stencil '{stencil_ir.name}': parameter '{param}' is read by no statement, and a run "
                              f"still asks for it: remove it from {func.__name__}'s arguments",
                              StencilDefinitionWarning, stacklevel=3)
        self.ir = stencil_ir
        self.name = stencil_ir.name
        self.__doc__ = getattr(func, "__doc__", None)

    def __repr__(self) -> str:
        fields = ", ".join(f.name for f in self.ir.fields)
        return f"<msc.Stencil {self.name} ({self.ir.ndim}D, fields {fields}, {self.ir.boundary})>"

    def _repr_html_(self) -> str:
        """Its equations (as the .msc language prints them), radius and fields, for notebooks."""
        import html

        from msc.textual import print_stencil

        fields = ", ".join(f"{f.name} ({'written, window ' + str(f.window) if f.written else 'input'})"
                           for f in self.ir.fields)
        return (f"<div><b>msc stencil '{html.escape(self.name)}'</b>: {self.ir.ndim}D, {self.ir.boundary}, radius "
                f"{self.ir.radius}, fields {html.escape(fields)}, parameters {html.escape(', '.join(self.ir.params)) or 'none'}"
                f"<pre>{html.escape(print_stencil(self.ir))}</pre></div>")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"stencil '{self.name}' is not called directly: use .reference(steps=..., ...), "
            ".compile(target=...).run(...) or .emit(target, directory)"
        )

    def typed(self, dtype: DTypeLike = None) -> ir.StencilIR:
        """The IR in `dtype` (None: the stencil's own, float64 unless declared)."""
        return self.ir if dtype is None else self.ir.with_dtype(dtype)

    def poly(self, dtype: DTypeLike = None) -> PolyIR:
        return _poly(self.typed(dtype))

    def reference(self, steps: int, dtype: DTypeLike = None, **inputs: Any) -> dict[str, np.ndarray]:
        """Run the numpy reference interpreter (the ground truth); a NonFiniteWarning, as `run` gives,
        when a written field ends with NaN or inf."""
        from msc.runtime.finite import not_finite
        from msc.runtime.kernel import warn_inputs_not_finite, warn_not_finite

        stencil = self.typed(dtype)
        out = run_reference(stencil, steps, inputs)  # first: it checks the inputs' kinds and shapes
        fields = {f.name for f in stencil.fields}  # a list of levels (checked alike by now) stacks into one array
        arrays = {name: np.asarray(value) for name, value in inputs.items() if name in fields}
        scalars = {name: value for name, value in inputs.items() if name in stencil.params}
        if not warn_inputs_not_finite(stencil, arrays, scalars, 0, 1, stacklevel=2):
            warn_not_finite(self.name, not_finite(out), 0, steps, stacklevel=2)
        return out

    def compile(self, target: str = "openmp", dtype: DTypeLike = None, threads: int | None = None,
                schedule: Any = None, **options: Any) -> Any:
        """JIT-build the stencil for `target`; returns a kernel with `.run(steps=..., **inputs)`.
        `options` are the target's own (its `compile_options`), e.g. `emulate=True`."""
        from msc.codegen import check_options, get_target
        from msc.runtime.kernel import check_threads

        backend = get_target(target)
        check_options(target, "compile", options, backend.compile_options, ("target", "dtype", "threads", "schedule"))
        check_threads(threads)
        return backend.compile(self.poly(dtype), threads=threads, schedule=schedule, **options)

    def emit(self, target: str, directory: str | Path, dtype: DTypeLike = None, schedule: Any = None,
             **options: Any) -> Path:
        """Write a standalone source tree (kernel, driver, Makefile) into `directory`.
        `options` are the target's own (its `emit_options`), e.g. `chip=...`."""
        from msc.codegen import check_options, get_target

        backend = get_target(target)
        check_options(target, "emit", options, backend.emit_options, ("target", "directory", "dtype", "schedule"))
        return backend.emit(self.poly(dtype), Path(directory), schedule=schedule, **options)


@lru_cache(maxsize=64)
def _poly(stencil_ir: ir.StencilIR) -> PolyIR:
    return PolyIR(stencil_ir)


@overload
def stencil(func: Callable[..., Any]) -> Stencil: ...
@overload
def stencil(*, boundary: str = "dirichlet", name: str | None = None) -> Callable[[Callable[..., Any]], Stencil]: ...


def stencil(func: Callable[..., Any] | None = None, *, boundary: str = "dirichlet",
            name: str | None = None) -> Any:
    """Decorate a function whose body assigns `u[t+1, x, ...] = ...` to make a Stencil.

    `@msc.stencil` or `@msc.stencil(boundary="periodic")`.
    """
    if func is None:
        return lambda f: Stencil(f, boundary=boundary, name=name)
    return Stencil(func, boundary=boundary, name=name)


def load_stencil(path: str | Path) -> Stencil:
    """The Stencil defined by a .msc file."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a byte-order mark, as some editors write, is dropped
    except (OSError, UnicodeDecodeError) as e:
        raise MscError(f"{path}: cannot read the stencil file: {e}") from None
    return Stencil(None, stencil_ir=parse_stencil(text, str(path)))
