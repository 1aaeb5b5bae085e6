"""GPU stencil benchmark: msc's CUDA kernels against pystencils' CUDA backend
(through CuPy) and a hand-written CUDA kernel, in one process on the same
device arrays, with the device's copy bandwidth measured in the same rounds.
Writes JSON, again after every case (a run stopped by a time limit keeps what
it measured: the cases run stencil by stencil, both dtypes each, the four
standard stencils first, then box2d25p, then the stars). Needs a CUDA device and CuPy (the cupy-cuda* wheel that matches
the driver's CUDA); pystencils is optional (its rows say why they are missing).

    python3 benchmarks/stencils_gpu.py --json results.json [--quick] [--only heat2d,star2d2r]
        [--dtypes float64,float32] [--repeat 5]

msc runs these ways: the default launch ("plain": streamed tiles, docs/cuda.md),
the default with its loads PREFETCH planes ahead instead of two ("plain,
prefetch(4)": more loads in flight per thread), the grid-mapped launch (a
point per thread, `parallel` on the outermost dimension: the default before
streaming), in 3D two points of y per thread, the tuner's choice
("tuned", schedule="auto", timed on the device by msc's tuner on a
device-resident simulation), the fastest time tile the tuner timed
("time-tiled") and tensor cores (fp64 for float64, tf32 for float32), in 2D
also fused with time tiles of FUSED_DEPTH steps. Every
tool's final field is compared with the hand-written kernel's, so a fast
wrong answer shows. Times are CUDA events around the time loop alone; tools
and the copy are timed round robin (best of the rounds);
GStencil/s counts interior points times steps; the fraction of copy
bandwidth counts one read and one write per point and step, against a
device-to-device copy of the same arrays.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Case:
    """A constant-coefficient stencil on an n^ndim grid (dirichlet ring included)."""

    name: str
    ndim: int
    box: bool
    radius: int
    n: int
    steps: int

    def offsets(self) -> list[tuple[tuple[int, ...], float]]:
        r = range(-self.radius, self.radius + 1)
        points = [o for o in itertools.product(r, repeat=self.ndim)
                  if self.box or sum(1 for v in o if v) <= 1]
        return [(o, 1.0 / len(points)) for o in points]  # an average: values stay bounded over many steps


FUSED_DEPTH = 4  # steps per launch of the fused tensor-core kernel

CASES = [
    Case("heat2d", 2, False, 1, 4096, 100),  # 128 MiB per float64 level: a few times the L2 of any GPU
    Case("box2d9p", 2, True, 1, 4096, 100),
    Case("heat3d", 3, False, 1, 256, 50),
    Case("box3d27p", 3, True, 1, 256, 50),
    Case("box2d25p", 2, True, 2, 4096, 100),  # a box of radius 2: where tensor cores should win
    *(Case(f"star2d{r}r", 2, False, r, 4096, 100) for r in range(2, 5)),
]  # in the order they run, both dtypes each: a run its time limit stops loses the stars first


def msc_stencil(case: Case) -> Any:
    import msc

    dims = (msc.x, msc.y, msc.z)[: case.ndim]

    def body(u):  # type: ignore[no-untyped-def]
        u[(msc.t + 1, *dims)] = sum(w * u[(msc.t, *(d + o for d, o in zip(dims, off)))] for off, w in case.offsets())

    return msc.stencil(name=case.name)(body)


def points_per_thread(stencil: Any, depth: int) -> Any:
    """A 3D stencil's streamed tile of `depth` steps on the default's plane of points (of
    INNER_THREADS, or TIME_TILE_THREADS for depth > 1), each thread taking ROWS points of y
    (half the default's threads): `unroll("y", 2)`."""
    import msc
    from msc.targets.gpu.cuda import ROWS
    from msc.targets.gpu.cuda_stream import INNER_THREADS, TIME_TILE_THREADS, block_tile

    outer, inner = (INNER_THREADS if depth == 1 else TIME_TILE_THREADS)[3]
    tile = block_tile(stencil.ir, depth, (outer // ROWS, inner), ROWS)
    assert tile is not None
    return msc.Schedule().time_tile(depth, **tile).unroll(stencil.ir.dims[1], ROWS)


@dataclass
class Tool:
    """`steps_on(u0, steps)` -> (final device array, seconds of the time loop alone)."""

    name: str
    steps_on: Callable[[Any, int], tuple[Any, float]]
    detail: str = ""


def _timed(cp: Any, fn: Callable[[], Any]) -> tuple[Any, float]:
    """`fn()` and its seconds between two CUDA events on the default stream (device time)."""
    start, end = cp.cuda.Event(), cp.cuda.Event()
    cp.cuda.Device().synchronize()
    start.record()
    out = fn()
    end.record()
    end.synchronize()
    return out, cp.cuda.get_elapsed_time(start, end) / 1e3


def handwritten(cp: Any, case: Case, dtype: str) -> Tool:
    """One thread per point, the sum of the weighted neighbours written out, ping-pong buffers."""
    ctype = "double" if dtype == "float64" else "float"
    n, r = case.n, case.radius
    index = ["i", "j", "k"][: case.ndim]

    def flat(offs: tuple[int, ...]) -> str:
        return " + ".join(f"({ix} + ({o})) * {n ** (case.ndim - 1 - d)}L" for d, (ix, o) in enumerate(zip(index, offs)))

    terms = " + ".join(f"({w!r}) * a[{flat(o)}]" for o, w in case.offsets())
    guards = " && ".join(f"{ix} >= {r} && {ix} < {n - r}" for ix in index)
    coords = {"i": "blockIdx.z * blockDim.z + threadIdx.z" if case.ndim == 3 else "blockIdx.y * blockDim.y + threadIdx.y",
              "j": "blockIdx.y * blockDim.y + threadIdx.y" if case.ndim == 3 else "blockIdx.x * blockDim.x + threadIdx.x",
              "k": "blockIdx.x * blockDim.x + threadIdx.x"}
    source = f"""extern "C" __global__ void step(const {ctype} *__restrict__ a, {ctype} *__restrict__ b) {{
    {' '.join(f'const long {ix} = {coords[ix]};' for ix in index)}
    if ({guards}) b[{flat((0,) * case.ndim)}] = {terms};
}}"""
    kernel = cp.RawKernel(source, "step")
    block = (32, 8) if case.ndim == 2 else (32, 4, 2)
    grid = tuple((n + b - 1) // b for b in block)

    def steps_on(u0: Any, steps: int) -> tuple[Any, float]:
        a, b = u0.copy(), u0.copy()

        def loop() -> Any:
            x, y = a, b
            for _ in range(steps):
                kernel(grid, block, (x, y))
                x, y = y, x
            return x

        return _timed(cp, loop)

    return Tool("hand-written CUDA", steps_on, f"block {block}")


def pystencils_tool(cp: Any, case: Case, dtype: str) -> Tool:
    import pystencils as ps

    src, dst = ps.fields(f"src, dst: {dtype}[{case.ndim}D]", layout="c")
    rhs = sum(w * src[off] for off, w in case.offsets())
    kernel = ps.create_kernel(ps.Assignment(dst.center, rhs), ps.CreateKernelConfig(target=ps.Target.CUDA)).compile()

    def steps_on(u0: Any, steps: int) -> tuple[Any, float]:
        a, b = u0.copy(), u0.copy()

        def loop() -> Any:
            x, y = a, b
            for _ in range(steps):
                kernel(src=x, dst=y)
                x, y = y, x
            return x

        return _timed(cp, loop)

    return Tool("pystencils (CUDA)", steps_on, f"pystencils {ps.__version__}")


def msc_tool(cp: Any, name: str, kernel: Any, schedule: str) -> Tool:
    """An msc kernel on device arrays: its ring buffer is set up from u0 (not timed), then msc_run_device."""

    def steps_on(u0: Any, steps: int) -> tuple[Any, float]:
        field = kernel.ir.fields[0]
        ring = cp.empty((field.slots, *u0.shape), dtype=u0.dtype)
        ring[...] = u0
        extents = list(u0.shape)
        _, seconds = _timed(cp, lambda: kernel.advance_device([ring.data.ptr], [], extents, 0, steps))
        return ring[steps % field.slots], seconds

    return Tool(name, steps_on, schedule)


def copy_bandwidth(cp: Any, nbytes: int) -> Callable[[], float]:
    """A round's copy bandwidth (GB/s, read plus write): the faster of CuPy's copy
    kernel and the runtime's device-to-device memcpy of the same arrays."""
    a = cp.ones(nbytes // 8, dtype=cp.float64)
    b = cp.empty_like(a)

    def once() -> float:
        _, kernel = _timed(cp, lambda: cp.copyto(b, a))
        _, memcpy = _timed(cp, lambda: b.data.copy_from_device(a.data, nbytes))
        return 2 * nbytes / min(kernel, memcpy) / 1e9

    return once


def run_case(cp: Any, case: Case, dtype: str, repeat: int, steps: int) -> dict[str, Any]:
    import msc
    from msc.targets.gpu.cuda import PREFETCH

    st = msc_stencil(case)
    rng = np.random.default_rng(0)
    u0 = cp.asarray(rng.random((case.n,) * case.ndim).astype(dtype))
    tools = [handwritten(cp, case, dtype)]
    missing: dict[str, str] = {}
    try:
        tools.append(pystencils_tool(cp, case, dtype))
    except Exception as e:  # not installed, or no CUDA support in this version
        missing["pystencils (CUDA)"] = f"{type(e).__name__}: {e}"
    plain = st.compile(target="cuda", dtype=dtype)
    tools.append(msc_tool(cp, "msc plain", plain, "default"))
    ahead = msc.Schedule().prefetch(PREFETCH)  # the streamed default, its loads further ahead
    tools.append(msc_tool(cp, f"msc plain, prefetch({PREFETCH})", st.compile(target="cuda", dtype=dtype,
                                                                             schedule=ahead), str(ahead)))
    mapped = msc.Schedule().parallel(st.ir.dims[0])
    tools.append(msc_tool(cp, "msc grid-mapped", st.compile(target="cuda", dtype=dtype, schedule=mapped), str(mapped)))
    if case.ndim == 3:
        rows = points_per_thread(st, 1)
        tools.append(msc_tool(cp, "msc 2 points per thread", st.compile(target="cuda", dtype=dtype, schedule=rows),
                              str(rows)))
    auto = st.compile(target="cuda", dtype=dtype, schedule="auto")
    auto.start(u=cp.asnumpy(u0))  # tunes on the device (trials of up to 64 steps)
    report = auto.report
    tools.append(msc_tool(cp, "msc tuned", st.compile(target="cuda", dtype=dtype, schedule=report.schedule),
                          str(report.schedule)))
    tiled = {t.schedule: t.ms_per_step for t in report.trials  # time tiles of several steps
             if msc.poly.schedule.parse_schedule(t.schedule).time_depth > 1}
    if tiled:
        best = min(tiled, key=tiled.__getitem__)
        tools.append(msc_tool(cp, "msc time-tiled", st.compile(target="cuda", dtype=dtype,
                                                                schedule=msc.poly.schedule.parse_schedule(best)), best))
    precision = "fp64" if dtype == "float64" else "tf32"
    try:
        kernel = st.compile(target="cuda", dtype=dtype, schedule=msc.Schedule().tensor_cores(precision))
        tools.append(msc_tool(cp, f"msc tensor cores ({precision})", kernel, precision))
    except msc.errors.MscError as e:
        missing["msc tensor cores"] = str(e)
    if case.ndim == 2:
        fused = msc.Schedule().tensor_cores(precision).time_tile(FUSED_DEPTH)
        tools.append(msc_tool(cp, f"msc tensor cores + time tiles ({precision})",
                              st.compile(target="cuda", dtype=dtype, schedule=fused), str(fused)))
    copy = copy_bandwidth(cp, int(u0.nbytes))
    best: dict[str, float] = {}
    finals: dict[str, Any] = {}
    copies = []
    for _ in range(repeat):
        copies.append(copy())
        for tool in tools:
            final, seconds = tool.steps_on(u0, steps)
            best[tool.name] = min(best.get(tool.name, float("inf")), seconds)
            finals[tool.name] = final
    bandwidth = max(copies)
    reference = finals["hand-written CUDA"]
    interior = (case.n - 2 * case.radius) ** case.ndim
    itemsize = np.dtype(dtype).itemsize
    rows = {}
    for tool in tools:
        seconds = best[tool.name]
        error = float(cp.max(cp.abs(finals[tool.name] - reference)) / cp.max(cp.abs(reference)))
        rows[tool.name] = {
            "schedule_or_version": tool.detail,
            "seconds": seconds,
            "gstencil_per_s": interior * steps / seconds / 1e9,
            "fraction_of_copy_bandwidth": 2 * itemsize * interior * steps / seconds / 1e9 / bandwidth,
            "max_rel_difference_to_handwritten": error,
        }
    tuning = {"seconds": report.seconds, "chosen": str(report.schedule),
              "trials_ms_per_step": {t.schedule: t.ms_per_step for t in report.trials}}
    return {"stencil": case.name, "dtype": dtype, "n": case.n, "ndim": case.ndim, "steps": steps,
            "copy_gb_per_s": bandwidth, "tools": rows, "missing": missing, "tuning": tuning}


def precompile(case: Case, dtype: str) -> None:
    """Build every kernel a case will use (the tuner's candidates, tensor cores) with
    nvcc in parallel: the run then loads them from the kernel cache."""
    import msc
    from msc.targets.gpu.cuda import cuda_candidates

    st = msc_stencil(case)
    precision = "fp64" if dtype == "float64" else "tf32"
    schedules: list[Any] = [*cuda_candidates(st.typed(dtype)), msc.Schedule().tensor_cores(precision)]
    if case.ndim == 2:
        schedules.append(msc.Schedule().tensor_cores(precision).time_tile(FUSED_DEPTH))

    def build(schedule: Any) -> None:
        try:
            st.compile(target="cuda", dtype=dtype, schedule=schedule)
        except Exception as e:  # refused for this stencil (a capacity, tensor cores on a shape): the run says so
            print(f"  {case.name} {dtype} {schedule}: {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        list(pool.map(build, schedules))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1024^2 and 128^3 grids, 10 steps: a smoke test")
    ap.add_argument("--only", default="", help="comma-separated stencil names: " + ", ".join(c.name for c in CASES))
    ap.add_argument("--dtypes", default="float64,float32")
    a = ap.parse_args(argv)
    cases = [c for c in CASES if not a.only or c.name in a.only.split(",")]
    unknown = set(filter(None, a.only.split(","))) - {c.name for c in CASES}
    if unknown:
        ap.error(f"unknown stencil(s) {', '.join(sorted(unknown))}")
    try:
        import cupy as cp

        devices = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # no CuPy, no driver, no device
        print(f"stencils_gpu.py: needs a CUDA device and CuPy (pip install cupy-cuda12x): {type(e).__name__}: {e}",
              file=sys.stderr)
        return 2
    if devices < 1:
        print("stencils_gpu.py: no CUDA device was found", file=sys.stderr)
        return 2
    props = cp.cuda.runtime.getDeviceProperties(0)
    if a.quick:
        cases = [Case(c.name, c.ndim, c.box, c.radius, 1024 if c.ndim == 2 else 128, 10) for c in cases]
    results: list[dict[str, Any]] = []
    out = {"device": props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
           "compute_capability": f"{props['major']}.{props['minor']}",
           "quick": a.quick, "results": results}
    for case in cases:  # stencil by stencil, so that a run stopped by its time limit has both dtypes of the first
        for dtype in a.dtypes.split(","):
            start = time.perf_counter()
            precompile(case, dtype)
            built = time.perf_counter() - start
            try:
                row = run_case(cp, case, dtype, a.repeat, case.steps)
            except Exception as e:  # one case's failure is reported, and the others still run
                row = {"stencil": case.name, "dtype": dtype, "error": f"{type(e).__name__}: {e}"}
                print(f"{case.name} {dtype}: {row['error']}", flush=True)
            row["build_seconds"] = built
            results.append(row)
            if "tools" in row:
                print(json.dumps({k: row[k] for k in ("stencil", "dtype", "copy_gb_per_s", "build_seconds")}),
                      {name: round(t["gstencil_per_s"], 2) for name, t in row["tools"].items()},
                      "tuning", round(row["tuning"]["seconds"], 1), "s", flush=True)
            if a.json:
                write_atomically(Path(a.json), json.dumps(out, indent=1))
    return 0


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    temporary.replace(path)


if __name__ == "__main__":
    sys.exit(main())
