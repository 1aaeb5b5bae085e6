"""Build and run athread programs with the project's athread emulator.

The emulator (runtime/athread/: athread.h, slave.h, crts.h, athread_emu.c)
runs the 64 CPEs of one Sunway core group as pthreads on the host and
enforces the LDM capacity and DMA rules of the chip; the Makefile beside it
builds the same sources for real Sunway hardware, or with `EMULATE=1` for
gcc and the emulator. It checks correctness only: nothing it measures is a
Sunway performance figure. See docs/athread.md.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from msc.errors import CompileError

EMULATOR_DIR = Path(__file__).resolve().parent / "athread"
MAKEFILE = EMULATOR_DIR / "Makefile"

#: LDM bytes per CPE of each chip (SW26010: 64 KB, SW26010-Pro: 256 KB).
LDM_BYTES = {"sw26010": 64 * 1024, "sw26010pro": 256 * 1024}
#: LDM bytes the emulator reserves for each CPE's stack (ATHREAD_EMU_STACK_RESERVE in athread.h).
STACK_RESERVE = 8 * 1024
#: Granule in bytes of every DMA address, length, block size and stride (ATHREAD_EMU_DMA_ALIGN).
DMA_ALIGN = 4
CPES = 64

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
) -> Path:
    """Copy `sources` into `workdir` and build them there with `make EMULATE=1`; return the program,
    or with `shared` the library `lib<target>.so` (host entry points are then the caller's to name)."""
    if chip not in LDM_BYTES:
        raise CompileError(f"athread chip must be one of {sorted(LDM_BYTES)}, not {chip!r}")
    workdir.mkdir(parents=True, exist_ok=True)
    for src in sources:
        shutil.copyfile(src, workdir / Path(src).name)
    command = [
        "make", "-s", "-f", str(MAKEFILE), "-C", str(workdir), "EMULATE=1",
        f"CHIP={chip}", f"TARGET={target}",
        "HOST_SRCS=" + " ".join(host_srcs), "SLAVE_SRCS=" + " ".join(slave_srcs),
        "DEFS=" + " ".join(defs), f"SHARED={int(shared)}",
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
