"""x86 passes: whole aligned cache-line stores, streaming stores, prefetches,
and rows jammed into their line loop.

The innermost loop along the last dimension (when it is not work-shared,
unrolled or dependence-carrying, and its body is one statement storing to
its field) becomes a peel up to the first aligned store, then MSC_LINE
points at a time stored straight into the aligned line (streaming:
computed into an aligned line buffer and put out with one streaming store),
then a rest. The peel and the rest are computed as one whole line each
(the row's first and last MSC_LINE points, in vector lanes) and store only
their own points. Streamed stores
are weakly ordered: a fence drains them at the end of each work-shared
iteration and of the kernel. `prefetch(d)` issues, once per line, a
prefetch of each field level's leading access d points ahead. A loop
unrolled around a row loop runs its rows side by side, a line of each in
turn (`_jammed`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen.lower import array_name, global_index
from msc.errors import ScheduleError
from msc.poly import PolyIR
from msc.poly.schedule import LARGE_READS, LoweredSchedule, carried_example

LINE = ix.Var("MSC_LINE")  # points per 64-byte line
LINE_BUFFER = "msc_line"
LINE_BASE = "msc_base"
EDGE_BUFFER = "msc_edge"  # a row's first or last MSC_LINE points, computed whole
EDGE_FROM = "msc_from"  # the point at which the edge buffer starts


def _row_loop(poly: PolyIR, lowered: LoweredSchedule, explain: bool) -> tuple[int, str | None]:
    """The innermost loop, and why it is not a private row loop (None: it is
    one): running along the last (unit-stride) dimension, not shared among
    threads or unrolled, and carrying no dependence. `explain`: name the
    dependence carried (isl work only a message needs)."""
    stencil = poly.ir
    last = stencil.dims[-1]
    innermost = max(k_ for k_, n in enumerate(lowered.names) if n)
    problem = None
    if lowered.names[innermost] != last:
        problem = (f"the innermost loop runs along {lowered.names[innermost]!r}, but whole cache lines "
                   f"run only along the last dimension {last!r}; keep {last!r} innermost")
    elif innermost == lowered.parallel_dim:
        hint = f"tile({last}=4096)" if stencil.ndim == 1 else "parallel() on an outer loop"
        problem = f"the innermost loop {last!r} is shared among threads; use {hint} so that each thread runs whole rows"
    elif innermost in lowered.unroll:
        problem = f"loop {last!r} is unrolled; it already runs in whole cache lines"
    elif innermost not in lowered.parallel_dims:
        example = carried_example(poly, lowered, innermost) if explain else "of a statement"
        problem = f"loop {last!r} carries the dependence {example}"
    return innermost, problem


def row_dim(poly: PolyIR, lowered: LoweredSchedule) -> int | None:
    """The schedule dimension of the private row loop (`_row_loop`), if there is one."""
    innermost, problem = _row_loop(poly, lowered, explain=False)
    return innermost if problem is None else None


def column_dim(poly: PolyIR, lowered: LoweredSchedule) -> int | None:
    """The schedule dimension of the loop along the next-to-last space dimension (y in 3D) when it
    carries no dependence and is not shared among threads: row sums may keep column sums across
    its iterations (msc/codegen/row_sums.py)."""
    name = poly.ir.dims[-2] if poly.ir.ndim >= 3 else None
    dim = lowered.names.index(name) if name in lowered.names else None
    return dim if dim is not None and dim in lowered.parallel_dims and dim != lowered.parallel_dim else None


def line_dim(poly: PolyIR, lowered: LoweredSchedule) -> int | None:
    """The loop written in whole aligned cache lines: the private row loop
    (`_row_loop`); for a large stencil (LARGE_READS) only when asked for.
    stream_stores() and prefetch() need it and say which condition fails."""
    needs = [name for name, on in (("stream_stores", lowered.schedule.streaming),
                                   ("prefetch", lowered.schedule.prefetch_distance > 0)) if on]
    if not needs and max(len(s.reads) for s in poly.ir.statements) >= LARGE_READS:
        return None  # a large stencil is compute-bound: one copy of its statement compiles much faster
    innermost, problem = _row_loop(poly, lowered, explain=bool(needs))
    if problem is None:
        return innermost
    if needs:
        raise ScheduleError(f"{needs[0]}: {problem}")
    return None


@dataclass(frozen=True)
class _Lines:
    """How rows run in lines: `distance` points ahead to prefetch (0: none), `streaming` stores,
    and the reads from memory of the statement that computes each field (`memory_reads`)."""

    distance: int
    streaming: bool
    memory_reads: dict[str, tuple[ir.FieldRead, ...]]


def _memory_reads(poly: PolyIR, lowered: LoweredSchedule) -> dict[str, tuple[ir.FieldRead, ...]]:
    """Each statement's reads of fields not staged in a cache (cache_read), by the field it computes: what
    its rows read from memory, including the rows the row sums read before the points (msc/codegen/row_sums.py)."""
    staged = set(lowered.schedule.cached_reads)
    return {s.target: tuple(r for r in s.reads if r.name not in staged) for s in poly.ir.statements}


def _prefetches(st: k.Assign, base: tuple[ix.Expr, ...], lines: _Lines) -> list[k.Node]:
    """For each field level the statement reads from memory, its leading
    access (the largest offset, furthest ahead in row-major order), `distance` points ahead."""
    if not lines.distance:
        return []
    leading: dict[tuple[str, int | None], tuple[int, ...]] = {}
    for read in lines.memory_reads[st.field]:
        key = (read.name, read.dt)
        leading[key] = max(leading.get(key, read.offsets), read.offsets)
    return [k.Call("__builtin_prefetch",
                   (k.Address(k.Ref(array_name(f, dt), global_index(base, offsets) + lines.distance)),))
            for (f, dt), offsets in leading.items()]


@dataclass(frozen=True)
class _Row:
    """A row loop in whole lines, in pieces: its iterator's declaration, the test that
    a whole line is left, the peel up to the first aligned line, the body of one line
    (the iterator at its first point), the rest after the last whole line, and the row
    point by point (for a row shorter than a line)."""

    start: k.Decl
    whole_line: ix.Expr
    peel: k.If
    line: k.Block
    rest: k.If
    points: k.Loop


def _row(loop: k.Loop, end: ix.Expr, lines: _Lines) -> _Row:
    """`loop`, which ends before `end`, as a peel, whole aligned lines and a
    rest. An ordinary line is stored straight into the field: a line buffer
    copied out through a 64-byte vector type compiles, without AVX-512, to
    scalar reloads that cost 1.2-1.7x on time tiles (ADR 0014). A streamed
    line goes through the buffer, which the streaming store takes whole.

    In a row of at least a line, the peel and the rest are each one line
    computed in vector lanes into an edge buffer (the row's first and last
    MSC_LINE points), from which they store their own points; a shorter row
    runs point by point. Point by point, a 256-point row's peel and rest (14
    points) cost heat3d's streamed sweeps 1.17-1.3x (ADR 0014, second
    revision). No point is stored twice, and the row loop carries no
    dependence, so a point computed early reads what it would have read."""
    st = loop.body.body[0]
    assert isinstance(st, k.Assign) and loop.init is not None and loop.cond is not None
    it, base_point = ix.Var(loop.iterator), ix.Var(LINE_BASE)
    at_base = {loop.iterator: base_point}
    base = tuple(ix.substitute(c, at_base) for c in st.coords)
    last = ix.substitute(loop.cond, {loop.iterator: it + LINE - 1})
    aligned = ix.Call("msc_line_aligned", (k.Address(st.lhs),))
    if lines.streaming:
        into_line = replace(st, lhs=k.Ref(LINE_BUFFER, it - base_point, k.Space.STACK))
        buffer: tuple[k.Node, ...] = (k.Buffer(LINE_BUFFER, k.Space.STACK, (LINE,), align=64),)
        put: tuple[k.Node, ...] = (
            k.Call("msc_put_line", (k.Address(st.lhs.substituted(at_base)), ix.Var(LINE_BUFFER))),)
    else:
        into_line, buffer, put = st, (), ()
    line = k.Block((
        *buffer,
        k.Decl(LINE_BASE, "index", it),
        *_prefetches(st, base, lines),
        k.Loop(loop.iterator, base_point, it.lt(base_point + LINE), k.Block((into_line,)), vector=True),
        *put,
    ))
    edge_from = ix.Var(EDGE_FROM)
    into_edge = replace(st, lhs=k.Ref(EDGE_BUFFER, it - edge_from, k.Space.STACK))
    from_edge = k.Block((k.Store(st.lhs, k.Load(k.Ref(EDGE_BUFFER, it - edge_from, k.Space.STACK))),))

    def edge(first: ix.Expr, stores_while: ix.Expr) -> k.Block:
        """The line of points from `first` computed into an edge buffer; the row's points
        from the iterator on stored from it while `stores_while`."""
        return k.Block((
            k.Buffer(EDGE_BUFFER, k.Space.STACK, (LINE,), align=64),
            k.Decl(EDGE_FROM, "index", first),
            k.Loop(loop.iterator, edge_from, it.lt(edge_from + LINE), k.Block((into_edge,)), vector=True),
            k.Loop(loop.iterator, None, stores_while, from_edge),
        ))  # the body of an `if`, whose braces scope the buffer

    return _Row(k.Decl(loop.iterator, "index", loop.init, const=False), last,
                k.If(aligned.not_(), edge(it, aligned.not_())), line, k.If(loop.cond, edge(end - LINE, loop.cond)),
                k.Loop(loop.iterator, None, loop.cond, k.Block((st,))))


def _in_lines(loop: k.Loop, end: ix.Expr, lines: _Lines) -> k.Node:
    """One row loop in whole lines (`_row`)."""
    row = _row(loop, end, lines)
    whole = k.Loop(loop.iterator, None, row.whole_line, row.line, step=LINE)
    return k.Block((row.start, k.If(row.whole_line, k.Block((row.peel, whole, row.rest)), k.Block((row.points,)))),
                   scoped=True)


def _jammed(outer: k.Loop, loop: k.Loop, end: ix.Expr, lines: _Lines) -> k.Node:
    """`outer` unrolled by its factor and jammed into its row loop `loop` (which ends before `end`, whatever
    row it runs): the rows side by side, a line of each per iteration, so that each core has as many streams
    from memory in flight as rows (2D streamed sweeps, 2 rows: 1.2-1.3x; ADR 0014, jammed rows). Rows
    start their aligned lines at different points, so each has its own iterator: after their peels, the
    rows run lines together while each has one, then each its lines left (one at most) and its rest. The
    rows that do not fill a group run one by one."""
    st = loop.body.body[0]
    assert isinstance(st, k.Assign) and loop.cond is not None and outer.init is not None and outer.cond is not None
    at = ix.Var(outer.iterator)
    rows = []
    for j in range(outer.unroll):
        name = ix.Var(loop.iterator if j == 0 else f"{loop.iterator}_{j}")
        values = {outer.iterator: at + j, loop.iterator: name}
        shifted = replace(st, lhs=st.lhs.substituted(values), coords=tuple(ix.substitute(c, values) for c in st.coords),
                          loads=tuple((read, ref.substituted(values)) for read, ref in st.loads))
        rows.append(_row(replace(loop, iterator=name.name, cond=ix.substitute(loop.cond, {loop.iterator: name}),
                                 body=k.Block((shifted,))), end, lines))
    together = rows[0].whole_line
    for row in rows[1:]:
        together = together.and_(row.whole_line)
    side_by_side = k.Loop(rows[0].start.name, None, together, k.Block((
        *(k.Block(row.line.body, scoped=True) for row in rows),
        *(k.Set(row.start.name, LINE, "+=") for row in rows[1:]))), step=LINE)
    left = [k.Loop(row.start.name, None, row.whole_line, row.line, step=LINE) for row in rows]
    group = k.Block((*(row.start for row in rows), k.If(
        rows[0].whole_line,
        k.Block((*(row.peel for row in rows), side_by_side, *left, *(row.rest for row in rows))),
        k.Block(tuple(row.points for row in rows)))), scoped=True)
    factor = outer.unroll
    full = ix.substitute(outer.cond, {outer.iterator: at + (factor - 1)})
    one = replace(outer, init=None, unroll=0, body=k.Block((_in_lines(loop, end, lines),)))
    return k.Block((k.Decl(outer.iterator, "index", outer.init, const=False),
                    replace(outer, init=None, cond=full, step=ix.Lit(factor), unroll=0, body=k.Block((group,))),
                    one), scoped=True)


def _is_row(node: k.Node, dim: int) -> bool:
    """A loop of the line dimension whose body is one statement storing to its field."""
    return (isinstance(node, k.Loop) and node.dim == dim and not node.degenerate and node.step == ix.Lit(1)
            and len(node.body.body) == 1 and isinstance(node.body.body[0], k.Assign)
            and node.body.body[0].lhs.space == k.Space.GLOBAL)


def line_stores(kernel: k.Kernel, poly: PolyIR, lowered: LoweredSchedule) -> tuple[k.Kernel, bool]:
    """`kernel` with the loop of `line_dim` in whole lines where its body is
    one statement storing to its field; and whether line stores are used."""
    dim = line_dim(poly, lowered)
    if dim is None:
        return kernel, False
    lines = _Lines(lowered.schedule.prefetch_distance, lowered.schedule.streaming, _memory_reads(poly, lowered))

    def jam(node: k.Node) -> k.Node:
        """An unrolled loop around one row loop whose bounds do not depend on it: jammed (`_jammed`)."""
        if not (isinstance(node, k.Loop) and node.unroll > 1 and not node.degenerate and node.step == ix.Lit(1)
                and node.end() is not None and len(node.body.body) == 1 and _is_row(node.body.body[0], dim)):
            return node
        row = node.body.body[0]
        assert isinstance(row, k.Loop) and row.init is not None and row.cond is not None
        end = row.end()
        if end is None or node.iterator in ix.variables(row.init) | ix.variables(row.cond):
            return node
        return _jammed(node, row, end, lines)

    def rewrite(node: k.Node) -> k.Node:
        if _is_row(node, dim):
            end = node.end()  # None: left as it is (isl prints every loop's condition as a bound)
            return node if end is None else _in_lines(node, end, lines)
        return node

    return k.transform_kernel(k.transform_kernel(kernel, jam), rewrite), True


def stream_fences(kernel: k.Kernel) -> k.Kernel:
    """A fence after each iteration of the work-shared loop (before its barrier
    lets other threads read) and at the end of the kernel."""
    fence = k.Call("msc_stream_fence")

    def add(node: k.Node) -> k.Node:
        if isinstance(node, k.Loop) and node.parallel:
            return replace(node, body=k.Block((*node.body.body, fence)))
        return node

    out = k.transform_kernel(kernel, add)
    return replace(out, body=k.Block((*out.body.body, fence)))
