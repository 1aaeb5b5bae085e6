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

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen.lower import global_index
from msc.ir.counts import expr_flops
from msc.ir.linear import NonLinearError, linear_form

ROW_STRIP = 512  # points per strip: two sums of doubles fill 8 KiB of the L1 cache
# the accesses (loads and stores per point) the pass may leave in a sweep: box2d9p's 7 of 9 ran 1.3x slower
# when memory-bound; inside its time tiles (in cache) they ran 1.25x faster (4096^2, time_tile(8, x=32))
MOST_ACCESSES = 0.75
STRIP = "msc_strip"
BUFFER = "msc_rowsum"

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
        """The sum of the rows at shift 0, each weighed by its factor (rows of one factor summed first)."""
        by_factor: dict[float, list[ir.Expr]] = defaultdict(list)
        for row, f in zip(self.rows, self.factors):
            by_factor[f].append(ir.FieldRead(self.level[0], self.level[1], row + (0,)))
        return _sum([_sum(reads) if f == 1.0 else ir.BinOp("*", ir.Const(f), _sum(reads))
                     for f, reads in by_factor.items()])

    @property
    def low(self) -> int:
        return min(s for s, _ in self.shifts)

    @property
    def high(self) -> int:
        return max(s for s, _ in self.shifts)


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
    if ref.index == global_index(coords, read.offsets):
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
        """Flops per point: the sums' and the point's expressions."""
        return sum(expr_flops(g.total()) for g in self.groups) + expr_flops(self.point())


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
           end: ix.Expr) -> k.Block:
    """`loop` cut into strips; per strip, each group's sums, then the points from them."""
    it, strip = ix.Var(loop.iterator), ix.Var(STRIP)
    assert loop.init is not None
    buffers: list[k.Node] = []
    sums: dict[tuple[int, int], list[k.Node]] = defaultdict(list)  # by the range of points summed
    loads: dict[ir.FieldRead, k.Ref] = {}
    for n, group in enumerate(grouping.groups):
        buffer = f"{BUFFER}{n}"
        buffers.append(k.Buffer(buffer, k.Space.STACK, (ROW_STRIP + group.high - group.low,), align=64))
        name, dt = group.level
        row_reads = [ir.FieldRead(name, dt, row + (0,)) for row in group.rows]
        at = it - (strip + group.low)
        sums[(group.low, group.high)].append(k.Assign(
            k.Ref(buffer, at, k.Space.STACK), group.total(),
            tuple((r, rows[(group.level, r.offsets[:-1])]) for r in row_reads), st.field, st.coords))
        for shift, _ in group.shifts:
            loads[ir.FieldRead(buffer, None, (shift,))] = k.Ref(buffer, at + shift, k.Space.STACK)
    # the sums at every point some point of the strip reads them
    sum_loops = [k.Loop(loop.iterator, strip + low, it.lt(ix.min_(strip + (ROW_STRIP + high), end + high)),
                        k.Block(tuple(assigns)), vector=True) for (low, high), assigns in sums.items()]
    rhs = grouping.point()
    used = set(ir.reads_of(rhs))
    loads.update((read, ref) for read, ref in st.loads if read in used)
    points = replace(loop, init=strip, cond=it.lt(ix.min_(strip + ROW_STRIP, end)),
                     body=k.Block((replace(st, rhs=rhs, loads=tuple(loads.items())),)))
    strips = k.Loop(STRIP, loop.init, strip.lt(end), k.Block((*sum_loops, points)), step=ix.Lit(ROW_STRIP))
    return k.Block((*buffers, strips), scoped=True)


def row_sums(kernel: k.Kernel, dim: int, in_cache: bool) -> k.Kernel:
    """`kernel` with every loop over schedule dimension `dim` (the innermost,
    along the last space dimension, private to a thread and free of carried
    dependences) whose body is one statement planned by `_plan` computed from
    row sums; `in_cache`: the loop runs inside a time tile."""

    def rewrite(node: k.Node) -> k.Node:
        if not (isinstance(node, k.Loop) and node.dim == dim and not node.degenerate and node.step == ix.Lit(1)
                and node.init is not None and len(node.body.body) == 1 and isinstance(node.body.body[0], k.Assign)):
            return node
        st = node.body.body[0]
        if st.coords[-1] != ix.Var(node.iterator) or any(node.iterator in ix.variables(c) for c in st.coords[:-1]):
            return node
        end = node.end()
        plan = None if end is None else _plan(st, in_cache)
        return node if plan is None or end is None else _strip(node, st, *plan, end)

    return k.transform_kernel(kernel, rewrite)
