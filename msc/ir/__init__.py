"""StencilIR: the typed, immutable description of one stencil.

Everything downstream (reference interpreter, PolyIR, every backend, the
textual printer) reads these frozen dataclasses; the derived facts (radius,
time windows, which fields are written) are computed here once, so no
backend re-derives them.

A statement's expression is kept shallow: a chain of more than
BALANCE_TERMS terms joined by + and - (or by *), as a Python loop or `sum`
builds it, is rebuilt as a balanced tree when the Statement is made, so a
729-point stencil nests about 10 levels deep, not 729, and every recursive
pass over the IR (hashing, printing, interpreting) stays within Python's
recursion limit. Shorter chains keep the user's order of operations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Generic, Iterator, TypeVar, Union

import numpy as np

from msc.errors import StencilArgumentError

DTYPES = ("float64", "float32")
BOUNDARIES = ("dirichlet", "periodic")
DIM_NAMES = ("x", "y", "z")


def dtype_name(dtype: object, where: str) -> str:
    """`dtype` as one of DTYPES: its name ("float32") or anything numpy reads as
    one (np.float32, np.dtype("f4"), float); anything else is an error naming `where`."""
    try:
        numpy_dtype = None if dtype is None else np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError:
        numpy_dtype = None
    name = numpy_dtype.name if numpy_dtype is not None and numpy_dtype.isnative else None
    if name not in DTYPES:
        raise StencilArgumentError(f"{where}: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return name
MATH_FUNCTIONS = ("sqrt", "exp", "log", "sin", "cos", "tanh", "floor", "abs")
BINARY_FUNCTIONS = ("minimum", "maximum", "atan2")
#: the keywords of the calls that take a stencil's fields and parameters by name beside their own
#: (Stencil.reference, a kernel's run and start): no field or parameter can be named so
CALL_KEYWORDS = ("self", "steps", "dtype", "threads", "comm", "dims")
ARITH_OPS = ("+", "-", "*", "/", "**")
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGIC_OPS = ("&", "|")
BINARY_OPS = frozenset(ARITH_OPS + COMPARE_OPS + LOGIC_OPS)
FUNCTION_ARITY = {**{f: 1 for f in MATH_FUNCTIONS}, **{f: 2 for f in BINARY_FUNCTIONS}}


@dataclass(frozen=True)
class SourceLoc:
    """Where the user wrote something: file and line."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


# ---------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Const:
    value: float


@dataclass(frozen=True)
class ParamRef:
    """A scalar parameter, e.g. `alpha`."""

    name: str


@dataclass(frozen=True)
class FieldRead:
    """Read of field `name` at time offset `dt` (None: time-invariant) and spatial `offsets`."""

    name: str
    dt: int | None
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class Neg:
    operand: Expr


@dataclass(frozen=True)
class BinOp:
    """Arithmetic (+ - * / **), comparison (< <= ...) or logic (& |)."""

    op: str
    lhs: Expr
    rhs: Expr

    def __post_init__(self) -> None:
        if self.op not in BINARY_OPS:
            raise ValueError(f"BinOp: unknown operator {self.op!r}; the operators are {' '.join(BINARY_OPS)}")


@dataclass(frozen=True)
class Not:
    operand: Expr


@dataclass(frozen=True)
class Call:
    """A math function: sqrt, exp, log, sin, cos, tanh, floor, abs (one arg), minimum, maximum, atan2 (two)."""

    func: str
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        arity = FUNCTION_ARITY.get(self.func)
        if arity is None:
            raise ValueError(f"Call: unknown function {self.func!r}; the functions are {', '.join(FUNCTION_ARITY)}")
        if len(self.args) != arity:
            raise ValueError(f"Call: {self.func} takes {arity} argument(s), got {len(self.args)}")


@dataclass(frozen=True)
class Where:
    cond: Expr
    then: Expr
    otherwise: Expr


Expr = Union[Const, ParamRef, FieldRead, Neg, BinOp, Not, Call, Where]


R = TypeVar("R")


class Visitor(Generic[R]):
    """One pass over an expression: `visit(e)` calls the method named after
    e's node type (const, param_ref, field_read, neg, not_, bin_op, call,
    where), which visits the children it needs. Every pass over StencilIR
    expressions (printers, the reference interpreter, analyses) is one."""

    def visit(self, e: Expr) -> R:
        return getattr(self, _VISIT[type(e)])(e)  # type: ignore[no-any-return]

    def const(self, e: Const) -> R:
        raise NotImplementedError

    def param_ref(self, e: ParamRef) -> R:
        raise NotImplementedError

    def field_read(self, e: FieldRead) -> R:
        raise NotImplementedError

    def neg(self, e: Neg) -> R:
        raise NotImplementedError

    def not_(self, e: Not) -> R:
        raise NotImplementedError

    def bin_op(self, e: BinOp) -> R:
        raise NotImplementedError

    def call(self, e: Call) -> R:
        raise NotImplementedError

    def where(self, e: Where) -> R:
        raise NotImplementedError


_VISIT = {Const: "const", ParamRef: "param_ref", FieldRead: "field_read", Neg: "neg", Not: "not_",
          BinOp: "bin_op", Call: "call", Where: "where"}


def children(e: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of `e`."""
    if isinstance(e, (Neg, Not)):
        return (e.operand,)
    if isinstance(e, BinOp):
        return (e.lhs, e.rhs)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Where):
        return (e.cond, e.then, e.otherwise)
    return ()


def walk(e: Expr) -> Iterator[Expr]:
    """All nodes of `e`, parents before children (iterative: any depth)."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def unread_params(stencil: StencilIR) -> list[str]:
    """The scalar parameters of `stencil` that no statement reads (a run still asks for them)."""
    read = {node.name for st in stencil.statements for node in walk(st.expr) if isinstance(node, ParamRef)}
    return [name for name in stencil.params if name not in read]


def depth(e: Expr) -> int:
    """Levels of nesting of `e` (a leaf is 1), computed without recursion."""
    deepest = 0
    stack = [(e, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        stack.extend((c, level + 1) for c in children(node))
    return deepest


BALANCE_TERMS = 32
MAX_DEPTH = 200  # deeper expressions (after balancing) are refused by the frontend: recursive passes need headroom
_CHAINS = {"+": "+-", "-": "+-", "*": "*"}


def _chain(e: Expr) -> str | None:
    """The chain kind of `e`: "+-" for a sum or difference, "*" for a product, else None."""
    return _CHAINS.get(e.op) if isinstance(e, BinOp) else None


def _with_children(e: Expr, kids: list[Expr]) -> Expr:
    if all(a is b for a, b in zip(kids, children(e))):
        return e
    if isinstance(e, Neg):
        return Neg(kids[0])
    if isinstance(e, Not):
        return Not(kids[0])
    if isinstance(e, BinOp):
        return BinOp(e.op, kids[0], kids[1])
    if isinstance(e, Call):
        return Call(e.func, tuple(kids))
    assert isinstance(e, Where)
    return Where(kids[0], kids[1], kids[2])


def _terms(e: Expr) -> list[tuple[int, Expr]]:
    """The signed terms (factors, for a product) of the chain rooted at `e`, left to right."""
    kind = _chain(e)
    out: list[tuple[int, Expr]] = []
    stack = [(1, e)]
    while stack:
        sign, node = stack.pop()
        if _chain(node) != kind:
            out.append((sign, node))
            continue
        assert isinstance(node, BinOp)
        stack.append((-sign if node.op == "-" else sign, node.rhs))
        stack.append((sign, node.lhs))
    return out


def _balanced_chain(kind: str, terms: list[tuple[int, Expr]]) -> tuple[int, Expr]:
    """A balanced tree for the chain; (s, e) with s * e the chain's value (s is the first term's sign)."""
    if len(terms) == 1:
        return terms[0]
    mid = len(terms) // 2
    (sl, lhs), (sr, rhs) = _balanced_chain(kind, terms[:mid]), _balanced_chain(kind, terms[mid:])
    if kind == "*":
        return 1, BinOp("*", lhs, rhs)
    return sl, BinOp("+" if sl == sr else "-", lhs, rhs)


def balanced(e: Expr) -> Expr:
    """`e` with every chain of more than BALANCE_TERMS terms rebuilt as a
    balanced tree (same terms, same signs; only the order in which they are
    added or multiplied changes). Iterative: `e` may be arbitrarily deep."""
    done: dict[int, Expr] = {}  # id of an original node -> its rebuilt form (chain roots and non-chain nodes)
    roots = {id(e)}  # chain nodes that are not an operand of a node of the same chain kind
    stack: list[tuple[Expr, bool]] = [(e, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in done:
            continue
        kids = children(node)
        if not ready:
            stack.append((node, True))
            for c in kids:
                if _chain(c) is not None and _chain(c) != _chain(node):
                    roots.add(id(c))
                stack.append((c, False))
            continue
        kind = _chain(node)
        if kind is None:
            done[id(node)] = _with_children(node, [done[id(c)] for c in kids])
        elif id(node) in roots:
            terms = _terms(node)
            if len(terms) > BALANCE_TERMS:
                done[id(node)] = _balanced_chain(kind, [(s, done[id(t)]) for s, t in terms])[1]
            else:
                done[id(node)] = _rebuild_chain(node, kind, done)
    return done[id(e)]


def _rebuild_chain(e: Expr, kind: str, done: dict[int, Expr]) -> Expr:
    """A short chain with its terms replaced by their rebuilt forms (recursion bounded by BALANCE_TERMS)."""
    if _chain(e) != kind:
        return done[id(e)]
    assert isinstance(e, BinOp)
    return _with_children(e, [_rebuild_chain(e.lhs, kind, done), _rebuild_chain(e.rhs, kind, done)])


def summands(e: Expr) -> list[Expr]:
    """The terms of the sum or difference `e`, left to right, the subtracted ones negated (`[e]` when `e`
    is neither)."""
    if _chain(e) != "+-":
        return [e]
    return [t if sign > 0 else Neg(t) for sign, t in _terms(e)]


def reads_of(e: Expr) -> list[FieldRead]:
    return [n for n in walk(e) if isinstance(n, FieldRead)]


# ---------------------------------------------------------------- declarations


@dataclass(frozen=True)
class FieldDecl:
    """A field: `window` past levels are read (t, t-1, ...); 0 means time-invariant input."""

    name: str
    ndim: int
    dtype: str
    window: int
    written: bool

    @property
    def time_invariant(self) -> bool:
        return self.window == 0

    @property
    def slots(self) -> int:
        """Ring-buffer slots: the levels read plus the one being written."""
        return self.window + 1 if self.written else max(self.window, 1)


@dataclass(frozen=True)
class Statement:
    """`target[t+1, x, y, ...] = expr`, written at `loc`."""

    target: str
    expr: Expr
    loc: SourceLoc

    def __post_init__(self) -> None:
        object.__setattr__(self, "expr", balanced(self.expr))

    @property
    def reads(self) -> list[FieldRead]:
        return reads_of(self.expr)


@dataclass(frozen=True)
class StencilIR:
    name: str
    ndim: int
    fields: tuple[FieldDecl, ...]
    params: tuple[str, ...]
    statements: tuple[Statement, ...]
    boundary: str = "dirichlet"
    dtype: str = "float64"
    loc: SourceLoc | None = field(default=None, compare=False)

    def with_dtype(self, dtype: object) -> StencilIR:
        """This stencil in `dtype` (a name of DTYPES or a numpy dtype of one)."""
        dtype = dtype_name(dtype, f"stencil '{self.name}'")
        return replace(self, dtype=dtype, fields=tuple(replace(f, dtype=dtype) for f in self.fields))

    def field(self, name: str) -> FieldDecl:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def written_fields(self) -> tuple[FieldDecl, ...]:
        return tuple(f for f in self.fields if f.written)

    @cached_property
    def radius(self) -> tuple[int, ...]:
        """Per dimension, the largest |offset| of any read: the boundary ring width."""
        r = [0] * self.ndim
        for s in self.statements:
            for a in s.reads:
                for d, o in enumerate(a.offsets):
                    r[d] = max(r[d], abs(o))
        return tuple(r)

    @property
    def dims(self) -> tuple[str, ...]:
        return DIM_NAMES[: self.ndim]

    def reads_spatially(self, name: str) -> bool:
        """True when some statement reads `name` at a non-zero spatial offset."""
        return any(a.name == name and any(a.offsets) for s in self.statements for a in s.reads)
