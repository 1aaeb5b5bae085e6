"""Runs under load: a 2D heat stencil with the default thread count against threads=1 and threads=all,
on an idle machine and with 1 and 2 other processes keeping cores busy (busy loops started here).
Writes JSON; the median of --repeat runs per measurement, the variants interleaved.

    python3 benchmarks/load.py --json load.json [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

import msc
from msc import t, x, y
from msc.runtime.build import atomic_write_text
from msc.runtime.threads import usable_cores

CASES = ((256, 200), (2048, 20))  # (n, steps)


@msc.stencil
def heat(u):
    u[t + 1, x, y] = u[t, x, y] + 0.1 * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1]
                                       - 4 * u[t, x, y])


def busy() -> None:
    while True:
        pass


def measure(repeat: int) -> list[dict[str, Any]]:
    cores = usable_cores()
    rows = []
    for n, steps in CASES:
        u0 = np.random.default_rng(0).random((n, n))
        row: dict[str, Any] = {"n": n, "steps": steps}
        variants = {"default": None, "threads_1": 1, f"threads_{cores}": cores}
        kernels = {label: heat.compile(threads=threads) for label, threads in variants.items()}
        times: dict[str, list[float]] = {label: [] for label in variants}
        for kernel in kernels.values():
            kernel.run(steps=2, u=u0)
        labels = list(kernels)
        for i in range(repeat):  # interleaved and rotated, so changes in load hit every variant alike
            for label in labels[i % 3:] + labels[:i % 3]:
                kernel = kernels[label]
                start = time.perf_counter()
                kernel.run(steps=steps, u=u0)
                times[label].append(time.perf_counter() - start)
        for label in variants:
            row[label] = float(np.median(times[label]))
        row["default_over_threads_1"] = row["default"] / row["threads_1"]
        rows.append(row)
        print(f"  {n}^2 x {steps}: default {row['default'] * 1e3:.1f} ms, threads=1 {row['threads_1'] * 1e3:.1f} ms, "
              f"threads={cores} {row[f'threads_{cores}'] * 1e3:.1f} ms")
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", required=True)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    os.environ.pop("OMP_NUM_THREADS", None)
    data: dict[str, Any] = {"benchmark": "load", "cores": usable_cores(), "platform": platform.platform(),
                            "repeat": a.repeat, "loads": []}
    for others in (0, 1, 2):
        workers = [multiprocessing.Process(target=busy, daemon=True) for _ in range(others)]
        for w in workers:
            w.start()
        time.sleep(0.5)
        print(f"{others} busy process(es):")
        try:
            data["loads"].append({"busy_processes": others, "cases": measure(a.repeat)})
        finally:
            for w in workers:
                w.terminate()
                w.join()
    atomic_write_text(Path(a.json), json.dumps(data, indent=2))
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
