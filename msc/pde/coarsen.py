"""Geometric coarsening of structured grids: 1D interpolations and Galerkin coarse operators.

An operator on a grid of unknowns (shape n) is kept as a *coefficient stencil*
{offset: c} with (A v)(x) = sum_o c_o(x) v(x + o), v zero outside (dirichlet)
or wrapped (periodic); c_o is an array over the grid (or broadcastable to it:
constant coefficients stay cheap). Coarsening is one dimension at a time:
P = P_0 x P_1 x ... (linear interpolation along each dimension), R = P^T, and
the coarse operator R A P is computed axis by axis from the coefficient arrays,
so variable coefficients coarsen exactly and no matrix is formed.

Along one axis of n fine points (`Axis1D`):
- dirichlet: coarse point I sits on fine 2I+1, m = n // 2 (odd and even n);
- periodic, n even: on fine 2I, m = n / 2, neighbours wrap;
- periodic, n odd: on fine 2I, m = (n + 1) / 2; fine n-1 and 0 are both coarse
  (adjacent across the wrap), so nothing is interpolated across it.
A fine point between two coarse points takes half of each; a coarse point's own
fine point takes it whole.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

Coefficients = Mapping[tuple[int, ...], np.ndarray]


@dataclass(frozen=True)
class Axis1D:
    """The interpolation along one axis: coarse I -> fine centre[I] (weight 1),
    and fine left/right neighbours (weight 1/2) where valid."""

    n: int
    m: int
    periodic: bool
    centre: np.ndarray
    left: np.ndarray   # fine index of the left neighbour (valid where left_ok)
    right: np.ndarray
    left_ok: np.ndarray
    right_ok: np.ndarray

    @staticmethod
    def of(n: int, periodic: bool) -> Axis1D:
        if periodic:
            m = (n + 1) // 2
            centre = 2 * np.arange(m)
            left, right = (centre - 1) % n, (centre + 1) % n
            coarse = np.zeros(n, bool)
            coarse[centre] = True
            left_ok, right_ok = ~coarse[left], ~coarse[right]
        else:
            m = n // 2
            centre = 2 * np.arange(m) + 1
            left, right = centre - 1, centre + 1
            left_ok, right_ok = left >= 0, right < n
            left, right = np.clip(left, 0, n - 1), np.clip(right, 0, n - 1)
        return Axis1D(n, m, periodic, centre, left, right, left_ok, right_ok)

    def support(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each of the (up to) 3 fine points a coarse point interpolates to:
        (fine index per coarse I, weight per coarse I; 0 where absent)."""
        return [(self.centre, np.ones(self.m)), (self.left, 0.5 * self.left_ok),
                (self.right, 0.5 * self.right_ok)]

    def columns(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """P by fine point y: up to 2 (coarse J per y, weight per y; 0 where absent)."""
        first_j, first_w = np.zeros(self.n, np.int64), np.zeros(self.n)
        second_j, second_w = np.zeros(self.n, np.int64), np.zeros(self.n)
        coarse = np.arange(self.m)
        first_j[self.centre], first_w[self.centre] = coarse, 1.0
        r = self.right_ok
        first_j[self.right[r]], first_w[self.right[r]] = coarse[r], 0.5  # y right of I ...
        lo = self.left_ok
        second_j[self.left[lo]], second_w[self.left[lo]] = coarse[lo], 0.5  # ... and left of I+1
        return [(first_j, first_w), (second_j, second_w)]


def _along(a: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """A 1D array shaped to broadcast along `axis` of an ndim array."""
    shape = [1] * ndim
    shape[axis] = a.size
    return a.reshape(shape)


def along_axis(axis: int, ndim: int, sl: slice) -> tuple[slice, ...]:
    """An index taking `sl` along `axis` and everything along the other axes."""
    return (slice(None),) * axis + (sl,) + (slice(None),) * (ndim - axis - 1)


def galerkin_axis(coefs: Coefficients, shape: tuple[int, ...], axis: int, ax: Axis1D,
                  rows: tuple[int, int] | None = None, origin: int = 0) -> Coefficients:
    """R A P along one axis (the other axes untouched): the coarse coefficient stencil.

    `rows`: only the coarse points [I0, I1) along the axis (one block of the grid over MPI ranks),
    the coefficient arrays given along the axis from fine point `origin` on, over every fine point
    those rows gather from (their centres and one beyond each side, not wrapped); every coarse offset
    is kept, zero or not, so that all blocks have the same ones where they are given the same.

    The 1D weights of each coarse offset are found once per offset along the axis and summed
    before they multiply a coefficient array, over the fine points too where the coefficient is
    constant along the axis."""
    ndim = len(shape)
    out: dict[tuple[int, ...], np.ndarray] = {}
    products: dict[tuple[int, ...], list[tuple[np.ndarray, np.ndarray]]] = {}  # c constant along the axis
    weights = {a: _axis_weights(ax, a, rows) for a in {offset[axis] for offset in coefs}}
    for offset, c in coefs.items():
        key = lambda step: offset[:axis] + (step,) + offset[axis + 1:]  # noqa: E731
        if np.ndim(c) == ndim and np.shape(c)[axis] != 1:  # c varies along the axis
            for x, by_step in weights[offset[axis]]:
                at_x = np.take(c, x - origin, axis=axis)
                for step, w in by_step.items():
                    _accumulate(out, key(step), at_x * _along(w, axis, ndim))
            continue
        summed: dict[int, np.ndarray] = {}
        for _, by_step in weights[offset[axis]]:
            for step, w in by_step.items():
                summed[step] = summed[step] + w if step in summed else w
        for step, w in summed.items():
            products.setdefault(key(step), []).append((np.asarray(c), w))
    for k, terms in products.items():
        _accumulate(out, k, _outer_sum(terms, axis, ndim))
    return {k: v for k, v in out.items() if rows is not None or np.any(v != 0)}


def _axis_weights(ax: Axis1D, a: int, block: tuple[int, int] | None = None
                  ) -> list[tuple[np.ndarray, dict[int, np.ndarray]]]:
    """For a fine offset `a` along the axis: per fine support point x of the coarse rows (all, or
    those of `block`: x not wrapped), the weights of (R A P) by coarse step (the coarse offset),
    each an array over the coarse rows."""
    rows = np.arange(ax.m) if block is None else np.arange(*block)
    support = ax.support()
    if block is not None:  # each row's centre and its neighbours, not wrapped
        centre = ax.centre[rows]
        support = [(centre + k, w[rows]) for k, (_, w) in zip((0, -1, 1), support)]
    out = []
    for x, w1 in support:
        y = x + a
        inside = np.ones(rows.size, bool) if ax.periodic else (y >= 0) & (y < ax.n)
        y = y % ax.n
        by_step: dict[int, np.ndarray] = {}
        for j, w2 in ax.columns():
            weight = w1 * w2[y] * inside
            s = j[y] - rows
            if ax.periodic:
                s = (s + ax.m // 2) % ax.m - ax.m // 2
            for step in np.unique(s[weight != 0]).tolist():
                w = np.where(s == step, weight, 0.0)
                by_step[step] = by_step[step] + w if step in by_step else w
        out.append((x, by_step))
    return out


def _outer_sum(terms: list[tuple[np.ndarray, np.ndarray]], axis: int, ndim: int) -> np.ndarray:
    """sum_k c_k * w_k, each c_k constant along `axis` and w_k an array along it: one matrix product."""
    shape = np.broadcast_shapes((1,) * ndim, *(np.shape(c) for c, _ in terms))
    before, after = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
    stack = np.stack([np.broadcast_to(c, shape).reshape(before, after) for c, _ in terms], axis=1)  # (A, K, B)
    weights = np.stack([w for _, w in terms], axis=1)  # (m, K)
    total = np.matmul(weights, stack)  # (A, m, B), contiguous
    return total.reshape(shape[:axis] + (weights.shape[0],) + shape[axis + 1:])


def _accumulate(out: dict[tuple[int, ...], np.ndarray], key: tuple[int, ...], term: np.ndarray) -> None:
    """out[key] += term (a fresh array), in place where the shapes allow."""
    have = out.get(key)
    if have is None:
        out[key] = term
    elif have.shape == np.broadcast_shapes(have.shape, term.shape):
        have += term
    else:
        out[key] = have + term


def first_centre(fine: int, base: int) -> int:
    """The first coarse point centred at or after fine point `fine` (coarse point I sits on fine
    2I + base: 1 dirichlet, 0 periodic); a block of fine points [s, e) centres [first_centre(s),
    first_centre(e))."""
    return (fine - base + 1) // 2


def galerkin_block(coefs: Coefficients, n: tuple[int, ...], start: tuple[int, ...], count: tuple[int, ...],
                   periodic: bool) -> Coefficients:
    """R A P on one block of a grid of `n` unknowns, every axis coarsened (Axis1D.of): `coefs` each
    c_o over the block [start, start + count) with one more point on every side (beyond a dirichlet
    edge any value: the weights there are zero; periodic: wrapped), or broadcastable to it; the
    result each coarse c_o over the coarse points centred in the block (`first_centre`)."""
    base = 0 if periodic else 1
    shape = tuple(c + 2 for c in count)
    for d, (m, s, c) in enumerate(zip(n, start, count)):
        rows = (first_centre(s, base), first_centre(s + c, base))
        coefs = galerkin_axis(coefs, shape, d, Axis1D.of(m, periodic), rows, s - 1)
        shape = shape[:d] + (rows[1] - rows[0],) + shape[d + 1:]
    return coefs


def galerkin(coefs: Coefficients, shape: tuple[int, ...],
             axes: list[Axis1D | None]) -> tuple[Coefficients, tuple[int, ...]]:
    """R A P over every axis that has a transfer (None: the axis is kept), and the coarse grid
    (through a small proxy grid where the coefficients allow: `_by_proxy`)."""
    proxy = _by_proxy(coefs, shape, axes)
    if proxy is not None:
        return proxy
    for d, ax in enumerate(axes):
        if ax is not None:
            coefs = galerkin_axis(coefs, shape, d, ax)
            shape = shape[:d] + (ax.m,) + shape[d + 1:]
    return coefs, shape


def _classes(n: int) -> np.ndarray:
    """The class of each point of a dirichlet axis: 0 the first, 1 inside, 2 the last."""
    out = np.ones(n, np.int64)
    out[0], out[-1] = 0, 2
    return out


def _expand(compact: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A coefficient given per class (3 values per axis) as an array over the grid `shape`."""
    for d, n in enumerate(shape):
        compact = np.take(compact, _classes(n), axis=d)
    return compact


class ClassCoefficients(Mapping[tuple[int, ...], np.ndarray]):
    """A dirichlet coefficient stencil whose every c_o depends on each axis only through the class
    of the point (first, inside, last): kept per class (`compact[o]`, 3 values per axis), each c_o
    expanded over the grid `shape` only when it is read. The Galerkin levels of a constant-coefficient
    operator are these (`_by_proxy`)."""

    def __init__(self, compact: dict[tuple[int, ...], np.ndarray], shape: tuple[int, ...]) -> None:
        self.compact, self.shape = compact, shape

    def __getitem__(self, offset: tuple[int, ...]) -> np.ndarray:
        return _expand(self.compact[offset], self.shape)

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return iter(self.compact)

    def __len__(self) -> int:
        return len(self.compact)


def by_class(coefs: Coefficients, shape: tuple[int, ...]) -> Coefficients:
    """A dirichlet coefficient stencil as ClassCoefficients where every c_o depends on the axes only
    through the points' classes, else as given."""
    compact = _compact(coefs, shape)
    return coefs if compact is None else ClassCoefficients(compact, shape)


def _compact(coefs: Coefficients, shape: tuple[int, ...]) -> dict[tuple[int, ...], np.ndarray] | None:
    """The coefficients per class (first, inside, last point of each axis), or None when some
    coefficient varies among the inside points or is not given over the whole grid."""
    if isinstance(coefs, ClassCoefficients) and coefs.shape == shape:
        return dict(coefs.compact)
    ndim = len(shape)
    picks = [np.array([0, n // 2, n - 1]) for n in shape]
    out: dict[tuple[int, ...], np.ndarray] = {}
    for o, c in coefs.items():
        if np.ndim(c) == 0:
            out[o] = np.full((3,) * ndim, float(c))
            continue
        full = np.broadcast_to(c, shape)
        compact = full[np.ix_(*picks)]
        if not np.array_equal(_expand(compact, shape), full):
            return None
        out[o] = compact
    return out


def _by_proxy(coefs: Coefficients, shape: tuple[int, ...],
              axes: list[Axis1D | None]) -> tuple[Coefficients, tuple[int, ...]] | None:
    """R A P of a dirichlet operator whose coefficients depend on each axis only through the
    class of the point (first, inside, last; constant coefficients and their Galerkin levels),
    computed on a proxy grid of the same classes and parities, small enough to cost nothing, and
    expanded; None when that does not apply (periodic, a kept axis, a short axis, varying
    coefficients) or when the proxy's coarse coefficients are not per class themselves."""
    if any(ax is None or ax.periodic for ax in axes):
        return None
    radius = max(max(abs(k) for k in o) for o in coefs)
    least = 2 * (4 + 2 * radius)
    if any(n < 2 * least for n in shape):
        return None
    compact = _compact(coefs, shape)
    if compact is None:
        return None
    proxy_shape = tuple(least + n % 2 for n in shape)
    coarse_compact = _proxy_product(proxy_shape, tuple((o, np.asarray(c, float).tobytes())
                                                       for o, c in sorted(compact.items())))
    if coarse_compact is None:
        return None
    coarse = tuple(ax.m for ax in axes)  # type: ignore[union-attr]
    return ClassCoefficients(dict(coarse_compact), coarse), coarse


@functools.lru_cache(maxsize=64)
def _proxy_product(proxy_shape: tuple[int, ...],
                   compact: tuple[tuple[tuple[int, ...], bytes], ...]) -> dict[tuple[int, ...], np.ndarray] | None:
    """R A P on the proxy grid of the coefficients per class (`compact`: offset and the float64
    values of its 3 x ... x 3 classes), per class again (None: it is not). Memoized: a pure function
    of its arguments, which repeated solves of one operator share (the product costs about 4 ms of
    small numpy operations per level); the arrays returned are read-only."""
    classes = (3,) * len(proxy_shape)
    proxy = {o: _expand(np.frombuffer(b).reshape(classes), proxy_shape) for o, b in compact}
    coarse_proxy = proxy_shape
    for d, n in enumerate(proxy_shape):
        proxy = galerkin_axis(proxy, coarse_proxy, d, Axis1D.of(n, False))
        coarse_proxy = coarse_proxy[:d] + (n // 2,) + coarse_proxy[d + 1:]
    out = _compact(proxy, coarse_proxy)
    for c in (out or {}).values():
        c.setflags(write=False)
    return out


def diagonal(coefs: Coefficients, shape: tuple[int, ...]) -> np.ndarray:
    """The operator's diagonal, broadcastable to the grid (a number for constant coefficients)."""
    return np.asarray(coefs.get((0,) * len(shape), 0.0), float)


def gershgorin_ratio(coefs: Coefficients, shape: tuple[int, ...]) -> float:
    """max_x sum_o |c_o(x)| / |c_0(x)|: a bound on the spectral radius of D^-1 A (per class, where
    the coefficients are given per class: every class has points on the grid)."""
    values = coefs.compact if isinstance(coefs, ClassCoefficients) else coefs
    total = sum(np.abs(np.asarray(c, float)) for c in values.values())
    return float(np.max(total / np.abs(np.asarray(values.get((0,) * len(shape), 0.0), float))))


def is_symmetric(coefs: Coefficients, shape: tuple[int, ...], periodic: bool, rtol: float = 1e-12) -> bool:
    """Whether A = A^T: c_o(x) == c_{-o}(x + o) wherever x + o is on the grid."""
    scale = max(float(np.max(np.abs(c))) for c in coefs.values())
    for offset, c in coefs.items():
        mirror = coefs.get(tuple(-o for o in offset))
        if mirror is not None and np.ndim(c) == 0 and np.ndim(mirror) == 0:  # constant coefficients
            if abs(float(c) - float(mirror)) > rtol * scale:
                return False
            continue
        full = np.broadcast_to(c, shape)
        if mirror is None:
            if np.any(_shifted_view(full, offset, periodic, shape) != 0):
                return False
            continue
        there = np.broadcast_to(mirror, shape)
        if periodic:
            there = np.roll(there, tuple(-o for o in offset), axis=tuple(range(len(shape))))
            if np.max(np.abs(full - there)) > rtol * scale:
                return False
            continue
        here_sl, there_sl = _shifted(shape, offset), _shifted(shape, tuple(-o for o in offset))
        if full[here_sl].size and np.max(np.abs(full[here_sl] - there[there_sl])) > rtol * scale:
            return False
    return True


def _shifted_view(full: np.ndarray, offset: tuple[int, ...], periodic: bool, shape: tuple[int, ...]) -> np.ndarray:
    """The coefficients at the points x whose neighbour x + offset is on the grid."""
    return full if periodic else full[_shifted(shape, offset)]


Box = tuple[tuple[int, ...], tuple[int, ...]]  # lo, hi: the points lo[d] <= x_d < hi[d]


@dataclass(frozen=True)
class UniformRegion:
    """Where a coefficient stencil is one constant stencil (`values`): the box `inside`; the
    boxes of `shell` cover the rest of the grid (empty: the constant stencil holds everywhere)."""

    values: dict[tuple[int, ...], float]
    inside: Box
    shell: tuple[Box, ...]


def uniform_region(coefs: Coefficients, shape: tuple[int, ...], periodic: bool,
                   least: float = 0.5) -> UniformRegion | None:
    """The box where every c_o(x) equals its value at the grid's centre (dirichlet: where x + o
    is outside, c_o(x) multiplies a zero and is not compared), found by peeling the boundary plane
    with the most differing points until none is left; None when it would cover less than `least`
    of the grid. Galerkin operators of constant-coefficient operators differ only next to the
    boundary (even sizes: the last coarse point's interpolation is cut short)."""
    per_class = isinstance(coefs, ClassCoefficients) and all(abs(k) <= 1 for o in coefs for k in o)
    given, grid = (coefs.compact, (3,) * len(shape)) if per_class else (coefs, shape)  # type: ignore[union-attr]
    centre = tuple(n // 2 for n in grid)
    values = {o: float(np.broadcast_to(c, grid)[centre]) for o, c in given.items()}
    differs = np.zeros(grid, bool)  # per class (then expanded), where the coefficients are given so
    for o, c in given.items():
        if np.ndim(c) and np.any(c != values[o]):
            here = (...,) if periodic else _shifted(grid, o)
            differs[here] |= np.broadcast_to(c, grid)[here] != values[o]
    if grid != shape:
        differs = _expand(differs, shape)
    lo, hi = [0] * len(shape), list(shape)
    shell: list[Box] = []
    while True:
        inside = differs[tuple(slice(a, b) for a, b in zip(lo, hi))]
        if not inside.any():
            return UniformRegion(values, (tuple(lo), tuple(hi)), tuple(shell))
        counts = {(d, side): int(np.count_nonzero(np.take(inside, 0 if side == 0 else -1, axis=d)))
                  for d in range(len(shape)) for side in (0, 1)}
        d, side = max(counts, key=lambda k: counts[k])
        plane_lo, plane_hi = list(lo), list(hi)
        if side == 0:
            plane_hi[d] = lo[d] + 1
            lo[d] += 1
        else:
            plane_lo[d] = hi[d] - 1
            hi[d] -= 1
        shell.append((tuple(plane_lo), tuple(plane_hi)))
        if np.prod([b - a for a, b in zip(lo, hi)]) < least * np.prod(shape):
            return None


Piece = tuple[Box, dict[tuple[int, ...], float]]  # a box where c_o(x) is one value per offset


def class_pieces(coefs: ClassCoefficients, inside: Box) -> list[Piece] | None:
    """Boxes covering the grid outside `inside` (a box of whole classes), on each of which the
    coefficient stencil is one constant stencil: the classes, merged where neighbouring classes
    agree wherever x + o is on the grid (where it is not, c_o(x) multiplies a zero: the piece's
    value for an offset outside at all its points is 0). None for offsets beyond radius 1, or
    an `inside` that is not whole classes."""
    ndim, n = len(coefs.shape), coefs.shape
    if any(abs(k) > 1 for o in coefs for k in o) or any(
            lo not in (0, 1) or hi not in (m - 1, m) for lo, hi, m in zip(*inside, n)):
        return None
    starts = [(0, 1, m - 1, m) for m in n]  # class c spans [starts[c], starts[c + 1])
    kept = [range(_class_of(lo, m), _class_of(hi - 1, m) + 1) for lo, hi, m in zip(*inside, n)]
    pieces: list[tuple[list[tuple[int, int]], dict[tuple[int, ...], float | None]]] = []
    for k in np.ndindex(*(3,) * ndim):
        if all(c in r for c, r in zip(k, kept)):
            continue
        outside = lambda o, k=k: any(c == 0 and d < 0 or c == 2 and d > 0 for c, d in zip(k, o))  # noqa: E731
        pieces.append(([(c, c + 1) for c in k], {o: None if outside(o) else float(c[k])
                                                  for o, c in coefs.compact.items()}))
    merged = True
    while merged:
        merged = False
        for i, j in itertools.combinations(range(len(pieces)), 2):
            (a, va), (b, vb) = pieces[i], pieces[j]
            differ = [d for d in range(ndim) if a[d] != b[d]]
            if len(differ) != 1 or not (a[differ[0]][1] == b[differ[0]][0] or b[differ[0]][1] == a[differ[0]][0]):
                continue
            if any(va[o] is not None and vb[o] is not None and va[o] != vb[o] for o in va):
                continue
            d = differ[0]
            span = [(min(a[d][0], b[d][0]), max(a[d][1], b[d][1])) if e == d else a[e] for e in range(ndim)]
            pieces[i] = (span, {o: va[o] if va[o] is not None else vb[o] for o in va})
            del pieces[j]
            merged = True
            break
    return [((tuple(starts[d][r[0]] for d, r in enumerate(span)), tuple(starts[d][r[1]] for d, r in enumerate(span))),
             {o: v or 0.0 for o, v in values.items()}) for span, values in pieces]


def _class_of(i: int, n: int) -> int:
    return 0 if i == 0 else 2 if i == n - 1 else 1


def _shifted(shape: tuple[int, ...], offset: tuple[int, ...]) -> tuple[slice, ...]:
    """The points x whose neighbour x + offset is on the (dirichlet) grid."""
    return tuple(slice(max(0, -o), n - max(0, o)) for o, n in zip(offset, shape))


def sparse_matrix(coefs: Coefficients, shape: tuple[int, ...], periodic: bool):  # type: ignore[no-untyped-def]
    """The coefficient stencil as a CSR matrix (C order), for the coarsest level's direct solve."""
    import scipy.sparse as sp  # imported where used: `import msc` stays light

    N = int(np.prod(shape))
    index = np.arange(N).reshape(shape)
    rows, cols, vals = [], [], []
    for offset, c in coefs.items():
        full = np.broadcast_to(c, shape)
        if periodic:
            target = np.roll(index, tuple(-o for o in offset), axis=tuple(range(len(shape))))
            rows.append(index.ravel())
            cols.append(target.ravel())
            vals.append(full.ravel())
            continue
        here, there = _shifted(shape, offset), _shifted(shape, tuple(-o for o in offset))
        rows.append(index[here].ravel())
        cols.append(index[there].ravel())
        vals.append(full[here].ravel())
    A = sp.csr_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(N, N))
    A.sum_duplicates()
    A.eliminate_zeros()
    return A
