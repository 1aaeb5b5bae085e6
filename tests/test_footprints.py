"""Cache buffers are a tile's footprint, computed by isl from the access
relations: compared with the footprint's geometry (the tile clipped to the
domain, grown by the extreme offsets each level is read at) on star and box
stencils of radius 1-4 in 1-3D, at tiles inside the domain and at its
edges; equal to the previous hand geometry (tile + 2 x radius) where every
level is read out to the radius; and run against the reference where the
footprint is smaller or one-sided."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import msc
from msc.codegen.lower import _Lowering, read_cache, write_cache
from msc.poly.schedule import lower

DIMS = "xyz"


def _offsets(rng: random.Random, ndim: int, radius: int, shape: str) -> list[tuple[int, ...]]:
    if shape == "star":
        pool = [tuple(o if d == k else 0 for d in range(ndim)) for k in range(ndim) for o in range(-radius, radius + 1)]
    else:
        pool = list(itertools.product(range(-radius, radius + 1), repeat=ndim))
    return sorted(set(rng.sample(pool, rng.randint(1, min(len(pool), 6)))))


def _read(name: str, level: str | None, offsets: tuple[int, ...]) -> str:
    index = [f"{DIMS[d]}{o:+d}" if o else DIMS[d] for d, o in enumerate(offsets)]
    return f"{name}[{', '.join(([level] if level else []) + index)}]"


def _stencil(ndim: int, reads: dict[tuple[str, str | None], list[tuple[int, ...]]], name: str) -> msc.Stencil:
    """u[t+1] = a weighted sum of the given reads (fields u and the time-invariant c)."""
    terms = [f"{0.1 + 0.01 * k!r} * {_read(f, lvl, o)}"
             for k, ((f, lvl), offs) in enumerate(reads.items()) for o in offs]
    uses_c = any(f == "c" for f, _ in reads)
    source = (f"@msc.stencil\ndef {name}(u{', c' if uses_c else ''}):\n"
              f"    {_read('u', 't+1', (0,) * ndim)} = {' + '.join(terms)}\n")
    namespace = {"msc": msc, "t": msc.t, "x": msc.x, "y": msc.y, "z": msc.z}
    exec(compile(source, f"<{name}>", "exec"), namespace)  # noqa: S102 (the test's own stencil source)
    return namespace[name]


def _case(seed: int) -> tuple[msc.Stencil, dict[tuple[str, int | None], list[tuple[int, ...]]]]:
    rng = random.Random(seed)
    ndim, radius, shape = rng.randint(1, 3), rng.randint(1, 4), rng.choice(["star", "box"])
    reads = {("u", "t"): _offsets(rng, ndim, radius, shape)}
    if rng.random() < 0.5:
        reads[("u", "t-1")] = _offsets(rng, ndim, rng.randint(1, radius), shape)
    if rng.random() < 0.5:
        reads[("c", None)] = _offsets(rng, ndim, rng.randint(1, radius), shape)
    levels = {(f, {"t": 0, "t-1": -1, None: None}[lvl]): offs for (f, lvl), offs in reads.items()}
    return _stencil(ndim, reads, f"fp{seed}"), levels


@pytest.mark.parametrize("seed", range(40))
def test_isl_footprint_is_the_clipped_tile_grown_by_the_offsets(seed):
    stencil, levels = _case(seed)
    poly, r = stencil.poly(), stencil.ir.radius
    rng = random.Random(1000 + seed)
    for _ in range(4):
        extents = [2 * rd + rng.randint(1, 20) for rd in r]
        sizes = [rng.randint(1, 9) for _ in r]
        # tiles anywhere: reaching over the domain's low or high edge, or inside it
        origins = [rng.choice([0, rd, rng.randint(0, n), n - rd - s // 2]) for rd, n, s in zip(r, extents, sizes)]
        box = [(o, o + s) for o, s in zip(origins, sizes)]
        computed = [(max(lo, rd), min(hi, n - rd)) for (lo, hi), rd, n in zip(box, r, extents)]  # tile ^ domain
        for (name, dt), offsets in levels.items():
            found = poly.footprint(name, dt, box, extents)
            if any(a >= b for a, b in computed):
                assert found is None
                continue
            expected = tuple((a + min(o[d] for o in offsets), b - 1 + max(o[d] for o in offsets))
                             for d, (a, b) in enumerate(computed))
            assert found == expected, (stencil.ir, name, dt, box, extents)
    written = poly.footprint("u", 1, [(r[d], r[d] + 3) for d in range(len(r))], [2 * rd + 5 for rd in r], access="write")
    assert written == tuple((rd, rd + 2) for rd in r)


def _buffers(stencil: msc.Stencil, schedule: msc.Schedule) -> dict[str, tuple[int, ...]]:
    poly = stencil.poly()
    return {b.name: b.shape for b in _Lowering(poly, lower(schedule, poly)).buffers()}


@pytest.mark.parametrize("ndim, radius, shape", [(n, r, s) for n in (1, 2, 3) for r in (1, 2, 3, 4) for s in ("star", "box")])
def test_buffers_equal_the_previous_geometry_when_reads_reach_the_radius(ndim, radius, shape):
    """Every level read out to the radius on both sides of every dimension:
    the isl footprint is tile + 2 x radius, what the hand geometry gave."""
    if shape == "star":
        offsets = [(0,) * ndim] + [tuple(o if d == k else 0 for d in range(ndim)) for k in range(ndim) for o in (-radius, radius)]
    else:
        offsets = list(itertools.product((-radius, 0, radius), repeat=ndim))
    st = _stencil(ndim, {("u", "t"): offsets, ("u", "t-1"): offsets, ("c", None): offsets}, f"full{ndim}{radius}{shape}")
    sizes = dict(zip(DIMS, (5, 3, 4)[:ndim]))
    shapes = _buffers(st, msc.Schedule().tile(**sizes).cache_read("u").cache_read("c").cache_write("u"))
    halo = tuple(s + 2 * radius for s in sizes.values())
    assert shapes == {read_cache("u", 0): halo, read_cache("u", -1): halo, read_cache("c", None): halo,
                      write_cache("u"): tuple(sizes.values())}


@pytest.mark.parametrize("seed", range(0, 40, 3))
def test_buffers_are_no_larger_than_the_previous_geometry(seed):
    stencil, levels = _case(seed)
    sizes = dict(zip(DIMS, (4, 3, 5)[:stencil.ir.ndim]))
    schedule = msc.Schedule().tile(**sizes).cache_read("u").cache_write("u")
    shapes = _buffers(stencil, schedule.cache_read("c") if ("c", None) in levels else schedule)
    for (name, dt), offsets in levels.items():
        spans = [max(o[d] for o in offsets) - min(o[d] for o in offsets) for d in range(stencil.ir.ndim)]
        assert shapes[read_cache(name, dt)] == tuple(s + span for s, span in zip(sizes.values(), spans))
        assert all(a <= s + 2 * r for a, s, r in zip(shapes[read_cache(name, dt)], sizes.values(), stencil.ir.radius))


@pytest.mark.parametrize("seed", [1, 4, 7, 12, 22, 31])
def test_footprint_buffers_match_the_reference(seed, assert_matches):
    """One-sided and uneven footprints, tiles that do not divide the domain (edge tiles clipped)."""
    stencil, levels = _case(seed)
    rng = np.random.default_rng(seed)
    shape = tuple(n + 2 * r for n, r in zip((13, 11, 9)[:stencil.ir.ndim], stencil.ir.radius))
    inputs = {f.name: rng.random(shape) for f in stencil.ir.fields}
    sizes = dict(zip(DIMS, (4, 3, 5)[:stencil.ir.ndim]))
    schedule = msc.Schedule().tile(**sizes).cache_read("u").cache_write("u")
    if ("c", None) in levels:
        schedule = schedule.cache_read("c")
    expected = stencil.reference(steps=5, **inputs)
    assert_matches(stencil.compile(schedule=schedule, threads=2).run(steps=5, **inputs), expected, "float64", schedule)


def test_one_sided_reads_stage_a_one_sided_footprint():
    @msc.stencil
    def upwind(u):
        u[msc.t + 1, msc.x, msc.y] = 0.5 * u[msc.t, msc.x, msc.y] + 0.25 * (u[msc.t, msc.x - 2, msc.y] + u[msc.t, msc.x - 1, msc.y - 1])

    source = msc.codegen.get_target("openmp").source(upwind.poly(), msc.Schedule().tile(x=8, y=8).cache_read("u"))
    assert "real cr_f_u_t0[90];" in source  # (8 + 2) x (8 + 1), not (8 + 4) x (8 + 2)
    assert "msc_imin(P0, 8 * c2 + 8)" in source and "msc_imax(0, 8 * c2 - 2)" in source
