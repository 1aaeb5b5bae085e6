"""Integer expressions of the kernel IR: loop bounds and conditions, array
indices, addresses and launch geometry, as typed trees (no source text).

Python's operators build them (`Var("c0") * 16 + 2`; an int becomes a
literal, adding 0 or multiplying by 1 folds away, adding a negative literal
subtracts; `&` is the bitwise and of a ring slot). Comparisons and logic
are methods (`lt`, `le`, `ge`, `eq`, `ne`, `and_`, `not_`), since `==`
keeps its Python meaning (structural equality). `min_`, `max_` and
`floordiv` are the functions isl's ASTs use; `Call` names any other helper
the printed code defines. The kernel IR adds value-typed leaves (an
element's value, a stencil expression), so that a select or a sum of
values is a tree too. `linear` is the one row-major
linearisation every lowering uses. Printers turn the trees into text
(`msc/codegen/printers/cexpr.py`, `c_int`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Callable, Iterator, Sequence, Union

ARITHMETIC = ("+", "-", "*", "/", "%")  # C's integer semantics: / truncates, % takes the dividend's sign
BITWISE = ("&",)  # a ring slot of two: `j & 1`
COMPARISONS = ("<", "<=", "==", "!=", ">=", ">")
LOGICAL = ("&&", "||")
FUNCTIONS = ("min", "max", "floordiv")  # floordiv(a, b): the floor of a / b for b > 0


class Expr:
    """An integer expression; subclasses are frozen dataclasses whose Expr-valued
    fields are its operands (`operands`, `with_operands`)."""

    def operands(self) -> tuple[Expr, ...]:
        return tuple(v for f in fields(self) for v in _flat(getattr(self, f.name)) if isinstance(v, Expr))

    def with_operands(self, fn: Callable[[Expr], Expr]) -> Expr:
        """This node with `fn` applied to each operand."""
        changes = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Expr):
                changes[f.name] = fn(value)
            elif isinstance(value, tuple) and any(isinstance(v, Expr) for v in value):
                changes[f.name] = tuple(fn(v) if isinstance(v, Expr) else v for v in value)
        return replace(self, **changes) if changes else self  # type: ignore[type-var]

    def __add__(self, other: Expr | int) -> Expr:
        return add(self, other)

    def __radd__(self, other: int) -> Expr:
        return add(other, self)

    def __sub__(self, other: Expr | int) -> Expr:
        return sub(self, other)

    def __rsub__(self, other: int) -> Expr:
        return sub(other, self)

    def __mul__(self, other: Expr | int) -> Expr:
        return mul(self, other)

    def __rmul__(self, other: int) -> Expr:
        return mul(other, self)

    def __mod__(self, other: Expr | int) -> Expr:
        return Op("%", self, lift(other))

    def __neg__(self) -> Expr:
        return Neg(self)

    def lt(self, other: Expr | int) -> Expr:
        return Op("<", self, lift(other))

    def le(self, other: Expr | int) -> Expr:
        return Op("<=", self, lift(other))

    def ge(self, other: Expr | int) -> Expr:
        return Op(">=", self, lift(other))

    def eq(self, other: Expr | int) -> Expr:
        return Op("==", self, lift(other))

    def ne(self, other: Expr | int) -> Expr:
        return Op("!=", self, lift(other))

    def __and__(self, other: Expr | int) -> Expr:
        return Op("&", self, lift(other))

    def and_(self, other: Expr) -> Expr:
        return Op("&&", self, other)

    def or_(self, other: Expr) -> Expr:
        return Op("||", self, other)

    def not_(self) -> Expr:
        return Not(self)


def _flat(value: object) -> tuple[object, ...]:
    return value if isinstance(value, tuple) else (value,)


@dataclass(frozen=True)
class Var(Expr):
    """A variable: a loop iterator, a parameter, an array's name in address arithmetic."""

    name: str


@dataclass(frozen=True)
class Lit(Expr):
    value: int


@dataclass(frozen=True)
class Op(Expr):
    """`lhs op rhs`: arithmetic, a bitwise and, a comparison or a logical connective."""

    op: str
    lhs: Expr
    rhs: Expr

    def __post_init__(self) -> None:
        if self.op not in ARITHMETIC + BITWISE + COMPARISONS + LOGICAL:
            raise ValueError(f"not an integer operation: {self.op!r}")


@dataclass(frozen=True)
class Neg(Expr):
    operand: Expr


@dataclass(frozen=True)
class Not(Expr):
    operand: Expr


@dataclass(frozen=True)
class Call(Expr):
    """A function of FUNCTIONS, or a helper the printed code defines."""

    func: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Cast(Expr):
    """`operand` converted to the printed language's type `to` (a calling convention's argument)."""

    to: str
    operand: Expr


@dataclass(frozen=True)
class Select(Expr):
    """`then` where `cond` holds, else `otherwise`."""

    cond: Expr
    then: Expr
    otherwise: Expr


Value = Union[Expr, int]


def lift(value: Value) -> Expr:
    return Lit(value) if isinstance(value, int) else value


def add(a: Value, b: Value) -> Expr:
    a, b = lift(a), lift(b)
    if b == Lit(0):
        return a
    if a == Lit(0):
        return b
    if isinstance(b, Lit) and b.value < 0:
        return Op("-", a, Lit(-b.value))
    return Op("+", a, b)


def sub(a: Value, b: Value) -> Expr:
    a, b = lift(a), lift(b)
    if b == Lit(0):
        return a
    if isinstance(b, Lit) and b.value < 0:
        return Op("+", a, Lit(-b.value))
    return Op("-", a, b)


def mul(a: Value, b: Value) -> Expr:
    a, b = lift(a), lift(b)
    if b == Lit(1):
        return a
    if a == Lit(1):
        return b
    return Op("*", a, b)


def min_(*args: Value) -> Expr:
    return _fold("min", args)


def max_(*args: Value) -> Expr:
    return _fold("max", args)


def _fold(func: str, args: Sequence[Value]) -> Expr:
    out = lift(args[0])
    for a in args[1:]:
        out = Call(func, (out, lift(a)))
    return out


def floordiv(a: Value, b: Value) -> Expr:
    return Call("floordiv", (lift(a), lift(b)))


def linear(coords: Sequence[Value], extents: Sequence[Value], offsets: Sequence[int] | None = None) -> Expr:
    """Row-major index of the point `coords` (+ `offsets`) in an array of
    `extents` (the first is not needed): ((c0 + o0) * e1 + c1 + o1) * e2 + c2 + o2 ..."""
    offsets = offsets or [0] * len(coords)
    index = lift(coords[0]) + offsets[0]
    for c, e, o in zip(coords[1:], extents[1:], offsets[1:]):
        index = index * e + c + o
    return index


def walk(e: Expr) -> Iterator[Expr]:
    """Every node of `e`, parents first."""
    yield e
    for o in e.operands():
        yield from walk(o)


def variables(e: Expr) -> set[str]:
    return {n.name for n in walk(e) if isinstance(n, Var)}


def substitute(e: Expr, values: dict[str, Expr]) -> Expr:
    """`e` with each variable named in `values` replaced."""
    if isinstance(e, Var):
        return values.get(e.name, e)
    return e.with_operands(lambda o: substitute(o, values))
