"""Under mpiexec: msc.solve(comm=...) with multigrid against the one-process solve on rank 0
(the same solution to 1e-10 relative, iterations within one). Rank 0 prints one JSON dict."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from mpi4py import MPI

import msc
import msc.pde.distributed as distributed
from msc import x, y, z
from msc.pde.distributed import owned_block

comm = MPI.COMM_WORLD
results: dict[str, Any] = {}


@msc.operator
def div3(u, k, h):
    return (k[x + 1, y, z] * (u[x + 1, y, z] - u[x, y, z]) - k[x, y, z] * (u[x, y, z] - u[x - 1, y, z])
            + k[x, y + 1, z] * (u[x, y + 1, z] - u[x, y, z]) - k[x, y, z] * (u[x, y, z] - u[x, y - 1, z])
            + k[x, y, z + 1] * (u[x, y, z + 1] - u[x, y, z]) - k[x, y, z] * (u[x, y, z] - u[x, y, z - 1])) / h**2


@msc.operator(boundary="periodic")
def helmholtz(u, h):
    return (u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y]) / h**2 - 3 * u[x, y]


@msc.operator(boundary="periodic")
def poisson(u, h):
    """Singular by the constants: solved with nullspace="constant"."""
    return (u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y]) / h**2


def zero_mean(a: np.ndarray) -> np.ndarray:
    return a - a.mean()


@msc.operator(name="lap_source")
def source_term(u, k, h):
    """A constant part (a source term: L(0) != 0) that reads a coefficient field across the blocks."""
    return (u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y]) / h**2 + 3.0 * k[x + 1, y]


@msc.operator
def drift(u, h, v):
    return (u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y]) / h**2 - v * (u[x + 1, y] - u[x - 1, y]) / (2 * h)


def compare(name: str, L: msc.Operator, rhs: np.ndarray, method: str = "multigrid", dims: Any = None,
            smoother: str = "jacobi", tol: float = 1e-12, **inputs: Any) -> None:
    blocks = in_blocks(L, rhs, method, dims, smoother, tol, inputs)
    on_root = {k: v if comm.rank == 0 or not isinstance(v, np.ndarray) else None for k, v in inputs.items()}
    u, info = msc.solve(L, rhs if comm.rank == 0 else None, method=method, tol=tol, full_output=True,
                        comm=comm, dims=dims, smoother=smoother, **on_root)
    if comm.rank != 0:
        assert u is None
        return
    serial, sinfo = msc.solve(L, rhs, method=method, tol=tol, full_output=True, smoother=smoother, **inputs)
    results[name] = {"difference": float(np.abs(u - serial).max() / np.abs(serial).max()),
                     "iterations": info.iterations, "serial_iterations": sinfo.iterations, "solver": info.solver,
                     "halo_bytes_per_iteration": info.halo_bytes_per_iteration,
                     "halo_face_bytes_per_iteration": info.halo_face_bytes_per_iteration,
                     "gather_bytes_per_iteration": info.gather_bytes_per_iteration, "ranks": info.ranks,
                     "levels": info.levels, "serial_levels": sinfo.levels, "levels_in_blocks": info.levels_in_blocks,
                     "ranks_per_level": info.ranks_per_level,
                     "residuals": info.residuals, "serial_residuals": sinfo.residuals,
                     "mean": float(abs(u.mean()) / np.abs(u).max())}
    whole = np.zeros_like(serial)
    interior = tuple(slice(rd, n - rd) for rd, n in zip(L.radius, serial.shape)) if L.ir.boundary != "periodic" \
        else (slice(None),) * serial.ndim
    for where, block in blocks:
        whole[interior][where] = block
    results[name]["blocks_difference"] = float(np.abs(whole[interior] - serial[interior]).max() / np.abs(serial).max())


def in_blocks(L: msc.Operator, rhs: np.ndarray, method: str, dims: Any, smoother: str, tol: float,
              inputs: dict[str, Any]) -> list[tuple[tuple[slice, ...], np.ndarray]] | None:
    """msc.solve(..., blocks=True): each rank gives its blocks (arrays padded by the radius, the
    periodic ones wrapped) and gets its block of the solution; rank 0 gets every (slices, block)."""
    r = L.radius
    shape = rhs.shape if L.ir.boundary == "periodic" else tuple(n + 2 * rd for n, rd in zip(rhs.shape, r))
    mine = owned_block(L, comm, shape, dims)
    if L.ir.boundary == "periodic":
        idx = np.ix_(*[np.arange(s.start - rd, s.stop + rd) % n for s, rd, n in zip(mine, r, shape)])
        padded = {k: v[idx] if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    else:
        ringed = tuple(slice(s.start, s.stop + 2 * rd) for s, rd in zip(mine, r))
        padded = {k: v[ringed] if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    u, info = msc.solve(L, rhs[mine], method=method, tol=tol, full_output=True, comm=comm, dims=dims,
                        smoother=smoother, shape=shape, blocks=True, **padded)
    assert u.shape == rhs[mine].shape and info.ranks == comm.size
    return comm.gather((mine, u), root=0)


def smooth_k_and_ring(n: int) -> tuple[np.ndarray, np.ndarray]:
    """k = 1 + 0.9 sin sin sin on an n^3 interior with its ring, and u that is 1 on one face of the ring and
    0.5 inside (a first guess: the solve must ignore it, as one process does)."""
    X, Y, Z = np.meshgrid(*[np.linspace(0, 1, n + 2)] * 3, indexing="ij")
    ring = np.zeros((n + 2,) * 3)
    ring[0] = 1.0
    ring[1:-1, 1:-1, 1:-1] = 0.5
    return 1 + 0.9 * np.sin(2 * np.pi * X) * np.sin(2 * np.pi * Y) * np.sin(2 * np.pi * Z), ring


rng = np.random.default_rng(7)
n = 21
k, ring = smooth_k_and_ring(n)
compare("div_k_grad_3d", div3, rng.random((n,) * 3), k=k, h=1.0 / (n + 1), u=ring)
compare("div_k_grad_3d_even_rows", div3, rng.random((20,) * 3), dims=(comm.size, 1, 1),
        k=np.ones((22,) * 3), h=1.0 / 21)
compare("div_k_grad_3d_chebyshev", div3, rng.random((n,) * 3), smoother="chebyshev", k=k, h=1.0 / (n + 1), u=ring)
compare("periodic_2d", helmholtz, rng.random((24, 30)), h=1.0 / 24)
compare("nullspace_periodic_2d", poisson, zero_mean(rng.random((24, 30))), h=1.0 / 24, nullspace="constant")
compare("drift_gmres_2d", drift, rng.random((27, 25)), method="gmres", h=1.0 / 28, v=20.0)
edge = np.zeros((66, 50))
edge[:, 0] = 2.0
compare("source_term_2d", source_term, rng.random((64, 48)), tol=1e-10, k=1 + rng.random((66, 50)), h=1.0 / 65,
        u=edge)

distributed.AGGLOMERATE = 64  # small grids with coarse levels in blocks: every level above the coarsest
m = 36
k, ring = smooth_k_and_ring(m)
compare("levels_in_blocks_3d", div3, rng.random((m,) * 3), k=k, h=1.0 / (m + 1), u=ring)
compare("levels_in_blocks_poisson_3d", div3, rng.random((37, 36, 35)), k=np.ones((39, 38, 37)), h=1.0 / 38)
compare("levels_in_blocks_periodic_2d", helmholtz, rng.random((128, 96)), tol=1e-10, h=1.0 / 128)
compare("levels_in_blocks_nullspace_2d", poisson, zero_mean(rng.random((128, 96))), tol=1e-10, h=1.0 / 128,
        nullspace="constant")
compare("levels_in_blocks_gmres_2d", drift, rng.random((130, 99)), method="gmres", tol=1e-10, h=1.0 / 131, v=20.0)
distributed.AGGLOMERATE = 2048  # level 2 (16^3 in 3D, 64 x 48 in 2D) on 2 of 4 ranks: onto fewer ranks
m = 64
X, Y, Z = np.meshgrid(*[np.linspace(0, 1, m + 2)] * 3, indexing="ij")
k = np.exp(np.sin(3 * X) * np.cos(2 * Y + Z))
compare("fewer_ranks_3d", div3, rng.random((m,) * 3), tol=1e-10, k=k, h=1.0 / (m + 1))
distributed.AGGLOMERATE = 1024
compare("fewer_ranks_periodic_2d", helmholtz, rng.random((256, 192)), tol=1e-10, h=1.0 / 256)
distributed.AGGLOMERATE = 4096

errors = {}
try:
    msc.solve(helmholtz, rng.random((23, 30)) if comm.rank == 0 else None, method="multigrid", comm=comm,
              h=1.0 / 24)
except msc.MscError as err:
    errors["odd_periodic"] = str(err)
try:  # a block of the wrong shape is named, on every rank
    msc.solve(helmholtz, np.zeros((3, 3)), method="multigrid", comm=comm, shape=(24, 30), blocks=True, h=1.0 / 24)
except msc.MscError as err:
    errors["wrong_block"] = str(err)
try:  # an operator that does not send constants to zero is named, on every rank
    msc.solve(helmholtz, zero_mean(rng.random((24, 30))) if comm.rank == 0 else None, method="multigrid", comm=comm,
              h=1.0 / 24, nullspace="constant")
except msc.MscError as err:
    errors["nullspace_not_singular"] = str(err)
if comm.rank == 0:
    results["errors"] = errors
    print(json.dumps(results))
