"""Fields out of a run, for analysis: an xarray Dataset of the newest levels,
a netCDF time series appended every N steps (CF conventions, read by xarray
and ParaView), and the pictures and tables notebooks show.

The time series stores each field with dims (time, z, y, x) as CF asks (the
last axis varying fastest in the picture), so ParaView draws x across; the
arrays are transposed on the way out. xarray users select by name, so the
order does not matter to them."""

from __future__ import annotations

import base64
import errno
import html
import io
import numbers
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from msc import ir
from msc.errors import MscError, StencilArgumentError


def coordinates(shape: tuple[int, ...], spacing: float | tuple[float, ...] | None) -> dict[str, Any]:
    """Axis coordinates x = i * h (the ring, when there is one, at i = 0 and n-1); none without a spacing."""
    if spacing is None:
        return {}
    steps = (spacing,) * len(shape) if np.isscalar(spacing) else tuple(spacing)  # type: ignore[arg-type]
    if len(steps) != len(shape):
        raise StencilArgumentError(f"spacing {spacing!r} needs one value, or one per axis ({len(shape)})")
    if not all(isinstance(h, numbers.Real) and not isinstance(h, bool) and h > 0 for h in steps):
        raise StencilArgumentError(f"spacing {spacing!r}: a grid spacing is a positive number")
    return {name: np.arange(n) * float(h) for name, n, h in zip(ir.DIM_NAMES, shape, steps)}


def dataset(stencil: ir.StencilIR, fields: Mapping[str, np.ndarray], step: int,
            spacing: float | tuple[float, ...] | None = None) -> Any:
    """The newest levels as an xarray Dataset (copies), dims named after the axes."""
    import xarray as xr

    dims = ir.DIM_NAMES[:stencil.ndim]
    shape = next(iter(fields.values())).shape
    return xr.Dataset({name: (dims, np.array(a)) for name, a in fields.items()}, coords=coordinates(shape, spacing),
                      attrs={"stencil": stencil.name, "step": int(step)})


class SeriesWriter:
    """Appends the newest levels to a netCDF file with an unlimited time axis (CF-1.8).

    The file is created at the first append. An existing file is appended to only when it
    holds a series of the same stencil (by its digest, as checkpoints), shape and dtype whose
    last step comes before this run's next snapshot: a run resumed from a checkpoint goes on
    with its series, and one written twice or another stencil's is refused (`checked`)."""

    def __init__(self, path: Path, stencil: ir.StencilIR, every: int) -> None:
        self.path, self.stencil, self.every = Path(path), stencil, every

    @classmethod
    def checked(cls, stencil: ir.StencilIR, every: Any, out: Any, step: int,
                shape: tuple[int, ...]) -> SeriesWriter:
        """A writer for a run at `step` with fields of `shape`; StencilArgumentError, before any
        step runs, for a wrong every= or out=, or a file this run's series cannot go on in."""
        if out is None or every is None:
            raise StencilArgumentError(f"stencil '{stencil.name}': every= and out= go together (a snapshot to the "
                                       f"file out every N steps); got every={every!r}, out={out!r}")
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise StencilArgumentError(f"stencil '{stencil.name}': every must be a positive integer, got {every!r}")
        from msc.runtime.checkpoint import checkpoint_path, netcdf_rename

        where = f"stencil '{stencil.name}': out={out}"
        try:
            path = checkpoint_path(out)
        except MscError:
            raise StencilArgumentError(f"{where}: a time series' path is a str or a pathlib.Path") from None
        rename = None if path.is_dir() else netcdf_rename(path)  # a folder is named as such below
        if rename:
            raise StencilArgumentError(f"{where}: the time series is a netCDF file; {rename}")
        writer = cls(path, stencil, every)
        writer._check_goes_on(step // every * every + every, shape)
        return writer

    def _check_goes_on(self, first: int, shape: tuple[int, ...]) -> None:
        """StencilArgumentError unless the file is new or a series of this stencil, `shape` and dtype
        whose last step is before `first`, the step of this run's next snapshot."""
        import h5netcdf

        from msc.runtime.checkpoint import stencil_digest

        path, stencil = self.path, self.stencil
        where = f"stencil '{stencil.name}': out={path}"
        if path.is_dir():
            raise StencilArgumentError(f"{where} is a directory: a time series is a file, give its path "
                                       f"(e.g. {os.path.join(path, 'series.nc')})")
        if not path.exists():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StencilArgumentError(f"{where}: its folder cannot be made ({e.strerror or e})") from None
            if not os.access(path.parent, os.W_OK):
                raise StencilArgumentError(f"{where}: its folder {path.parent} is not writable")
            return
        if not os.access(path, os.W_OK):
            raise StencilArgumentError(f"{where} exists and is not writable")
        try:
            with h5netcdf.File(path, "r") as f:
                attrs = dict(f.attrs)
                saved = tuple(f.dimensions[a].size for a in ir.DIM_NAMES[:stencil.ndim] if a in f.dimensions)
                dtypes = {f.variables[w.name].dtype for w in stencil.written_fields if w.name in f.variables}
                times = f.variables["time"][:] if "time" in f.variables else None
        except Exception as e:  # h5py raises many kinds for a file that is not HDF5
            raise StencilArgumentError(f"{where} exists and is not a netCDF file ({e}); write this run to "
                                       "another file") from None
        if times is None or "msc_digest" not in attrs:
            raise StencilArgumentError(f"{where} exists and is not an msc time series; write this run to "
                                       "another file")
        if attrs["msc_digest"] != stencil_digest(stencil):
            other = attrs.get("msc_stencil")
            what = f"another definition of '{other}'" if other == stencil.name else f"stencil '{other}'"
            raise StencilArgumentError(f"{where} holds a series of {what}; write this run to another file")
        if saved != shape or dtypes != {np.dtype(stencil.dtype)}:
            held = f"{', '.join(sorted(str(d) for d in dtypes))} fields of shape {saved}"
            raise StencilArgumentError(f"{where} holds {held}; this run's are {stencil.dtype} of shape {shape}: "
                                       "write it to another file")
        if len(times) and first <= int(times[-1]):
            raise StencilArgumentError(f"{where} already holds steps up to {int(times[-1])}, and this run's next "
                                       f"snapshot is step {first} (the same run written twice?): a series goes on "
                                       "only after its last step; write this run to another file")

    def append(self, fields: Mapping[str, np.ndarray], step: int) -> None:
        """The fields at `step` as the series' next time. On a file system too full for them, an
        OSError (ENOSPC) before anything is written: HDF5 would lose the write and say so only
        when the file is closed, if at all."""
        import h5netcdf

        from msc.runtime.checkpoint import check_room, stencil_digest

        short = check_room(self.path, sum(np.asarray(a).nbytes for a in fields.values()))
        if short is not None:
            raise OSError(errno.ENOSPC, f"msc: step {step} of stencil '{self.stencil.name}' was not appended to "
                                        f"the time series {self.path}, which holds the steps before it: it {short}")
        axes = ir.DIM_NAMES[:self.stencil.ndim][::-1]
        shape = next(iter(fields.values())).shape[::-1]
        with h5netcdf.File(self.path, "a") as f:
            if "time" not in f.dimensions:
                f.attrs["Conventions"] = "CF-1.8"
                f.attrs["title"] = f"msc stencil '{self.stencil.name}'"
                f.attrs["msc_stencil"] = self.stencil.name
                f.attrs["msc_digest"] = stencil_digest(self.stencil)
                f.dimensions = {"time": None, **dict(zip(axes, shape))}
                time = f.create_variable("time", ("time",), "i8")
                time.attrs.update({"long_name": "time step", "units": "1", "axis": "T"})
                for axis, n in zip(axes, shape):
                    coord = f.create_variable(axis, (axis,), "i8", data=np.arange(n))
                    coord.attrs.update({"long_name": f"grid index along {axis}", "units": "1", "axis": axis.upper()})
                for name in fields:
                    f.create_variable(name, ("time", *axes), self.stencil.dtype, chunks=(1, *shape))
            n = f.dimensions["time"].size
            f.resize_dimension("time", n + 1)
            f.variables["time"][n] = step
            for name, level in fields.items():
                f.variables[name][n, ...] = np.asarray(level).T


def picture_html(fields: Mapping[str, np.ndarray], title: str) -> str:
    """An <img> of the 2D fields (the middle slice along z of a 3D one), or '' for 1D."""
    from msc.runtime.plot import figure

    arrays = {name: a if a.ndim == 2 else a[..., a.shape[2] // 2] for name, a in fields.items() if a.ndim >= 2}
    if not arrays:
        return ""
    buffer = io.BytesIO()
    figure(list(arrays.values()), title, subtitles=list(arrays)).savefig(buffer, format="png", dpi=72)
    return f'<img src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}"/>'


def table_html(title: str, rows: Mapping[str, str]) -> str:
    """A small two-column table under a bold title, every value escaped."""
    body = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td style='text-align:left'>"
                   f"{html.escape(v)}</td></tr>" for k, v in rows.items())
    return f"<div><b>{html.escape(title)}</b><table>{body}</table></div>"


def simulation_html(sim: Any) -> str:
    stencil = sim.kernel.ir
    rows = {"step": str(sim.step), "target": sim.kernel.target,
            "parameters": ", ".join(f"{k} = {v:g}" for k, v in sim.parameters.items()) or "none",
            "fields": ", ".join(f"{name} {a.shape}" for name, a in sim.fields.items())}
    return table_html(f"msc simulation of '{stencil.name}'", rows) + picture_html(
        sim.fields, f"'{stencil.name}' at step {sim.step}")
