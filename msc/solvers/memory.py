"""Memory of the solver: large arrays get their pages before the
factorization, the pages of the last factor dropped are kept for the next
one, and numpy's large arrays get ordinary pages while the solver runs.

On a virtual machine a page the process has not had recently is expensive:
touched one at a time by the factorization, such pages cost 0.6-0.8 s per
240 MB against 0.12 s asked for in one call, and a 1.1 s factorization (2D
1000^2, one thread) took 1.1-2.9 s run to run. Pages the process gives back
are soon returned to the host, so a refactorization loop (new values each
step, the previous factor dropped) paid that again at every step: the spare
buffer keeps one factor's pages in the process instead. `release_spare()`
gives them back.

numpy asks for transparent huge pages for arrays from 4 MB up. On the same
machine a fresh huge page (one the host had taken back) cost 15x the same
memory in ordinary pages: 1.4-1.7 s against 0.1 s for 360 MB, and the first
16-column solve of a 2D 1000^2 factor took 1.0-2.4 s against 0.3 s later.
Ordinary pages (small_pages) inside the solver's entry points removed that."""

from __future__ import annotations

import contextlib
import mmap
import threading
import weakref
from collections.abc import Iterator

import numpy as np

from msc.solvers import native

LARGE_BYTES = 1 << 24  # arrays from this size up are mapped, populated and recycled
SPARE_SLACK = 2  # a spare buffer serves requests down to 1/SPARE_SLACK of its size

_lock = threading.Lock()
_spare: mmap.mmap | None = None
_set_huge_pages = (getattr(np, "_core", None) or np.core).multiarray._set_madvise_hugepage
_small_depth = 0  # small_pages blocks open, in any thread
_huge_before = True  # numpy's setting when the first of them opened


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """numpy's large arrays get ordinary pages, not transparent huge pages,
    inside the block (a decorator too). The setting is numpy's, for the
    process: the first block to open turns it off, the last to close
    restores it."""
    global _small_depth, _huge_before
    with _lock:
        if _small_depth == 0:
            _huge_before = _set_huge_pages(False)
        _small_depth += 1
    try:
        yield
    finally:
        with _lock:
            _small_depth -= 1
            if _small_depth == 0:
                _set_huge_pages(_huge_before)


def factor_values(count: int, nthreads: int) -> np.ndarray:
    """An uninitialized float64 array of count entries. From LARGE_BYTES up it
    lives in the spare buffer when that fits, else in a new anonymous mapping
    whose pages the kernel hands over now, in one call per thread
    (supernodal.c: chol_populate); either way it becomes the spare buffer when
    the array and all its views are gone."""
    nbytes = 8 * count
    if nbytes < LARGE_BYTES:
        return np.empty(count, dtype=np.float64)
    buffer = _take_spare(nbytes)
    fresh = buffer is None
    if buffer is None:
        buffer = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    values = np.frombuffer(buffer, dtype=np.float64, count=count)
    if fresh:
        native.numeric_lib().chol_populate(values.ctypes.data, nbytes, nthreads)
    # not at interpreter exit: the arrays are still alive then, and the system takes the pages back anyway
    weakref.finalize(values, _give_back, buffer).atexit = False
    return values


def release_spare() -> None:
    """Give the spare buffer's pages back to the system."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is not None:
        _close(spare)


def spare_bytes() -> int:
    """Size of the spare buffer (0 when there is none)."""
    with _lock:
        return len(_spare) if _spare is not None else 0


def _take_spare(nbytes: int) -> mmap.mmap | None:
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is None:
        return None
    if nbytes <= len(spare) <= SPARE_SLACK * nbytes:
        return spare
    _close(spare)
    return None


def _give_back(buffer: mmap.mmap) -> None:
    """The array over buffer is gone: keep buffer as the spare (the newest wins)."""
    global _spare
    with _lock:
        old, _spare = _spare, buffer
    if old is not None:
        _close(old)


def _close(buffer: mmap.mmap) -> None:
    """Unmap buffer now, or leave that to the garbage collector while an array still exports it."""
    try:
        buffer.close()
    except BufferError:
        pass
