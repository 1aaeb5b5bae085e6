"""Compile time that scales with the stencil: footprint dependences equal to
isl's per-access analysis, long sums balanced (a 729-point box traces,
hashes and generates code), and cached kernels loaded in a new process
without any isl work."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import islpy as isl
import numpy as np
import pytest

import msc
from msc import ir
from msc.codegen import get_target
from msc.errors import StencilDefinitionError
from msc.poly import PolyIR, offset_boxes

# ---------------------------------------------------------------- dependences


def _random_stencil(rng: np.random.Generator, k: int) -> ir.StencilIR:
    """1-2 statements in 1D or 2D, random offsets and levels, dirichlet or periodic."""
    ndim = int(rng.integers(1, 3))
    nst = int(rng.integers(1, 3))
    names = ["u", "v"][:nst]
    offsets = list(itertools.product(range(-2, 3), repeat=ndim))
    statements = []
    oldest = {n: 0 for n in names}
    for s, target in enumerate(names):
        reads = []
        for _ in range(int(rng.integers(1, 9))):
            name = names[int(rng.integers(0, nst))]
            dt = int(rng.integers(-1, 1)) if names.index(name) >= s else int(rng.integers(-1, 2))
            if rng.random() < 0.15:
                name, dt = "c", None
            oldest[name] = min(oldest.get(name, 0), dt if dt is not None else 0)
            reads.append(ir.FieldRead(name, dt, offsets[int(rng.integers(0, len(offsets)))]))
        expr: ir.Expr = reads[0]
        for r in reads[1:]:
            expr = ir.BinOp("+", expr, r)
        statements.append(ir.Statement(target, expr, ir.SourceLoc("gen", s + 1)))
    fields = [ir.FieldDecl(n, ndim, "float64", 1 - oldest[n], True) for n in names]
    if any(a.name == "c" for st in statements for a in st.reads):
        fields.append(ir.FieldDecl("c", ndim, "float64", 0, False))
    boundary = "periodic" if rng.random() < 0.3 else "dirichlet"
    return ir.StencilIR(f"random{k}", ndim, tuple(fields), (), tuple(statements), boundary)


def _per_access(poly: PolyIR, storage: bool) -> isl.UnionMap:
    """Every read as its own access relation (the analysis before footprints)."""
    def level(name: str, dt: int) -> str:
        slots = poly.ir.field(name).slots
        return f"(t + {dt} + {slots}) mod {slots}" if storage else f"t + {dt}"

    parts = []
    for st in poly.statements:
        src, cons = poly.instance(st), poly.domain_constraints(st)
        if st.stmt is None:
            parts.append(f"{src} -> {st.target}[{level(st.target, 1)}, {', '.join(poly.dims)}] : {cons}")
            continue
        for a in st.stmt.reads:
            space = [f"{i} + {o}" for i, o in zip(poly.dims, a.offsets)]
            if a.dt is not None:
                space.insert(0, level(a.name, a.dt))
            parts.append(f"{src} -> {a.name}[{', '.join(space)}] : {cons}")
    return isl.UnionMap(f"[{', '.join(poly.params)}] -> {{ {'; '.join(parts)} }}")


@pytest.mark.parametrize("seed", range(12))
def test_footprint_dependences_equal_per_access_analysis(seed):
    """Flow dependences from footprints equal isl compute_flow over every
    single read, and so do the ring-buffer (anti/output) dependences."""
    poly = PolyIR(_random_stencil(np.random.default_rng(seed), seed))
    reads = _per_access(poly, storage=False)
    assert poly.reads.is_equal(reads)
    info = isl.UnionAccessInfo.from_sink(reads).set_must_source(poly.writes)
    flow = info.set_schedule_map(poly.default_schedule).compute_flow().get_must_dependence()
    assert poly.flow_dependences.is_equal(flow)
    sched = poly.default_schedule
    storage_reads = _per_access(poly, storage=True).intersect_domain(poly.domain)
    writes = poly._access(True, "write").intersect_domain(poly.domain)
    anti = storage_reads.apply_range(writes.reverse()).intersect(sched.lex_lt_union_map(sched))
    assert anti.is_subset(poly.memory_dependences)
    assert poly.memory_dependences.subtract(anti).is_subset(
        writes.apply_range(writes.reverse()).intersect(sched.lex_lt_union_map(sched)))


@pytest.mark.parametrize("seed", range(20))
def test_offset_boxes_cover_the_offsets_exactly(seed):
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 4))
    every = list(itertools.product(range(-2, 3), repeat=ndim))
    offsets = {every[int(i)] for i in rng.integers(0, len(every), int(rng.integers(1, 30)))}
    covered: list[tuple[int, ...]] = []
    for box in offset_boxes(offsets):
        covered += itertools.product(*(range(lo, hi + 1) for lo, hi in box))
    assert sorted(covered) == sorted(offsets)  # every offset once: exact and disjoint


def test_box_and_star_footprints_are_few_boxes():
    box = set(itertools.product(range(-4, 5), repeat=3))
    star = {o for o in box if sum(1 for v in o if v) <= 1}
    assert len(offset_boxes(box)) == 1
    assert len(offset_boxes(star)) == 5


# ---------------------------------------------------------------- deep IR


def _box3d(radius: int) -> msc.Stencil:
    offsets = list(itertools.product(range(-radius, radius + 1), repeat=3))

    def body(u):  # type: ignore[no-untyped-def]
        u[msc.t + 1, msc.x, msc.y, msc.z] = sum(
            (1.0 / len(offsets)) * u[msc.t, msc.x + a, msc.y + b, msc.z + c] for a, b, c in offsets)

    return msc.stencil(name=f"box3d{radius}r")(body)


def test_729_point_box_traces_hashes_and_generates_code():
    st = _box3d(4)
    assert len(st.ir.statements[0].reads) == 729
    assert ir.depth(st.ir.statements[0].expr) < 20
    assert hash(st.ir) == hash(_box3d(4).ir) and st.ir == _box3d(4).ir
    u0 = np.random.default_rng(0).random((11, 12, 13))
    out = st.reference(steps=1, u=u0)["u"]
    np.testing.assert_allclose(out[4:-4, 4:-4, 4:-4], np.mean(
        [u0[4 + a:7 + a, 4 + b:8 + b, 4 + c:9 + c] for a, b, c in itertools.product(range(-4, 5), repeat=3)],
        axis=0), rtol=1e-12)
    source = get_target("openmp").source(st.poly())
    # its 81 rows (x, y offsets) weighed alike are one sum (msc/codegen/row_sums.py), which the point
    # reads at its 9 shifts; the sum is made from 9 column sums (9 rows along x each) kept in a ring
    # along y: one new column sum per row of points, 8 made before the first (no row pointers left)
    assert source.count("msc_rowsum0[") == 1 + 1 + 9  # declared, stored, read at each shift
    assert source.count("msc_ring0[") == 1 + 8 + 1 + 9  # declared, the first 8 filled, one stored, 9 read
    assert source.count("f_u_t0[") == 9 * 8 + 9 and "msc_put_line(&" not in source
    assert not re.findall(r"msc_row\d+", source)


def test_large_stencils_read_through_row_pointers_under_every_schedule(assert_matches):
    """Row pointers (and no line stores unless asked for) for large stencils:
    results equal the reference under tiles, time tiles, caches, streaming."""
    offsets = list(itertools.product(range(-4, 5), repeat=2))
    weights = np.random.default_rng(5).random(len(offsets)) / len(offsets)

    def body(u, c):  # type: ignore[no-untyped-def]
        u[msc.t + 1, msc.x, msc.y] = c[msc.x, msc.y] + sum(
            float(w) * u[msc.t, msc.x + a, msc.y + b] for w, (a, b) in zip(weights, offsets))

    st = msc.stencil(name="big2d")(body)
    u0, c0 = np.random.default_rng(6).random((2, 30, 61))
    want = st.reference(steps=3, u=u0, c=c0)
    for schedule in (None, msc.Schedule().tile(x=8, y=16), msc.Schedule().time_tile(2, x=8),
                     msc.Schedule().stream_stores(), msc.Schedule().tile(x=8, y=16).cache_read("u"),
                     msc.Schedule().reorder("y", "x")):
        kernel = st.compile(schedule=schedule)
        rows = "msc_row" in kernel.source
        assert rows == (schedule is None or "reorder" not in str(schedule)), schedule
        assert ("msc_put_line(&" in kernel.source) == (schedule is not None and schedule.streaming), schedule
        assert_matches(kernel.run(steps=3, u=u0, c=c0), want, context=schedule)


@pytest.mark.slow
def test_729_point_box_compiles_and_matches_the_reference(assert_matches):
    st = _box3d(4)
    u0 = np.random.default_rng(1).random((12, 13, 21))
    assert_matches(st.compile().run(steps=2, u=u0), st.reference(steps=2, u=u0))


def test_long_chains_are_balanced_short_ones_kept():
    leaves = [ir.FieldRead("u", 0, (k,)) for k in range(100)]
    chain: ir.Expr = leaves[0]
    for k, leaf in enumerate(leaves[1:]):
        chain = ir.BinOp("-" if k % 3 == 0 else "+", chain, leaf)
    flat = ir.balanced(chain)
    assert ir.depth(chain) == 100 and ir.depth(flat) <= 8
    assert ir.balanced(flat) == flat
    short = ir.BinOp("+", ir.BinOp("-", leaves[0], leaves[1]), leaves[2])
    assert ir.balanced(short) is short
    values = np.random.default_rng(2).random(100)

    def value(e: ir.Expr) -> float:
        if isinstance(e, ir.FieldRead):
            return float(values[e.offsets[0]])
        assert isinstance(e, ir.BinOp)
        return value(e.lhs) + value(e.rhs) if e.op == "+" else value(e.lhs) - value(e.rhs)

    want = values[0] + sum(-v if k % 3 == 0 else v for k, v in enumerate(values[1:]))
    assert value(flat) == pytest.approx(want, rel=1e-12)


def test_products_and_nested_chains_are_balanced():
    leaves = [ir.FieldRead("u", 0, (k % 3,)) for k in range(60)]
    prod: ir.Expr = leaves[0]
    for leaf in leaves[1:]:
        prod = ir.BinOp("*", prod, leaf)
    total: ir.Expr = prod
    for leaf in leaves:
        total = ir.BinOp("+", total, ir.Call("sqrt", (ir.BinOp("*", leaf, prod),)))
    assert ir.depth(ir.balanced(total)) <= 20


def test_an_expression_nested_too_deep_is_a_named_error():
    def body(u):  # type: ignore[no-untyped-def]
        v = u[msc.t, msc.x]
        for _ in range(250):
            v = msc.sqrt(v)
        u[msc.t + 1, msc.x] = v

    with pytest.raises(StencilDefinitionError, match=r"test_compile_scaling.py:\d+: in stencil 'deep': .* nests 251 levels"):
        msc.stencil(name="deep")(body)


# ---------------------------------------------------------------- cached kernels

_COMPILE = """
import numpy as np, msc
from msc import t, x, y

@msc.stencil
def heat2d(u, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y])
{guard}
u0 = np.random.default_rng(0).random((20, 30))
k = heat2d.compile(schedule=msc.Schedule().tile(y=16))
np.testing.assert_allclose(k.run(steps=3, u=u0, alpha=0.1)["u"], heat2d.reference(steps=3, u=u0, alpha=0.1)["u"], rtol=1e-12)
print("ok", k.library_path.name)
"""

_GUARD = """
import msc.poly, msc.poly.schedule, msc.targets.cpu.openmp as omp
def _no_isl(*args, **kwargs):
    raise AssertionError("isl work while loading a cached kernel")
for name in ("domain", "reads", "writes", "dependences", "default_schedule", "context"):
    setattr(msc.poly.PolyIR, name, property(_no_isl))
for name in ("ast", "violated", "parallel_dims"):
    setattr(msc.poly.PolyIR, name, _no_isl)
omp.lower = omp.generate = msc.poly.schedule.lower = _no_isl
"""


def _run(code: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MSC_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_cached_kernel_loads_in_a_new_process_without_isl(tmp_path):
    first = _run(_COMPILE.format(guard=""), tmp_path)
    assert first.returncode == 0, first.stderr
    again = _run(_COMPILE.format(guard=_GUARD), tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    # the guard works: with the library gone, the kernel is lowered (and refused here)
    (tmp_path / first.stdout.split()[1]).unlink()
    missing = _run(_COMPILE.format(guard=_GUARD), tmp_path)
    assert missing.returncode != 0 and "isl work while loading a cached kernel" in missing.stderr


def test_kernel_key_follows_ir_and_schedule_text():
    from msc.targets.cpu.openmp import kernel_key

    heat = _box3d(1).ir
    base = kernel_key(heat, None, False)
    assert base == kernel_key(heat, msc.Schedule(), False)
    assert base != kernel_key(heat, msc.Schedule().tile(x=8), False)
    assert base != kernel_key(heat, None, True)
    assert base != kernel_key(heat.with_dtype("float32"), None, False)
    assert base != kernel_key(_box3d(2).ir, None, False)


def test_intrinsics_header_only_for_streaming_stores():
    heat = _box3d(1)
    assert "immintrin.h" not in get_target("openmp").source(heat.poly())
    assert "immintrin.h" in get_target("openmp").source(heat.poly(), msc.Schedule().stream_stores())


def test_compile_time_benchmark_runs(tmp_path):
    out = tmp_path / "ct.json"
    root = Path(__file__).resolve().parent.parent
    run = subprocess.run([sys.executable, str(root / "benchmarks" / "compile_time.py"), "--only", "heat2d",
                          "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    stencils = json.loads(out.read_text())["stencils"]
    assert list(stencils) == ["heat2d"] and stencils["heat2d"]["points"] == 5
    for r in stencils.values():
        phases = r["cold_phases"]
        assert set(phases) >= {"trace_s", "dependences_s", "schedule_s", "codegen_s", "compiler_s", "load_s", "total_s"}
        assert all(v > 0 for k, v in phases.items() if k.endswith("_s")) and r["cold_compile_s"] > 0
        assert {"import_s", "trace_s", "compile_s", "compile_cpu_s"} <= set(r["cached"])
