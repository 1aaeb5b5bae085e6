"""Under mpiexec: `save DIR` runs each case 13 steps over the ranks and saves it
(and, on rank 0, the same run in one process); `resume DIR` resumes every saved
checkpoint on this number of ranks, runs 17 more steps and compares the result
with 30 steps of the single-process kernel. Rank 0 prints one JSON dict:
per checkpoint, whether the continued run is bitwise equal."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from mpi_common import box9_periodic, comm

import msc
from msc import Schedule, t, x, y
from msc.errors import MscError
from msc.runtime import checkpoint
from msc.runtime.build import writer_tag
from msc.runtime.distributed import DistributedKernel


@msc.stencil
def wave(u, c):  # two time levels and an input field
    u[t + 1, x, y] = 2 * u[t, x, y] - u[t - 1, x, y] + c[x, y] * (
        u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y])


@msc.stencil
def heat1d(u, a):
    u[t + 1, x] = u[t, x] + a * (u[t, x - 1] - 2 * u[t, x] + u[t, x + 1])


def inputs(stencil: msc.Stencil, shape: tuple[int, ...]) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    out: dict[str, Any] = {f.name: [rng.random(shape) for _ in range(f.window)] if f.window > 1 else rng.random(shape)
                           for f in stencil.ir.fields}
    if "c" in out:
        out["c"] = 0.1 * out["c"]
    if "a" in stencil.ir.params:
        out["a"] = 0.2
    return out


CASES = {
    "wave": (wave, (23, 30), None),
    "wave_time_tiled": (wave, (23, 30), Schedule().time_tile(3, x=8)),
    "box9_periodic": (box9_periodic, (17, 20), None),
    "heat1d": (heat1d, (40,), None),
}


def save(folder: Path) -> dict[str, Any]:
    for name, (stencil, shape, schedule) in CASES.items():
        kernel = stencil.compile(threads=1, schedule=schedule)
        data = inputs(stencil, shape)
        with kernel.start(comm=comm, **(data if comm.rank == 0 else {f: None for f in data})) as sim:
            sim.advance(13, every=13, out=folder / f"{name}_series.nc")  # rank 0 appends the gathered fields
            sim.advance(0)
            newest = sim.fields
            as_xarray = sim.to_xarray()  # collective: gathered on rank 0
            assert (as_xarray is None) == (comm.rank != 0)
            if comm.rank == 0:
                assert all(np.array_equal(as_xarray[f].values, array) for f, array in newest.items()), name
                with xr.open_dataset(folder / f"{name}_series.nc") as series:
                    assert list(series["time"].values) == [13], name
                    for f, array in newest.items():
                        assert np.array_equal(series[f].isel(time=0).transpose(*msc.ir.DIM_NAMES[:array.ndim]).values,
                                              array), name
            if comm.size > 1:  # a collective save given another path on each rank is refused on every rank
                try:
                    sim.save(folder / f"rank{comm.rank}.nc")
                    raise AssertionError("ranks saved to different paths")
                except MscError as e:
                    assert "the ranks gave different paths" in str(e), e
            (folder / "a folder").mkdir(exist_ok=True)
            try:  # refused on every rank before any writes its block: no block folder is left in `folder`
                sim.save(folder / "a folder")
                raise AssertionError("a folder was taken as a checkpoint")
            except MscError as e:  # CheckpointError, or DistributedError naming the rank
                assert "is a directory" in str(e), e
            killed = folder / f"{name}.nc.blocks-{writer_tag().rsplit('.', 1)[0]}.{2**22 + 1}-5-0123abcd"
            if comm.rank == 0:  # what a save killed midway leaves: a block folder no manifest names
                killed.mkdir()
                (killed / "rank-00000.nc").write_bytes(b"half")
            sim.save(folder / f"{name}.nc")
            assert not killed.exists(), killed  # the next save removed it (its writer's pid runs nowhere)
            if comm.size > 1:  # the last rank's disk is full: the save fails on every rank and leaves nothing
                room = checkpoint.check_room
                if comm.rank == comm.size - 1:
                    checkpoint.check_room = lambda path, nbytes: "has no room (a test)"
                try:
                    sim.save(folder / f"{name}_full.nc")
                    raise AssertionError("a save with a full disk on one rank succeeded")
                except MscError as e:
                    assert "has no room (a test): nothing was written" in str(e), e
                finally:
                    checkpoint.check_room = room
                assert not list(folder.glob(f"{name}_full.nc*")), list(folder.glob(f"{name}_full.nc*"))
            sim.save(folder / f"{name}.nc")  # saved again: the first save's blocks go
        # the block form: every rank passes its own block, none the global arrays
        dist = DistributedKernel(kernel, comm, shape)
        box = dist.coordinates()
        blocks = {f: [v[box] for v in value] if isinstance(value, list) else value[box] if isinstance(value, np.ndarray)
                  else value for f, value in data.items()}
        for param in stencil.ir.params if comm.size > 1 else ():  # each rank its own value: refused on all
            try:
                dist.start(**{**blocks, param: float(comm.rank)})
                raise AssertionError("ranks ran with different parameters")
            except MscError as e:
                assert f"the ranks were given different values of the parameter '{param}'" in str(e), e
        local = dist.start(**blocks)
        local.advance(13)
        local.save(folder / f"{name}_blocks.nc")
        dist.close()
        if comm.rank == 0:
            one = kernel.start(**data)
            one.advance(13)
            one.save(folder / f"{name}_one_process.nc")
        changes = [{param: 0.5 * data[param]} for param in stencil.ir.params]
        changes += [{f.name: np.random.default_rng(5).random(shape)} for f in stencil.ir.fields]  # ring included
        for change in changes:  # steered between advances over the ranks, as in one process
            with kernel.start(comm=comm, **(data if comm.rank == 0 else {f: None for f in data})) as sim:
                sim.advance(2)
                sim.set(**(change if comm.rank == 0 else {k: v if np.isscalar(v) else None for k, v in change.items()}))
                sim.advance(3)
                steered, levels = sim.fields, sim.levels  # collective
            assert (levels is None) == (comm.rank != 0)
            if comm.rank == 0:
                one = kernel.start(**data)
                one.advance(2)
                one.set(**change)
                one.advance(3)
                assert all(np.array_equal(steered[f], one.fields[f]) for f in steered), (name, change.keys())
                kept = one.levels  # every level kept, oldest first
                assert levels.keys() == kept.keys(), name
                for f in levels:
                    assert len(levels[f]) == len(kept[f]), (name, f)
                    assert all(np.array_equal(a, b) for a, b in zip(levels[f], kept[f])), (name, f, change.keys())
        with kernel.start(comm=comm, **(data if comm.rank == 0 else {f: None for f in data})) as sim:
            try:  # a wrong shape on rank 0 is refused on every rank
                sim.set(u=np.zeros((3,) * len(shape)) if comm.rank == 0 else None)
                raise AssertionError("an array of the wrong shape was set")
            except MscError as e:
                assert f"'u' has shape {shape}, got an array of shape" in str(e), e
    folders = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name != "a folder")
    return {"block folders": folders}


def resume(folder: Path) -> dict[str, Any]:
    results = {}
    for name, (stencil, shape, schedule) in CASES.items():
        kernel = stencil.compile(threads=1, schedule=schedule)
        expected = comm.bcast(kernel.run(steps=30, **inputs(stencil, shape)) if comm.rank == 0 else None, root=0)
        for saved in (f"{name}.nc", f"{name}_blocks.nc", f"{name}_one_process.nc"):
            with kernel.resume(folder / saved, comm=comm) as sim:  # global arrays gathered on rank 0
                step = sim.step
                sim.advance(17)
                fields = sim.fields
            dist = DistributedKernel(kernel, comm, shape)  # every rank its own block
            local = dist.resume(str(folder / saved))
            local.advance(17)
            mine = all(np.array_equal(local.fields[f], expected[f][dist.interior]) for f in expected)
            blocks_equal = all(comm.allgather(mine))
            dist.close()
            if comm.rank == 0:
                results[saved] = {"step": step, "equal": all(np.array_equal(fields[f], expected[f]) for f in expected),
                                  "blocks_equal": blocks_equal}
    return results


if __name__ == "__main__":
    mode, where = sys.argv[1], Path(sys.argv[2])
    out = save(where) if mode == "save" else resume(where)
    if comm.rank == 0:
        print(json.dumps(out))
