"""Distributed runs of a compiled stencil over MPI ranks (mpi4py).

Two ways in:

- `kernel.run(steps=..., comm=comm, dims=None, **inputs)`: global arrays on
  rank 0 (None on the others); rank 0 scatters the blocks and gathers the
  result, which it returns (the other ranks get None).
- `DistributedKernel(kernel, comm, shape)`: the scalable path. Each rank
  passes only its own block, as an array or as a function of global
  coordinates, and gets its own block back; no rank holds a global array.

Each rank runs the local kernels of `halo_plan` (the kernel's start step
`t0` keeps the ring-buffer slots in step with the serial run) and exchanges
halos with the C library of `halo`: between the phases of every step, or,
under a temporally tiled schedule of depth D, once per D steps (the local
kernel runs D steps at a time, computing redundantly into deeper halos).
Step by step, the exchange after a phase overlaps the next phase's inner
box (the points whose reads stay in owned data and fixed boundary rings,
computed by the kernels' `msc_run_box`); the rim follows once it is done.
Every check that can fail is agreed on by all ranks, which then raise the
same DistributedError: no rank is left waiting. Without threads= or
OMP_NUM_THREADS, each rank runs its share of its node's cores
(`default_threads`), said once on rank 0.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

import numpy as np

from msc.codegen import get_target
from msc.codegen.halo_plan import plan
from msc.errors import CheckpointError, MscError, StencilArgumentError
from msc.ir.arguments import bind_arguments, check_memory
from msc.poly import PolyIR
from msc.poly.schedule import Schedule, as_schedule
from msc.runtime import kernel as _kernel
from msc.runtime.buffers import field_buffer, on_ring, pack, put_level
from msc.runtime.build import writer_tag
from msc.runtime.checkpoint import (
    Block,
    check_save_target,
    checkpoint_blocks,
    checkpoint_path,
    fill,
    header,
    int_tuple,
    scalars_of,
    write_block,
    write_manifest,
)
from msc.runtime.finite import not_finite
from msc.runtime.halo import DistributedError, Grid, HaloExchanger
from msc.runtime.kernel import (
    CompiledKernel,
    RunStats,
    check_steps,
    field_value,
    parameter_value,
    warn_not_finite,
)

__all__ = ["DistributedError", "DistributedKernel", "DistributedSimulation", "DistributedStats", "GlobalSimulation",
           "run_distributed", "start_distributed"]

T = TypeVar("T")
Box = tuple[tuple[int, ...], tuple[int, ...]]  # lo, hi: the points lo[d] <= i_d < hi[d]


def _timed(action: Callable[[], object]) -> float:
    """Seconds `action` takes."""
    tick = time.perf_counter()
    action()
    return time.perf_counter() - tick


def split_block(shape: Sequence[int], radius: Sequence[int], near: Box) -> tuple[Box, list[Box]] | None:
    """The inner box and the rim boxes (at most two per dimension, disjoint) of the
    domain radius[d] <= i_d < shape[d] - radius[d] of a padded block whose halo is
    near[0][d] wide below and near[1][d] above (0 on a side that receives nothing).
    None when no inner point is left."""
    lo = tuple(radius)
    hi = tuple(n - r for n, r in zip(shape, radius))
    inner_lo = tuple(a + w for a, w in zip(lo, near[0]))
    inner_hi = tuple(b - w for b, w in zip(hi, near[1]))
    if any(a >= b for a, b in zip(inner_lo, inner_hi)):
        return None
    rims: list[Box] = []
    for d in range(len(shape)):
        # dimensions before d: inner only (their rims come first); after d: the whole domain
        below, above = inner_lo[:d], inner_hi[:d]
        for a, b in ((lo[d], inner_lo[d]), (inner_hi[d], hi[d])):
            if a < b:
                rims.append((below + (a,) + lo[d + 1:], above + (b,) + hi[d + 1:]))
    return (inner_lo, inner_hi), rims


_told_threads = False


def default_threads(comm: Any) -> tuple[int, str]:
    """OpenMP threads per rank when none were asked for, and why (collective):
    0, OpenMP's own default, when OMP_NUM_THREADS is set; else this node's
    cores divided among its ranks (a shared-memory split of `comm` counts
    them), or the cores the launcher bound this rank to where that is fewer."""
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local = node.size
    node.Free()
    if os.environ.get("OMP_NUM_THREADS"):
        return 0, ""
    cores = os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0))
    threads = max(1, usable if usable < cores else cores // local)
    return threads, (f"msc: {local} rank(s) on this node, {cores} core(s): {threads} OpenMP thread(s) per rank "
                     "(threads= or OMP_NUM_THREADS to change)")


def _collectively(comm: Any, action: Callable[[], T]) -> T:
    """Run `action` on every rank; if it fails on any, raise that failure on all."""
    result: Any = None
    error: str | None = None
    cause: BaseException | None = None
    try:
        result = action()
    except Exception as exc:  # a bug on one rank must not leave the others waiting either
        cause = exc
        error = str(exc) if isinstance(exc, MscError) else f"{type(exc).__name__}: {exc}"
    for rank, message in enumerate(comm.allgather(error)):
        if message is not None:
            where = f"rank {rank}: " if comm.size > 1 else ""
            raise DistributedError(where + message) from cause
    return result


@dataclass
class DistributedStats:
    """The last run on this rank: seconds in the kernels and in halo exchange,
    bytes sent and rounds of exchange (the initial levels' exchange is not counted)."""

    steps: int = 0
    compute_seconds: float = 0.0
    exchange_seconds: float = 0.0
    bytes_sent: int = 0
    exchanges: int = 0


class DistributedKernel:
    """A kernel spread over the ranks of `comm` for global arrays of `shape`.

    `shape` is the global array shape (with the boundary ring for dirichlet
    stencils); `dims` the process grid (None or zeros: MPI_Dims_create
    chooses); `schedule` that of the local kernels (default: the one `kernel`
    was compiled with; a time_tile of depth D exchanges deeper halos once per
    D steps). `overlap` (step by step only): compute the inner box of a phase
    while the previous phase's exchange is in flight. Collective: every rank
    constructs it with the same values.
    """

    def __init__(self, kernel: CompiledKernel, comm: Any, shape: Sequence[int],
                 dims: Sequence[int] | None = None, threads: int | None = None,
                 schedule: Schedule | None = None, overlap: bool = True) -> None:
        if not isinstance(kernel, CompiledKernel):
            raise DistributedError(
                f"a kernel of type {type(kernel).__name__} runs on one node only: a distributed run here takes a "
                "kernel of a C target (openmp, serial; cuda or hip emulated); for Sunway, emit target "
                "'athread+mpi' (a standalone MPI program)")
        self.kernel, self.comm = kernel, comm
        schedule = schedule if schedule is not None else kernel.schedule
        global _told_threads
        share, why = default_threads(comm)
        asked = threads if threads is not None else kernel.threads
        self.threads = share if asked is None else asked
        if asked is None and why and comm.rank == 0 and not _told_threads:  # said once per process
            _told_threads = True
            print(why, file=sys.stderr, flush=True)
        stencil = kernel.ir
        shape = tuple(int(n) for n in shape)
        dims = None if dims is None else tuple(int(d) for d in dims)
        root = comm.bcast((shape, dims, str(schedule)), root=0)
        self.schedule = _collectively(comm, lambda: as_schedule(schedule))
        self.plan = plan(stencil, self.schedule)

        def check() -> tuple[int, ...]:
            if (shape, dims, str(schedule)) != root:
                raise DistributedError(f"shape {shape}, dims {dims} and schedule {schedule} differ from rank 0's "
                                       f"{root[0]}, {root[1]} and {root[2]}")
            if len(shape) != stencil.ndim:
                raise DistributedError(f"stencil '{stencil.name}' is {stencil.ndim}D but the shape is {shape}")
            interior = self.plan.interior_shape(shape)
            if min(interior) < 1:
                raise DistributedError(f"shape {shape} leaves no interior inside the boundary ring {stencil.radius}")
            return interior

        interior = _collectively(comm, check)
        self.shape = shape
        self.grid = _collectively(comm, lambda: Grid(comm, interior, stencil.boundary == "periodic", dims))
        self.halo = self.plan.halo
        self.padding = self.grid.padding(self.halo, self.plan.edge)  # (low, high) sides of this rank's block
        self.local_shape = tuple(a + n + b for a, n, b in zip(self.padding[0], self.grid.count, self.padding[1]))
        _collectively(comm, lambda: check_memory(self.plan.local, self.local_shape, "blocks"))
        self._exchangers: dict[str, HaloExchanger] = _collectively(comm, self._make_exchangers)
        self.overlap = overlap and self.plan.depth == 1
        self._phases = _collectively(comm, self._compile_phases)
        # the halo a side receives: the halo toward a neighbour, nothing on a physical edge
        near = self.grid.padding(self.halo, (0,) * stencil.ndim)
        self._split = split_block(self.local_shape, stencil.radius, near) if self.overlap else None
        self.last_run = DistributedStats()

    def _make_exchangers(self) -> dict[str, HaloExchanger]:
        itemsize = np.dtype(self.kernel.ir.dtype).itemsize
        return {name: HaloExchanger(self.grid, self.halo, itemsize, dirs, self.plan.edge)
                for name, dirs in self.plan.directions.items()}

    def _compile_phases(self) -> list[Any]:
        target = get_target(self.kernel.target)  # the node target the kernel was compiled for
        return [target.compile(PolyIR(p.stencil), threads=self.threads, schedule=self.schedule, box=self.overlap,
                               **self.kernel.compile_options) for p in self.plan.phases]

    # -- where this rank's block lies in the global arrays ------------------

    @property
    def dims(self) -> tuple[int, ...]:
        return self.grid.dims

    @property
    def coords(self) -> tuple[int, ...]:
        return self.grid.coords

    @property
    def interior(self) -> tuple[slice, ...]:
        """Where the block this rank owns (what `run` returns) lies in the global arrays."""
        return self._interior_of(self.grid.start, self.grid.count)

    def _interior_of(self, start: Sequence[int], count: Sequence[int]) -> tuple[slice, ...]:
        ring = (0,) * len(start) if self.kernel.ir.boundary == "periodic" else self.kernel.ir.radius
        return tuple(slice(s + r, s + r + n) for s, n, r in zip(start, count, ring))

    def _indices_of(self, rank: int) -> list[np.ndarray]:
        """Per dimension, the global array index of each point of the padded block
        of `rank` (periodic: wrapped; dirichlet: the padding at a physical edge is the ring)."""
        start, count = self.grid.block_of(rank)
        lo, hi = self.grid.padding(self.halo, self.plan.edge, rank)
        out = []
        for s, n, a, b, r, size in zip(start, count, lo, hi, self.kernel.ir.radius, self.shape):
            if self.kernel.ir.boundary == "periodic":
                out.append((np.arange(s - a, s + n + b)) % size)
            else:
                out.append(np.arange(s - a + r, s + n + b + r))
        return out

    def coordinates(self) -> tuple[np.ndarray, ...]:
        """Global array indices of this rank's padded block, as an open grid (np.ix_)."""
        return np.ix_(*self._indices_of(self.comm.rank))

    def owned(self) -> tuple[tuple[slice, ...], tuple[int, ...]]:
        """Where the part of the global arrays this rank owns lies in its padded block,
        and that part's global start: its block of the interior and, on a physical
        dirichlet edge, the ring beside it (the parts of all ranks tile the arrays)."""
        start, count = self.grid.block_of(self.comm.rank)
        dirichlet = self.kernel.ir.boundary == "dirichlet"
        local, origin = [], []
        for s, n, a, r, c, p in zip(start, count, self.padding[0], self.kernel.ir.radius, self.coords, self.dims):
            lo = r if dirichlet and c == 0 else 0
            hi = r if dirichlet and c == p - 1 else 0
            local.append(slice(a - lo, a + n + hi))
            origin.append(s + (r if dirichlet else 0) - lo)
        return tuple(local), tuple(origin)

    def resume(self, path: str | Path, threads: int | None = None) -> DistributedSimulation:
        """This rank's part of the run saved at `path` (collective): each rank reads the parts
        of the saved blocks its padded block covers, halos included; none reads the whole."""
        stencil, path = self.kernel.ir, checkpoint_path(path)
        attrs, blocks = _collectively(self.comm, lambda: checkpoint_blocks(path, stencil, self.shape))
        step = int(attrs["step"])
        buffers = {f.name: field_buffer(stencil, f, self.local_shape) for f in stencil.fields}
        indices = self._indices_of(self.comm.rank)
        _collectively(self.comm, lambda: fill(path, stencil, buffers, indices, step, blocks))
        return DistributedSimulation(self, buffers, scalars_of(attrs, stencil),
                                     threads if threads is not None else self.threads, step)

    # -- running ------------------------------------------------------------

    def _local_array(self, name: str, value: Any) -> Any:
        if callable(value):
            filled = np.asarray(value(*self.coordinates()), dtype=self.kernel.ir.dtype)
            return np.array(np.broadcast_to(filled, self.local_shape))
        if isinstance(value, np.ndarray) and value.shape != self.local_shape:
            raise DistributedError(
                f"'{name}' has shape {value.shape}, but this rank's block padded by {self.padding[0]} below "
                f"and {self.padding[1]} above has shape {self.local_shape}"
            )
        return value

    def run(self, steps: int, threads: int | None = None, **inputs: Any) -> dict[str, np.ndarray]:
        """Advance `steps` steps; returns this rank's block (`self.interior`) of each written field.

        A field takes this rank's padded block (`self.local_shape`; the halo
        matters only on a physical dirichlet edge, where it is the fixed
        boundary ring), or a function of the global indices
        (`f(*self.coordinates())`), or a list of those, one per time level.
        The one-shot call: `start` keeps the buffers between calls instead.
        """
        sim = self.start(threads, **inputs)
        sim.advance(steps)
        return {name: block.copy() for name, block in sim.fields.items()}

    def start(self, threads: int | None = None, **inputs: Any) -> DistributedSimulation:
        """This rank's part of a run that keeps its buffers between calls
        (collective; inputs as for `run`)."""
        fields = {f.name for f in self.kernel.ir.fields}

        def bind() -> Any:
            local = {}
            for name, value in inputs.items():
                if name in fields and isinstance(value, (list, tuple)):
                    local[name] = [self._local_array(name, v) for v in value]
                elif name in fields:
                    local[name] = self._local_array(name, value)
                else:
                    local[name] = value
            return bind_arguments(self.plan.local, 0, local)

        args = _collectively(self.comm, bind)
        given = self.comm.allgather(args.scalars)
        for name in args.scalars:
            values = [g[name] for g in given]
            if len(set(values)) > 1:
                raise DistributedError(f"stencil '{self.kernel.ir.name}': the ranks were given different values of "
                                       f"the parameter '{name}' ({', '.join(map(repr, values))}, by rank); every "
                                       "rank must run the same stencil")
        buffers = pack(self.plan.local, args)
        stencil = self.kernel.ir
        self._exchange({name: list(buffers[name]) if stencil.field(name).written else [buffers[name]]
                        for name in self.plan.exchanged})
        return DistributedSimulation(self, buffers, args.scalars, threads if threads is not None else self.threads)

    def _advance(self, buffers: dict[str, np.ndarray], scalars: dict[str, float], first: int, steps: int,
                 nthreads: int) -> None:
        """Steps first .. first+steps-1 on this rank's buffers, halos exchanged as the plan says."""
        stencil = self.kernel.ir
        stats = DistributedStats(steps)
        bytes_before = sum(e.bytes_sent for e in self._exchangers.values())
        started = time.perf_counter()
        depth = self.plan.depth
        pending: list[HaloExchanger] = []  # started after the last phase, not yet finished
        calls = [phase.arguments(buffers, scalars, self.local_shape) for phase in self._phases]  # once, not per step
        for step in range(first, first + steps, depth):
            count = min(depth, first + steps - step)
            if step and depth > 1:  # every live level, then `count` steps without exchange
                tick = time.perf_counter()
                self._exchange(self._live_levels(buffers, step))
                stats.exchanges += 1
                stats.exchange_seconds += time.perf_counter() - tick
            for k, (phase, call) in enumerate(zip(self.plan.phases, calls)):
                if pending and self._split:  # the inner box while the messages travel, the rim after
                    inner, rims = self._split
                    stats.compute_seconds += _timed(lambda: self._run_box(k, call, inner, step, nthreads))
                    stats.exchange_seconds += _timed(lambda: self._finish(pending))
                    stats.compute_seconds += _timed(lambda: [self._run_box(k, call, b, step, nthreads) for b in rims])
                else:
                    stats.exchange_seconds += _timed(lambda: self._finish(pending))
                    stats.compute_seconds += _timed(lambda: self._phases[k].advance(call, step, count, nthreads))
                pending = [self._exchangers[name] for name in phase.exchange]
                levels = [buffers[name][(step + 1) % stencil.field(name).slots] for name in phase.exchange]
                stats.exchange_seconds += _timed(lambda: [e.start(a) for e, a in zip(pending, levels)])
                stats.exchanges += bool(pending)
        stats.exchange_seconds += _timed(lambda: self._finish(pending))
        seconds = time.perf_counter() - started
        stats.bytes_sent = sum(e.bytes_sent for e in self._exchangers.values()) - bytes_before
        self.last_run = stats
        points = int(np.prod(self.plan.interior_shape(self.shape))) * len(self.kernel.ir.statements)
        self.kernel.last_run = RunStats(seconds, steps, points, threads=nthreads)

    def _run_box(self, phase: int, call: list[Any], box: Box, step: int, nthreads: int) -> None:
        """One step of phase `phase` on the points lo[d] <= i_d < hi[d] only."""
        self._phases[phase].advance_box(call, *box, step, 1, nthreads)

    @staticmethod
    def _finish(exchangers: Sequence[HaloExchanger]) -> None:
        for exchanger in exchangers:
            exchanger.finish()

    def _live_levels(self, buffers: Mapping[str, np.ndarray], step: int) -> dict[str, list[np.ndarray]]:
        """The levels of the exchanged written fields that the steps from `step` on read."""
        fields = [self.kernel.ir.field(name) for name in self.plan.exchanged]
        return {f.name: [buffers[f.name][(step - k) % f.slots] for k in range(f.window)] for f in fields if f.written}

    def _exchange(self, levels: Mapping[str, Sequence[np.ndarray]]) -> None:
        """Fill the halos of the given levels of each field: in rounds, one level
        of every field per round, all messages of a round in flight together."""
        for k in range(max(map(len, levels.values()), default=0)):
            names = [name for name, arrays in levels.items() if k < len(arrays)]
            for name in names:
                self._exchangers[name].start(levels[name][k])
            for name in names:
                self._exchangers[name].finish()

    # -- rank 0's global arrays ---------------------------------------------

    def scatter(self, levels: Mapping[str, list[np.ndarray]] | None) -> dict[str, list[np.ndarray]]:
        """Each rank's padded blocks of the levels rank 0 holds (`levels` is None elsewhere)."""
        comm = self.comm
        counts = comm.bcast({k: len(v) for k, v in levels.items()} if comm.rank == 0 else None, root=0)
        dtype = np.dtype(self.kernel.ir.dtype)
        out: dict[str, list[np.ndarray]] = {}
        for name, n in counts.items():
            out[name] = []
            for k in range(n):
                if comm.rank == 0:
                    assert levels is not None
                    for rank in range(comm.size):
                        block = np.ascontiguousarray(levels[name][k][np.ix_(*self._indices_of(rank))])
                        if rank == 0:
                            out[name].append(block)
                        else:
                            comm.Send(block, dest=rank, tag=k)
                else:
                    block = np.empty(self.local_shape, dtype)
                    comm.Recv(block, source=0, tag=k)
                    out[name].append(block)
        return out

    def gather(self, blocks: Mapping[str, np.ndarray], rings: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
        """The global arrays on rank 0 (each starting as a copy of `rings[name]`, which
        supplies the dirichlet ring), None on the other ranks."""
        comm = self.comm
        if comm.rank != 0:
            for name in sorted(blocks):
                comm.Send(np.ascontiguousarray(blocks[name]), dest=0, tag=1)
            return None
        assert rings is not None
        out = {name: rings[name].copy() for name in blocks}
        for name in sorted(blocks):
            for rank in range(comm.size):
                start, count = self.grid.block_of(rank)
                if rank == 0:
                    block = blocks[name]
                else:
                    block = np.empty(count, out[name].dtype)
                    comm.Recv(block, source=rank, tag=1)
                out[name][self._interior_of(start, count)] = block
        return out

    def close(self) -> None:
        for exchanger in self._exchangers.values():
            exchanger.close()
        self.grid.close()


class DistributedSimulation:
    """This rank's part of a distributed run in progress (`DistributedKernel.start`):
    its buffers are kept between `advance` calls, which are collective."""

    def __init__(self, owner: DistributedKernel, buffers: dict[str, np.ndarray], scalars: dict[str, float],
                 nthreads: int, step: int = 0) -> None:
        self.owner = owner
        self.step = step
        self._buffers, self._scalars, self._nthreads = buffers, scalars, nthreads
        self._blown_up = False  # warned once that a field is no longer finite

    def advance(self, steps: int, progress: bool = False, every: int | None = None, out: str | Path | None = None,
                _stacklevel: int = 2) -> None:
        """Run `steps` more steps (every rank the same number); rank 0 warns once
        (NonFiniteWarning) when a written field is no longer finite on any rank. A time
        series (`every`, `out`) needs the global arrays: `kernel.start(comm=...)` writes one."""
        owner = self.owner
        _check_no_bar(owner.kernel.ir.name, progress)
        if every is not None or out is not None:
            raise DistributedError(f"stencil '{owner.kernel.ir.name}': advance(every=, out=) writes a time series "
                                   "from the global arrays, which this simulation of blocks does not gather: "
                                   "kernel.start(comm=...)'s simulation writes one")
        _collectively(owner.comm, lambda: check_steps(owner.kernel.ir.name, steps))
        counts = owner.comm.allgather(steps)
        if len(set(counts)) > 1:
            raise DistributedError(f"ranks were given different numbers of steps: {counts}")
        owner._advance(self._buffers, self._scalars, self.step, steps, self._nthreads)
        first, self.step = self.step, self.step + steps
        if not self._blown_up and steps:
            bad = sorted(set().union(*owner.comm.allgather(not_finite(self.fields, self._nthreads))))
            self._blown_up = bool(bad)
            if owner.comm.rank == 0:
                warn_not_finite(owner.kernel.ir.name, bad, first, self.step, _stacklevel)

    def save(self, path: str | Path) -> Path:
        """Write a checkpoint (collective): each rank its own block file, into a folder
        new to this save beside `path`; then rank 0 renames the manifest `path` into
        place and removes the previous save's folder (msc.runtime.checkpoint)."""
        owner, comm, stencil = self.owner, self.owner.comm, self.owner.kernel.ir
        path = checkpoint_path(path)

        def check() -> None:  # before any rank writes its block
            check_save_target(path)
            paths = comm.allgather(str(path))
            if len(set(paths)) > 1:
                raise CheckpointError(f"sim.save is collective, and the ranks gave different paths: "
                                      f"{', '.join(sorted(set(paths)))}; give every rank the same path")

        _collectively(comm, check)
        folder = comm.bcast(f"{path.name}.blocks-{writer_tag()}-{self.step}-{uuid.uuid4().hex[:8]}"
                            if comm.rank == 0 else None, root=0)
        attrs = header(stencil, self.step, self._scalars, owner.shape)
        local, origin = owner.owned()
        block = Block(origin, {f.name: [self._buffers[f.name][(self.step - age) % f.slots][local]
                                        for age in range(f.slots)] for f in stencil.written_fields},
                      {f.name: self._buffers[f.name][local] for f in stencil.fields if not f.written})
        name = f"{folder}/rank-{comm.rank:05d}.nc"
        names = comm.gather(name, root=0)

        def manifest() -> None:
            if comm.rank == 0:
                write_manifest(path, attrs, names)

        try:
            _collectively(comm, lambda: write_block(path.parent / name, stencil, attrs, block))
            _collectively(comm, manifest)
        except DistributedError:  # every rank is past its writes: nothing of this save is kept
            if comm.rank == 0:
                shutil.rmtree(path.parent / folder, ignore_errors=True)
            comm.Barrier()  # the error reaches every rank once the folder is gone
            raise
        return path

    @property
    def fields(self) -> dict[str, np.ndarray]:
        """Read-only views of this rank's block (`owner.interior`) of the newest
        level of each written field."""
        return self.level_blocks(0)

    def level_blocks(self, age: int) -> dict[str, np.ndarray]:
        """Read-only views of this rank's block of level step - `age` of each written field that keeps it."""
        inner = tuple(slice(a, a + n) for a, n in zip(self.owner.padding[0], self.owner.grid.count))
        out = {}
        for f in self.owner.kernel.ir.written_fields:
            if age < f.slots:
                view = self._buffers[f.name][(self.step - age) % f.slots][inner]
                view.flags.writeable = False
                out[f.name] = view
        return out


class GlobalSimulation:
    """`kernel.start(comm=comm, ...)`: a distributed run in progress over global
    arrays that rank 0 held. `advance` and `fields` are collective; `fields`
    gathers the newest levels to rank 0 (None on the other ranks). `close`
    frees the exchanges (a `with` block does it)."""

    def __init__(self, distributed: DistributedKernel, local: DistributedSimulation,
                 rings: dict[str, np.ndarray] | None) -> None:
        self.distributed, self._local, self._rings = distributed, local, rings

    @property
    def step(self) -> int:
        return self._local.step

    def advance(self, steps: int, progress: bool = False, every: int | None = None, out: str | Path | None = None,
                _stacklevel: int = 2) -> None:
        """Run `steps` more steps (collective). `every=N, out=path`: at every step that N divides,
        the fields are gathered to rank 0, which appends them to the netCDF time series `path`
        (msc.runtime.output; checked on rank 0 before any step runs, its errors raised on every rank)."""
        stencil, comm = self.distributed.kernel.ir, self.distributed.comm
        _check_no_bar(stencil.name, progress)
        if every is None and out is None:
            self._local.advance(steps, _stacklevel=_stacklevel + 1)
            return
        from msc.runtime.output import SeriesWriter

        _collectively(comm, lambda: check_steps(stencil.name, steps))
        shape = self.distributed.shape
        writer = _collectively(comm, lambda: SeriesWriter.checked(stencil, every, out, self.step, shape)
                               if comm.rank == 0 else None)
        period: int = comm.bcast(every if comm.rank == 0 else None, root=0)  # rank 0's, checked there
        left = int(steps)
        while left > 0:
            count = min(left, period - self.step % period)
            self._local.advance(count, _stacklevel=_stacklevel + 1)
            left -= count
            if self.step % period == 0:
                fields = self.fields  # collective
                _collectively(comm, lambda: writer.append(fields, self.step) if writer is not None else None)

    @property
    def parameters(self) -> dict[str, float]:
        """The scalar parameters the next steps use."""
        return dict(self._local._scalars)

    def set(self, **values: Any) -> None:
        """Change scalar parameters, and write global arrays into the newest level of a written field or
        into a time-invariant input (the whole array, ring included), as `Simulation.set` (collective:
        rank 0's names and values are the ones used, as at `start`; the other ranks may pass None for
        an array). The arrays are scattered to the ranks' blocks and their halos exchanged."""
        stencil, comm, distributed = self.distributed.kernel.ir, self.distributed.comm, self.distributed
        fields = {f.name: f for f in stencil.fields}

        def checked() -> tuple[dict[str, float], dict[str, np.ndarray]]:  # errors raised on every rank
            scalars, arrays = {}, {}
            for name, value in values.items():
                if name not in fields:
                    scalars[name] = parameter_value(stencil, name, value)
                elif comm.rank == 0:
                    if not isinstance(value, np.ndarray):
                        raise StencilArgumentError(f"stencil '{stencil.name}': sim.set({name}=...) takes a numpy array "
                                                   f"on rank 0 (the global array, ring included), got "
                                                   f"{type(value).__name__}")
                    array = field_value(stencil, name, value, distributed.shape)
                    arrays[name] = np.array(array, dtype=stencil.dtype)  # the stencil's byte order, for MPI
            return scalars, arrays

        scalars, arrays = _collectively(comm, checked)
        self._local._scalars.update(comm.bcast(scalars if comm.rank == 0 else None, root=0))
        buffers, step = self._local._buffers, self.step
        for name in comm.bcast(sorted(arrays) if comm.rank == 0 else None, root=0):
            field = fields[name]
            block = distributed.scatter({name: [arrays[name]]} if comm.rank == 0 else None)[name][0]
            target = buffers[name][step % field.slots] if field.written else buffers[name]
            put_level(distributed.plan.local, target, block)
            ring = on_ring(stencil, distributed._indices_of(comm.rank), distributed.shape)
            if field.written and ring is not None:  # the ring is the boundary of every level, as at start
                for slot in buffers[name]:
                    slot[ring] = block[ring]
            if name in distributed.plan.exchanged:
                distributed._exchange({name: [target]})
            if comm.rank == 0 and field.written and self._rings is not None:
                self._rings[name] = arrays[name]  # the ring `fields` gathers into

    def to_xarray(self, spacing: float | tuple[float, ...] | None = None) -> Any:
        """The newest levels as an xarray Dataset on rank 0, as `Simulation.to_xarray` (collective:
        the fields are gathered there); None on the other ranks."""
        from msc.runtime.output import dataset

        fields = self.fields
        return None if fields is None else dataset(self.distributed.kernel.ir, fields, self.step, spacing)

    @property
    def fields(self) -> dict[str, np.ndarray] | None:
        return self._gathered(0)

    @property
    def levels(self) -> dict[str, list[np.ndarray]] | None:
        """Every level each written field keeps, oldest first, as `Simulation.levels` (collective: gathered
        to rank 0, read-only copies there; None on the other ranks)."""
        slots = max(f.slots for f in self.distributed.kernel.ir.written_fields)
        out: dict[str, list[np.ndarray]] = {}
        for age in reversed(range(slots)):
            for name, array in (self._gathered(age) or {}).items():
                out.setdefault(name, []).append(array)
        return out if self.distributed.comm.rank == 0 else None

    def _gathered(self, age: int) -> dict[str, np.ndarray] | None:
        """Level step - `age` of each written field that keeps it, gathered to rank 0 (read-only)."""
        gathered = self.distributed.gather(self._local.level_blocks(age), self._rings)
        if gathered is not None:
            for array in gathered.values():
                array.flags.writeable = False
        return gathered

    def save(self, path: str | Path) -> Path:
        """A checkpoint of the run (collective; see DistributedSimulation.save)."""
        return self._local.save(path)

    def close(self) -> None:
        self.distributed.close()

    def __enter__(self) -> GlobalSimulation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_no_bar(name: str, progress: Any) -> None:
    if progress:
        raise DistributedError(f"stencil '{name}': runs over MPI show no progress bar (progress=True); rank 0 "
                               "can print its own progress between advance() calls")


def start_distributed(kernel: CompiledKernel, comm: Any, inputs: Mapping[str, Any],
                      dims: Sequence[int] | None = None, threads: int | None = None,
                      schedule: Schedule | None = None, overlap: bool = True) -> GlobalSimulation:
    """`kernel.start(..., comm=comm)`: global arrays on rank 0 scattered once into
    buffers every rank keeps (`schedule`: that of the local kernels; `overlap`:
    see DistributedKernel)."""
    stencil = kernel.ir

    def check_root() -> Any:
        if comm.rank != 0:
            return None
        args = bind_arguments(stencil, 0, inputs)
        # a field given as one array sends one level, as the serial run would replicate it
        sent = {f.name: args.levels[f.name] if isinstance(inputs[f.name], (list, tuple)) else args.levels[f.name][:1]
                for f in stencil.fields}
        return args, sent

    bound = _collectively(comm, check_root)
    root = (bound[0].shape, bound[0].scalars) if comm.rank == 0 else None
    shape, scalars = comm.bcast(root, root=0)
    distributed = DistributedKernel(kernel, comm, shape, dims, threads, schedule, overlap)
    try:
        local = distributed.scatter(bound[1] if comm.rank == 0 else None)
        sim = distributed.start(**scalars, **{name: v if len(v) > 1 else v[0] for name, v in local.items()})
    except BaseException:
        distributed.close()
        raise
    rings = {f.name: bound[0].levels[f.name][-1] for f in stencil.written_fields} if comm.rank == 0 else None
    return GlobalSimulation(distributed, sim, rings)


def run_distributed(kernel: CompiledKernel, comm: Any, steps: int, inputs: Mapping[str, Any],
                    dims: Sequence[int] | None = None, threads: int | None = None,
                    schedule: Schedule | None = None, overlap: bool = True) -> dict[str, np.ndarray] | None:
    """`kernel.run(..., comm=comm)`: global arrays on rank 0 in, the result on rank 0 out
    (`schedule`: that of the local kernels; `overlap`: see DistributedKernel)."""
    _collectively(comm, lambda: check_steps(kernel.ir.name, steps) if comm.rank == 0 else None)
    steps = comm.bcast(steps, root=0)  # rank 0's count, as for the arrays
    with start_distributed(kernel, comm, inputs, dims, threads, schedule, overlap) as sim:
        sim.advance(steps, _stacklevel=4)  # the user's line: run -> run_distributed -> here
        fields = sim.fields
        return None if fields is None else {name: array.copy() for name, array in fields.items()}


def resume_distributed(kernel: CompiledKernel, comm: Any, path: Path, dims: Sequence[int] | None = None,
                       threads: int | None = None, schedule: Schedule | None = None) -> GlobalSimulation:
    """`kernel.resume(path, comm=comm)`: the run saved at `path` (on any number of ranks,
    or in one process) continued over the ranks of `comm`; `fields` gathers to rank 0."""
    stencil = kernel.ir
    attrs, blocks = _collectively(comm, lambda: checkpoint_blocks(path, stencil, None))
    distributed = DistributedKernel(kernel, comm, int_tuple(attrs["msc_shape"]), dims, threads, schedule)
    try:
        local = distributed.resume(path, threads)

        def root_rings() -> dict[str, np.ndarray] | None:  # the global arrays gather fills, as start's are
            if comm.rank != 0:
                return None
            shape = distributed.shape
            whole = {f.name: field_buffer(stencil, f, shape) for f in stencil.fields}
            fill(path, stencil, whole, [np.arange(n) for n in shape], local.step, blocks)
            return {f.name: whole[f.name][local.step % f.slots] for f in stencil.written_fields}

        rings = _collectively(comm, root_rings)
    except BaseException:
        distributed.close()
        raise
    return GlobalSimulation(distributed, local, rings)


_kernel.use_distributed_driver(sys.modules[__name__])  # kernels' run/start/resume with comm= come here
