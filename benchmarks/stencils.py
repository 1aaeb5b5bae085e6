"""Side-by-side CPU stencil benchmark: msc against hand-written C, pystencils
and Devito, measured in one process on the same data, with a STREAM copy
figure from the same run. Writes JSON.

    python3 benchmarks/stencils.py --json results.json [--threads 2] [--quick]
        [--peers c,pystencils,devito] [--only heat2d,box3d27p] [--tune-budget 40]

msc runs three ways: the default schedule, the best single-sweep schedule and
the best temporally tiled schedule (both found by the auto-tuner within the
budget; its choices are in the JSON).

Every peer's final field is compared with msc's, so a fast wrong answer shows.
Tools are timed round robin (one run each per round, best of the rounds).
Effective bandwidth counts 16 bytes per point and step (one read, one write).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
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
from msc.tuner import AutoKernel  # noqa: E402


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


CASES = [
    Case("heat2d", 2, False, (0.5, 0.125), 4096, 50),
    Case("box2d9p", 2, True, (0.25, 0.125, 0.0625), 4096, 50),
    Case("heat3d", 3, False, (0.25, 0.125), 256, 20),
    Case("box3d27p", 3, True, (0.125, 0.0625, 0.03125, 0.015625), 256, 10),
]


def msc_stencil(case: Case) -> msc.Stencil:
    """The case as a user would write it with msc (a Python loop over offsets)."""
    dims = (msc.x, msc.y, msc.z)[: case.ndim]

    def body(u):  # type: ignore[no-untyped-def]
        u[(msc.t + 1, *dims)] = sum(
            w * u[(msc.t, *(d + o for d, o in zip(dims, off)))] for off, w in case.offsets()
        )

    return msc.stencil(name=case.name)(body)


# A runner takes the initial field and a step count and returns the final
# field and the seconds spent in the time loop alone: setting up buffers
# (copies of the input) is left out for every tool alike.
Runner = Callable[[np.ndarray, int], tuple[np.ndarray, float]]


# ------------------------------------------------------------------ peers


def _aligned(n: int, fill: float) -> np.ndarray:
    """n doubles starting on a 64-byte boundary."""
    raw = np.full(n + 8, fill)
    skip = (-raw.ctypes.data % 64) // 8
    return raw[skip:skip + n]


def stream_copy_gbs(threads: int, mbytes: int = 200, repeat: int = 10) -> dict[str, float]:
    """STREAM-like copy a[i] = b[i] with OpenMP, 16 bytes per element moved:
    with ordinary stores (as STREAM is usually built: each written line is
    read first) and with non-temporal ones (stream_stores())."""
    src = """
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
    import ctypes

    lib = load_library(build_shared_library(src, "stream_copy"))
    n = mbytes * 1_000_000 // 64 * 8
    a, b = _aligned(n, 0.0), _aligned(n, 1.0)
    out: dict[str, float] = {}
    for label, fn in (("", lib.msc_stream_copy), ("nt_", lib.msc_stream_copy_nt)):
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_int]
        fn.restype = ctypes.c_double
        fn(a.ctypes.data, b.ctypes.data, n, threads)  # first touch
        rates = [16 * n / fn(a.ctypes.data, b.ctypes.data, n, threads) / 1e9 for _ in range(repeat)]
        out.update({f"{label}median_gbs": statistics.median(rates), f"{label}max_gbs": max(rates),
                    f"{label}min_gbs": min(rates)})
    return out


def handwritten_c(case: Case, threads: int) -> Runner:
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

    def run(u0: np.ndarray, steps: int) -> tuple[np.ndarray, float]:
        a, b = u0.copy(), u0.copy()
        start = time.perf_counter()
        fn(a.ctypes.data, b.ctypes.data, u0.shape[0], steps, threads)
        return (b if steps % 2 else a), time.perf_counter() - start

    return run


def pystencils_kernel(case: Case, threads: int, simd: bool) -> Runner:
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

    def run(u0: np.ndarray, steps: int) -> tuple[np.ndarray, float]:
        a, b = u0.copy(), u0.copy()
        start = time.perf_counter()
        for _ in range(steps):
            kernel(src=a, dst=b)
            a, b = b, a
        return a, time.perf_counter() - start

    return run


def devito_kernel(case: Case, autotune: bool) -> Runner:
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

    def run(u0: np.ndarray, steps: int) -> tuple[np.ndarray, float]:
        interior = tuple(slice(1, -1) for _ in range(case.ndim))
        u.data_with_halo[:] = 0.0
        u.data[0] = u0[interior]
        u.data[1] = u0[interior]
        if autotune and not tuned:
            op.apply(time_M=steps - 1, autotune="aggressive")
            tuned.update(op._state.get("autotuning", [{}])[-1].get("tuned", {}))
            tuned.setdefault("nthreads", int(_THREADS))
            u.data[0] = u0[interior]
            u.data[1] = u0[interior]
        start = time.perf_counter()
        op.apply(time_M=steps - 1, **tuned)
        seconds = time.perf_counter() - start
        out = u0.copy()
        out[interior] = u.data[steps % 2]
        return out, seconds

    return run


# ------------------------------------------------------------------ driver


def _msc_runner(kernel: Any) -> Runner:
    def run(u0: np.ndarray, steps: int) -> tuple[np.ndarray, float]:
        out = kernel.run(steps=steps, u=u0)["u"]
        return out, kernel.last_run.seconds

    return run


def run_case(case: Case, threads: int, repeat: int, peers: list[str], tune_budget: float) -> dict[str, Any]:
    stencil = msc_stencil(case)
    shape = (case.n,) * case.ndim
    points = (case.n - 2) ** case.ndim
    rng = np.random.default_rng(0)
    u0 = np.zeros(shape)  # a zero ring: what Devito's halo holds
    u0[tuple(slice(1, -1) for _ in shape)] = rng.random((case.n - 2,) * case.ndim)
    result: dict[str, Any] = {"stencil": case.name, "shape": list(shape), "steps": case.steps, "tools": {},
                              "msc_schedules": {"msc": "Schedule() (default)"}}

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

    runners: dict[str, Runner] = {"msc": _msc_runner(kernel)}
    for label, kinds in (("msc_sweep_tuned", "sweep"), ("msc_time_tiled", "temporal")):
        auto = AutoKernel(stencil.poly(), lambda s, n: stencil.compile(schedule=s, threads=n), threads,
                          budget_s=tune_budget, kinds=kinds)
        auto.run(steps=case.steps, u=u0)  # tunes for this size and step count
        assert auto.report is not None
        result["msc_schedules"][label] = str(auto.report.schedule)
        runners[label] = _msc_runner(auto)
    if "c" in peers:
        runners["c_handwritten"] = handwritten_c(case, threads)
    if "pystencils" in peers:
        try:
            runners["pystencils"] = pystencils_kernel(case, threads, simd=False)
            runners["pystencils_simd"] = pystencils_kernel(case, threads, simd=True)
        except ImportError:
            result["pystencils"] = "not installed"
    if "devito" in peers:
        try:
            runners["devito"] = devito_kernel(case, autotune=False)
            runners["devito_autotuned"] = devito_kernel(case, autotune=True)
        except ImportError:
            result["devito"] = "not installed"

    # round robin: every tool once per round, so a drifting machine load is shared alike
    for run in runners.values():
        run(u0, 1)  # warm-up
    seconds: dict[str, list[float]] = {tool: [] for tool in runners}
    finals: dict[str, np.ndarray] = {}
    for _ in range(repeat):
        for tool, run in runners.items():
            finals[tool], secs = run(u0, case.steps)
            seconds[tool].append(secs)
    for tool, secs in seconds.items():
        ms = min(secs) / case.steps * 1e3
        entry = {
            "ms_per_step": ms,
            "gstencils_per_s": points / (ms * 1e-3) / 1e9,
            "effective_gbs": 16 * points / (ms * 1e-3) / 1e9,
        }
        if tool != "msc":
            entry["max_abs_diff_vs_msc"] = float(np.max(np.abs(finals[tool] - finals["msc"])))
        result["tools"][tool] = entry
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--threads", type=int, default=int(_THREADS))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke test, not a measurement")
    ap.add_argument("--peers", default="c,pystencils,devito")
    ap.add_argument("--only", default="", help="comma-separated stencil names")
    ap.add_argument("--tune-budget", type=float, default=40.0, help="seconds of tuning per stencil and kind")
    args = ap.parse_args()
    # a private kernel and tuning cache: every run compiles and tunes afresh
    os.environ["MSC_CACHE_DIR"] = tempfile.mkdtemp(prefix="msc-bench-")
    peers = [p for p in args.peers.split(",") if p]
    cases = [c for c in CASES if not args.only or c.name in args.only.split(",")]
    if args.quick:
        cases = [Case(c.name, c.ndim, c.box, c.weights, 130 if c.ndim == 2 else 34, 4) for c in cases]
    report: dict[str, Any] = {
        "msc_version": msc.__version__,
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
        "threads": args.threads,
        "quick": args.quick,
        "stream_copy": stream_copy_gbs(args.threads, mbytes=8 if args.quick else 200),
        "cases": [],
    }
    copy = report["stream_copy"]
    print(f"STREAM copy, {args.threads} threads: {copy['median_gbs']:.1f} GB/s median "
          f"({copy['nt_median_gbs']:.1f} with non-temporal stores)", flush=True)
    print(f"{'stencil':10} {'tool':18} {'ms/step':>9} {'GStencil/s':>11} {'GB/s':>7} {'vs msc':>7}  check")
    for case in cases:
        res = run_case(case, args.threads, args.repeat, peers, 2.0 if args.quick else args.tune_budget)
        report["cases"].append(res)
        base = res["tools"]["msc"]["ms_per_step"]
        for tool, e in res["tools"].items():
            check = f"{e['max_abs_diff_vs_msc']:.1e}" if "max_abs_diff_vs_msc" in e else ""
            print(f"{case.name:10} {tool:18} {e['ms_per_step']:9.2f} {e['gstencils_per_s']:11.3f} "
                  f"{e['effective_gbs']:7.1f} {e['ms_per_step'] / base:7.2f}  {check}", flush=True)
        print(f"{case.name:10} msc compile: cold {res['msc_compile_cold_s']:.2f} s, cached "
              f"{res['msc_compile_warm_s'] * 1e3:.1f} ms; schedules: "
              + "; ".join(f"{k} = {v}" for k, v in res["msc_schedules"].items()), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
