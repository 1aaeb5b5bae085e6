"""Registers, spills and occupancy of msc's CUDA kernels for sm_90, from ptxas
(`nvcc -Xptxas -v`), for the standard stencils of benchmarks/stencils_gpu.py
with the default schedule (or the one given). Needs nvcc only (no GPU).
Writes JSON (and prints a table).

    python3 benchmarks/cuda_resources.py [--json out.json] [--schedule "Schedule().tile(x=8, y=32)"]
        [--dtypes float64,float32] [--only heat3d,box3d27p] [--sass]

A kernel templated on its index type (every one but the runtime's copies) is reported per
instantiation (`index`: int or long; MSC_LAUNCH_INDEXED launches the int one
where a level has at most 2^30 points). With --sass (cuobjdump and nvdisasm,
on PATH or from the wheels `pip install nvidia-cuda-cuobjdump
nvidia-cuda-nvdisasm` of the `bench` extra), each kernel templated on its
index type also gets `instructions_per_plane`: the
SASS instructions of its loop over planes per plane a thread passes (the
innermost loop holding a barrier, over its barriers per plane: one per step
of the tile), the instruction-issue cost of its steady state, and
`instructions_per_update`: that times the thread-planes a streamed tile's
blocks pass per update in a large grid (benchmarks/gpu_model.py's issue
bound). Any other such kernel gets `instructions_per_point` (its longest
loop without a barrier that stores to global memory, per store; where ptxas
unrolled the stores out of every loop, the run from the first store to the
last, per store) and `instructions_per_load`
(its longest loop that loads from global memory, per load: a tensor-core
kernel's staging of its sources' tiles and halos); a tensor-core kernel also
gets `instructions_per_mma` (the fewest instructions from a unit's first MMA
to its last, per MMA on that path) and `flops_per_mma` (of one SASS MMA), for
benchmarks/gpu_model.py's issue bound.

Occupancy is the share of an H100/H200 multiprocessor's 64 warps that the
kernel's blocks can hold at once, limited by registers (65536 per
multiprocessor, allocated per warp in units of 256), threads (2048), blocks
(32) and static shared memory (228 KiB, 1 KiB reserved per block): the CUDA
occupancy calculator's rules for compute capability 9.0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stencils_gpu import CASES, msc_stencil  # noqa: E402

from msc.codegen import get_target  # noqa: E402
from msc.poly.schedule import Schedule, lower, parse_schedule  # noqa: E402
from msc.runtime import cuda_emu  # noqa: E402
from msc.targets.gpu import cuda_time_tile as time_tile  # noqa: E402
from msc.targets.gpu.cuda_stream import StreamedTile  # noqa: E402

REGISTERS_PER_SM = 65536
WARPS_PER_SM = 64
BLOCKS_PER_SM = 32
SHARED_PER_SM = 228 * 1024
SHARED_RESERVED_PER_BLOCK = 1024


def occupancy(registers: int, threads: int, shared_bytes: int) -> float:
    """Resident warps over the multiprocessor's 64, for blocks of `threads` threads."""
    warps = -(-threads // 32)
    per_warp = -(-max(registers, 1) * 32 // 256) * 256
    by_registers = REGISTERS_PER_SM // (per_warp * warps)
    by_shared = SHARED_PER_SM // (shared_bytes + SHARED_RESERVED_PER_BLOCK)
    blocks = min(by_registers, by_shared, BLOCKS_PER_SM, WARPS_PER_SM // warps)
    return blocks * warps / WARPS_PER_SM


def resources(source: str, sass: bool = False, streamed: int = 0) -> dict[tuple[str, str], dict[str, Any]]:
    """Per __global__ function of msc's launches and instantiation of its index type ("" where it has
    none, else "int" or "long"): registers, spill bytes, shared bytes, threads per block; with `sass`
    also `instructions_per_plane` of a streamed kernel (`streamed`: the barriers per plane of its loop)
    or `instructions_per_point` and `instructions_per_load` of another (and a tensor-core kernel's
    `instructions_per_mma` and `flops_per_mma`)."""
    bounds = {name: int(n) for n, name in re.findall(r"__launch_bounds__\((\d+)\) (\w+)\(", source)}
    with tempfile.TemporaryDirectory() as directory:
        path, cubin = Path(directory) / "kernel.cu", Path(directory) / "kernel.cubin"
        path.write_text(source)
        done = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-Xptxas", "-v", f"-I{cuda_emu.EMULATOR_DIR}",
                               str(path), "-o", str(cubin)], capture_output=True, text=True, check=True)
        out = {}
        for block in done.stderr.split("Compiling entry function")[1:]:
            mangled = block.split("'")[1]
            name = next((n for n in bounds if re.search(rf"\d{n}(I[il]E)?v", mangled)), None)
            if name is None:
                continue  # the runtime's level copies
            index = {"": "", "IiE": "int", "IlE": "long"}[re.search(rf"{name}(I[il]E)?", mangled).group(1) or ""]
            spills = re.search(r"(\d+) bytes spill stores", block)
            shared = re.search(r"(\d+) bytes smem", block)
            row = {"registers": int(re.search(r"Used (\d+) registers", block).group(1)),
                   "spill_bytes": int(spills.group(1)) if spills else 0,
                   "shared_bytes": int(shared.group(1)) if shared else 0, "threads": bounds[name]}
            code = _sass(cubin, mangled) if sass and index else []
            if code and streamed:
                row["instructions_per_plane"] = plane_instructions(code, streamed)
            elif code:
                row["instructions_per_point"] = point_instructions(code)
                row["instructions_per_load"] = load_instructions(code)
                if any("MMA" in text for _, text in code):
                    row["instructions_per_mma"], row["flops_per_mma"] = mma_instructions(code)
            out[(name, index)] = row
    return out


def sass_path() -> str | None:
    """A PATH with cuobjdump and nvdisasm: this one, or with the bin folder of their wheels (None: neither)."""
    path = os.environ.get("PATH", "")
    if shutil.which("cuobjdump", path=path) and shutil.which("nvdisasm", path=path):
        return path
    spec = importlib.util.find_spec("nvidia")
    for folder in (Path(p) / "cu13" / "bin" for p in ((spec.submodule_search_locations if spec else None) or [])):
        if (folder / "cuobjdump").exists() and (folder / "nvdisasm").exists():
            return os.pathsep.join([str(folder), path])
    return None


WITHOUT = ("BAR.SYNC", "MMA")  # a loop holding either is no loop over points (the products, a time tile's steps)


def _sass(cubin: Path, mangled: str) -> list[tuple[int, str]]:
    """A kernel's SASS instructions: (address, text) each."""
    done = subprocess.run(["cuobjdump", "-sass", "-fun", mangled, str(cubin)], capture_output=True, text=True,
                          check=True, env={**os.environ, "PATH": sass_path() or ""})
    return [(int(pc, 16), text) for pc, text in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", done.stdout)]


def _innermost(code: list[tuple[int, str]], opcode: str, without: tuple[str, ...] = ()) -> dict[tuple[int, int], int]:
    """A kernel's innermost loops (backward branches) that hold `opcode` in its SASS `code` (and
    none of `without`): (first address, last address) -> how many times it holds the opcode;
    innermost among those that hold it."""
    loops = {}
    for pc, text in code:
        start = _branch_target(text)
        if start is not None and start <= pc:
            body = [t for at, t in code if start <= at <= pc]
            held = sum(opcode in t for t in body)
            if held and not any(other in t for other in without for t in body):
                loops[(start, pc)] = held
    return {(start, end): held for (start, end), held in loops.items()
            if not any((a, b) != (start, end) and start <= a and b <= end for a, b in loops)}


def _branch_target(text: str) -> int | None:
    """The address a SASS branch instruction jumps to (None: not a branch)."""
    branch = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
    return int(branch.group(1), 16) if branch else None


def _loops(code: list[tuple[int, str]], opcode: str, without: tuple[str, ...] = ()) -> list[tuple[int, int]]:
    """The loops of `_innermost`: (how many times each holds the opcode, its instructions)."""
    return [(held, (end - start) // 16 + 1) for (start, end), held in _innermost(code, opcode, without).items()]


def point_instructions(code: list[tuple[int, str]]) -> float | None:
    """SASS instructions per point of a kernel: of its innermost loops that store to global
    memory and hold no barrier and no MMA, the longest, over its stores (ptxas may unroll it; a
    point is one store of each statement, so this is per point and statement). Where ptxas
    unrolled the stores out of every such loop (a tensor-core kernel's lanes each down a column
    of the warp's tiles), the run from the kernel's first store to its last over the stores
    after the first. None where nothing stores."""
    stores, length = max(_loops(code, "STG", without=WITHOUT), key=lambda loop: loop[1], default=(0, 0))
    if stores:
        return length / stores
    at = [pc for pc, text in code if "STG" in text]
    return (at[-1] - at[0]) / 16 / (len(at) - 1) if len(at) > 1 else None


def load_instructions(code: list[tuple[int, str]]) -> float | None:
    """SASS instructions per global load of a kernel's longest loop that loads and holds no
    barrier and no MMA (the staging loop of a tensor-core kernel: a warp's load of up to 32
    points of a row of a source's tile and halo). None where no such loop loads from global
    memory."""
    loads, length = max(_loops(code, "LDG", without=WITHOUT), key=lambda loop: loop[1], default=(0, 0))
    return length / loads if loads else None


def shortest_path(code: list[tuple[int, str]], start: int, end: int, opcode: str = "MMA") -> tuple[int, int] | None:
    """The fewest SASS instructions a warp issues from address `start` to `end` (both
    included) of `code`, and how many of them hold `opcode`: through each forward branch or
    past it, whichever is shorter (the code a condition skips is not counted; predicated
    instructions issue all the same); backward branches (a loop nested inside) are not
    taken. None where no forward path leads from `start` to `end`."""
    at = {pc: i for i, (pc, _) in enumerate(code)}
    fewest: dict[int, tuple[int, int] | None] = {pc: None for pc, _ in code if start <= pc <= end}
    fewest[start] = (1, int(opcode in code[at[start]][1]))
    for pc, text in code:
        here = fewest.get(pc)
        if here is None:
            continue
        jump = _branch_target(text)
        ends = (jump is not None and not text.startswith("@")) or text.startswith("EXIT")
        after = [] if ends or at[pc] + 1 == len(code) else [code[at[pc] + 1][0]]
        if jump is not None and pc < jump:
            after.append(jump)
        for target in after:
            if target in fewest:
                step = (here[0] + 1, here[1] + int(opcode in code[at[target]][1]))
                known = fewest[target]
                fewest[target] = step if known is None or step[0] < known[0] else known
    return fewest[end]


def mma_instructions(code: list[tuple[int, str]]) -> tuple[float, int]:
    """SASS instructions per MMA instruction of a tensor-core kernel, and the flops of one
    (2 m n k of its shape: DMMA.8x8x4 512, HMMA.1684 with tf32 operands 1024): the fewest
    instructions from the first MMA to the last (their fragment loads and the address
    arithmetic between, not the stores after) of each innermost loop holding MMAs (a fused
    kernel's unit of a step), or of the kernel where no loop holds one (the one-step
    kernels, one unit per warp), over the MMAs on that path. Where no forward path joins a
    span's first MMA to its last (MMAs in both arms of a branch), each MMA counts as one
    instruction: the fewest it can take."""
    mmas = [(pc, text) for pc, text in code if "MMA" in text]
    shape = re.search(r"MMA\.(\d+)x(\d+)x(\d+)|MMA\.(16|8)(8)(\d+)", mmas[0][1])  # DMMA.8x8x4, HMMA.1684
    assert shape is not None, mmas[0][1]
    m, n, k = (int(size) for size in shape.groups() if size)
    spans = list(_innermost(code, "MMA")) or [(code[0][0], code[-1][0])]
    instructions = held = 0
    for start, end in spans:
        inside = [pc for pc, _ in mmas if start <= pc <= end]
        path = shortest_path(code, inside[0], inside[-1]) or (len(inside), len(inside))
        instructions, held = instructions + path[0], held + path[1]
    return instructions / held, 2 * m * n * k


def plane_instructions(code: list[tuple[int, str]], barriers_per_plane: int) -> float:
    """SASS instructions per plane of a streamed kernel's loop over planes: of the innermost
    loops holding a barrier, the one with the most barriers (ptxas may unroll it, leaving a
    remainder loop beside it), its length over the planes it covers (its barriers over
    `barriers_per_plane`)."""
    barriers, length = max(_loops(code, "BAR.SYNC"), key=lambda loop: (loop[0], -loop[1]))
    return length * barriers_per_plane / barriers


def thread_planes_per_update(plan: StreamedTile) -> float:
    """Planes a thread passes per update, summed over a streamed tile's threads, in a grid
    large enough to ignore its edges: a block's threads pass chunk + its halo's planes
    (2 x depth x radius where no chain widens it) for tile x chunk x depth updates (halo
    points are computed too)."""
    return math.prod(plan.threads) * plan.planes / (math.prod(plan.tile) * plan.chunk * plan.depth)


def streamed_plan(poly: Any, schedule: Schedule) -> StreamedTile | None:
    """The streamed tile the CUDA target generates for the schedule (None: another form, such as
    the tensor-core kernels, fused with time tiles or not)."""
    if schedule.tensor_core_precision:
        return None
    target = get_target("cuda")
    plan = time_tile.shared_time_tile(poly.ir, lower(target.complete(poly, schedule), poly))
    return plan if isinstance(plan, StreamedTile) else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--schedule", default="Schedule()")
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--only", default=",".join(c.name for c in CASES[:4]), help="stencils, comma-separated")
    ap.add_argument("--sass", action="store_true",
                    help="SASS instructions per plane and update of streamed kernels; per point, load, MMA of others")
    a = ap.parse_args(argv)
    schedule = parse_schedule(a.schedule)
    if a.sass and sass_path() is None:
        ap.error("--sass needs cuobjdump and nvdisasm (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    rows: list[dict[str, Any]] = []
    names = a.only.split(",")
    unknown = set(names) - {c.name for c in CASES}
    if unknown:
        ap.error(f"unknown stencil(s) {', '.join(sorted(unknown))}")
    for case in (c for c in CASES if c.name in names):
        stencil = msc_stencil(case)
        for dtype in a.dtypes.split(","):
            poly = stencil.poly(dtype)
            source = get_target("cuda").source(poly, schedule)
            plan = streamed_plan(poly, schedule)
            for (kernel, index), r in resources(source, a.sass, plan.depth if plan else 0).items():
                row = {"stencil": case.name, "dtype": dtype, "kernel": kernel, "index": index, **r,
                       "occupancy": occupancy(r["registers"], r["threads"], r["shared_bytes"])}
                if "instructions_per_plane" in r and plan is not None:
                    row["instructions_per_update"] = r["instructions_per_plane"] * thread_planes_per_update(plan)
                rows.append(row)
                per = "".join(f", {n:g} instructions a {what}" for what in ("plane", "point", "load", "mma")
                              if (n := r.get(f"instructions_per_{what}")))
                print(f"{case.name:9} {dtype:8} {kernel:12} {index or '-':4} {r['registers']:3} registers, "
                      f"{r['spill_bytes']} bytes spilled, {r['threads']} threads, occupancy {row['occupancy']:.0%}"
                      + per)
    if a.json:
        Path(a.json).write_text(json.dumps({"schedule": a.schedule, "arch": "sm_90", "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
