"""Packing user arrays into the kernels' memory layout and back.

Every compiled kernel sees, per written field, a ring buffer of `slots`
padded levels (level t+dt in slot (t+dt) mod slots) and, per time-invariant
input, one padded array. Padding is the ghost ring of a periodic stencil
(dirichlet arrays already carry their ring). The dirichlet ring is fixed in
time and comes from the newest input level, as in the reference.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from msc import ir
from msc.ir.arguments import BoundArguments


def ghost_width(stencil: ir.StencilIR) -> tuple[int, ...]:
    return stencil.radius if stencil.boundary == "periodic" else (0,) * stencil.ndim


def padded_shape(stencil: ir.StencilIR, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n + 2 * g for n, g in zip(shape, ghost_width(stencil)))


def _pad(stencil: ir.StencilIR, a: np.ndarray) -> np.ndarray:
    g = ghost_width(stencil)
    if not any(g):
        return a
    return np.pad(a, [(w, w) for w in g], mode="wrap")


def put_level(stencil: ir.StencilIR, slot: np.ndarray, values: np.ndarray) -> None:
    """Write `values` (a level without ghost cells) into the buffer level `slot`
    in place; a periodic level's ghost cells are refreshed from it."""
    g = ghost_width(stencil)
    domain = tuple(slice(w, n - w) for w, n in zip(g, slot.shape))
    slot[domain] = values
    if any(g):
        slot[...] = _pad(stencil, slot[domain])


def on_ring(stencil: ir.StencilIR, index: Sequence[np.ndarray], shape: Sequence[int]) -> np.ndarray | None:
    """Where the points of the open grid `index` (global indices, one array per axis, of arrays of
    `shape`) lie on the dirichlet ring, as a boolean array; None for a periodic stencil (no ring)."""
    if stencil.boundary == "periodic":
        return None
    grids = np.ix_(*[np.asarray(i) for i in index])
    mask = np.zeros(tuple(len(i) for i in index), bool)
    for i, r, n in zip(grids, stencil.radius, shape):
        mask |= (i < r) | (i >= n - r)
    return mask


PAGE = 4096  # bytes: buffers start on a page, so rows of a power-of-two size do not straddle pages


def aligned_empty(shape: tuple[int, ...], dtype: str | np.dtype, *, zeroed: bool = False) -> np.ndarray:
    """An uninitialised C-contiguous array whose first element sits on a page
    boundary (PAGE; so also on a 64-byte cache line); `zeroed`: all zeros, from
    memory the system zeroes as it is first touched (no pass over it here).
    numpy's own large arrays start 16 bytes into a page: rows of 2 KiB (256 doubles)
    then cross a page every other row, where the hardware prefetchers stop (heat3d's
    time tile at 256^3 ran 4% slower so)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    raw = (np.zeros if zeroed else np.empty)(count * dtype.itemsize + PAGE, dtype=np.uint8)
    skip = -raw.ctypes.data % PAGE
    return raw[skip:skip + count * dtype.itemsize].view(dtype).reshape(shape)


def aligned_copy(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def pack(stencil: ir.StencilIR, args: BoundArguments, zeros: Collection[str] = ()) -> dict[str, np.ndarray]:
    """Fresh kernel buffers (C-contiguous, 64-byte aligned) holding the bound inputs. The buffers
    of the fields named in `zeros` (bound to zeros) come zeroed from the system: nothing is
    copied into them."""
    buffers: dict[str, np.ndarray] = {}
    padded = padded_shape(stencil, args.shape)
    for f in stencil.fields:
        levels = args.levels[f.name]
        shape = (f.slots, *padded) if f.written else padded
        if f.name in zeros:
            buffers[f.name] = aligned_empty(shape, stencil.dtype, zeroed=True)
            continue
        buf = buffers[f.name] = aligned_empty(shape, stencil.dtype)
        if not f.written:
            buf[...] = _pad(stencil, levels[0])
            continue
        buf[...] = _pad(stencil, levels[-1])  # every slot starts with the newest level's ring
        interior = tuple(slice(r, n - r) for r, n in zip(stencil.radius, padded))
        for k, level in enumerate(levels[:-1]):
            dt = k - (len(levels) - 1)
            if stencil.boundary == "periodic":
                buf[dt % f.slots] = _pad(stencil, level)
            else:
                buf[dt % f.slots][interior] = level[interior]
    return buffers

