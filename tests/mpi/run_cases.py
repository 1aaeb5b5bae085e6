"""Under mpiexec: hand-written distributed cases (process grids, periodic
star and box, time levels, statements that read a new level at an offset,
the scalable local path, errors). Rank 0 prints one JSON dict."""

from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np
from mpi_common import agreed_error, comm, heat
from mpi_common import box9_periodic as box9

import msc
from msc import t, x, y, z
from msc.runtime.distributed import DistributedKernel

rng = np.random.default_rng(42)
results: dict[str, Any] = {}


@msc.stencil
def wave(u, c):
    u[t + 1, x] = 2 * u[t, x] - u[t - 1, x] + c[x] * (u[t, x - 2] - 2 * u[t, x] + u[t, x + 2])


@msc.stencil
def coupled(p, q, k):
    p[t + 1, x, y] = 0.5 * p[t, x, y] + 0.1 * (q[t, x + 1, y] - q[t, x - 1, y])
    q[t + 1, x, y] = 0.5 * q[t, x, y] + k * (p[t + 1, x, y + 1] - p[t + 1, x - 1, y - 1])


@msc.stencil(boundary="periodic")
def box3d(u):
    u[t + 1, x, y, z] = sum(u[t, x + i, y + j, z + k] for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)) / 27.5


def compare(name: str, stencil: msc.Stencil, steps: int, dims: Any = None, **inputs: Any) -> None:
    kernel = stencil.compile(threads=1)
    on_root = {n: v if comm.rank == 0 or not isinstance(v, (np.ndarray, list)) else None for n, v in inputs.items()}
    out = kernel.run(steps=steps, comm=comm, dims=dims, **on_root)
    if comm.rank == 0:
        serial = kernel.run(steps=steps, **inputs)
        results[name] = all(np.array_equal(out[n], serial[n]) for n in serial) and out.keys() == serial.keys()
    else:
        results[name] = out is None


compare("heat_grid_auto", heat, 7, u=rng.random((23, 18)), alpha=0.1)
compare("heat_grid_rows", heat, 7, dims=(comm.size, 1), u=rng.random((23, 18)), alpha=0.1)
compare("heat_grid_columns", heat, 7, dims=(1, comm.size), u=rng.random((23, 18)), alpha=0.1)
compare("box9_periodic", box9, 6, u=rng.random((19, 14)))
compare("wave_two_levels", wave, 9, u=[rng.random(37), rng.random(37)], c=rng.random(37) * 0.2)
compare("coupled_new_level_at_offset", coupled, 5, p=rng.random((17, 15)), q=rng.random((17, 15)), k=0.3)
compare("box3d_periodic", box3d, 3, u=rng.random((9, 8, 7)))
compare("heat_one_row_auto_splits_columns", heat, 3, u=rng.random((3, 52)), alpha=0.1)  # MPI_Dims_create: rows

# an emulated CUDA kernel's phases are emulated too (compiled without emulate=, they looked for a GPU); its
# block kernels may contract a multiply-add the whole-grid kernel does not: equal to rounding
emulated, u_emulated = heat.compile(target="cuda", emulate=True), rng.random((14, 12))
out = emulated.run(steps=4, comm=comm, u=u_emulated if comm.rank == 0 else None, alpha=0.1)
results["heat_cuda_emulated"] = (out is None if comm.rank else bool(np.allclose(
    out["u"], emulated.run(steps=4, u=u_emulated, alpha=0.1)["u"], rtol=0, atol=1e-14)))


def continued(name: str, stencil: msc.Stencil, splits: tuple[int, ...], schedule: Any = None, **inputs: Any) -> None:
    """kernel.start(comm=...) advanced in several calls equals one serial run of all the steps."""
    kernel = stencil.compile(threads=1, schedule=schedule)
    on_root = {n: v if comm.rank == 0 or not isinstance(v, (np.ndarray, list)) else None for n, v in inputs.items()}
    with kernel.start(comm=comm, **on_root) as sim:
        for steps in splits:
            sim.advance(steps)
        out, step = sim.fields, sim.step
    if comm.rank == 0:
        serial = kernel.run(steps=sum(splits), **inputs)
        results[name] = (step == sum(splits) and out.keys() == serial.keys()
                         and all(np.array_equal(out[n], serial[n]) and not out[n].flags.writeable for n in serial))
    else:
        results[name] = out is None


continued("heat_continued", heat, (3, 4, 0, 2), u=rng.random((23, 18)), alpha=0.1)
continued("wave_continued", wave, (5, 4), u=[rng.random(37), rng.random(37)], c=rng.random(37) * 0.2)
continued("box9_periodic_continued", box9, (1, 4), u=rng.random((19, 14)))
continued("heat_time_tiled_continued", heat, (5, 6), msc.Schedule().time_tile(3, x=4), u=rng.random((23, 18)),
          alpha=0.1)


# the scalable path: every rank fills its own block from a function of global indices
def initial(i: np.ndarray, j: np.ndarray) -> np.ndarray:
    return np.sin(0.3 * i) + np.cos(0.2 * j)


kernel = heat.compile(threads=1)
dist = DistributedKernel(kernel, comm, shape=(26, 21))
mine = dist.run(steps=8, u=initial, alpha=0.2)["u"]
whole = kernel.run(steps=8, u=initial(*np.ix_(np.arange(26), np.arange(21))), alpha=0.2)["u"]
results["local_function_fill"] = all(comm.allgather(np.array_equal(mine, whole[dist.interior])))
# the same from local arrays, on a periodic box stencil
u0 = rng.random((16, 13))
dist = DistributedKernel(box9.compile(threads=1), comm, shape=u0.shape)
mine = dist.run(steps=5, u=u0[dist.coordinates()])["u"]
whole = box9.compile(threads=1).run(steps=5, u=u0)["u"]
results["local_array_fill"] = all(comm.allgather(np.array_equal(mine, whole[dist.interior])))
dist.close()


def raises(name: str, action: Callable[[], Any]) -> None:
    """Every rank must raise the same DistributedError (and none hang)."""
    results[name] = agreed_error(action)


@msc.stencil
def wide(u):
    u[t + 1, x] = (u[t, x - 3] + u[t, x + 3]) / 2


raises("error_thin_domain", lambda: wide.compile(threads=1).run(steps=1, comm=comm, u=rng.random(6 + 2 * comm.size)
                                                                 if comm.rank == 0 else None))
raises("error_dims", lambda: kernel.run(steps=1, comm=comm, dims=(comm.size + 1, 1),
                                        u=rng.random((9, 9)) if comm.rank == 0 else None, alpha=0.1))
raises("error_missing_input", lambda: kernel.run(steps=1, comm=comm, alpha=0.1))
raises("error_local_shape_on_last_rank", lambda: DistributedKernel(kernel, comm, (12, 12)).run(
    steps=1, alpha=0.1, u=np.zeros((3, 3)) if comm.rank == comm.size - 1 else initial))
if comm.rank == 0:
    print(json.dumps(results))
