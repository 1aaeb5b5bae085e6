"""Checking and normalising the arguments of `reference` and `run`.

Every backend and the reference interpreter take their inputs through
`bind_arguments`, so wrong shapes, levels, names and dtypes are reported the
same way everywhere, and the caller's arrays are never modified (they are
copied into the state each runner owns). Any memory layout is accepted
(Fortran order, strided views, read-only arrays), and so is the stencil's
dtype in the other byte order (converted); a problem whose buffers would not
fit in the machine's memory is refused before anything is allocated.
"""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from msc import ir
from msc.errors import StencilArgumentError


@dataclass(frozen=True)
class BoundArguments:
    """Validated inputs: `levels[f]` oldest first (one per window level), scalars as floats."""

    shape: tuple[int, ...]
    levels: dict[str, list[np.ndarray]]
    scalars: dict[str, float]


def bind_arguments(stencil: ir.StencilIR, steps: Any, inputs: Mapping[str, Any]) -> BoundArguments:
    where = f"stencil '{stencil.name}'"
    if not isinstance(steps, numbers.Integral) or isinstance(steps, bool) or steps < 0:
        raise StencilArgumentError(f"{where}: steps must be a non-negative integer, got {steps!r}")
    expected = [f.name for f in stencil.fields] + list(stencil.params)
    unknown = sorted(set(inputs) - set(expected))
    if unknown:
        raise StencilArgumentError(
            f"{where}: unknown argument(s) {', '.join(unknown)}; it takes {', '.join(expected)}"
        )
    missing = [n for n in expected if n not in inputs]
    if missing:
        raise StencilArgumentError(f"{where}: missing argument(s) {', '.join(missing)}")

    scalars: dict[str, float] = {}
    for p in stencil.params:
        v = inputs[p]
        if isinstance(v, np.ndarray) and v.ndim == 0:
            v = v.item()
        if not isinstance(v, numbers.Real) or isinstance(v, bool):
            raise StencilArgumentError(
                f"{where}: scalar parameter '{p}' must be a number, got {type(v).__name__}"
            )
        scalars[p] = float(v)

    levels: dict[str, list[np.ndarray]] = {}
    shape: tuple[int, ...] | None = None
    first = ""
    for f in stencil.fields:
        arrays = _levels_of(stencil, f, inputs[f.name])
        for a in arrays:
            if a.ndim != stencil.ndim:
                raise StencilArgumentError(
                    f"{where}: '{f.name}' must be a {stencil.ndim}D array, got shape {a.shape}"
                )
            check_dtype(stencil, f.name, a)
            if shape is None:
                shape, first = a.shape, f.name
            elif a.shape != shape:
                raise StencilArgumentError(
                    f"{where}: '{f.name}' has shape {a.shape} but '{first}' has {shape}; all fields "
                    "must have the same shape"
                )
        levels[f.name] = [_native(stencil, a) for a in arrays]
    assert shape is not None
    _check_extent(stencil, shape)
    check_memory(stencil, shape)
    return BoundArguments(shape, levels, scalars)


def _levels_of(stencil: ir.StencilIR, f: ir.FieldDecl, value: Any) -> list[np.ndarray]:
    where = f"stencil '{stencil.name}'"
    if isinstance(value, (list, tuple)):
        if f.time_invariant:
            raise StencilArgumentError(
                f"{where}: '{f.name}' is a time-invariant input and takes one array, got a list"
            )
        if len(value) != f.window:
            names = ", ".join(str(_level_name(k - f.window + 1)) for k in range(f.window))
            raise StencilArgumentError(
                f"{where}: '{f.name}' takes one array or a list of {f.window} time level(s) "
                f"({names}, oldest first); got a list of {len(value)}"
            )
        arrays = list(value)
    else:
        arrays = [value] * max(f.window, 1)
    for a in arrays:
        if not isinstance(a, np.ndarray):
            raise StencilArgumentError(
                f"{where}: field '{f.name}' must be a numpy array, got {type(a).__name__}"
            )
    return arrays


def check_dtype(stencil: ir.StencilIR, name: str, a: np.ndarray) -> None:
    """StencilArgumentError unless array `a` (of field `name`) is in the stencil's dtype (either byte order)."""
    want = np.dtype(stencil.dtype)
    if a.dtype == want or a.dtype == want.newbyteorder():  # the other byte order is converted
        return
    where = f"stencil '{stencil.name}'"
    fix = f"convert it with a.astype(np.{stencil.dtype})"
    native = a.dtype.newbyteorder("=")
    if native.name in ir.DTYPES:  # the other precision: running in it works too
        fix += f", or run the stencil in {native.name} (dtype='{native.name}')"
    raise StencilArgumentError(
        f"{where}: '{name}' has dtype {a.dtype.name} but the stencil runs in {stencil.dtype}; "
        f"{fix} (msc runs in {' or '.join(ir.DTYPES)})"
    )


def _native(stencil: ir.StencilIR, a: np.ndarray) -> np.ndarray:
    """`a` in the machine's byte order (a copy only when it is not)."""
    return a if a.dtype == np.dtype(stencil.dtype) else a.astype(stencil.dtype)


def memory_bytes() -> int:
    """The machine's physical memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(stencil: ir.StencilIR, shape: tuple[int, ...], what: str = "arrays") -> None:
    """Refuse a problem whose kernel buffers (every slot of every field, padded)
    need more than the machine's memory, before any is allocated."""
    ghosts = stencil.radius if stencil.boundary == "periodic" else (0,) * stencil.ndim
    points = 1
    for n, g in zip(shape, ghosts):
        points *= n + 2 * g
    slots = sum(f.slots if f.written else 1 for f in stencil.fields)
    need = points * slots * np.dtype(stencil.dtype).itemsize
    have = memory_bytes()
    if need > have:
        raise StencilArgumentError(
            f"stencil '{stencil.name}': {what} of shape {shape} need {need / 2**30:.1f} GiB of buffers "
            f"({slots} padded {stencil.dtype} levels), more than this machine's {have / 2**30:.1f} GiB of memory"
        )


def _level_name(dt: int) -> str:
    return "t" if dt == 0 else f"t{dt:+d}"


def _check_extent(stencil: ir.StencilIR, shape: tuple[int, ...]) -> None:
    for d, (n, r) in enumerate(zip(shape, stencil.radius)):
        need = max(r, 1) if stencil.boundary == "periodic" else 2 * r + 1
        if n < need:
            what = "periodic extent" if stencil.boundary == "periodic" else "extent (ring of width {r} on each side plus one interior point)"
            raise StencilArgumentError(
                f"stencil '{stencil.name}': arrays of shape {shape} are too small in dimension "
                f"{ir.DIM_NAMES[d]}: {what.format(r=r)} needs at least {need}"
            )
