"""Zero-copy stepping: `k.start(...)`, `sim.advance(n)`, `sim.fields`, `sim.step`
against `run` and the reference interpreter."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import msc
from msc import Schedule, t, x, y
from msc.errors import StencilArgumentError


@msc.stencil
def wave(u, c):  # three ring slots: t-1, t and t+1
    u[t + 1, x, y] = 2 * u[t, x, y] - u[t - 1, x, y] + c[x, y] * (
        u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y])


@msc.stencil(boundary="periodic")
def drift(u, a):
    u[t + 1, x, y] = (1 - a) * u[t, x, y] + a * u[t, x - 1, y + 1]


def wave_inputs() -> dict:
    rng = np.random.default_rng(3)
    return {"u": [rng.random((21, 40)), rng.random((21, 40))], "c": 0.1 * rng.random((21, 40))}


@pytest.mark.parametrize("schedule", [None, Schedule().time_tile(3, x=4)], ids=str)
def test_advance_in_pieces_equals_one_run(schedule, assert_matches):
    inputs = wave_inputs()
    kernel = wave.compile(schedule=schedule, threads=2)
    sim = kernel.start(**inputs)
    for steps in (1, 4, 0, 2, 5):
        sim.advance(steps)
    assert sim.step == 12
    whole = kernel.run(steps=12, **inputs)
    assert np.array_equal(sim.fields["u"], whole["u"])
    assert_matches(sim.fields, wave.reference(steps=12, **inputs))


def test_fields_are_read_only_views_of_kept_buffers():
    inputs = wave_inputs()
    saved = [a.copy() for a in inputs["u"]] + [inputs["c"].copy()]
    sim = wave.compile().start(**inputs)
    first = sim.fields["u"]
    assert first.shape == inputs["u"][1].shape and np.array_equal(first, inputs["u"][1])  # ring included
    with pytest.raises(ValueError):
        first[1, 1] = 0.0
    sim.advance(3)  # three slots: back in the slot of step 0, which the kernel wrote, no new buffer
    assert sim.fields["u"].ctypes.data == first.ctypes.data
    assert np.array_equal(sim.fields["u"][0], inputs["u"][1][0])  # the dirichlet ring is fixed
    assert all(np.array_equal(a, b) for a, b in zip(inputs["u"] + [inputs["c"]], saved))  # inputs untouched
    assert wave.compile().last_run.steps == 0 and sim.kernel.last_run.steps == 3


def test_kernel_buffers_start_on_a_page():
    """Rows of 2 KiB (256 doubles) in a buffer that starts on a page never straddle one."""
    from msc.runtime.buffers import PAGE, aligned_empty

    for shape, dtype in (((3, 256, 256), "float64"), ((7,), "float32"), ((1,), "float64")):
        for zeroed in (False, True):
            a = aligned_empty(shape, dtype, zeroed=zeroed)
            assert a.ctypes.data % PAGE == 0 and a.shape == shape and a.dtype == np.dtype(dtype)
            assert a.flags.c_contiguous
            assert not zeroed or not a.any()
    sim = wave.compile().start(**wave_inputs())
    assert all(b.ctypes.data % PAGE == 0 for b in sim._host_buffers().values())


def test_ring_slots_start_apart_in_a_page():
    """Consecutive slots of a ring buffer start the spread apart modulo a page (no 4K aliasing between
    the level written and the levels read), each slot C-contiguous; wave's three slots a quarter apart."""
    from msc.runtime.buffers import PAGE, field_buffer, slot_spread

    for stencil, shape in ((wave, (64, 64)), (wave, (21, 40)), (drift, (256, 256))):
        assert slot_spread(stencil.ir) == (1024 if stencil is wave else 2048)
        for f in stencil.ir.fields:
            buf = field_buffer(stencil.ir, f, shape)
            assert buf.shape == ((f.slots, *shape) if f.written else shape) and buf.ctypes.data % PAGE == 0
            if f.written:
                assert all(buf[s].flags.c_contiguous for s in range(f.slots))
                starts = [buf[s].ctypes.data for s in range(f.slots)]
                assert {(b - a) % PAGE for a, b in zip(starts, starts[1:])} == {slot_spread(stencil.ir)}


@msc.stencil
def five_slots(u):
    u[t + 1, x, y] = u[t, x, y] - u[t - 3, x + 1, y]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("stencil", [drift, wave, five_slots], ids=lambda s: s.ir.name)
def test_generated_code_puts_slots_where_python_does(tmp_path, stencil, dtype):
    """The C expression of templates/slot_points.j2, compiled, gives buffers.slot_points for every size."""
    import subprocess

    from msc.runtime.buffers import slot_points, slot_spread
    from msc.targets.templates_env import environment

    ring = stencil.ir.with_dtype(dtype)
    sizes = [1, 7, 100, 511, 512, 513, 4096, 4098 * 4098, 256 ** 3, 258 ** 3, 1000003]
    expr = environment().from_string('{% from "slot_points.j2" import slot_points %}{{ slot_points("n", spread) }}'
                              ).render(spread=slot_spread(ring))
    ctype = "double" if dtype == "float64" else "float"
    lines = "".join(f'    {{ long n = {n}L; printf("%ld\\n", (long)({expr})); }}\n' for n in sizes)
    program = tmp_path / "slots.c"
    program.write_text(f"#include <stdio.h>\ntypedef {ctype} real;\nint main(void) {{\n{lines}    return 0;\n}}\n")
    subprocess.run(["gcc", "-o", str(tmp_path / "slots"), str(program)], check=True)
    printed = subprocess.run([str(tmp_path / "slots")], check=True, capture_output=True, text=True).stdout.split()
    assert [int(v) for v in printed] == [slot_points(ring, n) for n in sizes]
    assert max(f.slots for f in ring.written_fields) == {"drift": 2, "wave": 3, "five_slots": 5}[ring.name]


def test_periodic_fields_have_the_domain_shape(assert_matches):
    u0 = np.random.default_rng(4).random((9, 35))
    sim = drift.compile().start(u=u0, a=0.3)
    sim.advance(5)
    sim.advance(2)
    assert sim.fields["u"].shape == u0.shape
    assert_matches(sim.fields, drift.reference(steps=7, u=u0, a=0.3))


def test_bad_calls_say_what_is_wrong():
    sim = wave.compile().start(**wave_inputs())
    with pytest.raises(StencilArgumentError, match="stencil 'wave': steps must be a non-negative integer, got -1"):
        sim.advance(-1)
    with pytest.raises(StencilArgumentError, match="missing argument"):
        wave.compile().start(u=wave_inputs()["u"])
    assert sim.step == 0


@msc.stencil
def heat(u, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1]
                                           - 4 * u[t, x, y])


def test_a_run_that_blows_up_warns_once_naming_the_steps():
    u0 = np.random.default_rng(5).random((18, 20))
    kernel = heat.compile(threads=1)
    with pytest.warns(msc.NonFiniteWarning, match=r"stencil 'heat': field 'u' is no longer finite \(NaN or inf\) "
                      r"after steps 0\.\.1999; an explicit step past its stability limit") as caught:
        kernel.run(steps=2000, u=u0, alpha=1.0)
    assert [w.filename for w in caught] == [__file__]  # the user's line, not msc's
    sim = kernel.start(u=u0, alpha=1.0)
    sim.advance(10)
    with pytest.warns(msc.NonFiniteWarning, match=r"after steps 10\.\.2009"):
        sim.advance(2000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sim.advance(3)  # once per simulation
        kernel.run(steps=2000, u=u0, alpha=0.2)  # a stable run says nothing


@msc.stencil
def heated(u, k, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * k[x, y] * (u[t, x - 1, y] + u[t, x + 1, y] - 2 * u[t, x, y])


@pytest.mark.parametrize("case", ["nan in u", "inf on the ring", "inf in a coefficient field", "float32 overflow"])
def test_inputs_that_are_not_finite_are_named_not_the_steps(case):
    """NaN or inf given in (or a parameter float32 cannot hold) is named once, before any step; the
    steps' blow-up message, which blames the time step, does not follow."""
    u0, k = np.random.default_rng(6).random((12, 14)), np.ones((12, 14))
    dtype, alpha, named = "float64", 0.1, "field 'u' is"
    if case == "nan in u":
        u0[5, 6] = np.nan
    elif case == "inf on the ring":
        u0[0, 3] = np.inf
    elif case == "inf in a coefficient field":
        k[4, 4], named = -np.inf, "field 'k' is"
    else:
        dtype, alpha, named = "float32", 1e300, "parameter 'alpha' = 1e+300 is"
        u0, k = u0.astype(np.float32), k.astype(np.float32)
    with pytest.warns(msc.NonFiniteWarning) as caught:
        heated.compile(threads=1, dtype=dtype).run(steps=3, u=u0, k=k, alpha=alpha)
    assert len(caught) == 1 and caught[0].filename == __file__
    assert str(caught[0].message) == (f"stencil 'heated': {named} not finite (NaN or inf in {dtype}) before step 0 "
                                      "runs, as given; the results of the steps that follow will not be finite either")


def test_an_emulated_athread_run_that_blows_up_warns():
    u0 = np.random.default_rng(5).random((10, 12))
    with pytest.warns(msc.NonFiniteWarning, match=r"stencil 'heat': field 'u' is no longer finite .* after steps 0\.\.399"):
        heat.compile(target="athread").run(steps=400, u=u0, alpha=1.0)


def test_an_auto_kernel_is_tuned_at_start_and_steps(tmp_path, monkeypatch):
    from msc.tune.tuner import AutoKernel

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))  # a fresh tuning cache: it tunes here
    poly = wave.poly()
    auto = AutoKernel(poly, lambda s, n: wave.compile(schedule=s, threads=n), threads=1, budget_s=0.0, echo=False)
    inputs = wave_inputs()
    sim = auto.start(**inputs)
    assert auto.report is not None and not auto.report.from_cache
    sim.advance(5)
    sim.advance(7)
    assert sim.step == 12
    np.testing.assert_allclose(sim.fields["u"], wave.reference(steps=12, **inputs)["u"], rtol=1e-12, atol=1e-12)


def test_an_auto_kernel_says_it_is_not_tuned_yet_then_shows_its_choice(tmp_path, monkeypatch):
    """A schedule="auto" kernel has a short repr, `schedule` and `source` as every kernel has: before its
    first run a repr and an error saying it is not tuned yet, then the choice for the size tuned for last."""
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    auto = wave.compile(schedule="auto", threads=1)
    auto.budget_s, auto.echo = 0.0, False
    assert repr(auto) == ("<msc kernel 'wave' schedule=auto (not tuned yet) platform=x86 (OpenMP) dtype=float64 "
                          "threads=1>")
    for what in ("schedule", "source"):
        with pytest.raises(msc.MscError, match=f"the kernel of 'wave' with schedule='auto' is not tuned yet, so it "
                                               f"has no {what}: it is tuned for the problem size at its first run"):
            getattr(auto, what)
    auto.start(**wave_inputs())
    assert auto.report is not None and auto.schedule == auto.report.schedule
    assert repr(auto) == (f"<msc kernel 'wave' target=openmp dtype=float64 schedule=auto: {auto.schedule} for 21x40 "
                          "threads=1>")
    assert "msc_run" in auto.source and auto.source == wave.compile(schedule=auto.schedule).source


def test_follow_goes_on_from_another_simulation_in_its_buffers():
    """kernel.follow(old): a simulation that takes over `old`'s host buffers, step and parameters
    (what the tuner's trials do), stepping exactly as `old` would have, also for a kernel of
    another schedule; a simulation of another stencil is refused."""
    kernel = wave.compile(target="openmp", threads=1)
    other = wave.compile(target="openmp", threads=1, schedule=Schedule().time_tile(3, x=4))
    old = kernel.start(**wave_inputs())
    old.advance(5)
    fresh = kernel.start(**wave_inputs())
    fresh.advance(11)
    again = other.follow(old)
    assert again.host_buffers["u"] is old.host_buffers["u"] and again.step == 5
    again.advance(6)
    np.testing.assert_allclose(again.fields["u"], fresh.fields["u"], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="cannot go on as one of 'drift'"):
        drift.compile(target="openmp", threads=1).follow(again)
