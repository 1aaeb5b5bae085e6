"""StencilIR: the typed, immutable description of one stencil.

Everything downstream (reference interpreter, PolyIR, every backend, the
textual printer) reads these frozen dataclasses; the derived facts (radius,
time windows, which fields are written) are computed here once, so no
backend re-derives them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Iterator, Union

from msc.errors import StencilArgumentError

DTYPES = ("float64", "float32")
BOUNDARIES = ("dirichlet", "periodic")
DIM_NAMES = ("x", "y", "z")
MATH_FUNCTIONS = ("sqrt", "exp", "log", "sin", "cos", "abs")
BINARY_FUNCTIONS = ("minimum", "maximum")
ARITH_OPS = ("+", "-", "*", "/", "**")
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGIC_OPS = ("&", "|")


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


@dataclass(frozen=True)
class Not:
    operand: Expr


@dataclass(frozen=True)
class Call:
    """A math function: sqrt, exp, log, sin, cos, abs (one arg), minimum, maximum (two)."""

    func: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Where:
    cond: Expr
    then: Expr
    otherwise: Expr


Expr = Union[Const, ParamRef, FieldRead, Neg, BinOp, Not, Call, Where]


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
    """All nodes of `e`, parents before children."""
    yield e
    for c in children(e):
        yield from walk(c)


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

    def with_dtype(self, dtype: str) -> StencilIR:
        if dtype not in DTYPES:
            raise StencilArgumentError(
                f"stencil '{self.name}': dtype must be one of {', '.join(DTYPES)}, got {dtype!r}"
            )
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
