"""The CPU targets print each multiply-add as one `fma` (rounded once), the C saying how every
value rounds; the other targets keep the products and sums apart (ADR 0066)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import msc
from msc import ir
from msc.codegen import get_target
from msc.codegen.printers.cexpr import c_expr

A, B, C, D = (ir.FieldRead(name, 0, (0,)) for name in "abcd")


def _printed(e: ir.Expr, dtype: str = "float64", fused: bool = True) -> str:
    return c_expr(e, dtype, lambda read: read.name, lambda p: p, fused)


def _mul(lhs: ir.Expr, rhs: ir.Expr) -> ir.Expr:
    return ir.BinOp("*", lhs, rhs)


@pytest.mark.parametrize("expr, printed", [
    (ir.BinOp("+", A, _mul(B, C)), "fma(b, c, a)"),
    (ir.BinOp("-", A, _mul(B, C)), "fma((-b), c, a)"),
    (ir.BinOp("+", _mul(B, C), A), "fma(b, c, a)"),
    (ir.BinOp("-", _mul(B, C), A), "fma(b, c, (-a))"),
    (ir.BinOp("+", _mul(A, B), _mul(C, D)), "fma(c, d, (a * b))"),  # the right-hand product is fused
    (ir.BinOp("+", ir.BinOp("**", A, ir.Const(2.0)), B), "((a * a) + b)"),  # a power is no product
    (ir.BinOp("/", A, _mul(B, C)), "(a / (b * c))"),
])
def test_sums_with_a_product_print_as_one_fma(expr, printed):
    assert _printed(expr) == printed
    assert "fma" not in _printed(expr, fused=False)


def test_single_precision_fuses_with_fmaf():
    assert _printed(ir.BinOp("+", A, _mul(B, C)), "float32") == "fmaf(b, c, a)"


@msc.stencil
def blend(u):
    u[msc.t + 1, msc.x] = 0.1 * u[msc.t, msc.x - 1] + 0.3 * u[msc.t, msc.x + 1]


def test_only_the_cpu_targets_fuse():
    poly = blend.poly()
    assert "fma(0.3, " in get_target("openmp").source(poly, None)
    assert "fma(0.3, " in get_target("serial").source(poly, None)
    assert "fma" not in get_target("cuda").source(poly, None)


@pytest.mark.parametrize("target", ["openmp", "serial"])
def test_a_step_rounds_once_per_multiply_add(target):
    """Each point is 0.3 * right + round(0.1 * left), rounded once: exact rationals rounded to the
    nearest double say what it must be, bit for bit (a separate multiply and add would differ)."""
    u = np.random.default_rng(7).random(4001)
    out = blend.compile(target=target).run(steps=1, u=u)["u"]
    expected = [float(Fraction(0.3) * Fraction(float(r)) + Fraction(0.1 * float(left)))
                for left, r in zip(u[:-2], u[2:])]
    unfused = 0.1 * u[:-2] + 0.3 * u[2:]
    assert np.array_equal(out[1:-1], expected)
    assert not np.array_equal(out[1:-1], unfused)  # the check tells the two apart on these values
