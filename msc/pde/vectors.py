"""The iterative solvers' vector operations, compiled (vectors.c, OpenMP): the Krylov methods' fused
updates and dot products (CG's on flat vectors and views into kernel buffers alike), and copies
between flat vectors and such views. The operand that may come from or go to a single-precision
multigrid hierarchy (the preconditioned z, the hierarchy's right-hand side) may be float32: the
library built for it is chosen by that operand's type."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from msc.runtime import build_shared_library, load_library

F64 = np.dtype(np.float64)
TYPES = {F64: "double", np.dtype(np.float32): "float"}  # the types a z operand may take


def typed_library(source_file: str, name: str, macro: str, dtype: np.dtype) -> ctypes.CDLL:
    """A C source beside this module, built with `macro` the C type of `dtype` (the source's default is
    double: the float build is a library of its own, its functions of the same names)."""
    source = (Path(__file__).resolve().parent / source_file).read_text()
    if dtype != F64:
        source, name = f"#define {macro} {TYPES[dtype]}\n{source}", f"{name}_{TYPES[dtype]}"
    return load_library(build_shared_library(source, name))


@functools.lru_cache(maxsize=None)
def _library(z: np.dtype) -> ctypes.CDLL:
    """vectors.c built for z operands of type `z`."""
    lib = typed_library("vectors.c", "msc_pde_vectors", "ZREAL", z)
    vec = np.ctypeslib.ndpointer(np.float64, flags="C_CONTIGUOUS")
    zvec = np.ctypeslib.ndpointer(z, flags="C_CONTIGUOUS")
    long, double, int_, ptr = ctypes.c_long, ctypes.c_double, ctypes.c_int, ctypes.c_void_p
    for name, restype, argtypes in (("vec_dot", double, [long, vec, zvec, int_]),
                                    ("vec_residual_update", double, [long, double, vec, vec, int_]),
                                    ("vec_cg_step", None, [long, double, vec, zvec, double, vec, int_]),
                                    ("vec_axpy", None, [long, double, vec, vec, int_]),
                                    ("vec_scale", None, [long, double, zvec, vec, int_]),
                                    ("vec_dot_views", double, [ptr] * 5 + [int_]),
                                    ("vec_residual_update_views", double, [ptr, double] + [ptr] * 6 + [int_]),
                                    ("vec_cg_step_views", None, [ptr, double] + [ptr] * 4 + [double, ptr, ptr, int_]),
                                    ("vec_axpy_views", None, [ptr, double, ptr, ptr, ptr, ptr, int_]),
                                    ("vec_scale_views", None, [ptr, double, ptr, ptr, ptr, ptr, int_]),
                                    ("vec_gather", None, [ptr, ptr, ptr, vec, int_]),
                                    ("vec_scatter", None, [vec, ptr, ptr, ptr, int_])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def _z(a: np.ndarray) -> ctypes.CDLL:
    """The library for `a` as the z operand."""
    if a.dtype not in TYPES:
        raise ValueError(f"need a float64 or float32 array, got {a.dtype}")
    return _library(a.dtype)


def layout(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A float64 or float32 array of 1-3 dimensions, contiguous along its last axis, as a 3D view: its
    shape and the strides of its two outer axes in elements (unit axes in front)."""
    item = a.dtype.itemsize
    if a.dtype not in TYPES or a.ndim > 3 or any(s % item for s in a.strides) or \
            (a.shape[-1] > 1 and a.strides[-1] != item):
        raise ValueError("need a float64 or float32 array of at most 3 dimensions, contiguous along its last axis")
    front = 3 - a.ndim
    shape = np.array((1,) * front + a.shape, np.int64)
    strides = np.array((0,) * front + tuple(s // item for s in a.strides), np.int64)[:2]
    return shape, strides


def _views(*arrays: np.ndarray) -> tuple[Any, ...]:
    """The arrays (of one size; the views among them of one shape, else the first's) as 3D views of that shape, for the
    `_views` functions of vectors.c: the shape, then each array's data and outer strides (ctypes
    pointers, which keep their arrays alive)."""
    view = next((a for a in arrays if not a.flags.c_contiguous), arrays[0])
    shape, _ = layout(view)
    out: list[Any] = [shape.ctypes.data_as(ctypes.c_void_p)]
    for a in arrays:
        if a.size != view.size:
            raise ValueError(f"vectors of {a.size} and {view.size} values")
        _, strides = layout(a.reshape(view.shape) if a.flags.c_contiguous else a)
        out.append((a.ctypes.data_as(ctypes.c_void_p), strides.ctypes.data_as(ctypes.c_void_p)))
    return tuple(out)


def _local(part: float) -> float:
    return part


class Vectors:
    """Vector operations on `threads` threads; `total` sums a dot product's local part over MPI
    ranks (the identity in one process)."""

    def __init__(self, threads: int, total: Callable[[float], float] = _local) -> None:
        self.threads, self.total = threads, total
        self._scratch: dict[str, np.ndarray] = {}

    def scratch(self, name: str, rows: int, n: int) -> np.ndarray:
        """`rows` vectors of `n` values kept between calls (GMRES's bases: their memory is paged
        in once per solver, not once per solve)."""
        a = self._scratch.get(name)
        if a is None or a.shape[0] < rows or a.shape[1] != n:
            a = self._scratch[name] = np.empty((rows, n))
        return a[:rows]

    def dot(self, a: np.ndarray, b: np.ndarray) -> float:
        """a . b (either may be a view into a kernel buffer, and one of them float32)."""
        if a.dtype != np.float64:
            a, b = b, a
        if a.flags.c_contiguous and b.flags.c_contiguous:
            return self.total(_z(b).vec_dot(a.size, a, b, self.threads))
        shape, (a, sa), (b_, sb) = _views(a, b)
        return self.total(_z(b).vec_dot_views(shape, a, sa, b_, sb, self.threads))

    def residual_update(self, alpha: float, r: np.ndarray, q: np.ndarray, into: np.ndarray | None = None) -> float:
        """r -= alpha q, in one pass (either may be a view); returns r . r. `into`: a view (float32 or
        float64) r's new values are written into as well, in the same pass."""
        if into is None and r.flags.c_contiguous and q.flags.c_contiguous:
            return self.total(_library(F64).vec_residual_update(r.size, alpha, r, q, self.threads))
        if into is None:
            shape, (r, sr), (q, sq) = _views(r, q)
            return self.total(_library(F64).vec_residual_update_views(shape, alpha, r, sr, q, sq, None, None,
                                                                      self.threads))
        shape, (r, sr), (q, sq), (y, sy) = _views(r, q, into)
        return self.total(_z(into).vec_residual_update_views(shape, alpha, r, sr, q, sq, y, sy, self.threads))

    def cg_step(self, alpha: float, x: np.ndarray, z: np.ndarray, beta: float, p: np.ndarray) -> None:
        """x += alpha p, then p = z + beta p, in one pass (any may be a view; z may be float32)."""
        if all(v.flags.c_contiguous for v in (x, z, p)):
            _z(z).vec_cg_step(p.size, alpha, x, z, beta, p, self.threads)
            return
        shape, (x_, sx), (z_, sz), (p, sp) = _views(x, z, p)
        _z(z).vec_cg_step_views(shape, alpha, x_, sx, z_, sz, beta, p, sp, self.threads)

    def axpy(self, a: float, x: np.ndarray, y: np.ndarray) -> None:
        """y += a x, in place (either may be a view)."""
        if x.flags.c_contiguous and y.flags.c_contiguous:
            _library(F64).vec_axpy(y.size, a, x, y, self.threads)
            return
        shape, (x, sx), (y, sy) = _views(x, y)
        _library(F64).vec_axpy_views(shape, a, x, sx, y, sy, self.threads)

    def scale(self, a: float, x: np.ndarray, out: np.ndarray) -> None:
        """out = a x (a copy when a is 1; either may be a view, x float32)."""
        if x.flags.c_contiguous and out.flags.c_contiguous:
            _z(x).vec_scale(out.size, a, x, out, self.threads)
            return
        shape, (x_, sx), (out, so) = _views(x, out)
        _z(x).vec_scale_views(shape, a, x_, sx, out, so, self.threads)


def _flat(a: np.ndarray, view: np.ndarray) -> np.ndarray:
    if not a.flags.c_contiguous or a.size != view.size or a.dtype != np.float64:
        raise ValueError(f"need a C-contiguous float64 array of {view.size} values, got {a.dtype} {a.shape}")
    return a.reshape(-1)


def gather(view: np.ndarray, flat: np.ndarray, threads: int) -> None:
    """flat (C-contiguous, float64, the view's size) = view (float64 or float32)."""
    shape, strides = layout(view)
    flat = _flat(flat, view)
    _z(view).vec_gather(view.ctypes.data, shape.ctypes.data, strides.ctypes.data, flat, threads)


def scatter(flat: np.ndarray, view: np.ndarray, threads: int) -> None:
    """view (float64 or float32) = flat (C-contiguous, the view's size)."""
    shape, strides = layout(view)
    flat = _flat(np.ascontiguousarray(flat, np.float64), view)
    _z(view).vec_scatter(flat, view.ctypes.data, shape.ctypes.data, strides.ctypes.data, threads)
