"""ctypes binding of the C halo-exchange library (msc/runtime/halo.c).

The library is JIT-built with the MPI compiler wrapper (`mpicc`) of the MPI
that mpi4py runs on, and takes communicators as Fortran handles
(`comm.py2f()`, `MPI_Comm_f2c` in C). Which `mpicc`: $MPICC, else the one
next to the running Python (the `mpich` wheel puts it there), else PATH.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from msc.errors import MscError
from msc.runtime.build import build_shared_library, load_library

HERE = Path(__file__).resolve().parent
CFLAGS = ("-O2", "-fPIC", "-shared", "-std=c11")
_ERRLEN = 512


class DistributedError(MscError):
    """A distributed run cannot go ahead; raised on every rank alike."""


def find_mpicc() -> str:
    """The MPI C compiler wrapper to build with (see the module docstring)."""
    candidates = [os.environ.get("MPICC"), str(Path(sys.executable).parent / "mpicc"), shutil.which("mpicc")]
    for c in candidates:
        if c and shutil.which(c):
            return c
    raise DistributedError(
        "no MPI C compiler found: install the MPI extra (pip install 'msc[mpi]', which brings "
        "mpicc with the mpich wheel) or set MPICC to your MPI's mpicc"
    )


def library_source() -> str:
    """halo.c with halo.h inlined (the JIT cache keys on the whole text)."""
    header = (HERE / "halo.h").read_text()
    return (HERE / "halo.c").read_text().replace('#include "halo.h"', header, 1)


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    from mpi4py import MPI

    version = MPI.Get_library_version().splitlines()[0]
    source = f"/* built for {version} */\n" + library_source()
    lib = load_library(build_shared_library(source, "msc_halo", cc=find_mpicc(), flags=CFLAGS))
    p, i, l, err = ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_char_p
    ip, lp, pp = ctypes.POINTER(i), ctypes.POINTER(l), ctypes.POINTER(p)
    signatures: dict[str, tuple[list[Any], Any]] = {
        "msc_block": ([l, i, i, lp, lp], None),
        "msc_grid_create": ([i, i, ip, ip, lp, pp, err, i], i),
        "msc_grid_split": ([p, lp, err, i], i),
        "msc_grid_layout": ([p, ip, ip, lp, lp], None),
        "msc_grid_coords_of": ([p, i, ip], None),
        "msc_grid_free": ([p], None),
        "msc_grid_padding": ([p, i, lp, lp, lp, lp], None),
        "msc_halo_create": ([p, lp, lp, i, i, ip, pp, err, i], i),
        "msc_halo_start": ([p, p], None),
        "msc_halo_finish": ([p], None),
        "msc_halo_bytes_sent": ([p], ctypes.c_longlong),
        "msc_halo_free": ([p], None),
    }
    for name, (argtypes, restype) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype
    return lib


def _ints(values: Sequence[int], ctype: Any = ctypes.c_int) -> Any:
    return (ctype * max(len(values), 1))(*(int(v) for v in values))


def block(n: int, parts: int, index: int) -> tuple[int, int]:
    """(start, count) of block `index` when `n` points are split into `parts`."""
    start, count = ctypes.c_long(), ctypes.c_long()
    _library().msc_block(n, parts, index, ctypes.byref(start), ctypes.byref(count))
    return start.value, count.value


class Grid:
    """A Cartesian process grid over `comm` and this rank's block of the global interior: an even
    split, or the blocks `bounds` gives (per dimension, dims[d] + 1 points from 0 to the interior's
    size; `dims` must then be given in full)."""

    def __init__(self, comm: Any, interior: Sequence[int], periodic: bool, dims: Sequence[int] | None = None,
                 bounds: Sequence[Sequence[int]] | None = None) -> None:
        lib = _library()
        self.ndim = len(interior)
        self.interior = tuple(interior)
        want = list(dims) if dims is not None else [0] * self.ndim
        if len(want) != self.ndim:
            raise DistributedError(f"dims {tuple(want)} has {len(want)} entries for a {self.ndim}D stencil")
        handle, err = ctypes.c_void_p(), ctypes.create_string_buffer(_ERRLEN)
        if lib.msc_grid_create(comm.py2f(), self.ndim, _ints(want), _ints([int(periodic)] * self.ndim),
                               _ints(interior, ctypes.c_long), ctypes.byref(handle), err, _ERRLEN):
            raise DistributedError(err.value.decode())
        self._handle = handle
        self._rank = comm.rank
        self.bounds = None if bounds is None else tuple(tuple(int(v) for v in b) for b in bounds)
        if self.bounds is not None:
            if dims is None or len(self.bounds) != self.ndim or any(
                    len(b) != k + 1 for b, k in zip(self.bounds, dims)):
                self.close()
                raise DistributedError(f"block bounds {self.bounds} need dims {dims} in full, one more bound "
                                       "than ranks per dimension")
            if lib.msc_grid_split(handle, _ints([v for b in self.bounds for v in b], ctypes.c_long), err, _ERRLEN):
                self.close()
                raise DistributedError(err.value.decode())
        d, c = _ints([0] * self.ndim), _ints([0] * self.ndim)
        s, n = _ints([0] * self.ndim, ctypes.c_long), _ints([0] * self.ndim, ctypes.c_long)
        lib.msc_grid_layout(handle, d, c, s, n)
        self.dims = tuple(d[:self.ndim])
        self.coords = tuple(c[:self.ndim])
        self.start = tuple(s[:self.ndim])
        self.count = tuple(n[:self.ndim])

    def coords_of(self, rank: int) -> tuple[int, ...]:
        c = _ints([0] * self.ndim)
        _library().msc_grid_coords_of(self._handle, rank, c)
        return tuple(c[:self.ndim])

    def block_of(self, rank: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(start, count) per dimension of the block of `rank`."""
        coords = self.coords_of(rank)
        if self.bounds is not None:
            return (tuple(b[c] for b, c in zip(self.bounds, coords)),
                    tuple(b[c + 1] - b[c] for b, c in zip(self.bounds, coords)))
        parts = [block(n, p, c) for n, p, c in zip(self.interior, self.dims, coords)]
        return tuple(s for s, _ in parts), tuple(n for _, n in parts)

    def padding(self, halo: Sequence[int], edge: Sequence[int], rank: int | None = None
                ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(low, high) padding per dimension of the block of `rank` (default: this
        rank): `halo` toward a neighbour, `edge` on a physical boundary."""
        lo, hi = _ints([0] * self.ndim, ctypes.c_long), _ints([0] * self.ndim, ctypes.c_long)
        rank = self._rank if rank is None else rank
        _library().msc_grid_padding(self._handle, rank, _ints(halo, ctypes.c_long), _ints(edge, ctypes.c_long), lo, hi)
        return tuple(lo[:self.ndim]), tuple(hi[:self.ndim])

    def close(self) -> None:
        if self._handle:
            _library().msc_grid_free(self._handle)
            self._handle = ctypes.c_void_p()


class HaloExchanger:
    """Split-phase halo exchange of arrays of this rank's block padded by `halo`
    toward its neighbours and by `edge` (default: `halo`) on a physical boundary."""

    def __init__(self, grid: Grid, halo: Sequence[int], itemsize: int, directions: Sequence[Sequence[int]],
                 edge: Sequence[int] | None = None) -> None:
        lib = _library()
        edge = halo if edge is None else edge
        flat = [v for direction in directions for v in direction]
        handle, err = ctypes.c_void_p(), ctypes.create_string_buffer(_ERRLEN)
        if lib.msc_halo_create(grid._handle, _ints(halo, ctypes.c_long), _ints(edge, ctypes.c_long), itemsize,
                               len(directions), _ints(flat), ctypes.byref(handle), err, _ERRLEN):
            raise DistributedError(err.value.decode())
        self._handle = handle
        lo, hi = grid.padding(halo, edge)
        self.shape = tuple(a + n + b for a, n, b in zip(lo, grid.count, hi))
        self._array: np.ndarray | None = None

    def start(self, array: np.ndarray) -> None:
        """Send the boundary slabs of `array` (C-contiguous, padded shape); returns at once."""
        assert array.shape[-len(self.shape):] == self.shape and array.flags.c_contiguous
        self._array = array  # kept alive until finish
        _library().msc_halo_start(self._handle, array.ctypes.data)

    def finish(self) -> None:
        """Wait for the messages and fill the halo of the started array."""
        _library().msc_halo_finish(self._handle)
        self._array = None

    @property
    def bytes_sent(self) -> int:
        return int(_library().msc_halo_bytes_sent(self._handle))

    def close(self) -> None:
        if self._handle:
            _library().msc_halo_free(self._handle)
            self._handle = ctypes.c_void_p()
