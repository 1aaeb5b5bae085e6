"""The OpenMP backend against the reference interpreter on generated stencils
(1-3D, radius 1-4, star and box, 1-3 time levels, 1-3 statements, input
fields, both boundaries, both dtypes)."""

from __future__ import annotations

import pytest
from stencil_gen import generate

SEEDS = range(48)


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_stencil_matches_reference(seed, assert_matches):
    case = generate(seed)
    expected = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
    kernel = case.stencil.compile(target="openmp", dtype=case.dtype, threads=2)
    result = kernel.run(steps=case.steps, **case.inputs)
    assert_matches(result, expected, case.dtype, case)


def test_generator_covers_the_matrix():
    """The seeds above really span the promised space of stencils."""
    cases = [generate(s) for s in SEEDS]
    irs = [c.stencil.ir for c in cases]
    assert {ir.ndim for ir in irs} == {1, 2, 3}
    assert {max(ir.radius) for ir in irs} >= {1, 2, 3, 4}
    assert {ir.boundary for ir in irs} == {"dirichlet", "periodic"}
    assert {max(f.window for f in ir.fields) for ir in irs} >= {1, 2, 3}
    assert {len(ir.statements) for ir in irs} == {1, 2, 3}
    assert {c.dtype for c in cases} == {"float64", "float32"}
    assert any(f.time_invariant for ir in irs for f in ir.fields)
    assert any(a.dt == 1 for ir in irs for s in ir.statements for a in s.reads)
    assert any(any(o != 0 for o in a.offsets) and sum(o != 0 for o in a.offsets) > 1
               for ir in irs for s in ir.statements for a in s.reads)  # box (diagonal) reads


def test_repeated_runs_and_threads_agree(assert_matches):
    case = generate(7)
    kernel = case.stencil.compile(dtype=case.dtype)
    one = kernel.run(steps=case.steps, threads=1, **case.inputs)
    two = kernel.run(steps=case.steps, threads=2, **case.inputs)
    assert_matches(two, one, case.dtype, case)
