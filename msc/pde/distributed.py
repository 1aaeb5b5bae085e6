"""msc.solve over MPI ranks (`comm=`): every level in blocks, agglomerated onto fewer ranks as it shrinks.

Each rank owns one block of the fine grid (a Cartesian process grid from the
halo library, msc.runtime.halo) and runs the operator's compiled stencils on
it (msc.pde.matfree, block=True), exchanging a halo of the operator's radius
before every kernel call. The coarse levels run in blocks too (`coarse_plan`):
a rank's block of a coarse level is the coarse points centred in its block
above (the halo library's grid given these bounds), so a level's restriction
reads one exchanged layer of the residual around the block and its
interpolation one exchanged layer of the coarse correction (compiled block
transfers, msc.pde.transfer.Transfer.for_block). A level's operator is its
Galerkin coefficient stencil (msc.pde.matfree.from_coefficients on the block,
its coefficients with their ring). Where a level would have too few points
per rank, it agglomerates onto fewer ranks: the process grid halves along its
most split axis, one rank of each pair (its parent) gathers its children's
restrictions into its block, runs the cycle below, and sends each child the
slab of the correction it interpolates from. Once one rank would be left, the
hierarchy goes to rank 0: the restriction is gathered there, the rest of the
hierarchy (Galerkin levels, the factored coarsest) runs as in one process, and
each rank gets back its slab. The hierarchy is one process's, level for level.
Krylov dot products are global sums (allreduce), so every rank takes the same
steps and the result differs from one process only by rounding. As in one
process, the V-cycle runs in single precision where `preconditioner_dtype` says
so (its fine level a float32 twin of the operator, its halos and transfers
float32), CG and its operator application in float64. Inputs are given on rank 0 (None
elsewhere); rank 0 gets the solution, the other ranks None. With
`blocks=True` each rank gives its own blocks instead (`owned_block` says
which: the right-hand side over the block, every array over the block
padded by the operator's radius) and gets its block of the solution. The setup
is in blocks too: each rank forms its coefficients, its part of each coarse
level's Galerkin stencil (from its block and one exchanged point around it,
msc.pde.coarsen.galerkin_block) and b's boundary part on its block; only the
level below the last in blocks is gathered on rank 0. With inputs on rank 0,
rank 0 scatters the fine arrays' blocks and b's first.

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
from msc.pde import multigrid
from msc.pde.assemble import assemble, coefficient_stencil
from msc.pde.coarsen import (
    Axis1D,
    Coefficients,
    along_axis,
    by_class,
    first_centre,
    galerkin_block,
    gershgorin_ratio,
)
from msc.pde.iterative import SolveInfo, cg_direction, check_scalar, cycle_sweeps, preconditioner_dtype
from msc.pde.krylov import cg, gmres
from msc.pde.matfree import CompiledOperator, from_coefficients, from_operator
from msc.pde.multigrid import Level, Multigrid, jacobi_scales, jacobi_weight, smooth
from msc.pde.nullspace import check_annihilates_constants, projected
from msc.pde.problem import checked_problem
from msc.pde.transfer import Transfer
from msc.pde.vectors import Vectors
from msc.runtime.distributed import _collectively
from msc.runtime.halo import DistributedError, Grid, HaloExchanger
from msc.runtime.halo import block as even_block
from msc.runtime.progress import ResidualProgress
from msc.solvers.numeric import blas_threads

if TYPE_CHECKING:
    from msc.pde.operator import Operator


def _cut(a: np.ndarray, start: tuple[int, ...], count: tuple[int, ...]) -> np.ndarray:
    """A block of a global array, copied (one value broadcast over the grid: that value, 0-d)."""
    if not any(a.strides):
        return np.array(a.flat[0])
    return a[tuple(slice(s, s + c) for s, c in zip(start, count))].copy()


def _place(into: np.ndarray, piece: np.ndarray, first: tuple[int, ...],
           origin: tuple[int, ...] | None = None) -> None:
    """A block given by its first point (global indices) put into an array whose first point is
    `origin` (default: the grid's first)."""
    origin = origin or (0,) * len(first)
    into[tuple(slice(f - o, f - o + m) for f, o, m in zip(first, origin, piece.shape))] = piece


def _padded_block(arrays: Mapping[Any, np.ndarray], start: tuple[int, ...], count: tuple[int, ...],
            ring: tuple[int, ...], periodic: bool) -> dict[Any, np.ndarray]:
    """Each array's block padded by `ring`: periodic arrays over the whole grid wrap; others are
    given with their ring, so the padded block is a plain slice (rings of neighbours agree)."""
    if periodic:
        out = {}
        for k, a in arrays.items():
            idx = [np.arange(s - rd, s + c + rd) % m for s, c, rd, m in zip(start, count, ring, a.shape)]
            out[k] = a[np.ix_(*idx)]
        return out
    return {k: a[tuple(slice(s, s + c + 2 * rd) for s, c, rd in zip(start, count, ring))].copy()
            for k, a in arrays.items()}


def _trimmed(ringed: Mapping[Any, Any], width: int | tuple[int, ...]) -> dict[Any, Any]:
    """Coefficient arrays padded by `width` cut down to one point around the block (what R A P reads)."""
    out = {}
    for o, c in ringed.items():
        if np.ndim(c) == 0:
            out[o] = c
            continue
        widths = (width,) * c.ndim if isinstance(width, int) else width
        out[o] = c[tuple(slice(w - 1, c.shape[d] - w + 1) for d, w in enumerate(widths))]
    return out


def _neutral_beyond_edges(padded: Mapping[Any, Any], ring: tuple[int, ...], grid: Grid,
                          periodic: bool) -> dict[Any, Any]:
    """The coefficients with c_o(x) at the block's centre value wherever x + o is beyond a dirichlet edge
    of the grid: there it multiplies a zero, and so a block at the edge finds its constant stencil
    (coarsen.uniform_region) as the whole grid does."""
    if periodic:
        return dict(padded)
    out = {}
    for o, c in padded.items():
        if np.ndim(c) == 0:
            out[o] = c
            continue
        c = c.copy()
        inner = tuple(slice(rd, rd + k) for rd, k in zip(ring, grid.count))
        centre = float(c[inner][tuple(k // 2 for k in grid.count)])
        for d, k in enumerate(o):
            if k < 0 and grid.start[d] == 0:
                rows = slice(ring[d], ring[d] - k)
            elif k > 0 and grid.start[d] + grid.count[d] == grid.interior[d]:
                rows = slice(ring[d] + grid.count[d] - k, ring[d] + grid.count[d])
            else:
                continue
            c[inner[:d] + (rows,) + inner[d + 1:]] = centre
        out[o] = c
    return out


def _known_shape(shape: tuple[int, ...] | None, what: str) -> tuple[int, ...]:
    if shape is None:
        raise DistributedError(f"{what}: blocks=True needs the global array's shape= on every rank")
    return tuple(int(n) for n in shape)


def _check_halves(n: tuple[int, ...], periodic: bool, what: str) -> None:
    if not halves(n, periodic):
        least = 6 if periodic else 3
        raise StencilArgumentError(
            f"{what}: over MPI ranks every axis must halve: at least {least} interior points"
            f"{' and an even number (periodic)' if periodic else ''}, got {n}")


def _faces(grid: Grid, width: tuple[int, ...], itemsize: int) -> int:
    """The least bytes an exchange of `width` sends from this rank's block of `grid`: its faces toward
    neighbours (what a star stencil needs; the exchange also sends edges and corners)."""
    lo, hi = grid.padding((1,) * grid.ndim, (0,) * grid.ndim)  # which sides have a neighbour
    count = grid.count
    return sum(itemsize * w * ((lo[d] > 0) + (hi[d] > 0)) * int(np.prod([c for k, c in enumerate(count) if k != d]))
               for d, w in enumerate(width))


AGGLOMERATE = 4096  # points per rank: a coarse level with fewer agglomerates onto fewer ranks (`coarse_plan`)


def halves(n: tuple[int, ...], periodic: bool) -> bool:
    """Whether every axis of a grid of `n` unknowns halves (dirichlet: at least 3 points; periodic: at
    least 6, an even number), as a level's restriction in blocks needs (Transfer.for_block)."""
    least = 6 if periodic else 3
    return all(m >= least and not (periodic and m % 2) for m in n)


def even_bounds(n: tuple[int, ...], dims: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """The halo library's even split of `n` over `dims` ranks, as block bounds per axis."""
    return tuple(tuple(even_block(m, p, c)[0] for c in range(p)) + (m,) for m, p in zip(n, dims))


@dataclass(frozen=True)
class PlannedLevel:
    """A coarse level that runs in blocks: its interior, process grid and block bounds, and how often
    the fine process grid was halved along each axis to give it (`shift`: the fine rank at
    coordinates c holds a block where every c_d is a multiple of 2**shift_d, at coordinates c >> shift)."""

    n: tuple[int, ...]
    dims: tuple[int, ...]
    bounds: tuple[tuple[int, ...], ...]
    shift: tuple[int, ...]

    def holds(self, fine_coords: tuple[int, ...]) -> bool:
        return _holds(fine_coords, self.shift)

    def coords(self, fine_coords: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(c >> k for c, k in zip(fine_coords, self.shift))

    def block(self, coords: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(start, count) of the block at these coordinates of the level's process grid."""
        return (tuple(b[c] for b, c in zip(self.bounds, coords)),
                tuple(b[c + 1] - b[c] for b, c in zip(self.bounds, coords)))


def _holds(fine_coords: tuple[int, ...], shift: tuple[int, ...]) -> bool:
    """Whether the fine rank at these coordinates holds a block of a level on the process grid halved
    `shift` times along each axis."""
    return all(c % (1 << k) == 0 for c, k in zip(fine_coords, shift))


def _thinnest(bounds: tuple[tuple[int, ...], ...]) -> int:
    return min(b1 - b0 for axis in bounds for b0, b1 in zip(axis, axis[1:]))


def coarse_plan(n: tuple[int, ...], dims: tuple[int, ...], periodic: bool, radius: int,
                least: int | None = None) -> list[PlannedLevel]:
    """The coarse levels that run in blocks, on every rank or on fewer. A rank's block of a coarse
    level is the coarse points centred in its block above (restriction and interpolation stay on the
    rank but for one layer of halo). Where a level would have fewer than `least` (default
    AGGLOMERATE) points per rank, or a block thinner than 2 points or the operator's `radius` (a
    Galerkin level's radius is at most the fine operator's), the process grid halves along its most
    split axis, pairs of blocks merging into one, until it has not: the level agglomerates onto
    fewer ranks. Levels run in blocks while they and the level above halve on every axis (their
    restriction is a block transfer; one process keeps an axis that does not), more than one rank
    is left and they are no coarsest level (more than multigrid.COARSEST points: one process would
    solve it directly); the levels below run on rank 0, as in one process. On one rank there is
    none. Every rank computes the same plan."""
    least = AGGLOMERATE if least is None else least
    base = 0 if periodic else 1
    bounds, shift = even_bounds(n, dims), (0,) * len(n)
    plan: list[PlannedLevel] = []
    while halves(n, periodic):
        n = tuple(m // 2 for m in n)
        bounds = tuple(tuple(first_centre(b, base) for b in axis) for axis in bounds)
        while int(np.prod(dims)) > 1 and (int(np.prod(n)) < least * int(np.prod(dims))
                                          or _thinnest(bounds) < max(2, radius)):
            d = max(range(len(dims)), key=lambda e: dims[e])  # the most split axis (the first of ties)
            axis = bounds[d]
            bounds = bounds[:d] + (axis[0::2] + ((axis[-1],) if dims[d] % 2 else ()),) + bounds[d + 1:]
            dims = dims[:d] + ((dims[d] + 1) // 2,) + dims[d + 1:]
            shift = shift[:d] + (shift[d] + 1,) + shift[d + 1:]
        if int(np.prod(dims)) == 1 or int(np.prod(n)) <= multigrid.COARSEST or not halves(n, periodic):
            break  # the rest on rank 0: one rank left, the coarsest, or an axis one process keeps
        plan.append(PlannedLevel(n, dims, bounds, shift))
    return plan


@dataclass
class BlockLevel:
    """One level of the V-cycle in blocks, one per rank: its process grid, its operator (in the
    V-cycle's type) and the exchanges its kernels and restriction need."""

    comm: Any  # the ranks that hold the level
    grid: Grid
    level: Level
    ring: tuple[int, ...]  # the operator's radius: the halo of its buffers
    halo: HaloExchanger  # the operator's u, `ring` wide (its refresh)
    layer: HaloExchanger  # one layer of the residual, which the restriction reads
    base: int  # coarse point I sits on fine 2I + base
    transfer: Transfer  # R from the residual with its layer, P from the coarse slab around the block

    @property
    def op(self) -> CompiledOperator:
        assert self.level.op is not None
        return self.level.op

    @property
    def centres(self) -> tuple[int, ...]:
        """The first of the coarse points centred in this rank's block, per axis."""
        return tuple(first_centre(s, self.base) for s in self.grid.start)

    def close(self) -> None:
        self.halo.close()
        self.layer.close()
        self.grid.close()


class DistributedMultigrid:
    """Collective: every rank constructs it. Inputs on rank 0 (None elsewhere), or with `blocks=True` each
    rank's own blocks (`owned_block`): then no rank holds more of any level than its blocks of it (rank 0
    also the levels it runs alone)."""

    def __init__(self, L: Operator, comm: Any, shape: tuple[int, ...] | None, rhs: Any, inputs: Mapping[str, Any],
                 method: str, tol: float, maxiter: int | None, what: str, dims: Any = None,
                 threads: int | None = None, sweeps: int | None = None, smoother: str = "jacobi",
                 blocks: bool = False, nullspace: bool = False) -> None:
        check_scalar(L, what, method)
        start = time.perf_counter()
        self.comm, self.L, self.what, self.smoother = comm, L, what, smoother
        self.tol, self.maxiter = tol, maxiter or 200
        self.periodic = periodic = L.ir.boundary == "periodic"
        self.root = comm.rank == 0
        self.halo_faces = 0
        self.transfer_bytes = 0
        if blocks:
            problem = None
            shape = _collectively(comm, lambda: _known_shape(shape, what))
        else:
            problem = _collectively(comm, lambda: self._problem(L, shape, rhs, inputs) if self.root else None)
            shape = comm.bcast(problem[0] if self.root else None, root=0)
        n = L.interior_shape(shape)
        self.shape, self.n = shape, n
        _collectively(comm, lambda: _check_halves(n, periodic, what))
        self.grid = _collectively(comm, lambda: Grid(comm, n, periodic, dims))
        self._fine_coords = [self.grid.coords_of(rank) for rank in range(comm.size)]
        self.plan = coarse_plan(n, self.grid.dims, periodic, max(L.radius))
        r = L.radius
        local = tuple(c + 2 * rd for c, rd in zip(self.grid.count, r))
        if blocks:
            b, arrays, scalars = _collectively(comm, lambda: self._own_blocks(rhs, inputs, local))
        else:
            b, arrays, scalars = self._scatter(problem)
        given = {**scalars, **arrays}
        self._u_halo = _collectively(comm, lambda: self._halo(self.grid, r, 8))
        self.op = _collectively(comm, lambda: from_operator(L, local, given, 0.0, 1.0, "openmp", threads,
                                                            block=True))  # CG's A p, in float64
        self.b = b - self._boundary_part(inputs.get(L.ir.unknowns[0])) if blocks else b
        self.op.refresh = partial(self._exchange, self.grid, self._u_halo, r)
        coefs = _collectively(comm, lambda: coefficient_stencil(L, local, given, block=True))
        width = max(1, max(r))  # Galerkin reads one point around a block, the symmetry check the radius
        ringed = self._ringed(self.grid, coefs, (width,) * len(n))
        self.krylov, symmetric, rho, dtype = self._decide(coefs, ringed, width, method)
        self.nullspace, self.rhs_mean = nullspace, 0.0
        if nullspace:  # msc.pde.nullspace
            ones = np.array(self.op.apply(np.ones(self.grid.count)))
            scale = rho * self._total_max(float(np.max(np.abs(coefs.get((0,) * len(n), 0.0)))))
            _collectively(comm, lambda: check_annihilates_constants(what, ones, scale, symmetric, self.grid.start))
            self.b, self.rhs_mean = projected(what, self.b, tol, self._total, int(np.prod(n)), warn=self.root)
        self.sweeps = cycle_sweeps(coefs, 0.0) if sweeps is None else sweeps

        def fine_level() -> BlockLevel:
            cycled = self.op  # the V-cycle's fine level: in single precision where the solve in one process is
            if dtype != "float64":
                cycled = from_operator(L, local, given, 0.0, 1.0, "openmp", threads, block=True, dtype=dtype)
            diag = np.asarray(coefs.get((0,) * len(n), 0.0), float)
            return self._block_level(comm, self.grid, cycled, r, rho, 1.0 / diag, dtype)

        self.blocks: list[BlockLevel | None] = [_collectively(comm, fine_level)]
        self._subs: list[Any] = []  # the communicators of levels on fewer ranks
        self._through = [self._relatives(k) for k in range(len(self.plan))]
        ringed = _trimmed(ringed, width)
        for k in range(len(self.plan)):
            ringed = self._coarse_level(k, ringed, symmetric, dtype, threads)
        self.coarse = self._below(ringed, symmetric, dtype)
        self.setup_s = time.perf_counter() - start

    @property
    def cycled(self) -> CompiledOperator:
        """The V-cycle's fine level (the operator, or its single-precision twin)."""
        return self.blocks[0].op

    @property
    def levels(self) -> list[tuple[int, ...]]:
        """Every level's interior, from the fine grid to the coarsest (rank 0's list)."""
        return [tuple(self.n)] + [p.n for p in self.plan] + (self.coarse.shapes if self.coarse is not None else [])

    @property
    def ranks_per_level(self) -> list[int]:
        """How many ranks hold each level (rank 0's list)."""
        below = len(self.coarse.shapes) if self.coarse is not None else 0
        return [self.comm.size] + [int(np.prod(p.dims)) for p in self.plan] + [1] * below

    def _fewer(self, planned: PlannedLevel, holds: bool) -> Any:
        """The communicator of the ranks that hold `planned` (its ranks in the order of its process
        grid's coordinates), None on a rank that does not. Collective."""
        from mpi4py import MPI

        key = int(np.ravel_multi_index(planned.coords(self.grid.coords), planned.dims)) if holds else 0
        sub = self.comm.Split(0 if holds else MPI.UNDEFINED, key)
        if holds:
            self._subs.append(sub)
        return sub if holds else None

    def _relatives(self, k: int) -> tuple[int, list[int]] | None:
        """From level k to k + 1 on fewer ranks: the rank that holds this rank's part of level k + 1 (its
        parent), and the ranks whose parts of level k + 1 this rank holds (its children, itself among
        them; empty where it holds no block of k + 1). None where level k + 1 is on the same ranks."""
        above = self.plan[k - 1].shift if k else (0,) * len(self.n)
        planned = self.plan[k]
        if planned.shift == above:
            return None
        mine = planned.coords(self.grid.coords)
        parent = self._fine_coords.index(tuple(c << s for c, s in zip(mine, planned.shift)))
        children = [rank for rank, c in enumerate(self._fine_coords) if _holds(c, above) and planned.coords(c) == mine]
        return parent, children if planned.holds(self.grid.coords) else []

    def _halo(self, grid: Grid, width: tuple[int, ...], itemsize: int) -> HaloExchanger:
        directions = [tuple(v - 1 for v in o) for o in np.ndindex(*(3,) * grid.ndim) if any(v != 1 for v in o)]
        return HaloExchanger(grid, width, itemsize, directions, width)

    def _block_level(self, comm: Any, grid: Grid, op: CompiledOperator, ring: tuple[int, ...], rho: float,
                     inverse_diagonal: np.ndarray, dtype: str) -> BlockLevel:
        """A level in blocks: its exchanges, and its operator's Jacobi weights and polynomial."""
        item = np.dtype(dtype).itemsize
        halo = self._halo(grid, ring, item)
        layer = self._halo(grid, (1,) * grid.ndim, item)
        if op is not self.op:
            op.refresh = partial(self._exchange, grid, halo, ring)
        weight = jacobi_weight(rho, grid.ndim) * inverse_diagonal
        op.set_weight(float(weight.flat[0]) if np.all(weight == weight.flat[0]) else weight)
        op.set_scales(jacobi_scales(grid.ndim, self.sweeps))
        level = Level(tuple(grid.count), op, [], inverse_diagonal=inverse_diagonal, rho=rho)
        base = 0 if self.periodic else 1
        transfer = Transfer.for_block([(s, s + c, base) for s, c in zip(grid.start, grid.count)])
        return BlockLevel(comm, grid, level, ring, halo, layer, base, transfer)

    # -------------------------------------------------------------- the fine level's inputs
    def _problem(self, L: Operator, shape: tuple[int, ...] | None, rhs: Any,
                 inputs: Mapping[str, Any]) -> tuple[Any, ...]:
        """On rank 0, from the whole inputs: the arrays' shape, b = rhs - g over the interior and the
        operator's inputs."""
        shape, rhs_flat = checked_problem(L, rhs, inputs, shape)
        _, g = assemble(L, shape, "float64", inputs, matrix=False)
        params = {k: v for k, v in inputs.items() if k in L.ir.coefficients or k in L.ir.params}
        return shape, (rhs_flat - g).reshape(L.interior_shape(shape)), params

    def _scatter(self, problem: tuple[Any, ...] | None) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, Any]]:
        """Each rank's block of b, its coefficient arrays over its block padded by the radius, and the
        scalars, from rank 0's whole inputs."""
        r = self.L.radius
        pieces = None
        if self.root:
            assert problem is not None
            _, b, params = problem
            scalars = {k: v for k, v in params.items() if k in self.L.ir.params}
            arrays = {k: np.asarray(v, float) for k, v in params.items() if k in self.L.ir.coefficients}
            pieces = []
            for rank in range(self.comm.size):
                start, count = self.grid.block_of(rank)
                pieces.append((_cut(b, start, count), _padded_block(arrays, start, count, r, self.periodic), scalars))
        return self.comm.scatter(pieces, root=0)

    def _own_blocks(self, rhs: Any, inputs: Mapping[str, Any], local: tuple[int, ...]
                    ) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, Any]]:
        """This rank's right-hand side over its block and coefficient arrays over it padded by the radius
        (blocks=True), checked."""
        count = self.grid.count
        b = None if rhs is None else np.asarray(rhs, float)
        if b is None or b.shape != count:
            raise StencilArgumentError(f"{self.what}: rhs must be this rank's interior block of shape {count} "
                                       f"(msc.pde.distributed.owned_block), got {None if b is None else b.shape}")
        arrays = {k: np.asarray(v, float) for k, v in inputs.items()
                  if isinstance(v, np.ndarray) and k in self.L.ir.coefficients}
        ring = inputs.get(self.L.ir.unknowns[0])
        for k, v in {**arrays, **({self.L.ir.unknowns[0]: np.asarray(ring)} if ring is not None else {})}.items():
            if v.shape != local:
                raise StencilArgumentError(f"{self.what}: {k} must be this rank's block padded by the radius "
                                           f"{self.L.radius}, of shape {local}, got {v.shape}")
        scalars = {k: v for k, v in inputs.items() if k in self.L.ir.params}
        return b, arrays, scalars

    def _boundary_part(self, ring: np.ndarray | None) -> np.ndarray:
        """g over this rank's block (L u = A u + g): the operator applied to u = 0 inside, the given ring
        values beyond a dirichlet edge and zero toward neighbours. Before the halo exchange is plugged in."""
        op = self.op
        padded = op.padded(op.step)
        if ring is not None and not self.periodic:
            lo, hi = self.grid.padding((1,) * self.grid.ndim, (0,) * self.grid.ndim)  # 1: a neighbour's side
            kept = np.asarray(ring, float).copy()
            kept[tuple(slice(rd, -rd) for rd in self.L.radius)] = 0.0
            for d, (toward_lo, toward_hi, rd) in enumerate(zip(lo, hi, self.L.radius)):
                if toward_lo:
                    kept[along_axis(d, kept.ndim, slice(0, rd))] = 0.0
                if toward_hi:
                    kept[along_axis(d, kept.ndim, slice(-rd, None))] = 0.0
            padded[...] = kept
        g = np.array(op.applied_to_u(), float) + (0.0 if op.shift is None else op.shift)
        padded[...] = 0.0
        return g

    # -------------------------------------------------------------- the levels' coefficients
    def _ringed(self, grid: Grid, coefs: Mapping[Any, Any], width: tuple[int, ...]) -> dict[Any, Any]:
        """Each coefficient array over this rank's block of `grid` padded by `width`, filled by a halo
        exchange (zero beyond a dirichlet edge); numbers stay numbers. Collective over the grid's ranks."""
        halo = self._halo(grid, width, 8)
        try:
            out: dict[Any, Any] = {}
            for o, c in coefs.items():
                if np.ndim(c) == 0:
                    out[o] = float(c)
                    continue
                padded = np.zeros(tuple(k + 2 * w for k, w in zip(grid.count, width)))
                padded[tuple(slice(w, w + k) for w, k in zip(width, grid.count))] = c
                halo.start(padded)
                halo.finish()
                out[o] = padded
            return out
        finally:
            halo.close()

    def _decide(self, coefs: Mapping[Any, Any], ringed: Mapping[Any, Any], width: int,
                method: str) -> tuple[str, bool, float, str]:
        """The Krylov method, whether A is symmetric, the fine rho and the V-cycle's type, from every
        rank's block (collective)."""
        from mpi4py import MPI

        comm = self.comm
        zero = (0,) * len(self.n)
        diag = np.asarray(coefs.get(zero, 0.0), float)
        if comm.allreduce(bool(np.any(diag == 0)), op=MPI.LOR):
            raise StencilArgumentError(f"{self.what}: multigrid's smoothers need a nonzero diagonal; the operator "
                                       "has a zero on it: use method='direct'")
        definite = comm.allreduce(bool(np.all(diag > 0)), op=MPI.LAND) or \
            comm.allreduce(bool(np.all(diag < 0)), op=MPI.LAND)
        scale = comm.allreduce(max(float(np.max(np.abs(c))) for c in coefs.values()), op=MPI.MAX)
        symmetric = definite and comm.allreduce(self._symmetric_here(coefs, ringed, width, scale), op=MPI.LAND)
        if method == "cg" and not symmetric:
            raise StencilArgumentError(f"{self.what}: CG needs a symmetric operator with a one-signed diagonal, "
                                       f"and operator '{self.L.name}' is not one: use method='gmres'")
        rho = comm.allreduce(gershgorin_ratio(coefs, self.grid.count), op=MPI.MAX)
        magnitude = np.abs(diag)
        extremes = np.array([comm.allreduce(float(magnitude.min()), op=MPI.MIN),
                             comm.allreduce(float(magnitude.max()), op=MPI.MAX)])
        return "gmres" if method == "gmres" or not symmetric else "cg", symmetric, rho, \
            preconditioner_dtype(self.L, extremes)

    def _symmetric_here(self, coefs: Mapping[Any, Any], ringed: Mapping[Any, Any], width: int,
                        scale: float, rtol: float = 1e-12) -> bool:
        """c_o(x) == c_-o(x + o) at this rank's points x whose x + o is on the grid (coarsen.is_symmetric
        on a block: c_-o read from its ring)."""
        count, start = self.grid.count, self.grid.start
        for o, c in coefs.items():
            mirror = ringed.get(tuple(-k for k in o))
            if np.ndim(c) == 0 and mirror is not None and np.ndim(mirror) == 0:  # constant coefficients
                if abs(float(c) - float(mirror)) > rtol * scale:
                    return False
                continue
            here = np.ones(count, bool)  # x + o on the grid
            if not self.periodic:
                for d, (k, s, m) in enumerate(zip(o, start, self.n)):
                    x = np.arange(s, s + count[d]) + k
                    here &= ((x >= 0) & (x < m)).reshape([-1 if e == d else 1 for e in range(len(o))])
            mine = np.broadcast_to(c, count)[here]
            if mirror is None:
                there = np.zeros_like(mine)
            elif np.ndim(mirror) == 0:
                there = np.full_like(mine, float(mirror))
            else:
                there = mirror[tuple(slice(width + k, width + k + m) for k, m in zip(o, count))][here]
            if mine.size and np.max(np.abs(mine - there)) > rtol * scale:
                return False
        return True

    def _coarse_level(self, k: int, ringed: dict[Any, Any], symmetric: bool, dtype: str,
                      threads: int | None) -> dict[Any, Any] | None:
        """Level k + 1 from level k's coefficients on this rank's block with one point around it: its
        Galerkin coefficients on the coarse points centred in the block, brought to the rank that holds
        them (its parent, on fewer ranks), exchanged around each block, and its operator and exchanges
        (`blocks[k + 1]`). Returns its coefficients with one point around this rank's block (None where
        it holds none). Collective."""
        from mpi4py import MPI

        planned = self.plan[k]
        above = self.blocks[k]
        fewer = self._through[k] is not None
        part = self._restricted(above, ringed, whole=fewer) if above is not None else {}
        keys = sorted(set().union(*self.comm.allgather(set(part))))
        holds = planned.holds(self.grid.coords)
        mine: dict[Any, np.ndarray] = {}
        if not fewer:
            mine = {o: part.get(o, np.zeros(above.transfer.restricted[1])) for o in keys} if above else {}
        else:
            parent, children = self._through[k]
            sent = self.comm.isend((above.centres, part), dest=parent, tag=7) if above else None
            if holds:
                cstart, ccount = planned.block(planned.coords(self.grid.coords))
                mine = {o: np.zeros(ccount) for o in keys}
                for child in children:
                    first, piece = self.comm.recv(source=child, tag=7)
                    for o, c in piece.items():
                        _place(mine[o], c, first, cstart)
            if sent is not None:
                sent.wait()
        level_comm = self._fewer(planned, holds) if fewer else \
            (above.comm if above is not None else None)
        ring = tuple(max(abs(o[d]) for o in keys) for d in range(len(self.n)))
        diag = mine.get((0,) * len(self.n)) if holds else None
        if self.comm.allreduce(bool(diag is not None and np.any(diag == 0)), op=MPI.LOR):
            raise StencilArgumentError(f"{self.what}: multigrid's smoothers need a nonzero diagonal; a coarse "
                                       "level has a zero on it: use method='direct'")
        rho = self.comm.allreduce(gershgorin_ratio(mine, planned.n) if holds else 0.0, op=MPI.MAX)
        if not holds:
            self.blocks.append(None)
            return None
        grid = Grid(level_comm, planned.n, self.periodic, planned.dims, planned.bounds)
        padded = self._ringed(grid, mine, ring)
        inner = tuple(slice(rd, rd + c) for rd, c in zip(ring, grid.count))
        edged = _neutral_beyond_edges(padded, ring, grid, self.periodic)
        inside = {o: c[inner] if np.ndim(c) else c for o, c in edged.items()}
        op = from_coefficients(inside, grid.count, self.periodic, symmetric, "openmp", threads, dtype, ringed=edged)
        assert diag is not None
        self.blocks.append(self._block_level(level_comm, grid, op, ring, rho, 1.0 / diag, dtype))
        return _trimmed(padded, ring)

    def _restricted(self, block: BlockLevel, ringed: Mapping[Any, Any], whole: bool = False) -> dict[Any, np.ndarray]:
        """R A P on this rank's block of a level (its coefficients with one point around it): over the
        coarse points centred in the block, each an array broadcastable to them (`whole`: of their shape,
        as sent to another rank)."""
        grid = block.grid
        coarse = galerkin_block(ringed, tuple(grid.interior), grid.start, grid.count, self.periodic)
        if not whole:
            return {o: np.asarray(c, float) for o, c in coarse.items()}
        centres = block.transfer.restricted[1]
        return {o: np.array(np.broadcast_to(c, centres), float) for o, c in coarse.items()}

    def _below(self, ringed: dict[Any, Any] | None, symmetric: bool, dtype: str) -> Multigrid | None:
        """The levels below the last in blocks, on rank 0: their first level's Galerkin coefficients from
        every block (gathered over the last level's ranks), per class where they are so; None elsewhere.
        Collective."""
        last = self.blocks[-1]
        part = self._restricted(last, ringed, whole=True) if last is not None and ringed is not None else {}
        keys = sorted(set().union(*self.comm.allgather(set(part))))
        pieces = last.comm.gather((last.centres, part), root=0) if last is not None else None

        def build() -> Multigrid | None:
            if not self.root:
                return None
            assert last is not None and pieces is not None
            shape = tuple(Axis1D.of(m, self.periodic).m for m in last.grid.interior)
            whole = {o: np.zeros(shape) for o in keys}
            for first, piece in pieces:
                for o, c in piece.items():
                    _place(whole[o], c, first)
            coefs: Coefficients = whole if self.periodic else by_class(whole, shape)
            op = from_coefficients(coefs, shape, self.periodic, symmetric, "openmp", None, dtype)
            return Multigrid(op, coefs, shape, self.periodic, self.what, symmetric, self.sweeps,
                             smoother=self.smoother, pinned=self.nullspace)

        return _collectively(self.comm, build)

    # -------------------------------------------------------------- halos
    def _exchange(self, grid: Grid, halo: HaloExchanger, width: tuple[int, ...], padded: np.ndarray) -> None:
        halo.start(padded)
        halo.finish()
        self.halo_faces += _faces(grid, width, padded.itemsize)

    def _residual_with_halo(self, block: BlockLevel) -> np.ndarray:
        """b - A u on the level's block with one exchanged layer around it."""
        op = block.op
        op.residual()
        padded = op.padded(op.step + 1)
        inner = tuple(slice(rd - 1, p - rd + 1) for rd, p in zip(block.ring, padded.shape))
        layer = np.ascontiguousarray(padded[inner])
        self._exchange(block.grid, block.layer, (1,) * len(block.ring), layer)
        return layer

    def _correction(self, block: BlockLevel) -> np.ndarray:
        """The level's u on its block with its halo exchanged: the padded buffer, from which the blocks of
        the level above cut the coarse slab they interpolate from (`_slab_of`)."""
        op = block.op
        padded = op.padded(op.step)
        self._exchange(block.grid, block.halo, block.ring, padded)
        return padded

    @staticmethod
    def _slab_of(block: BlockLevel, padded: np.ndarray, first: tuple[int, ...], shape: tuple[int, ...]
                 ) -> np.ndarray:
        """The coarse points [first - 1, first + shape + 1) of the level's padded buffer: the slab that
        a block above with those coarse centres interpolates from."""
        return padded[tuple(slice(f - o + rd - 1, f - o + rd + m + 1)
                            for f, o, rd, m in zip(first, block.grid.start, block.ring, shape))]

    @property
    def halo_bytes(self) -> int:
        """Bytes this rank's halo exchanges sent so far."""
        return self._u_halo.bytes_sent + sum(b.halo.bytes_sent + b.layer.bytes_sent for b in self.blocks if b)

    # -------------------------------------------------------------- the cycle and the solve
    def vcycle(self, b: np.ndarray) -> np.ndarray:
        """One V-cycle from zero for this rank's block of b: its block of x ~ A^-1 b, as a view into
        the fine level's kernel buffers (valid until their next kernel call)."""
        self.cycled.set_rhs(b)
        return self._cycle(0)

    def _cycle(self, k: int) -> np.ndarray:
        """The V-cycle from level k down, for the right-hand side in level k's buffers (this rank holds
        a block of level k). A level in blocks smooths, restricts its residual (with one exchanged layer)
        and interpolates the next level's correction (with one exchanged layer of it) back: on the same
        ranks, straight between the levels' buffers; onto fewer ranks, through its parent
        (`_through_parent`); below the last level in blocks, through rank 0 (`_agglomerated`)."""
        block = self.blocks[k]
        assert block is not None
        op = block.op
        op.u[...] = 0.0
        smooth(block.level, self.smoother, self.sweeps, one_at_a_time=True)
        residual = self._residual_with_halo(block)
        below = self.blocks[k + 1] if k + 1 < len(self.blocks) else None
        if below is not None and self._through[k] is None:
            block.transfer.restrict(residual, below.op.rhs, op.threads)
            self._cycle(k + 1)
            slab = self._slab_of(below, self._correction(below), block.centres,
                                 block.transfer.restricted[1])
        else:
            part = block.transfer.restrict(residual, np.empty(block.transfer.restricted[1], op.dtype), op.threads)
            if k + 1 < len(self.blocks):
                slab = self._through_parent(k, block, part)
            else:
                slab = self._agglomerated(block, part)
        block.transfer.prolong_add(slab, op.u, op.threads)
        smooth(block.level, self.smoother, self.sweeps, one_at_a_time=True)
        return op.u  # a view into the kernel buffers, valid until their next kernel call

    def _through_parent(self, k: int, block: BlockLevel, part: np.ndarray) -> np.ndarray:
        """Level k + 1 on fewer ranks: this rank's restriction goes to its parent, which gathers its
        children's parts into its block of level k + 1, runs the cycle from there, and sends each child
        the slab of the correction it interpolates from."""
        relatives = self._through[k]
        assert relatives is not None
        parent, children = relatives
        first = block.centres
        up = self.comm.isend((first, part), dest=parent, tag=2 * k)
        sent = []
        below = self.blocks[k + 1]
        if below is not None:  # this rank is a parent
            places = {}
            for child in children:
                where, piece = self.comm.recv(source=child, tag=2 * k)
                _place(below.op.rhs, piece, where, below.grid.start)
                places[child] = (where, piece.shape)
                self.transfer_bytes += piece.nbytes if child != self.comm.rank else 0
            self._cycle(k + 1)
            padded = self._correction(below)
            for child, (where, shape) in places.items():
                slab = np.ascontiguousarray(self._slab_of(below, padded, where, shape))
                sent.append(self.comm.isend(slab, dest=child, tag=2 * k + 1))
                self.transfer_bytes += slab.nbytes if child != self.comm.rank else 0
        slab = self.comm.recv(source=parent, tag=2 * k + 1)
        up.wait()
        for request in sent:
            request.wait()
        return slab

    def _agglomerated(self, block: BlockLevel, part: np.ndarray) -> np.ndarray:
        """The levels below `block` on rank 0: the level's restriction gathered over the ranks that hold
        it, one V-cycle, and each rank's slab of the correction scattered back."""
        comm = block.comm
        pieces = comm.gather((block.centres, part), root=0)
        slabs = None
        if self.root:
            assert self.coarse is not None and pieces is not None
            b1 = np.zeros(self.coarse.shapes[0])
            for rank, (first, piece) in enumerate(pieces):
                _place(b1, piece, first)
                self.transfer_bytes += piece.nbytes if rank else 0
            e1 = self.coarse.vcycle(b1)
            slabs = [self._slab(block.grid, e1, rank).astype(block.op.dtype) for rank in range(comm.size)]
            self.transfer_bytes += sum(s.nbytes for s in slabs[1:])
        return comm.scatter(slabs, root=0)

    def _slab(self, grid: Grid, e1: np.ndarray, rank: int) -> np.ndarray:
        """The coarse values rank `rank` interpolates from (its centres and one more on each side): zero
        beyond a dirichlet edge, wrapped if periodic."""
        start, count = grid.block_of(rank)
        base = 0 if self.periodic else 1
        idx = [np.arange(first_centre(s, base) - 1, first_centre(s + c, base) + 1) for s, c in zip(start, count)]
        if self.periodic:
            return e1[np.ix_(*[i % m for i, m in zip(idx, e1.shape)])]
        padded = np.pad(e1, 1)
        return padded[np.ix_(*[np.clip(i + 1, 0, m + 1) for i, m in zip(idx, e1.shape)])]

    def _total(self, part: float) -> float:
        from mpi4py import MPI

        return float(self.comm.allreduce(part, op=MPI.SUM))

    def _total_max(self, part: float) -> float:
        from mpi4py import MPI

        return float(self.comm.allreduce(part, op=MPI.MAX))

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
        if self.nullspace:
            x -= self._total(float(np.sum(x))) / int(np.prod(self.n))  # the solution of zero mean
        return x.reshape(shape), history

    def gather(self, block: np.ndarray, ring: np.ndarray | None) -> np.ndarray | None:
        blocks = self.comm.gather((self.grid.start, block), root=0)
        if not self.root:
            return None
        assert blocks is not None
        out = np.zeros(self.shape) if ring is None else np.array(ring, float)
        offset = (0,) * len(self.shape) if self.periodic else self.L.radius
        for start, piece in blocks:
            out[tuple(slice(s + o, s + o + c) for s, o, c in zip(start, offset, piece.shape))] = piece
        return out

    def close(self) -> None:
        self._u_halo.close()
        for block_level in self.blocks:
            if block_level is not None:
                block_level.close()
        for sub in self._subs:
            sub.Free()


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


def solve_distributed(L: Operator, rhs: Any, comm: Any, shape: tuple[int, ...] | None, method: str, tol: float,
                      maxiter: int | None, smoother: str, full_output: bool, dims: Any, progress: bool,
                      inputs: Mapping[str, Any], blocks: bool = False, nullspace: bool = False) -> Any:
    """msc.solve(..., comm=comm): see the module docstring."""
    what = f"msc.solve with operator '{L.name}'"
    if method in ("auto", "direct"):
        method = "multigrid"  # over ranks the direct solve is not offered: auto means multigrid
    t0 = time.perf_counter()
    mg = DistributedMultigrid(L, comm, shape, rhs, inputs, method, tol, maxiter, what, dims, smoother=smoother,
                              blocks=blocks, nullspace=nullspace)
    try:
        t1 = time.perf_counter()
        block, history = mg.solve(progress)
        t2 = time.perf_counter()
        ring = inputs.get(L.ir.unknowns[0]) if comm.rank == 0 else None
        u = block if blocks else mg.gather(block, ring)
        cycles = max(len(history) - 1, 1)
        info = SolveInfo(mg.krylov, f"multigrid-{mg.krylov}", len(history) - 1, history,
                         comm.bcast(mg.levels, root=0), setup_s=t1 - t0, solve_s=t2 - t1,
                         ranks_per_level=comm.bcast(mg.ranks_per_level, root=0),
                         ranks=comm.size, halo_bytes_per_iteration=comm.allreduce(mg.halo_bytes) / cycles,
                         halo_face_bytes_per_iteration=comm.allreduce(mg.halo_faces) / cycles,
                         gather_bytes_per_iteration=comm.allreduce(mg.transfer_bytes) / cycles,
                         levels_in_blocks=len(mg.blocks), rhs_mean_removed=mg.rhs_mean)
    finally:
        mg.close()
    if comm.rank != 0 and not blocks:
        return (None, info) if full_output else None
    return (u, info) if full_output else u


