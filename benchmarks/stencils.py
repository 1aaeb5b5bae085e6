"""Side-by-side CPU stencil benchmark: msc against hand-written C, pystencils
and Devito, measured in one process on the same data, with STREAM copy
figures measured in the same rounds. Writes JSON.

    python3 benchmarks/stencils.py --json results.json [--threads 2] [--quick | --reduced]
        [--peers c,pystencils,devito] [--only heat2d,box3d27p] [--tune-budget 40]

msc runs four ways: the default schedule, the best single-sweep schedule and
the best temporally tiled schedule (both found by the auto-tuner within the
budget; its choices are in the JSON), and `msc_auto`, the schedule that
`schedule="auto"` chooses for the measured run itself (every kind of
schedule, trials on the run's steps as for a user's first run). The
temporally tiled one is tuned for an eighth of the measured run, so the
measured run is at least 8 tiles deep: steady state, not one or two tiles
over the whole run; `msc_auto` may choose tiles as deep as its trials (4
tiles of 32 steps in a 128-step run). No peer gets temporal blocking:
Devito has none on CPU and pystencils none in its kernel generator.

Every tool starts from the same 64-byte-aligned arrays (msc's own buffers
are aligned too; Devito allocates its own). Every peer's final field is
compared with msc's, so a fast wrong answer shows. Tools and the STREAM
copies are timed round robin (one run each per round, best of the rounds).
Per tool: kernel time (the time loop alone) and wall time per call, for a
one-shot run (msc: `run`, inputs copied in and out) and for a loop of 10
calls of 10 steps that looks at the field after each call (msc: `start`
once, then `advance`). Effective bandwidth counts 16 bytes per point and
step (one read, one write).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

# thread counts must be fixed before OpenMP runtimes (Devito, pystencils) load
_THREADS = "2"
for i, arg in enumerate(sys.argv):
    if arg == "--threads" and i + 1 < len(sys.argv):
        _THREADS = sys.argv[i + 1]
os.environ["OMP_NUM_THREADS"] = _THREADS
os.environ.setdefault("DEVITO_LANGUAGE", "openmp")
os.environ.setdefault("DEVITO_LOGGING", "ERROR")

import msc  # noqa: E402
from msc.runtime import build_shared_library, load_library  # noqa: E402
from msc.runtime.buffers import aligned_copy  # noqa: E402
from msc.tune.tuner import AutoKernel  # noqa: E402


@dataclass(frozen=True)
class Case:
    """A constant-coefficient stencil: weight by Chebyshev distance class."""

    name: str
    ndim: int
    box: bool
    weights: tuple[float, ...]  # centre, faces, edges, corners
    n: int
    steps: int

    def offsets(self) -> list[tuple[tuple[int, ...], float]]:
        out = []
        for off in itertools.product((-1, 0, 1), repeat=self.ndim):
            k = sum(1 for o in off if o)
            if k > 1 and not self.box:
                continue
            out.append((off, self.weights[k]))
        return out


# 128 steps: 8 tiles of the tuner's deepest fixed time tile (16)
CASES = [
    Case("heat2d", 2, False, (0.5, 0.125), 4096, 128),
    Case("box2d9p", 2, True, (0.25, 0.125, 0.0625), 4096, 128),
    Case("heat3d", 3, False, (0.25, 0.125), 256, 128),
    Case("box3d27p", 3, True, (0.125, 0.0625, 0.03125, 0.015625), 256, 128),
]


def msc_stencil(case: Case) -> msc.Stencil:
    """The case as a user would write it with msc (a Python loop over offsets)."""
    dims = (msc.x, msc.y, msc.z)[: case.ndim]

    def body(u):  # type: ignore[no-untyped-def]
        u[(msc.t + 1, *dims)] = sum(
            w * u[(msc.t, *(d + o for d, o in zip(dims, off)))] for off, w in case.offsets()
        )

    return msc.stencil(name=case.name)(body)


@dataclass
class Timing:
    """One timed call (or loop of calls): the final field, seconds in the time
    loops alone, and wall seconds of the calls as the user makes them."""

    final: np.ndarray
    kernel_s: float
    wall_s: float


@dataclass
class Tool:
    """`one_shot(u0, steps)`: one call from the initial field to the result;
    `loop(u0, calls, steps)`: set up once (not timed), then `calls` calls of
    `steps` steps, reading one value of the field after each."""

    one_shot: Callable[[np.ndarray, int], Timing]
    loop: Callable[[np.ndarray, int, int], Timing]


def _look(u: np.ndarray) -> float:
    """What a user's loop does between calls, at the least: read the field."""
    return float(u[tuple(n // 2 for n in u.shape)])


# ------------------------------------------------------------------ peers


STREAM_SOURCE = """
#include <omp.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
double msc_stream_copy(double *restrict a, const double *restrict b, long n, int threads) {
    double t0 = omp_get_wtime();
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < n; i++) a[i] = b[i];
    return omp_get_wtime() - t0;
}
double msc_stream_copy_nt(double *restrict a, const double *restrict b, long n, int threads) {
    double t0 = omp_get_wtime();
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < n; i += 8) {
#if defined(__AVX512F__)
        _mm512_stream_pd(a + i, _mm512_load_pd(b + i));
#elif defined(__SSE2__)
        for (int k = 0; k < 8; k += 2) _mm_stream_pd(a + i + k, _mm_load_pd(b + i + k));
#else
        for (int k = 0; k < 8; k++) a[i + k] = b[i + k];
#endif
    }
#if defined(__SSE2__)
    _mm_sfence();
#endif
    return omp_get_wtime() - t0;
}
"""


def stream_copies(threads: int, mbytes: int) -> dict[str, Callable[[], float]]:
    """STREAM-like copies a[i] = b[i] with OpenMP over `mbytes` MB arrays, each a
    function that runs once and returns GB/s (16 bytes moved per element): with
    ordinary stores (as STREAM is usually built: each written line is read
    first) and with non-temporal ones (as msc's stream_stores())."""
    import ctypes

    lib = load_library(build_shared_library(STREAM_SOURCE, "stream_copy"))
    n = mbytes * 1_000_000 // 64 * 8
    a, b = aligned_copy(np.zeros(n)), aligned_copy(np.ones(n))
    out = {}
    for label, fn in (("stream_copy", lib.msc_stream_copy), ("stream_copy_nt", lib.msc_stream_copy_nt)):
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_int]
        fn.restype = ctypes.c_double
        fn(a.ctypes.data, b.ctypes.data, n, threads)  # first touch
        out[label] = (lambda f: lambda: 16 * n / f(a.ctypes.data, b.ctypes.data, n, threads) / 1e9)(fn)
    return out


def _ping_pong_tool(steps_on: Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray, float]]) -> Tool:
    """A Tool over two aligned arrays swapped every step: `steps_on(a, b, steps)`
    runs the steps and returns (newest, other, kernel seconds)."""

    def one_shot(u0: np.ndarray, steps: int) -> Timing:
        start = time.perf_counter()
        a, _, kernel_s = steps_on(aligned_copy(u0), aligned_copy(u0), steps)
        return Timing(a, kernel_s, time.perf_counter() - start)

    def loop(u0: np.ndarray, calls: int, steps: int) -> Timing:
        a, b = aligned_copy(u0), aligned_copy(u0)
        kernel_s = 0.0
        start = time.perf_counter()
        for _ in range(calls):
            a, b, secs = steps_on(a, b, steps)
            kernel_s += secs
            _look(a)
        return Timing(a, kernel_s, time.perf_counter() - start)

    return Tool(one_shot, loop)


def handwritten_c(case: Case, threads: int) -> Tool:
    """Plain C + OpenMP with two buffers, the way one writes it by hand."""
    idx = {2: "(i{0})*n + (j{1})", 3: "((i{0})*n + (j{1}))*n + (k{2})"}[case.ndim]
    terms = " + ".join(
        f"{w!r} * a[{idx.format(*[f'{o:+d}' if o else '' for o in off])}]" for off, w in case.offsets()
    )
    loops = "for (long i = 1; i < n - 1; i++) for (long j = 1; j < n - 1; j++)"
    if case.ndim == 3:
        loops += " for (long k = 1; k < n - 1; k++)"
    point = idx.format("", "", "")
    src = f"""
    void msc_hand(double *restrict u0, double *restrict u1, long n, long steps, int threads) {{
        #pragma omp parallel num_threads(threads)
        for (long s = 0; s < steps; s++) {{
            const double *restrict a = (s % 2) ? u1 : u0;
            double *restrict b = (s % 2) ? u0 : u1;
            #pragma omp for schedule(static)
            {loops} b[{point}] = {terms};
        }}
    }}
    """
    import ctypes

    fn = load_library(build_shared_library(src, f"hand_{case.name}")).msc_hand
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_int]

    def call(a: np.ndarray, b: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray, float]:
        start = time.perf_counter()
        fn(a.ctypes.data, b.ctypes.data, a.shape[0], steps, threads)
        return (b, a, time.perf_counter() - start) if steps % 2 else (a, b, time.perf_counter() - start)

    return _ping_pong_tool(call)


def pystencils_kernel(case: Case, threads: int, simd: bool) -> Tool:
    import pystencils as ps

    src, dst = ps.fields(f"src, dst: double[{case.ndim}D]", layout="c")
    rhs = sum(w * src[off] for off, w in case.offsets())
    cfg = ps.CreateKernelConfig(target=ps.Target.CurrentCPU if simd else ps.Target.GenericCPU)
    cfg.cpu.openmp.enable = True
    cfg.cpu.openmp.num_threads = threads
    if simd:
        cfg.cpu.vectorize.enable = True
        cfg.cpu.vectorize.assume_inner_stride_one = True
    kernel = ps.create_kernel(ps.Assignment(dst.center, rhs), cfg).compile()

    def steps_on(a: np.ndarray, b: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray, float]:
        start = time.perf_counter()
        for _ in range(steps):
            kernel(src=a, dst=b)
            a, b = b, a
        return a, b, time.perf_counter() - start

    return _ping_pong_tool(steps_on)


def devito_kernel(case: Case, autotune: bool) -> Tool:
    """Devito's Operator; with autotune, block sizes are tuned once ("aggressive")
    on the first call and reused, as a Devito user would keep them."""
    from devito import Eq, Grid, Operator, TimeFunction

    grid = Grid(shape=(case.n - 2,) * case.ndim, dtype=np.float64)
    u = TimeFunction(name="u", grid=grid, space_order=2)
    t = grid.stepping_dim
    dims = grid.dimensions
    rhs = sum(w * u[(t, *(d + o for d, o in zip(dims, off)))] for off, w in case.offsets())
    op = Operator([Eq(u.forward, rhs)])
    op.cfunction  # noqa: B018 - compile now, not inside the timed run
    tuned: dict[str, Any] = {}

    interior = tuple(slice(1, -1) for _ in range(case.ndim))

    def apply(first: int, steps: int) -> float:
        start = time.perf_counter()
        op.apply(time_m=first, time_M=first + steps - 1, **tuned)
        return time.perf_counter() - start

    def fill(u0: np.ndarray, steps: int) -> None:
        u.data_with_halo[:] = 0.0
        u.data[0] = u0[interior]
        u.data[1] = u0[interior]
        if autotune and not tuned:
            op.apply(time_M=steps - 1, autotune="aggressive")
            tuned.update(op._state.get("autotuning", [{}])[-1].get("tuned", {}))
            tuned.setdefault("nthreads", int(_THREADS))
            u.data[0] = u0[interior]
            u.data[1] = u0[interior]

    def result(u0: np.ndarray, steps: int) -> np.ndarray:
        out = u0.copy()
        out[interior] = u.data[steps % 2]
        return out

    def one_shot(u0: np.ndarray, steps: int) -> Timing:
        start = time.perf_counter()
        fill(u0, steps)
        kernel_s = apply(0, steps)
        return Timing(result(u0, steps), kernel_s, time.perf_counter() - start)

    def loop(u0: np.ndarray, calls: int, steps: int) -> Timing:
        fill(u0, steps)
        kernel_s = 0.0
        start = time.perf_counter()
        for k in range(calls):
            kernel_s += apply(k * steps, steps)
            _look(u.data[(k + 1) * steps % 2])
        return Timing(result(u0, calls * steps), kernel_s, time.perf_counter() - start)

    return Tool(one_shot, loop)


# ------------------------------------------------------------------ driver

LOOP_CALLS, LOOP_STEPS = 10, 10


def msc_tool(kernel: Any) -> Tool:
    def one_shot(u0: np.ndarray, steps: int) -> Timing:
        start = time.perf_counter()
        out = kernel.run(steps=steps, u=u0)["u"]
        wall = time.perf_counter() - start
        return Timing(out, kernel.last_run.seconds, wall)

    def loop(u0: np.ndarray, calls: int, steps: int) -> Timing:
        sim = kernel.start(u=u0)
        kernel_s = 0.0
        start = time.perf_counter()
        for _ in range(calls):
            sim.advance(steps)
            kernel_s += kernel.last_run.seconds
            _look(sim.fields["u"])
        wall = time.perf_counter() - start
        return Timing(sim.fields["u"].copy(), kernel_s, wall)

    return Tool(one_shot, loop)


def run_case(case: Case, threads: int, repeat: int, peers: list[str], tune_budget: float,
             stream: dict[str, Callable[[], float]]) -> dict[str, Any]:
    stencil = msc_stencil(case)
    shape = (case.n,) * case.ndim
    points = (case.n - 2) ** case.ndim
    rng = np.random.default_rng(0)
    u0 = aligned_copy(np.zeros(shape))  # a zero ring: what Devito's halo holds
    u0[tuple(slice(1, -1) for _ in shape)] = rng.random((case.n - 2,) * case.ndim)
    result: dict[str, Any] = {"stencil": case.name, "shape": list(shape), "steps": case.steps, "tools": {},
                              "msc_schedules": {"msc": "Schedule() (default)"},
                              "loop": {"calls": LOOP_CALLS, "steps_per_call": LOOP_STEPS}}

    with tempfile.TemporaryDirectory() as cold_cache:
        saved = os.environ.get("MSC_CACHE_DIR")
        os.environ["MSC_CACHE_DIR"] = cold_cache
        start = time.perf_counter()
        stencil.compile(threads=threads)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        kernel = stencil.compile(threads=threads)
        warm = time.perf_counter() - start
        if saved is None:
            del os.environ["MSC_CACHE_DIR"]
        else:
            os.environ["MSC_CACHE_DIR"] = saved
    result["msc_compile_cold_s"] = cold
    result["msc_compile_warm_s"] = warm

    tools: dict[str, Tool] = {"msc": msc_tool(kernel)}
    # the sweep and the time tile tuned for an eighth of the run (a time tile found so is at most steps / 8 deep:
    # steady state); msc_auto is what schedule="auto" gives a user who runs the case (its own steps, any kind)
    for label, kinds, steps in (("msc_sweep_tuned", "sweep", max(case.steps // 8, 1)),
                                ("msc_time_tiled", "temporal", max(case.steps // 8, 1)),
                                ("msc_auto", "all", case.steps)):
        auto = AutoKernel(stencil.poly(), lambda s, n: stencil.compile(schedule=s, threads=n), threads,
                          budget_s=tune_budget, kinds=kinds)
        auto.run(steps=steps, u=u0)
        assert auto.report is not None
        chosen = auto.report.schedule
        result["msc_schedules"][label] = str(chosen)
        if label == "msc_time_tiled" and chosen.time_depth:
            result["time_tiles_per_run"] = case.steps / chosen.time_depth
        tools[label] = msc_tool(stencil.compile(schedule=chosen, threads=chosen.threads or threads))
    if "c" in peers:
        tools["c_handwritten"] = handwritten_c(case, threads)
    if "pystencils" in peers:
        try:
            tools["pystencils"] = pystencils_kernel(case, threads, simd=False)
        except ImportError:
            result["pystencils"] = "not installed"
        else:
            try:
                tools["pystencils_simd"] = pystencils_kernel(case, threads, simd=True)
            except Exception as e:  # e.g. pystencils finds no vector target on this CPU: say so in the JSON
                result["pystencils_simd"] = f"not run: {type(e).__name__}: {e}"
    if "devito" in peers:
        try:
            tools["devito"] = devito_kernel(case, autotune=False)
            tools["devito_autotuned"] = devito_kernel(case, autotune=True)
        except ImportError:
            result["devito"] = "not installed"

    # round robin: every tool and STREAM once per round, so a drifting machine load is shared alike
    for tool in tools.values():
        tool.one_shot(u0, 1)  # warm-up
    timings: dict[str, dict[str, list[Timing]]] = {name: {"one_shot": [], "loop": []} for name in tools}
    rates: dict[str, list[float]] = {label: [] for label in stream}
    for _ in range(repeat):
        for name, tool in tools.items():
            timings[name]["one_shot"].append(tool.one_shot(u0, case.steps))
            timings[name]["loop"].append(tool.loop(u0, LOOP_CALLS, LOOP_STEPS))
        for label, copy in stream.items():
            rates[label].append(copy())
    result["stream_copy_best_gbs"] = {label: max(r) for label, r in rates.items()}
    msc_final = timings["msc"]["one_shot"][-1].final
    for name, runs in timings.items():
        one, loop = runs["one_shot"], runs["loop"]
        ms = min(t.kernel_s for t in one) / case.steps * 1e3
        loop_steps = LOOP_CALLS * LOOP_STEPS
        entry = {
            "ms_per_step": ms,
            "gstencils_per_s": points / (ms * 1e-3) / 1e9,
            "effective_gbs": 16 * points / (ms * 1e-3) / 1e9,
            "one_shot_wall_ms_per_step": min(t.wall_s for t in one) / case.steps * 1e3,
            "loop_kernel_ms_per_step": min(t.kernel_s for t in loop) / loop_steps * 1e3,
            "loop_wall_ms_per_step": min(t.wall_s for t in loop) / loop_steps * 1e3,
        }
        if name != "msc":
            entry["max_abs_diff_vs_msc"] = float(np.max(np.abs(one[-1].final - msc_final)))
        result["tools"][name] = entry
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--threads", type=int, default=int(_THREADS))
    ap.add_argument("--repeat", type=int, default=5)
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test, not a measurement")
    size.add_argument("--reduced", action="store_true", help="2048^2 and 128^3 grids, for a loaded machine")
    ap.add_argument("--peers", default="c,pystencils,devito")
    ap.add_argument("--only", default="", help="comma-separated stencil names")
    ap.add_argument("--tune-budget", type=float, default=40.0, help="seconds of tuning per stencil and kind")
    args = ap.parse_args()
    # a private kernel and tuning cache: every run compiles and tunes afresh
    os.environ["MSC_CACHE_DIR"] = tempfile.mkdtemp(prefix="msc-bench-")
    peers = [p for p in args.peers.split(",") if p]
    cases = [c for c in CASES if not args.only or c.name in args.only.split(",")]
    if args.quick:
        cases = [Case(c.name, c.ndim, c.box, c.weights, 130 if c.ndim == 2 else 34, 16) for c in cases]
    elif args.reduced:
        cases = [Case(c.name, c.ndim, c.box, c.weights, 2048 if c.ndim == 2 else 128, c.steps) for c in cases]
    stream = stream_copies(args.threads, mbytes=8 if args.quick else 200)
    report: dict[str, Any] = {
        "msc_version": msc.__version__,
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
        "threads": args.threads,
        "quick": args.quick,
        "reduced": args.reduced,
        "repeat": args.repeat,
        "cases": [],
    }
    print(f"{'stencil':10} {'tool':18} {'ms/step':>9} {'GStencil/s':>11} {'GB/s':>7} {'vs msc':>7} "
          f"{'1-shot wall':>11} {'loop kern':>9} {'loop wall':>9}  check")
    for case in cases:
        res = run_case(case, args.threads, args.repeat, peers, 2.0 if args.quick else args.tune_budget, stream)
        report["cases"].append(res)
        base = res["tools"]["msc"]["ms_per_step"]
        for tool, e in res["tools"].items():
            check = f"{e['max_abs_diff_vs_msc']:.1e}" if "max_abs_diff_vs_msc" in e else ""
            print(f"{case.name:10} {tool:18} {e['ms_per_step']:9.2f} {e['gstencils_per_s']:11.3f} "
                  f"{e['effective_gbs']:7.1f} {e['ms_per_step'] / base:7.2f} {e['one_shot_wall_ms_per_step']:11.2f} "
                  f"{e['loop_kernel_ms_per_step']:9.2f} {e['loop_wall_ms_per_step']:9.2f}  {check}", flush=True)
        copy = res["stream_copy_best_gbs"]
        print(f"{case.name:10} STREAM copy (same rounds, best): {copy['stream_copy']:.1f} GB/s, "
              f"{copy['stream_copy_nt']:.1f} with non-temporal stores", flush=True)
        print(f"{case.name:10} msc compile: cold {res['msc_compile_cold_s']:.2f} s, cached "
              f"{res['msc_compile_warm_s'] * 1e3:.1f} ms; schedules: "
              + "; ".join(f"{k} = {v}" for k, v in res["msc_schedules"].items()), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
