"""Every definition and argument error: the class, and a message that names
the stencil, the user's file:line and the offending access."""

from __future__ import annotations

import math
import re
import reprlib

import numpy as np
import pytest

import msc
from msc import t, x, y
from msc.errors import StencilArgumentError, StencilDefinitionError, StencilDefinitionWarning

THIS_FILE = __file__


def _definition_error(func, **kw) -> str:
    with pytest.raises(StencilDefinitionError) as info:
        msc.stencil(**kw)(func) if kw else msc.stencil(func)
    return str(info.value)


def _line_of(func, marker: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(func)
    return start + next(i for i, ln in enumerate(lines) if marker in ln)


@pytest.mark.parametrize(
    "body, words",
    [
        (lambda u: u.__setitem__((t + 1, x), u[t, 2 * x]), ["2*x", "not an affine index"]),
        (lambda u: u.__setitem__((t + 1, x), u[t, x * x]), ["not an affine index"]),
        (lambda u: u.__setitem__((t + 1, x), u[t, x + 0.5]), ["not an affine index"]),
        (lambda u: u.__setitem__((t + 1, x + 1), u[t, x]), ["writes u[t+1, x+1] at a spatial offset"]),
        (lambda u: u.__setitem__((t, x), u[t - 1, x]), ["writes u[t, x], a past level"]),
        (lambda u: u.__setitem__((t + 2, x), u[t, x]), ["writes u[t+2, x]", "one level ahead"]),
        (lambda u: u.__setitem__((t + 1, x), u[t + 1, x - 1]), ["reads u[t+1, x-1], a level not yet computed"]),
        (lambda u: u.__setitem__((t + 1, x), u[t + 2, x]), ["reads u[t+2, x], a level not yet computed"]),
        (lambda u, a: u.__setitem__((t + 1, x), a[t, x] + a), ["'a' is used bare", "index it"]),
        (lambda u, a: u.__setitem__((t + 1, x), a * u[t, x] + a[x]), ["'a' is indexed as a field here but used bare (as a scalar)"]),
        (lambda u, c: u.__setitem__((t + 1, x), u[t, x] * c[x, y]), ["is 2D but the stencil is 1D"]),
        (lambda u: u.__setitem__((t + 1, y), u[t, y]), ["spatial index 1 must use 'x'"]),
        (lambda u: u.__setitem__((t + 1, x), u[t, x] + x), ["index symbol 'x' used as a value"]),
        (lambda u: u.__setitem__((t + 1, x), u[t, x] if u[t, x] > 0 else 0), ["Python control flow", "msc.where"]),
        (lambda u: u.__setitem__((t + 1, x), min(u[t, x - 1], u[t, x])), ["min/max", "use msc.minimum(a, b)"]),
        (lambda u: u.__setitem__((t + 1, x), u[x, t]), ["u[x, t]: 't' comes first, before the spatial indices (e.g. u[t, x])"]),
        (lambda u: u.__setitem__((t + 1, x), u[t, x] + "a"), ["cannot use a value of type str"]),
        (lambda u: u.__setitem__((t + 1, x), u[t, x] // 2), ["floor division a // b is not an msc operation",
                                                             "msc.floor(a / b)"]),
        (lambda u: u.__setitem__((t + 1, x), 2 // u[t, x]), ["floor division a // b is not an msc operation"]),
        (lambda u: u.__setitem__((t + 1, x), u[t, x] % 2), ["the remainder a % b is not an msc operation",
                                                            "a - b * msc.floor(a / b)"]),
        (lambda u, k: u.__setitem__((t + 1, x), k % 2 * u[t, x]), ["the remainder a % b is not an msc operation"]),
        (lambda u: u.__setitem__((t + 1, x), divmod(u[t, x], 2)[0]), ["divmod(a, b) is not an msc operation"]),
        (lambda u: u.__setitem__((t + 1, x), u[t, x] << 1), ["the shift a << b is not an msc operation", "a * 2**b"]),
        (lambda u: u.__setitem__((t + 1, x), 1 >> u[t, x]), ["the shift a >> b is not an msc operation"]),
        (lambda u: u.__setitem__((t + 1, x), msc.where((u[t, x] > 0) ^ (u[t, x] < 1), 1, 0)),
         ["the exclusive or a ^ b is not an msc operation", "(a | b) & ~(a & b)"]),
        (lambda u, n: [u.__setitem__((t + 1, x), u[t, x]) for _ in range(n)],
         ["parameter 'n' was used as a Python integer (a range() bound", "only when the stencil runs",
          "loop bounds and indices must be Python integers"]),
        (lambda u: u.__setitem__((t + 1, x), [1.0, 2.0][u[t, x]]), ["a traced value was used as a Python integer"]),
        (lambda u, k: u.__setitem__((t + 1, x), np.array([1.0, 2.0])[k] * u[t, x]),
         ["parameter 'k' was used as a Python integer", "an index of a list or a NumPy array"]),
        (lambda u: u.__setitem__((t + 1, x), int(u[t, x])), ["a traced value was passed to int()", "msc.floor(a)"]),
        (lambda u: u.__setitem__((t + 1, x), round(u[t, x])), ["passed to round()", "msc.floor(a + 0.5)"]),
        (lambda u, k: u.__setitem__((t + 1, x), float(k) * u[t, x]),
         ["parameter 'k' was converted to a Python number (by float() or a math.* function)", "as it is"]),
        (lambda u: u.__setitem__((t + 1, x), math.sqrt(u[t, x])), ["converted to a Python number", "msc's functions"]),
        (lambda u: u.__setitem__((t + 1, x), pow(u[t, x], 2, 3)), ["pow(a, b, m) is not an msc operation"]),
        (lambda u: u.__setitem__((t + 1, x), u[t, x] @ u[t, x]), ["the matrix product a @ b is not an msc operation"]),
        (lambda u: u.__setitem__((t + 1, x), math.trunc(u[t, x])), ["passed to math.trunc()", "msc.floor(a)"]),
        (lambda u: u.__setitem__((t + 1, x), len(u[t, x]) * u[t, x]), ["asked for its length", "not a sequence"]),
        (lambda u: u.__setitem__((t + 1, x), sum(v for v in u[t, x])), ["a traced value was iterated over"]),
        (lambda u: u.__setitem__((t + 1, x), msc.sqrt(u[t, x], 2)), ["msc.sqrt(a) takes 1 argument, got 2"]),
        (lambda u: u.__setitem__((t + 1, x), msc.maximum(u[t, x])), ["msc.maximum(a, b) takes 2 arguments, got 1"]),
        (lambda u: u.__setitem__((t + 1, x), msc.where(u[t, x] > 0, 1)),
         ["msc.where(cond, a, b) takes 3 arguments, got 2"]),
        (lambda u: u.__setitem__((t + 1, x), msc.exp(x=u[t, x])),
         ["msc.exp(a) takes 1 argument, got 1 (missing a required argument: 'a')"]),
    ],
)
def test_definition_errors(body, words):
    message = _definition_error(body)
    for w in words:
        assert w in message, message
    assert message.startswith(f"{THIS_FILE}:{body.__code__.co_firstlineno}: in stencil '<lambda>': ")


def test_error_names_the_users_line():
    def bad(u):
        u[t + 1, x] = u[t, x]
        u[t + 1, x] = 2 * u[t, x]  # second write

    message = _definition_error(bad)
    assert f"{THIS_FILE}:{_line_of(bad, 'second write')}:" in message
    assert "two statements write u[t+1]" in message
    assert f"first at {THIS_FILE}:{_line_of(bad, 'u[t + 1, x] = u[t, x]')}" in message
    assert "in stencil 'bad'" in message


def test_a_parameter_no_statement_reads_is_warned_about_at_its_definition(tmp_path):
    """A run asks for every declared parameter: one that nothing reads is said at once, where it is declared."""
    with pytest.warns(StencilDefinitionWarning, match=r"stencil 'scaled': parameter 'b' is read by no statement, "
                                                      r"and a run still asks for it: remove it from scaled's") as seen:
        @msc.stencil
        def scaled(u, a, b):
            u[t + 1, x, y] = a * u[t, x, y]
    assert len(seen) == 1 and seen[0].filename == __file__
    source = tmp_path / "scaled.msc"
    source.write_text("stencil scaled {\n  field u[x];\n  param a, b;\n  u[t+1, x] = a * u[t, x];\n}\n")
    with pytest.warns(StencilDefinitionWarning, match="in stencil 'scaled': parameter 'b' is read by no") as seen:
        msc.load_stencil(source)
    assert len(seen) == 1 and (seen[0].filename, seen[0].lineno) == (str(source), 3)


def test_field_read_in_time_but_never_written():
    def bad(u, f):
        u[t + 1, x] = u[t, x] + f[t, x]

    assert "field 'f' is read at time levels but never written" in _definition_error(bad)


def test_field_with_and_without_time_index():
    def bad(u):
        u[t + 1, x] = u[t, x] + u[x]

    assert "a field is either time-dependent" in _definition_error(bad)


def test_builtin_abs_is_msc_abs():
    builtin = msc.stencil(lambda u, k: u.__setitem__((t + 1, x), abs(u[t, x - 1]) + abs(k)))
    ours = msc.stencil(lambda u, k: u.__setitem__((t + 1, x), msc.abs(u[t, x - 1]) + msc.abs(k)))
    assert builtin.ir.statements[0].expr == ours.ir.statements[0].expr
    u0 = np.array([1.0, -2.0, 3.0, -4.0])
    assert np.array_equal(builtin.reference(steps=1, u=u0, k=-0.5)["u"], [1.0, 1.5, 2.5, -4.0])


def test_numpy_numbers_compare_with_traced_values_on_either_side():
    left = msc.stencil(lambda u: u.__setitem__((t + 1, x), msc.where(np.float64(0.5) < u[t, x], 1.0, 0.0)))
    right = msc.stencil(lambda u: u.__setitem__((t + 1, x), msc.where(u[t, x] > 0.5, 1.0, 0.0)))
    u0 = np.array([0.1, 0.7, 0.9, 0.2])
    assert np.array_equal(left.reference(steps=1, u=u0)["u"], right.reference(steps=1, u=u0)["u"])
    assert np.array_equal(left.reference(steps=1, u=u0)["u"], [0.0, 1.0, 1.0, 0.0])


def test_nothing_written_and_varargs_and_boundary():
    assert "writes no field" in _definition_error(lambda u: None)
    assert "*args and **kwargs" in _definition_error(lambda *u: None)
    assert "boundary='open'" in _definition_error(lambda u: None, boundary="open")

    def returns(u):
        u[t + 1, x] = u[t, x - 1]
        return u[t, x] + 1.0

    assert "the stencil returns a value, which would be ignored" in _definition_error(returns)


def test_parameter_names_that_the_calls_use_and_default_values_are_definition_errors():
    """`def s(u, steps)` took the value of run(steps=...) for both; `def s(u, a=0.5)` ignored the default."""
    def shadowing(u, steps):
        u[t + 1, x] = steps * u[t, x - 1]

    def defaulted(u, a=0.5):
        u[t + 1, x] = a * u[t, x - 1]

    said = _definition_error(shadowing)
    assert "parameter 'steps' has the name of a keyword of the calls" in said and "rename it" in said
    assert "parameter 'a' has a default value (0.5)" in _definition_error(defaulted)
    with pytest.raises(StencilDefinitionError, match="parameter 'dt' has the name of a keyword"):
        msc.operator(lambda u, dt: u[x + 1] - u[x])
    with pytest.raises(StencilDefinitionError, match="parameter 'h' has a default value"):
        msc.operator(lambda u, h=1.0: u[x + 1] - u[x])


def test_the_reserved_names_are_those_of_the_calls_signatures():
    import inspect

    from msc.ir import CALL_KEYWORDS
    from msc.pde.operator import OPERATOR_KEYWORDS, Operator
    from msc.runtime.kernel import CompiledKernel

    def named(*calls):
        return {p.name for f in calls for p in inspect.signature(f).parameters.values()
                if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}

    assert set(CALL_KEYWORDS) == named(msc.Stencil.reference, CompiledKernel.run, CompiledKernel.start)
    assert set(OPERATOR_KEYWORDS) == set(CALL_KEYWORDS) | named(msc.solve, msc.implicit, Operator.matrix,
                                                                   Operator.apply)


# ---------------------------------------------------------------- run time


@msc.stencil
def wave(u, c, k):
    u[t + 1, x, y] = 2 * u[t, x, y] - u[t - 1, x, y] + k * c[x, y] * (u[t, x + 1, y] - 2 * u[t, x, y] + u[t, x - 1, y])


def _good():
    return dict(u=np.zeros((8, 9)), c=np.ones((8, 9)), k=0.1)


@pytest.mark.parametrize("runner", ["reference", "openmp"])
@pytest.mark.parametrize(
    "change, words",
    [
        (dict(c=np.zeros((8, 10))), ["'c' has shape (8, 10) but 'u' has (8, 9)", "same shape"]),
        (dict(u=np.zeros(8)), ["'u' must be a 2D array, got shape (8,)"]),
        (dict(u=[np.zeros((8, 9))] * 3), ["'u' takes one array or a list of 2 time level(s) (t-1, t, oldest first); got a list of 3"]),
        (dict(c=[np.ones((8, 9))]), ["'c' is a time-invariant input and takes one array"]),
        (dict(u=np.zeros((8, 9), np.float32)), ["'u' has dtype float32 but the stencil runs in float64"]),
        (dict(u=np.zeros((2, 9)), c=np.ones((2, 9))), ["arrays of shape (2, 9) are too small in dimension x"]),
        (dict(k="fast"), ["scalar parameter 'k' must be a number"]),
        (dict(u="u0"), ["field 'u' must be a numpy array"]),
        (dict(alpha=1.0), ["unknown argument(s) alpha; it takes u, c, k"]),
    ],
)
def test_argument_errors(runner, change, words):
    args = {**_good(), **change}
    run = wave.reference if runner == "reference" else wave.compile().run
    with pytest.raises(StencilArgumentError) as info:
        run(steps=1, **args)
    for w in words:
        assert w in str(info.value)
    assert "stencil 'wave'" in str(info.value)


def test_missing_argument_and_bad_steps():
    args = _good()
    del args["c"]
    with pytest.raises(StencilArgumentError, match="missing argument\\(s\\) c"):
        wave.reference(steps=1, **args)
    with pytest.raises(StencilArgumentError, match="steps must be a non-negative integer"):
        wave.reference(steps=-1, **_good())


def test_calling_a_stencil_directly_explains_itself():
    with pytest.raises(TypeError, match="not called directly"):
        wave(1, 2, 3)


@msc.operator
def laplacian(u):
    return u[x - 1] - 2 * u[x] + u[x + 1]


@pytest.mark.parametrize("dt", [np.array([0.1, 0.2]), "0.1", None, True, 0.0, -0.1, float("inf")])
def test_time_step_must_be_a_positive_number(dt):
    message = f"dt must be a positive number, the time step of every step; got {reprlib.repr(dt)}"
    with pytest.raises(StencilArgumentError, match=re.escape(f"explicit(): {message}")):
        msc.explicit(laplacian, dt, "euler")
    with pytest.raises(StencilArgumentError, match=re.escape(f"implicit(): {message}")):
        msc.implicit(laplacian, dt, shape=(6,))


def test_unknown_target():
    with pytest.raises(msc.TargetError, match="unknown target 'fpga'"):
        wave.compile(target="fpga")
