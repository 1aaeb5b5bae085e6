"""The tensor-core decomposition replayed in numpy equals the reference interpreter.

Stencils are generated as Python source (2D/3D, star/box, radius 1-4, a
scalar-parameter weight, two time levels, a time-invariant input field, both
boundaries) and traced by msc; one step of the reference is compared with
the replay of each statement's plan. fp64 must agree to rounding; tf32/fp16
within the bound documented in docs/tensor_cores.md.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pytest
from stencil_gen import TERMS, generate

import msc
from msc import ir
from msc.errors import ScheduleError
from msc.ir.linear import linear_form
from msc.targets.gpu.tensor_core import (
    MMA_SHAPES,
    TensorCorePlan,
    replay,
    round_operand,
    tensor_core_plan,
    weight_value,
)

DIMS = ("x", "y", "z")
U = 2.0 ** -11  # unit roundoff of fp16 and tf32 operands (10 stored mantissa bits)
U32 = 2.0 ** -24


def _index(offs: tuple[int, ...]) -> str:
    return ", ".join(f"{DIMS[d]}{o:+d}" if o else DIMS[d] for d, o in enumerate(offs))


def _offsets(ndim: int, radius: int, shape: str) -> list[tuple[int, ...]]:
    if shape == "star":
        return [(0,) * ndim] + [tuple(o if d == k else 0 for d in range(ndim))
                                for k in range(ndim) for o in range(-radius, radius + 1) if o]
    return list(itertools.product(range(-radius, radius + 1), repeat=ndim))


def make_stencil(seed: int, ndim: int, shape: str, radius: int, boundary: str) -> msc.Stencil:
    """u[t+1] = weighted sum of u[t] over the full shape, alpha-scaled reads, u[t-1], k (time-invariant), constant."""
    rng = random.Random(seed)
    offs = _offsets(ndim, radius, shape)
    terms = [f"{rng.uniform(-1, 1) / len(offs)!r} * u[t, {_index(o)}]" for o in offs]
    scaled = [f"u[t, {_index(rng.choice(offs))}]" for _ in range(2)]
    body = (" + ".join(terms) + f" + alpha * ({scaled[0]} - 0.5 * {scaled[1]})"
            f" - 0.125 * u[t-1, {_index(rng.choice(offs))}] + 0.25 * k[{_index(rng.choice(offs))}]"
            " + 0.01 * alpha + 0.001")
    zero = _index((0,) * ndim)
    source = (f"@msc.stencil(boundary={boundary!r})\ndef tc{seed}(u, k, alpha):\n"
              f"    u[t+1, {zero}] = {body}\n")
    namespace: dict[str, Any] = {"msc": msc, "t": msc.t, "x": msc.x, "y": msc.y, "z": msc.z}
    exec(compile(source, f"<tensor-core stencil {seed}>", "exec"), namespace)
    return namespace[f"tc{seed}"]


def make_inputs(st: msc.Stencil, seed: int, dtype: str) -> dict[str, Any]:
    r = st.ir.radius
    extents = {2: (37, 19), 3: (5, 11, 13)}[st.ir.ndim]  # not multiples of the tiles: the tails are exercised
    periodic = st.ir.boundary == "periodic"
    shp = tuple(n + (0 if periodic else 2 * rr) for n, rr in zip(extents, r))
    rng = np.random.default_rng(seed)
    old, new = rng.random(shp), rng.random(shp)
    if not periodic:  # the reference fixes the ring of every level to the newest one's
        inner = tuple(slice(rr, rr + n) for rr, n in zip(r, extents))
        ring = new.copy()
        ring[inner] = old[inner]
        old = ring
    return {"u": [old.astype(dtype), new.astype(dtype)], "k": rng.random(shp).astype(dtype), "alpha": 0.3}


def run_replay(st: msc.Stencil, plan: TensorCorePlan, inputs: dict[str, Any],
               dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(replayed interior, reference interior) after one step."""
    r = st.ir.radius
    periodic = st.ir.boundary == "periodic"

    def read(name: str, dt: int | None) -> np.ndarray:
        value = inputs[name]
        arr = value if dt is None else value[dt - 1]
        return np.pad(arr, [(rr, rr) for rr in r], mode="wrap") if periodic else arr

    full = inputs["k"].shape
    interior = full if periodic else tuple(n - 2 * rr for n, rr in zip(full, r))
    got = replay(plan, read, {"alpha": inputs["alpha"]}, interior, dtype)
    ref = st.reference(steps=1, dtype=dtype, **inputs)["u"]
    inner = tuple(slice(None) if periodic else slice(rr, rr + n) for rr, n in zip(r, interior))
    return got, ref[inner]


def magnitude(st: msc.Stencil, inputs: dict[str, Any], precision: str) -> tuple[np.ndarray, np.ndarray]:
    """Per interior point, sum |w||x| and sum (|w| + |x|) over the statement's terms (rounded operands)."""
    r = st.ir.radius
    periodic = st.ir.boundary == "periodic"
    stmt = st.ir.statements[0]
    form = linear_form(stmt.expr, ["u", "k"])
    total = weights = 0.0
    for (name, dt, offs), coeff in form.terms.items():
        value = inputs[name]
        arr = np.asarray(value if dt is None else value[dt - 1], dtype=np.float64)
        if periodic:
            arr = np.pad(arr, [(rr, rr) for rr in r], mode="wrap")
        n = tuple(a - 2 * rr for a, rr in zip(arr.shape, r))
        x = np.abs(round_operand(arr[tuple(slice(rr + o, rr + o + m) for rr, o, m in zip(r, offs, n))], precision))
        w = abs(float(round_operand(np.array(weight_value(coeff, {"alpha": 0.3})), precision)))
        total = total + w * x
        weights = weights + w + x
    return np.asarray(total), np.asarray(weights)


CASES = [(seed, ndim, shape, radius, boundary)
         for seed, (ndim, shape, radius, boundary) in enumerate(
             (ndim, shape, radius, boundary)
             for ndim in (2, 3) for shape in ("star", "box") for radius in (1, 2, 3, 4)
             for boundary in (("dirichlet", "periodic")[radius % 2],))]


@pytest.mark.parametrize("seed,ndim,shape,radius,boundary", CASES)
def test_fp64_replay_equals_reference(seed: int, ndim: int, shape: str, radius: int, boundary: str) -> None:
    st = make_stencil(seed, ndim, shape, radius, boundary)
    inputs = make_inputs(st, seed, "float64")
    plan = tensor_core_plan(st.ir, 0, "fp64")
    got, ref = run_replay(st, plan, inputs, "float64")
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)
    assert plan.points == len(_offsets(ndim, radius, shape)) + 2  # + u[t-1] and k, the alpha reads merged in


@pytest.mark.parametrize("precision", ["tf32", "fp16"])
@pytest.mark.parametrize("seed,ndim,shape,radius,boundary", CASES[::3] + CASES[-1:])
def test_reduced_precision_within_bound(precision: str, seed: int, ndim: int, shape: str, radius: int,
                                        boundary: str) -> None:
    st = make_stencil(seed, ndim, shape, radius, boundary)
    inputs = make_inputs(st, seed, "float32")
    plan = tensor_core_plan(st.ir, 0, precision)
    got, ref = run_replay(st, plan, inputs, "float32")
    s, absolute = magnitude(st, inputs, precision)
    mmas = plan.mmas_per_tile
    bound = (2 * U + U * U + (mmas + 3) * U32) * s + 2.0 ** -25 * absolute
    err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    assert np.all(err <= bound), f"max error / sum|w||x| = {np.max(err / s):.3g}"
    assert np.max(err) > 0  # operands really were rounded


def test_rounding_is_the_hardware_rounding() -> None:
    x = np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -12, 1 + 2.0 ** -12, -(1 + 3 * 2.0 ** -12)], dtype=np.float32)
    np.testing.assert_array_equal(round_operand(x, "tf32"), [1 + 2.0 ** -10, 1 + 2.0 ** -10, 1.0,
                                                             -(1 + 2.0 ** -10)])  # a tie rounds away from zero
    np.testing.assert_array_equal(round_operand(x[:1], "fp16"), [1.0])  # ties to even
    np.testing.assert_array_equal(round_operand(x, "fp64"), x.astype(np.float64))


def test_star_uses_one_row_line_and_box_only_column_lines() -> None:
    star = tensor_core_plan(make_stencil(0, 2, "star", 2, "dirichlet").ir, 0, "fp64")
    box = tensor_core_plan(make_stencil(0, 2, "box", 2, "dirichlet").ir, 0, "fp64")
    u_lines = [line for line in star.lines if line.source == ("u", 0)]
    assert sorted(line.axis for line in u_lines) == ["cols", "rows"]
    assert {line.axis for line in box.lines} == {"cols"}
    row = next(line for line in u_lines if line.axis == "rows")
    assert (row.lo, row.hi, row.points) == (-2, 2, 4)


def test_fragment_blocks_are_banded_toeplitz() -> None:
    st = make_stencil(3, 2, "box", 1, "dirichlet")
    plan = tensor_core_plan(st.ir, 0, "fp64")
    line = next(line for line in plan.lines if line.source == ("u", 0) and line.shift == (0, 0))
    blocks = line.band(plan.shape, {"alpha": 0.3})
    full = np.concatenate(list(blocks))  # chunks stacked along k: (window, n)
    w = [weight_value(c, {"alpha": 0.3}) for c in line.coefficients]
    assert blocks.shape == (3, 4, 8) and line.chunks == (0, 1, 2)  # 8 + 2 columns in three k=4 chunks
    for q, j in itertools.product(range(full.shape[0]), range(8)):
        assert full[q, j] == (w[q - j] if 0 <= q - j < 3 else 0.0)
    assert [line.input_origin(c, 4) for c in line.chunks] == [(0, -1), (0, 3), (0, 7)]
    assert plan.halo(("u", 0)) == ((1, 1), (1, 3))  # the third chunk reads two zero-weight columns


def test_useful_fraction_counts_issued_multiply_adds() -> None:
    st = make_stencil(1, 2, "box", 1, "dirichlet")
    plan = tensor_core_plan(st.ir, 0, "fp64")
    # u[t]: 3 column lines x 3 chunks; u[t-1] and k: one point each, 2 chunks (8 columns / k=4)
    assert plan.mmas_per_tile == 9 + 2 + 2
    assert plan.useful_fraction == pytest.approx(11 / (13 * 4))
    assert MMA_SHAPES["tf32"].k == 8 and plan.tile == (8, 8)


@msc.stencil(boundary="dirichlet")
def _two(a, b, beta):
    a[msc.t + 1, msc.x, msc.y] = 0.5 * a[msc.t, msc.x - 1, msc.y] + 0.5 * a[msc.t, msc.x, msc.y + 1]
    b[msc.t + 1, msc.x, msc.y] = (0.25 * a[msc.t + 1, msc.x + 1, msc.y] + beta * b[msc.t, msc.x, msc.y - 1]
                                  + 0.5 * b[msc.t, msc.x, msc.y] - beta * a[msc.t + 1, msc.x, msc.y + 1])


def test_second_statement_reads_the_first_ones_new_level() -> None:
    rng = np.random.default_rng(7)
    inputs: dict[str, Any] = {"a": rng.random((19, 12)), "b": rng.random((19, 12)), "beta": 0.4}
    ref = _two.reference(steps=1, **inputs)
    new = {("a", 0): inputs["a"], ("b", 0): inputs["b"], ("a", 1): ref["a"]}
    for index, target in enumerate("ab"):
        plan = tensor_core_plan(_two.ir, index, "fp64")
        got = replay(plan, lambda name, dt: new[(name, dt)], {"beta": 0.4}, (17, 10), "float64")
        np.testing.assert_allclose(got, ref[target][1:-1, 1:-1], rtol=0, atol=1e-12)
    assert {line.source for line in plan.lines} == {("a", 1), ("b", 0)}
    with pytest.raises(ValueError, match="ring"):
        replay(plan, lambda name, dt: new[(name, dt)][1:-1, 1:-1], {"beta": 0.4}, (17, 10), "float64")


@msc.stencil
def _cancelling(u):
    u[msc.t + 1, msc.x, msc.y] = u[msc.t, msc.x, msc.y + 1] - u[msc.t, msc.x, msc.y + 1] + 0.5 * u[msc.t, msc.x + 1, msc.y]


def test_cancelled_terms_issue_nothing() -> None:
    plan = tensor_core_plan(_cancelling.ir, 0, "fp64")
    assert plan.points == 1 and plan.mmas_per_tile == 2  # one weight, its 8 columns in two k=4 chunks
    u = np.random.default_rng(3).random((12, 20))
    got = replay(plan, lambda name, dt: u, {}, (10, 18), "float64")
    np.testing.assert_allclose(got, _cancelling.reference(steps=1, u=u)["u"][1:-1, 1:-1], rtol=0, atol=1e-12)


@msc.stencil
def _nonlinear(u):
    u[msc.t + 1, msc.x, msc.y] = u[msc.t, msc.x, msc.y] * u[msc.t, msc.x + 1, msc.y]


@msc.stencil
def _variable(u, c):
    u[msc.t + 1, msc.x, msc.y] = c[msc.x, msc.y] * u[msc.t, msc.x - 1, msc.y] + u[msc.t, msc.x, msc.y]


@msc.stencil
def _oned(u):
    u[msc.t + 1, msc.x] = 0.5 * u[msc.t, msc.x - 1] + 0.5 * u[msc.t, msc.x + 1]


def test_refusals_name_the_term() -> None:
    with pytest.raises(ScheduleError, match=r"not linear.*u\[t, x, y\] \* u\[t, x\+1, y\]"):
        tensor_core_plan(_nonlinear.ir, 0, "fp64")
    with pytest.raises(ScheduleError, match=r"variable coefficient.*c\[x, y\].*u\[t, x-1, y\]"):
        tensor_core_plan(_variable.ir, 0, "tf32")
    with pytest.raises(ScheduleError, match="2D or 3D"):
        tensor_core_plan(_oned.ir, 0, "fp64")
    with pytest.raises(ScheduleError, match="precision"):
        tensor_core_plan(_variable.ir, 0, "bf16")
    with pytest.raises(ScheduleError, match="no statement 1"):
        tensor_core_plan(_variable.ir, 1, "fp64")


@pytest.mark.parametrize("seed", range(0, len(TERMS), 5))
def test_the_differential_suites_stencils_are_refused(seed: int) -> None:
    """Their statements mix non-linear terms (every operator of the language) into the weighted sums."""
    case = generate(seed, ndim=2)
    with pytest.raises(ScheduleError, match="tensor_cores: .*(non-linear term|variable coefficient) '"):
        tensor_core_plan(case.stencil.ir, 0, "fp64")


def test_plan_is_immutable_and_keyed_by_ir() -> None:
    st = make_stencil(5, 3, "star", 1, "periodic")
    a, b = tensor_core_plan(st.ir, 0, "fp16"), tensor_core_plan(st.ir, 0, "fp16")
    assert a == b and a.target == "u" and a.shape.name == "m32n8k16"
    with pytest.raises(AttributeError):
        a.precision = "fp64"  # type: ignore[misc]
    assert isinstance(a.lines[0].coefficients[0], (ir.Const, ir.BinOp, ir.ParamRef, ir.Neg))
