"""Row sums: the neighbour rows a linear stencil weighs alike, summed once per point of a row.

A statement's reads of one field level, seen from its innermost loop along
the last (unit-stride) dimension, are rows (the leading offsets) read at
shifts (the last offset). When several rows carry the same coefficients at
every shift, as in a box stencil whose weights depend on the distance class
only, or coefficients in one proportion at every shift (literals: f times
the first row's, exactly, as in a separable stencil), their sum, each row
weighed by its f, is the same whichever point of the row needs it. This
pass sums such a group of rows once per point into a stack buffer and lets
each point read the sums at its shifts; the reads left over are weighed
directly, and terms of equal coefficient share one product.

box3d27p's 27 loads and 53 flops per point become 9 row loads, 8 adds and 2
products into one sum (its rows' weights along z are one pattern, [1, 2, 1]
times 1/64, 1/32 or 1/16: corner, face and centre rows), then 3 loads and 4
flops (it was two sums of 4 rows each, the centre row weighed directly: 17
loads and 18 flops). The row is cut into strips of ROW_STRIP points so that
the sums stay in the first-level cache.

When a group's rows are a product, columns (the leading offsets but the
last) times offsets along the next-to-last dimension (y), each row's factor
a column's times an offset's, exactly (box3d27p: [1, 2, 1] times [1, 2,
1]), and the loop around the row loop runs along y, private to a thread and
carrying no dependence, the group's sum at y is the offsets' weighed sum of
column sums (the columns' weighed sum at one y), and each column sum is
made once for every y and kept in a ring of a slot per offset: box3d27p's
9 row loads per sum become 3 loads into the ring, 3 ring loads and one
store (256^3, 2 threads: its sweeps ran 1.05-1.25x faster, its pipelined
time tiles 1.06-1.13x; ADR 0053). The strips then run outside the y loop,
and each strip fills its rings afresh where the y loop starts.

The order of additions changes, so results may differ from the user's
order in the last bits, as with any reassociation. In a sweep, whose levels
come from memory, the pass applies only where it saves a quarter of the
accesses (MOST_ACCESSES); inside a time tile, whose levels stay in cache,
wherever it saves any. It applies only to the summands of a statement that
are linear, with constant coefficients (literals and scalar parameters), in
reads straight from the arrays (ADR 0053).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from functools import cached_property

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen.lower import array_name, global_index
from msc.ir.counts import expr_flops
from msc.ir.linear import NonLinearError, linear_form

ROW_STRIP = 512  # points per strip: two sums of doubles fill 8 KiB of the L1 cache
# the accesses (loads and stores per point) the pass may leave in a sweep: box2d9p's 7 of 9 ran 1.3x slower
# when memory-bound; inside its time tiles (in cache) they ran 1.25x faster (4096^2, time_tile(8, x=32))
MOST_ACCESSES = 0.75
STRIP = "msc_strip"
BUFFER = "msc_rowsum"
RING = "msc_ring"  # a group's column sums, a slot of a strip per offset along y
RING_FROM = "msc_ring_from"  # where the y loop starts: its first slot

Level = tuple[str, "int | None"]  # a field and its time offset
Shifts = tuple[tuple[int, ir.Expr], ...]  # (last offset, coefficient) of one row, by offset


@dataclass(frozen=True)
class _Group:
    """Rows of one field level weighed alike: `rows` (leading offsets) at `shifts`, each row's
    coefficients its factor times those."""

    level: Level
    rows: tuple[tuple[int, ...], ...]
    shifts: Shifts
    factors: tuple[float, ...]

    def total(self) -> ir.Expr:
        """The sum of the rows at shift 0, each weighed by its factor."""
        return _weighed([(f, ir.FieldRead(self.level[0], self.level[1], row + (0,)))
                         for row, f in zip(self.rows, self.factors)])

    def flops(self) -> int:
        """Flops per point of the sum: from column sums kept in a ring where the group allows."""
        ring = self.ring
        if ring is None:
            return expr_flops(self.total())
        return expr_flops(ring.column(self.level, 0)) + expr_flops(ring.total(RING))

    @cached_property
    def ring(self) -> _Ring | None:
        """The group as column sums kept in a ring, where its rows are a product (columns times
        offsets along y, each row's factor a column's times an offset's, exactly) and the ring
        saves loads; None otherwise."""
        if len(self.rows[0]) < 2:
            return None
        factor = dict(zip(self.rows, self.factors))
        columns = sorted({row[:-1] for row in self.rows})
        offsets = sorted({row[-1] for row in self.rows})
        if offsets != list(range(offsets[0], offsets[-1] + 1)) or len(factor) != len(columns) * len(offsets) \
                or any((*c, o) not in factor for c in columns for o in offsets):
            return None
        across = tuple(factor[(*c, offsets[0])] for c in columns)
        along = tuple(factor[(*columns[0], o)] / across[0] for o in offsets)
        if any(factor[(*c, o)] != a * g for c, a in zip(columns, across) for o, g in zip(offsets, along)):
            return None
        if len(columns) + len(offsets) + 1 >= len(self.rows):  # loads into the ring, from it, its store
            return None
        return _Ring(tuple(columns), across, tuple(offsets), along)

    @property
    def low(self) -> int:
        return min(s for s, _ in self.shifts)

    @property
    def high(self) -> int:
        return max(s for s, _ in self.shifts)


@dataclass(frozen=True)
class _Ring:
    """A group's rows as `columns` (leading offsets but the last) weighed by `across`, at `offsets`
    along y weighed by `along`: the sum at y is sum(along[j] * column_sum(y + offsets[j]))."""

    columns: tuple[tuple[int, ...], ...]
    across: tuple[float, ...]
    offsets: tuple[int, ...]
    along: tuple[float, ...]

    @property
    def slots(self) -> int:
        return self.offsets[-1] - self.offsets[0] + 1

    def slot(self, offset: int, y: ix.Expr) -> ix.Expr:
        """The slot of the column sum at y + `offset` (the ring's first at the y loop's start)."""
        return (y - ix.Var(RING_FROM) + (offset - self.offsets[0])) % self.slots

    def column(self, level: Level, offset: int) -> ir.Expr:
        """The column sum at y + `offset`: its columns' rows at shift 0, weighed."""
        return _weighed([(a, ir.FieldRead(*level, (*c, offset, 0))) for c, a in zip(self.columns, self.across)])

    def total(self, buffer: str) -> ir.Expr:
        """The group's sum from the column sums in `buffer`, each read as FieldRead(buffer, None, (offset,))."""
        return _weighed([(g, ir.FieldRead(buffer, None, (o,))) for o, g in zip(self.offsets, self.along)])


@dataclass(frozen=True)
class _Slots:
    """Group's ring `ring` in stack buffer `buffer`: a strip of `width` points per slot, point `at`
    of the strip, along y the loop of iterator `y`."""

    buffer: str
    ring: _Ring
    y: str
    width: int
    at: ix.Expr

    def column(self, offset: int, st: k.Assign, level: Level, first: bool = False) -> k.Assign:
        """The column sum at y + `offset` (its columns' rows weighed, read from the level's array
        whether the statement reads them through row pointers or not) into its slot; `first`: at the
        y loop's start (`RING_FROM`)."""
        column = self.ring.column(level, offset)
        coords = tuple(ix.Var(RING_FROM) if first and c == ix.Var(self.y) else c for c in st.coords)
        loads = tuple((r, k.Ref(array_name(*level), global_index(coords, r.offsets))) for r in ir.reads_of(column))
        return k.Assign(self.ref(offset, first), column, loads, st.field, st.coords)

    def ref(self, offset: int, first: bool = False) -> k.Ref:
        """The column sum at y + `offset` (`first`: at the y loop's start)."""
        if first:
            start = (offset - self.ring.offsets[0]) * self.width
            return k.Ref(self.buffer, self.at + start if start else self.at, k.Space.STACK)
        return k.Ref(self.buffer, self.ring.slot(offset, ix.Var(self.y)) * self.width + self.at, k.Space.STACK)


def _weighed(terms: list[tuple[float, ir.Expr]]) -> ir.Expr:
    """The sum of `terms` (factor, expression), those of one factor summed first."""
    by_factor: dict[float, list[ir.Expr]] = defaultdict(list)
    for f, e in terms:
        by_factor[f].append(e)
    return _sum([_sum(es) if f == 1.0 else ir.BinOp("*", ir.Const(f), _sum(es)) for f, es in by_factor.items()])


def _sum(terms: list[ir.Expr]) -> ir.Expr:
    """A balanced sum (short dependence chains)."""
    if len(terms) == 1:
        return terms[0]
    mid = len(terms) // 2
    return ir.BinOp("+", _sum(terms[:mid]), _sum(terms[mid:]))


def _constant(e: ir.Expr) -> bool:
    """Free of field reads: the same at every point."""
    return not any(isinstance(n, ir.FieldRead) for n in ir.walk(e))


def _row_ref(ref: k.Ref, read: ir.FieldRead, coords: tuple[ix.Expr, ...]) -> k.Ref | None:
    """The element of `read`'s row at shift 0, when `ref` addresses a global
    array directly (a full index, or a row pointer plus the shift)."""
    if ref.space != k.Space.GLOBAL:
        return None
    if ref.array == array_name(read.name, read.dt) and ref.index == global_index(coords, read.offsets):
        return k.Ref(ref.array, global_index(coords, read.offsets[:-1] + (0,)))
    if ref.index == global_index(coords[-1:], read.offsets[-1:]):
        return k.Ref(ref.array, coords[-1])
    return None


@dataclass(frozen=True)
class _Grouping:
    """A statement as row sums: the groups summed into buffers, the reads weighed directly, the rest."""

    groups: tuple[_Group, ...]
    direct: tuple[tuple[ir.Expr, ir.FieldRead], ...]  # (coefficient, read) weighed directly
    rest: tuple[ir.Expr, ...]  # summands of the expression outside the linear form

    def point(self) -> ir.Expr:
        """The expression of a point: group `n`'s sum at shift s read as FieldRead(BUFFER + n, None, (s,))."""
        weighed: dict[ir.Expr, list[ir.Expr]] = defaultdict(list)
        for c, read in self.direct:
            weighed[c].append(read)
        for n, group in enumerate(self.groups):
            for shift, c in group.shifts:
                weighed[c].append(ir.FieldRead(f"{BUFFER}{n}", None, (shift,)))
        terms = [_sum(reads) if c == ir.Const(1.0) else ir.BinOp("*", c, _sum(reads)) for c, reads in weighed.items()]
        return _sum(terms + list(self.rest))

    def flops(self) -> int:
        """Flops per point: the sums' (from rings where a group allows: every 3D candidate the tuner
        offers keeps them) and the point's expressions."""
        return sum(g.flops() for g in self.groups) + expr_flops(self.point())


def _factor(shifts: Shifts, pattern: Shifts) -> float | None:
    """f with `shifts`' coefficients f times `pattern`'s at every shift (1 where they are the same
    expressions; otherwise literals, exactly in floating point), else None."""
    if shifts == pattern:
        return 1.0
    if [s for s, _ in shifts] != [s for s, _ in pattern] or \
            not all(isinstance(c, ir.Const) and c.value != 0.0 for _, c in shifts + pattern):
        return None
    values = [(c.value, p.value) for (_, c), (_, p) in zip(shifts, pattern)]  # type: ignore[union-attr]
    f = values[0][0] / values[0][1]
    return f if all(c == f * p for c, p in values) else None


def _grouping(rhs: ir.Expr, unknown: set[str], in_cache: bool) -> _Grouping | None:
    """How to compute `rhs` from row sums of the reads of `unknown` fields,
    or None where that would not save a quarter of the accesses (`in_cache`,
    inside a time tile: would not save any)."""
    terms: dict[tuple[str, int | None, tuple[int, ...]], ir.Expr] = {}
    rest: list[ir.Expr] = []
    for summand in ir.summands(rhs):
        try:
            form = linear_form(summand, unknown)
        except NonLinearError:
            form = None
        if form is None or not all(_constant(c) for c in form.terms.values()):
            rest.append(summand)
            continue
        for key, c in form.terms.items():
            terms[key] = ir.BinOp("+", terms[key], c) if key in terms else c
        if form.constant is not None and form.constant != ir.Const(0.0):
            rest.append(form.constant)
    by_row: dict[tuple[Level, tuple[int, ...]], list[tuple[int, ir.Expr]]] = defaultdict(list)
    for (name, dt, offsets), coefficient in terms.items():
        by_row[((name, dt), offsets[:-1])].append((offsets[-1], coefficient))
    alike: dict[tuple[Level, Shifts], list[tuple[tuple[int, ...], float]]] = {}  # by the first row's shifts
    for (level, row), shifts in by_row.items():
        ordered = tuple(sorted(shifts, key=lambda s: s[0]))
        for (other, pattern), members in alike.items():
            f = _factor(ordered, pattern) if other == level else None
            if f is not None:
                members.append((row, f))
                break
        else:
            alike[(level, ordered)] = [(row, 1.0)]
    groups, direct = [], []
    for (level, shifts), members in alike.items():
        if len(members) > 1 and len(shifts) > 1:
            groups.append(_Group(level, tuple(r for r, _ in members), shifts, tuple(f for _, f in members)))
        else:  # each row with its own coefficients
            direct += [(c, ir.FieldRead(level[0], level[1], row + (s,))) for row, _ in members
                       for s, c in by_row[(level, row)]]
    before = len(direct) + sum(len(g.rows) * len(g.shifts) for g in groups)
    after = len(direct) + sum(len(g.rows) + 1 + len(g.shifts) for g in groups)  # a sum: rows in, stored, read
    if not groups or after >= before or (not in_cache and after > MOST_ACCESSES * before):
        return None
    return _Grouping(tuple(groups), tuple(direct), tuple(rest))


def _plan(st: k.Assign, in_cache: bool) -> tuple[_Grouping, dict[tuple[Level, tuple[int, ...]], k.Ref]] | None:
    """The grouping of `st`'s direct global reads, and each row's element at shift 0."""
    rows: dict[tuple[Level, tuple[int, ...]], k.Ref] = {}
    unknown = {read.name for read, _ in st.loads}
    for read, ref in st.loads:
        row = _row_ref(ref, read, st.coords)
        if row is None:
            unknown.discard(read.name)
        else:
            rows[((read.name, read.dt), read.offsets[:-1])] = row
    grouping = _grouping(st.rhs, unknown, in_cache) if unknown else None
    return None if grouping is None else (grouping, rows)


def summed_flops(statement: ir.Statement, in_cache: bool) -> int:
    """Flops per point of `statement` once its rows are summed (as written, where the pass leaves it alone)."""
    grouping = _grouping(statement.expr, {read.name for read in statement.reads}, in_cache)
    return expr_flops(statement.expr) if grouping is None else grouping.flops()


def _strip(loop: k.Loop, st: k.Assign, grouping: _Grouping, rows: dict[tuple[Level, tuple[int, ...]], k.Ref],
           end: ix.Expr, around: k.Loop | None = None, pointers: tuple[k.Node, ...] = ()) -> k.Block:
    """`loop` cut into strips; per strip, each group's sums, then the points from them. `around`:
    the loop around `loop`, along y, when groups keep their column sums in rings (`_Group.ring`):
    the strips then run outside it, and each strip fills the rings before it; `pointers`: the row
    pointers `around` sets up before `loop`."""
    it, strip = ix.Var(loop.iterator), ix.Var(STRIP)
    assert loop.init is not None
    buffers: list[k.Node] = []
    sums: dict[tuple[int, int], list[k.Node]] = defaultdict(list)  # by the range of points summed
    fills: dict[tuple[int, int], list[k.Node]] = defaultdict(list)  # the rings' first slots, likewise
    loads: dict[ir.FieldRead, k.Ref] = {}
    for n, group in enumerate(grouping.groups):
        buffer = f"{BUFFER}{n}"
        width = ROW_STRIP + group.high - group.low
        buffers.append(k.Buffer(buffer, k.Space.STACK, (width,), align=64))
        at = it - (strip + group.low)
        ring = None if around is None else group.ring
        if ring is None:
            reads = [ir.FieldRead(*group.level, row + (0,)) for row in group.rows]
            total, bound = group.total(), [rows[(group.level, r.offsets[:-1])] for r in reads]
        else:
            assert around is not None
            slots = _Slots(f"{RING}{n}", ring, around.iterator, width, at)
            buffers.append(k.Buffer(slots.buffer, k.Space.STACK, (ring.slots * width,), align=64))
            fills[(group.low, group.high)] += [slots.column(offset, st, group.level, first=True)
                                               for offset in ring.offsets[:-1]]
            sums[(group.low, group.high)].append(slots.column(ring.offsets[-1], st, group.level))
            total = ring.total(slots.buffer)
            reads = ir.reads_of(total)
            bound = [slots.ref(r.offsets[0]) for r in reads]
        sums[(group.low, group.high)].append(k.Assign(k.Ref(buffer, at, k.Space.STACK), total,
                                                      tuple(zip(reads, bound)), st.field, st.coords))
        for shift, _ in group.shifts:
            loads[ir.FieldRead(buffer, None, (shift,))] = k.Ref(buffer, at + shift, k.Space.STACK)

    def over_strip(low: int, high: int, assigns: list[k.Node]) -> k.Loop:
        """`assigns` at every point some point of the strip reads them."""
        return k.Loop(loop.iterator, strip + low, it.lt(ix.min_(strip + (ROW_STRIP + high), end + high)),
                      k.Block(tuple(assigns)), vector=True)

    rhs = grouping.point()
    used = set(ir.reads_of(rhs))
    loads.update((read, ref) for read, ref in st.loads if read in used)
    points = replace(loop, init=strip, cond=it.lt(ix.min_(strip + ROW_STRIP, end)),
                     body=k.Block((replace(st, rhs=rhs, loads=tuple(loads.items())),)))
    strip_body: tuple[k.Node, ...] = (*(over_strip(*r, a) for r, a in sums.items()), points)
    if around is None:
        return k.Block((*buffers, k.Loop(STRIP, loop.init, strip.lt(end), k.Block(strip_body),
                                         step=ix.Lit(ROW_STRIP))), scoped=True)
    assert around.init is not None and around.cond is not None
    read = {ref.array for n in k.walk(k.Block(strip_body)) if isinstance(n, k.Assign) for _, ref in n.loads}
    pointers = tuple(p for p in pointers if isinstance(p, k.Decl) and p.name in read)  # those the rings leave
    strip_body = (*(over_strip(*r, a) for r, a in fills.items()),
                  replace(around, body=k.Block((*pointers, *strip_body), scoped=bool(pointers))))
    strips = k.Loop(STRIP, loop.init, strip.lt(end), k.Block(strip_body), step=ix.Lit(ROW_STRIP))
    runs = ix.substitute(around.cond, {around.iterator: ix.Var(RING_FROM)})  # the rings read rows only then
    return k.Block((*buffers, k.Decl(RING_FROM, "index", around.init), k.If(runs, k.Block((strips,)))),
                   scoped=True)


def _row_loop(node: k.Node, dim: int) -> k.Assign | None:
    """The statement of `node` when it is a row loop the pass may cut into strips: over schedule
    dimension `dim` from a known start in steps of one, its body one statement along it."""
    if not (isinstance(node, k.Loop) and node.dim == dim and not node.degenerate and node.step == ix.Lit(1)
            and node.init is not None and len(node.body.body) == 1 and isinstance(node.body.body[0], k.Assign)):
        return None
    st = node.body.body[0]
    if st.coords[-1] != ix.Var(node.iterator) or any(node.iterator in ix.variables(c) for c in st.coords[:-1]):
        return None
    return st


def _inside(loop: k.Loop) -> tuple[tuple[k.Node, ...], k.Node] | None:
    """The one node `loop` runs and the row pointers it sets up before it (a scoped block of
    pointers, then the node), or None when its body is more than that."""
    body = loop.body.body
    if len(body) != 1:
        return None
    if not (isinstance(body[0], k.Block) and body[0].scoped):
        return (), body[0]
    if not body[0].body:
        return None
    *pointers, last = body[0].body
    return (tuple(pointers), last) if all(isinstance(p, k.Decl) for p in pointers) else None


def row_sums(kernel: k.Kernel, dim: int, in_cache: bool, ring_dim: int | None = None) -> k.Kernel:
    """`kernel` with every loop over schedule dimension `dim` (the innermost,
    along the last space dimension, private to a thread and free of carried
    dependences) whose body is one statement planned by `_plan` computed from
    row sums; `in_cache`: the loop runs inside a time tile. `ring_dim`: the
    schedule dimension along y when it carries no dependence and is not
    shared among threads: a loop over it around a row loop keeps column sums
    in rings where a group allows (`_Group.ring`)."""

    def strips(node: k.Node, around: k.Loop | None = None, pointers: tuple[k.Node, ...] = ()) -> k.Node | None:
        st = _row_loop(node, dim)
        end = None if st is None else node.end()
        plan = None if st is None or end is None else _plan(st, in_cache)
        if plan is None or end is None or st is None:
            return None
        if around is not None:
            y = around.iterator
            if st.coords[-2] != ix.Var(y) or any(y in ix.variables(e) for e in (node.init, end)) or \
                    not any(group.ring for group in plan[0].groups):
                return None
        assert isinstance(node, k.Loop)
        return _strip(node, st, *plan, end, around, pointers)

    def rewrite(node: k.Node) -> k.Node:
        if isinstance(node, k.Block):
            return replace(node, body=tuple(rewrite(n) for n in node.body))
        if isinstance(node, k.If):
            otherwise = None if node.otherwise is None else rewrite(node.otherwise)
            return replace(node, then=rewrite(node.then), otherwise=otherwise)
        if not isinstance(node, k.Loop):
            return node
        if ring_dim is not None and node.dim == ring_dim and node.step == ix.Lit(1) and node.init is not None \
                and not node.degenerate and not node.parallel and not node.unroll:
            inside = _inside(node)
            ringed = None if inside is None else strips(inside[1], around=node, pointers=inside[0])
            if ringed is not None:
                return ringed
        return strips(node) or replace(node, body=rewrite(node.body))

    body = rewrite(kernel.body)
    assert isinstance(body, k.Block)
    return replace(kernel, body=body)
