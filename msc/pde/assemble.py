"""Vectorised assembly of an operator's matrix A and constant part g.

From the linear form of each unknown's right-hand side: every term
(field, offsets) with coefficient c (a scalar or an array over the interior,
evaluated with numpy) becomes one column of an (N, terms) table of values and
column indices; Dirichlet neighbours that fall on the ring move, times the
ring value, into g. The CSR arrays are read off the table directly (terms are
sorted so each row's columns ascend), without per-point Python loops.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import DTypeLike

from msc import ir
from msc.errors import StencilArgumentError
from msc.ir.reference import evaluate
from msc.pde.problem import non_finite

if TYPE_CHECKING:
    import scipy.sparse as sp

    from msc.pde.operator import Operator


class _Inputs:
    """Checked inputs: scalars, coefficient arrays (padded when periodic) and optional ring arrays."""

    def __init__(self, op: Operator, shape: tuple[int, ...], dtype: DTypeLike, inputs: Mapping[str, Any],
                 block: bool = False) -> None:
        where = self.where = f"operator '{op.name}'"
        dtype = ir.dtype_name(dtype, where)
        if len(shape) != op.ir.ndim or not all(isinstance(n, (int, np.integer)) for n in shape):
            raise StencilArgumentError(f"{where}: shape must be {op.ir.ndim} integers, got {shape!r}")
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(n) for n in shape)
        self.periodic = op.ir.boundary == "periodic" and not block  # a block's arrays come with their ring
        self.r = op.radius
        self.n = tuple(n - 2 * r for n, r in zip(self.shape, self.r)) if block else op.interior_shape(self.shape)
        if min(self.n) < 1:
            raise StencilArgumentError(
                f"{where}: shape {self.shape} leaves no interior inside a ring of width {self.r}")
        known = set(op.ir.unknowns) | set(op.ir.coefficients) | set(op.ir.params)
        unknown = sorted(set(inputs) - known)
        if unknown:
            raise StencilArgumentError(f"{where}: unknown argument(s) {', '.join(unknown)}; it takes "
                                       f"{', '.join(op.ir.unknowns + op.ir.coefficients + op.ir.params)}")
        missing = [n for n in op.ir.coefficients + op.ir.params if n not in inputs]
        if missing:
            raise StencilArgumentError(f"{where}: missing argument(s) {', '.join(missing)}")
        self.params: dict[str, float] = {}
        for p in op.ir.params:
            v = inputs[p]
            if not isinstance(v, (int, float, np.number)) or isinstance(v, bool):
                raise StencilArgumentError(f"{where}: scalar parameter '{p}' must be a number, got {type(v).__name__}")
            self.params[p] = float(v)
            if not np.isfinite(self.params[p]):
                raise StencilArgumentError(f"{where}: scalar parameter '{p}' is {self.params[p]}")
        self.arrays: dict[str, np.ndarray] = {}
        for f in op.ir.coefficients + op.ir.unknowns:
            if f not in inputs or inputs[f] is None:
                continue
            a = inputs[f]
            if not isinstance(a, np.ndarray) or a.shape != self.shape:
                got = a.shape if isinstance(a, np.ndarray) else type(a).__name__
                raise StencilArgumentError(
                    f"{where}: '{f}' must be a numpy array of shape {self.shape} (ring included), got {got}")
            a = a.astype(self.dtype, copy=False)
            bad = non_finite(a)
            if bad:
                what = "coefficient" if f in op.ir.coefficients else "the array (ring included) of unknown"
                raise StencilArgumentError(f"{where}: {what} '{f}' is {bad}")
            self.arrays[f] = np.pad(a, [(r, r) for r in self.r], mode="wrap") if self.periodic else a

    def window(self, name: str, offsets: tuple[int, ...]) -> np.ndarray:
        """The values of field `name` at interior point + offsets, over the interior."""
        a = self.arrays[name]
        return a[tuple(slice(r + o, r + o + n) for r, o, n in zip(self.r, offsets, self.n))]

    def eval(self, e: ir.Expr) -> Any:
        """`e` over the interior; a StencilArgumentError where it is not finite (as 1/h**2 with h=0)."""
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            value = evaluate(e, lambda fr: self.window(fr.name, fr.offsets), self.params, self.dtype)
        if not np.all(np.isfinite(value)):
            given = ", ".join(f"{p}={v!r}" for p, v in self.params.items())
            raise StencilArgumentError(f"{self.where}: a coefficient of the operator is not finite (NaN or inf) "
                                       f"with the arguments given{' (' + given + ')' if given else ''}: "
                                       "a zero step or a coefficient field that divides by zero makes it so")
        return value


def assemble(op: Operator, shape: tuple[int, ...], dtype: DTypeLike, inputs: Mapping[str, Any],
             matrix: bool = True) -> tuple[sp.csr_array | None, np.ndarray]:
    """(A, g) for `op` over arrays of `shape`; A is None when matrix=False (g only)."""
    forms = op.linear_forms
    data = _Inputs(op, shape, dtype, inputs)
    n = data.n
    N = int(np.prod(n))
    strides = [int(np.prod(n[d + 1:])) for d in range(len(n))]
    block = {f: i for i, f in enumerate(op.ir.unknowns)}
    most = max(len(forms[f].terms) for f in block)
    index = np.int32 if N * len(block) * max(most, 1) < 2**31 else np.int64  # bounds columns and nnz
    g_parts, rows_data, rows_cols, rows_counts = [], [], [], []
    for f in op.ir.unknowns:
        form = forms[f]
        g = np.zeros(n, data.dtype)
        if form.constant is not None:
            g += data.eval(form.constant)
        keys = sorted(form.terms, key=lambda k: (block[k[0]], k[2]))
        if matrix:
            vals = np.empty((N, len(keys)), data.dtype)
            cols = np.empty((N, len(keys)), index)
            mask = None if data.periodic else np.ones((N, len(keys)), bool)
        for j, key in enumerate(keys):
            field, _, offsets = key
            coef = data.eval(form.terms[key])
            given = field in data.arrays
            inside = _inside(n, offsets, data.periodic) if matrix or given else None
            if matrix:
                vals.reshape(*n, len(keys))[..., j] = coef  # in place (views), no temporary
                _columns(n, strides, offsets, data.periodic, block[field] * N, out=cols[:, j])
                if inside is not None and mask is not None:
                    mask.reshape(*n, len(keys))[..., j] = inside
            if inside is not None and given:
                g += np.where(inside, 0, coef * data.window(field, offsets))
        g_parts.append(g.reshape(-1))
        if matrix:
            if mask is None:
                rows_data.append(vals.reshape(-1))
                rows_cols.append(cols.reshape(-1))
                rows_counts.append(np.full(N, len(keys)))
            else:
                rows_data.append(vals[mask])
                rows_cols.append(cols[mask])
                rows_counts.append(np.count_nonzero(mask, axis=1).astype(index))
    g_all = _join(g_parts)
    if not matrix:
        return None, g_all
    size = N * len(block)
    counts = _join(rows_counts)
    indptr = np.zeros(size + 1, index)
    np.cumsum(counts, out=indptr[1:])
    import scipy.sparse as sp  # imported where used: `import msc` stays light

    A = sp.csr_array((_join(rows_data), _join(rows_cols), indptr), shape=(size, size))
    if data.periodic:
        A.sum_duplicates()  # wrapped columns neither ascend nor need be distinct on small grids
    return A, g_all


@lru_cache(maxsize=4)
def _arange(n: int, dtype: type) -> np.ndarray:
    a = np.arange(n, dtype=dtype)
    a.flags.writeable = False
    return a


def _join(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _inside(n: tuple[int, ...], offsets: tuple[int, ...], periodic: bool) -> np.ndarray | None:
    """Boolean array over the interior: is point + offsets an unknown? None: everywhere."""
    if periodic or all(o == 0 for o in offsets):
        return None
    mask = np.ones(n, bool)
    for d, (nd, o) in enumerate(zip(n, offsets)):
        if o == 0:
            continue
        i = np.arange(nd) + o
        shape = [1] * len(n)
        shape[d] = nd
        mask &= ((i >= 0) & (i < nd)).reshape(shape)
    return mask


def _columns(n: tuple[int, ...], strides: list[int], offsets: tuple[int, ...], periodic: bool, base: int,
             out: np.ndarray) -> None:
    """Into `out`: the flat column index (plus `base`) of point + offsets for every interior point,
    wrapped if periodic."""
    if not periodic:
        np.add(_arange(out.shape[0], out.dtype), base + sum(o * s for o, s in zip(offsets, strides)), out=out)
        return
    col = np.full(n, base, out.dtype)
    for d, (nd, o) in enumerate(zip(n, offsets)):
        shape = [1] * len(n)
        shape[d] = nd
        col += (((np.arange(nd) + o) % nd) * strides[d]).reshape(shape)
    out[:] = col.reshape(-1)


def coefficient_stencil(op: Operator, shape: tuple[int, ...], inputs: Mapping[str, Any],
                        block: bool = False) -> dict[tuple[int, ...], Any]:
    """A scalar operator's linear part as {offsets: coefficient} (a number, or an array over the interior);
    `block`: over one rank's block, the arrays of `shape` the block padded by the operator's radius
    whatever its boundary (msc.pde.distributed)."""
    (f,) = op.ir.unknowns
    data = _Inputs(op, shape, "float64", inputs, block)
    out: dict[tuple[int, ...], Any] = {}
    for (_, _, offsets), coef in op.linear_forms[f].terms.items():
        value = data.eval(coef)
        out[offsets] = out[offsets] + value if offsets in out else value
    return out
