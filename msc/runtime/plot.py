"""Pictures of 2D fields with matplotlib (Agg backend, no display needed):
axes, a colour bar and a title, written atomically as PNG."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from msc.runtime.build import atomic_write_bytes


def figure(fields: np.ndarray | Sequence[np.ndarray], title: str, subtitles: Sequence[str] | None = None,
           label: str = "", extent: tuple[float, float, float, float] = (0.0, 1.0, 0.0, 1.0)) -> Any:
    """A matplotlib Figure of one 2D array, or several side by side, with colour bars.

    Arrays are indexed [x, y] as the stencils are (x: numpy axis 0, y: axis 1): x runs left to
    right and y upwards, so a[:, 0] is the bottom edge and a[0, :] the left one. `extent` is
    (x0, x1, y0, y1). NaN entries (outside a domain) stay blank."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    arrays = [fields] if isinstance(fields, np.ndarray) else list(fields)
    for a in arrays:
        if a.ndim != 2:
            raise ValueError(f"draw takes 2D arrays, got shape {a.shape}")
    fig = Figure(figsize=(4.6 * len(arrays), 4.0), layout="constrained")
    axes = fig.subplots(1, len(arrays), squeeze=False)[0]
    for i, (ax, a) in enumerate(zip(axes, arrays)):
        image = ax.imshow(np.asarray(a, dtype=float).T, origin="lower", extent=extent, cmap="viridis",
                          aspect="equal")
        ax.set_xlabel("x (array axis 0)")
        ax.set_ylabel("y (array axis 1)")
        if subtitles:
            ax.set_title(subtitles[i], fontsize=10)
        fig.colorbar(image, ax=ax, label=label, shrink=0.85)
    fig.suptitle(title)
    return fig


def draw(path: str | Path, fields: np.ndarray | Sequence[np.ndarray], title: str,
         subtitles: Sequence[str] | None = None, label: str = "",
         extent: tuple[float, float, float, float] = (0.0, 1.0, 0.0, 1.0)) -> Path:
    """`figure(...)` written to `path` as PNG (atomically); returns the path."""
    buffer = io.BytesIO()
    figure(fields, title, subtitles, label, extent).savefig(buffer, format="png", dpi=100)
    path = Path(path)
    atomic_write_bytes(path, buffer.getvalue())
    return path
