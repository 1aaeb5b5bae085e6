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

import re
from dataclasses import dataclass, field

import islpy as isl

from msc import ir
from msc.codegen import kernel_ir as k
from msc.codegen.isl_ast import c_of, user_statements
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


def level_name(name: str, dt: int) -> str:
    """Name of the pointer to level t+dt of field `name`."""
    if dt == 0:
        return f"f_{name}_t0"
    return f"f_{name}_t{'p' if dt > 0 else 'm'}{abs(dt)}"


def array_name(name: str, dt: int | None) -> str:
    """The array holding level t+dt of `name` (a time-invariant input: the field itself)."""
    return field_name(name) if dt is None else level_name(name, dt)


def ring_slot(step: str, dt: int, slots: int) -> str:
    """The ring-buffer slot of level t+dt at step `step` of a run starting at t0."""
    return f"((t0 + {step} + {dt + slots}) % {slots})"


def read_cache(name: str, dt: int | None) -> str:
    return "cr_" + array_name(name, dt)


def write_cache(name: str) -> str:
    return f"cw_{field_name(name)}"


def staged_buffer(name: str) -> str:
    """The buffer of every level of `name` a staged time tile touches."""
    return f"ct_{field_name(name)}"


STAGED_LEVEL = "msc_l"  # the local level a time tile's copy-in is at
STAGED_STEP = "msc_s"  # the step a time tile's copy-out is at


def levels_used(stencil: ir.StencilIR, name: str) -> set[int]:
    levels = {1}
    for s in stencil.statements:
        levels |= {a.dt for a in s.reads if a.name == name and a.dt is not None}
    return levels


def global_index(coords: list[str] | tuple[str, ...], offsets: tuple[int, ...]) -> str:
    """Row-major index of the point `coords` + `offsets` in a padded array of extents P0, P1, ..."""
    terms = [f"{c} + {o}" if o > 0 else f"{c} - {-o}" if o < 0 else c for c, o in zip(coords, offsets)]
    index = terms[0]
    for d in range(1, len(terms)):
        index = f"({index}) * P{d} + {terms[d]}"
    return index


def _statement_name(node: isl.AstNode) -> str:
    return str(node.user_get_expr().op_get_arg(0).id_get_id().get_name())


def _instance(node: isl.AstNode) -> list[str]:
    call = node.user_get_expr()
    return [c_of(call.op_get_arg(i)) for i in range(1, call.op_get_n_arg())]


@dataclass
class _Lowering:
    poly: PolyIR
    schedule: LoweredSchedule
    box: bool = False  # bounds of the computed points: the box L<d> <= i_d < H<d>, or the domain
    _loops: list[int] = field(default_factory=list)
    _iterators: dict[int, str] = field(default_factory=dict)
    _rows: dict[tuple[str, tuple[int, ...]], str] = field(default_factory=dict)  # (level array, leading offsets) -> row
    _row_coord: str = ""  # the last coordinate, which row pointers are indexed by
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
            return k.Block((k.If(c_of(node.if_get_cond()), self.node(node.if_get_then_node()), other),))
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
        return k.Loop(
            iterator=it,
            init=c_of(node.for_get_init()),
            cond="" if node.for_is_degenerate() else c_of(node.for_get_cond(), top=True),
            step="1" if node.for_is_degenerate() else c_of(node.for_get_inc()),
            body=k.Block((*prologue, *body, *epilogue)),
            dim=dim,
            degenerate=bool(node.for_is_degenerate()),
            parallel=dim == sched.parallel_dim,
            vector=dim == sched.vector_dim,
            unroll=sched.unroll.get(dim, 0),
        )

    # -- statements -----------------------------------------------------------

    def statement(self, name: str, args: list[str]) -> tuple[k.Node, ...]:
        st = self._statement(name)
        body: k.Node = self._wrap_call(st) if st.stmt is None else self._assignment(st, args[0], args[1:])
        if self.schedule.time_dim in self._loops:
            return (body,)
        # isl fixed the time step without a loop over it: set up the levels here
        return (k.Block((*self._level_pointers(args[0]), body), scoped=True),)

    def _assignment(self, st: PolyStatement, step: str, coords: list[str]) -> k.Assign:
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
        n = ["1"] * (3 - self.ir.ndim) + [f"P{d}" for d in range(self.ir.ndim)]
        r = ["0"] * (3 - self.ir.ndim) + [str(v) for v in self.ir.radius]
        return k.Call("msc_wrap", (level_name(st.target, 1), *n, *r))

    def _row_pointers(self, name: str, args: list[str], iterator: str) -> list[k.Decl]:
        """For a statement with many reads (LARGE_READS or more) whose
        innermost loop runs along the last dimension only, inside the time
        loop (which sets up the level pointers): one pointer per row it reads
        (field level and leading offsets), set up before the loop. Each read
        is then row[i + offset]; with hundreds of full addresses gcc's
        induction-variable pass takes seconds to minutes."""
        st = self._statement(name)
        coords = args[1:]
        moving = [re.search(rf"\b{iterator}\b", c) is not None for c in coords]
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
            start = global_index(coords[:-1] + ["0"], a.offsets[:-1] + (0,))
            decls.append(k.Decl(row, "const pointer", f"{ptr} + {start}"))
        self._row_coord = coords[-1]
        return decls

    def _level_pointers(self, step: str) -> list[k.Decl]:
        """Restrict pointers to every level used at time step `step`."""
        decls = []
        staged = self._staged_fields()
        for f in self.ir.written_fields:
            if f.name in staged:
                continue
            for dt in sorted(levels_used(self.ir, f.name), reverse=True):
                kind = "pointer" if dt == 1 else "const pointer"
                slot = ring_slot(step, dt, f.slots)
                decls.append(k.Decl(level_name(f.name, dt), kind, f"{field_name(f.name)}_buf + {slot} * V"))
        return decls

    # -- loops: per-step pointers, cache copies -----------------------------

    def _loop_prologue(self, dim: int, iterator: str, statements: set[str]) -> list[k.Node]:
        self._iterators[dim] = iterator
        if dim == self.schedule.time_dim:
            return list(self._level_pointers(iterator))
        if dim != max(self.schedule.tiles, default=-1):
            return []
        if self._staged_fields():
            return self._stage_in()
        out: list[k.Node] = []
        zero = (0,) * self.ir.ndim
        for name, dt in self._cached_levels(statements):
            src = k.Ref(array_name(name, dt), global_index(self._copy_iterators(), zero))
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
                    dst = k.Ref(level_name(st.target, 1), global_index(self._copy_iterators(), zero))
                    margins = self._margins(st.target, 1, "write")
                    src = k.Ref(write_cache(st.target), self._cache_index(margins), k.Space.STACK)
                    out.append(self._copy(dst, src, margins, False))
        return out

    # -- cache_read / cache_write: tile buffers -------------------------------

    def _tile(self, d: int) -> tuple[str, int]:
        """(origin expression, size) of the current tile in space dimension d."""
        dim = next(t for t, (dd, _) in self.schedule.tiles.items() if dd == d)
        size = self.schedule.tiles[dim][1]
        return f"({size} * {self._iterators[dim]})", size

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

    def _tile_index(self, coords: list[str], offsets: tuple[int, ...], margins: Margins) -> str:
        """Index of the point coords + offsets in a tile buffer whose footprint reaches `margins` beyond the tile."""
        index = ""
        for d, (c, o, (lo, hi)) in enumerate(zip(coords, offsets, margins)):
            origin, size = self._tile(d)
            term = f"({c} - {origin} + {o - lo})"
            index = term if d == 0 else f"({index}) * {size + hi - lo} + {term}"
        return index

    def _copy_iterators(self) -> list[str]:
        return [f"a{d}" for d in range(self.ir.ndim)]

    def _copy(self, dst: k.Ref, src: k.Ref, margins: Margins, read: bool) -> k.Copy:
        """A copy over the tile's footprint (read: clipped to the array; written: to the computed points)."""
        region = []
        for d, (lo, hi) in enumerate(margins):
            origin, size = self._tile(d)
            first, last = (f"L{d}", f"H{d}") if self.box else (str(self.ir.radius[d]), f"P{d} - {self.ir.radius[d]}")
            below = f"{origin} - {-lo}" if lo <= 0 else f"{origin} + {lo}"
            start = origin if lo == 0 else f"{origin} {_plus(lo)}"
            region.append((f"msc_imax(0, {below})", f"msc_imin(P{d}, {origin} + {size + hi})") if read else
                          (f"msc_imax({first}, {start})", f"msc_imin({last}, {origin} + {size + hi})"))
        return k.Copy(dst, src, tuple(self._copy_iterators()), tuple(region))

    def _cache_index(self, margins: Margins) -> str:
        return self._tile_index(self._copy_iterators(), (0,) * self.ir.ndim, margins)

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

    def _first_step(self) -> str:
        """tau0: the first step of the current time tile."""
        wave = self._iterators[self.schedule.names.index("wave")]
        tiles = " - ".join(self._iterators[dim] for dim in sorted(self.schedule.tiles))
        return f"({self.schedule.schedule.time_depth} * ({wave} - {tiles}))"

    def _skewed_origin(self, d: int) -> str:
        """o_d: where statement 0's points of the current time tile start at its first step."""
        dim = next(t for t, (dd, _) in self.schedule.tiles.items() if dd == d)
        size = self.schedule.tiles[dim][1]
        return f"({size} * {self._iterators[dim]} - {len(self.ir.statements) * self.ir.radius[d]} * {self._first_step()})"

    def _band_index(self, name: str, level: str | None, coords: list[str], shifts: list[str]) -> str:
        """Index in the staged buffer of `name`: local level `level` (None: a
        time-invariant field), point coords[d] - o_d + shifts[d] in each dimension."""
        width = self._band(name)[3]
        index = level or ""
        for d, (c, shift) in enumerate(zip(coords, shifts)):
            term = f"({c} - {self._skewed_origin(d)} + {shift})"
            index = term if not index else f"({index}) * {width[d]} + {term}"
        return index

    def _staged_ref(self, name: str, dt: int | None, t: str, coords: list[str], offsets: tuple[int, ...]) -> k.Ref:
        """The element of level t+dt at coords + offsets in the staged buffer of `name`."""
        dt_min, _, rel, _ = self._band(name)
        tau0, nst = self._first_step(), len(self.ir.statements)
        if dt_min is None or dt is None:
            shifts = [f"{o - m}" for o, m in zip(offsets, rel)]
            return k.Ref(staged_buffer(name), self._band_index(name, None, coords, shifts), k.Space.STACK)
        shifts = [f"{nst * r} * ({t} - {tau0}) {_plus(o + nst * r * dt - m)}" for o, r, m in zip(offsets, self.ir.radius, rel)]
        level = f"({t} + {dt - dt_min} - {tau0})"
        return k.Ref(staged_buffer(name), self._band_index(name, level, coords, shifts), k.Space.STACK)

    def _stage_in(self) -> list[k.Node]:
        """Copy every level's band of each staged field in, before the tile's first step."""
        out: list[k.Node] = []
        tau0, nst, its = self._first_step(), len(self.ir.statements), self._copy_iterators()
        for name in self._staged_fields():
            dt_min, levels, rel, width = self._band(name)
            region = []
            if dt_min is None:
                shifts = [f"{-m}" for m in rel]
                for d, (m, w) in enumerate(zip(rel, width)):
                    region.append((f"msc_imax(0, {self._skewed_origin(d)} {_plus(m)})",
                                   f"msc_imin(P{d}, {self._skewed_origin(d)} {_plus(m + w)})"))
                src = k.Ref(field_name(name), global_index(its, (0,) * self.ir.ndim))
                dst = k.Ref(staged_buffer(name), self._band_index(name, None, its, shifts), k.Space.STACK)
                out.append(k.Copy(dst, src, tuple(its), tuple(region)))
                continue
            lv = STAGED_LEVEL
            shifts = [f"{nst * r} * ({lv} {_plus(dt_min)}) {_plus(-m)}" for r, m in zip(self.ir.radius, rel)]
            for d, (r, m, w) in enumerate(zip(self.ir.radius, rel, width)):
                start = f"{self._skewed_origin(d)} - {nst * r} * ({lv} {_plus(dt_min)}) {_plus(m)}"
                region.append((f"msc_imax(0, {start})", f"msc_imin(P{d}, {start} + {w})"))
            slots = self.ir.field(name).slots
            src = k.Ref(f"{field_name(name)}_buf", f"{ring_slot(f'{tau0} + {lv}', dt_min, slots)} * V + "
                                                    f"{global_index(its, (0,) * self.ir.ndim)}")
            dst = k.Ref(staged_buffer(name), self._band_index(name, lv, its, shifts), k.Space.STACK)
            out.append(k.Loop(lv, "0", f"{lv} < {levels}", k.Block((k.Copy(dst, src, tuple(its), tuple(region)),))))
        return out

    def _stage_out(self) -> list[k.Node]:
        """Copy out, step by step and statement by statement, the points the tile computed."""
        tau0, nst, its = self._first_step(), len(self.ir.statements), self._copy_iterators()
        step = STAGED_STEP
        copies: list[k.Node] = []
        for st in self.poly.statements:
            if st.target not in self._staged_fields():
                continue
            dt_min, _, rel, _ = self._band(st.target)
            assert dt_min is not None
            region = []
            for d, r in enumerate(self.ir.radius):
                first, last = (f"L{d}", f"H{d}") if self.box else (str(r), f"P{d} - {r}")
                start = f"{self._skewed_origin(d)} - {nst * r} * ({step} - {tau0}) {_plus(-st.index * r)}"
                size = self._tile_sizes()[d]
                region.append((f"msc_imax({first}, {start})", f"msc_imin({last}, {start} + {size})"))
            shifts = [f"{nst * r} * ({step} + 1 - {tau0}) {_plus(-m)}" for r, m in zip(self.ir.radius, rel)]
            src = k.Ref(staged_buffer(st.target), self._band_index(st.target, f"({step} + {1 - dt_min} - {tau0})", its, shifts),
                        k.Space.STACK)
            slots = self.ir.field(st.target).slots
            dst = k.Ref(f"{field_name(st.target)}_buf", f"{ring_slot(step, 1, slots)} * V + "
                                                        f"{global_index(its, (0,) * self.ir.ndim)}")
            copies.append(k.Copy(dst, src, tuple(its), tuple(region)))
        depth = self.schedule.schedule.time_depth
        return [k.Loop(step, tau0, f"{step} < msc_imin(T, {tau0} + {depth})", k.Block(tuple(copies)))]

    def _cached_levels(self, statements: set[str] | None) -> list[tuple[str, int | None]]:
        levels = set()
        for st in self.poly.statements:
            if st.stmt is not None and (statements is None or st.name in statements):
                levels |= {(a.name, a.dt) for a in st.stmt.reads if a.name in self.schedule.schedule.cached_reads}
        return sorted(levels, key=lambda v: (v[0], v[1] if v[1] is not None else -99))


def _plus(n: int) -> str:
    """`+ n` or `- |n|`, to follow a term."""
    return f"+ {n}" if n >= 0 else f"- {-n}"


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
