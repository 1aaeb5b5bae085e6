"""Packing user arrays into the kernels' memory layout and back.

Every compiled kernel sees, per written field, a ring buffer of `slots`
padded levels (level t+dt in slot (t+dt) mod slots; slots `slot_points`
apart) and, per time-invariant input, one padded array. Padding is the ghost ring of a periodic stencil
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


LINE = 64  # bytes of a cache line


def slot_spread(stencil: ir.StencilIR) -> int:
    """Bytes by which consecutive slots of a ring buffer are apart modulo PAGE: the page shared out among
    the most slots any written field has, in powers of two (2 slots: half a page)."""
    slots = max((f.slots for f in stencil.written_fields), default=1)
    return PAGE >> max(1, (slots - 1).bit_length())


def slot_points(stencil: ir.StencilIR, points: int) -> int:
    """Elements from one slot of a ring buffer to the next, for levels of `points` elements: the level
    rounded up to a cache line, then to `slot_spread` bytes past a multiple of PAGE. A level of a
    power-of-two size, a page long or longer, would otherwise start every slot at the same place in a
    page: a store to the new level then looks, by its address's low 12 bits, like the loads that follow
    it from the old one, and waits (4K aliasing; box2d9p's streamed sweep at 4096^2 ran 1.2-1.5x slower
    so). The generated code computes the same (templates/slot_points.j2)."""
    itemsize = np.dtype(stencil.dtype).itemsize
    line = -(-points * itemsize // LINE) * LINE
    return (line + (slot_spread(stencil) - line) % PAGE) // itemsize


def field_buffer(stencil: ir.StencilIR, field: ir.FieldDecl, shape: tuple[int, ...], *,
                 zeroed: bool = False) -> np.ndarray:
    """The kernels' buffer of `field` over levels of `shape` (padded): for a written field its ring
    of `slots` levels, each C-contiguous, `slot_points` apart; for an input, one level."""
    if not field.written:
        return aligned_empty(shape, stencil.dtype, zeroed=zeroed)
    itemsize = np.dtype(stencil.dtype).itemsize
    stride = slot_points(stencil, int(np.prod(shape))) * itemsize
    return _laid_out((field.slots, *shape), (stride, *_c_strides(shape, itemsize)), stencil.dtype, zeroed)


def buffer_like(buffer: np.ndarray, *, zeroed: bool = False) -> np.ndarray:
    """A new buffer laid out as the `field_buffer` `buffer` (a ring's slots at its stride)."""
    return _laid_out(buffer.shape, buffer.strides, buffer.dtype, zeroed)


def _laid_out(shape: tuple[int, ...], strides: tuple[int, ...], dtype: str | np.dtype, zeroed: bool) -> np.ndarray:
    flat = aligned_empty((strides[0] * shape[0] // np.dtype(dtype).itemsize,), dtype, zeroed=zeroed)
    return np.lib.stride_tricks.as_strided(flat, shape, strides)


def buffer_bytes(buffer: np.ndarray) -> int:
    """The bytes a `field_buffer` spans from its first element: a ring's slots at their stride (the
    generated code may touch a slot's padding), an input's own."""
    return buffer.strides[0] * buffer.shape[0]


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    return tuple(int(np.prod(shape[d + 1:])) * itemsize for d in range(len(shape)))


def aligned_copy(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def pack(stencil: ir.StencilIR, args: BoundArguments, zeros: Collection[str] = ()) -> dict[str, np.ndarray]:
    """Fresh kernel buffers (`field_buffer`) holding the bound inputs. The buffers
    of the fields named in `zeros` (bound to zeros) come zeroed from the system: nothing is
    copied into them."""
    buffers: dict[str, np.ndarray] = {}
    padded = padded_shape(stencil, args.shape)
    for f in stencil.fields:
        levels = args.levels[f.name]
        if f.name in zeros:
            buffers[f.name] = field_buffer(stencil, f, padded, zeroed=True)
            continue
        buf = buffers[f.name] = field_buffer(stencil, f, padded)
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

