"""The textual language (.msc): same IR and results as the Python DSL,
print/parse round trips, located errors, and fuzzing for tracebacks."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import msc
import msc.textual
from msc import ir, t, x, y, z
from msc.stencil import load_stencil
from msc.textual import parse_stencil, print_stencil
from msc.textual.printer import print_expr

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def strip_locations(s: ir.StencilIR) -> ir.StencilIR:
    """`s` without statement locations (they name the Python or .msc file)."""
    return dataclasses.replace(
        s, statements=tuple(dataclasses.replace(stmt, loc=ir.SourceLoc("", 0)) for stmt in s.statements)
    )


# ------------------------------------------------- the same stencils, both ways


@msc.stencil
def heat2d(u, alpha):
    u[t+1, x, y] = u[t, x, y] + alpha * (u[t, x-1, y] + u[t, x+1, y]
                                         + u[t, x, y-1] + u[t, x, y+1] - 4 * u[t, x, y])


@msc.stencil
def wave2d(u, speed2, courant2):
    u[t+1, x, y] = (2 * u[t, x, y] - u[t-1, x, y]
                    + courant2 * speed2[x, y] * (u[t, x-1, y] + u[t, x+1, y]
                                             + u[t, x, y-1] + u[t, x, y+1] - 4 * u[t, x, y]))


@msc.stencil(boundary="periodic")
def grayscott(u, v, du, dv, feed, kill, dt):
    u[t+1, x, y] = u[t, x, y] + dt * (du * (u[t, x-1, y] + u[t, x+1, y] + u[t, x, y-1]
                                            + u[t, x, y+1] - 4 * u[t, x, y])
                                      - u[t, x, y] * v[t, x, y] ** 2
                                      + feed * (1 - u[t, x, y]))
    v[t+1, x, y] = v[t, x, y] + dt * (dv * (v[t, x-1, y] + v[t, x+1, y] + v[t, x, y-1]
                                            + v[t, x, y+1] - 4 * v[t, x, y])
                                      + u[t, x, y] * v[t, x, y] ** 2
                                      - (feed + kill) * v[t, x, y])


@msc.stencil(boundary="periodic")
def advection1d(u, c, dt_dx):
    u[t+1, x] = u[t, x] - dt_dx * msc.where(c[x] > 0,
                                            c[x] * (u[t, x] - u[t, x-1]),
                                            c[x] * (u[t, x+1] - u[t, x]))


@msc.stencil
def kitchen_sink(u, w, k, a, b):
    """Every expression form: math functions, unary and logic operators, where, t+1 and t-1 reads."""
    u[t+1, x, y, z] = (u[t, x, y, z] + a * msc.sqrt(msc.abs(u[t, x+1, y, z]))
                       - msc.exp(-u[t, x, y-1, z]) / (1 + b ** 2)
                       + msc.minimum(u[t, x, y, z+1], k[x, y, z])
                       * msc.maximum(-a, msc.log(1 + u[t, x, y, z] ** 2)))
    w[t+1, x, y, z] = msc.where((u[t+1, x, y, z] > 0) & ~(w[t, x, y, z] <= a) | (k[x, y, z] != b),
                                msc.sin(w[t-1, x, y, z]), msc.cos(u[t+1, x-1, y, z])) - -w[t, x, y, z]


KITCHEN_SINK_MSC = """\
stencil kitchen_sink {
    field u[x, y, z];
    field w[x, y, z] window 2;
    input k[x, y, z];
    param a, b;
    u[t+1, x, y, z] = u[t, x, y, z] + a * sqrt(abs(u[t, x+1, y, z]))
                    - exp(-u[t, x, y-1, z]) / (1 + b ** 2)
                    + minimum(u[t, x, y, z+1], k[x, y, z]) * maximum(-a, log(1 + u[t, x, y, z] ** 2));
    w[t+1, x, y, z] = where(u[t+1, x, y, z] > 0 & !(w[t, x, y, z] <= a) | k[x, y, z] != b,
                            sin(w[t-1, x, y, z]), cos(u[t+1, x-1, y, z])) - -w[t, x, y, z];
}
"""

PAIRS = {
    "heat2d": (heat2d, (EXAMPLES / "heat2d.msc").read_text(), {"alpha": 0.2}),
    "wave2d": (wave2d, (EXAMPLES / "wave2d.msc").read_text(), {"courant2": 0.3}),
    "grayscott": (grayscott, (EXAMPLES / "grayscott.msc").read_text(),
                  {"du": 0.16, "dv": 0.08, "feed": 0.035, "kill": 0.065, "dt": 1.0}),
    "advection1d": (advection1d, (EXAMPLES / "advection1d.msc").read_text(), {"dt_dx": 0.4}),
    "kitchen_sink": (kitchen_sink, KITCHEN_SINK_MSC, {"a": 0.3, "b": 0.5}),
}


def random_inputs(s: ir.StencilIR, scalars: dict[str, float], seed: int = 0) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    shape = {1: (40,), 2: (14, 12), 3: (7, 8, 6)}[s.ndim]
    inputs: dict[str, object] = dict(scalars)
    for f in s.fields:
        levels = [rng.uniform(0.1, 1.0, shape) for _ in range(max(f.window, 1))]
        inputs[f.name] = levels[0] if len(levels) == 1 else levels
    return inputs


@pytest.mark.parametrize("name", PAIRS)
def test_same_stencil_both_ways_gives_equal_ir(name: str) -> None:
    python, text, _ = PAIRS[name]
    parsed = parse_stencil(text, f"{name}.msc")
    assert strip_locations(parsed) == strip_locations(python.ir)
    assert parsed.statements[0].loc.file == f"{name}.msc"


@pytest.mark.parametrize("name", PAIRS)
def test_same_stencil_both_ways_gives_equal_results(name: str) -> None:
    python, text, scalars = PAIRS[name]
    textual = msc.Stencil(None, stencil_ir=parse_stencil(text))
    inputs = random_inputs(python.ir, scalars)
    expected = python.reference(steps=5, **inputs)
    got = textual.reference(steps=5, **inputs)
    assert expected.keys() == got.keys()
    for field_name in expected:
        np.testing.assert_array_equal(got[field_name], expected[field_name])


@pytest.mark.parametrize("name", ["heat2d", "wave2d"])
def test_loaded_example_compiles_to_openmp(name: str) -> None:
    python, _, scalars = PAIRS[name]
    stencil = load_stencil(EXAMPLES / f"{name}.msc")
    assert stencil.name == name
    inputs = random_inputs(stencil.ir, scalars, seed=1)
    got = stencil.compile("openmp").run(steps=7, **inputs)
    expected = python.reference(steps=7, **inputs)
    np.testing.assert_allclose(got["u"], expected["u"], rtol=1e-12)


def test_every_example_loads_and_round_trips() -> None:
    files = sorted(EXAMPLES.glob("*.msc"))
    assert {f.stem for f in files} >= {"heat2d", "wave2d", "grayscott", "advection1d"}
    for f in files:
        s = load_stencil(f).ir
        assert strip_locations(parse_stencil(print_stencil(s))) == strip_locations(s)


def test_dtype_clause_sets_the_stencil_dtype() -> None:
    text = "stencil h { dtype float32; field u[x] float32; u[t+1, x] = 0.5 * u[t, x]; }"
    s = parse_stencil(text)
    assert s.dtype == "float32" and s.fields[0].dtype == "float32"
    assert s == parse_stencil(text.replace("float32", "float64")).with_dtype("float32")


def test_keywords_and_function_names_may_name_fields_and_params() -> None:
    text = """stencil stencil {
        field field[x];  input input[x];  param param, window, where, sqrt;
        field[t+1, x] = where(field[t, x] > window, sqrt(param), where * sqrt) + input[x];
    }"""
    s = parse_stencil(text)
    assert [f.name for f in s.fields] == ["field", "input"]
    assert s.params == ("param", "window", "where", "sqrt")
    assert strip_locations(parse_stencil(print_stencil(s))) == strip_locations(s)


def test_docs_show_the_grammar_in_use() -> None:
    doc = (EXAMPLES.parent / "docs" / "language.md").read_text()
    grammar = (Path(msc.textual.__file__).parent / "grammar.lark").read_text()
    assert "```lark\n" + grammar + "```" in doc


def test_load_stencil_reports_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(msc.MscError, match="cannot read"):
        load_stencil(tmp_path / "missing.msc")
    (tmp_path / "bad.msc").write_bytes(b"stencil \xff {}")
    with pytest.raises(msc.MscError, match="cannot read"):
        load_stencil(tmp_path / "bad.msc")


# ------------------------------------------------------------ round trips

NAMES = ["u", "v", "w", "alpha", "beta_2", "_k", "α", "field", "input", "param", "window",
         "boundary", "stencil", "sqrt", "where", "maximum"]


def random_constant(rng: random.Random) -> float:
    kind = rng.randrange(5)
    if kind == 0:
        return float(rng.randint(-5, 5))
    if kind == 1:
        return rng.uniform(-10, 10)
    if kind == 2:
        return rng.choice([-1, 1]) * rng.random() * 10.0 ** rng.randint(-300, 300)
    if kind == 3:
        return rng.choice([0.0, -0.0, math.inf, -math.inf, 5e-324, 1.7976931348623157e308])
    return rng.choice([0.1, 1 / 3, 2.5e-7])


class RandomStencil:
    """A random valid StencilIR: fields, inputs, params and statements of every expression form."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.ndim = rng.randint(1, 3)
        names = rng.sample(NAMES, rng.randint(3, 8))
        n_written = rng.randint(1, min(3, len(names) - 1))
        n_inputs = rng.randint(0, len(names) - n_written)
        self.written, self.inputs = names[:n_written], names[n_written:n_written + n_inputs]
        self.params = names[n_written + n_inputs:]
        self.done: list[str] = []

    def build(self) -> ir.StencilIR:
        statements = []
        for target in self.rng.sample(self.written, len(self.written)):
            statements.append(ir.Statement(target, self.expr(4), ir.SourceLoc("", 0)))
            self.done.append(target)
        dtype = self.rng.choice(ir.DTYPES)
        fields = [ir.FieldDecl(n, self.ndim, dtype, self.window(n, statements), True) for n in self.written]
        fields += [ir.FieldDecl(n, self.ndim, dtype, 0, False) for n in self.inputs]
        self.rng.shuffle(fields)
        return ir.StencilIR(self.rng.choice(NAMES), self.ndim, tuple(fields), tuple(self.params),
                            tuple(statements), self.rng.choice(ir.BOUNDARIES), dtype)

    @staticmethod
    def window(name: str, statements: list[ir.Statement]) -> int:
        levels = [a.dt for s in statements for a in s.reads if a.name == name and a.dt is not None and a.dt <= 0]
        return 1 - min(levels, default=0)

    def expr(self, depth: int) -> ir.Expr:
        rng = self.rng
        kind = rng.randrange(10 if depth > 0 else 3)
        if kind == 0:
            return ir.Const(random_constant(rng))
        if kind == 1 and self.params:
            return ir.ParamRef(rng.choice(self.params))
        if kind <= 2:
            return self.read()
        sub = lambda: self.expr(depth - 1)  # noqa: E731
        if kind == 3:
            return ir.Neg(sub())
        if kind == 4:
            return ir.Not(sub())
        if kind in (5, 6, 7):
            return ir.BinOp(rng.choice(ir.ARITH_OPS + ir.COMPARE_OPS + ir.LOGIC_OPS), sub(), sub())
        if kind == 8:
            func = rng.choice(ir.MATH_FUNCTIONS + ir.BINARY_FUNCTIONS)
            return ir.Call(func, tuple(sub() for _ in range(1 if func in ir.MATH_FUNCTIONS else 2)))
        return ir.Where(sub(), sub(), sub())

    def read(self) -> ir.FieldRead:
        rng = self.rng
        offsets = tuple(rng.randint(-4, 4) for _ in range(self.ndim))
        name = rng.choice(self.written + self.inputs)
        if name in self.inputs:
            return ir.FieldRead(name, None, offsets)
        return ir.FieldRead(name, rng.choice([0, -1, -2] + [1] * (name in self.done)), offsets)


@pytest.mark.parametrize("seed", range(300))
@pytest.mark.filterwarnings("ignore::msc.errors.StencilDefinitionWarning")  # random params may go unread
def test_print_then_parse_is_identity_on_random_stencils(seed: int) -> None:
    s = RandomStencil(random.Random(seed)).build()
    text = print_stencil(s)
    parsed = parse_stencil(text)
    assert strip_locations(parsed) == s
    assert print_stencil(parsed) == text  # also keeps -0.0 and the float bits


@pytest.mark.parametrize("name", PAIRS)
def test_print_then_parse_is_identity_on_python_stencils(name: str) -> None:
    python = PAIRS[name][0]
    text = print_stencil(python.ir)
    parsed = parse_stencil(text, "printed.msc")
    assert strip_locations(parsed) == strip_locations(python.ir)
    for stmt in parsed.statements:  # each statement's location is its line in the text
        assert stmt.loc.file == "printed.msc"
        assert text.split("\n")[stmt.loc.line - 1].lstrip().startswith(f"{stmt.target}[t+1, ")


def test_printer_parenthesises_by_precedence() -> None:
    c, p = ir.Const, ir.ParamRef("a")
    cases = {
        ir.Neg(c(4.0)): "-(4.0)",
        ir.Neg(c(-4.0)): "-(-4.0)",
        c(-4.0): "-4.0",
        ir.BinOp("**", c(-2.0), c(2.0)): "(-2.0) ** 2.0",
        ir.Neg(ir.BinOp("**", p, c(2.0))): "-a ** 2.0",
        ir.BinOp("**", ir.BinOp("**", p, p), p): "(a ** a) ** a",
        ir.BinOp("**", p, ir.BinOp("**", p, ir.Neg(p))): "a ** a ** -a",
        ir.BinOp("-", p, ir.BinOp("-", p, p)): "a - (a - a)",
        ir.BinOp("<", ir.BinOp("<", p, p), p): "(a < a) < a",
        ir.BinOp("&", ir.BinOp("|", p, p), ir.Not(ir.BinOp("<", p, p))): "(a | a) & !(a < a)",
    }
    for expr, text in cases.items():
        assert print_expr(expr) == text


# ---------------------------------------------------------------- errors

HEADER = "stencil s {\n    field u[x, y];\n    input c[x, y];\n    param a;\n"


@pytest.mark.parametrize("body, fragment", [
    # the rules of the Python frontend
    ("u[t+1, x, y] = u[t, 2*x, y];", "'2*x' is not an affine index"),
    ("u[t+1, x, y] = u[t, x+a, y];", "'x+a' is not an affine index"),
    ("u[t+1, x, y] = u[t, x+1.5, y];", "not an affine index"),
    ("u[t+1, x, y] = u[t, x, y+x];", "not an affine index"),
    ("u[t+1, x, y] = u[t, 1, y];", "index '1' is not t, x, y or z plus an integer offset"),
    ("u[t+1, x, y] = u[t, y, x];", "spatial index 1 must use 'x'"),
    ("u[t+1, x+1, y] = u[t, x, y];", "writes u[t+1, x+1, y] at a spatial offset"),
    ("u[t, x, y] = u[t, x, y];", "writes u[t, x, y], a past level"),
    ("u[t+2, x, y] = u[t, x, y];", "statements write exactly one level ahead"),
    ("u[t+1, x, y] = u[t+1, x, y];", "reads u[t+1, x, y], a level not yet computed"),
    ("u[t+1, x, y] = u[t, x, y];\n    u[t+1, x, y] = 1;", "two statements write u[t+1]: the first at s.msc:5"),
    ("u[t+1, x, y] = u[t, x];", "u[t, x] is 1D but the stencil is 2D"),
    ("u[t+1, x, y] = a[x, y];", "'a' is a scalar parameter (declared at line 4) and cannot be indexed"),
    ("u[t+1, x, y] = u;", "field 'u' is used bare"),
    ("u[t+1, x, y] = x;", "index symbol 'x' used as a value"),
    ("u[t+1, x, y] = y[t, x, y];", "'y' is an index symbol, not a field or parameter"),
    ("u[t+1, x, y] = c[t, x, y];", "'c' is a time-invariant input, never indexed with t"),
    ("u[t+1, x, y] = u[x, y];", "'u' is a time-dependent field, always indexed with t"),
    ("u[t+1, x, y] = q;", "'q' is not declared"),
    ("q[t+1, x, y] = 1;", "'q' is not declared"),
    ("u[t+1, x, y] = tan(a);", "unknown function 'tan'"),
    ("u[t+1, x, y] = sqrt(a, a);", "sqrt() takes 1 argument, got 2"),
    ("u[t+1, x, y] = where(a, a);", "where() takes 3 arguments, got 2"),
    ("u[t+1, x, y] = maximum();", "maximum() takes 2 arguments, got 0"),
    ("c[t+1, x, y] = 1;", "'c' is a time-invariant input (declared at line 3) and cannot be written"),
    ("a[t+1, x, y] = 1;", "'a' is a scalar parameter (declared at line 4) and cannot be written"),
    # declarations
    ("u[t+1, x, y] = u[t-1, x, y];", "window 1 (the default) but the statements read levels back to t-1"),
    ("field v[x, y];\n    u[t+1, x, y] = 1;", "field 'v' has time levels but is never written"),
    ("field v[x];\n    u[t+1, x, y] = 1;", "field 'v' is 1D but the stencil is 2D"),
    ("field v[y, x];", "spatial dimension 1 must be 'x'"),
    ("input v[t, x, y];", "declare only the spatial dimensions"),
    ("input v[x, y, z, x];", "1 to 3 spatial dimensions"),
    ("field v[x, y] window 0;", "window 0 is not a whole number of at least 1"),
    ("field v[x, y] window 1.5;", "window 1.5 is not a whole number"),
    ("param u;", "'u' is already declared at line 2"),
    ("param y;", "'y' is an index symbol"),
    ("param inf;", "'inf' is a constant"),
    ("param steps;", "'steps' is a keyword of the calls that take the fields and parameters"),
    ("u[t+1, x, y] = where(~(u[t, x, y] > 0), 1, 2);", "('~' is the Python DSL's not: here it is '!')"),
    ("input dtype[x, y];", "'dtype' is a keyword of the calls"),
    ("boundary neumann;", "boundary 'neumann' is not one of dirichlet, periodic"),
    ("dtype float16;", "dtype 'float16' is not one of float64, float32"),
    ("dtype float32;\n    dtype float64;", "'dtype' is already set at line 5"),
    ("input v[x, y] float32;\n    u[t+1, x, y] = 1;", "'v' is declared float32 but the stencil's dtype is float64"),
    ("", "the stencil writes no field"),
    # syntax
    ("u[t+1, x, y] = 1", "syntax error: unexpected '}'; expected one of"),
    ("u[t+1, x, y] = 1 $ 2;", "syntax error: unexpected character '$'"),
    ("u[t+1, x, y] = u[t, x, y] < 1 < 2;", "syntax error: unexpected '<'"),
    ("u[t+1, x, y] = (1;", "syntax error: unexpected ';'"),
])
def test_errors_name_file_line_and_column_with_a_caret(body: str, fragment: str) -> None:
    text = HEADER + "    " + body + "\n}\n"
    with pytest.raises(msc.StencilDefinitionError) as info:
        parse_stencil(text, "s.msc")
    message = str(info.value)
    first, source_line, caret = message.split("\n")
    assert fragment in first
    location, _, _ = first.partition(": ")
    file, line, column = location.split(":")
    assert file == "s.msc"
    assert source_line == "    " + text.split("\n")[int(line) - 1]
    assert caret == " " * (4 + int(column) - 1) + "^"


def test_error_points_at_the_fault() -> None:
    with pytest.raises(msc.StencilDefinitionError) as info:
        parse_stencil(HEADER + "    u[t+1, x, y] = u[t, x, y] +\n        sqrt(u[t, x*2, y]);\n}", "s.msc")
    assert str(info.value).startswith("s.msc:6:19: in stencil 's': index expression 'x*2'")
    with pytest.raises(msc.StencilDefinitionError) as info:
        parse_stencil("stencil s {\n  field u[x];\n  u[t+1, x] = u[t, x] +", "s.msc")
    assert str(info.value).startswith("s.msc:3:24: syntax error: unexpected end of the file")


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    text = "stencil s { field u[x]; u[t+1, x] = " + "(" * 5000 + "1" + ")" * 5000 + "; }"
    with pytest.raises(msc.StencilDefinitionError, match="nested too deeply"):
        parse_stencil(text)


def test_a_flat_sum_too_long_names_its_statement_and_parentheses_help() -> None:
    """A flat sum of 1000 terms was 'nested too deeply' at 1:1, the stencil's first character."""
    text = "stencil s {\n  field u[x];\n  u[t+1, x] = " + " + ".join(["u[t, x]"] * 1000) + ";\n}\n"
    with pytest.raises(msc.StencilDefinitionError, match=r"^<string>:3:3: .*the expression written to 'u' is "
                                                          r"nested too deeply .* group its terms in parentheses"):
        parse_stencil(text)
    grouped = " + ".join("(" + " + ".join(["u[t, x]"] * 50) + ")" for _ in range(20))
    assert parse_stencil("stencil s { field u[x]; u[t+1, x] = " + grouped + "; }").name == "s"


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_an_error_on_a_long_line_shows_the_part_around_it(where: str) -> None:
    """A 39,000-character statement printed itself whole, and a caret line as long."""
    terms = ["u[t, x]"] * 2000
    terms[{"start": 1, "middle": 1000, "end": 1999}[where]] = "@"
    text = "stencil s {\n  field u[x];\n  u[t+1, x] = " + " + ".join(terms) + ";\n}\n"
    with pytest.raises(msc.StencilDefinitionError) as info:
        parse_stencil(text)
    header, shown, caret = str(info.value).split("\n")
    column = int(header.split(":")[2])
    assert len(shown) <= 4 + 100 and shown[len(caret) - 1] == "@" and caret.strip() == "^"
    assert text.split("\n")[2][column - 1] == "@"


# ------------------------------------------------------------------ fuzzing

VALID = [text for _, text, _ in PAIRS.values()]
CHARACTERS = list("()[]{};,=+-*/<>!&|.0123456789etxyz #\t\n")

# Near-valid programs, to reach the semantic checks: declarations, indices,
# names and calls drawn from valid and invalid choices.
DECLARATIONS = st.sampled_from([
    "field u[x];", "field u[x] window 2;", "field u[x] float32;", "field v[x, y];", "input c[x];",
    "input c[t, x];", "param a;", "param a, b;", "param x;", "boundary periodic;", "dtype float32;",
    "field u[x] window 0;", "input u[x];", "param u;",
])
FUZZ_NAMES = st.sampled_from(["u", "c", "a", "b", "v", "q", "x", "t", "inf", "nan", "window"])
INDICES = st.lists(st.sampled_from(["t", "t+1", "t-1", "t+2", "x", "x-1", "x+4", "-x", "y", "z", "2*x",
                                    "1", "a", "x+y", "x+0.5", "(x)", "1+x"]), min_size=1, max_size=4)
ATOMS = st.one_of(
    FUZZ_NAMES, st.sampled_from(["0", "1.5", "1e308", "1e999", "-2", ".5"]),
    st.builds(lambda n, i: f"{n}[{', '.join(i)}]", FUZZ_NAMES, INDICES),
)
EXPRESSIONS = st.recursive(ATOMS, lambda e: st.one_of(
    st.builds(lambda a, op, b: f"{a} {op} {b}", e, st.sampled_from(["+", "-", "*", "/", "**", "<", "==", "&", "|"]), e),
    st.builds(lambda op, a: f"{op}{a}", st.sampled_from(["-", "+", "!"]), e),
    st.builds(lambda f, args: f"{f}({', '.join(args)})",
              st.sampled_from(["sqrt", "maximum", "where", "tan", "u"]), st.lists(e, max_size=4)),
    st.builds(lambda a: f"({a})", e),
), max_leaves=12)
STATEMENTS = st.builds(lambda n, i, e: f"{n}[{', '.join(i)}] = {e};", FUZZ_NAMES, INDICES, EXPRESSIONS)
PROGRAMS = st.builds(lambda d, s: "stencil s {\n" + "\n".join(d + s) + "\n}",
                     st.one_of(st.just(["field u[x] window 2;", "input c[x];", "param a, b;"]),
                               st.lists(DECLARATIONS, max_size=4, unique=True)),
                     st.lists(STATEMENTS, max_size=3))
FUZZ = settings(max_examples=300, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def parses_or_fails_cleanly(text: str) -> None:
    """Either a valid stencil that round-trips, or an MscError naming the file."""
    try:
        s = parse_stencil(text, "fuzz.msc")
    except msc.MscError as e:
        assert str(e).startswith("fuzz.msc:")
        return
    printed = print_stencil(s)
    assert print_stencil(parse_stencil(printed)) == printed


@FUZZ
@given(st.text(max_size=300))
def test_fuzz_random_text(text: str) -> None:
    parses_or_fails_cleanly(text)


@FUZZ
@given(PROGRAMS)
def test_fuzz_random_programs(text: str) -> None:
    parses_or_fails_cleanly(text)


@FUZZ
@given(st.sampled_from(VALID),
       st.lists(st.tuples(st.sampled_from(["delete", "insert", "swap"]), st.integers(0, 10**6),
                          st.sampled_from(CHARACTERS + ["field", "input", "param", "window", "t+1", "x-1"])),
                min_size=1, max_size=4))
def test_fuzz_mutated_valid_programs(text: str, edits: list[tuple[str, int, str]]) -> None:
    for op, where, piece in edits:
        i = where % (len(text) + 1)
        if op == "delete":
            text = text[:i] + text[i + 1:]
        elif op == "insert":
            text = text[:i] + piece + text[i:]
        else:
            j = (i * 7919) % (len(text) + 1)
            i, j = min(i, j), max(i, j)
            text = text[:i] + text[j:j + 1] + text[i + 1:j] + text[i:i + 1] + text[j + 1:]
    parses_or_fails_cleanly(text)


UNICODE_STENCIL = """stencil ünï {
  field ü[x, y];
  input κ[x, y];
  param α;
  ü[t+1, x, y] = ü[t, x, y] + α * κ[x, y] * (ü[t, x-1, y] + ü[t, x+1, y] - 2 * ü[t, x, y]);
}"""


@pytest.mark.parametrize("target,options,schedule", [
    ("openmp", {}, None), ("openmp", {}, msc.Schedule().time_tile(3, x=4)),
    ("openmp", {}, msc.Schedule().tile(x=4, y=4).cache_read("ü").cache_write("ü")),
    ("cuda", {"emulate": True}, None), ("athread", {}, None)])
def test_names_beyond_ascii_compile_on_every_target(target, options, schedule, assert_matches) -> None:
    """The language allows Unicode letters in names; a field so named reached isl's parser, which refused it."""
    stencil = msc.Stencil(None, stencil_ir=parse_stencil(UNICODE_STENCIL, "ünï.msc"))
    rng = np.random.default_rng(9)
    inputs = {"ü": rng.random((9, 12)), "κ": rng.random((9, 12)), "α": 0.2}
    kernel = stencil.compile(target=target, schedule=schedule, **options)
    assert_matches(kernel.run(steps=5, **inputs), stencil.reference(steps=5, **inputs), "float64", target)


def test_a_file_with_a_byte_order_mark_loads(tmp_path) -> None:
    path = tmp_path / "bom.msc"
    path.write_bytes("\ufeff".encode() + UNICODE_STENCIL.encode())
    assert print_stencil(load_stencil(path).ir) == print_stencil(parse_stencil(UNICODE_STENCIL, "ünï.msc"))
