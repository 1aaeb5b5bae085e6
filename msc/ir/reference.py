"""The reference interpreter: executes StencilIR with vectorized numpy slices.

This is the ground truth every backend is tested against, so it is kept
plain: one array per time level, every statement evaluated over the whole
interior with shifted slices, periodic reads through a wrapped copy.

Boundary semantics (shared by all backends): with "dirichlet" the ring of
width `radius` is fixed in time and taken from the newest input level; with
"periodic" the arrays are the whole domain and reads wrap around.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from msc import ir
from msc.ir.arguments import BoundArguments, bind_arguments

_UNARY: dict[str, Callable[[Any], Any]] = {
    "sqrt": np.sqrt,
    "exp": np.exp,
    "log": np.log,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "floor": np.floor,
    "abs": np.abs,
}
_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "/": np.divide,
    "**": np.power,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
    "==": np.equal,
    "!=": np.not_equal,
    "&": np.logical_and,
    "|": np.logical_or,
    "minimum": np.minimum,
    "maximum": np.maximum,
    "atan2": np.arctan2,
}


def run_reference(stencil: ir.StencilIR, steps: int, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """Advance `steps` time steps; return the newest level of every written field."""
    args = bind_arguments(stencil, steps, inputs)
    with np.errstate(all="ignore"):  # overflow and NaN follow IEEE as in the compiled kernels (the caller warns)
        return _Interpreter(stencil, args).run(steps)


class _Interpreter:
    def __init__(self, stencil: ir.StencilIR, args: BoundArguments) -> None:
        self.ir = stencil
        self.dtype = np.dtype(stencil.dtype)
        self.periodic = stencil.boundary == "periodic"
        self.r = stencil.radius
        shape = args.shape
        self.interior = tuple(n if self.periodic else n - 2 * r for n, r in zip(shape, self.r))
        self.scalars = {k: self.dtype.type(v) for k, v in args.scalars.items()}
        self.levels: dict[str, list[np.ndarray]] = {}
        for f in stencil.fields:
            arrays = [a.copy() for a in args.levels[f.name]]
            if f.written and not self.periodic:
                newest = arrays[-1]
                for a in arrays[:-1]:
                    _copy_ring(newest, a, self.r)
            self.levels[f.name] = arrays
        self.next: dict[str, np.ndarray] = {}
        self._padded: dict[tuple[str, int | None], np.ndarray] = {}

    def run(self, steps: int) -> dict[str, np.ndarray]:
        for _ in range(steps):
            self.step()
        return {f.name: self.levels[f.name][-1] for f in self.ir.written_fields}

    def step(self) -> None:
        self.next = {}
        self._padded = {}
        for s in self.ir.statements:
            new = self.levels[s.target][-1].copy()  # carries the fixed ring
            new[self._interior_slices()] = evaluate(s.expr, self._read, self.scalars, self.dtype)
            self.next[s.target] = new
        for f in self.ir.written_fields:
            window = self.levels[f.name]
            window.append(self.next[f.name])
            del window[: len(window) - f.window]

    def _interior_slices(self) -> tuple[slice, ...]:
        if self.periodic:
            return tuple(slice(None) for _ in self.r)
        return tuple(slice(r, r + n) for r, n in zip(self.r, self.interior))

    def _read(self, e: ir.FieldRead) -> np.ndarray:
        """A field read over the whole interior."""
        arr = self.source(e.name, e.dt)
        return arr[tuple(slice(r + o, r + o + n) for r, o, n in zip(self.r, e.offsets, self.interior))]

    def source(self, name: str, dt: int | None) -> np.ndarray:
        """The array holding level t+dt of `name`, padded by wrap-around if periodic."""
        if dt is None:
            arr = self.levels[name][-1]
        elif dt == 1:
            arr = self.next[name]
        else:
            arr = self.levels[name][dt - 1]
        if not self.periodic:
            return arr
        key = (name, dt)
        if key not in self._padded:
            self._padded[key] = np.pad(arr, [(r, r) for r in self.r], mode="wrap")
        return self._padded[key]


def evaluate(e: ir.Expr, read: Callable[[ir.FieldRead], np.ndarray], params: Mapping[str, Any],
             dtype: np.dtype[Any]) -> Any:
    """Evaluate an expression with numpy, whole arrays at once: `read` gives each
    field read's array, `params` the scalars."""
    return _Evaluate(read, params, dtype).visit(e)


class _Evaluate(ir.Visitor[Any]):
    def __init__(self, read: Callable[[ir.FieldRead], np.ndarray], params: Mapping[str, Any],
                 dtype: np.dtype[Any]) -> None:
        self.read, self.params, self.dtype = read, params, dtype

    def const(self, e: ir.Const) -> Any:
        return self.dtype.type(e.value)

    def param_ref(self, e: ir.ParamRef) -> Any:
        return self.dtype.type(self.params[e.name])

    def field_read(self, e: ir.FieldRead) -> Any:
        return self.read(e)

    def _number(self, value: Any) -> Any:
        """A comparison's truth as the number C makes of it (1 or 0) where arithmetic uses it; numpy
        refuses -True and True - False, and True + True is True."""
        return value.astype(self.dtype) if getattr(value, "dtype", None) == np.bool_ else value

    def neg(self, e: ir.Neg) -> Any:
        return np.negative(self._number(self.visit(e.operand)))

    def not_(self, e: ir.Not) -> Any:
        return np.logical_not(self.visit(e.operand))

    def bin_op(self, e: ir.BinOp) -> Any:
        lhs, rhs = self.visit(e.lhs), self.visit(e.rhs)
        if e.op in ir.ARITH_OPS:
            lhs, rhs = self._number(lhs), self._number(rhs)
        return _BINARY[e.op](lhs, rhs)

    def call(self, e: ir.Call) -> Any:
        args = [self._number(self.visit(a)) for a in e.args]
        fn = _UNARY.get(e.func) or _BINARY[e.func]
        return fn(*args)

    def where(self, e: ir.Where) -> Any:
        return np.where(self.visit(e.cond), self.visit(e.then), self.visit(e.otherwise)).astype(self.dtype)


def _copy_ring(src: np.ndarray, dst: np.ndarray, radius: tuple[int, ...]) -> None:
    """Copy the boundary ring of width `radius` from src into dst."""
    for d, r in enumerate(radius):
        if r == 0:
            continue
        lo = [slice(None)] * src.ndim
        hi = [slice(None)] * src.ndim
        lo[d], hi[d] = slice(0, r), slice(-r, None)
        dst[tuple(lo)] = src[tuple(lo)]
        dst[tuple(hi)] = src[tuple(hi)]
