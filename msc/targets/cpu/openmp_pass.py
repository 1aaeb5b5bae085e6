"""OpenMP loop mappings: the parallel loop is work-shared (`omp for`, with
`simd` when it is also the vector loop), a vector loop is `omp simd`. The
tiles of one wavefront of a time tile with two tiled dimensions are handed
out one at a time (`schedule(dynamic, 1)`): they differ in work (tiles cut
by the grid's edges), and a thread that the machine slows takes fewer."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

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
