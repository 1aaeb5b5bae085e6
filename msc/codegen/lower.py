"""Lowering a scheduled PolyIR to the kernel IR (target-neutral).

The isl AST of the schedule becomes loops, conditions and statements once;
what every target needs is decided here: how a point of a field level is
addressed (ring-buffer slots, restrict pointers declared once per time
step), the tile geometry, the buffers of cache_read/cache_write with their
shapes and the copies that fill and drain them, and, for a statement with
many reads, row pointers (for the C compiler's sake). How loops map to
hardware, and everything printed, belongs to the targets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import islpy as isl

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen.isl_ast import index_of, user_statements
from msc.errors import ScheduleError
from msc.poly import PolyIR, PolyStatement
from msc.poly.schedule import LARGE_READS, LoweredSchedule

BOX_BOUNDS = ("L", "H")  # a box kernel computes L<d> <= i_d < H<d>
Margins = tuple[tuple[int, int], ...]  # per dimension: how far a footprint reaches below (<= 0) and above a tile


# User names are prefixed (f_ fields, p_ parameters) so that no name can clash
# with a keyword, a loop iterator (c0, c1, ...) or the kernel's own names.
def field_name(name: str) -> str:
    return f"f_{name}"


def param_name(name: str) -> str:
    return f"p_{name}"


def ring_buffer(name: str) -> str:
    """The buffer of every ring slot of written field `name`."""
    return f"{field_name(name)}_buf"


def level_name(name: str, dt: int) -> str:
    """Name of the pointer to level t+dt of field `name`."""
    if dt == 0:
        return f"f_{name}_t0"
    return f"f_{name}_t{'p' if dt > 0 else 'm'}{abs(dt)}"


def array_name(name: str, dt: int | None) -> str:
    """The array holding level t+dt of `name` (a time-invariant input: the field itself)."""
    return field_name(name) if dt is None else level_name(name, dt)


def ring_slot(step: ix.Expr, dt: int, slots: int) -> ix.Expr:
    """The ring-buffer slot of level t+dt at step `step` of a run starting at t0."""
    return (ix.Var("t0") + step + (dt + slots)) % slots


def read_cache(name: str, dt: int | None) -> str:
    return "cr_" + array_name(name, dt)


def write_cache(name: str) -> str:
    return f"cw_{field_name(name)}"


def staged_buffer(name: str) -> str:
    """The buffer of every level of `name` a staged time tile touches."""
    return f"ct_{field_name(name)}"


STAGED_LEVEL = "msc_l"  # the local level a time tile's copy-in is at
STAGED_STEP = "msc_s"  # the step a time tile's copy-out is at
LEVEL_POINTS = ix.Var("V")  # points of one ring-buffer slot


def levels_used(stencil: ir.StencilIR, name: str) -> set[int]:
    levels = {1}
    for s in stencil.statements:
        levels |= {a.dt for a in s.reads if a.name == name and a.dt is not None}
    return levels


def extent(d: int) -> ix.Var:
    """The padded array's extent P<d> in dimension d."""
    return ix.Var(f"P{d}")


def global_index(coords: Sequence[ix.Expr], offsets: tuple[int, ...]) -> ix.Expr:
    """Row-major index of the point `coords` + `offsets` in a padded array of extents P0, P1, ..."""
    return ix.linear(coords, [extent(d) for d in range(len(coords))], offsets)


def slot_index(slot: ix.Expr, coords: Sequence[ix.Expr]) -> ix.Expr:
    """Index of the point `coords` of ring-buffer slot `slot`, in the buffer of all slots."""
    return slot * LEVEL_POINTS + global_index(coords, (0,) * len(coords))


def _statement_name(node: isl.AstNode) -> str:
    return str(node.user_get_expr().op_get_arg(0).id_get_id().get_name())


def _instance(node: isl.AstNode) -> list[ix.Expr]:
    call = node.user_get_expr()
    return [index_of(call.op_get_arg(i)) for i in range(1, call.op_get_n_arg())]


@dataclass
class _Lowering:
    poly: PolyIR
    schedule: LoweredSchedule
    box: bool = False  # bounds of the computed points: the box L<d> <= i_d < H<d>, or the domain
    _loops: list[int] = field(default_factory=list)
    _iterators: dict[int, str] = field(default_factory=dict)
    _rows: dict[tuple[str, tuple[int, ...]], str] = field(default_factory=dict)  # (level array, leading offsets) -> row
    _row_coord: ix.Expr = ix.Lit(0)  # the last coordinate, which row pointers are indexed by
    _footprints: dict[tuple[str, int | None, str], Margins] = field(default_factory=dict)

    @property
    def ir(self) -> ir.StencilIR:
        return self.poly.ir

    def _statement(self, name: str) -> PolyStatement:
        return next(s for s in self.poly.statements if s.name == name)

    # -- the isl AST ------------------------------------------------------

    def node(self, node: isl.AstNode) -> k.Block:
        kind = node.get_type()
        if kind == isl.ast_node_type.block:
            children = node.block_get_children()
            out: list[k.Node] = []
            for i in range(children.n_ast_node()):
                out += self.node(children.get_at(i)).body
            return k.Block(tuple(out))
        if kind == isl.ast_node_type.for_:
            loop = self._for(node)
            inner = loop.body[-1] if isinstance(loop, k.Block) else loop  # (after its row pointers)
            shared = isinstance(inner, k.Loop) and inner.parallel and not inner.degenerate
            # the workers' shares of a parallel loop are all done before anything after it
            return k.Block((loop, k.Barrier()) if shared else (loop,))
        if kind == isl.ast_node_type.if_:
            other = self.node(node.if_get_else_node()) if node.if_has_else_node() else None
            return k.Block((k.If(index_of(node.if_get_cond()), self.node(node.if_get_then_node()), other),))
        if kind == isl.ast_node_type.user:
            return k.Block(self.statement(_statement_name(node), _instance(node)))
        if kind == isl.ast_node_type.mark:
            return self.node(node.mark_get_node())
        raise NotImplementedError(f"isl AST node {kind} is not supported")

    def _for(self, node: isl.AstNode) -> k.Node:
        """The loop; an innermost one inside a block with the row pointers its statement reads through."""
        body = node.for_get_body()
        if body.get_type() != isl.ast_node_type.user:
            return self._loop(node)
        it = node.for_get_iterator().id_get_id().get_name()
        rows = self._row_pointers(_statement_name(body), _instance(body), it)
        try:
            loop = self._loop(node)
            return k.Block((*rows, loop), scoped=True) if rows else loop
        finally:
            self._rows.clear()

    def _loop(self, node: isl.AstNode) -> k.Loop:
        it = node.for_get_iterator().id_get_id().get_name()
        dim = int(it.lstrip("c"))
        inside = user_statements(node)
        prologue = self._loop_prologue(dim, it, inside)
        self._loops.append(dim)
        body = self.node(node.for_get_body()).body
        self._loops.pop()
        epilogue = self._loop_epilogue(dim, inside)
        sched = self.schedule
        degenerate = bool(node.for_is_degenerate())
        if degenerate and dim == sched.parallel_dim:  # its `omp for` would go, leaving threads that all run it
            raise ScheduleError(f"loop {sched.names[dim]!r} cannot run in parallel: it has one iteration here")
        return k.Loop(
            iterator=it,
            init=index_of(node.for_get_init()),
            cond=None if degenerate else index_of(node.for_get_cond()),
            step=ix.Lit(1) if degenerate else index_of(node.for_get_inc()),
            body=k.Block((*prologue, *body, *epilogue)),
            dim=dim,
            degenerate=degenerate,
            parallel=dim == sched.parallel_dim,
            vector=dim == sched.vector_dim,
            unroll=sched.unroll.get(dim, 0),
        )

    # -- statements -----------------------------------------------------------

    def statement(self, name: str, args: list[ix.Expr]) -> tuple[k.Node, ...]:
        st = self._statement(name)
        body: k.Node = self._wrap_call(st) if st.stmt is None else self._assignment(st, args[0], args[1:])
        if self.schedule.time_dim in self._loops:
            return (body,)
        # isl fixed the time step without a loop over it: set up the levels here
        return (k.Block((*self._level_pointers(args[0]), body), scoped=True),)

    def _assignment(self, st: PolyStatement, step: ix.Expr, coords: list[ix.Expr]) -> k.Assign:
        """The statement at the point `coords` of time step `step`."""
        assert st.stmt is not None
        sched = self.schedule.schedule
        loads = {}
        staged = self._staged_fields()
        for a in st.stmt.reads:
            if a in loads:
                continue
            if a.name in staged:
                loads[a] = self._staged_ref(a.name, a.dt, step, coords, a.offsets)
                continue
            if a.name in sched.cached_reads:
                margins = self._margins(a.name, a.dt, "read")
                loads[a] = k.Ref(read_cache(a.name, a.dt), self._tile_index(coords, a.offsets, margins), k.Space.STACK)
                continue
            ptr = array_name(a.name, a.dt)
            row = self._rows.get((ptr, a.offsets[:-1]))
            if row is not None:
                loads[a] = k.Ref(row, global_index([self._row_coord], a.offsets[-1:]))
            else:
                loads[a] = k.Ref(ptr, global_index(coords, a.offsets))
        zero = (0,) * self.ir.ndim
        if st.target in staged:
            lhs = self._staged_ref(st.target, 1, step, coords, zero)
        elif st.target in sched.cached_writes:
            margins = self._margins(st.target, 1, "write")
            lhs = k.Ref(write_cache(st.target), self._tile_index(coords, zero, margins), k.Space.STACK)
        else:
            lhs = k.Ref(level_name(st.target, 1), global_index(coords, zero))
        return k.Assign(lhs, st.stmt.expr, tuple(loads.items()), st.target, tuple(coords))

    def _wrap_call(self, st: PolyStatement) -> k.Call:
        n: list[ix.Expr] = [ix.Lit(1)] * (3 - self.ir.ndim) + [extent(d) for d in range(self.ir.ndim)]
        r = [ix.Lit(v) for v in (0,) * (3 - self.ir.ndim) + self.ir.radius]
        return k.Call("msc_wrap", (ix.Var(level_name(st.target, 1)), *n, *r))

    def _row_pointers(self, name: str, args: list[ix.Expr], iterator: str) -> list[k.Decl]:
        """For a statement with many reads (LARGE_READS or more) whose
        innermost loop runs along the last dimension only, inside the time
        loop (which sets up the level pointers): one pointer per row it reads
        (field level and leading offsets), set up before the loop. Each read
        is then row[i + offset]; with hundreds of full addresses gcc's
        induction-variable pass takes seconds to minutes."""
        st = self._statement(name)
        coords = args[1:]
        moving = [iterator in ix.variables(c) for c in coords]
        if (st.stmt is None or self.ir.ndim == 1 or len(st.stmt.reads) < LARGE_READS
                or self.schedule.time_dim not in self._loops or moving != [False] * (self.ir.ndim - 1) + [True]):
            return []
        decls = []
        for a in st.stmt.reads:
            ptr = array_name(a.name, a.dt)
            key = (ptr, a.offsets[:-1])
            if a.name in self.schedule.schedule.cached_reads or key in self._rows:
                continue
            row = self._rows[key] = f"msc_row{len(self._rows)}"
            start = global_index(coords[:-1] + [ix.Lit(0)], a.offsets[:-1] + (0,))
            decls.append(k.Decl(row, "const pointer", ix.Var(ptr) + start))
        self._row_coord = coords[-1]
        return decls

    def _level_pointers(self, step: ix.Expr) -> list[k.Decl]:
        """Restrict pointers to every level used at time step `step`."""
        decls = []
        staged = self._staged_fields()
        for f in self.ir.written_fields:
            if f.name in staged:
                continue
            for dt in sorted(levels_used(self.ir, f.name), reverse=True):
                kind = "pointer" if dt == 1 else "const pointer"
                slot = ring_slot(step, dt, f.slots)
                decls.append(k.Decl(level_name(f.name, dt), kind, ix.Var(ring_buffer(f.name)) + slot * LEVEL_POINTS))
        return decls

    # -- loops: per-step pointers, cache copies -----------------------------

    def _loop_prologue(self, dim: int, iterator: str, statements: set[str]) -> list[k.Node]:
        self._iterators[dim] = iterator
        if dim == self.schedule.time_dim:
            return list(self._level_pointers(ix.Var(iterator)))
        if dim != max(self.schedule.tiles, default=-1):
            return []
        if self._staged_fields():
            return self._stage_in()
        out: list[k.Node] = []
        zero = (0,) * self.ir.ndim
        for name, dt in self._cached_levels(statements):
            src = k.Ref(array_name(name, dt), global_index(self._copy_coords(), zero))
            margins = self._margins(name, dt, "read")
            dst = k.Ref(read_cache(name, dt), self._cache_index(margins), k.Space.STACK)
            out.append(self._copy(dst, src, margins, True))
        return out

    def _loop_epilogue(self, dim: int, statements: set[str]) -> list[k.Node]:
        out: list[k.Node] = []
        if self._staged_fields() and dim == max(self.schedule.tiles, default=-1):
            return self._stage_out()
        if self.schedule.schedule.cached_writes and dim == max(self.schedule.tiles, default=-1):
            zero = (0,) * self.ir.ndim
            for st in self.poly.statements:
                if st.name in statements and st.target in self.schedule.schedule.cached_writes:
                    dst = k.Ref(level_name(st.target, 1), global_index(self._copy_coords(), zero))
                    margins = self._margins(st.target, 1, "write")
                    src = k.Ref(write_cache(st.target), self._cache_index(margins), k.Space.STACK)
                    out.append(self._copy(dst, src, margins, False))
        return out

    # -- cache_read / cache_write: tile buffers -------------------------------

    def _tile(self, d: int) -> tuple[ix.Expr, int]:
        """(origin, size) of the current tile in space dimension d."""
        dim = next(t for t, (dd, _) in self.schedule.tiles.items() if dd == d)
        size = self.schedule.tiles[dim][1]
        return size * ix.Var(self._iterators[dim]), size

    def _tile_sizes(self) -> list[int]:
        sizes = dict(self.schedule.tiles.values())
        return [sizes[d] for d in range(self.ir.ndim)]

    def _shift(self, st: PolyStatement, d: int) -> int:
        """How far statement `st` runs ahead in dimension d under compute_at: a
        fused tile X holds its points size * X + shift <= i_d < that + size."""
        names, sched = self.schedule.names, self.schedule.schedule
        fused = names[:names.index("")] if sched.fuse_at and not sched.time_depth else []
        return (len(self.ir.statements) - 1 - st.index) * self.ir.radius[d] if f"{self.ir.dims[d]}_tile" in fused else 0

    def _margins(self, name: str, dt: int | None, access: str) -> Margins:
        """How far a tile's footprint in level t+dt of `name` under the `access`
        ("read" or "write") relations reaches beyond the tile, below and above,
        per dimension: isl's image of a tile inside the domain (each statement's
        own under compute_at). A cache buffer holds that footprint; at the
        domain's edge it is clipped to the array."""
        key = (name, dt, access)
        if key not in self._footprints:
            sizes = self._tile_sizes()
            origin = self.ir.radius  # tiles inside the domain r <= i < P - r of arrays P = s + 2r + the shifts
            extents = [size + 2 * o + (len(self.ir.statements) - 1) * o for o, size in zip(origin, sizes)]
            bounds: list[tuple[int, int]] = []
            for st in self.poly.statements:
                box = [(o + self._shift(st, d), o + self._shift(st, d) + size) for d, (o, size) in enumerate(zip(origin, sizes))]
                found = self.poly.footprint(name, dt, box, extents, access=access, statements={st.name})
                if found is not None:
                    bounds = list(found) if not bounds else [(min(a, c), max(b, e)) for (a, b), (c, e) in zip(bounds, found)]
            assert bounds, f"no statement {access}s {name} at t{dt:+d}" if dt is not None else name
            self._footprints[key] = tuple((lo - o, hi - (o + size - 1))
                                          for (lo, hi), o, size in zip(bounds, origin, sizes))
        return self._footprints[key]

    def _tile_index(self, coords: Sequence[ix.Expr], offsets: tuple[int, ...], margins: Margins) -> ix.Expr:
        """Index of the point coords + offsets in a tile buffer whose footprint reaches `margins` beyond the tile."""
        terms, extents = [], []
        for d, (c, o, (lo, hi)) in enumerate(zip(coords, offsets, margins)):
            origin, size = self._tile(d)
            terms.append(c - origin + (o - lo))
            extents.append(size + hi - lo)
        return ix.linear(terms, extents)

    def _copy_iterators(self) -> list[str]:
        return [f"a{d}" for d in range(self.ir.ndim)]

    def _copy_coords(self) -> list[ix.Expr]:
        return [ix.Var(it) for it in self._copy_iterators()]

    def _copy(self, dst: k.Ref, src: k.Ref, margins: Margins, read: bool) -> k.Copy:
        """A copy over the tile's footprint (read: clipped to the array; written: to the computed points)."""
        region = []
        for d, (lo, hi) in enumerate(margins):
            origin, size = self._tile(d)
            first, last = self._computed(d)
            end = ix.min_(extent(d) if read else last, origin + (size + hi))
            region.append((ix.max_(0 if read else first, origin + lo), end))
        return k.Copy(dst, src, tuple(self._copy_iterators()), tuple(region))

    def _computed(self, d: int) -> tuple[ix.Expr, ix.Expr]:
        """The first and the end of the computed points in space dimension d (a box's, or the domain's)."""
        if self.box:
            return ix.Var(f"{BOX_BOUNDS[0]}{d}"), ix.Var(f"{BOX_BOUNDS[1]}{d}")
        return ix.Lit(self.ir.radius[d]), extent(d) - self.ir.radius[d]

    def _cache_index(self, margins: Margins) -> ix.Expr:
        return self._tile_index(self._copy_coords(), (0,) * self.ir.ndim, margins)

    def buffers(self) -> list[k.Buffer]:
        """The cache buffers, one per worker, each a tile's footprint: in each level read, in each field written."""
        sched = self.schedule.schedule
        if not (sched.cached_reads or sched.cached_writes):
            return []
        if sched.time_depth:
            staged = []
            for name in self._staged_fields():
                dt_min, levels, _, width = self._band(name)
                shape = width if dt_min is None else (levels, *width)
                staged.append(k.Buffer(staged_buffer(name), k.Space.STACK, shape, name))
            return staged

        def shape(margins: Margins) -> tuple[int, ...]:
            return tuple(size + hi - lo for size, (lo, hi) in zip(self._tile_sizes(), margins))

        out = [k.Buffer(read_cache(n, dt), k.Space.STACK, shape(self._margins(n, dt, "read")), n)
               for n, dt in self._cached_levels(None)]
        return out + [k.Buffer(write_cache(n), k.Space.STACK, shape(self._margins(n, 1, "write")), n)
                      for n in sched.cached_writes]

    # -- cache_read / cache_write under time_tile: the time tile staged ---------
    #
    # A time tile (wave w, space tiles X_d, so t_tile = w - sum X_d, first step
    # tau0 = depth * t_tile) computes, at step t, statement k over
    # o_d - S r_d (t - tau0) - k r_d <= i_d < that + size_d, where o_d =
    # size_d X_d - S r_d tau0 (codegen's skew, msc/poly/schedule.py). A staged field
    # keeps every level the tile touches (tau0 + dt_min .. tau0 + depth - 1 +
    # dt_max) in one buffer, each level a band that moves with the skew: point
    # i of level L sits at i - o_d + S r_d (L - tau0) - rel_min_d. The tile
    # copies every level's band in before its first step (values other tiles
    # computed are final by then: they ran in earlier wavefronts), computes in
    # the buffer, and copies out, step by step, the points it computed.

    def _staged_fields(self) -> list[str]:
        sched = self.schedule.schedule
        return sorted(set(sched.cached_reads) | set(sched.cached_writes)) if sched.time_depth else []

    def _band(self, name: str) -> tuple[int | None, int, tuple[int, ...], tuple[int, ...]]:
        """(dt_min, levels, rel_min per dimension, width per dimension) of the
        staged field `name` (dt_min None: a time-invariant field, one level)."""
        dts = {a.dt for st in self.ir.statements for a in st.reads if a.name == name}
        written = any(f.name == name for f in self.ir.written_fields)
        margins = [self._margins(name, dt, "read") for dt in dts] + ([((0, 0),) * self.ir.ndim] if written else [])
        lo = [min(m[d][0] for m in margins) for d in range(self.ir.ndim)]
        hi = [max(m[d][1] for m in margins) for d in range(self.ir.ndim)]
        nst, depth = len(self.ir.statements), self.schedule.schedule.time_depth
        sizes, radius = self._tile_sizes(), self.ir.radius
        if None in dts:
            rel = tuple(-nst * r * (depth - 1) - (nst - 1) * r + a for r, a in zip(radius, lo))
            width = tuple(size + nst * r * (depth - 1) + (nst - 1) * r + b - a
                          for size, r, a, b in zip(sizes, radius, lo, hi))
            return None, 1, rel, width
        levels = dts | ({1} if written else set())
        dt_min, dt_max = min(levels), max(levels)  # type: ignore[type-var]
        rel = tuple(nst * r * dt_min - (nst - 1) * r + a for r, a in zip(radius, lo))
        width = tuple(size + nst * r * (dt_max - dt_min) + (nst - 1) * r + b - a
                      for size, r, a, b in zip(sizes, radius, lo, hi))
        return dt_min, depth + dt_max - dt_min, rel, width

    def _first_step(self) -> ix.Expr:
        """tau0: the first step of the current time tile."""
        tiles = ix.Var(self._iterators[self.schedule.names.index("wave")])
        for dim in sorted(self.schedule.tiles):
            tiles = tiles - ix.Var(self._iterators[dim])
        return self.schedule.schedule.time_depth * tiles

    def _skewed_origin(self, d: int) -> ix.Expr:
        """o_d: where statement 0's points of the current time tile start at its first step."""
        origin, _ = self._tile(d)
        return origin - len(self.ir.statements) * self.ir.radius[d] * self._first_step()

    def _band_index(self, name: str, level: ix.Expr | None, coords: Sequence[ix.Expr],
                    shifts: Sequence[tuple[ix.Expr, ...]]) -> ix.Expr:
        """Index in the staged buffer of `name`: local level `level` (None: a
        time-invariant field), point coords[d] - o_d + (the sum of shifts[d]) in each dimension."""
        terms = []
        for d, (c, shift) in enumerate(zip(coords, shifts)):
            term = c - self._skewed_origin(d)
            for s in shift:
                term = term + s
            terms.append(term)
        width = self._band(name)[3]
        return ix.linear(terms, width) if level is None else ix.linear([level, *terms], (0, *width))

    def _staged_ref(self, name: str, dt: int | None, t: ix.Expr, coords: Sequence[ix.Expr],
                    offsets: tuple[int, ...]) -> k.Ref:
        """The element of level t+dt at coords + offsets in the staged buffer of `name`."""
        dt_min, _, rel, _ = self._band(name)
        tau0, nst = self._first_step(), len(self.ir.statements)
        if dt_min is None or dt is None:
            shifts = [(ix.Lit(o - m),) for o, m in zip(offsets, rel)]
            return k.Ref(staged_buffer(name), self._band_index(name, None, coords, shifts), k.Space.STACK)
        shifts = [(nst * r * (t - tau0), ix.Lit(o + nst * r * dt - m)) for o, r, m in zip(offsets, self.ir.radius, rel)]
        level = t + (dt - dt_min) - tau0
        return k.Ref(staged_buffer(name), self._band_index(name, level, coords, shifts), k.Space.STACK)

    def _stage_in(self) -> list[k.Node]:
        """Copy every level's band of each staged field in, before the tile's first step."""
        out: list[k.Node] = []
        tau0, nst, its = self._first_step(), len(self.ir.statements), self._copy_coords()
        for name in self._staged_fields():
            dt_min, levels, rel, width = self._band(name)
            if dt_min is None:
                shifts = [(ix.Lit(-m),) for m in rel]
                region = tuple((ix.max_(0, self._skewed_origin(d) + m), ix.min_(extent(d), self._skewed_origin(d) + (m + w)))
                               for d, (m, w) in enumerate(zip(rel, width)))
                src = k.Ref(field_name(name), global_index(its, (0,) * self.ir.ndim))
                dst = k.Ref(staged_buffer(name), self._band_index(name, None, its, shifts), k.Space.STACK)
                out.append(k.Copy(dst, src, tuple(self._copy_iterators()), region))
                continue
            lv = ix.Var(STAGED_LEVEL)
            shifts = [(nst * r * (lv + dt_min), ix.Lit(-m)) for r, m in zip(self.ir.radius, rel)]
            starts = [self._skewed_origin(d) - nst * r * (lv + dt_min) + m for d, (r, m) in enumerate(zip(self.ir.radius, rel))]
            region = tuple((ix.max_(0, start), ix.min_(extent(d), start + w)) for d, (start, w) in enumerate(zip(starts, width)))
            slots = self.ir.field(name).slots
            src = k.Ref(ring_buffer(name), slot_index(ring_slot(tau0 + lv, dt_min, slots), its))
            dst = k.Ref(staged_buffer(name), self._band_index(name, lv, its, shifts), k.Space.STACK)
            copy = k.Copy(dst, src, tuple(self._copy_iterators()), region)
            out.append(k.Loop(STAGED_LEVEL, ix.Lit(0), lv.lt(levels), k.Block((copy,))))
        return out

    def _stage_out(self) -> list[k.Node]:
        """Copy out, step by step and statement by statement, the points the tile computed."""
        tau0, nst, its = self._first_step(), len(self.ir.statements), self._copy_coords()
        step = ix.Var(STAGED_STEP)
        copies: list[k.Node] = []
        for st in self.poly.statements:
            if st.target not in self._staged_fields():
                continue
            dt_min, _, rel, _ = self._band(st.target)
            assert dt_min is not None
            region = []
            for d, r in enumerate(self.ir.radius):
                first, last = self._computed(d)
                start = self._skewed_origin(d) - nst * r * (step - tau0) - st.index * r
                region.append((ix.max_(first, start), ix.min_(last, start + self._tile_sizes()[d])))
            shifts = [(nst * r * (step + 1 - tau0), ix.Lit(-m)) for r, m in zip(self.ir.radius, rel)]
            src = k.Ref(staged_buffer(st.target), self._band_index(st.target, step + (1 - dt_min) - tau0, its, shifts),
                        k.Space.STACK)
            slots = self.ir.field(st.target).slots
            dst = k.Ref(ring_buffer(st.target), slot_index(ring_slot(step, 1, slots), its))
            copies.append(k.Copy(dst, src, tuple(self._copy_iterators()), tuple(region)))
        depth = self.schedule.schedule.time_depth
        return [k.Loop(STAGED_STEP, tau0, step.lt(ix.min_(ix.Var("T"), tau0 + depth)), k.Block(tuple(copies)))]

    def _cached_levels(self, statements: set[str] | None) -> list[tuple[str, int | None]]:
        levels = set()
        for st in self.poly.statements:
            if st.stmt is not None and (statements is None or st.name in statements):
                levels |= {(a.name, a.dt) for a in st.stmt.reads if a.name in self.schedule.schedule.cached_reads}
        return sorted(levels, key=lambda v: (v[0], v[1] if v[1] is not None else -99))


def box_domain(poly: PolyIR) -> isl.UnionSet:
    """Instances of the statements with space dimensions inside the box L<d> <= i_d < H<d>."""
    params = ", ".join([*poly.params, *(f"{b}{d}" for d in range(poly.ir.ndim) for b in BOX_BOUNDS)])
    bounds = " and ".join(f"L{d} <= {i} < H{d}" for d, i in enumerate(poly.dims))
    parts = [f"{poly.instance(st)} : {bounds}" for st in poly.statements if st.stmt is not None]
    return isl.UnionSet(f"[{params}] -> {{ {'; '.join(parts)} }}")


def lower_kernel(poly: PolyIR, schedule: LoweredSchedule, name: str, box: bool = False) -> k.Kernel:
    """The kernel IR of the entry point `name` for `poly` under `schedule`
    (`box`: computing only the box L<d> <= i_d < H<d>)."""
    lowering = _Lowering(poly, schedule, box)
    sched = schedule.map.intersect_domain(box_domain(poly)) if box else schedule.map
    body = lowering.node(poly.ast(sched))
    return k.Kernel(name, k.Block((*lowering.buffers(), *body.body)), box)
