"""Matrix-free operators: an operator applied, its residual and Jacobi sweeps, as compiled stencils.

A `CompiledOperator` owns one set of kernel buffers and the kernels built
from one expression K(v) over the unknown v (compiled by a node target,
openmp by default, each when first used):

    apply     v[t+1] = K(v)
    residual  v[t+1] = b - K(v)            (v[t] is kept: it is the other slot)
    jacobi    v[t+1] = v + s * w * (b - K(v))  (w = weight / diagonal, s this sweep's scale; `sweeps`
                                           steps in one call where their scales are equal)
    jacobi    v[t+1] = v + omega * (b - K(v))  (the same with one weight for every point:
                                               a parameter, so no weight field is streamed)
    first     v[t+1] = s * w * b  (or s * omega * b: the first sweep from v = 0, reading no v)
    two       v[t+1] = (s1 + s) w b - s w K(s1 w b)  (the first two sweeps from v = 0 in one, reading
                                                    b only)

K is either an msc.Operator's expression, scaled (alpha*v + beta*L(v), the
implicit step's I - theta*dt*L included) or a coefficient stencil
sum_o c_o v(x+o) (msc.pde.coarsen; the coarse levels of multigrid), whose
coefficients are fields, or kernel parameters where they are one constant
stencil: everywhere, or in a box while the fields' kernels run on the planes
around it (`Interior`, ADR 0050). The operator's constant part (a source
term in L) is measured once, K(0), and folded into b, so the kernels act as
the linear part A.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any

import numpy as np

from msc import ir
from msc.ir.arguments import bind_arguments
from msc.pde.coarsen import Box, ClassCoefficients, Piece, UniformRegion, class_pieces, uniform_region
from msc.pde.operator import substitute
from msc.pde.vectors import gather, scatter
from msc.runtime.buffers import aligned_empty, buffer_like, ghost_width, pack, put_level
from msc.runtime.threads import default_threads
from msc.stencil import Stencil

if TYPE_CHECKING:
    from msc.pde.operator import Operator

RHS, WEIGHT, OMEGA = "mg_rhs", "mg_weight", "mg_omega"
SCALE, SCALE_FIRST = "mg_scale", "mg_scale_first"  # a sweep's factor on the weights (`two`: the first one's)
UNIFORM = "jacobi_uniform"  # Jacobi with one weight for every point: a parameter, not a field to stream
FIRST, FIRST_UNIFORM = "first", "first_uniform"  # the first Jacobi sweep from u = 0: v[t+1] = w b
TWO, TWO_UNIFORM = "two", "two_uniform"  # the first two sweeps from u = 0: v[t+1] = w (2 b - K(w b))
KINDS = ("apply", "residual", "jacobi", UNIFORM, FIRST, FIRST_UNIFORM, TWO, TWO_UNIFORM)
UNIFORM_OF = {"jacobi": UNIFORM, FIRST: FIRST_UNIFORM, TWO: TWO_UNIFORM}  # the kind with the weight a parameter
INSIDE, PIECE = "inside_", "piece_"  # the kernels of a split operator's constant box and pieces (Interior)
CONSTANT_KINDS = ("apply", "residual", UNIFORM, FIRST_UNIFORM)  # their kinds: the weight is a parameter there
SPLIT_LEAST = 65536  # points: below, one launch of the fields' kernel beat 4 launches per sweep (16^3 and 32^3)


KernelKey = tuple[ir.StencilIR, str, bool]  # stencil, target, box


def _compile(key: KernelKey) -> Any:
    """The kernel of a stencil on a target (`box`: with the entry point that computes a box of the
    grid only); each launch says its thread count, so that is no part of the kernel (a count looked
    up from the free cores made the same kernel two, loaded again as the load changed)."""
    st, target, box = key
    if not box:
        return Stencil(None, stencil_ir=st).compile(target)
    from msc.codegen import get_target

    return get_target(target).compile(Stencil(None, stencil_ir=st).poly(None), threads=None, box=True)


class _Built:
    """The kernels built in this process, the `kept` used last: a level's kernels are the same for
    every solve. It says which are here, so that only the others are built side by side (a pool of
    build threads costs more than a solve's setup of kernels already built: 128^3, 11 of 25 ms)."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._kernels: OrderedDict[KernelKey, Any] = OrderedDict()
        self._lock = threading.Lock()  # the build threads share it

    def __contains__(self, key: KernelKey) -> bool:
        return key in self._kernels

    def kernel(self, key: KernelKey) -> Any:
        with self._lock:
            kernel = self._kernels.get(key)
            if kernel is not None:
                self._kernels.move_to_end(key)
                return kernel
        kernel = _compile(key)
        with self._lock:
            self._kernels[key] = kernel
            if len(self._kernels) > self._kept:
                self._kernels.popitem(last=False)
        return kernel


_BUILT = _Built(kept=64)


@dataclass(frozen=True)
class Interior:
    """A coefficient stencil split up: on the box `inside` (interior coordinates) a constant
    stencil `K`, its coefficients kernel parameters (`values`); the coefficient fields' stencil on
    the boxes of `shell`; on each box of `pieces` the constant stencil `piece_K` with the piece's
    values. Each step is one launch per box."""

    K: ir.Expr
    values: dict[str, float]
    inside: Box
    shell: tuple[Box, ...]
    pieces: tuple[tuple[Box, dict[str, float]], ...] = ()
    piece_K: ir.Expr | None = None


def _read(name: str, offsets: tuple[int, ...], dt: int | None = 0) -> ir.FieldRead:
    return ir.FieldRead(name, dt, offsets)


def _sum(terms: list[ir.Expr]) -> ir.Expr:
    out = terms[0]
    for t in terms[1:]:
        out = ir.BinOp("+", out, t)
    return out


@lru_cache(maxsize=256)  # a level's stencils are the same for every solve; building one balances its trees
def _stencil(kind: str, name: str, K: ir.Expr, unknown: str, decls: tuple[ir.FieldDecl, ...],
             params: tuple[str, ...], boundary: str, loc: ir.SourceLoc | None) -> ir.StencilIR:
    """The kernel of K of one kind (module docstring); the kinds with a weight field declare it."""
    ndim = decls[0].ndim
    zero = (0,) * ndim
    v, b = _read(unknown, zero), _read(RHS, zero, None)
    uniform = kind in (UNIFORM, FIRST_UNIFORM, TWO_UNIFORM)
    if kind in ("jacobi", FIRST, TWO):
        decls = (*decls, ir.FieldDecl(WEIGHT, ndim, decls[0].dtype, window=0, written=False))
    w = ir.ParamRef(OMEGA) if uniform else _read(WEIGHT, zero, None)
    scale, first_scale = ir.ParamRef(SCALE), ir.ParamRef(SCALE_FIRST)
    scales: tuple[str, ...] = (SCALE,)
    if kind in ("apply", "residual"):
        expr, scales = (K if kind == "apply" else ir.BinOp("-", b, K)), ()
    elif kind in (FIRST, FIRST_UNIFORM):
        expr = ir.BinOp("*", ir.BinOp("*", scale, w), b)
    elif kind in (TWO, TWO_UNIFORM):  # (s1 + s) w b - s w K(s1 w b): K's reads of v read the first sweep's
        def first_sweep(r: ir.FieldRead) -> ir.Expr:
            w_there = ir.ParamRef(OMEGA) if uniform else _read(WEIGHT, r.offsets, None)
            u1 = ir.BinOp("*", ir.BinOp("*", first_scale, w_there), _read(RHS, r.offsets, None))
            return u1 if r.name == unknown else r
        both = ir.BinOp("*", ir.BinOp("+", first_scale, scale), b)
        expr = ir.BinOp("*", w, ir.BinOp("-", both, ir.BinOp("*", scale, substitute(K, first_sweep))))
        scales = (SCALE, SCALE_FIRST)
    else:
        expr = ir.BinOp("+", v, ir.BinOp("*", ir.BinOp("*", scale, w), ir.BinOp("-", b, K)))
    return ir.StencilIR(f"{name}_{kind}", ndim, decls, params + ((OMEGA,) if uniform else ()) + scales,
                        (ir.Statement(unknown, expr, loc or ir.SourceLoc("<msc>", 0)),), boundary=boundary,
                        dtype=decls[0].dtype)


def _padded(box: Box, ring: tuple[int, ...]) -> Box:
    """A box of interior coordinates in the buffers' (the ring added)."""
    lo, hi = box
    return tuple(a + r for a, r in zip(lo, ring)), tuple(b + r for b, r in zip(hi, ring))


class _Lazy:
    """A kernel built when first used (a level runs some of its kinds only)."""

    def __init__(self, make: Callable[[], ir.StencilIR], target: str, box: bool) -> None:
        self._make, self._target, self._box = make, target, box
        self._ir: ir.StencilIR | None = None
        self._kernel: Any = None

    @property
    def ir(self) -> ir.StencilIR:
        if self._ir is None:
            self._ir = self._make()
        return self._ir

    @property
    def _key(self) -> KernelKey:
        return self.ir, self._target, self._box

    @property
    def built(self) -> bool:
        """Whether the kernel is built, here or for an earlier operator in this process."""
        return self._kernel is not None or self._key in _BUILT

    @property
    def kernel(self) -> Any:
        if self._kernel is None:
            self._kernel = _BUILT.kernel(self._key)
        return self._kernel


class CompiledOperator:
    """A linear operator A on a grid of unknowns (shape `n`), applied by compiled stencils.

    The unknown's current value lives in the kernel buffers (`u`, a writable view);
    `sweep`, `residual` and `apply` run the kernels on it."""

    def __init__(self, name: str, K: ir.Expr, unknown: str, ndim: int, boundary: str,
                 inputs: Mapping[str, Any], fields: tuple[str, ...], params: tuple[str, ...],
                 shape: tuple[int, ...], ring: tuple[int, ...], target: str, threads: int | None,
                 loc: ir.SourceLoc | None, interior: Interior | None = None, dtype: str = "float64") -> None:
        self.unknown = unknown
        decls = (ir.FieldDecl(unknown, ndim, dtype, window=1, written=True),
                 *(ir.FieldDecl(f, ndim, dtype, window=0, written=False) for f in (RHS, *fields)))
        self.kernels = {kind: _Lazy(partial(_stencil, kind, name, K, unknown, decls, params, boundary, loc),
                                    target, interior is not None) for kind in KINDS}
        if interior is not None:
            parts = [(INSIDE, interior.K, tuple(interior.values))]
            if interior.piece_K is not None:
                parts.append((PIECE, interior.piece_K, tuple(interior.pieces[0][1])))
            self.kernels.update({part + kind: _Lazy(partial(_stencil, kind, f"{name}_{part}", K_part, unknown,
                                                            decls[:2], names, boundary, loc), target, True)
                                 for part, K_part, names in parts for kind in CONSTANT_KINDS})
        full = tuple(s + 2 * r for s, r in zip(shape, ring))
        zero = np.broadcast_to(np.zeros((), dtype), full)
        at_zero = (unknown, RHS, *(f for f in fields if f not in inputs))  # filled later, if at all
        given = {k: np.asarray(v, dtype) if k in fields else v for k, v in inputs.items()}  # in the kernels' type
        arrays = {**dict.fromkeys(at_zero, zero), **given}  # a weight field only when set
        first = self.kernels["apply"].ir
        args = bind_arguments(first, 0, arrays)
        self._buffers = pack(first, args, zeros=at_zero)
        self._threads = threads or default_threads()
        self._scalars = {**args.scalars, **(interior.values if interior else {})}
        self._inside = None if interior is None else _padded(interior.inside, ring)
        self._shell = () if interior is None else tuple(_padded(box, ring) for box in interior.shell)
        self._pieces = () if interior is None else tuple((box, dict(values)) for box, values in interior.pieces)
        self._piece_boxes = tuple(_padded(box, ring) for box, _ in self._pieces)
        self._extents = self._buffers[unknown].shape[-ndim:]
        self._calls: dict[tuple[str, int, float, float, bool], list[Any]] = {}  # by kind, piece (-1: none),
        # scales, and whether on the direction's buffers (`direction`)
        self._direction: dict[str, np.ndarray] | None = None
        self._scales: tuple[float, ...] = ()  # each sweep's factor on the weights (`set_scales`; none: 1)
        self._smoother = "jacobi"
        g = ghost_width(first)
        self._ghosts = g if any(g) else None
        self.n = tuple(shape)
        self._inner = tuple(slice(gd + rd, gd + rd + nd) for gd, rd, nd in zip(g, ring, shape))
        self.step = 0
        self.shift: np.ndarray | None = None  # K(0): the constant part, folded into b
        self.refresh: Callable[[np.ndarray], None] | None = None

    def slot(self, step: int) -> np.ndarray:
        return self._buffers[self.unknown][step % 2][self._inner]

    @property
    def u(self) -> np.ndarray:
        """The unknown's current value (a writable view into the buffers)."""
        return self.slot(self.step)

    @property
    def threads(self) -> int:
        """The threads the kernels run on."""
        return self._threads

    @property
    def dtype(self) -> np.dtype:
        """The element type of the kernels and their buffers."""
        return self._buffers[self.unknown].dtype

    @property
    def rhs(self) -> np.ndarray:
        """The right-hand side b of `residual` and `sweep` (a writable view)."""
        return self._buffers[RHS][self._inner]

    def set_rhs(self, b: np.ndarray) -> None:
        scatter(b if self.shift is None else b + self.shift, self.rhs, self._threads)

    def set_weight(self, w: np.ndarray | float) -> None:
        """The Jacobi weights w of `sweep` (one number for every point: a kernel parameter; the same
        inside a split operator's constant box and on each of its pieces, where w, a function of the
        diagonal, is constant too: its value at the centre, at the piece's first point)."""
        at = np.broadcast_to(w, self.n)
        self._scalars[OMEGA] = float(at[tuple(n // 2 for n in self.n)])
        for (lo, _), values in self._pieces:
            values[OMEGA] = float(at[lo])
        self._calls.clear()  # the parameters are in the calls
        if np.ndim(w) == 0:
            self._smoother = UNIFORM
        else:
            self._smoother = "jacobi"
            if not self._fields_run:
                return
            if WEIGHT not in self._buffers:
                rhs = self._buffers[RHS]
                self._buffers[WEIGHT] = aligned_empty(rhs.shape, rhs.dtype, zeroed=True)
            self._buffers[WEIGHT][self._inner] = w

    def set_scales(self, scales: tuple[float, ...]) -> None:
        """Each sweep's factor on the Jacobi weights, from the first sweep after u = 0 (or the first of
        `sweep`) on: the steps of a polynomial smoother (1 past the end)."""
        self._scales = tuple(scales)

    def _scale(self, sweep: int) -> float:
        return self._scales[sweep] if sweep < len(self._scales) else 1.0

    def set_field(self, name: str, values: np.ndarray | float, padded: bool = False) -> None:
        """A coefficient field's values over the grid of unknowns (a dirichlet ring stays zero,
        periodic ghost cells wrap), or over the grid with its ring (`padded`)."""
        if padded:
            self._buffers[name][...] = values
        elif self._ghosts is None:
            self._buffers[name][self._inner] = values
        else:
            put_level(self.kernels["apply"].ir, self._buffers[name], np.broadcast_to(values, self.n))

    @property
    def jacobi_kinds(self) -> tuple[str, str, str]:
        """The kinds of `sweep`, of the first sweep from zero and of the first two, for the weights set."""
        if self._smoother == "jacobi":
            return ("jacobi", FIRST, TWO)
        return (UNIFORM, FIRST_UNIFORM, TWO_UNIFORM)

    def from_zero_kinds(self, sweeps: int) -> tuple[str, ...]:
        """The kinds `sweep_from_zero(sweeps)` runs: the first two sweeps in one kernel where b needs
        no refresh (one process, dirichlet: b's ring is zero), K(0) = 0 and one kernel covers the
        grid (a split operator's constant box would need the weights of its neighbours), else the
        first alone."""
        sweep, first, two = self.jacobi_kinds
        if (sweeps >= 2 and self.shift is None and self.refresh is None and self._ghosts is None
                and self._inside is None):
            return (two, sweep) if sweeps > 2 else (two,)
        return (first, sweep) if sweeps > 1 else (first,)

    def unbuilt(self, kinds: tuple[str, ...]) -> list[_Lazy]:
        """The kernels that running `kinds` needs and that are not built yet (a split operator's
        inside kernels too)."""
        names = list(kinds) if self._fields_run else []
        if self._inside is not None:
            names += [INSIDE + UNIFORM_OF.get(name, name) for name in kinds]
        if self._pieces:
            names += [PIECE + UNIFORM_OF.get(name, name) for name in kinds]
        return [self.kernels[name] for name in names if not self.kernels[name].built]

    def _run(self, kind: str, steps: int, scales: tuple[float, float] = (1.0, 1.0), t0: int | None = None,
             direction: bool = False) -> None:
        """`steps` steps of `kind` from t0 (default self.step), with the weights' factors `scales` (this
        sweep's, and the first one's for `two`), on the direction's buffers if `direction`."""
        t0 = self.step if t0 is None else t0
        if self._inside is None:
            self._launch(kind, t0, steps, scales=scales, direction=direction)
            return
        inside, piece_kind = INSIDE + UNIFORM_OF.get(kind, kind), PIECE + UNIFORM_OF.get(kind, kind)
        for t in range(t0, t0 + steps):
            self._launch(inside, t, 1, self._inside, scales=scales, direction=direction)
            for piece, box in enumerate(self._piece_boxes):
                self._launch(piece_kind, t, 1, box, piece, scales, direction)
            for box in self._shell:
                self._launch(kind, t, 1, box, scales=scales, direction=direction)

    @property
    def _fields_run(self) -> bool:
        """Whether the stencil's own kernels run (everywhere, or on a shell): a split operator
        whose pieces cover its shell runs the constant kernel only."""
        return self._inside is None or bool(self._shell)

    def _launch(self, kind: str, t0: int, steps: int, box: Box | None = None, piece: int = -1,
                scales: tuple[float, float] = (1.0, 1.0), direction: bool = False) -> None:
        kernel = self.kernels[kind].kernel
        key = (kind, piece, *scales, direction)
        call = self._calls.get(key)
        if call is None:
            scalars = {**self._scalars, **(self._pieces[piece][1] if piece >= 0 else {}),
                       SCALE: scales[0], SCALE_FIRST: scales[1]}
            buffers = self._direction_buffers() if direction else self._buffers
            call = self._calls[key] = kernel.arguments(buffers, scalars, self._extents)
        if box is None:
            kernel.advance(call, t0, steps, self._threads)
        else:
            kernel.advance_box(call, *box, t0, steps, self._threads)

    def padded(self, step: int) -> np.ndarray:
        """The whole buffer slot of level `step` (ring or ghost cells included)."""
        return self._buffers[self.unknown][step % 2]

    def _refresh(self, padded: np.ndarray | None = None) -> None:
        """Fill the ghost cells or halo of u (or of another `padded` slot) before a kernel reads it:
        `refresh` when set (a halo exchange over MPI ranks), else the periodic wrap (the kernels wrap
        only the levels they write)."""
        padded = self.padded(self.step) if padded is None else padded
        if self.refresh is not None:
            self.refresh(padded)
        elif self._ghosts is not None:
            wrap_ghosts(padded, self._ghosts)

    def sweep(self, sweeps: int, first: int = 0) -> None:
        """`sweeps` weighted-Jacobi sweeps on u for A u = b, with the scales from the `first`-th on
        (sweeps of one scale in one kernel call)."""
        self._refresh()
        for scale, run in itertools.groupby(self._scale(k) for k in range(first, first + sweeps)):
            steps = len(list(run))
            self._run(self._smoother, steps, (scale, 1.0))
            self.step += steps

    def sweep_from_zero(self, sweeps: int) -> None:
        """u = 0, then `sweeps` weighted-Jacobi sweeps: the first is w b, which reads no u, and the
        first two are w (2 b - K(w b)), which reads b only (`from_zero_kinds`; with a constant part
        K(0) folded into b, plain sweeps from u = 0 take it out again)."""
        if self.shift is not None:
            self.u[...] = 0.0
            self.sweep(sweeps)
            return
        first = self.from_zero_kinds(sweeps)[0]
        done = 2 if first in (TWO, TWO_UNIFORM) else 1
        self._run(first, 1, (self._scale(done - 1), self._scale(0)))
        self.step += 1
        if sweeps > done:
            self.sweep(sweeps - done, done)

    def residual(self) -> np.ndarray:
        """b - A u (a view, valid until the next kernel call); u is kept."""
        self._refresh()
        self._run("residual", 1)
        return self.slot(self.step + 1)

    def applied(self, v: np.ndarray) -> np.ndarray:
        """A v as a view into the kernel buffers (valid until the next kernel call); overwrites u."""
        scatter(v, self.u, self._threads)
        return self.applied_to_u()

    def applied_to_u(self) -> np.ndarray:
        """A u for the u in the buffers, as a view (valid until the next kernel call); u is kept."""
        return self._applied(self.step, direction=False)

    def _applied(self, t0: int, direction: bool) -> np.ndarray:
        """A v for v in slot t0 of u's buffers (or of the direction's), as a view into the other slot."""
        slots = (self._direction_buffers() if direction else self._buffers)[self.unknown]
        self._refresh(slots[t0 % 2])
        self._run("apply", 1, t0=t0, direction=direction)
        out = slots[(t0 + 1) % 2][self._inner]
        if self.shift is not None:
            out -= self.shift
        return out

    def _direction_buffers(self) -> dict[str, np.ndarray]:
        if self._direction is None:
            unknown = self._buffers[self.unknown]
            self._direction = {**self._buffers, self.unknown: buffer_like(unknown, zeroed=True)}
        return self._direction

    @property
    def direction(self) -> np.ndarray:
        """A vector d that `applied_direction` reads in place (a writable view into buffers of its own,
        apart from u's: CG's direction, kept across V-cycles without a copy)."""
        return self._direction_buffers()[self.unknown][0][self._inner]

    def applied_direction(self) -> np.ndarray:
        """A d for d = `direction`, as a view into the direction's buffers (valid until the next call);
        d is kept."""
        return self._applied(0, direction=True)

    def apply(self, v: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """A v (into `out` if given, else a fresh array); overwrites u."""
        out = np.empty(self.n) if out is None else out
        gather(self.applied(v), out, self._threads)
        return out

    def measure_shift(self) -> None:
        """K(0) != 0 (a source term): fold it into b from now on."""
        self.shift = None
        k0 = self.apply(np.zeros(self.n))
        self.shift = k0 if np.any(k0 != 0) else None


def wrap_ghosts(a: np.ndarray, ghosts: tuple[int, ...]) -> None:
    """Periodic ghost cells of width ghosts[d] filled from the opposite interior edge, in place."""
    for d, w in enumerate(ghosts):
        if w:
            n = a.shape[d] - 2 * w
            lo, hi = [slice(None)] * a.ndim, [slice(None)] * a.ndim
            lo[d], hi[d] = slice(0, w), slice(n, n + w)
            a[tuple(lo)] = a[tuple(hi)]
            lo[d], hi[d] = slice(n + w, n + 2 * w), slice(w, 2 * w)
            a[tuple(lo)] = a[tuple(hi)]


def operator_expr(L: Operator, alpha: float, beta: float) -> ir.Expr:
    """alpha*u + beta*L(u) over reads of the unknown (at the current level)."""
    u = L.ir.unknowns[0]
    Lu = L.timed(u, {u: (u, 0)})
    terms: list[ir.Expr] = []
    if alpha:
        terms.append(ir.BinOp("*", ir.Const(alpha), _read(u, (0,) * L.ir.ndim)))
    terms.append(Lu if beta == 1.0 else ir.BinOp("*", ir.Const(beta), Lu))
    return _sum(terms)


def from_operator(L: Operator, shape: tuple[int, ...], inputs: Mapping[str, Any], alpha: float, beta: float,
                  target: str, threads: int | None, block: bool = False, dtype: str = "float64") -> CompiledOperator:
    """alpha*I + beta*L on arrays of `shape` (ring included), its coefficients and scalars from `inputs`,
    its kernels and buffers in `dtype`.

    block=True: `shape` is one rank's block with a ring of the operator's radius on every side,
    filled by halo exchanges (`refresh`), whatever the operator's boundary."""
    u = L.ir.unknowns[0]
    periodic = L.ir.boundary == "periodic" and not block
    ring = (0,) * len(shape) if periodic else L.radius
    n = tuple(s - 2 * r for s, r in zip(shape, ring))
    given = {k: v for k, v in inputs.items() if k in L.ir.coefficients or k in L.ir.params}
    tag = f"{L.name}_a{alpha:g}_b{beta:g}".replace("-", "m").replace(".", "p").replace("+", "")
    op = CompiledOperator(tag, operator_expr(L, alpha, beta), u, L.ir.ndim, "periodic" if periodic else "dirichlet",
                          given, L.ir.coefficients, L.ir.params, n, ring, target, threads, L.ir.loc, dtype=dtype)
    if L.linear_forms[u].constant is not None:  # K(0) may be nonzero: a source term
        op.measure_shift()  # before any halo exchange is plugged in: u is zero, ring and halo too
    return op


def from_coefficients(coefs: Mapping[tuple[int, ...], Any], shape: tuple[int, ...], periodic: bool,
                      symmetric: bool, target: str, threads: int | None, dtype: str = "float64",
                      ringed: Mapping[tuple[int, ...], np.ndarray] | None = None) -> CompiledOperator:
    """The coefficient stencil sum_o c_o(x) v(x+o) on a grid of `shape` unknowns (kernels and buffers in `dtype`).

    When the operator is symmetric (c_{-o}(x) = c_o(x-o)), only the offsets o >= 0
    (lexicographically) are stored and c_{-o} is read shifted: half the coefficient traffic.
    Where the coefficients are one constant stencil (coarsen.uniform_region) they are kernel
    parameters, not fields: everywhere, or (dirichlet, grids of SPLIT_LEAST points or more) inside a
    box, the fields' stencil running on the boundary planes around it only (Interior).

    `ringed`: the grid is one rank's block of a larger one (`coefs` over the block, `ringed` each c_o
    over the block padded by the stencil's radius, which a symmetric stencil reads shifted); u's ring
    is a halo, filled by exchanges (`refresh`), whatever the boundary."""
    ndim = len(shape)
    zero = (0,) * ndim
    kept = sorted(o for o in coefs if not symmetric or o >= zero)
    names = tuple(f"mg_c{k}" for k in range(len(kept)))
    block = ringed is not None
    periodic = periodic and not block
    ring = (0,) * ndim if periodic else tuple(max(abs(o[d]) for o in coefs) for d in range(ndim))
    boundary = "periodic" if periodic else "dirichlet"
    tag = f"mg_stencil{ndim}d_{len(kept)}{'s' if symmetric else ''}"
    region = uniform_region(coefs, shape, periodic or block)  # a block's neighbours are read: compare everywhere
    interior = None
    if region is not None:
        constant, values = _weighed_alike(region.values)
        if not region.shell:
            return CompiledOperator(f"{tag}_uniform", constant, "v", ndim, boundary, values, (), tuple(values), shape,
                                    ring, target, threads, None, dtype=dtype)
        if not periodic and int(np.prod(shape)) >= SPLIT_LEAST:
            pieces = class_pieces(coefs, region.inside) if isinstance(coefs, ClassCoefficients) else None
            if pieces is not None:
                return _in_pieces(coefs, shape, constant, values, region, pieces, ring, tag, target, threads, dtype)
            interior = Interior(constant, values, region.inside, region.shell)
    field = lambda name: _read(name, zero, None)  # noqa: E731
    op = CompiledOperator(tag, _coefficient_sum(names, kept, symmetric, field), "v", ndim, boundary, {}, names, (),
                          shape, ring, target, threads, None, interior, dtype)
    for name, o in zip(names, kept):
        op.set_field(name, coefs[o] if ringed is None else ringed[o], padded=block)
    return op


def _in_pieces(coefs: ClassCoefficients, shape: tuple[int, ...], constant: ir.Expr, values: dict[str, float],
               region: UniformRegion, pieces: list[Piece], ring: tuple[int, ...], tag: str, target: str,
               threads: int | None, dtype: str) -> CompiledOperator:
    """A coefficient stencil per class as constant stencils only, no coefficient fields: `constant`
    with `values` (the centre's) on the region's inside, and on each piece a stencil whose every
    offset is a parameter of its own (on a piece c_-o(x) need not be c_o(x - o) of the same
    piece), with the piece's values."""
    offsets = sorted(coefs)
    names = tuple(f"mg_p{k}" for k in range(len(offsets)))
    interior = Interior(constant, values, region.inside, (),
                        tuple((box, {name: v[o] for name, o in zip(names, offsets)}) for box, v in pieces),
                        _coefficient_sum(names, offsets, False, ir.ParamRef))
    return CompiledOperator(f"{tag}_pieces", constant, "v", len(shape), "dirichlet", values, (), tuple(values), shape,
                            ring, target, threads, None, interior, dtype)


def _weighed_alike(values: Mapping[tuple[int, ...], float]) -> tuple[ir.Expr, dict[str, float]]:
    """sum_o c_o v(x+o) for constant c_o, as kernel parameters: the offsets of one value share one
    parameter and are summed before it multiplies them (the Galerkin levels of a symmetric stencil
    weigh whole families of offsets alike: a 27-point stencil takes 4 multiplications, not 27)."""
    alike: dict[float, list[tuple[int, ...]]] = {}
    for o in sorted(values):
        alike.setdefault(values[o], []).append(o)
    names = {f"mg_c{k}": value for k, value in enumerate(alike)}
    terms = [ir.BinOp("*", ir.ParamRef(name), _sum([_read("v", o) for o in alike[value]]))
             for name, value in names.items()]
    return _sum(terms), names


def _coefficient_sum(names: tuple[str, ...], offsets: list[tuple[int, ...]], symmetric: bool,
                     coefficient: Callable[[str], ir.Expr]) -> ir.Expr:
    """sum_o c_o v(x+o), c_o read by `coefficient(name)` (a field read at x, or a parameter); symmetric
    (fields only): c_{-o}(x) = c_o(x-o), the field read shifted to -o."""
    terms: list[ir.Expr] = []
    for name, o in zip(names, offsets):
        terms.append(ir.BinOp("*", coefficient(name), _read("v", o)))
        if symmetric and any(o):
            minus = tuple(-d for d in o)
            terms.append(ir.BinOp("*", _read(name, minus, None), _read("v", minus)))
    return _sum(terms)
