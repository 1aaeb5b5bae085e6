"""From a parsed .msc tree to StencilIR, checking the rules of the contract.

The grammar fixes the shape of a file; this module checks what it cannot:
declared names, affine indices, which levels a statement writes and reads,
declared windows and dimensionality, function names and arity. The rules and
the wording follow the Python frontend (msc/frontend/trace.py); every error
points at the offending token of the source.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from lark import Token, Tree

from msc import ir
from msc.errors import StencilDefinitionError, StencilDefinitionWarning
from msc.textual.source import SourceText

INDEX_SYMBOLS = ("t",) + ir.DIM_NAMES
CONSTANTS = {"inf": float("inf"), "nan": float("nan")}
BINARY_OPS = {
    "or_": "|", "and_": "&", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
    "add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**",
}
ARITY = {**{f: 1 for f in ir.MATH_FUNCTIONS}, **{f: 2 for f in ir.BINARY_FUNCTIONS}, "where": 3}
_MAX_DIGITS = 9  # of an index offset or a window: anything longer is a mistake


@dataclass
class _Decl:
    """A declared name: a `field` (time-dependent), an `input` (time-invariant) or a `param`."""

    kind: str
    token: Token
    ndim: int = 0
    dtype: Token | None = None
    window: int = 1
    window_token: Token | None = None

    @property
    def line(self) -> int:
        return self.token.line or 0

    def example(self) -> str:
        dims = (["t"] if self.kind == "field" else []) + list(ir.DIM_NAMES[: self.ndim])
        return f"{self.token}[{', '.join(dims)}]"


def build_stencil(tree: Tree, source: SourceText) -> ir.StencilIR:
    """The StencilIR of a parsed file (the tree of grammar.lark's `start`)."""
    return _Builder(source).build(tree)


class _Builder:
    def __init__(self, source: SourceText) -> None:
        self.source = source
        self.name = "?"
        self.options: dict[str, Token] = {}
        self.decls: dict[str, _Decl] = {}
        self.first_field: _Decl | None = None
        self.writers: dict[str, ir.Statement] = {}

    def error(self, at: Tree | Token, message: str) -> StencilDefinitionError:
        line, column = (at.line, at.column) if isinstance(at, Token) else (at.meta.line, at.meta.column)
        return self.source.error(line or 0, column or 0, f"in stencil '{self.name}': {message}")

    def build(self, tree: Tree) -> ir.StencilIR:
        keyword, name, *items = tree.children
        self.name = name.value
        # Declarations first, so statements may use names declared below them.
        for item in items:
            if item.data != "statement":
                getattr(self, item.data)(item)
        for item in items:
            if item.data == "statement":
                self.statement(item)
        if not self.writers or self.first_field is None:
            raise self.error(name, "the stencil writes no field: add a statement like u[t+1, x] = ...;")
        dtype = self.options["dtype"].value if "dtype" in self.options else "float64"
        fields = tuple(self.field(d, dtype) for d in self.decls.values() if d.kind != "param")
        stencil = ir.StencilIR(
            name=self.name,
            ndim=self.first_field.ndim,
            fields=fields,
            params=tuple(n for n, d in self.decls.items() if d.kind == "param"),
            statements=tuple(self.writers.values()),
            boundary=self.options["boundary"].value if "boundary" in self.options else "dirichlet",
            dtype=dtype,
            loc=ir.SourceLoc(self.source.filename, keyword.line or 0),
        )
        for param in ir.unread_params(stencil):
            warnings.warn_explicit(f"in stencil '{self.name}': parameter '{param}' is read by no statement, and a run "
                                   "still asks for it: remove it from the declarations", StencilDefinitionWarning,
                                   self.source.filename, self.decls[param].line)
        return stencil

    # -- declarations ------------------------------------------------------

    def option(self, tree: Tree) -> None:
        keyword, value = tree.children
        key = keyword.value
        if key in self.options:
            raise self.error(keyword, f"'{key}' is already set at line {self.options[key].line}")
        allowed = ir.BOUNDARIES if key == "boundary" else ir.DTYPES
        if value.value not in allowed:
            raise self.error(value, f"{key} '{value}' is not one of {', '.join(allowed)}")
        self.options[key] = value

    def field_decl(self, tree: Tree) -> None:
        _, name, dims, dtype, window = tree.children
        decl = _Decl("field", name, self.dims(dims), dtype)
        if window is not None:
            number = window.children[1]
            if not (number.value.isdecimal() and len(number.value) <= _MAX_DIGITS and int(number.value) >= 1):
                raise self.error(
                    number,
                    f"window {number} is not a whole number of at least 1 (the levels t, t-1, ... the "
                    f"statements read); declare a time-invariant input as `input {name}[...];`",
                )
            decl.window, decl.window_token = int(number.value), number
        self.declare(decl)

    def input_decl(self, tree: Tree) -> None:
        _, name, dims, dtype = tree.children
        self.declare(_Decl("input", name, self.dims(dims), dtype))

    def param_decl(self, tree: Tree) -> None:
        for name in tree.children[1:]:
            self.declare(_Decl("param", name))

    def dims(self, tree: Tree) -> int:
        names: list[Token] = tree.children
        for pos, token in enumerate(names):
            if token == "t":
                raise self.error(
                    token, "declare only the spatial dimensions (x, y, z): a field's time levels are "
                    "given by `window N`, and an input has none",
                )
            if pos >= len(ir.DIM_NAMES):
                raise self.error(token, "a field has 1 to 3 spatial dimensions (x, y, z)")
            if token != ir.DIM_NAMES[pos]:
                raise self.error(
                    token, f"spatial dimension {pos + 1} must be '{ir.DIM_NAMES[pos]}' (dimensions come "
                    f"in the order x, y, z), got '{token}'",
                )
        return len(names)

    def declare(self, decl: _Decl) -> None:
        name = decl.token.value
        if name in INDEX_SYMBOLS or name in CONSTANTS:
            what = "an index symbol" if name in INDEX_SYMBOLS else "a constant"
            raise self.error(decl.token, f"'{name}' is {what} and cannot name a field or parameter")
        if name in ir.CALL_KEYWORDS:
            raise self.error(decl.token, f"'{name}' is a keyword of the calls that take the fields and parameters "
                             f"({', '.join(ir.CALL_KEYWORDS)}) and cannot name a field or parameter: rename it")
        if name in self.decls:
            raise self.error(decl.token, f"'{name}' is already declared at line {self.decls[name].line}")
        if decl.kind != "param":
            first = self.first_field = self.first_field or decl
            if decl.ndim != first.ndim:
                raise self.error(
                    decl.token, f"field '{name}' is {decl.ndim}D but the stencil is {first.ndim}D (field "
                    f"'{first.token}' at line {first.line}): all fields must have the same dimensionality",
                )
        if decl.dtype is not None and decl.dtype not in ir.DTYPES:
            raise self.error(decl.dtype, f"dtype '{decl.dtype}' is not one of {', '.join(ir.DTYPES)}")
        self.decls[name] = decl

    def field(self, decl: _Decl, dtype: str) -> ir.FieldDecl:
        """The FieldDecl of a declared field, its window checked against the statements."""
        name = decl.token.value
        if decl.dtype is not None and decl.dtype != dtype:
            raise self.error(
                decl.dtype, f"'{name}' is declared {decl.dtype} but the stencil's dtype is {dtype}: all "
                f"fields share the stencil's dtype (set it with `dtype {decl.dtype};`)",
            )
        if decl.kind == "input":
            return ir.FieldDecl(name, decl.ndim, dtype, window=0, written=False)
        if name not in self.writers:
            raise self.error(
                decl.token, f"field '{name}' has time levels but is never written; declare it "
                f"`input {name}[{', '.join(ir.DIM_NAMES[: decl.ndim])}];` for a time-invariant input",
            )
        oldest = min(
            (a.dt for s in self.writers.values() for a in s.reads if a.name == name and a.dt is not None and a.dt <= 0),
            default=0,
        )
        if decl.window != 1 - oldest:
            default = "" if decl.window_token else " (the default)"
            raise self.error(
                decl.window_token or decl.token,
                f"field '{name}' is declared with window {decl.window}{default} but the statements read "
                f"levels back to {_show_index('t', oldest)}: declare `window {1 - oldest}`",
            )
        return ir.FieldDecl(name, decl.ndim, dtype, window=decl.window, written=True)

    def lookup(self, token: Token) -> _Decl:
        decl = self.decls.get(token.value)
        if token in INDEX_SYMBOLS or token in CONSTANTS:
            what = "an index symbol" if token in INDEX_SYMBOLS else "a constant"
            raise self.error(token, f"'{token}' is {what}, not a field or parameter")
        if decl is None:
            dims = ", ".join(ir.DIM_NAMES[: self.first_field.ndim if self.first_field else 1])
            raise self.error(
                token, f"'{token}' is not declared: declare it as `field {token}[{dims}];`, "
                f"`input {token}[{dims}];` or `param {token};`",
            )
        return decl

    # -- statements and accesses --------------------------------------------

    def statement(self, tree: Tree) -> None:
        target, *items, value = tree.children
        try:
            expr = self.expr(value)
        except RecursionError:
            raise self.error(tree, f"the expression written to '{target}' is nested too deeply (a chain of "
                             "several hundred operations): group its terms in parentheses, or split it "
                             "into statements through a temporary field") from None
        decl = self.lookup(target)
        if decl.kind != "field":
            what = "a scalar parameter" if decl.kind == "param" else "a time-invariant input"
            raise self.error(
                target, f"'{target}' is {what} (declared at line {decl.line}) and cannot be written: "
                "statements write fields, declared `field NAME[x, ...] window N;`",
            )
        dt, offsets = self.index(target, decl, items)
        assert dt is not None
        where = f"{target}[{_show_access(dt, offsets)}]"
        if dt < 1:
            raise self.error(target, f"writes {where}, a past level: statements write the next level {target}[t+1, ...]")
        if dt > 1:
            raise self.error(target, f"writes {where}: statements write exactly one level ahead, {target}[t+1, ...]")
        if any(offsets):
            raise self.error(
                target, f"writes {where} at a spatial offset: statements write at the point itself "
                f"({', '.join(ir.DIM_NAMES[: len(offsets)])})",
            )
        previous = self.writers.get(target.value)
        if previous is not None:
            raise self.error(
                target, f"two statements write {target}[t+1]: the first at {previous.loc}; "
                "write each field's next level once (use a temporary field for stages)",
            )
        self.writers[target.value] = ir.Statement(target.value, expr, ir.SourceLoc(self.source.filename, target.line or 0))

    def index(self, name: Token, decl: _Decl, items: list[Tree]) -> tuple[int | None, tuple[int, ...]]:
        """Split `u[t+1, x-1, y]` into (dt, offsets); check the form against the declaration."""
        spatial = [(item, self.index_item(item)) for item in items]
        key = ", ".join(_show_index(*value) for _, value in spatial)
        dt = spatial.pop(0)[1][1] if spatial[0][1][0] == "t" else None
        if len(spatial) > len(ir.DIM_NAMES) or not spatial:
            raise self.error(name, f"{name}[{key}]: a field needs 1 to 3 spatial indices (x, y, z)")
        for pos, (item, (sym, _)) in enumerate(spatial):
            if sym != ir.DIM_NAMES[pos]:
                raise self.error(
                    item, f"{name}[{key}]: spatial index {pos + 1} must use '{ir.DIM_NAMES[pos]}' "
                    f"(indices come in the order t, x, y, z), got '{sym}'",
                )
        if len(spatial) != decl.ndim:
            raise self.error(
                name, f"{name}[{key}] is {len(spatial)}D but the stencil is {decl.ndim}D ('{name}' is "
                f"declared at line {decl.line}): all fields must have the same dimensionality",
            )
        if (dt is None) == (decl.kind == "field"):
            kind = "a time-dependent field, always" if dt is None else "a time-invariant input, never"
            raise self.error(
                name, f"{name}[{key}]: '{name}' is {kind} indexed with t (declared at line {decl.line}); "
                f"write e.g. {decl.example()}",
            )
        return dt, tuple(offset for _, (_, offset) in spatial)

    def index_item(self, item: Tree) -> tuple[str, int]:
        value = _affine(item)
        text = " ".join(self.source.text[item.meta.start_pos : item.meta.end_pos].split())
        if value is None:
            raise self.error(
                item, f"index expression '{text}' is not an affine index: use a symbol plus or minus a "
                "whole number, like x+1 or t-1 (scaled, non-integer or combined indices are not supported)",
            )
        if value[0] is None:
            raise self.error(item, f"index '{text}' is not t, x, y or z plus an integer offset")
        return value[0], value[1]

    # -- expressions ---------------------------------------------------------

    def expr(self, tree: Tree) -> ir.Expr:
        kind, children = tree.data, tree.children
        if kind == "number":
            return ir.Const(float(children[0]))
        if kind == "var":
            return self.var(children[0])
        if kind == "access":
            return self.read(tree)
        if kind == "call":
            return self.call(children[0], children[1:])
        if kind in ("paren", "pos"):
            return self.expr(children[0])
        if kind == "neg":
            literal = _literal(children[0])
            return ir.Const(-literal) if literal is not None else ir.Neg(self.expr(children[0]))
        if kind == "not_":
            return ir.Not(self.expr(children[0]))
        return ir.BinOp(BINARY_OPS[kind], self.expr(children[0]), self.expr(children[1]))

    def var(self, token: Token) -> ir.Expr:
        if token in CONSTANTS:
            return ir.Const(CONSTANTS[token.value])
        if token in INDEX_SYMBOLS:
            raise self.error(
                token, f"index symbol '{token}' used as a value: index symbols may only appear inside [...]"
            )
        decl = self.lookup(token)
        if decl.kind != "param":
            raise self.error(
                token, f"field '{token}' is used bare (without [t, x, ...]) in an expression; index it, "
                f"e.g. {decl.example()}",
            )
        return ir.ParamRef(token.value)

    def read(self, tree: Tree) -> ir.FieldRead:
        name, *items = tree.children
        decl = self.lookup(name)
        if decl.kind == "param":
            raise self.error(name, f"'{name}' is a scalar parameter (declared at line {decl.line}) and cannot be indexed")
        dt, offsets = self.index(name, decl, items)
        if dt is not None and dt > 0 and (dt > 1 or name not in self.writers):
            raise self.error(
                tree, f"reads {name}[{_show_access(dt, offsets)}], a level not yet computed: only t+1 "
                "of a field written by an earlier statement may be read",
            )
        return ir.FieldRead(name.value, dt, offsets)

    def call(self, func: Token, args: list[Tree]) -> ir.Expr:
        arity = ARITY.get(func.value)
        if arity is None:
            raise self.error(func, f"unknown function '{func}': the functions are {', '.join(ARITY)}")
        if len(args) != arity:
            raise self.error(func, f"{func}() takes {arity} argument{'s' * (arity > 1)}, got {len(args)}")
        values = tuple(self.expr(a) for a in args)
        return ir.Where(*values) if func == "where" else ir.Call(func.value, values)


def _affine(tree: Tree) -> tuple[str | None, int] | None:
    """(symbol, offset) of an index item (symbol None: a plain integer); None if it is not affine."""
    kind, children = tree.data, tree.children
    if kind in ("paren", "pos"):
        return _affine(children[0])
    if kind == "number":
        text = children[0].value
        return (None, int(text)) if text.isdecimal() and len(text) <= _MAX_DIGITS else None
    if kind == "var":
        return (children[0].value, 0) if children[0] in INDEX_SYMBOLS else None
    if kind == "neg":
        value = _affine(children[0])
        return (None, -value[1]) if value is not None and value[0] is None else None
    if kind in ("add", "sub"):
        a, b = _affine(children[0]), _affine(children[1])
        if a is None or b is None or (a[0] is not None and b[0] is not None):
            return None
        if kind == "sub":
            if b[0] is not None:
                return None
            b = (None, -b[1])
        return (a[0] or b[0], a[1] + b[1])
    return None


def _literal(tree: Tree) -> float | None:
    """The value of a bare number or constant (`-` directly before it makes a negative constant)."""
    if tree.data == "number":
        return float(tree.children[0])
    if tree.data == "var" and tree.children[0] in CONSTANTS:
        return CONSTANTS[tree.children[0].value]
    return None


def _show_index(sym: str, offset: int) -> str:
    return sym if offset == 0 else f"{sym}{offset:+d}"


def _show_access(dt: int | None, offsets: tuple[int, ...]) -> str:
    parts = [] if dt is None else [_show_index("t", dt)]
    return ", ".join(parts + [_show_index(ir.DIM_NAMES[d], o) for d, o in enumerate(offsets)])
