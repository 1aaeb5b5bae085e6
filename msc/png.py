"""A small PNG writer (zlib + struct) for pictures of 2D fields, with a colour map."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from msc.runtime.build import atomic_write_bytes

# a perceptually ordered blue-white-red ramp: (position, r, g, b)
_RAMP = np.array(
    [(0.0, 59, 76, 192), (0.25, 124, 159, 249), (0.5, 221, 221, 221), (0.75, 246, 139, 107), (1.0, 180, 4, 38)]
)


def colorize(field: np.ndarray) -> np.ndarray:
    """Map a 2D array to an (h, w, 3) uint8 image, min blue .. max red."""
    lo, hi = float(np.min(field)), float(np.max(field))
    s = (field - lo) / (hi - lo) if hi > lo else np.zeros_like(field)
    channels = [np.interp(s, _RAMP[:, 0], _RAMP[:, c]) for c in (1, 2, 3)]
    return np.stack(channels, axis=-1).round().astype(np.uint8)


def write_png(path: str | Path, field: np.ndarray) -> Path:
    """Write a 2D array as a colour PNG (atomically); returns the path."""
    if field.ndim != 2:
        raise ValueError(f"write_png takes a 2D array, got shape {field.shape}")
    rgb = colorize(field)
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[row].tobytes() for row in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )
    path = Path(path)
    atomic_write_bytes(path, png)
    return path
