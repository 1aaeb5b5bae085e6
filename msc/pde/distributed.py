"""msc.solve over MPI ranks (`comm=`): the fine level in blocks, the coarse levels agglomerated on rank 0.

Each rank owns one block of the fine grid (a Cartesian process grid from the
halo library, msc.runtime.halo) and runs the operator's compiled stencils on
it (msc.pde.matfree, block=True), exchanging a halo of the operator's radius
before every kernel call. A V-cycle smooths on the blocks, restricts each
block's residual locally (one exchanged layer of it), gathers the level-1
right-hand side on rank 0, where the rest of the hierarchy (Galerkin levels,
the factored coarsest) runs as in one process, and scatters back to each rank
the slab of the correction it interpolates from. Krylov dot products are
global sums (allreduce), so every rank takes the same steps and the result
differs from one process only by rounding. As in one process, the V-cycle runs
in single precision where `preconditioner_dtype` says so (its fine level a
float32 twin of the operator, its halos and transfers float32), CG and its
operator application in float64. Inputs are given on rank 0 (None
elsewhere); rank 0 gets the solution, the other ranks None. With
`blocks=True` each rank gives its own blocks instead (`owned_block` says
which: the right-hand side over the block, every array over the block
padded by the operator's radius) and gets its block of the solution; the
setup still gathers the blocks on rank 0, which builds the coarse levels
from the global coefficients.

Supported: scalar operators, dirichlet (any size) and periodic with even
sizes; every axis must halve (at least 3 points, 6 periodic).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from msc.errors import StencilArgumentError
from msc.pde.assemble import assemble, coefficient_stencil
from msc.pde.coarsen import Axis1D, along_axis, diagonal, galerkin, gershgorin_ratio, is_symmetric
from msc.pde.iterative import SolveInfo, cg_direction, check_scalar, preconditioner_dtype
from msc.pde.krylov import cg, gmres
from msc.pde.matfree import from_coefficients, from_operator
from msc.pde.multigrid import Level, Multigrid, jacobi_scales, jacobi_weight, smooth
from msc.pde.problem import checked_problem
from msc.pde.vectors import Vectors
from msc.runtime.distributed import _collectively
from msc.runtime.halo import DistributedError, Grid, HaloExchanger
from msc.runtime.progress import ResidualProgress
from msc.solvers.numeric import blas_threads

if TYPE_CHECKING:
    from msc.pde.operator import Operator


@dataclass(frozen=True)
class AxisPart:
    """One axis of this rank's block: fine points [s, e), coarse centres [i0, i1), the coarse slab [a, b) it
    interpolates from; coarse point I sits on fine 2I + base."""

    s: int
    e: int
    base: int

    @property
    def i0(self) -> int:
        return (self.s - self.base + 1) // 2

    @property
    def i1(self) -> int:
        return (self.e - self.base + 1) // 2

    @property
    def a(self) -> int:
        return (self.s - self.base - 1) // 2

    @property
    def b(self) -> int:
        return (self.e - 1 - self.base) // 2 + 2


def restrict_block(r: np.ndarray, parts: list[AxisPart]) -> np.ndarray:
    """R = P^T of a block's residual given with one halo layer on every side: the coarse values of the
    centres the block owns (values beyond a dirichlet edge are the zero ring)."""
    out = r
    for d, p in enumerate(parts):
        j0, k = 2 * p.i0 + p.base - p.s + 1, p.i1 - p.i0
        centre = out[along_axis(d, out.ndim, slice(j0, j0 + 2 * k, 2))]
        left = out[along_axis(d, out.ndim, slice(j0 - 1, j0 - 1 + 2 * k, 2))]
        right = out[along_axis(d, out.ndim, slice(j0 + 1, j0 + 1 + 2 * k, 2))]
        out = centre + 0.5 * (left + right)
    return out[tuple(slice(1, -1) if d >= len(parts) else slice(None) for d in range(out.ndim))]


def prolong_block(slab: np.ndarray, parts: list[AxisPart]) -> np.ndarray:
    """P of a coarse slab (coarse indices [a, b) per axis) onto the block's fine points."""
    out = slab
    for d, p in enumerate(parts):
        x = np.arange(p.s, p.e) - p.base
        first = np.floor_divide(x, 2) - p.a  # the coarse point at or left of x, in the slab
        shape = [1] * out.ndim
        shape[d] = x.size
        w2 = (0.5 * (x % 2 == 1)).reshape(shape)  # a fine point between two coarse ones takes half of each
        out = np.take(out, first, axis=d) * (1.0 - w2) + np.take(out, first + 1, axis=d) * w2
    return out


class DistributedMultigrid:
    """Collective: every rank constructs it; arrays (`rhs`, coefficient fields) only on rank 0."""

    def __init__(self, L: Operator, comm: Any, shape: tuple[int, ...] | None, rhs: Any, inputs: Mapping[str, Any],
                 method: str, tol: float, maxiter: int | None, what: str, dims: Any = None,
                 threads: int | None = None, sweeps: int = 2, smoother: str = "jacobi") -> None:
        check_scalar(L, what, method)
        start = time.perf_counter()
        self.comm, self.L, self.what, self.sweeps, self.smoother = comm, L, what, sweeps, smoother
        self.tol, self.maxiter = tol, maxiter or 200
        periodic = L.ir.boundary == "periodic"
        self.root = comm.rank == 0
        setup = _collectively(comm, lambda: self._setup_root(L, shape, rhs, inputs, method) if self.root else None)
        shape, n, self.krylov, scalars, rho, dtype = comm.bcast(setup[:6] if self.root else None, root=0)
        self.shape, self.n = shape, n
        r = L.radius
        self.grid = _collectively(comm, lambda: Grid(comm, n, periodic, dims))
        base = 0 if periodic else 1
        self.parts = [AxisPart(s, s + c, base) for s, c in zip(self.grid.start, self.grid.count)]
        directions = [o for o in np.ndindex(*(3,) * len(n)) if any(v != 1 for v in o)]
        directions = [tuple(v - 1 for v in o) for o in directions]
        item = np.dtype(dtype).itemsize
        self._u_halo = _collectively(comm, lambda: HaloExchanger(self.grid, r, 8, directions, r))
        self._v_halo = _collectively(comm, lambda: HaloExchanger(self.grid, r, item, directions, r))
        self._r_halo = _collectively(comm, lambda: HaloExchanger(self.grid, (1,) * len(n), item, directions))
        fields = self._scatter(setup[6] if self.root else None)
        local = tuple(c + 2 * rd for c, rd in zip(self.grid.count, r))
        inputs_here = {**scalars, **fields["coefficients"]}
        self.op = _collectively(comm, lambda: from_operator(L, local, inputs_here, 0.0, 1.0, "openmp", threads,
                                                            block=True))  # CG's A p, in float64
        self.op.refresh = self._exchange_u
        self.cycled = self.op  # the V-cycle's fine level: in single precision where the solve in one process is
        if dtype != "float64":
            self.cycled = _collectively(comm, lambda: from_operator(L, local, inputs_here, 0.0, 1.0, "openmp",
                                                                    threads, block=True, dtype=dtype))
            self.cycled.refresh = self._exchange_v
        self.cycled.set_weight(jacobi_weight(rho, len(n)) * fields["inverse_diagonal"])
        self.cycled.set_scales(jacobi_scales(len(n), sweeps))
        self.level = Level(tuple(self.grid.count), self.cycled, [], inverse_diagonal=fields["inverse_diagonal"],
                           rho=rho)
        self.b = fields["b"]
        self.coarse: Multigrid | None = setup[7] if self.root else None
        self._near = self.grid.padding((1,) * len(n), (0,) * len(n))  # which sides have a neighbour
        self.halo_faces = 0
        self.transfer_bytes = 0
        self.setup_s = time.perf_counter() - start

    # -------------------------------------------------------------- rank 0's setup
    def _setup_root(self, L: Operator, shape: tuple[int, ...] | None, rhs: Any, inputs: Mapping[str, Any],
                    method: str) -> tuple[Any, ...]:
        shape, rhs_flat = checked_problem(L, rhs, inputs, shape)
        _, g = assemble(L, shape, "float64", inputs, matrix=False)
        b = rhs_flat - g
        periodic = L.ir.boundary == "periodic"
        n = L.interior_shape(shape)
        least = 6 if periodic else 3
        if any(m < least or (periodic and m % 2) for m in n):
            raise StencilArgumentError(
                f"{self.what}: over MPI ranks every axis must halve: at least {least} interior points"
                f"{' and an even number (periodic)' if periodic else ''}, got {n}")
        params = {k: v for k, v in inputs.items() if k in L.ir.coefficients or k in L.ir.params}
        coefs = coefficient_stencil(L, shape, params)
        diag = diagonal(coefs, n)
        definite = bool(np.all(diag > 0) or np.all(diag < 0))
        symmetric = definite and is_symmetric(coefs, n, periodic)
        if method == "cg" and not symmetric:
            raise StencilArgumentError(f"{self.what}: CG needs a symmetric operator with a one-signed diagonal, "
                                       f"and operator '{L.name}' is not one: use method='gmres'")
        krylov = "gmres" if method == "gmres" or not symmetric else "cg"
        rho = gershgorin_ratio(coefs, n)
        inverse_diagonal = np.broadcast_to(1.0 / diag, n)
        dtype = preconditioner_dtype(L, diag)
        coarse, cshape = galerkin(coefs, n, [Axis1D.of(m, periodic) for m in n])
        level1 = from_coefficients(coarse, cshape, periodic, symmetric, "openmp", None, dtype)
        mg = Multigrid(level1, coarse, cshape, periodic, self.what, symmetric, self.sweeps, smoother=self.smoother)
        scalars = {k: v for k, v in params.items() if k in L.ir.params}
        arrays = {k: np.asarray(v, float) for k, v in params.items() if k in L.ir.coefficients}
        return shape, n, krylov, scalars, rho, dtype, (arrays, inverse_diagonal, b.reshape(n), shape), mg

    def _scatter(self, data: tuple[Any, ...] | None) -> dict[str, Any]:
        """Each rank's coefficient blocks (ring r), inverse diagonal and right-hand side block."""
        r = self.L.radius
        periodic = self.L.ir.boundary == "periodic"
        pieces = None
        if self.root:
            assert data is not None
            arrays, inverse_diagonal, b, shape = data
            pieces = []
            for rank in range(self.comm.size):
                start, count = self.grid.block_of(rank)
                inner = tuple(slice(s, s + c) for s, c in zip(start, count))
                if periodic:  # whole-domain arrays: the ring wraps
                    idx = [np.arange(s - rd, s + c + rd) % m for s, c, rd, m in zip(start, count, r, shape)]
                    ringed = {k: a[np.ix_(*idx)] for k, a in arrays.items()}
                else:  # arrays with their ring: block + ring is a plain slice
                    ringed = {k: a[tuple(slice(s, s + c + 2 * rd) for s, c, rd in zip(start, count, r))]
                              for k, a in arrays.items()}
                pieces.append({"coefficients": ringed, "inverse_diagonal": inverse_diagonal[inner].copy(),
                               "b": b[inner].copy()})
        return self.comm.scatter(pieces, root=0)

    # -------------------------------------------------------------- halos
    def _exchange(self, halo: HaloExchanger, padded: np.ndarray) -> None:
        halo.start(padded)
        halo.finish()
        self.halo_faces += self._faces(self.L.radius, padded.itemsize)

    def _exchange_u(self, padded: np.ndarray) -> None:
        self._exchange(self._u_halo, padded)

    def _exchange_v(self, padded: np.ndarray) -> None:
        self._exchange(self._v_halo, padded)

    def _residual_with_halo(self) -> np.ndarray:
        """b - A u on the block with one exchanged layer around it."""
        op = self.cycled
        op.residual()
        padded = op.padded(op.step + 1)
        r = self.L.radius
        inner = tuple(slice(rd - 1, p - rd + 1) for rd, p in zip(r, padded.shape))
        layer = np.ascontiguousarray(padded[inner])
        self._r_halo.start(layer)
        self._r_halo.finish()
        self.halo_faces += self._faces((1,) * len(r), layer.itemsize)
        return layer

    def _faces(self, width: tuple[int, ...], itemsize: int) -> int:
        """The least bytes an exchange of `width` sends from this block: its faces toward neighbours
        (what a star stencil needs; the exchange also sends edges and corners)."""
        lo, hi = self._near
        count = self.grid.count
        return sum(itemsize * w * ((lo[d] > 0) + (hi[d] > 0)) * int(np.prod([c for k, c in enumerate(count) if k != d]))
                   for d, w in enumerate(width))

    @property
    def halo_bytes(self) -> int:
        """Bytes this rank's halo exchanges sent so far."""
        return self._u_halo.bytes_sent + self._v_halo.bytes_sent + self._r_halo.bytes_sent

    # -------------------------------------------------------------- the cycle and the solve
    def vcycle(self, b: np.ndarray) -> np.ndarray:
        """One V-cycle from zero for this rank's block of b: its block of x ~ A^-1 b, as a view into
        the fine level's kernel buffers (valid until their next kernel call)."""
        op = self.cycled
        op.u[...] = 0.0
        op.set_rhs(b)
        smooth(self.level, self.smoother, self.sweeps, one_at_a_time=True)
        coarse_part = restrict_block(self._residual_with_halo(), self.parts)
        pieces = self.comm.gather((tuple(p.i0 for p in self.parts), coarse_part), root=0)
        slabs = None
        if self.root:
            assert self.coarse is not None and pieces is not None
            b1 = np.zeros(self.coarse.shapes[0])
            for first, piece in pieces:
                b1[tuple(slice(f, f + m) for f, m in zip(first, piece.shape))] = piece
                self.transfer_bytes += piece.nbytes
            e1 = self.coarse.vcycle(b1)
            slabs = [self._slab(e1, rank).astype(op.dtype) for rank in range(self.comm.size)]
            self.transfer_bytes += sum(s.nbytes for s in slabs)
        slab = self.comm.scatter(slabs, root=0)
        op.u[...] += prolong_block(slab, self.parts)
        smooth(self.level, self.smoother, self.sweeps, one_at_a_time=True)
        return op.u  # a view into the kernel buffers, valid until their next kernel call

    def _slab(self, e1: np.ndarray, rank: int) -> np.ndarray:
        """The coarse values rank `rank` interpolates from: zero beyond a dirichlet edge, wrapped if periodic."""
        start, count = self.grid.block_of(rank)
        periodic = self.L.ir.boundary == "periodic"
        idx = []
        for s, c, m in zip(start, count, e1.shape):
            p = AxisPart(s, s + c, 0 if periodic else 1)
            idx.append(np.arange(p.a, p.b))
        if periodic:
            return e1[np.ix_(*[i % m for i, m in zip(idx, e1.shape)])]
        padded = np.pad(e1, 1)
        return padded[np.ix_(*[np.clip(i + 1, 0, m + 1) for i, m in zip(idx, e1.shape)])]

    def _total(self, part: float) -> float:
        from mpi4py import MPI

        return float(self.comm.allreduce(part, op=MPI.SUM))

    def solve(self, progress: bool = False) -> tuple[np.ndarray, list[float]]:
        """This rank's block of the solution, and the residual history (the same on every rank);
        `progress=True` shows a bar on rank 0's stderr."""
        shape = self.grid.count
        apply = lambda v: self.op.apply(v.reshape(shape)).reshape(-1)
        if self.krylov == "cg":  # CG reads the operator's and the V-cycle's results in the kernel buffers
            direction, applied_direction = cg_direction(self.op, self.cycled)
            method: Any = partial(cg, direction=direction)
            applied = lambda _p: applied_direction()  # _p is the direction
            precondition = lambda r: self.vcycle(r.reshape(shape))
        else:
            method, applied = gmres, apply
            precondition = lambda r: self.vcycle(r.reshape(shape)).reshape(-1)  # flat, as GMRES takes vectors
        b = self.b.reshape(-1)
        with blas_threads().limit(limits=1, user_api="blas"), \
                ResidualProgress(f"{self.what} (multigrid-{self.krylov}, {self.comm.size} ranks)", self.tol,
                                 progress and self.root) as bar:
            vectors = Vectors(self.op.threads, self._total)
            x, history = method(applied, precondition, b, self.tol, self.maxiter, self.what, vectors, bar)
            bnorm = np.sqrt(vectors.dot(b, b))
            r = b - apply(x)
            history[-1] = float(np.sqrt(vectors.dot(r, r)) / bnorm) if bnorm else 0.0
        return x.reshape(shape), history

    def gather(self, block: np.ndarray, ring: np.ndarray | None) -> np.ndarray | None:
        blocks = self.comm.gather((self.grid.start, block), root=0)
        if not self.root:
            return None
        assert blocks is not None
        out = np.zeros(self.shape) if ring is None else np.array(ring, float)
        offset = (0,) * len(self.shape) if self.L.ir.boundary == "periodic" else self.L.radius
        for start, piece in blocks:
            out[tuple(slice(s + o, s + o + c) for s, o, c in zip(start, offset, piece.shape))] = piece
        return out

    def close(self) -> None:
        self._u_halo.close()
        self._v_halo.close()
        self._r_halo.close()
        self.grid.close()


def _grid(L: Operator, comm: Any, shape: tuple[int, ...], dims: Any) -> Grid:
    return _collectively(comm, lambda: Grid(comm, L.interior_shape(shape), L.ir.boundary == "periodic", dims))


def owned_block(L: Operator, comm: Any, shape: tuple[int, ...], dims: Any = None) -> tuple[slice, ...]:
    """This rank's block of the interior under msc.solve(..., comm=comm, blocks=True): slices of the
    global interior (`shape` is the global array's, ring included for dirichlet). Collective."""
    grid = _grid(L, comm, tuple(int(n) for n in shape), dims)
    try:
        return tuple(slice(s, s + c) for s, c in zip(grid.start, grid.count))
    finally:
        grid.close()


def _gather_blocks(L: Operator, comm: Any, shape: tuple[int, ...] | None, dims: Any, rhs: Any,
                   inputs: Mapping[str, Any], what: str) -> tuple[Any, dict[str, Any]]:
    """The global right-hand side and arrays on rank 0 (None elsewhere), from each rank's blocks: `rhs`
    of the rank's interior block, each array of that block padded by the operator's radius."""
    def known() -> tuple[int, ...]:
        if shape is None:
            raise DistributedError(f"{what}: blocks=True needs the global array's shape= on every rank")
        return tuple(int(n) for n in shape)

    shape = _collectively(comm, known)
    grid = _grid(L, comm, shape, dims)
    r = L.radius
    periodic = L.ir.boundary == "periodic"
    count, padded = grid.count, tuple(c + 2 * rd for c, rd in zip(grid.count, r))
    arrays = {k: v for k, v in inputs.items() if isinstance(v, np.ndarray)}

    def check() -> tuple[np.ndarray, dict[str, np.ndarray]]:
        b = None if rhs is None else np.asarray(rhs, float)
        if b is None or b.shape != count:
            raise StencilArgumentError(f"{what}: rhs must be this rank's interior block of shape {count} "
                                       f"(msc.pde.distributed.owned_block), got {None if b is None else b.shape}")
        out = {k: np.asarray(v, float) for k, v in arrays.items()}
        for k, v in out.items():
            if v.shape != padded:
                raise StencilArgumentError(f"{what}: {k} must be this rank's block padded by the radius {r}, of "
                                           f"shape {padded}, got {v.shape}")
        return b, out

    try:
        mine = _collectively(comm, check)
        pieces = comm.gather((grid.start, mine), root=0)
    finally:
        grid.close()
    scalars = {k: v for k, v in inputs.items() if k not in arrays}
    if comm.rank != 0:
        return None, {**scalars, **{k: None for k in arrays}}
    assert pieces is not None
    n = L.interior_shape(shape)
    rhs_global = np.zeros(n)
    globals_ = {k: np.zeros(shape) for k in arrays}
    for start, (b, blocks) in pieces:
        rhs_global[tuple(slice(s, s + c) for s, c in zip(start, b.shape))] = b
        for k, block in blocks.items():
            if periodic:  # the ring wraps: a block's own points only
                inner = block[tuple(slice(rd, p - rd) for rd, p in zip(r, block.shape))]
                globals_[k][tuple(slice(s, s + c) for s, c in zip(start, inner.shape))] = inner
            else:  # block and ring: a plain slice of the array (rings of neighbours agree)
                globals_[k][tuple(slice(s, s + p) for s, p in zip(start, block.shape))] = block
    return rhs_global, {**scalars, **globals_}


def solve_distributed(L: Operator, rhs: Any, comm: Any, shape: tuple[int, ...] | None, method: str, tol: float,
                      maxiter: int | None, smoother: str, full_output: bool, dims: Any, progress: bool,
                      inputs: Mapping[str, Any], blocks: bool = False) -> Any:
    """msc.solve(..., comm=comm): see the module docstring."""
    what = f"msc.solve with operator '{L.name}'"
    if method in ("auto", "direct"):
        method = "multigrid"  # over ranks the direct solve is not offered: auto means multigrid
    t0 = time.perf_counter()
    if blocks:
        rhs, inputs = _gather_blocks(L, comm, shape, dims, rhs, inputs, what)
    mg = DistributedMultigrid(L, comm, shape, rhs, inputs, method, tol, maxiter, what, dims, smoother=smoother)
    try:
        t1 = time.perf_counter()
        block, history = mg.solve(progress)
        t2 = time.perf_counter()
        ring = inputs.get(L.ir.unknowns[0]) if comm.rank == 0 else None
        u = block if blocks else mg.gather(block, ring)
        cycles = max(len(history) - 1, 1)
        info = SolveInfo(mg.krylov, f"multigrid-{mg.krylov}", len(history) - 1, history,
                         [tuple(mg.n)] + (mg.coarse.shapes if mg.coarse else []), setup_s=t1 - t0, solve_s=t2 - t1,
                         ranks=comm.size, halo_bytes_per_iteration=comm.allreduce(mg.halo_bytes) / cycles,
                         halo_face_bytes_per_iteration=comm.allreduce(mg.halo_faces) / cycles,
                         gather_bytes_per_iteration=comm.bcast(mg.transfer_bytes, root=0) / cycles)
    finally:
        mg.close()
    if comm.rank != 0 and not blocks:
        return (None, info) if full_output else None
    return (u, info) if full_output else u


