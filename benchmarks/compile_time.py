"""Compile time per stencil, by phase, cold and cached. Writes JSON.

    python3 benchmarks/compile_time.py --json results.json [--only heat2d,box3d4r] [--repeat 3]
    python3 benchmarks/compile_time.py --json results.json --table    # the table in docs/

Stencils: the four standard ones (heat2d, box2d9p, heat3d, box3d27p) and
the AN5D suite's box3d1r..4r and star3d1r..4r (constant coefficients).
Every measurement runs in a fresh Python process (as a user's script does),
with Python's bytecode cache on, as an installed package has it:

- cold: an empty kernel cache. One process times the phases one by one,
  doing what `compile()` does: tracing, the dependences (isl), lowering the
  schedule with its legality and parallelism checks (isl), printing the C
  code (isl AST + printer), the C compiler, loading the library. Another
  process times one plain `compile()` end to end (`compile_s`).
- cached: a new process with the kernel cache that the cold run filled:
  `import msc`, tracing, and `compile()` (a cache hit).

Each time is given as wall-clock seconds and as CPU seconds (the process
and the compiler it ran): on a busy machine the wall clock also counts
other programs, the CPU time does not. With --repeat N each figure is the
best of N runs (fresh caches each time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

STANDARD = ["heat2d", "box2d9p", "heat3d", "box3d27p"]
AN5D = [f"{kind}3d{r}r" for kind in ("box", "star") for r in range(1, 5)]

# The child's code: builds the stencil by name, then runs one mode.
CHILD = r'''
import itertools, json, resource, sys, time

def now():
    """(wall, CPU) seconds; CPU counts this process and its finished children (the compiler)."""
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), time.process_time() + c.ru_utime + c.ru_stime

marks = [("start", now())]
import msc
marks.append(("import", now()))

def make(name):
    ndim, box, radius = {"heat2d": (2, False, 1), "box2d9p": (2, True, 1), "heat3d": (3, False, 1),
                         "box3d27p": (3, True, 1)}.get(name) or (3, name.startswith("box"), int(name[-2]))
    dims = (msc.x, msc.y, msc.z)[:ndim]
    offsets = [o for o in itertools.product(range(-radius, radius + 1), repeat=ndim)
               if box or sum(1 for v in o if v) <= 1]
    weight = 1.0 / len(offsets)

    def body(u):
        u[(msc.t + 1, *dims)] = sum(weight * u[(msc.t, *(d + o for d, o in zip(dims, off)))] for off in offsets)

    return msc.stencil(name=name)(body), len(offsets)

name, mode = sys.argv[1], sys.argv[2]
marks.append(("mark", now()))
st, points = make(name)
marks.append(("trace", now()))
if mode == "phases":
    from msc.targets.cpu.openmp import generate
    from msc.runtime.build import build_shared_library
    from msc.runtime.kernel import CompiledKernel
    from msc.poly.schedule import lower
    marks.append(("mark", now()))
    poly = st.poly()
    poly.dependences
    marks.append(("dependences", now()))
    lowered = lower(None, poly)
    marks.append(("schedule", now()))
    source = generate(poly, lowered)
    marks.append(("codegen", now()))
    library = build_shared_library(source, f"msc_{name}")
    marks.append(("compiler", now()))
    CompiledKernel(poly.ir, source, library)
    marks.append(("load", now()))
else:  # "compile": one plain compile() (cold or cached, as the cache directory has it)
    st.compile()
    marks.append(("compile", now()))
out = {"points": points}
for (_, (w0, c0)), (phase, (w1, c1)) in zip(marks, marks[1:]):
    if phase != "mark":
        out[f"{phase}_s"], out[f"{phase}_cpu_s"] = w1 - w0, c1 - c0
print(json.dumps(out))
'''


def _child(name: str, mode: str, cache: str) -> dict[str, float]:
    env = dict(os.environ, MSC_CACHE_DIR=cache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, name, mode], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{name} ({mode}) failed:\n{proc.stderr}")
    return json.loads(proc.stdout.splitlines()[-1])


def _best(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(min(r[k] for r in runs), 4) if k.endswith("_s") else runs[0][k] for k in runs[0]}


def measure(name: str, repeat: int) -> dict[str, object]:
    phases, cold, cached = [], [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            phases.append(_child(name, "phases", a))
            cold.append(_child(name, "compile", b))
            cached.append(_child(name, "compile", b))
    p = _best(phases)
    for unit in ("", "_cpu"):
        parts = ("trace", "dependences", "schedule", "codegen", "compiler", "load")
        p[f"total{unit}_s"] = round(sum(p[f"{k}{unit}_s"] for k in parts), 4)
    c = _best(cold)
    return {
        "points": p.pop("points"),
        "cold_phases": {k: v for k, v in p.items() if not k.startswith("import")},
        "cold_compile_s": c["compile_s"],
        "cold_compile_cpu_s": c["compile_cpu_s"],
        "cached": {k: v for k, v in _best(cached).items() if k != "points"},
    }


def machine() -> dict[str, str]:
    cpu = platform.processor()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    cc = subprocess.run([os.environ.get("CC", "gcc"), "--version"], capture_output=True, text=True).stdout
    return {"cpu": cpu, "cores": str(os.cpu_count()), "compiler": cc.splitlines()[0] if cc else "?",
            "python": platform.python_version(), "load_average": " ".join(f"{v:.1f}" for v in os.getloadavg())}


def table(results: dict[str, object]) -> str:
    """The results as a markdown table (CPU seconds by phase, wall-clock totals)."""
    rows = ["| stencil | reads | trace | dependences | schedule | code | gcc | cold CPU | cold wall | cached CPU | cached wall |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results["stencils"].items():  # type: ignore[attr-defined]
        p, c = r["cold_phases"], r["cached"]
        ms = [f"{p[f'{k}_cpu_s'] * 1000:.0f} ms" for k in ("trace", "dependences", "schedule", "codegen")]
        rows.append(f"| {name} | {r['points']} | {' | '.join(ms)} | {p['compiler_cpu_s']:.2f} s | "
                    f"{r['cold_compile_cpu_s']:.2f} s | {r['cold_compile_s']:.2f} s | "
                    f"{c['compile_cpu_s'] * 1000:.0f} ms | {c['compile_s'] * 1000:.0f} ms |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True, help="where to write the results")
    ap.add_argument("--only", help="comma-separated stencil names")
    ap.add_argument("--repeat", type=int, default=1, help="best of N runs")
    ap.add_argument("--table", action="store_true", help="print the --json file as a markdown table and stop")
    a = ap.parse_args()
    if a.table:
        print(table(json.loads(Path(a.json).read_text())))
        return
    names = a.only.split(",") if a.only else STANDARD + AN5D
    unknown = [n for n in names if n not in STANDARD + AN5D]
    if unknown:
        raise SystemExit(f"unknown stencil(s) {', '.join(unknown)}; known: {', '.join(STANDARD + AN5D)}")
    results = {"machine": machine(), "repeat": a.repeat, "stencils": {}}
    for name in names:
        r = results["stencils"][name] = measure(name, a.repeat)
        print(f"{name:9s} {r['points']:4d} points: cold {r['cold_compile_s']:.3f} s "
              f"(CPU {r['cold_compile_cpu_s']:.3f} s), cached {r['cached']['compile_s'] * 1000:.1f} ms "
              f"(CPU {r['cached']['compile_cpu_s'] * 1000:.1f} ms)", flush=True)
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
