"""How long a first schedule="auto" takes, and how good its choice is: for
each standard stencil at full size (benchmarks/stencils.py's CASES), a fresh
tuning (empty caches) three times, and an exhaustive search (every
candidate timed, as the tuner times them); then every chosen schedule and
the exhaustive best are timed again side by side (interleaved, median of
--repeat runs of the case's steps). Writes JSON.

    python3 benchmarks/tuner.py --json benchmarks/results/tuner.json [--only heat2d] [--reduced]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stencils import CASES, Case, msc_stencil  # noqa: E402

from msc.runtime.build import atomic_write_text  # noqa: E402
from msc.tune import tuner  # noqa: E402


def fresh_tuning(stencil: Any, inputs: dict[str, Any], steps: int, exhaustive: bool) -> tuner.TuningReport:
    """A tuning with empty kernel and tuning caches (every candidate when `exhaustive`)."""
    with tempfile.TemporaryDirectory(prefix="msc-tune-bench-") as cache:
        os.environ["MSC_CACHE_DIR"] = cache
        timed, budget = tuner.TIMED, tuner.DEFAULT_BUDGET_S
        if exhaustive:
            tuner.TIMED = 10**6
        try:
            kernel = stencil.compile(schedule="auto")
            kernel.budget_s = 600.0 if exhaustive else budget
            start = time.perf_counter()
            kernel.run(steps=steps, **inputs)
            report = kernel.report
            assert report is not None and not report.from_cache
            print(f"  {'exhaustive' if exhaustive else 'fresh'}: {report.schedule} in {report.seconds:.1f} s "
                  f"(first run {time.perf_counter() - start:.1f} s)", flush=True)
            return report
        finally:
            tuner.TIMED = timed


def side_by_side(stencil: Any, inputs: dict[str, Any], steps: int, schedules: dict[str, Any],
                 repeat: int) -> dict[str, float]:
    """Median seconds per step of each schedule, timed interleaved (a schedule
    chosen twice is timed once: its labels share the figure)."""
    distinct = list(dict.fromkeys(schedules.values()))
    kernels = [stencil.compile(schedule=s, threads=s.threads) for s in distinct]
    for kernel in kernels:
        kernel.run(steps=2, **inputs)
    times: list[list[float]] = [[] for _ in distinct]
    for _ in range(repeat):
        for k, kernel in enumerate(kernels):
            kernel.run(steps=steps, **inputs)
            times[k].append(kernel.last_run.seconds / steps)
    return {label: float(np.median(times[distinct.index(s)])) for label, s in schedules.items()}


def measure(case: Case, repeat: int) -> dict[str, Any]:
    stencil = msc_stencil(case)
    shape = (case.n,) * case.ndim
    inputs = {"u": np.random.default_rng(0).random(shape)}
    print(f"{case.name} {'x'.join(map(str, shape))}, {case.steps} steps", flush=True)
    fresh = [fresh_tuning(stencil, inputs, case.steps, False) for _ in range(3)]
    best = fresh_tuning(stencil, inputs, case.steps, True)
    with tempfile.TemporaryDirectory(prefix="msc-tune-bench-") as cache:
        os.environ["MSC_CACHE_DIR"] = cache
        schedules = {f"fresh{k}": r.schedule for k, r in enumerate(fresh)}
        schedules["exhaustive"] = best.schedule
        seconds = side_by_side(stencil, inputs, case.steps, schedules, repeat)
    fastest_fresh = min(seconds[f"fresh{k}"] for k in range(3))
    row = {
        "stencil": case.name, "shape": list(shape), "steps": case.steps,
        "fresh": [{"schedule": str(r.schedule), "tuning_s": r.seconds, "timed": len({t.schedule for t in r.trials}),
                   "s_per_step": seconds[f"fresh{k}"]} for k, r in enumerate(fresh)],
        "exhaustive": {"schedule": str(best.schedule), "tuning_s": best.seconds,
                       "timed": len({t.schedule for t in best.trials}), "s_per_step": seconds["exhaustive"]},
        "worst_fresh_over_exhaustive": max(seconds[f"fresh{k}"] for k in range(3)) / seconds["exhaustive"],
        "fresh_spread": max(seconds[f"fresh{k}"] for k in range(3)) / fastest_fresh,
        "max_tuning_s": max(r.seconds for r in fresh),
    }
    print(f"  tuning {row['max_tuning_s']:.1f} s at most; worst fresh choice {row['worst_fresh_over_exhaustive']:.2f}x "
          f"the exhaustive best; fresh spread {row['fresh_spread']:.2f}x", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--only", default="")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reduced", action="store_true", help="2048^2 and 128^3 grids, for a loaded machine")
    args = parser.parse_args()
    cases = [c for c in CASES if not args.only or c.name in args.only.split(",")]
    if args.reduced:
        cases = [Case(c.name, c.ndim, c.box, c.weights, 2048 if c.ndim == 2 else 128, c.steps) for c in cases]
    rows = [measure(case, args.repeat) for case in cases]
    result = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                          "load_average": " ".join(f"{v:.1f}" for v in os.getloadavg())},
              "budget_s": tuner.DEFAULT_BUDGET_S, "timed": tuner.TIMED, "sample_s": tuner.SAMPLE_S, "rows": rows}
    atomic_write_text(Path(args.json), json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
