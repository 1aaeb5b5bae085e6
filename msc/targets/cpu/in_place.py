"""In-place sweeps (Schedule.update_in_place, ADR 0067): a 3D sweep that writes
each point into the slot it reads, keeping the old planes it still needs in a ring.

A time step of `tile(y=B).update_in_place()` splits the planes along x among
the threads, one run of planes [lo, hi) each. Each thread first saves what
its writes would destroy before it is read: the r0 planes on either side of
its run (which its neighbours write) and, of each of its own planes, the r1
rows below each y tile (which it writes itself, one tile earlier). After a
barrier it sweeps its y tiles one after the other, each along x: it copies
old plane x (the tile and its r1 halo rows) into slot x mod (r0 + 1) of its
ring, computes plane x from the ring (the planes behind it) and the field
(the planes ahead, not written yet) and writes it into the field's own slot.
The written lines were read moments before and are still in cache, so none
is read from memory before it is written: a sweep moves one read and one
write per point, as streaming stores do, without sending the written level
around the cache.

Slots stay where every kernel expects them (level t in slot (t0 + t) mod 2):
the last step of a run, and the first of a run of an even number of steps,
write the other slot as the plain sweep does (the kernel lowered from the
same schedule); the steps between them stay in one slot. So the previous
level is in place after every run, for a checkpoint or the next call.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen.lower import LEVEL_POINTS, array_name, extent, global_index, level_name, ring_buffer, ring_slot
from msc.codegen.row_sums import row_sums
from msc.errors import ScheduleError
from msc.poly import PolyIR
from msc.poly.schedule import LoweredSchedule
from msc.targets.cpu.openmp_pass import SIMD

RINGS = "msc_rings"  # each thread's ring and its run's edge planes, allocated by the kernel template
SAVED = "msc_saved"  # the rows below each y tile of every plane, allocated by the kernel template
ROW_DIM = 2  # the dimension row sums (msc/codegen/row_sums.py) know a row's loop by: its points along z
X, Y, Z = ix.Var("msc_x"), ix.Var("msc_y"), ix.Var("msc_z")
TILE, FIRST, END = ix.Var("msc_tile"), ix.Var("msc_first"), ix.Var("msc_end")  # a y tile: rows [first, end)
LO, HI = ix.Var("msc_lo"), ix.Var("msc_hi")  # the thread's run of planes
RING, EDGES = ix.Var("msc_ring"), ix.Var("msc_edges")  # the thread's ring and its run's edge planes


def refusal(stencil: ir.StencilIR) -> str | None:
    """Why `stencil` cannot be swept in place (None: it can)."""
    if stencil.ndim != 3:
        return f"it streams y tiles of a 3D stencil along x; this one is {stencil.ndim}D"
    if stencil.boundary != "dirichlet":
        return "it needs a dirichlet boundary (a periodic one refreshes ghost planes the ring would hold stale)"
    if len(stencil.statements) != 1:
        return f"it updates one statement's field; this stencil has {len(stencil.statements)} statements"
    st = stencil.statements[0]
    if stencil.field(st.target).slots != 2 or any(a.name == st.target and a.dt != 0 for a in st.reads):
        levels = sorted({a.dt for a in st.reads if a.name == st.target and a.dt is not None})
        return (f"field '{st.target}' must be read at level t only (it reads levels {levels}), so that one old "
                "level is all the ring keeps")
    return None


def check(poly: PolyIR, schedule: LoweredSchedule) -> None:
    """A ScheduleError naming what keeps `update_in_place()` from `poly` under `schedule`."""
    sched = schedule.schedule
    where = f"update_in_place() on stencil '{poly.ir.name}'"
    problem = refusal(poly.ir)
    if problem is not None:
        raise ScheduleError(f"{where}: {problem}")
    if sched.time_depth or sched.streaming or sched.prefetch_distance or sched.order or sched.fuse_at \
            or sched.cached_reads or sched.cached_writes or sched.unrolls or sched.vector_loop \
            or sched.parallel_loop or dict(sched.tiles).keys() != {"y"}:
        raise ScheduleError(f"{where}: it takes tile(y=...) and with_threads() only, got {sched}")


def thread_points(poly: PolyIR, schedule: LoweredSchedule) -> ix.Expr:
    """Points of one thread's buffers: its ring and its run's edge planes."""
    return _Sweep(poly, schedule).thread_points()


def saved_points(poly: PolyIR, schedule: LoweredSchedule) -> ix.Expr:
    """Points of the saved rows: the r1 rows below each y tile, of every plane."""
    return _Sweep(poly, schedule).saved_points()


@dataclass(frozen=True)
class _Sweep:
    poly: PolyIR
    schedule: LoweredSchedule

    @property
    def radius(self) -> tuple[int, ...]:
        return self.poly.ir.radius

    @property
    def field(self) -> str:
        return self.poly.ir.statements[0].target

    @property
    def size(self) -> int:
        """Rows of a y tile (B)."""
        return dict(self.schedule.schedule.tiles)["y"]

    @property
    def height(self) -> int:
        """Rows of a ring slot: a tile and its halos."""
        return self.size + 2 * self.radius[1]

    def ring_points(self) -> ix.Expr:
        return ix.Lit((self.radius[0] + 1) * self.height) * extent(2)

    def thread_points(self) -> ix.Expr:
        return self.ring_points() + ix.Lit(2 * self.radius[0]) * extent(1) * extent(2)

    def tiles(self) -> ix.Expr:
        return ix.Op("/", extent(1) - (self.radius[1] + 1), ix.Lit(self.size)) + 1

    def saved_points(self) -> ix.Expr:
        return extent(0) * self.tiles() * self.radius[1] * extent(2)

    # -- where an old row is

    def field_row(self, plane: ix.Expr, row: ix.Expr) -> ix.Expr:
        return ix.Var(level_name(self.field, 1)) + global_index([plane, row, ix.Lit(0)], (0, 0, 0))

    def saved_row(self, plane: ix.Expr, row: ix.Expr) -> ix.Expr:
        """Row `row` (below the current tile, at most r1 rows) of `plane`, as saved before the step."""
        r1 = self.radius[1]
        return ix.Var(SAVED) + ((plane * self.tiles() + TILE) * r1 + row - (FIRST - r1)) * extent(2)

    def edge_plane(self, edge: ix.Expr) -> ix.Expr:
        """The plane of edge plane `edge` of the run: the r0 before lo, then the r0 from hi."""
        r0 = self.radius[0]
        return ix.Select(edge.lt(r0), LO - r0 + edge, HI + edge - r0)

    def edge_row(self, edge: ix.Expr, row: ix.Expr) -> ix.Expr:
        """Row `row` of edge plane `edge` of the run (the r0 planes before lo, then the r0 from hi), as
        saved before the step."""
        return EDGES + (edge * extent(1) + row) * extent(2)

    def own_row(self, plane: ix.Expr, row: ix.Expr) -> ix.Expr:
        """Row `row` of a plane of the run not computed yet in this tile: the field's, but a row below
        the tile (written already) as saved."""
        return ix.Select(row.lt(FIRST), self.saved_row(plane, row), self.field_row(plane, row))

    def ring_row(self, plane: ix.Expr, row: ix.Expr) -> ix.Expr:
        r0, r1 = self.radius[:2]
        return RING + ((plane % (r0 + 1)) * self.height + row - (FIRST - r1)) * extent(2)

    def ahead_row(self, plane: ix.Expr, row: ix.Expr) -> ix.Expr:
        """Row `row` of a plane ahead of the one computed: its own run's, or an edge plane's past hi."""
        return ix.Select(plane.ge(HI), self.edge_row(plane - HI + self.radius[0], row), self.own_row(plane, row))

    # -- the step

    def copy_row(self, src: ix.Expr, dst: ix.Expr) -> k.Block:
        copy = k.Copy(k.Ref("msc_dst", Z), k.Ref("msc_src", Z), ("msc_z",), ((ix.Lit(0), extent(2)),))
        return k.Block((k.Decl("msc_src", "const pointer", src), k.Decl("msc_dst", "pointer", dst), copy),
                       scoped=True)

    def save(self) -> list[k.Node]:
        """The run's edge planes, and the rows below each y tile of its own planes."""
        r0, r1 = self.radius[:2]
        plane, row, e = ix.Var("msc_p"), ix.Var("msc_row"), ix.Var("msc_e")
        edge_rows = k.Loop("msc_row", ix.Lit(0), row.lt(extent(1)), k.Block((
            self.copy_row(self.field_row(self.edge_plane(e), row), self.edge_row(e, row)),)))
        edges = k.Loop("msc_e", ix.Lit(0), e.lt(2 * r0), k.Block((edge_rows,)))
        below = k.Loop("msc_row", FIRST - r1, row.lt(FIRST), k.Block((
            self.copy_row(self.field_row(plane, row), self.saved_row(plane, row)),)))
        planes = k.Loop("msc_p", LO, plane.lt(HI), k.Block((below,)))
        return [edges, self.tile_loop((planes,))]

    def tile_loop(self, body: tuple[k.Node, ...]) -> k.Loop:
        """The y tiles in order, with their rows [msc_first, msc_end) (at multiples of B, in the interior)."""
        r1 = self.radius[1]
        decls = (k.Decl("msc_first", "index", ix.max_(r1, TILE * self.size)),
                 k.Decl("msc_end", "index", ix.min_(extent(1) - r1, (TILE + 1) * self.size)))
        return k.Loop("msc_tile", ix.Lit(0), TILE.lt(self.tiles()), k.Block((*decls, *body)))

    def fill(self, plane: ix.Expr, src: ix.Expr) -> k.Loop:
        """Old plane `plane` (the tile and its halos, row msc_row from `src`) into its ring slot."""
        r1 = self.radius[1]
        row = ix.Var("msc_row")
        return k.Loop("msc_row", FIRST - r1, row.lt(END + r1),
                      k.Block((self.copy_row(src, self.ring_row(plane, row)),)))

    def plane(self) -> k.Node:
        """Plane msc_x of the tile: its rows from row pointers into the ring and the field, row sums
        along z where they pay."""
        st = self.poly.ir.statements[0]
        r2 = self.radius[2]
        rows: dict[tuple[int, int], str] = {}
        loads: dict[ir.FieldRead, k.Ref] = {}
        for a in st.reads:
            if a.name == self.field:
                name = rows.setdefault(a.offsets[:2], f"msc_row{len(rows)}")
                loads[a] = k.Ref(name, Z + a.offsets[2])
            else:
                loads[a] = k.Ref(array_name(a.name, a.dt), global_index([X, Y, Z], a.offsets))
        pointers = [k.Decl(name, "const pointer", self.ring_row(X + dx, Y + dy) if dx <= 0 else
                           self.ahead_row(X + dx, Y + dy)) for (dx, dy), name in rows.items()]
        lhs = k.Ref(level_name(self.field, 1), global_index([X, Y, Z], (0, 0, 0)))
        assign = k.Assign(lhs, st.expr, tuple(loads.items()), self.field, (X, Y, Z))
        points = k.Loop("msc_z", ix.Lit(r2), Z.lt(extent(2) - r2), k.Block((assign,)), dim=ROW_DIM, vector=True,
                        mapping=SIMD)
        row_loop = k.Loop("msc_y", FIRST, Y.lt(END), k.Block((k.Block((*pointers, points), scoped=True),)))
        summed = row_sums(k.Kernel("plane", k.Block((row_loop,))), ROW_DIM, in_cache=False)
        return summed.body

    def step(self, step: ix.Expr) -> k.Block:
        """One in-place time step (level t + 1 written over level t in its slot)."""
        stencil = self.poly.ir
        r0 = self.radius[0]
        thread, threads = ix.Call("omp_get_thread_num", ()), ix.Call("omp_get_num_threads", ())
        interior = extent(0) - 2 * r0
        decls = [k.Decl(level_name(self.field, 1), "pointer", ix.Var(ring_buffer(self.field))
                        + ring_slot(step, 0, stencil.field(self.field).slots) * LEVEL_POINTS),
                 k.Decl("msc_lo", "index", ix.Op("/", interior * thread, threads) + r0),
                 k.Decl("msc_hi", "index", ix.Op("/", interior * (thread + 1), threads) + r0),
                 k.Decl(RING.name, "pointer", ix.Var(RINGS) + thread * self.thread_points()),
                 k.Decl(EDGES.name, "pointer", RING + self.ring_points())]
        edge, row = ix.Var("msc_e"), ix.Var("msc_row")
        behind = k.Loop("msc_e", ix.Lit(0), edge.lt(r0), k.Block((
            self.fill(LO - r0 + edge, self.edge_row(edge, row)),)))  # the planes before the run
        planes = k.Loop("msc_x", LO, X.lt(HI), k.Block((self.fill(X, self.own_row(X, row)), *self.plane().body)))
        return k.Block((*decls, *self.save(), k.Call("msc_barrier"), self.tile_loop((behind, planes)),
                        k.Call("msc_barrier")), scoped=True)


def in_place_kernel(kernel: k.Kernel, poly: PolyIR, schedule: LoweredSchedule) -> k.Kernel:
    """`kernel` (the plain sweep, after the platform's passes) with every step but the last (and the
    first of an even number) computed in place."""
    body = tuple(_split_steps(node, poly, schedule) if isinstance(node, k.Loop) and node.dim == schedule.time_dim
                 else node for node in kernel.body.body)
    return replace(kernel, body=k.Block(body))


def _split_steps(loop: k.Loop, poly: PolyIR, schedule: LoweredSchedule) -> k.Loop:
    """The time loop: a step writes the other slot (the plain sweep's body, with the slots of the step
    whose parity it has) when it is the last, or the first of an even number; else it stays in its slot
    (`msc_moved`: whether the level has moved to the other slot before this step)."""
    c, steps, moved = ix.Var(loop.iterator), ix.Var("T"), ix.Var("msc_moved")
    even = (steps % 2).eq(0)
    decl = k.Decl("msc_moved", "index", ix.Select(even.and_(ix.Lit(0).lt(c)), ix.Lit(1), ix.Lit(0)))

    def at_moved(n: k.Node) -> k.Node:
        return replace(n, init=ix.substitute(n.init, {loop.iterator: moved})) if isinstance(n, k.Decl) else n

    plain = k.transform(loop.body, at_moved)
    assert isinstance(plain, k.Block)
    other = c.eq(steps - 1).or_(even.and_(c.eq(0)))
    return replace(loop, body=k.Block((decl, k.If(other, plain, _Sweep(poly, schedule).step(moved)))))
