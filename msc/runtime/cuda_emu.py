"""Build CUDA sources for the project's CPU emulator (msc/runtime/cuda/).

A .cu file that includes `msc_cuda.h` compiles as C++17 with
`-DMSC_CUDA_EMULATE`: the header then includes `cuda_emu.h`, and the build
links the emulator's runtime (`cuda_emu.cpp`, compiled once per set of flags
and cached: `runtime_object`), which runs each block's threads as fibers on
the calling thread, with `__syncthreads` and warp collectives as real
barriers and `nvcuda::wmma` with the programming guide's semantics (see the
header's comment and docs/ARCHITECTURE.md). It
checks correctness and counts memory traffic (global bytes, coalesced
sectors, an ideal-L2 DRAM volume, shared-memory bank conflicts: `counted`,
docs/cuda.md "Counters"); it does not time anything.

With BLOCK_ORDER=reverse in the environment (read at every launch, so it
needs no rebuild) a launch runs its blocks last first, and a byte of device
memory that two of its blocks both change stops it with an error: code
that is right only when blocks run in order (overlapping tiles, a block
reading what another writes) fails instead of passing by luck.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from msc.errors import CompileError
from msc.runtime import build

EMULATOR_DIR = Path(__file__).resolve().parent / "cuda"
HEADERS = ("msc_cuda.h", "msc_index.h", "cuda_emu.h")
#: the emulator's runtime: compiled once (runtime_object), not with every kernel
RUNTIME = "cuda_emu.cpp"
#: the files an emitted tree needs for `make emulate`
FILES = (*HEADERS, RUNTIME)
#: The environment variable of the block order: unset or "forward", or "reverse" (see the module).
BLOCK_ORDER = "MSC_CUDA_EMU_BLOCKS"
#: The environment variable of the thread order in a block: unset or "forward", or "reverse" (last first).
THREAD_ORDER = "MSC_CUDA_EMU_THREADS"
#: The environment variable of the index width of kernels templated on their index type (MSC_LAUNCH_INDEXED):
#: unset or "32" (32-bit indices where a level's points allow, as on a GPU), or "64" (64-bit whatever the size).
INDEX_WIDTH = "MSC_CUDA_EMU_INDEX"
CXX = "g++"
#: every load and store calls the emulator's counters (cuda_emu.h: "Counters"): g++'s kernel
#: address sanitizer, its checks replaced by the emulator's callbacks (no shadow memory, no runtime)
COUNTING_FLAGS = ("-DMSC_CUDA_EMU_COUNT", "-fsanitize=kernel-address", "--param",
                  "asan-instrumentation-with-call-threshold=0", "--param", "asan-stack=0", "--param", "asan-globals=0")
#: The environment variable that turns counting off ("0") for the libraries built from then on:
#: their runs take a sixth to a tenth of the time, and k.last_run.gpu is None.
COUNTERS_SWITCH = "MSC_CUDA_EMU_COUNTERS"
#: the counters msc_emu_counters writes, in order
COUNTERS = ("load_bytes", "store_bytes", "sectors", "dram_bytes", "shared_wavefronts", "shared_ideal",
            "shared_accesses", "launches", "mma_flops")
#: g++ flags of an emulated program (-Og: building takes most of a small emulated run's time, and
#: the kernel's own code builds in about 0.6 s; the runtime is built apart, at -O2: runtime_object;
#: -fno-gnu-unique keeps the emulator's state private to each library a process loads).
PROGRAM_FLAGS = ("-std=c++17", "-Og", "-fno-gnu-unique", "-DMSC_CUDA_EMULATE")
SHARED_FLAGS = (*PROGRAM_FLAGS, "-fPIC", "-shared")
#: g++ flags of the runtime object: built once, so it is optimised (the launch, barriers and
#: access counting run at -O2); position-independent, for libraries and executables alike
RUNTIME_FLAGS = ("-std=c++17", "-O2", "-fno-gnu-unique", "-DMSC_CUDA_EMULATE", "-fPIC", "-c")


def compiler() -> str:
    """The host C++ compiler: $CXX, else g++ (GCC 12 or newer: `__half` is `_Float16`)."""
    return os.environ.get("CXX", CXX)


@functools.lru_cache(maxsize=1)
def emulator_digest() -> str:
    """SHA-256 prefix of the emulator's headers (msc_hip.h too: a HIP source includes it) and runtime; it is
    one of the flags, so it keys the kernel cache."""
    h = hashlib.sha256()
    for path in sorted([*EMULATOR_DIR.glob("*.h"), EMULATOR_DIR / RUNTIME]):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def runtime_object(*, counting: bool, defs: tuple[str, ...] = ()) -> Path:
    """The emulator's runtime compiled into an object file, once per compiler, `counting` (it then
    defines the callbacks that count the kernel's accesses) and `defs` (-D without the prefix), and
    cached beside the kernels (msc/runtime/build.py: atomic, locked, checked against its digest)."""
    cxx = compiler()
    command = (*RUNTIME_FLAGS, *(("-DMSC_CUDA_EMU_COUNT",) if counting else ()), *(f"-D{d}" for d in defs),
               f"-I{EMULATOR_DIR}")
    key = build.cache_key(emulator_digest(), cxx, command)

    def compile_into(out: Path) -> None:
        done = subprocess.run([cxx, *command, str(EMULATOR_DIR / RUNTIME), "-o", str(out)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise CompileError(f"building the CUDA emulator's runtime ({RUNTIME}) failed:\n{done.stderr}",
                               output=done.stderr)

    return build.cached_build(build.cache_dir() / f"msc_cuda_emu-{key}.o", compile_into)


def flags(*, shared: bool) -> tuple[str, ...]:
    """The complete flags for .cu sources: an emulated program, or with `shared` a shared
    library, which links the emulator's runtime (runtime_object) and counts memory traffic unless
    COUNTERS_SWITCH is "0" (a program reports no counts; build_program links its runtime)."""
    counting = shared and os.environ.get(COUNTERS_SWITCH, "1") != "0"
    runtime = (str(runtime_object(counting=counting)),) if shared else ()
    return (*(SHARED_FLAGS if shared else PROGRAM_FLAGS), *(COUNTING_FLAGS if counting else ()),
            f"-DMSC_CUDA_EMU_DIGEST={emulator_digest()}", f"-I{EMULATOR_DIR}", *runtime, "-x", "c++")


def build_shared(source: str, name: str) -> Path:
    """Compile one .cu source text into an emulated shared library (cached, atomic; see msc/runtime/build.py)."""
    return build.build_shared_library(source, name, cc=compiler(), flags=flags(shared=True), suffix=".cu")


def build_program(sources: Iterable[Path], output: Path, *, defs: Iterable[str] = (), counting: bool = False) -> Path:
    """Compile and link .cu sources into the emulated program `output` (written whole or not at all); with
    `counting`, every load and store calls the emulator (its counters, and its bounds checks of shared arrays)."""
    macros = tuple(defs)
    runtime = runtime_object(counting=counting, defs=macros)
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}-", dir=output.parent)
    os.close(fd)
    command = [compiler(), *flags(shared=False), *(COUNTING_FLAGS if counting else ()), *(f"-D{d}" for d in macros),
               *map(str, sources), "-x", "none", str(runtime), "-o", tmp]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        Path(tmp).unlink(missing_ok=True)  # the linker removes its output when it fails
        raise CompileError(f"emulated CUDA build of {output} failed:\n{done.stderr}", output=done.stderr)
    os.replace(tmp, output)
    return output


def read_counters(fn: Callable[[Any], None]) -> tuple[int, ...]:
    """An emulated library's counters since it was loaded (its msc_emu_counters), in COUNTERS order."""
    values = (ctypes.c_longlong * len(COUNTERS))()
    fn(values)
    return tuple(values)


def counted(before: tuple[int, ...], after: tuple[int, ...] | None) -> dict[str, float]:
    """What was counted between two readings: load_bytes, store_bytes, sectors,
    dram_bytes, launches, mma_flops, shared_accesses, shared_wavefronts (each
    access's, summed) and shared_wavefronts_per_access (the wavefronts over the
    conflict-free ideal: 1.0 = no bank conflicts; 1.0 with no shared accesses)."""
    assert after is not None
    d = {name: a - b for name, a, b in zip(COUNTERS, after, before)}
    ideal = d.pop("shared_ideal")
    return {**d, "shared_wavefronts_per_access": d["shared_wavefronts"] / ideal if ideal else 1.0}
