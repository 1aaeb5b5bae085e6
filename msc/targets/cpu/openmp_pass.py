"""OpenMP loop mappings: the parallel loop is work-shared (`omp for`, with
`simd` when it is also the vector loop), a vector loop is `omp simd`. The
tiles of one wavefront of a time tile with two tiled dimensions are handed
out one at a time (`schedule(dynamic, 1)`): they differ in work (tiles cut
by the grid's edges), and a thread that the machine slows takes fewer; so
are the columns of a pipelined time tile, whose tiles wait point-to-point
(`pipeline_waits`)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from msc.codegen import index as ix
from msc.codegen import kernel_ir as k

# a C printer prints a mapping as `#pragma <mapping>`
FOR = "omp for schedule(static)"
FOR_SIMD = "omp for simd schedule(static)"
FOR_TILES = "omp for schedule(dynamic, 1)"
SIMD = "omp simd"


def _map(node: k.Node, tiles_dynamic: bool) -> k.Node:
    if not isinstance(node, k.Loop) or node.degenerate:
        return node
    if node.parallel:
        return replace(node, mapping=FOR_SIMD if node.vector else FOR_TILES if tiles_dynamic else FOR)
    if node.vector:
        return replace(node, mapping=SIMD)
    return node


def _work_shared(node: k.Node) -> bool:
    """An `omp for` loop (or a block ending with one): it ends with an implicit barrier."""
    if isinstance(node, k.Block) and node.body:
        return _work_shared(node.body[-1])
    return isinstance(node, k.Loop) and node.mapping in (FOR, FOR_SIMD, FOR_TILES)


def _implied_barriers(node: k.Node) -> k.Node:
    """Drop a barrier right after an `omp for` loop: the loop's implicit barrier is it."""
    if not isinstance(node, k.Block):
        return node
    body = tuple(n for i, n in enumerate(node.body)
                 if not (isinstance(n, k.Barrier) and i > 0 and _work_shared(node.body[i - 1])))
    return node if len(body) == len(node.body) else replace(node, body=body)


def map_loops(kernel: k.Kernel, tiles_dynamic: bool = False) -> k.Kernel:
    """`tiles_dynamic`: the parallel loop runs the tiles of a wavefront (FOR_TILES)."""
    return k.transform_kernel(k.transform_kernel(kernel, partial(_map, tiles_dynamic=tiles_dynamic)),
                              _implied_barriers)


#: the shared progress of a pipelined time tile's columns, declared by the kernel template before its
#: parallel region, and the helpers that read and publish it (templates/openmp_kernel.c.j2)
PROGRESS = (ix.Var("msc_done"), ix.Var("msc_columns"))


def pipeline_waits(kernel: k.Kernel, band_dim: int, column_dim: int) -> k.Kernel:
    """The point-to-point order of a pipelined time tile (Schedule.pipeline): the columns (loop
    `column_dim`, shared among threads one at a time, in order) run their tiles along the next loop in
    order; a tile first waits until the column before has finished the tiles up to its own place along it
    (unless it is the band's first column), and says when it is done; a column says when it has finished.
    Columns are claimed in order, so the one waited for is always running or done: no thread waits
    forever. The band (loop `band_dim`) stamps the progress, so a column never reads the band before's."""
    def visit(node: k.Node, band: ix.Expr | None, column: k.Loop | None) -> k.Node:
        if isinstance(node, k.Block):
            return replace(node, body=tuple(visit(n, band, column) for n in node.body))
        if isinstance(node, k.If):
            other = visit(node.otherwise, band, column) if node.otherwise is not None else None
            return replace(node, then=visit(node.then, band, column), otherwise=other)
        if not isinstance(node, k.Loop):
            return node
        band = ix.Var(node.iterator) if node.dim == band_dim else band
        column = node if node.dim == column_dim else column
        body = visit(node.body, band, column)
        assert isinstance(body, k.Block)
        if node.dim == column_dim:
            assert band is not None
            body = k.Block((*body.body, k.Call("msc_column_done", (*PROGRESS, ix.Var(node.iterator), band))))
        elif node.dim == column_dim + 1:
            assert band is not None and column is not None and column.init is not None
            at, row = ix.Var(column.iterator), ix.Var(node.iterator)
            wait = k.If(column.init.lt(at), k.Block((k.Call("msc_wait_tile", (*PROGRESS, at - 1, band, row)),)))
            body = k.Block((wait, *body.body, k.Call("msc_tile_done", (*PROGRESS, at, band, row))))
        return replace(node, body=body)

    body = visit(kernel.body, None, None)
    assert isinstance(body, k.Block)
    return replace(kernel, body=body)
