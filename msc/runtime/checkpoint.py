"""Checkpoints of simulations: what it takes to continue a run bitwise, in
netCDF4/HDF5 files that xarray opens without options.

A checkpoint holds blocks of the global arrays. One block is one file
(written through xarray with the h5netcdf engine): per written field `u`,
the newest level as the variable `u` (dims named after the axes, the
dirichlet ring included) and the older ring levels as `msc_u_level_1`,
`msc_u_level_2`, ... (level step-k); per time-invariant input its values;
the step, the scalar parameters, the dtype and a digest of the stencil as
attributes. A run in one process is one block at the origin. A distributed
run writes one block per rank into a folder of its own beside `path`, and
`path` itself becomes a manifest naming them (msc.runtime.distributed), so
no rank holds the global arrays; a run resumed on any number of ranks reads,
for each rank, the parts of the blocks its padded block covers.

Every file is written under a temporary name and renamed into place, and a
manifest is renamed only once all its blocks are written: a run killed while
saving leaves the previous checkpoint readable. What such a run leaves (a
temporary file, a folder of blocks no manifest names) is removed by the next
save to the same path, once its writer is known to be gone
(msc.runtime.build.is_left_over); a save that fails on any rank removes its
own folder."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from msc import ir
from msc.errors import CheckpointError
from msc.runtime.build import atomic_write_with, glob_escape, is_left_over
from msc.textual.printer import print_stencil

FORMAT = 1  # the layout described above


def stencil_digest(stencil: ir.StencilIR) -> str:
    """What the stencil computes, whatever its dtype and source lines."""
    return hashlib.sha256(print_stencil(stencil.with_dtype("float64")).encode()).hexdigest()[:16]


def level_name(field: str, age: int) -> str:
    """The variable of level step-`age` of a written field."""
    return field if age == 0 else f"msc_{field}_level_{age}"


@dataclass
class Block:
    """A box of the global arrays from `start` (global array indices): per written
    field its levels newest first, per input its values, all of the box's extent."""

    start: tuple[int, ...]
    levels: dict[str, list[np.ndarray]]
    inputs: dict[str, np.ndarray]


def header(stencil: ir.StencilIR, step: int, scalars: Mapping[str, float], shape: Sequence[int]) -> dict[str, Any]:
    """The attributes every checkpoint file carries."""
    attrs: dict[str, Any] = {
        "msc_format": FORMAT, "msc_stencil": stencil.name, "msc_digest": stencil_digest(stencil),
        "msc_dtype": stencil.dtype, "msc_shape": np.asarray(shape, np.int64), "step": int(step),
        "msc_source": print_stencil(stencil),
    }
    attrs.update({f"msc_param_{name}": float(value) for name, value in scalars.items()})
    return attrs


def checkpoint_path(path: Any) -> Path:
    """`path` (a str or a path; `~` is the home folder) as a Path; CheckpointError for anything else."""
    try:
        return Path(os.fspath(path)).expanduser()
    except TypeError:
        raise CheckpointError(f"a checkpoint's path is a str or a pathlib.Path, got {path!r}") from None


def int_tuple(value: Any) -> tuple[int, ...]:
    """An integer tuple attribute (msc_shape, msc_start) as read back: one of one element is a scalar."""
    return tuple(int(n) for n in np.atleast_1d(value))


def check_room(path: Path, nbytes: int) -> str | None:
    """Why `nbytes` cannot be written beside `path` (its filesystem has less free space), or None:
    the writers ask first, because a full disk in the middle of an HDF5 write can crash the process."""
    folder = Path(path).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    need = int(nbytes * 1.05) + (256 << 10)  # the file's own metadata on top of the arrays
    if free >= need:
        return None
    return f"needs about {need / 2**20:.1f} MiB and its file system has {free / 2**20:.1f} MiB free"


def check_not_folder(path: Path) -> None:
    """CheckpointError when `path`, where a checkpoint is written or read, is a folder."""
    if Path(path).is_dir():
        raise CheckpointError(f"checkpoint {path} is a directory: a checkpoint is a file, give its path "
                              f"(e.g. {os.path.join(path, 'run.nc')})")


#: the names of a netCDF file (a checkpoint, a time series): it is netCDF4 (HDF5) whatever the name says,
#: so another name (`run.npy`) would hide what it holds from the user and the tools that open it
NETCDF_SUFFIXES = (".nc", ".nc4")


def netcdf_rename(path: Path) -> str | None:
    """What to call `path` if its name is not a netCDF file's ("name it .nc or .nc4 (e.g. ...)"), else None."""
    if path.suffix.lower() in NETCDF_SUFFIXES:
        return None
    return f"name it {' or '.join(NETCDF_SUFFIXES)} (e.g. {path.with_suffix('.nc')})"


def check_save_target(path: Path) -> None:
    """CheckpointError when a checkpoint cannot be saved at `path`: a folder, or a name that is not a
    netCDF file's (checked before anything is written)."""
    check_not_folder(path)
    rename = netcdf_rename(Path(path))
    if rename:
        raise CheckpointError(f"checkpoint {path}: a checkpoint is a netCDF file; {rename}")


def write_block(path: Path, stencil: ir.StencilIR, attrs: Mapping[str, Any], block: Block) -> None:
    """One block as one file, atomically."""
    import xarray as xr

    check_not_folder(path)
    dims = ir.DIM_NAMES[:stencil.ndim]
    variables = {level_name(name, age): (dims, level) for name, levels in block.levels.items()
                 for age, level in enumerate(levels)}
    variables.update({name: (dims, values) for name, values in block.inputs.items()})
    data = xr.Dataset(variables, attrs={**attrs, "msc_start": np.asarray(block.start, np.int64)})
    short = check_room(path, data.nbytes)
    if short is not None:
        raise CheckpointError(f"checkpoint {path} {short}: nothing was written")
    previous = _block_folders(path)  # a distributed checkpoint this one replaces
    _written(path, lambda: atomic_write_with(path, lambda tmp: data.to_netcdf(tmp, engine="h5netcdf")))
    for folder in previous:
        shutil.rmtree(path.parent / folder, ignore_errors=True)


def _block_folders(path: Path) -> set[Path]:
    """The block folders (relative to its folder) of the distributed checkpoint at `path`; none for
    another file, a damaged or foreign one (nothing of it is removed), or no file. Only folders
    named as msc names them (`<name>.blocks-...`, beside `path`) are taken, whatever the file says."""
    if not path.is_file():
        return set()
    try:
        with open_file(path) as old:
            named = {Path(n).parent for n in str(old.attrs.get("msc_blocks", "")).split("\n") if n}
    except CheckpointError:
        return set()
    return {f for f in named if len(f.parts) == 1 and f.name.startswith(f"{path.name}.blocks-")}


def _written(path: Path, write: Any) -> None:
    """write(), its OSError (a read-only or missing folder) as a CheckpointError naming `path`."""
    try:
        write()
    except OSError as e:
        raise CheckpointError(f"checkpoint {path} cannot be written: {e.strerror or e}"
                              f"{f' ({e.filename})' if e.filename else ''}") from e


def open_file(path: Path) -> Any:
    """The checkpoint file at `path` as a lazy xarray Dataset; CheckpointError when unreadable."""
    import xarray as xr

    check_not_folder(path)
    if not Path(path).is_file():
        raise CheckpointError(f"checkpoint {path}: no such file")
    try:
        data = xr.open_dataset(path, engine="h5netcdf")
    except Exception as e:  # h5py and xarray raise many kinds for a damaged file
        raise CheckpointError(f"checkpoint {path} cannot be read (truncated or damaged?): {e}") from None
    if "msc_format" not in data.attrs:
        data.close()
        raise CheckpointError(f"{path} is a netCDF file but not an msc checkpoint (no msc_format attribute)")
    return data


def check_fits(path: Path, attrs: Mapping[str, Any], stencil: ir.StencilIR) -> None:
    """The checkpoint at `path` was written by a run of `stencil` in its dtype, else CheckpointError."""
    if int(attrs["msc_format"]) != FORMAT:
        raise CheckpointError(f"checkpoint {path} has format {attrs['msc_format']}; this msc reads format {FORMAT}")
    saved = str(attrs["msc_stencil"])
    if attrs["msc_digest"] != stencil_digest(stencil):
        same = "another definition of" if saved == stencil.name else "stencil"
        raise CheckpointError(f"checkpoint {path} holds a run of {same} '{saved}'; this kernel runs stencil "
                              f"'{stencil.name}' (the checkpoint's stencil is in its msc_source attribute)")
    if attrs["msc_dtype"] != stencil.dtype:
        raise CheckpointError(f"checkpoint {path} is {attrs['msc_dtype']}; this kernel of '{stencil.name}' is "
                              f"{stencil.dtype}: compile it with dtype={str(attrs['msc_dtype'])!r}")


def checkpoint_blocks(path: Path, stencil: ir.StencilIR, shape: Sequence[int] | None
                      ) -> tuple[dict[str, Any], list[Path]]:
    """The attributes of the checkpoint at `path` and its block files (itself for a run
    in one process), checked against the stencil and, when given, the global shape."""
    with open_file(path) as data:
        attrs = dict(data.attrs)
    check_fits(path, attrs, stencil)
    saved = int_tuple(attrs["msc_shape"])
    if shape is not None and saved != tuple(shape):
        raise CheckpointError(f"checkpoint {path} holds arrays of shape {saved}; this run's are {tuple(shape)}")
    names = attrs.get("msc_blocks")
    return attrs, [path] if names is None else [path.parent / n for n in str(names).split("\n")]


def write_manifest(path: Path, attrs: Mapping[str, Any], blocks: Sequence[str]) -> None:
    """The manifest of a distributed checkpoint (its attributes and the block files, relative
    to its folder), renamed into place; then the folders of the save it replaces are removed."""
    import xarray as xr

    check_not_folder(path)
    previous = _block_folders(path)
    data = xr.Dataset(attrs={**attrs, "msc_blocks": "\n".join(blocks)})
    _written(path, lambda: atomic_write_with(path, lambda tmp: data.to_netcdf(tmp, engine="h5netcdf")))
    kept = {Path(n).parent for n in blocks}
    for folder in previous - kept:
        shutil.rmtree(path.parent / folder, ignore_errors=True)
    prefix = f"{path.name}.blocks-"  # and the folders of saves killed midway, which no manifest names
    for folder in path.parent.glob(f"{glob_escape(prefix)}*"):
        if folder.is_dir() and Path(folder.name) not in kept and is_left_over(folder, prefix):
            shutil.rmtree(folder, ignore_errors=True)


def scalars_of(attrs: Mapping[str, Any], stencil: ir.StencilIR) -> dict[str, float]:
    return {name: float(attrs[f"msc_param_{name}"]) for name in stencil.params}


def run_inputs(path: Path, stencil: ir.StencilIR) -> dict[str, Any]:
    """What `start` takes to begin where the checkpoint of a run in one process at `path` (checked
    by `checkpoint_blocks`) stands: each written field's levels read, oldest first; each input; the scalars."""
    with open_file(path) as data:
        inputs: dict[str, Any] = {
            f.name: [_variable(data, path, level_name(f.name, age)).values for age in reversed(range(f.window))]
            if f.written and f.window else _variable(data, path, f.name).values for f in stencil.fields}
        return {**inputs, **scalars_of(data.attrs, stencil)}


def fill(path: Path, stencil: ir.StencilIR, buffers: Mapping[str, np.ndarray], indices: Sequence[np.ndarray],
         step: int, blocks: Sequence[Path]) -> None:
    """Fill `buffers` (ring buffers of written fields, padded arrays of inputs) at the
    positions whose global indices per dimension are `indices`, from the block files."""
    covered = np.zeros([len(i) for i in indices], dtype=bool)
    for block_path in blocks:
        with open_file(block_path) as data:
            start = int_tuple(data.attrs["msc_start"])
            extent = data.sizes
            local, inside = [], []
            for d, (idx, s) in enumerate(zip(indices, start)):
                n = extent[ir.DIM_NAMES[d]]
                hit = np.nonzero((idx >= s) & (idx < s + n))[0]
                local.append(hit)
                inside.append(idx[hit] - s)
            if any(len(h) == 0 for h in local):
                continue
            box = {ir.DIM_NAMES[d]: slice(int(i.min()), int(i.max()) + 1) for d, i in enumerate(inside)}
            picks = np.ix_(*[i - i.min() for i in inside])
            to = np.ix_(*local)
            for f in stencil.fields:
                if f.written:
                    for age in range(f.slots):
                        part = _variable(data, block_path, level_name(f.name, age)).isel(box).values
                        buffers[f.name][(step - age) % f.slots][to] = part[picks]
                else:
                    buffers[f.name][to] = _variable(data, block_path, f.name).isel(box).values[picks]
            covered[to] = True
    if not covered.all():
        raise CheckpointError(f"checkpoint {path}: its blocks do not cover the arrays (a block file is missing)")


def _variable(data: Any, path: Path, name: str) -> Any:
    if name not in data.variables:
        raise CheckpointError(f"checkpoint {path} lacks the variable '{name}' (written by another msc, or damaged)")
    return data[name]
