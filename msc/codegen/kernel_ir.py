"""The kernel IR: one stencil kernel as typed, immutable loop nests.

`msc/codegen/lower.py` builds it once from the isl AST of a schedule; target
passes (`msc/targets/*/..._pass.py`) rewrite it (work-sharing and SIMD mappings, whole
cache-line stores, prefetches, fences); a printer (`msc/codegen/printers/`,
`msc/targets/gpu/cuda_printer.py`) turns
it into source text. The nodes carry target-neutral facts: a loop is
parallel, vector or unrolled, a buffer lives in a memory space with a shape,
a copy moves a region between memories. What a target does with a loop is
its `mapping`, which only the target's passes set and only its printer reads.

Integer expressions (loop bounds and conditions, array indices, addresses)
are typed trees (`msc/codegen/index.py`); arithmetic on values is StencilIR
(`msc.ir.Expr`). Each language's printer prints both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Callable, Iterator, Union

from msc import ir
from msc.codegen import index as ix


class Space(Enum):
    """Where a buffer lives."""

    GLOBAL = "global"  # main memory, visible to every worker
    STACK = "thread-local"  # one copy per worker (a CPU thread's stack)
    SHARED = "shared"  # one copy per group of workers (a GPU block's shared memory)
    LOCAL = "local"  # a core's scratchpad, reached by DMA (Sunway LDM)


@dataclass(frozen=True)
class Ref:
    """Element `index` of array `array` in `space`; `rows`: the leading subscripts
    of a buffer of several dimensions (`array[rows...][index]`)."""

    array: str
    index: ix.Expr
    space: Space = Space.GLOBAL
    rows: tuple[ix.Expr, ...] = ()

    def substituted(self, values: dict[str, ix.Expr]) -> Ref:
        return replace(self, index=ix.substitute(self.index, values),
                       rows=tuple(ix.substitute(r, values) for r in self.rows))

    def operands(self) -> tuple[ix.Expr, ...]:
        return (*self.rows, self.index)

    def with_operands(self, fn: Callable[[ix.Expr], ix.Expr]) -> Ref:
        return replace(self, index=fn(self.index), rows=tuple(fn(r) for r in self.rows))


@dataclass(frozen=True)
class _OfElement(ix.Expr):
    """An expression of one element: its operands are the element's subscripts."""

    ref: Ref

    def operands(self) -> tuple[ix.Expr, ...]:
        return self.ref.operands()

    def with_operands(self, fn: Callable[[ix.Expr], ix.Expr]) -> ix.Expr:
        return replace(self, ref=self.ref.with_operands(fn))


@dataclass(frozen=True)
class Address(_OfElement):
    """The address of an element (a call argument, a pointer's start)."""


@dataclass(frozen=True)
class Load(_OfElement):
    """The value of an element (a value-typed leaf)."""


@dataclass(frozen=True)
class Compute(ix.Expr):
    """A stencil expression's value (a value-typed leaf): `expr` of `dtype`, each of
    its field reads the value `loads` binds it to (an element's, a variable's)."""

    expr: ir.Expr
    loads: tuple[tuple[ir.FieldRead, ix.Expr], ...]
    dtype: str

    def operands(self) -> tuple[ix.Expr, ...]:
        return tuple(v for _, v in self.loads)

    def with_operands(self, fn: Callable[[ix.Expr], ix.Expr]) -> ix.Expr:
        return replace(self, loads=tuple((read, fn(v)) for read, v in self.loads))


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
    coords: tuple[ix.Expr, ...]

    def load(self, read: ir.FieldRead) -> Ref:
        return dict(self.loads)[read]


DECL_KINDS = ("index", "int", "flag", "value", "pointer", "const pointer")


@dataclass(frozen=True)
class Decl:
    """A variable: an integer (`index`, a 64-bit one; `int`, 32 bits), a truth value
    (`flag`), a value of the stencil's type (`value`), or a (const) pointer to values
    (`init` is then an array's name plus an offset, or an element's address), which
    `restrict` says no other pointer reaches. `const`: it is never set again."""

    name: str
    kind: str
    init: ix.Expr
    const: bool = True
    restrict: bool = True
    element: str | None = None  # a pointer's values' type when not the stencil's (as `Buffer.element`)

    def __post_init__(self) -> None:
        if self.kind not in DECL_KINDS:
            raise ValueError(f"Decl {self.name}: kind must be one of {DECL_KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class Buffer:
    """A buffer of values in `space`, of `shape` points (per dimension),
    holding values of `field` (None: a scratch buffer). Its refs subscript
    the first `rows` dimensions (`Ref.rows`) and index the rest as one.
    `element`: the values' type when not the stencil's ("float64", "float32",
    "float16"); `offset`: its place in bytes in the memory a launch sizes
    (a GPU's dynamic shared memory; None: sized where it is declared)."""

    name: str
    space: Space
    shape: tuple[int | ix.Expr, ...]
    field: str | None = None
    align: int = 0
    rows: int = 0
    element: str | None = None
    offset: int | None = None

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
    region: tuple[tuple[ix.Expr, ix.Expr], ...]


@dataclass(frozen=True)
class Store:
    """Element `ref` = `value` (a value-typed expression)."""

    ref: Ref
    value: ix.Expr


@dataclass(frozen=True)
class Set:
    """A variable declared before takes `value` (`op` "+=": adds it)."""

    name: str
    value: ix.Expr
    op: str = "="

    def __post_init__(self) -> None:
        if self.op not in ("=", "+="):
            raise ValueError(f"Set {self.name}: op must be '=' or '+=', got {self.op!r}")


@dataclass(frozen=True)
class Comment:
    """A note for the reader of the printed code."""

    text: str


@dataclass(frozen=True)
class Call:
    """A call of a runtime helper, as a statement."""

    func: str
    args: tuple[ix.Expr, ...] = ()


@dataclass(frozen=True)
class Launch:
    """Device code started from the host: the device function `name` on a grid of `grid`
    blocks of `block` threads each (x first), with `shared_bytes` of dynamic shared memory,
    called with `args` (set once the target knows which variables its body uses). With
    `points` (the most it indexes from one pointer: a level's, or a ring's), the function
    is a template on its index type, launched with 32-bit indices where the points allow
    and 64-bit ones elsewhere."""

    name: str
    grid: tuple[ix.Expr, ...]
    block: tuple[int, ...]
    args: tuple[ix.Expr, ...] = ()
    shared_bytes: int = 0
    points: ix.Expr | None = None


@dataclass(frozen=True)
class SharedLimit:
    """From here on, device function `name` may be launched with `shared_bytes` of
    dynamic shared memory (beyond what a device allows without asking); `indexed`: both
    instantiations of a function templated on its index type (see `Launch.points`)."""

    name: str
    shared_bytes: int
    indexed: bool = False


@dataclass(frozen=True)
class DeviceScratch:
    """Host code takes `window` - 1 levels of device memory, each a copy of `level`, as the
    pointer `name` (0 when the device is out of memory), and frees them when the enclosing
    block ends, however it ends."""

    name: str
    level: ix.Expr
    window: int
    volume: ix.Expr


@dataclass(frozen=True)
class DeviceCopy:
    """Host code copies `count` values from `src` to `dst`, both in the device's memory."""

    dst: ix.Expr
    src: ix.Expr
    count: ix.Expr


@dataclass(frozen=True)
class Barrier:
    """Every worker waits here until all have arrived (what one wrote before
    it, all may read after it); `workers` "warp": those of one warp only. A
    target's passes remove the barriers its hardware already implies; a
    printer refuses any left that it cannot print."""

    workers: str = "all"


MATRIX_ROLES = ("a", "b", "accumulator")


@dataclass(frozen=True)
class Fragment:
    """A matrix a warp holds in registers for its matrix unit: operand `a` (m x k) or
    `b` (k x n) of an m x n x k product (row-major), or its `accumulator` (m x n),
    of `element` type ("float64", "float32", "float16", or "tf32")."""

    name: str
    role: str
    shape: tuple[int, int, int]
    element: str

    def __post_init__(self) -> None:
        if self.role not in MATRIX_ROLES:
            raise ValueError(f"Fragment {self.name}: role must be one of {MATRIX_ROLES}, got {self.role!r}")


@dataclass(frozen=True)
class MatrixFill:
    """Every element of fragment `fragment` = `value`."""

    fragment: str
    value: ix.Expr


@dataclass(frozen=True)
class MatrixLoad:
    """Fragment `fragment` loaded from the row-major matrix at `address`, rows `stride` elements apart."""

    fragment: str
    address: ix.Expr
    stride: int


@dataclass(frozen=True)
class MatrixMultiply:
    """accumulator += a x b on the matrix unit (fragments by name)."""

    accumulator: str
    a: str
    b: str


@dataclass(frozen=True)
class MatrixStore:
    """Fragment `fragment` stored row-major at `address`, rows `stride` elements apart."""

    address: ix.Expr
    fragment: str
    stride: int


@dataclass(frozen=True)
class Block:
    """Statements in order; `scoped`: its declarations end with it."""

    body: tuple[Node, ...]
    scoped: bool = False


@dataclass(frozen=True)
class Loop:
    """for (iterator = init; cond; iterator += step), the iterator of integer `kind`
    ("index" or "int", as `Decl`). `init` None: the loop
    continues from the iterator's current value (declared before it).
    `degenerate`: isl proved it runs once, at `init` (`cond` is then None). `dim` is the schedule
    dimension it runs over. `parallel`: its iterations are shared among the
    workers; `vector`: its iterations may run in SIMD lanes; `unroll`: a
    factor. `mapping` is the target's decision for it (set by its passes)."""

    iterator: str
    init: ix.Expr | None
    cond: ix.Expr | None
    body: Block
    step: ix.Expr = ix.Lit(1)
    dim: int | None = None
    degenerate: bool = False
    parallel: bool = False
    vector: bool = False
    unroll: int = 0
    mapping: str | None = None
    kind: str = "index"

    def end(self) -> ix.Expr | None:
        """The first point the loop does not run, from a condition `it < end` or `it <= last`
        on its iterator (as isl prints a loop's); None for any other condition."""
        cond = self.cond
        if not (isinstance(cond, ix.Op) and cond.op in ("<", "<=") and cond.lhs == ix.Var(self.iterator)
                and self.iterator not in ix.variables(cond.rhs)):
            return None
        return cond.rhs if cond.op == "<" else cond.rhs + 1


@dataclass(frozen=True)
class If:
    cond: ix.Expr
    then: Block
    otherwise: Block | None = None


MATRIX_NODES = (Fragment, MatrixFill, MatrixLoad, MatrixMultiply, MatrixStore)  # the matrix unit's statements

Node = Union[Block, Loop, If, Assign, Store, Set, Comment, Decl, Buffer, Copy, Call, Launch, SharedLimit, DeviceCopy,
             DeviceScratch, Barrier, Fragment, MatrixFill, MatrixLoad, MatrixMultiply, MatrixStore]


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
