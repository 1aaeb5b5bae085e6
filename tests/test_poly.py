"""PolyIR: domains, dependences from isl, parallel loops and legality."""

from __future__ import annotations

import islpy as isl

import msc
from msc import t, x, y


@msc.stencil
def heat(u):
    u[t + 1, x, y] = 0.25 * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1])


@msc.stencil
def two_stage(u, v):
    v[t + 1, x] = u[t, x - 1] + u[t, x + 1]
    u[t + 1, x] = v[t + 1, x - 1] + v[t + 1, x + 1]


FIXED = isl.Set("[T, P0, P1] -> { : T = 5 and P0 = 10 and P1 = 12 }")


def test_domain_is_the_interior_of_every_step():
    poly = heat.poly()
    dom = poly.domain
    assert dom.is_equal(isl.UnionSet("[T, P0, P1] -> { S0[t, i0, i1] : 0 <= t < T and 1 <= i0 < P0 - 1 and 1 <= i1 < P1 - 1 }"))


def test_flow_dependences_are_the_stencil_neighbours():
    poly = heat.poly()
    deltas = poly.flow_dependences.deltas().intersect_params(FIXED)
    want = isl.UnionSet("[T, P0, P1] -> { S0[1, 1, 0]; S0[1, -1, 0]; S0[1, 0, 1]; S0[1, 0, -1] }")
    assert deltas.is_equal(want.intersect_params(FIXED))
    sample = isl.UnionSet("[T, P0, P1] -> { S0[1, 1, 1] }")  # no diagonal read, no diagonal flow
    assert sample.intersect(deltas).is_empty()


def test_space_loops_are_parallel_time_is_not():
    for st in (heat, two_stage):
        poly = st.poly()
        par = poly.parallel_dims(poly.default_schedule)
        assert 0 not in par
        assert 2 in par  # the outermost space loop


def test_default_schedule_is_legal_and_reversal_is_not():
    poly = two_stage.poly()
    assert poly.violated(poly.default_schedule).is_empty()
    swapped = isl.UnionMap("[T, P0] -> { S0[t, i] -> [t, 1, i]; S1[t, i] -> [t, 0, i] }")
    assert not poly.violated(swapped).is_empty()


def test_ring_buffer_reuse_creates_anti_dependences():
    poly = heat.poly()
    # the slot of u[t+1] is the slot of u[t-1]: a write must wait for last step's reads
    assert not poly.memory_dependences.is_empty()
