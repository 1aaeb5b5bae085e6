"""Build and run athread programs with the project's athread emulator.

The emulator (msc/runtime/athread/: athread.h, slave.h, crts.h, simd.h, athread_emu.c)
runs the 64 CPEs of one Sunway core group as pthreads on the host and
enforces the LDM capacity and DMA rules of the chip; the Makefile beside it
builds the same sources for real Sunway hardware, or with `EMULATE=1` for
gcc and the emulator. It checks correctness only: nothing it measures is a
Sunway performance figure. See docs/athread.md.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from msc import ir
from msc.errors import CompileError, MscError, StencilArgumentError
from msc.ir.arguments import bind_arguments
from msc.runtime.buffers import ghost_width, pack, put_level
from msc.runtime.checkpoint import checkpoint_path
from msc.runtime.finite import not_finite
from msc.runtime.kernel import (
    RunStats,
    Simulation,
    check_threads,
    resumed_buffers,
    warn_inputs_not_finite,
    warn_not_finite,
)

EMULATOR_DIR = Path(__file__).resolve().parent / "athread"
MAKEFILE = EMULATOR_DIR / "Makefile"

#: LDM bytes per CPE of each chip (SW26010: 64 KB, SW26010-Pro: 256 KB).
LDM_BYTES = {"sw26010": 64 * 1024, "sw26010pro": 256 * 1024}
#: LDM bytes the emulator reserves for each CPE's stack (ATHREAD_EMU_STACK_RESERVE in athread.h).
STACK_RESERVE = 8 * 1024
#: Granule in bytes of every DMA address, length, block size and stride (ATHREAD_EMU_DMA_ALIGN).
DMA_ALIGN = 4
CPES = 64
#: What the vendors' compilers reject or miscompile, made an error in every emulated build (as in Makefile).
STRICT_FLAGS = "-Werror=implicit-function-declaration -Werror=incompatible-pointer-types -Werror=int-conversion"

_STATS = re.compile(r"athread emulator: chip=(\S+) ldm_bytes=(\d+) (.*)")


def build(
    sources: Iterable[Path],
    workdir: Path,
    *,
    host_srcs: Iterable[str],
    slave_srcs: Iterable[str],
    target: str = "stencil",
    chip: str = "sw26010pro",
    defs: Iterable[str] = (),
    shared: bool = False,
    ldm_cache: int = 0,
) -> Path:
    """Copy `sources` into `workdir` and build them there with `make EMULATE=1`; return the program,
    or with `shared` the library `lib<target>.so` (host entry points are then the caller's to name).
    `ldm_cache`: bytes of each CPE's LDM configured as data cache (SW26010-Pro only)."""
    if chip not in LDM_BYTES:
        raise CompileError(f"athread chip must be one of {sorted(LDM_BYTES)}, not {chip!r}")
    workdir.mkdir(parents=True, exist_ok=True)
    for src in sources:
        shutil.copyfile(src, workdir / Path(src).name)
    command = [
        "make", "-s", "-f", str(MAKEFILE), "-C", str(workdir), "EMULATE=1",
        f"CHIP={chip}", f"TARGET={target}",
        "HOST_SRCS=" + " ".join(host_srcs), "SLAVE_SRCS=" + " ".join(slave_srcs),
        "DEFS=" + " ".join(defs), f"SHARED={int(shared)}", f"LDM_CACHE={ldm_cache}",
    ]  # fmt: skip
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise CompileError(f"athread emulator build in {workdir} failed:\n{done.stdout}{done.stderr}")
    return workdir / (f"lib{target}.so" if shared else target)


def parse_stats(stderr: str) -> dict[str, int | str]:
    """The counters a program prints at athread_halt when ATHREAD_EMU_STATS=1 (last report wins)."""
    found = _STATS.findall(stderr)
    if not found:
        raise ValueError("no athread emulator statistics in the program's output (was ATHREAD_EMU_STATS=1 set?)")
    chip, ldm, rest = found[-1]
    stats: dict[str, int | str] = {"chip": chip, "ldm_bytes": int(ldm)}
    for item in rest.split():
        key, value = item.split("=")
        stats[key] = int(value)
    return stats


def build_tree(directory: Path, chip: str) -> Path:
    """Build an emitted athread tree (its own Makefile) with `make EMULATE=1`; return its program."""
    command = ["make", "-s", "-C", str(directory), "EMULATE=1", f"CHIP={chip}"]
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise CompileError(f"athread emulator build in {directory} failed:\n{done.stdout}{done.stderr}",
                           source_path=str(directory), output=done.stderr)
    return directory


class EmulatorError(MscError):
    """A program run under the athread emulator broke a hardware rule (the
    emulator's message says which CPE, call and sizes) or failed otherwise."""


@dataclass
class AthreadRunStats(RunStats):
    """The last run under the emulator: `seconds` is the emulator's wall time
    (no Sunway figure); the DMA and LDM counters are what the generated code
    asked the hardware to do, summed over the CPEs and the steps."""

    chip: str = ""
    get_bytes: int = 0
    put_bytes: int = 0
    transfers: int = 0
    dma_blocks: int = 0  # contiguous blocks moved: a strided transfer moves one per row
    peak_ldm: int = 0  # the largest LDM use of one CPE, stack reserve included
    static_ldm: int = 0  # bytes of __thread_local variables per CPE
    peak_stack: int = 0  # the deepest stack of one CPE's kernel, measured on the emulating host (an estimate)
    spawns: int = 0

    @property
    def dma_bytes(self) -> int:
        return self.get_bytes + self.put_bytes

    @property
    def dma_bytes_per_step(self) -> float:
        return self.dma_bytes / self.steps if self.steps else 0.0

    @property
    def transfers_per_step(self) -> float:
        return self.transfers / self.steps if self.steps else 0.0

    @property
    def mean_dma_block(self) -> float:
        """Bytes per contiguous block: what decides the DMA engine's bandwidth (docs/athread.md)."""
        return self.dma_bytes / self.dma_blocks if self.dma_blocks else 0.0


def _one_node(comm: Any) -> None:
    """Refuse a `comm`: the emulated core group runs one node; a distributed Sunway run is an emitted program."""
    if comm is not None:
        raise StencilArgumentError("an athread kernel runs one core group and takes no comm=: emit target "
                                   "'athread+mpi' for a distributed program (its main runs the halo exchanges)")


@dataclass
class AthreadKernel:
    """A stencil built for the athread target with the emulator (`make
    EMULATE=1` of the emitted tree): `run` executes the program in a child
    process, exchanging .npy files, and returns the same dict as an OpenMP
    kernel. The emulator aborts on a broken hardware rule: that is an
    EmulatorError carrying its message. An emulation for correctness: neither
    the run time nor the counters in `last_run` are Sunway performance figures."""

    ir: ir.StencilIR
    program: Path
    chip: str
    schedule: Any = None  # the msc.Schedule it was compiled with (None: the default)
    tree: Path | None = None  # the emitted tree it was built from (kept for reading)
    target: str = "athread"
    last_run: AthreadRunStats = field(default_factory=AthreadRunStats)

    def __repr__(self) -> str:
        return (f"<msc kernel '{self.ir.name}' target=athread (emulated) chip={self.chip} dtype={self.ir.dtype} "
                f"schedule={self.schedule or 'default'}>")

    @property
    def source(self) -> str:
        """The generated athread sources: the MPE's host.c, then the CPEs' slave.c."""
        files = [self.tree / name for name in ("host.c", "slave.c")] if self.tree else []
        if not files or not all(f.is_file() for f in files):
            raise MscError(f"the athread sources of '{self.ir.name}' are not kept (its tree in the kernel cache is "
                           "gone); emit them with .emit('athread', directory)")
        return "".join(f"/* ---- {f.name} ---- */\n{f.read_text()}" for f in files)

    def run(self, steps: int, threads: int | None = None, comm: Any = None, **inputs: Any) -> dict[str, np.ndarray]:
        """Advance `steps` steps under the emulator; the newest level of each written field (`threads`:
        checked as elsewhere; the 64 CPEs are the emulator's). No `comm`: see `_one_node`."""
        _one_node(comm)
        check_threads(threads)
        stencil = self.ir
        args = bind_arguments(stencil, steps, inputs)
        levels = {f.name: args.levels[f.name] if f.written else args.levels[f.name][:1] for f in stencil.fields}
        given = {name: np.asarray(list(arrays)) for name, arrays in levels.items()}
        warned = warn_inputs_not_finite(stencil, given, args.scalars, 0, 1, stacklevel=2)
        result = {name: out[-1] for name, out in self._execute(int(steps), args.scalars, levels, False).items()}
        if not warned:
            warn_not_finite(stencil.name, not_finite(result), 0, int(steps), stacklevel=2)
        return result

    def start(self, threads: int | None = None, comm: Any = None, **inputs: Any) -> Simulation:
        """A run that keeps its levels between calls, as `CompiledKernel.start`
        does: each `advance` runs the program from the levels it holds. No `comm`: see `_one_node`."""
        _one_node(comm)
        check_threads(threads)
        args = bind_arguments(self.ir, 0, inputs)
        return Simulation(self, pack(self.ir, args), args.scalars, 1)

    def resume(self, path: str | Path, threads: int | None = None) -> Simulation:
        """A run continued from the checkpoint `path` (`sim.save`), as `CompiledKernel.resume` continues one."""
        buffers, scalars, step = resumed_buffers(self.ir, checkpoint_path(path))
        return Simulation(self, buffers, scalars, 1, step)

    # -- what a Simulation calls (msc.runtime.kernel) --------------------------

    def arguments(self, buffers: dict[str, np.ndarray], scalars: dict[str, float], extents: Any) -> list[Any]:
        return [buffers, scalars, tuple(extents)]

    def counters(self) -> None:
        """Nothing beyond the DMA figures each run records itself (AthreadRunStats)."""
        return None

    def counters_since(self, before: Any) -> None:
        return None

    def advance(self, call: list[Any], t0: int, steps: int, nthreads: int) -> None:
        """Steps t0 .. t0+steps-1 on a Simulation's ring buffers: every level the
        next step reads goes to the program, and every one it gives back is
        put into its slot (a periodic level with its ghost cells)."""
        buffers, scalars, extents = call
        stencil = self.ir
        domain = tuple(slice(g, n - g) for g, n in zip(ghost_width(stencil), extents))
        levels = {f.name: [buffers[f.name][(t0 - age) % f.slots][domain] for age in reversed(range(f.window))]
                  if f.written else [buffers[f.name][domain]] for f in stencil.fields}
        out = self._execute(int(steps), scalars, levels, True)
        for f in stencil.written_fields:
            for age, level in enumerate(reversed(out[f.name])):
                put_level(stencil, buffers[f.name][(t0 + steps - age) % f.slots], level)

    def _execute(self, steps: int, scalars: dict[str, float], levels: dict[str, list[np.ndarray]],
                 every_level: bool) -> dict[str, list[np.ndarray]]:
        """Run the program for `steps` steps from `levels` (per field, oldest
        first): per written field, its newest level, or (`every_level`) every
        level the next step reads, oldest first; its counters into `last_run`."""
        stencil = self.ir
        with tempfile.TemporaryDirectory(prefix="msc-athread-") as tmp:
            work = Path(tmp)
            command = [str(self.program), "--steps", str(steps)]
            for name, value in scalars.items():
                command += ["--param", f"{name}={value!r}"]
            for f in stencil.fields:
                files = []
                for n, level in enumerate(levels[f.name]):
                    path = work / f"in_{f.name}_{n}.npy"
                    np.save(path, np.ascontiguousarray(level, dtype=stencil.dtype))
                    files.append(str(path))
                command += ["--in", f"{f.name}={','.join(files)}"]
            outputs = {f.name: [work / f"out_{f.name}_{n}.npy" for n in range(f.window if every_level else 1)]
                       for f in stencil.written_fields}
            for name, paths in outputs.items():
                command += ["--out", f"{name}={','.join(map(str, paths))}"]
            env = dict(os.environ, ATHREAD_EMU_STATS="1")
            start = time.perf_counter()
            done = subprocess.run(command, check=False, capture_output=True, text=True, env=env)
            seconds = time.perf_counter() - start
            if done.returncode != 0:
                found = [ln for ln in done.stderr.splitlines()
                         if ln.startswith(("athread emulator:", "msc:")) and not _STATS.match(ln)]
                why = found[-1] if found else (done.stderr.strip() or f"exit status {done.returncode}")
                raise EmulatorError(f"stencil '{stencil.name}' on target 'athread' ({self.chip}, emulated) "
                                    f"failed: {why} (program {self.program})")
            result = {name: [np.load(path) for path in paths] for name, paths in outputs.items()}
        stats = parse_stats(done.stderr)
        shape = next(iter(levels.values()))[0].shape
        interior = int(np.prod([n - 2 * r if stencil.boundary == "dirichlet" else n
                                for n, r in zip(shape, stencil.radius)]))
        self.last_run = AthreadRunStats(
            seconds, steps, interior * len(stencil.statements), interior * steps, chip=str(stats["chip"]),
            get_bytes=int(stats["get_bytes"]), put_bytes=int(stats["put_bytes"]), transfers=int(stats["transfers"]),
            dma_blocks=int(stats["dma_blocks"]), peak_ldm=int(stats["peak_ldm"]), static_ldm=int(stats["static_ldm"]),
            peak_stack=int(stats["peak_stack"]),
            spawns=int(stats["spawns"]))
        return result
