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

from msc.pde.coarsen import Axis1D, first_centre
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


Tables = list[tuple[np.ndarray, np.ndarray]]  # per axis: (indices, weights), k x points


class Transfer:
    """P and R between a grid of `shape` and the grid its `axes` coarsen it to (None: kept)."""

    def __init__(self, shape: tuple[int, ...], axes: list[Axis1D | None]) -> None:
        coarse = tuple(n if ax is None else ax.m for n, ax in zip(shape, axes))
        self._tables([_restriction_table(n, ax) for n, ax in zip(shape, axes)],
                     [_interpolation_table(n, ax) for n, ax in zip(shape, axes)],
                     (tuple(shape), coarse), (tuple(shape), coarse))

    @classmethod
    def for_block(cls, spans: list[tuple[int, int, int]]) -> Transfer:
        """R and P of one rank's block (msc.pde.distributed), per axis its fine points [s, e) and the
        base (coarse point I sits on fine 2I + base): R from the block's array with one layer around
        it (zero beyond a dirichlet edge) to the coarse points centred in the block, P from the coarse
        slab around those (one coarse point more on each side) onto the block."""
        out = cls.__new__(cls)
        restriction, interpolation, centres, slab = [], [], [], []
        for s, e, base in spans:
            i0, i1 = first_centre(s, base), first_centre(e, base)
            a = i0 - 1
            j = 2 * np.arange(i0, i1) + base - s + 1  # each centre's fine point, in the layered array
            half = np.full(j.size, 0.5)
            restriction.append((np.vstack([j, j - 1, j + 1]), np.vstack([np.ones(j.size), half, half])))
            x = np.arange(s, e) - base
            odd = 0.5 * (x % 2)  # a fine point between two coarse ones takes half of each
            first = x // 2 - a  # the coarse point at or left of x, in the slab
            interpolation.append((np.vstack([first, first + 1]), np.vstack([1.0 - odd, odd])))
            centres.append(i1 - i0)
            slab.append(i1 - i0 + 2)
        block = tuple(e - s for s, e, _ in spans)
        out._tables(restriction, interpolation, (tuple(n + 2 for n in block), tuple(centres)), (block, tuple(slab)))
        return out

    def _tables(self, restriction: Tables, interpolation: Tables, restricted: tuple[tuple[int, ...], ...],
                prolonged: tuple[tuple[int, ...], ...]) -> None:
        """The tables, padded to 3 axes, and the (fine, coarse) shapes R and P take."""
        ndim = len(restricted[0])
        unit_r = [(np.zeros((3, 1), np.int64), np.vstack([np.ones(1), np.zeros(1), np.zeros(1)]))] * (3 - ndim)
        unit_p = [(np.zeros((2, 1), np.int64), np.vstack([np.ones(1), np.zeros(1)]))] * (3 - ndim)
        self._restrict = _contiguous(unit_r + restriction)
        self._prolong = _contiguous(unit_p + interpolation)
        self.restricted, self.prolonged = restricted, prolonged
        self.fine, self.coarse = prolonged

    @staticmethod
    def _check(fine: np.ndarray, coarse: np.ndarray, shapes: tuple[tuple[int, ...], ...]) -> None:
        for a, shape, what in ((fine, shapes[0], "fine"), (coarse, shapes[1], "coarse")):
            if a.shape != shape:
                raise ValueError(f"grid transfer: the {what} array has shape {a.shape}, expected {shape}")
        if fine.dtype != coarse.dtype:
            raise ValueError(f"grid transfer: the fine array is {fine.dtype} and the coarse array {coarse.dtype}: "
                             "they must be of one type")

    def restrict(self, fine: np.ndarray, out: np.ndarray, threads: int) -> np.ndarray:
        """out = R fine (out: the coarse grid's array, a view may be given); returns out."""
        self._check(fine, out, self.restricted)
        _library(fine.dtype).mg_restrict(*_arrays(fine, layout(fine)[1], out, layout(out)[1], layout(out)[0]),
                                         ctypes.c_long(fine.shape[-1]), *_arrays(*self._restrict),
                                         ctypes.c_int(threads))
        return out

    def prolong_add(self, coarse: np.ndarray, into: np.ndarray, threads: int) -> None:
        """into += P coarse (into: the fine grid's array, a view may be given)."""
        self._check(into, coarse, self.prolonged)
        _library(into.dtype).mg_prolong_add(*_arrays(coarse, layout(coarse)[1], into, layout(into)[1],
                                                     layout(into)[0]), ctypes.c_long(coarse.shape[-1]),
                                            *_arrays(*self._prolong), ctypes.c_int(threads))


def _arrays(*arrays: np.ndarray) -> list[ctypes.c_void_p]:
    return [ctypes.c_void_p(a.ctypes.data) for a in arrays]
