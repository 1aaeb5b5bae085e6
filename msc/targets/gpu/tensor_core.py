"""Tensor-core decomposition of a linear constant-coefficient stencil statement.

A statement `u[t+1] = sum_i w_i * src_i[t+dt_i, p + o_i] + c` (weights free of
field reads) is recast as banded-Toeplitz matrix products on MMA fragments
(TCStencil's scheme, extended to 3D, to several source fields and time
levels, and with a second product orientation for star stencils):

* The output is cut into 2D tiles of one fragment, `m` rows along the second
  to last dimension by `n` columns along the last (contiguous) one; in 3D
  every plane of the first dimension is tiled the same way.
* The terms are grouped into *lines*: offsets that differ only along one
  axis. A line along the columns is a right product
  `C[m x n] += A[m x k] @ B[k x n]`: A holds k consecutive input columns of
  the m rows shifted by the line's offset, B a k-row block of the banded
  weight matrix `B[q][j] = w[lo + q - j]`. A line along the rows is a left
  product `C += L[m x k] @ X[k x n]` with `L[i][q] = w[lo + q - i]` and X
  k consecutive input rows. The band's window (`n` or `m` plus the line's
  extent) is cut into k-chunks; chunks whose block is all zero are skipped.
* Box stencils use only column lines; for star stencils the single points
  off the centre row are gathered into one row line where that issues fewer
  MMAs (fp64: a 2D star costs two banded products instead of one per row).

`tensor_core_plan(stencil_ir, statement_index, precision)` builds the plan a
code generator consumes; `replay(plan, read, params)` executes exactly that
plan in numpy, fragment block by fragment block, with the precision's
rounding (fp16/tf32 operands rounded, products accumulated in fp32; fp64
exact), so the decomposition is checked against the reference interpreter.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, NoReturn, cast

import numpy as np

from msc import ir
from msc.errors import ScheduleError
from msc.ir.linear import NonLinearError, linear_form, show
from msc.ir.reference import evaluate

Precision = Literal["fp64", "tf32", "fp16"]
Source = tuple[str, "int | None"]  # (field, dt); dt None: a time-invariant field


@dataclass(frozen=True)
class MmaShape:
    """One warp-level MMA: `D[m x n] = A[m x k] @ B[k x n] + C` with operands of `operand` type."""

    name: str
    m: int
    n: int
    k: int
    operand: str  # the CUDA operand type: double, tf32 (float storage), half
    accumulator: str  # double or float
    min_arch: int  # the first sm_XY that has it


# nvcuda::wmma shapes (a printer that goes through load/store_matrix_sync never
# depends on the fragment element order). For fp16 the narrow m32n8k16 wastes
# least: a column line's window of 8 + 2r columns fits one k=16 chunk.
MMA_SHAPES: dict[str, MmaShape] = {
    "fp64": MmaShape("m8n8k4", 8, 8, 4, "double", "double", 80),
    "tf32": MmaShape("m16n16k8", 16, 16, 8, "tf32", "float", 80),
    "fp16": MmaShape("m32n8k16", 32, 8, 16, "half", "float", 70),
}


@dataclass(frozen=True)
class Line:
    """Terms of one source whose offsets differ only along `axis`.

    `axis` is "cols" (the last dimension: a right product, weights in B) or
    "rows" (the second to last: a left product, weights in A). `shift` is the
    offset in every dimension with 0 at the axis; `coefficients[b - lo]` is
    the weight of the term at axis offset b (Const(0) for a gap).
    """

    source: Source
    axis: Literal["cols", "rows"]
    shift: tuple[int, ...]
    lo: int
    coefficients: tuple[ir.Expr, ...]
    chunks: tuple[int, ...]  # the k-chunks of the band window that hold a weight

    @property
    def hi(self) -> int:
        return self.lo + len(self.coefficients) - 1

    @property
    def points(self) -> int:
        return sum(1 for c in self.coefficients if c != _ZERO)

    def input_origin(self, chunk: int, k: int) -> tuple[int, ...]:
        """Per dimension, where the input operand of `chunk` starts relative to the output tile's first
        point: A's (row, column) for "cols", X's for "rows" (the load_matrix_sync pointer offset)."""
        axis = len(self.shift) - (1 if self.axis == "cols" else 2)
        return tuple(self.lo + chunk * k if d == axis else s for d, s in enumerate(self.shift))

    def band(self, shape: MmaShape, params: Mapping[str, float]) -> np.ndarray:
        """The weight blocks, one per chunk in `chunks`: (chunks, k, n) for "cols", (chunks, m, k) for "rows"."""
        w = [weight_value(c, params) for c in self.coefficients]
        out_len = shape.n if self.axis == "cols" else shape.m
        window = _window(out_len, self)
        full = np.zeros((math.ceil(window / shape.k) * shape.k, out_len))
        for j in range(out_len):
            for b, v in enumerate(w):
                full[b + j, j] = v  # input position lo + q feeds output j when q - j = b
        blocks = np.stack([full[c * shape.k:(c + 1) * shape.k] for c in self.chunks])
        return blocks if self.axis == "cols" else blocks.transpose(0, 2, 1)


@dataclass(frozen=True)
class TensorCorePlan:
    """How statement `statement` (writing `target`) runs on MMA fragments of `shape`."""

    statement: int
    target: str
    precision: Precision
    shape: MmaShape
    ndim: int
    lines: tuple[Line, ...]
    constant: ir.Expr | None  # added to every output point after the products

    @property
    def tile(self) -> tuple[int, int]:
        """Output points of one fragment: rows (second to last dimension) x columns (last)."""
        return self.shape.m, self.shape.n

    @property
    def points(self) -> int:
        """Stencil terms (reads with a weight)."""
        return sum(line.points for line in self.lines)

    def column_alignment(self, source: Source) -> int:
        """The column, relative to the tile's first and modulo k, at which every input operand of
        `source` starts: its staging buffer puts that column on a 256-bit boundary."""
        found = {(line.lo if line.axis == "cols" else line.shift[-1]) % self.shape.k
                 for line in self.lines if line.source == source}
        assert len(found) == 1, f"lines of {source} disagree on their alignment: {found}"
        return found.pop()

    @property
    def mmas_per_tile(self) -> int:
        return sum(len(line.chunks) for line in self.lines)

    @property
    def useful_fraction(self) -> float:
        """Multiply-adds that apply a stencil weight over all multiply-adds the MMAs issue."""
        return self.points / (self.mmas_per_tile * self.shape.k)

    def halo(self, source: Source) -> tuple[tuple[int, int], ...]:
        """Per dimension, (below, above) input points a tile of `source` reads beyond its own,
        including the zero-weight columns/rows a chunk covers (staging buffers must hold them)."""
        lo = [0] * self.ndim
        hi = [0] * self.ndim
        for line in self.lines:
            if line.source != source:
                continue
            axis = self.ndim - 1 if line.axis == "cols" else self.ndim - 2
            out_len = self.shape.n if line.axis == "cols" else self.shape.m
            for d in range(self.ndim):
                if d == axis:
                    first, end = min(line.chunks) * self.shape.k, (max(line.chunks) + 1) * self.shape.k
                    lo[d] = max(lo[d], -(line.lo + first))
                    hi[d] = max(hi[d], line.lo + end - out_len)
                else:
                    lo[d] = max(lo[d], -line.shift[d])
                    hi[d] = max(hi[d], line.shift[d])
        return tuple(zip(lo, hi))


_ZERO = ir.Const(0.0)


def _window(out_len: int, line: Line) -> int:
    return out_len + len(line.coefficients) - 1


def weight_value(c: ir.Expr, params: Mapping[str, float]) -> float:
    """The value of a weight (or the constant part) for these scalar parameters."""
    return float(evaluate(c, _no_read, dict(params), np.dtype("float64")))


def _no_read(read: ir.FieldRead) -> np.ndarray:
    raise AssertionError(f"a weight reads field {read.name}")  # excluded when the plan is built


def tensor_core_plan(stencil_ir: ir.StencilIR, statement_index: int, precision: str) -> TensorCorePlan:
    """The MMA decomposition of one statement; ScheduleError if it is not linear with constant weights."""
    if precision not in MMA_SHAPES:
        raise ScheduleError(f"tensor_cores: precision must be one of {', '.join(MMA_SHAPES)}, got {precision!r}")
    if not 0 <= statement_index < len(stencil_ir.statements):
        raise ScheduleError(f"tensor_cores: stencil '{stencil_ir.name}' has no statement {statement_index}")
    stmt = stencil_ir.statements[statement_index]
    where = f"{stmt.loc}: statement writing '{stmt.target}'"
    if stencil_ir.ndim not in (2, 3):
        raise ScheduleError(f"tensor_cores: {where}: needs a 2D or 3D stencil, this one is {stencil_ir.ndim}D")
    try:  # every field read is an input of the products, so a weight cannot read a field
        form = linear_form(stmt.expr, [f.name for f in stencil_ir.fields])
    except NonLinearError as e:
        _explain_nonlinear(stencil_ir, stmt, where, e)
    terms: dict[Source, dict[tuple[int, ...], ir.Expr]] = {}
    for (name, dt, offsets), coeff in form.terms.items():
        if coeff != _ZERO:  # terms that cancel (u - u) issue nothing
            terms.setdefault((name, dt), {})[offsets] = coeff
    shape = MMA_SHAPES[precision]
    lines = tuple(line for source, points in terms.items() for line in _lines(source, points, shape))
    return TensorCorePlan(statement_index, stmt.target, cast(Precision, precision), shape, stencil_ir.ndim,
                          lines, form.constant)


def _explain_nonlinear(stencil_ir: ir.StencilIR, stmt: ir.Statement, where: str, error: NonLinearError) -> NoReturn:
    """Raise ScheduleError: a variable coefficient if the statement is linear in the written fields, else `error`."""
    try:
        form = linear_form(stmt.expr, [f.name for f in stencil_ir.written_fields])
    except NonLinearError as e:
        raise ScheduleError(f"tensor_cores: {where} is not linear: {e}") from None
    for (name, dt, offsets), coeff in form.terms.items():
        fields = [n.name for n in ir.walk(coeff) if isinstance(n, ir.FieldRead)]
        if fields:
            raise ScheduleError(
                f"tensor_cores: {where}: variable coefficient '{show(coeff)}' of the term "
                f"'{show(ir.FieldRead(name, dt, offsets))}' reads field '{fields[0]}'; "
                "tensor cores need weights that are constants or scalar parameters")
    raise ScheduleError(f"tensor_cores: {where} is not linear in its field reads: {error}") from None


def _lines(source: Source, points: dict[tuple[int, ...], ir.Expr], shape: MmaShape) -> list[Line]:
    """The source's lines for the column alignment that issues fewest MMAs.

    wmma loads need 256-bit aligned operands, and `k` elements are 32 bytes
    for every shape: all of a source's input operands must start at one
    column residue modulo `k` relative to the tile (its staging buffer is
    laid out so that residue is aligned). Column lines start their band
    window there (zero weights in front); row lines need their column there.
    """
    candidates = [_aligned_lines(source, points, shape, align) for align in range(shape.k)]
    # fewest MMAs, then the fewest zero weights in front (the narrowest staging halo)
    return min(candidates, key=lambda lines: (sum(len(line.chunks) for line in lines),
                                              sum(len(line.coefficients) for line in lines)))


def _aligned_lines(source: Source, points: dict[tuple[int, ...], ir.Expr], shape: MmaShape,
                   align: int) -> list[Line]:
    """A column line per row offset; single points off them that share a column (at `align`
    modulo k) gather into a row line when that costs fewer MMAs than their column lines."""
    by_row: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for o in points:
        by_row.setdefault(o[:-1], []).append(o)
    by_col: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for group in by_row.values():
        if len(group) == 1 and group[0][-1] % shape.k == align:
            by_col.setdefault(group[0][:-2] + group[0][-1:], []).append(group[0])
    out: list[Line] = []
    moved: set[tuple[int, ...]] = set()
    for group in by_col.values():
        row_line = _line(source, "rows", group, points, shape, align)
        if len(row_line.chunks) < sum(len(_line(source, "cols", [o], points, shape, align).chunks) for o in group):
            out.append(row_line)
            moved.update(group)
    out += [_line(source, "cols", group, points, shape, align) for group in by_row.values() if group[0] not in moved]
    return out


def _line(source: Source, axis: Literal["cols", "rows"], offsets: list[tuple[int, ...]],
          points: dict[tuple[int, ...], ir.Expr], shape: MmaShape, align: int) -> Line:
    d = len(offsets[0]) - (1 if axis == "cols" else 2)
    along = {o[d]: points[o] for o in offsets}
    lo, hi = min(along), max(along)
    if axis == "cols":  # the band window starts at the aligned column at or before the first weight
        lo -= (lo - align) % shape.k
    shift = tuple(0 if i == d else v for i, v in enumerate(offsets[0]))
    coefficients = tuple(along.get(b, _ZERO) for b in range(lo, hi + 1))
    out_len = shape.n if axis == "cols" else shape.m
    # band entry (q, j) is nonzero when q - j is the position of a weight
    used = {(b + j) // shape.k for j in range(out_len) for b, c in enumerate(coefficients) if c != _ZERO}
    return Line(source, axis, shift, lo, coefficients, tuple(sorted(used)))


# ---------------------------------------------------------------- numpy replay


def round_operand(a: np.ndarray, precision: str) -> np.ndarray:
    """`a` as the MMA unit sees it (float64 values): fp16 and tf32 round to nearest; fp64 unchanged."""
    if precision == "fp64":
        return np.asarray(a, dtype=np.float64)
    if precision == "fp16":
        return np.asarray(a, dtype=np.float32).astype(np.float16).astype(np.float64)
    bits = np.asarray(a, dtype=np.float32).view(np.uint32)
    # cvt.rna.tf32.f32: keep 10 mantissa bits, round half away from zero
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(rounded), rounded, np.asarray(a, dtype=np.float32)).astype(np.float64)


def _reach(plan: TensorCorePlan, source: Source) -> tuple[int, ...]:
    """Per dimension, the largest |offset| of a weighted read of `source`."""
    reach = [0] * plan.ndim
    for line in plan.lines:
        if line.source == source:
            axis = plan.ndim - 1 if line.axis == "cols" else plan.ndim - 2
            weighted = [line.lo + b for b, c in enumerate(line.coefficients) if c != _ZERO]
            for d, s in enumerate(line.shift):
                reach[d] = max(reach[d], max(-min(weighted), max(weighted)) if d == axis else abs(s))
    return tuple(reach)


def replay(plan: TensorCorePlan, read: Callable[[str, int | None], np.ndarray],
           params: Mapping[str, float], interior: tuple[int, ...], dtype: str) -> np.ndarray:
    """Execute `plan` over an output of `interior` points.

    `read(field, dt)` is the source level holding the interior plus a ring of
    the stencil's radius `r` per dimension (the reference interpreter's
    layout: output point p reads `array[p + r + offset]`). The interior is
    covered by whole tiles (reads past the array see zeros; the tail's results
    are cut).
    Each MMA block is one `A @ B` of rounded operands whose exact sum is
    rounded once to the accumulator type and added to the accumulator.
    """
    shape, prec = plan.shape, plan.precision
    acc_t = np.float64 if shape.accumulator == "double" else np.float32
    m, n, k = shape.m, shape.n, shape.k
    lead = interior[:-2]
    rows, cols = math.ceil(interior[-2] / m) * m, math.ceil(interior[-1] / n) * n
    acc = np.zeros((*lead, rows, cols), dtype=acc_t)
    padded: dict[Source, tuple[np.ndarray, tuple[int, ...]]] = {}
    for line in plan.lines:
        if line.source not in padded:
            arr = np.asarray(read(*line.source))
            ring = tuple((a - i) // 2 for a, i in zip(arr.shape, interior))
            reach = _reach(plan, line.source)
            if any(have < need for have, need in zip(ring, reach)):
                raise ValueError(f"replay: source {line.source} has a ring of {ring} around the interior "
                                 f"{interior}, the plan reads {reach} beyond it")
            # zeros past the interior: the tail tiles and the zero-weight edges of the chunks
            extra = [(0, 0)] * (plan.ndim - 2) + [(k, rows - interior[-2] + 2 * m + k),
                                                  (k, cols - interior[-1] + 2 * n + k)]
            ring = (*ring[:-2], ring[-2] + k, ring[-1] + k)
            padded[line.source] = (round_operand(np.pad(arr, extra), prec), ring)
        src, ring = padded[line.source]
        blocks = round_operand(line.band(shape, params), prec)
        for block, chunk in zip(blocks, line.chunks):
            o = [r + v for r, v in zip(ring, line.input_origin(chunk, k))]
            lead_idx = tuple(slice(o[d], o[d] + lead[d]) for d in range(len(lead)))
            if line.axis == "cols":
                slab = src[(*lead_idx, slice(o[-2], o[-2] + rows))]
                # A fragments: each tile's k input columns from its origin
                idx = np.arange(cols // n)[:, None] * n + o[-1] + np.arange(k)[None, :]
                a = slab[..., idx]  # (*lead, rows, tiles, k)
                product = (a @ block).reshape(*lead, rows, cols)
            else:
                slab = src[(*lead_idx, slice(None), slice(o[-1], o[-1] + cols))]
                idx = np.arange(rows // m)[:, None] * m + o[-2] + np.arange(k)[None, :]
                x = slab[..., idx, :]  # (*lead, tiles, k, cols)
                product = (block @ x).reshape(*lead, rows, cols)
            acc += product.astype(acc_t)
    out = acc[(..., slice(0, interior[-2]), slice(0, interior[-1]))]
    if plan.constant is not None:
        out = out + acc_t(weight_value(plan.constant, params))
    return out.astype(dtype)
