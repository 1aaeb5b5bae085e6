"""Multigrid's grid transfers, compiled: interpolation P and restriction R = P^T between a grid and
the next coarser one, over every axis at once (transfer.c, OpenMP), on views of kernel buffers.

Along each axis the 1D interpolation comes from msc.pde.coarsen.Axis1D (an axis
without one is kept: the identity). Restriction writes straight into the coarse
level's right-hand side and interpolation adds straight into the fine level's
unknown, so a V-cycle copies nothing between levels.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from msc.pde.coarsen import Axis1D
from msc.pde.vectors import layout, typed_library


@functools.lru_cache(maxsize=None)
def _library(dtype: np.dtype) -> ctypes.CDLL:
    """transfer.c built for arrays of `dtype` (float64 or float32)."""
    lib = typed_library("transfer.c", "msc_mg_transfer", "REAL", dtype)
    for fn in ("mg_restrict", "mg_prolong_add"):
        getattr(lib, fn).restype = None
    return lib


def _restriction_table(n: int, ax: Axis1D | None) -> tuple[np.ndarray, np.ndarray]:
    """Per coarse point, its 3 fine points (3 x m indices, 3 x m weights; m = n on a kept axis)."""
    if ax is None:
        index = np.tile(np.arange(n), (3, 1))
        return index, np.vstack([np.ones(n), np.zeros(n), np.zeros(n)])
    support = ax.support()
    return np.vstack([i for i, _ in support]), np.vstack([w for _, w in support])


def _interpolation_table(n: int, ax: Axis1D | None) -> tuple[np.ndarray, np.ndarray]:
    """Per fine point, its 2 coarse points (2 x n indices, 2 x n weights)."""
    if ax is None:
        return np.vstack([np.arange(n), np.zeros(n, np.int64)]), np.vstack([np.ones(n), np.zeros(n)])
    columns = ax.columns()
    return np.vstack([j for j, _ in columns]), np.vstack([w for _, w in columns])


def _contiguous(tables: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    return [np.ascontiguousarray(a, dtype=dt) for index, weight in tables
            for a, dt in ((index, np.int64), (weight, np.float64))]


class Transfer:
    """P and R between a grid of `shape` and the grid its `axes` coarsen it to (None: kept)."""

    def __init__(self, shape: tuple[int, ...], axes: list[Axis1D | None]) -> None:
        self.ndim = len(shape)
        self.fine = tuple(shape)
        self.coarse = tuple(n if ax is None else ax.m for n, ax in zip(shape, axes))
        unit: list[Axis1D | None] = [None] * (3 - self.ndim)
        padded_shape, padded_axes = (1,) * (3 - self.ndim) + self.fine, unit + list(axes)
        self._restrict = _contiguous([_restriction_table(n, ax) for n, ax in zip(padded_shape, padded_axes)])
        self._prolong = _contiguous([_interpolation_table(n, ax) for n, ax in zip(padded_shape, padded_axes)])
        self._m = np.array((1,) * (3 - self.ndim) + self.coarse, np.int64)
        self._n = np.array((1,) * (3 - self.ndim) + self.fine, np.int64)

    def _check(self, fine: np.ndarray, coarse: np.ndarray) -> None:
        for a, shape, what in ((fine, self.fine, "fine"), (coarse, self.coarse, "coarse")):
            if a.shape != shape:
                raise ValueError(f"grid transfer: the {what} array has shape {a.shape}, expected {shape}")
        if fine.dtype != coarse.dtype:
            raise ValueError(f"grid transfer: the fine array is {fine.dtype} and the coarse array {coarse.dtype}: "
                             "they must be of one type")

    def restrict(self, fine: np.ndarray, out: np.ndarray, threads: int) -> np.ndarray:
        """out = R fine (out: the coarse grid's array, a view may be given); returns out."""
        self._check(fine, out)
        _library(fine.dtype).mg_restrict(*_arrays(fine, layout(fine)[1], out, layout(out)[1], self._m),
                               ctypes.c_long(self.fine[-1]), *_arrays(*self._restrict), ctypes.c_int(threads))
        return out

    def prolong_add(self, coarse: np.ndarray, into: np.ndarray, threads: int) -> None:
        """into += P coarse (into: the fine grid's array, a view may be given)."""
        self._check(into, coarse)
        _library(into.dtype).mg_prolong_add(*_arrays(coarse, layout(coarse)[1], into, layout(into)[1],
                                           self._n), ctypes.c_long(self.coarse[-1]), *_arrays(*self._prolong),
                                  ctypes.c_int(threads))


def _arrays(*arrays: np.ndarray) -> list[ctypes.c_void_p]:
    return [ctypes.c_void_p(a.ctypes.data) for a in arrays]
