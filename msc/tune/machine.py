"""What the CPU cost model knows of this machine: its data caches per core
(sysfs) and its memory bandwidth, measured once per process by a copy
larger than the last-level cache."""

from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path

import numpy as np

CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
TYPICAL_CACHES = {1: 32 << 10, 2: 512 << 10, 3: 16 << 20}  # where sysfs cannot be read
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@lru_cache(maxsize=1)
def cache_bytes() -> dict[int, int]:
    """Bytes of each data (or unified) cache level, as one core sees it."""
    out = {}
    for index in sorted(CACHE_DIR.glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size = (index / "size").read_text().strip()
            out[int((index / "level").read_text())] = int(size.rstrip("KMG")) * UNITS.get(size[-1], 1)
        except (OSError, ValueError):
            continue
    return out or dict(TYPICAL_CACHES)


#: the largest array the bandwidth copy uses: a server's last-level cache, as sysfs reports it, is the
#: whole socket's (hundreds of MiB), and twice that per array took seconds and gigabytes to copy
COPY_BYTES_MAX = 256 << 20


@lru_cache(maxsize=1)
def memory_bandwidth() -> float:
    """Bytes per second one core copies between arrays twice the last-level
    cache, at most COPY_BYTES_MAX each (read and write counted, as STREAM's
    copy does): best of three."""
    n = min(2 * max(cache_bytes().values()), COPY_BYTES_MAX) // 8
    a = np.ones(n)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - start)
    return 2 * a.nbytes / best
