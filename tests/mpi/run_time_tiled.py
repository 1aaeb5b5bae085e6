"""Under mpiexec: distributed runs with temporally tiled schedules (halos of
phases x radius x depth, exchanged every depth steps) against the
single-process kernel with the same schedule (bitwise) and the reference.
Rank 0 prints one JSON dict: per case, whether it matched, its error
against the reference, and the exchange rounds and bytes."""

from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np
from mpi_common import agreed_error, box9_periodic, comm, heat

import msc
from msc import t, x, y, z
from msc.runtime.distributed import DistributedKernel, run_distributed

rng = np.random.default_rng(7)
results: dict[str, Any] = {}


@msc.stencil
def box9(u):
    u[t + 1, x, y] = sum(0.1 * (1 + abs(i) + 2 * abs(j)) * u[t, x + i, y + j] for i in (-1, 0, 1) for j in (-1, 0, 1)) / 2


@msc.stencil
def star3d(u):
    u[t + 1, x, y, z] = 0.4 * u[t, x, y, z] + 0.1 * (u[t, x - 1, y, z] + u[t, x + 1, y, z] + u[t, x, y - 1, z]
                                                     + u[t, x, y + 1, z] + u[t, x, y, z - 1] + u[t, x, y, z + 1])


@msc.stencil
def wave(u, c):
    u[t + 1, x] = 2 * u[t, x] - u[t - 1, x] + c[x] * (u[t, x - 2] - 2 * u[t, x] + u[t, x + 2])


@msc.stencil
def coupled(p, q, k):  # q reads p's new level at an offset: two phases per step
    p[t + 1, x, y] = 0.5 * p[t, x, y] + 0.1 * (q[t, x + 1, y] - q[t, x - 1, y])
    q[t + 1, x, y] = 0.5 * q[t, x, y] + k * (p[t + 1, x, y + 1] - p[t + 1, x - 1, y - 1])


@msc.stencil
def paired(p, q, k):  # two statements, one phase: q reads p's new level only where it is computed
    p[t + 1, x, y] = 0.5 * p[t, x, y] + 0.1 * (q[t, x + 1, y] - q[t, x - 1, y])
    q[t + 1, x, y] = 0.5 * q[t, x, y] + k * (p[t + 1, x, y] - p[t, x - 1, y - 1])


def compare(name: str, stencil: msc.Stencil, schedule: msc.Schedule, steps: int, dims: Any = None,
            serial_schedule: msc.Schedule | None = None, **inputs: Any) -> None:
    """Distributed with `schedule` against one process with `serial_schedule`
    (default: the same) and against the reference."""
    kernel = stencil.compile(threads=1)
    on_root = {n: v if comm.rank == 0 or not isinstance(v, (np.ndarray, list)) else None for n, v in inputs.items()}
    out = run_distributed(kernel, comm, steps, on_root, dims=dims, schedule=schedule)
    if comm.rank != 0:
        results[name] = out is None
        return
    serial = stencil.compile(threads=1, schedule=serial_schedule or schedule).run(steps=steps, **inputs)
    reference = stencil.reference(steps=steps, **inputs)
    results[name] = {
        "bitwise": out.keys() == serial.keys() and all(np.array_equal(out[n], serial[n]) for n in serial),
        "reference_error": max(float(np.max(np.abs(out[n] - reference[n]))) / max(float(np.max(np.abs(reference[n]))), 1.0)
                               for n in reference),
    }


T = msc.Schedule().time_tile
compare("heat_d2", heat, T(2, x=4), 7, u=rng.random((23, 18)), alpha=0.1)
compare("heat_d3_rows", heat, T(3, x=5, y=4), 8, dims=(comm.size, 1), u=rng.random((29, 11)), alpha=0.1)
compare("heat_d4_columns", heat, T(4, y=3), 9, dims=(1, comm.size), u=rng.random((9, 37)),
        alpha=0.1)
compare("box9_d3", box9, T(3, x=4, y=6), 10, u=rng.random((26, 21)))
compare("box9_periodic_d2", box9_periodic, T(2, x=4), 5, serial_schedule=msc.Schedule(), u=rng.random((19, 14)))
compare("star3d_d2", star3d, T(2, x=3, y=4), 5, u=rng.random((14, 11, 9)))
compare("wave_two_levels_d3", wave, T(3, x=8), 11, u=[rng.random(61), rng.random(61)], c=rng.random(61) * 0.2)
compare("coupled_d2", coupled, T(2, x=4, y=4), 7, p=rng.random((27, 19)), q=rng.random((27, 19)), k=0.3)
compare("paired_d3", paired, T(3, x=6), 8, p=rng.random((27, 19)), q=rng.random((27, 19)), k=0.3)
compare("heat_spatial_tiles", heat, msc.Schedule().tile(x=4, y=8).parallel("x_tile"), 6,
        u=rng.random((23, 18)), alpha=0.1)

# kernel.run(comm=...) takes the schedule the kernel was compiled with
tiled = heat.compile(threads=1, schedule=T(3, x=4))
u0 = rng.random((23, 18))
out = tiled.run(steps=7, comm=comm, u=u0 if comm.rank == 0 else None, alpha=0.1)
if comm.rank == 0:
    results["run_with_compiled_schedule"] = bool(np.array_equal(out["u"], tiled.run(steps=7, u=u0, alpha=0.1)["u"]))
inherited = DistributedKernel(tiled, comm, shape=(23, 18))
results["inherited_halo"] = list(inherited.halo)  # radius 1 x depth 3
inherited.close()

# the scalable path: blocks filled from a function of global indices; one exchange round per 3 steps
kernel = heat.compile(threads=1)
dist = DistributedKernel(kernel, comm, shape=(30, 25), schedule=T(3, x=4))
mine = dist.run(steps=8, u=lambda i, j: np.sin(0.3 * i) + np.cos(0.2 * j), alpha=0.2)["u"]
whole = kernel.run(steps=8, u=np.sin(0.3 * np.arange(30))[:, None] + np.cos(0.2 * np.arange(25)), alpha=0.2)["u"]
results["local_function_fill"] = all(comm.allgather(np.array_equal(mine, whole[dist.interior])))
results["local_halo"] = list(dist.halo)
results["local_exchanges"] = dist.last_run.exchanges
results["local_bytes"] = comm.allreduce(dist.last_run.bytes_sent)
dist.close()


def raises(name: str, action: Callable[[], Any]) -> None:
    """Every rank must raise the same DistributedError (and none hang)."""
    results[name] = agreed_error(action)


raises("error_thin_for_depth", lambda: run_distributed(
    kernel, comm, 5, {"u": rng.random((3 * comm.size + 2, 9)) if comm.rank == 0 else None, "alpha": 0.1},
    dims=(comm.size, 1), schedule=T(4, x=4)))
if comm.rank == 0:
    print(json.dumps(results))
