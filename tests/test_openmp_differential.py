"""The OpenMP backend against the reference interpreter on generated stencils
(1-3D, radius 1-4, star and box, 1-3 time levels, 1-3 statements, input
fields, both boundaries, both dtypes, every operator and function), as
one-shot runs and as runs continued from a step t0 != 0."""

from __future__ import annotations

import numpy as np
import pytest
from stencil_gen import TERMS, generate

from msc.poly.schedule import LARGE_READS

SEEDS = range(48)
PERIODIC_3D_SEEDS = range(100, 112)  # periodic 3D box stencils: the wrap's edges and corners
SWEEP = range(48, 400)  # the larger sweep (slow)


def check_case(case, assert_matches) -> None:
    """One-shot run and a run continued after `split` steps, both against the reference."""
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    kernel = case.stencil.compile(target="openmp", dtype=case.dtype, threads=2)
    # 1D kernels share the only loop among threads, and statements of LARGE_READS or more reads keep
    # their C simple for the compiler's sake: neither stores whole lines by default
    if case.stencil.ir.ndim > 1 and max(len(s.reads) for s in case.stencil.ir.statements) < LARGE_READS:
        assert "msc_line_aligned(" in kernel.source
    assert_matches(kernel.run(steps=case.steps, **case.inputs), expected, case.dtype, case)
    sim = kernel.start(**case.inputs)
    sim.advance(case.split)
    sim.advance(case.steps - case.split)
    assert sim.step == case.steps
    assert_matches(sim.fields, expected, case.dtype, f"continued after {case.split} steps: {case}")


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_stencil_matches_reference(seed, assert_matches):
    check_case(generate(seed), assert_matches)


@pytest.mark.parametrize("seed", PERIODIC_3D_SEEDS)
def test_periodic_3d_box_stencil_matches_reference(seed, assert_matches):
    check_case(generate(seed, ndim=3, boundary="periodic", shape="box"), assert_matches)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SWEEP)
def test_generated_stencil_sweep(seed, assert_matches):
    check_case(generate(seed), assert_matches)


def test_generator_covers_the_matrix():
    """The seeds above really span the promised space of stencils."""
    cases = [generate(s) for s in SEEDS]
    irs = [c.stencil.ir for c in cases]
    for ndim in (1, 2, 3):
        assert {max(ir.radius) for ir in irs if ir.ndim == ndim} == {1, 2, 3, 4}, ndim
        assert {c.dtype for c in cases if c.stencil.ir.ndim == ndim} == {"float64", "float32"}, ndim
    assert {ir.boundary for ir in irs} == {"dirichlet", "periodic"}
    assert {max(f.window for f in ir.fields) for ir in irs} >= {1, 2, 3}
    assert {len(ir.statements) for ir in irs} == {1, 2, 3}
    assert any(f.time_invariant for ir in irs for f in ir.fields)
    assert any(a.dt == 1 for ir in irs for s in ir.statements for a in s.reads)
    assert any(sum(o != 0 for o in a.offsets) == 3 for ir in irs for s in ir.statements for a in s.reads)
    assert {term for c in cases for term in c.terms} == set(TERMS)  # every operator and function
    # the last dimension holds two whole float32 lines (16 points each) whatever the alignment
    assert min(_interior(c)[-1] for c in cases) >= 32
    assert min(c.steps for c in cases) >= 10  # at least twice the deepest time tile of test_schedules
    # continued runs start the second call at odd and even steps
    assert {c.split % 2 for c in cases} == {0, 1}


def _interior(case) -> tuple[int, ...]:
    value = case.inputs["f0"]
    shape = np.shape(value[-1] if isinstance(value, list) else value)
    ring = (0,) * len(shape) if case.stencil.ir.boundary == "periodic" else case.stencil.ir.radius
    return tuple(n - 2 * r for n, r in zip(shape, ring))


def test_repeated_runs_and_threads_agree(assert_matches):
    case = generate(7)
    kernel = case.stencil.compile(dtype=case.dtype)
    one = kernel.run(steps=case.steps, threads=1, **case.inputs)
    two = kernel.run(steps=case.steps, threads=2, **case.inputs)
    assert_matches(two, one, case.dtype, case)
