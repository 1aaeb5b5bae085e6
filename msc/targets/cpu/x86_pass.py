"""x86 passes: whole aligned cache-line stores, streaming stores, prefetches.

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
prefetch of each field level's leading access d points ahead.
"""

from __future__ import annotations

from dataclasses import replace

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


def _prefetches(st: k.Assign, base: tuple[ix.Expr, ...], distance: int) -> list[k.Node]:
    """For each field level the statement reads from memory, its leading
    access (the largest offset, furthest ahead in row-major order), `distance` points ahead."""
    if not distance:
        return []
    leading: dict[tuple[str, int | None], tuple[int, ...]] = {}
    for read, ref in st.loads:
        if ref.space == k.Space.GLOBAL:
            key = (read.name, read.dt)
            leading[key] = max(leading.get(key, read.offsets), read.offsets)
    return [k.Call("__builtin_prefetch", (k.Address(k.Ref(array_name(f, dt), global_index(base, offsets) + distance)),))
            for (f, dt), offsets in leading.items()]


def _in_lines(loop: k.Loop, end: ix.Expr, distance: int, streaming: bool) -> k.Node:
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
    scalar = k.Block((st,))
    if streaming:
        into_line = replace(st, lhs=k.Ref(LINE_BUFFER, it - base_point, k.Space.STACK))
        buffer: tuple[k.Node, ...] = (k.Buffer(LINE_BUFFER, k.Space.STACK, (LINE,), align=64),)
        put: tuple[k.Node, ...] = (
            k.Call("msc_put_line", (k.Address(st.lhs.substituted(at_base)), ix.Var(LINE_BUFFER))),)
    else:
        into_line, buffer, put = st, (), ()
    lines = k.Loop(loop.iterator, None, last, k.Block((
        *buffer,
        k.Decl(LINE_BASE, "index", it),
        *_prefetches(st, base, distance),
        k.Loop(loop.iterator, base_point, it.lt(base_point + LINE), k.Block((into_line,)), vector=True),
        *put,
    )), step=LINE)
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

    return k.Block((k.Decl(loop.iterator, "index", loop.init, const=False), k.If(
        last,
        k.Block((
            k.If(aligned.not_(), edge(it, aligned.not_())),
            lines,
            k.If(loop.cond, edge(end - LINE, loop.cond)),
        )),
        k.Block((k.Loop(loop.iterator, None, loop.cond, scalar),)),
    )), scoped=True)


def line_stores(kernel: k.Kernel, poly: PolyIR, lowered: LoweredSchedule) -> tuple[k.Kernel, bool]:
    """`kernel` with the loop of `line_dim` in whole lines where its body is
    one statement storing to its field; and whether line stores are used."""
    dim = line_dim(poly, lowered)
    if dim is None:
        return kernel, False
    distance, streaming = lowered.schedule.prefetch_distance, lowered.schedule.streaming

    def rewrite(node: k.Node) -> k.Node:
        if (isinstance(node, k.Loop) and node.dim == dim and not node.degenerate and node.step == ix.Lit(1)
                and len(node.body.body) == 1 and isinstance(node.body.body[0], k.Assign)
                and node.body.body[0].lhs.space == k.Space.GLOBAL):
            end = node.end()  # None: left as it is (isl prints every loop's condition as a bound)
            return node if end is None else _in_lines(node, end, distance, streaming)
        return node

    return k.transform_kernel(kernel, rewrite), True


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
