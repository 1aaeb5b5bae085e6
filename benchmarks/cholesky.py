"""Benchmark swCholesky (msc.solvers) against CHOLMOD (scikit-sparse), MKL
PARDISO (pypardiso) and SuperLU (scipy splu), side by side in one run:
analysis, numeric factorization and solve time, GFLOP/s, nnz(L), peak
memory and residual, on 2D/3D grid Laplacians and the largest shared
matrices. Peers run only when importable; the missing ones are listed.

    python3 benchmarks/cholesky.py --json out.json [--quick] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import sys

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--json", required=True, help="write the results here")
parser.add_argument("--quick", action="store_true", help="small cases only (2D 500^2, 3D 40^3, one shared matrix)")
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--repeat", type=int, default=3,
                    help="numeric factorizations timed per solver; the minimum is reported (shared machines are noisy)")
ARGS = parser.parse_args()
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)  # before numpy / the BLAS libraries load
os.environ.setdefault("KMP_BLOCKTIME", "0")  # MKL's idle threads must not spin while the others run

import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

from msc.solvers import analyze  # noqa: E402
from msc.solvers import io as mio  # noqa: E402

Result = dict[str, object]


def laplacian(m: int, dim: int) -> sp.csc_array:
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    I = sp.eye_array(m)
    if dim == 2:
        return sp.csc_array(sp.kron(T, I) + sp.kron(I, T))
    return sp.csc_array(sp.kron(sp.kron(T, I), I) + sp.kron(sp.kron(I, T), I) + sp.kron(sp.kron(I, I), T))


def cases(quick: bool) -> list[tuple[str, Callable[[], sp.csc_array]]]:
    grids = [("2D 500^2", 500, 2), ("3D 40^3", 40, 3)]
    if not quick:
        grids = [("2D 500^2", 500, 2), ("2D 1000^2", 1000, 2), ("3D 40^3", 40, 3), ("3D 64^3", 64, 3)]
    out: list[tuple[str, Callable[[], sp.csc_array]]] = [
        (name, (lambda m=m, d=d: laplacian(m, d))) for name, m, d in grids
    ]
    root = mio.matrices_dir()
    if (root / "MANIFEST.csv").is_file():
        rows = sorted(mio.manifest(root), key=lambda r: -int(r["nnz_full"]))[: 1 if quick else 3]
        out += [(r["matrix"], (lambda p=root / r["local_path"]: sp.csc_array(mio.read_matrix(p)))) for r in rows]
    else:
        print(f"shared matrices not found at {root}: skipped")
    return out


class PeakMemory:
    """Peak resident memory above the level at entry (Linux VmHWM, reset via clear_refs)."""

    def __enter__(self) -> "PeakMemory":
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            pass
        self.base = self._status("VmRSS")
        self.peak_mb = float("nan")
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak_mb = (self._status("VmHWM") - self.base) / 1024

    @staticmethod
    def _status(key: str) -> float:
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    return float(line.split()[1])  # kB
        except OSError:
            pass
        return float("nan")


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def best_of(fn: Callable[[], object]) -> tuple[object, float]:
    """The result of fn and its minimum time over --repeat runs."""
    out, best = timed(fn)
    for _ in range(ARGS.repeat - 1):
        out, t = timed(fn)
        best = min(best, t)
    return out, best


def residual(A: sp.csc_array, x: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(A @ x - b) / np.linalg.norm(b))


def run_msc(A: sp.csc_array, b: np.ndarray, ordering: object, label: str) -> Result:
    with PeakMemory() as mem:
        S, ta = timed(lambda: analyze(A, ordering=ordering, threads=ARGS.threads))
        F, tn = best_of(lambda: S.factorize(A))
        x, ts = timed(lambda: F.solve(b))
    q = F.stats["queue_stats"]
    return {"solver": "msc swCholesky", "ordering": label, "analyze_s": ta, "numeric_s": tn, "solve_s": ts,
            "gflops": F.flops / tn / 1e9, "nnz_L": F.nnz, "nnz_L_stored": F.nnz_stored, "flops": F.flops,
            "peak_mb": mem.peak_mb, "residual": residual(A, x, b),
            "queues": {k: q[k] for k in ("inst_updates", "tpq_updates", "dpq_updates", "inst_seconds",
                                         "tpq_seconds", "dpq_seconds")},
            "supernodes": F.stats["supernodes"]}


def run_cholmod(A: sp.csc_array, b: np.ndarray, method: str) -> tuple[Result, np.ndarray]:
    from sksparse.cholmod import analyze as cholmod_analyze

    with PeakMemory() as mem:
        S, ta = timed(lambda: cholmod_analyze(A, ordering_method=method, mode="supernodal"))
        F, tn = best_of(lambda: S.cholesky(A))
        x, ts = timed(lambda: F(b))
    L = F.L()  # simplicial copy: keeps the explicit zeros of relaxed amalgamation
    return ({"solver": "CHOLMOD", "ordering": method, "analyze_s": ta, "numeric_s": tn, "solve_s": ts,
             "nnz_L": int(np.count_nonzero(L.data)), "nnz_L_stored": int(L.nnz), "peak_mb": mem.peak_mb, "residual": residual(A, x, b)}, S.P())


def run_pardiso(A: sp.csc_array, b: np.ndarray) -> Result:
    import pypardiso

    upper = sp.csr_matrix(sp.triu(A, format="csr"))
    solver = pypardiso.PyPardisoSolver(mtype=2)
    solver.set_iparm(18, -1)  # report nnz(L) (iparm 18, 1-based)
    solver.set_iparm(19, -1)  # report MFLOP (iparm 19)
    with PeakMemory() as mem:
        solver.set_phase(11)
        _, ta = timed(lambda: solver._call_pardiso(upper, b))
        solver.set_phase(22)
        _, tn = best_of(lambda: solver._call_pardiso(upper, b))
        solver.set_phase(33)
        x, ts = timed(lambda: solver._call_pardiso(upper, b))
    mflops = solver.get_iparm(19)
    out = {"solver": "MKL PARDISO", "ordering": "METIS (default)", "analyze_s": ta, "numeric_s": tn,
           "solve_s": ts, "nnz_L": int(solver.get_iparm(18)), "peak_mb": mem.peak_mb,
           "residual": residual(A, np.asarray(x), b)}
    if mflops > 0:
        out["gflops"] = mflops / 1e3 / tn
    solver.free_memory(everything=True)
    return out


def run_splu(A: sp.csc_array, b: np.ndarray) -> Result:
    with PeakMemory() as mem:
        lu, tn = timed(lambda: spla.splu(A, permc_spec="MMD_AT_PLUS_A",
                                         options={"SymmetricMode": True}, diag_pivot_thresh=0.0))
        x, ts = timed(lambda: lu.solve(b))
    return {"solver": "SuperLU (splu)", "ordering": "MMD_AT_PLUS_A", "analyze_s": None,
            "numeric_s": tn, "solve_s": ts, "nnz_L": int(lu.L.nnz), "peak_mb": mem.peak_mb,
            "residual": residual(A, x, b)}


def importable(module: str) -> bool:
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def fmt(v: object, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and not np.isfinite(v)) else format(v, spec)


def main() -> int:
    peers = {"CHOLMOD (scikit-sparse)": importable("sksparse.cholmod"),
             "MKL PARDISO (pypardiso)": importable("pypardiso")}
    missing = [name for name, ok in peers.items() if not ok]
    print(f"threads={ARGS.threads}  numeric = min of {ARGS.repeat} runs  peers missing: {', '.join(missing) or 'none'}")
    results: list[dict[str, object]] = []
    header = (f"{'case':24s} {'solver':16s} {'ordering':16s} {'analyze s':>9s} {'numeric s':>9s} "
              f"{'solve s':>8s} {'GFLOP/s':>8s} {'nnz(L)':>12s} {'stored':>12s} {'peak MB':>8s} {'resid':>8s}")
    print(header)
    print("-" * len(header))
    for name, build in cases(ARGS.quick):
        A = build()
        n = A.shape[0]
        b = np.random.default_rng(0).standard_normal(n)
        rows: list[Result] = [run_msc(A, b, "auto", "auto")]
        if peers["CHOLMOD (scikit-sparse)"]:
            default, P = run_cholmod(A, b, "default")
            rows.append(default)
            same = run_msc(A, b, P, "CHOLMOD default's")
            rows.append(same)
            default["gflops"] = float(same["flops"]) / float(default["numeric_s"]) / 1e9
            amd, Pa = run_cholmod(A, b, "amd")
            amd_same = run_msc(A, b, Pa, "CHOLMOD amd's")
            amd["gflops"] = float(amd_same["flops"]) / float(amd["numeric_s"]) / 1e9
            rows += [amd, amd_same]
        if peers["MKL PARDISO (pypardiso)"]:
            rows.append(run_pardiso(A, b))
        if n <= 300_000:
            rows.append(run_splu(A, b))
        for r in rows:
            print(f"{name:24s} {r['solver'][:16]:16s} {str(r['ordering'])[:16]:16s} {fmt(r['analyze_s'], '9.3f')} "
                  f"{fmt(r['numeric_s'], '9.3f')} {fmt(r['solve_s'], '8.3f')} {fmt(r.get('gflops'), '8.2f')} "
                  f"{fmt(r['nnz_L'], '12,d')} {fmt(r.get('nnz_L_stored'), '12,d')} {fmt(r['peak_mb'], '8.0f')} {fmt(r['residual'], '8.1e')}")
        results.append({"case": name, "n": n, "nnz": int(A.nnz), "results": rows})
        if peers["CHOLMOD (scikit-sparse)"]:
            ratio_amd = float(amd_same["numeric_s"]) / float(amd["numeric_s"])
            ratio_def = float(same["numeric_s"]) / float(default["numeric_s"])
            fill = int(rows[0]["nnz_L"]) / int(default["nnz_L"])
            fill_stored = int(rows[0]["nnz_L_stored"]) / int(default["nnz_L_stored"])
            print(f"{'':24s} -> msc/CHOLMOD numeric, same ordering: {ratio_def:.2f}x (default), "
                  f"{ratio_amd:.2f}x (amd); nnz(L) msc auto / CHOLMOD default: {fill:.2f}x "
                  f"(stored, with amalgamation zeros: {fill_stored:.2f}x)")
            results[-1]["msc_over_cholmod"] = {"numeric_default_ordering": ratio_def,
                                               "numeric_amd_ordering": ratio_amd, "nnz_L_auto_vs_default": fill,
                                               "nnz_L_stored_auto_vs_default": fill_stored}
        del A
    out = {"threads": ARGS.threads, "repeat": ARGS.repeat, "quick": ARGS.quick, "machine": platform.processor() or platform.machine(),
           "cpus": os.cpu_count(), "peers_missing": missing, "cases": results}
    Path(ARGS.json).write_text(json.dumps(out, indent=1, default=float))
    print(f"wrote {ARGS.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
