"""Benchmark swCholesky (msc.solvers) end to end against CHOLMOD
(scikit-sparse), MKL PARDISO (pypardiso) and SuperLU (scipy splu), side by
side in one run: analyze, factorize, solve with 1 and with 16 right-hand
sides, and the total (analyze + factorize + solve(1)), as a user runs them.

Each configuration runs in its own process (the BLAS and OpenMP thread
counts are fixed when the libraries load): 1 thread, 2 threads, and 2
threads again while a background process this script starts keeps one core
busy. The native libraries are loaded (compiled on first use, then cached)
before anything is timed. Each solver first runs once on each matrix as a
cold start (a process's first call pays for fresh memory and library
set-up), reported on its own; then every phase is repeated (--repeat) and
reported as the median with the spread (max/min). Every solution is checked
by its normwise backward error. The machine's load average is recorded
before and after each matrix, and the cores other processes kept busy
meanwhile (from /proc/stat, less this process's own CPU time; the busy
background process counts as one), of which a virtual machine's host took
the steal time. Peers run only when they load; the missing ones are listed
with the reason.

    python3 benchmarks/cholesky.py [--quick] [--cases "2D,3D 40"] [--json benchmarks/results/cholesky.json]
    python3 benchmarks/cholesky.py --tables benchmarks/results/cholesky.json   # Markdown
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Result = dict[str, Any]
PHASES = ("analyze", "factorize", "solve1", "solve16", "total")
SOLVERS = ("msc swCholesky", "CHOLMOD", "MKL PARDISO", "SuperLU")
SUPERLU_MAX_FLOPS = 5e9  # SuperLU runs where the Cholesky flops are below this (it takes minutes above)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="cholesky.json", help="write the results here")
    parser.add_argument("--quick", action="store_true",
                        help="small cases (2D 300^2, 3D 20^3, the largest shared matrix), 3 repeats")
    parser.add_argument("--repeat", type=int, default=None, help="runs per phase (default 5, --quick 3)")
    parser.add_argument("--threads", default="1,2", help="thread counts of the runs without added load (comma separated)")
    parser.add_argument("--loaded-threads", default="2",
                        help="thread counts of the runs with a busy background process (comma separated, '' to skip)")
    parser.add_argument("--cases", default="",
                        help="run only the matrices whose name contains one of these (comma separated)")
    parser.add_argument("--tables", metavar="JSON", help="print the Markdown tables of a results file and exit")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: "threads,loaded" of one configuration
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if args.tables:
        print(tables(json.loads(Path(args.tables).read_text())))
        return 0
    if args.worker:
        threads, loaded = (int(v) for v in args.worker.split(","))
        return worker(args, threads, bool(loaded))
    repeat = args.repeat or (3 if args.quick else 5)
    configs = [(int(t), False) for t in args.threads.split(",") if t.strip()]
    configs += [(int(t), True) for t in args.loaded_threads.split(",") if t.strip()]
    if not configs:
        print("nothing to run: give --threads or --loaded-threads")
        return 2
    runs = []
    out: dict[str, Any] = {}
    start = time.perf_counter()
    for threads, loaded in configs:
        part = Path(args.json).with_suffix(f".part-{threads}-{int(loaded)}.json")
        cmd = [sys.executable, __file__, "--worker", f"{threads},{int(loaded)}", "--json", str(part),
               "--repeat", str(repeat), "--cases", args.cases] + (["--quick"] if args.quick else [])
        env = dict(os.environ)
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(threads)  # before numpy / the BLAS libraries load
        env.setdefault("KMP_BLOCKTIME", "0")  # MKL's idle threads must not spin while the others run
        busy = None
        if loaded:
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            print(f"== {threads} threads, with a busy background process (pid {busy.pid}) on one core ==", flush=True)
        else:
            print(f"== {threads} threads, no load added ==", flush=True)
        try:
            subprocess.run(cmd, env=env, check=True)
        finally:
            if busy is not None:
                busy.terminate()
                busy.wait()
        runs.append(json.loads(part.read_text()))
        part.unlink()
        out = {"quick": args.quick, "repeat": repeat, "machine": platform.processor() or platform.machine(),
               "cpus": os.cpu_count(), "command": " ".join(sys.argv[1:]),
               "wall_seconds": round(time.perf_counter() - start, 1), "runs": runs}
        Path(args.json).write_text(json.dumps(out, indent=1))  # after each configuration: a stopped run keeps them
        print(f"wrote {args.json}")
    print(tables(out))
    return 0


# --------------------------------------------------------------------- worker


def laplacian(m: int, dim: int):  # type: ignore[no-untyped-def]
    import scipy.sparse as sp

    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    I = sp.eye_array(m)
    if dim == 2:
        return sp.csc_array(sp.kron(T, I) + sp.kron(I, T))
    return sp.csc_array(sp.kron(sp.kron(T, I), I) + sp.kron(sp.kron(I, T), I) + sp.kron(sp.kron(I, I), T))


def cases(quick: bool, only: str) -> list[tuple[str, Callable[[], Any]]]:
    import scipy.sparse as sp

    from msc.solvers import io as mio

    grids = [("2D 300^2", 300, 2), ("3D 20^3", 20, 3)] if quick else \
        [("2D 1000^2", 1000, 2), ("3D 40^3", 40, 3), ("3D 64^3", 64, 3)]
    out: list[tuple[str, Callable[[], Any]]] = [(n, (lambda m=m, d=d: laplacian(m, d))) for n, m, d in grids]
    root = mio.matrices_dir()
    if (root / "MANIFEST.csv").is_file():
        rows = sorted(mio.manifest(root), key=lambda r: -int(r["nnz_full"]))[: 1 if quick else 3]
        out += [(r["matrix"], (lambda p=root / r["local_path"]: sp.csc_array(mio.read_matrix(p)))) for r in rows]
    else:
        print(f"shared matrices not found at {root} (set MSC_MATRICES): skipped")
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    return [(name, build) for name, build in out if not wanted or any(w in name for w in wanted)]


def backward_error(A: Any, X: Any, B: Any) -> float:
    """max over columns of ||Ax - b|| / (||A|| ||x|| + ||b||), infinity norms."""
    import numpy as np

    X2, B2 = np.asarray(X).reshape(B.shape[0], -1), B.reshape(B.shape[0], -1)
    norm_A = float(abs(A).sum(axis=1).max())
    R = np.abs(A @ X2 - B2).max(axis=0)
    return float((R / (norm_A * np.abs(X2).max(axis=0) + np.abs(B2).max(axis=0))).max())


Steps = tuple[Callable[[], Any], Callable[[Any], Any], Callable[[Any, Any], Any]]


class Timing:
    """Times of one solver's runs: analyze -> factorize -> solve(b) -> solve(B),
    each run from scratch; the cold start (first run) on its own, then
    medians and spread (max/min) per phase of the repeats."""

    def __init__(self, steps: Callable[[], Steps]) -> None:
        self.steps = steps
        self.first: dict[str, float] = {}
        self.times: dict[str, list[float]] = {p: [] for p in PHASES}
        self.error = 0.0
        self.factor: Any = None  # of the last run

    def run(self, A: Any, b: Any, B: Any) -> None:
        analyze, factorize, solve = self.steps()
        t0 = time.perf_counter()
        sym = analyze()
        t1 = time.perf_counter()
        fac = factorize(sym)
        t2 = time.perf_counter()
        x = solve(fac, b)
        t3 = time.perf_counter()
        X = solve(fac, B)
        t4 = time.perf_counter()
        cold = not self.first
        for phase, t in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t3 - t0)):
            if cold:
                self.first[phase] = t
            else:
                self.times[phase].append(t)
        self.error = max(self.error, backward_error(A, x, b), backward_error(A, X, B))
        self.factor = fac

    def result(self) -> Result:
        return {"median_s": {p: statistics.median(v) for p, v in self.times.items()},
                "spread": {p: max(v) / min(v) if min(v) > 0 else float("nan") for p, v in self.times.items()},
                "runs_s": self.times, "first_run_s": self.first, "backward_error": self.error}


def msc_steps(A: Any, threads: int) -> Callable[[], Steps]:
    from msc.solvers import analyze

    return lambda: (lambda: analyze(A, threads=threads), lambda S: S.factorize(A), lambda F, rhs: F.solve(rhs))


def msc_info(F: Any) -> Result:
    return {"nnz_L": F.nnz, "ordering": F.stats["ordering"], "flops": F.flops}


def cholmod_steps(A: Any) -> Callable[[], Steps]:
    import warnings

    import scipy.sparse as sp
    from sksparse.cholmod import analyze

    M = sp.csc_matrix(A)
    warnings.filterwarnings("ignore", message=".*converting matrix.*")
    return lambda: (lambda: analyze(M, mode="supernodal"), lambda S: S.cholesky(M), lambda F, rhs: F(rhs))


def cholmod_info(F: Any) -> Result:
    return {"nnz_L": int(F.L().nnz)}


def pardiso_steps(A: Any, b: Any) -> Callable[[], Steps]:
    import numpy as np
    import pypardiso
    import scipy.sparse as sp

    upper = sp.csr_matrix(sp.triu(A, format="csr"))
    previous: list[Any] = []

    def steps() -> Steps:
        if previous:  # PARDISO keeps its factor until told: release the last run's (untimed)
            previous.pop().free_memory(everything=True)
        solver = pypardiso.PyPardisoSolver(mtype=2)
        previous.append(solver)

        def phase(p: int, rhs: Any) -> Any:
            solver.set_phase(p)
            return solver._call_pardiso(upper, np.asfortranarray(rhs))  # PARDISO reads columns

        def solve(_: Any, rhs: Any) -> Any:
            return phase(33, rhs)

        return (lambda: phase(11, b), lambda _: phase(22, b), solve)

    return steps


def splu_steps(A: Any) -> Callable[[], Steps]:
    import scipy.sparse.linalg as spla

    return lambda: (lambda: None,
                    lambda _: spla.splu(A, permc_spec="MMD_AT_PLUS_A", options={"SymmetricMode": True},
                                        diag_pivot_thresh=0.0),
                    lambda lu, rhs: lu.solve(rhs))


def load_error(module: str) -> str | None:
    """Why `module` cannot be used here (None when it loads)."""
    try:
        __import__(module)
        return None
    except Exception as exc:  # a peer built against a missing library fails with OSError too
        return f"{type(exc).__name__}: {exc}"


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


class OtherLoad:
    """Cores kept busy by other processes between start() and cores():
    the machine's busy CPU time (/proc/stat) less this process's own; and
    of those, the cores a virtual machine's host took (steal time)."""

    def start(self) -> None:
        self.t0, self.busy0, self.own0, self.steal0 = time.perf_counter(), self.busy(), self.own(), self.steal()

    @staticmethod
    def ticks() -> list[int] | None:
        try:
            with open("/proc/stat", encoding="ascii") as f:
                return [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None

    @classmethod
    def busy(cls) -> float | None:
        ticks = cls.ticks()
        # all but idle and iowait
        return None if ticks is None else (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")

    @classmethod
    def steal(cls) -> float | None:
        ticks = cls.ticks()
        return None if ticks is None or len(ticks) < 8 else ticks[7] / os.sysconf("SC_CLK_TCK")

    def steal_cores(self) -> float | None:
        steal = self.steal()
        if steal is None or self.steal0 is None:
            return None
        return round((steal - self.steal0) / (time.perf_counter() - self.t0), 3)

    @staticmethod
    def own() -> float:
        t = os.times()
        return t.user + t.system

    def cores(self) -> float | None:
        busy = self.busy()
        if busy is None or self.busy0 is None:
            return None
        return round(max(0.0, (busy - self.busy0) - (self.own() - self.own0)) / (time.perf_counter() - self.t0), 2)


def worker(args: argparse.Namespace, threads: int, loaded: bool) -> int:
    import numpy as np
    from threadpoolctl import threadpool_info

    from msc.solvers import analyze, native

    errors = {"CHOLMOD": load_error("sksparse.cholmod"), "MKL PARDISO": load_error("pypardiso")}
    missing = {name: why for name, why in errors.items() if why is not None}
    print(f"threads={threads} loaded={loaded} repeat={args.repeat} load average {load_average()}, peers missing: "
          + ("; ".join(f"{k} ({v})" for k, v in missing.items()) or "none"), flush=True)
    native.symbolic_lib(), native.numeric_lib()  # compiled on first use, then cached: not timed
    results = []
    for name, build in cases(args.quick, args.cases):
        A = build()
        n = A.shape[0]
        rng = np.random.default_rng(0)
        b, B = rng.standard_normal(n), rng.standard_normal((n, 16))
        load_before = load_average()
        other = OtherLoad()
        other.start()
        timings = {"msc swCholesky": Timing(msc_steps(A, threads))}
        if "CHOLMOD" not in missing:
            timings["CHOLMOD"] = Timing(cholmod_steps(A))
        if "MKL PARDISO" not in missing:
            timings["MKL PARDISO"] = Timing(pardiso_steps(A, b))
        if analyze(A, threads=threads).flops <= SUPERLU_MAX_FLOPS:
            timings["SuperLU"] = Timing(splu_steps(A))
        for _ in range(1 + args.repeat):  # the cold start, then the repeats; solvers interleaved:
            # a busy moment hits them all alike
            for timing in timings.values():
                timing.run(A, b, B)
        rows = {name: t.result() for name, t in timings.items()}
        rows["msc swCholesky"].update(msc_info(timings["msc swCholesky"].factor))
        if "CHOLMOD" in rows:
            rows["CHOLMOD"].update(cholmod_info(timings["CHOLMOD"].factor))
        if "SuperLU" in rows:
            rows["SuperLU"]["note"] = "analysis is part of factorize (splu)"
        load = [load_before, load_average()]
        other_cores, steal_cores = other.cores(), other.steal_cores()
        for solver, r in rows.items():
            med = r["median_s"]
            print(f"{name:22s} {solver:15s} " + " ".join(f"{p} {med[p]:8.4f}" for p in PHASES)
                  + f"  spread(total) {r['spread']['total']:.2f}  backward error {r['backward_error']:.1e}"
                  + f"  load average {load[0]}-{load[1]}, other processes' cores {other_cores}"
                  + f" (host steal {steal_cores})", flush=True)
        for t in timings.values():
            t.factor = None
        results.append({"case": name, "n": int(n), "nnz": int(A.nnz), "load_average": load,
                        "other_cores_busy": other_cores, "host_steal_cores": steal_cores, "solvers": rows})
        del A
    blas = [{"internal_api": lib.get("internal_api"), "version": lib.get("version"),
             "num_threads": lib.get("num_threads"), "library": Path(str(lib.get("filepath"))).name}
            for lib in threadpool_info()]
    Path(args.json).write_text(json.dumps({"threads": threads, "loaded": loaded, "repeat": args.repeat,
                                           "peers_missing": list(missing), "peers_missing_why": missing,
                                           "blas": blas, "cases": results}, indent=1))
    return 0


# --------------------------------------------------------------------- tables


def tables(data: dict[str, Any]) -> str:
    """Markdown: per configuration, the medians (spread max/min) of every
    phase, then swCholesky's time over each peer's with both spreads of the
    total and the load average while the matrix ran."""
    lines: list[str] = []
    for run in data["runs"]:
        title = f"{run['threads']} thread{'s' if run['threads'] > 1 else ''}" + \
            (", one core kept busy by a background process" if run["loaded"] else ", no load added")
        lines += [f"#### {title} (median of {run['repeat']} s, spread max/min; cold start: the first run's total)",
                  "", ("| matrix | solver | analyze | factorize | solve(1) | solve(16) | total | cold start"
                       " | backward error |"), "|---|---|---|---|---|---|---|---|---|"]
        for case in run["cases"]:
            for solver in SOLVERS:
                r = case["solvers"].get(solver)
                if r is None:
                    continue
                cells = []
                for p in PHASES:
                    if solver == "SuperLU" and p == "analyze":
                        cells.append("(in factorize)")
                    else:
                        cells.append(f"{r['median_s'][p]:.4g} ({r['spread'][p]:.2f})")
                first = r.get("first_run_s", {}).get("total")
                cells.append(f"{first:.4g}" if first is not None else "-")
                lines.append(f"| {case['case']} | {solver} | " + " | ".join(cells) + f" | {r['backward_error']:.1e} |")
        lines += ["", "swCholesky time / peer time (medians; below 1 is faster), the spread (max/min) of the"
                  " total, swCholesky's vs the peer's, the 1-minute load average before-after the matrix and"
                  " the cores other processes kept busy meanwhile (of the machine's"
                  f" {data.get('cpus', '?')}; the host's steal time among them):", "",
                  "| matrix | peer | analyze | factorize | solve(1) | solve(16) | total | spread of total | load"
                  " | other cores |", "|---|---|---|---|---|---|---|---|---|---|"]
        for case in run["cases"]:
            ours = case["solvers"]["msc swCholesky"]
            load = case.get("load_average")
            load_cell = f"{load[0]:.1f}-{load[1]:.1f}" if load else "-"
            other = case.get("other_cores_busy")
            load_cell += f" | {other:.2f}" if other is not None else " | -"
            steal = case.get("host_steal_cores")
            load_cell += f" ({steal:.3f} host steal)" if steal is not None else ""
            for solver in SOLVERS[1:]:
                r = case["solvers"].get(solver)
                if r is None:
                    continue
                cells = [("-" if solver == "SuperLU" and p == "analyze"
                          else f"{ours['median_s'][p] / r['median_s'][p]:.2f}") for p in PHASES]
                cells.append(f"{ours['spread']['total']:.2f} vs {r['spread']['total']:.2f}")
                lines.append(f"| {case['case']} | {solver} | " + " | ".join(cells) + f" | {load_cell} |")
        if run["peers_missing"]:
            why = run.get("peers_missing_why", {})
            lines.append("\nNot measured: " + "; ".join(
                f"{name}{f' ({why[name]})' if name in why else ''}" for name in run["peers_missing"]) + ".")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
