"""The kernel IR: one stencil kernel as typed, immutable loop nests.

`msc/codegen/lower.py` builds it once from the isl AST of a schedule; target
passes (`msc/targets/*/..._pass.py`) rewrite it (work-sharing and SIMD mappings, whole
cache-line stores, prefetches, fences); a printer (`msc/codegen/printers/`,
`msc/targets/gpu/cuda_printer.py`) turns
it into source text. The nodes carry target-neutral facts: a loop is
parallel, vector or unrolled, a buffer lives in a memory space with a shape,
a copy moves a region between memories. What a target does with a loop is
its `mapping`, which only the target's passes set and only its printer reads.

Integer expressions (loop bounds, array indices) are kept as text in the
syntax shared by every language the project prints (C, CUDA C++, Sunway C);
arithmetic on values is StencilIR (`msc.ir.Expr`), printed by each language.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum
from typing import Callable, Iterator, Union

from msc import ir


class Space(Enum):
    """Where a buffer lives."""

    GLOBAL = "global"  # main memory, visible to every worker
    STACK = "thread-local"  # one copy per worker (a CPU thread's stack)
    SHARED = "shared"  # one copy per group of workers (a GPU block's shared memory)
    LOCAL = "local"  # a core's scratchpad, reached by DMA (Sunway LDM)


def rename(text: str, name: str, new: str) -> str:
    """`text` with the identifier `name` replaced by `new`."""
    return re.sub(rf"\b{re.escape(name)}\b", new, text)


@dataclass(frozen=True)
class Ref:
    """Element `index` (a linear integer expression) of array `array` in `space`."""

    array: str
    index: str
    space: Space = Space.GLOBAL

    def renamed(self, name: str, new: str) -> Ref:
        return replace(self, index=rename(self.index, name, new))


@dataclass(frozen=True)
class Address:
    """The address of an element, as a call argument."""

    ref: Ref


@dataclass(frozen=True)
class Assign:
    """One point of a statement: `lhs = rhs`, where each field read of `rhs`
    is the element `loads` maps it to. `field` is the field computed, and
    `coords` the point's space coordinates (for passes that address its
    neighbours)."""

    lhs: Ref
    rhs: ir.Expr
    loads: tuple[tuple[ir.FieldRead, Ref], ...]
    field: str
    coords: tuple[str, ...]

    def load(self, read: ir.FieldRead) -> Ref:
        return dict(self.loads)[read]


DECL_KINDS = ("index", "pointer", "const pointer")


@dataclass(frozen=True)
class Decl:
    """A variable: an integer `index`, or a (const) restrict pointer to the values."""

    name: str
    kind: str
    init: str
    const: bool = True

    def __post_init__(self) -> None:
        if self.kind not in DECL_KINDS:
            raise ValueError(f"Decl {self.name}: kind must be one of {DECL_KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class Buffer:
    """A buffer of values in `space`, of `shape` points (per dimension),
    holding values of `field` (None: a scratch buffer)."""

    name: str
    space: Space
    shape: tuple[int | str, ...]
    field: str | None = None
    align: int = 0

    def points(self) -> int | None:
        """Points it holds, when its shape is known at compile time."""
        n = 1
        for s in self.shape:
            if not isinstance(s, int):
                return None
            n *= s
        return n


@dataclass(frozen=True)
class Copy:
    """dst = src for every point of a box: iterator `iterators[d]` runs over
    [region[d][0], region[d][1])."""

    dst: Ref
    src: Ref
    iterators: tuple[str, ...]
    region: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Call:
    """A call of a runtime helper, as a statement."""

    func: str
    args: tuple[str | Address, ...] = ()


@dataclass(frozen=True)
class Barrier:
    """Every worker waits here until all have arrived (what one wrote before
    it, all may read after it). A target's passes remove the barriers its
    hardware already implies; a printer refuses any left that it cannot print."""


@dataclass(frozen=True)
class Block:
    """Statements in order; `scoped`: its declarations end with it."""

    body: tuple[Node, ...]
    scoped: bool = False


@dataclass(frozen=True)
class Loop:
    """for (iterator = init; cond; iterator += step). `init` None: the loop
    continues from the iterator's current value (declared before it).
    `degenerate`: isl proved it runs once, at `init`. `dim` is the schedule
    dimension it runs over. `parallel`: its iterations are shared among the
    workers; `vector`: its iterations may run in SIMD lanes; `unroll`: a
    factor. `mapping` is the target's decision for it (set by its passes)."""

    iterator: str
    init: str | None
    cond: str
    body: Block
    step: str = "1"
    dim: int | None = None
    degenerate: bool = False
    parallel: bool = False
    vector: bool = False
    unroll: int = 0
    mapping: str | None = None


@dataclass(frozen=True)
class If:
    cond: str
    then: Block
    otherwise: Block | None = None


Node = Union[Block, Loop, If, Assign, Decl, Buffer, Copy, Call, Barrier]


@dataclass(frozen=True)
class Kernel:
    """One entry point: `body` runs steps t0 .. t0+T-1 (see the printer for the calling convention)."""

    name: str
    body: Block
    box: bool = False  # computes only the points of a box given at run time


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Block):
        return node.body
    if isinstance(node, Loop):
        return (node.body,)
    if isinstance(node, If):
        return (node.then,) + ((node.otherwise,) if node.otherwise is not None else ())
    return ()


def walk(node: Node) -> Iterator[Node]:
    """Every node below `node`, parents first."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def transform(node: Node, fn: Callable[[Node], Node]) -> Node:
    """Rebuild `node` bottom-up, applying `fn` to every node after its children."""
    if isinstance(node, Block):
        kids = tuple(transform(c, fn) for c in node.body)
        node = node if all(a is b for a, b in zip(kids, node.body)) else replace(node, body=kids)
    elif isinstance(node, Loop):
        body = transform(node.body, fn)
        assert isinstance(body, Block)
        node = node if body is node.body else replace(node, body=body)
    elif isinstance(node, If):
        then = transform(node.then, fn)
        other = transform(node.otherwise, fn) if node.otherwise is not None else None
        assert isinstance(then, Block) and (other is None or isinstance(other, Block))
        node = replace(node, then=then, otherwise=other)
    return fn(node)


def transform_kernel(kernel: Kernel, fn: Callable[[Node], Node]) -> Kernel:
    body = transform(kernel.body, fn)
    assert isinstance(body, Block)
    return replace(kernel, body=body)
