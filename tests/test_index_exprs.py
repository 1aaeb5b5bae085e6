"""The kernel IR's integer expressions (msc/codegen/index.py) and their C printer."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen.isl_ast import index_of
from msc.codegen.printers.c import c_int, int_helpers

a, b, c = ix.Var("a"), ix.Var("b"), ix.Var("c")


def test_operators_fold_zero_one_and_negative_literals():
    assert a + 0 == a and 0 + a == a and a - 0 == a and a * 1 == a and 1 * a == a
    assert a + -3 == ix.Op("-", a, ix.Lit(3))
    assert a - -3 == ix.Op("+", a, ix.Lit(3))
    assert 2 * a == ix.Op("*", ix.Lit(2), a)


def test_linear_is_row_major_with_offsets():
    index = ix.linear([a, b, c], [ix.Var("P0"), ix.Var("P1"), ix.Var("P2")], [1, 0, -2])
    assert c_int(index) == "((a + 1) * P1 + b) * P2 + c - 2"
    assert ix.variables(index) == {"a", "b", "c", "P1", "P2"}


def test_substitute_reaches_into_addresses_and_calls():
    ref = k.Ref("f", a * ix.Var("P1") + b)
    e = ix.Call("msc_line_aligned", (k.Address(ref),)).not_()
    moved = ix.substitute(e, {"b": b + ix.Var("MSC_LINE")})
    assert c_int(moved) == "!msc_line_aligned(&f[a * P1 + (b + MSC_LINE)])"
    assert c_int(e) == "!msc_line_aligned(&f[a * P1 + b])"


@pytest.mark.parametrize("e, text", [
    (a - (b - c), "a - (b - c)"),
    (a - b - c, "a - b - c"),
    ((a + b) * c, "(a + b) * c"),
    (a + (b + c), "a + (b + c)"),
    ((a + b) % 2 * c, "(a + b) % 2 * c"),
    (a * (b % 2), "a * (b % 2)"),
    (-(a + b), "-(a + b)"),
    (ix.Neg(ix.Lit(-3)), "-(-3)"),
    (a.lt(b).not_(), "!(a < b)"),
    (ix.Op("||", a.lt(b).and_(b.lt(c)), c.eq(0)), "(a < b && b < c) || c == 0"),
    (a.lt(b).and_(b.lt(c)).and_(c.eq(0)), "a < b && b < c && c == 0"),
    (ix.Select(a.lt(b), a, b) + 1, "(a < b ? a : b) + 1"),
    (ix.min_(a, b, c), "msc_imin(msc_imin(a, b), c)"),
    (ix.floordiv(a - 1, 8), "msc_floord(a - 1, 8)"),
    (ix.Cast("int", a - 2), "(int)(a - 2)"),
    ((a + 1) & 1, "(a + 1) & 1"),
    ((a & 1).eq(0), "(a & 1) == 0"),
    (a.ne(b & 1), "a != (b & 1)"),
])
def test_printing_keeps_the_tree_and_only_needed_parentheses(e, text):
    assert c_int(e) == text


def _random_tree(rng: random.Random, depth: int) -> ix.Expr:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([a, b, c, ix.Lit(rng.randint(-9, 9))])
    kind = rng.randrange(7)
    if kind == 0:
        return ix.Neg(_random_tree(rng, depth - 1))
    if kind == 1:
        return ix.Not(_random_tree(rng, depth - 1))
    if kind == 2:
        return ix.Select(*(_random_tree(rng, depth - 1) for _ in range(3)))
    if kind == 3:
        return ix.Call(rng.choice(["min", "max"]), (_random_tree(rng, depth - 1), _random_tree(rng, depth - 1)))
    op = rng.choice(["+", "-", "*", "&", "<", "<=", "==", "!=", ">=", ">", "&&", "||"])
    return ix.Op(op, _random_tree(rng, depth - 1), _random_tree(rng, depth - 1))


def _value(e: ix.Expr, env: dict[str, int]) -> int:
    """The tree's value under C's rules (no division: the trees have none)."""
    if isinstance(e, ix.Var):
        return env[e.name]
    if isinstance(e, ix.Lit):
        return e.value
    if isinstance(e, ix.Neg):
        return -_value(e.operand, env)
    if isinstance(e, ix.Not):
        return int(not _value(e.operand, env))
    if isinstance(e, ix.Select):
        return _value(e.then, env) if _value(e.cond, env) else _value(e.otherwise, env)
    if isinstance(e, ix.Call):
        return (min if e.func == "min" else max)(_value(x, env) for x in e.args)
    assert isinstance(e, ix.Op)
    x, y = _value(e.lhs, env), _value(e.rhs, env)
    ops = {"+": x + y, "-": x - y, "*": x * y, "&": x & y, "<": x < y, "<=": x <= y, "==": x == y, "!=": x != y,
           ">=": x >= y, ">": x > y, "&&": bool(x) and bool(y), "||": bool(x) or bool(y)}
    return int(ops[e.op])


def test_values_are_leaves_of_the_same_trees():
    """An element's value and a stencil expression (with its reads bound) sit in trees
    beside integers; a stencil expression is parenthesised as C's precedence needs."""
    read = ir.FieldRead("u", 0, (1,))
    ring = k.Ref("ring", a + 1, k.Space.SHARED, rows=(ix.Lit(2), b & 1))
    weighted = k.Compute(ir.BinOp("*", ir.Const(0.25), read), ((read, k.Load(ring)),), "float64")
    plus = ix.Op("+", weighted, k.Compute(ir.Const(-0.5), (), "float64"))
    assert c_int(plus) == "(0.25 * ring[2][b & 1][a + 1]) + -0.5"
    assert c_int(ix.Op("*", k.Compute(ir.Const(-0.5), (), "float32"), c)) == "-0.5f * c"
    chosen = ix.Select(a.lt(b), k.Compute(read, ((read, ix.Var("v") + 1),), "float64"), ix.Cast("real", ix.Lit(0)))
    assert c_int(ix.Op("*", chosen, c)) == "(a < b ? v + 1 : (real)0) * c"
    assert c_int(ix.Op("*", k.Compute(read, ((read, ix.Var("v") + 1),), "float64"), c)) == "(v + 1) * c"
    assert ix.variables(weighted) == {"a", "b"}
    assert c_int(ix.substitute(weighted, {"a": c})) == "(0.25 * ring[2][b & 1][c + 1])"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_printed_c_computes_what_the_tree_says(tmp_path):
    rng = random.Random(7)
    trees = [_random_tree(rng, 4) for _ in range(300)]
    env = {"a": 3, "b": -5, "c": 7}
    lines = [f'    printf("%ld\\n", (long)({c_int(e)}));' for e in trees]
    source = tmp_path / "exprs.c"
    source.write_text("#include <stdio.h>\n" + int_helpers() +
                      "int main(void) {\n    const long a = 3, b = -5, c = 7;\n" + "\n".join(lines) + "\n    return 0;\n}\n")
    subprocess.run(["gcc", "-w", "-o", str(tmp_path / "exprs"), str(source)], check=True, capture_output=True)
    out = subprocess.run([str(tmp_path / "exprs")], check=True, capture_output=True, text=True).stdout.split()
    assert [int(v) for v in out] == [_value(e, env) for e in trees]


def test_isl_expressions_become_trees():
    import islpy as isl
    build = isl.AstBuild.from_context(isl.Set("[n] -> { : n >= 0 }"))
    e = build.expr_from_pw_aff(isl.PwAff("[n] -> { [(floor((n - 1) / 4))] }"))
    assert c_int(index_of(e)) == "msc_floord(n - 1, 4)"
