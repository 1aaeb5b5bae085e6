"""Whether a run's fields are still finite: the check after each `run` and `advance`.

numpy's `isfinite(a).all()` reads a level once on one thread and writes a boolean array
an eighth of its size (float64): at 256^3 it took as long as a step of heat3d,
so a loop of `advance(1)` ran at half speed. A large level is checked by a small
OpenMP C library (finite.c) on the kernel's threads, without the temporary; small or
oddly strided arrays, and hosts where the library does not build, by numpy.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from msc.errors import CompileError
from msc.runtime.build import build_shared_library, load_library

#: arrays with fewer points are checked by numpy: the library's call would cost more than it saves
LARGE = 1 << 16


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    """The built finite.c, or None where it does not build (numpy checks then)."""
    try:
        lib = load_library(build_shared_library((Path(__file__).parent / "finite.c").read_text(), "msc_finite"))
    except CompileError:
        return None
    long = ctypes.c_long
    for dtype in ("float32", "float64"):
        fn = getattr(lib, f"msc_finite_{dtype}")
        fn.argtypes = [ctypes.c_void_p, long, long, long, long, long, ctypes.c_int]
        fn.restype = ctypes.c_int
    return lib


def _boxed(a: np.ndarray) -> tuple[int, ...] | None:
    """(n0, n1, n2, s0, s1): `a` as rows of n2 contiguous points, n0 x n1 of them s0 and s1 points
    apart; None when it is not such a box (more than 3 dimensions, or its last axis not contiguous)."""
    if a.ndim > 3 or a.strides[-1] != a.itemsize or any(s % a.itemsize for s in a.strides):
        return None
    shape = (1,) * (3 - a.ndim) + a.shape
    strides = (0,) * (3 - a.ndim) + tuple(s // a.itemsize for s in a.strides)
    return (*shape, strides[0], strides[1])


def all_finite(a: np.ndarray, threads: int = 1) -> bool:
    """Whether every value of `a` is finite; a large float32 or float64 box is read on `threads`
    OpenMP threads (0: OpenMP's default)."""
    lib = _library() if a.size >= LARGE and a.dtype in (np.float32, np.float64) else None
    box = _boxed(a) if lib is not None else None
    if box is None:
        return bool(np.isfinite(a).all())
    return bool(getattr(lib, f"msc_finite_{a.dtype}")(a.ctypes.data, *box, int(threads)))


def not_finite(fields: Mapping[str, np.ndarray], threads: int = 1) -> list[str]:
    """The names of the fields holding NaN or inf (one read of each array)."""
    return [name for name, level in fields.items() if not all_finite(level, threads)]
