"""Benchmark the PDE layer against peers, side by side in one run (JSON out).

For the 2D 5-point and 3D 7-point Laplacians (2D 1000^2 and 3D 64^3
interiors; --quick: 200^2 and 24^3):

- assembly: `L.matrix` (msc, from the operator) against scipy's kron
  assembly of the same matrix (checked equal);
- one steady solve L(u) = f: `msc.solve` (assemble, swCholesky factor,
  solve) against scipy `spsolve`, CHOLMOD (scikit-sparse) and MKL PARDISO
  (pypardiso) on the same matrix;
- one implicit (backward Euler) step: msc.implicit (factored once; the
  per-step time is a run of --steps steps divided by the steps) against
  `spsolve` per step (what a hand-written scipy stepper does) and against
  CHOLMOD / PARDISO solves with their factor reused.

- multigrid (--multigrid sizes, 3D 7-point Poisson to a relative residual
  of 1e-8): msc.solve(method="multigrid") total time (setup included; the
  best of --repeat runs, at most 2 above 128^3, and the process's first solve
  at that size apart: its memory is new to the process), iterations, convergence factor per iteration, peak Python-heap memory
  (tracemalloc: numpy arrays and kernel buffers), and the total divided by
  one compiled operator application on the same grid (the best of ten in a
  row, and the best of ten each after CACHE_FLUSH_BYTES written, as a
  solve's applications run: their arrays are not in the caches); against pyamg
  (smoothed aggregation + CG, setup included), CHOLMOD and msc's direct
  solve up to --peer-max / --direct-max.

- auto (--auto-only): msc.solve's direct and multigrid methods on 3D and 2D
  Poisson problems around method="auto"'s thresholds.

Every solution is checked by its residual. Peers run only when importable;
the missing ones are listed. Timings are the minimum of --repeat runs.

    python3 benchmarks/pde.py --json out.json [--quick] [--threads 2]
"""

from __future__ import annotations

import argparse
import os

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--json", required=True, help="write the results here")
parser.add_argument("--quick", action="store_true", help="small cases (2D 200^2, 3D 24^3)")
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--repeat", type=int, default=3, help="timed runs per measurement; the minimum is reported")
parser.add_argument("--steps", type=int, default=10, help="implicit steps timed per run")
parser.add_argument("--spsolve-timeout", type=float, default=600,
                    help="seconds one scipy spsolve may take before it is recorded as not finished")
parser.add_argument("--multigrid", default="64,128,256", help="3D Poisson sizes n (n^3 unknowns) for the multigrid cases")
parser.add_argument("--multigrid-only", action="store_true", help="run the multigrid cases only")
parser.add_argument("--peer-max", type=int, default=128, help="largest n pyamg is run at")
parser.add_argument("--auto-only", action="store_true",
                    help="only time direct against multigrid around method='auto''s thresholds")
parser.add_argument("--direct-max", type=int, default=64, help="largest n msc's direct solve and CHOLMOD are run at")
ARGS = parser.parse_args()
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)  # before numpy / the BLAS libraries load
os.environ.setdefault("KMP_BLOCKTIME", "0")

import dataclasses  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from queue import Empty  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

import msc  # noqa: E402
from msc import x, y, z  # noqa: E402
from msc.runtime.build import atomic_write_text  # noqa: E402


@msc.operator
def lap2(u, h):
    return (u[x - 1, y] + u[x + 1, y] + u[x, y - 1] + u[x, y + 1] - 4 * u[x, y]) / h**2


@msc.operator
def lap3(u, h):
    return (u[x - 1, y, z] + u[x + 1, y, z] + u[x, y - 1, z] + u[x, y + 1, z] + u[x, y, z - 1] + u[x, y, z + 1]
            - 6 * u[x, y, z]) / h**2


def kron_assembly(n: int, dim: int, h: float) -> sp.csr_array:
    """The hand-written scipy assembly (as examples/cholesky_poisson.py does it)."""
    T = sp.diags_array([np.ones(n - 1), -2 * np.ones(n), np.ones(n - 1)], offsets=[-1, 0, 1], format="csr") / h**2
    I = sp.eye_array(n, format="csr")
    if dim == 2:
        return sp.csr_array(sp.kron(T, I) + sp.kron(I, T))
    return sp.csr_array(sp.kron(sp.kron(T, I), I) + sp.kron(sp.kron(I, T), I) + sp.kron(sp.kron(I, I), T))


CACHE_FLUSH_BYTES = 1 << 27  # 128 MiB: more than a last-level cache


def best(fn: Callable[[], Any], repeat: int = ARGS.repeat) -> tuple[Any, float]:
    out, times = None, []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, min(times)


def rel_residual(A: Any, v: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(A @ v - b) / np.linalg.norm(b))


def _spsolve_worker(M: sp.csc_matrix, b: np.ndarray, queue: Any) -> None:
    t0 = time.perf_counter()
    v = spla.spsolve(M, b)
    queue.put((v, time.perf_counter() - t0))


def timed_spsolve(M: Any, b: np.ndarray) -> dict[str, Any]:
    """scipy spsolve in a forked process, given up after --spsolve-timeout seconds (SuperLU's fill in 3D)."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_spsolve_worker, args=(sp.csc_matrix(M), b, queue))
    proc.start()
    try:
        v, seconds = queue.get(timeout=ARGS.spsolve_timeout)
    except Empty:  # still factoring
        proc.kill()
        proc.join()
        return {"finished": False, "gave_up_after_s": ARGS.spsolve_timeout}
    proc.join()
    return {"finished": True, "seconds": seconds, "residual": rel_residual(M, v, b)}


def importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def cholmod_factor(S: sp.csc_array) -> Any:
    from sksparse.cholmod import cholesky

    return cholesky(sp.csc_matrix(S))


def pardiso_factor(S: sp.csr_array) -> Any:
    """PARDISO analysis + factorization once (phase 12); solves are phase 33 only."""
    import pypardiso

    solver = pypardiso.PyPardisoSolver(mtype=2)  # real SPD
    upper = sp.csr_matrix(sp.triu(S, format="csr"))
    solver.set_phase(12)
    solver._call_pardiso(upper, np.zeros(S.shape[0]))

    def solve(b: np.ndarray) -> np.ndarray:
        solver.set_phase(33)
        return np.asarray(solver._call_pardiso(upper, b))

    return solve, solver


def run_case(name: str, L: msc.Operator, n: int, dim: int, peers: dict[str, bool]) -> dict[str, Any]:
    h = 1.0 / (n + 1)
    shape = (n + 2,) * dim
    out: dict[str, Any] = {"case": name, "unknowns": n**dim}
    print(f"{name}: {n**dim} unknowns")

    # assembly
    (A, _), t_msc = best(lambda: L.matrix(shape=shape, h=h))
    K, t_kron = best(lambda: kron_assembly(n, dim, h))
    assert abs(A - K).max() <= 1e-9 * abs(K).max(), "msc and kron matrices differ"
    out["assembly"] = {"msc_s": t_msc, "scipy_kron_s": t_kron, "ratio_msc_over_kron": t_msc / t_kron, "nnz": A.nnz}
    print(f"  assembly: msc {t_msc:.3f} s, scipy kron {t_kron:.3f} s (ratio {t_msc / t_kron:.2f})")

    # steady solve L(u) = f
    rng = np.random.default_rng(0)
    f = rng.random((n,) * dim)
    b = f.reshape(-1)
    steady: dict[str, Any] = {}
    (u, info), t = best(lambda: msc.solve(L, f, shape=shape, h=h, full_output=True), 1)
    steady["msc"] = {"total_s": t, **dataclasses.asdict(info), "residual": rel_residual(A, u[(slice(1, -1),) * dim].reshape(-1), b)}
    sps = timed_spsolve(A, b)
    steady["scipy_spsolve"] = {"total_s": sps.pop("seconds", None), **sps}
    S = sp.csc_array(-A)
    if peers["cholmod"]:
        F, tf = best(lambda: cholmod_factor(S), 1)
        v, ts = best(lambda: -F(b))
        steady["cholmod"] = {"total_s": tf + ts, "factor_s": tf, "solve_s": ts, "residual": rel_residual(A, v, b)}
    if peers["pardiso"]:
        (solve, solver), tf = best(lambda: pardiso_factor(sp.csr_array(S)), 1)
        v, ts = best(lambda: -solve(b))
        steady["pardiso"] = {"total_s": tf + ts, "factor_s": tf, "solve_s": ts, "residual": rel_residual(A, v, b)}
        solver.free_memory(everything=True)
    out["steady"] = steady
    print("  steady: " + ", ".join(f"{k} {r['total_s']:.2f} s (residual {r['residual']:.0e})" if r.get("finished", True)
                                   else f"{k} not finished in {r['gave_up_after_s']:.0f} s" for k, r in steady.items()))

    # implicit backward Euler steps
    dt = 10 * h * h
    u0 = np.zeros(shape)
    u0[(slice(1, -1),) * dim] = rng.random((n,) * dim)
    step: dict[str, Any] = {}
    t0 = time.perf_counter()
    stepper = msc.implicit(L, dt, "backward_euler", shape=shape, h=h)
    setup = time.perf_counter() - t0
    _res, t = best(lambda: stepper.run(steps=ARGS.steps, u=u0))
    M = sp.csr_array(sp.eye_array(A.shape[0]) - dt * A)
    v0 = u0[(slice(1, -1),) * dim].reshape(-1)
    one = stepper.run(steps=1, u=u0)["u"][(slice(1, -1),) * dim].reshape(-1)
    step["msc"] = {"setup_s": setup, "per_step_s": t / ARGS.steps, "solver": stepper.solver,
                   "residual": rel_residual(M, one, v0)}
    sps = timed_spsolve(M, v0)
    step["scipy_spsolve"] = {"per_step_s": sps.pop("seconds", None), **sps}
    if peers["cholmod"]:
        F, tf = best(lambda: cholmod_factor(sp.csc_array(M)), 1)
        v, ts = best(lambda: F(v0))
        step["cholmod"] = {"setup_s": tf, "per_step_s": ts, "residual": rel_residual(M, v, v0)}
    if peers["pardiso"]:
        (solve, solver), tf = best(lambda: pardiso_factor(M), 1)
        v, ts = best(lambda: solve(v0))
        step["pardiso"] = {"setup_s": tf, "per_step_s": ts, "residual": rel_residual(M, v, v0)}
        solver.free_memory(everything=True)
    for peer in ("scipy_spsolve", "cholmod", "pardiso"):
        if peer in step and step[peer].get("finished", True):
            step[f"ratio_msc_over_{peer}"] = step["msc"]["per_step_s"] / step[peer]["per_step_s"]
    out["implicit_step"] = step
    print("  implicit step: " + ", ".join(f"{k} {r['per_step_s'] * 1e3:.1f} ms" if r.get("finished", True)
                                           else f"{k} not finished in {r['gave_up_after_s']:.0f} s"
                                           for k, r in step.items() if isinstance(r, dict)))
    return out


def run_multigrid(n: int, peers: dict[str, bool]) -> dict[str, Any]:
    """3D Poisson n^3 to 1e-8: msc multigrid against pyamg, CHOLMOD and msc direct (see the module docstring)."""
    import tracemalloc

    from msc.pde.matfree import from_operator

    h = 1.0 / (n + 1)
    shape = (n + 2,) * 3
    f = np.random.default_rng(0).random((n,) * 3)
    b = f.reshape(-1)
    out: dict[str, Any] = {"case": f"3D Poisson {n}^3", "unknowns": n**3}
    print(f"multigrid {n}^3: {n**3} unknowns")
    t0 = time.perf_counter()
    msc.solve(lap3, f, shape=shape, h=h, method="multigrid")
    first = time.perf_counter() - t0  # the process's first solve at this size: its memory is new to it
    (u, info), t = best(lambda: msc.solve(lap3, f, shape=shape, h=h, method="multigrid", full_output=True),
                        min(ARGS.repeat, 2) if n > 128 else ARGS.repeat)
    tracemalloc.start()  # in a run of its own: tracing slows numpy's allocations
    msc.solve(lap3, f, shape=shape, h=h, method="multigrid")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    op = from_operator(lap3, shape, {"h": h}, 0.0, 1.0, "openmp", ARGS.threads)
    op.u[...] = f  # values of its own: a kernel over buffers never written reads the zero page, not memory
    _r, t_apply = best(op.applied_to_u, 10)
    flush = np.ones(CACHE_FLUSH_BYTES // 8)

    def cold_apply() -> float:  # as in a solve, whose arrays are far more than the last-level cache holds
        flush[:] += 1.0  # evicts u and A u from the caches
        t0 = time.perf_counter()
        op.applied_to_u()
        return time.perf_counter() - t0
    t_cold = min(cold_apply() for _ in range(10))
    A = kron_assembly(n, 3, h) if n <= ARGS.peer_max else None
    residual = rel_residual(A, u[1:-1, 1:-1, 1:-1].reshape(-1), b) if A is not None else info.residuals[-1]
    out["msc_multigrid"] = {"total_s": t, "first_solve_s": first, "setup_s": info.setup_s, "solve_s": info.solve_s, "iterations": info.iterations,
                            "convergence_factor": info.convergence_factor, "levels": info.levels,
                            "peak_memory_bytes": peak, "residual": residual, "operator_apply_s": t_apply,
                            "total_over_apply": t / t_apply, "operator_apply_cold_s": t_cold,
                            "total_over_cold_apply": t / t_cold}
    print(f"  msc multigrid: {t:.2f} s (first {first:.2f} s; {info.iterations} iterations, factor {info.convergence_factor:.3f}, "
          f"{peak / 2**20:.0f} MiB, {t / t_apply:.0f} operator applications' time, {t / t_cold:.0f} cold ones'; "
          f"residual {residual:.1e})")
    if A is not None and peers["pyamg"]:
        import pyamg

        def amg() -> tuple[np.ndarray, int]:
            history: list[float] = []
            ml = pyamg.smoothed_aggregation_solver(-A)
            return ml.solve(-b, tol=1e-8, accel="cg", residuals=history, maxiter=200), len(history) - 1
        (v, its), ta = best(amg, 1)
        out["pyamg"] = {"total_s": ta, "iterations": its, "residual": rel_residual(A, v, b)}
        out["ratio_msc_over_pyamg"] = t / ta
        print(f"  pyamg SA+CG: {ta:.2f} s ({its} iterations); msc / pyamg = {t / ta:.3f}")
    if A is not None and peers["cholmod"] and n <= ARGS.direct_max:
        S = sp.csc_array(-A)
        F, tf = best(lambda: cholmod_factor(S), 1)
        v, ts = best(lambda: -F(b), 1)
        out["cholmod"] = {"total_s": tf + ts, "residual": rel_residual(A, v, b)}
        out["ratio_msc_over_cholmod"] = t / (tf + ts)
        print(f"  CHOLMOD: {tf + ts:.2f} s; msc / CHOLMOD = {t / (tf + ts):.3f}")
    if n <= ARGS.direct_max:
        (v, dinfo), td = best(lambda: msc.solve(lap3, f, shape=shape, h=h, method="direct", full_output=True), 1)
        out["msc_direct"] = {"total_s": td, "solver": dinfo.solver,
                             "residual": rel_residual(A, v[1:-1, 1:-1, 1:-1].reshape(-1), b) if A is not None else None}
        out["ratio_multigrid_over_direct"] = t / td
        print(f"  msc direct: {td:.2f} s; multigrid / direct = {t / td:.3f}")
    return out


AUTO_SIZES = {3: (16, 20, 24, 28, 32), 2: (128, 192, 256, 384, 512)}


def run_auto() -> list[dict[str, Any]]:
    """msc.solve's direct and multigrid methods on the same Poisson problems around method='auto''s
    thresholds (msc.pde.steps.AUTO_DIRECT_LIMIT), warm kernels, best of --repeat."""
    out = []
    for dim, sizes in AUTO_SIZES.items():
        L = lap3 if dim == 3 else lap2
        for n in sizes:
            f = np.random.default_rng(0).random((n,) * dim)
            shape, h = (n + 2,) * dim, 1.0 / (n + 1)
            A, times, residuals = kron_assembly(n, dim, h), {}, {}
            for method in ("direct", "multigrid"):
                msc.solve(L, f, shape=shape, h=h, method=method)  # kernels compiled, memory paged in
                u, times[method] = best(lambda: msc.solve(L, f, shape=shape, h=h, method=method))
                residuals[method] = rel_residual(A, u[(slice(1, -1),) * dim].reshape(-1), f.reshape(-1))
            out.append({"dim": dim, "n": n, "unknowns": n**dim, "direct_s": times["direct"],
                        "multigrid_s": times["multigrid"], "residuals": residuals})
            print(f"auto {dim}D {n}^{dim}: direct {times['direct']:.3f} s, multigrid {times['multigrid']:.3f} s "
                  f"(residuals {residuals['direct']:.1e}, {residuals['multigrid']:.1e})")
    return out


def main() -> int:
    peers = {"cholmod": importable("sksparse"), "pardiso": importable("pypardiso"), "pyamg": importable("pyamg")}
    missing = [k for k, ok in peers.items() if not ok]
    print(f"threads={ARGS.threads}, min of {ARGS.repeat} runs, peers missing: {', '.join(missing) or 'none'}")
    cases = [("2D 200^2", lap2, 200, 2), ("3D 24^3", lap3, 24, 3)] if ARGS.quick else \
        [("2D 1000^2", lap2, 1000, 2), ("3D 64^3", lap3, 64, 3)]
    data = {"benchmark": "pde", "threads": ARGS.threads, "repeat": ARGS.repeat, "steps": ARGS.steps,
            "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
            "peers_missing": missing, "cases": [], "multigrid": []}
    if ARGS.auto_only:
        data["auto"] = run_auto()
        atomic_write_text(Path(ARGS.json), json.dumps(data, indent=2))
        print(f"wrote {ARGS.json}")
        return 0
    for name, L, n, dim in [] if ARGS.multigrid_only else cases:
        data["cases"].append(run_case(name, L, n, dim, peers))
        atomic_write_text(Path(ARGS.json), json.dumps(data, indent=2))  # kept after each case
    msc.solve(lap3, np.ones((16,) * 3), h=0.1, method="multigrid")  # the kernels compiled before timing
    for n in [24] if ARGS.quick else [int(v) for v in ARGS.multigrid.split(",") if v]:
        data["multigrid"].append(run_multigrid(n, peers))
        atomic_write_text(Path(ARGS.json), json.dumps(data, indent=2))
    print(f"wrote {ARGS.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
