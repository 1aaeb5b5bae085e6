"""How long the CUDA emulator takes: the shared-memory Jacobi kernel of
tests/cuda/stencil2d.cu (16 x 8 threads per block, one __syncthreads per
step), emulated on the CPU, against the same steps in numpy. Writes JSON.

    python3 benchmarks/cuda_emulator.py --json results.json [--repeat 3]

The emulator checks correctness; its times say nothing about a GPU. Each
emulated CUDA thread costs a few fiber switches per barrier: the JSON gives
microseconds per thread and step, and the ratio to numpy.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from msc.runtime import build, cuda_emu

ROOT = Path(__file__).resolve().parent.parent
SIZES = ((64, 64, 10), (256, 256, 10))  # (rows, columns, steps)


def numpy_steps(u: np.ndarray, steps: int) -> np.ndarray:
    for _ in range(steps):
        v = u.copy()
        v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        u = v
    return u


def best(run, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(library: ctypes.CDLL, ny: int, nx: int, steps: int, repeat: int) -> dict[str, float]:
    u = np.random.default_rng(0).random((ny + 2, nx + 2))
    out = u.copy()

    def emulated() -> None:
        out[:] = u
        if library.stencil2d(out.ctypes.data_as(ctypes.c_void_p), nx, ny, steps, 1) != 0:
            raise RuntimeError("the emulated kernel failed")

    emulated_s = best(emulated, repeat)
    numpy_s = best(lambda: numpy_steps(u, steps), repeat)
    assert np.allclose(out, numpy_steps(u, steps), rtol=1e-14, atol=0)
    return {"rows": ny, "columns": nx, "steps": steps, "emulated_s": emulated_s, "numpy_s": numpy_s,
            "us_per_thread_step": emulated_s / (nx * ny * steps) * 1e6, "emulated_over_numpy": emulated_s / numpy_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    start = time.perf_counter()
    library = build.load_library(cuda_emu.build_shared((ROOT / "tests" / "cuda" / "stencil2d.cu").read_text(),
                                                       "stencil2d"))
    build_s = time.perf_counter() - start
    cases = [measure(library, ny, nx, steps, args.repeat) for ny, nx, steps in SIZES]
    result = {"host": platform.processor() or platform.machine(), "compiler": cuda_emu.compiler(),
              "flags": list(cuda_emu.SHARED_FLAGS), "runtime_flags": list(cuda_emu.RUNTIME_FLAGS),
              "counting": os.environ.get(cuda_emu.COUNTERS_SWITCH, "1") != "0", "build_s": build_s, "cases": cases}
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
