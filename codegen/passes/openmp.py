"""OpenMP loop mappings: the parallel loop is work-shared (`omp for`, with
`simd` when it is also the vector loop), a vector loop is `omp simd`."""

from __future__ import annotations

from dataclasses import replace

from msc.codegen import kernel_ir as k

# a C printer prints a mapping as `#pragma <mapping>`
FOR = "omp for schedule(static)"
FOR_SIMD = "omp for simd schedule(static)"
SIMD = "omp simd"


def _map(node: k.Node) -> k.Node:
    if not isinstance(node, k.Loop) or node.degenerate:
        return node
    if node.parallel:
        return replace(node, mapping=FOR_SIMD if node.vector else FOR)
    if node.vector:
        return replace(node, mapping=SIMD)
    return node


def map_loops(kernel: k.Kernel) -> k.Kernel:
    return k.transform_kernel(kernel, _map)
