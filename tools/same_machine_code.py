"""Check that two trees of generated sources (benchmarks/generated_sources.py,
before and after a change to the code generator) that differ in text compile
to the same machine code: every pair of differing C, CUDA and HIP files is
compiled to assembly by the host compilers (CUDA and HIP under msc's CUDA
emulator, Sunway code under the athread emulator) and the assembly compared.

    python3 tools/same_machine_code.py BEFORE AFTER

A refactor that changes only how a source is spelt (parentheses, folded
`+ 0`) passes; one that changes what the code computes shows the files whose
assembly differs, and exits with status 1.
"""

from __future__ import annotations

import filecmp
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

C_FLAGS = ["-O2", "-fopenmp", "-w"]
ATHREAD_FLAGS = ["-O2", "-std=gnu99", "-pthread", "-w", "-DATHREAD_EMU_LDM_BYTES=65536",
                 "-DATHREAD_EMU_CHIP=\"sw26010\"", "-DATHREAD_EMU_LDM_CACHE=0"]
# diagnostics name no source line (a failed runtime call's in msc/runtime/cuda/msc_cuda.h, the emulator's in
# cuda_emu.h): code that only moved to other lines compiles alike
GPU_FLAGS = ["-std=c++17", "-O1", "-fno-gnu-unique", "-DMSC_CUDA_EMULATE", "-DMSC_ERROR_SITE(call)=\"\", 0, \"\"",
             "-DMSC_EMU_LINE=0", "-w", "-x", "c++"]


def _command(root: Path, path: Path) -> list[str] | None:
    folder = ["-I", str(path.parent) or "."]
    if path.suffix in (".cu", ".hip"):
        return ["g++", *GPU_FLAGS, *folder]
    if path.suffix != ".c":
        return None
    if (root / path.parent / "athread.h").exists():
        return ["gcc", *ATHREAD_FLAGS, *folder]
    return ["gcc", *C_FLAGS, *folder]


def assembly(root: Path, path: Path) -> str:
    """The assembly of `path` (relative to `root`; compiled there, so that `__FILE__` is the same in both trees)."""
    command = _command(root, path)
    assert command is not None
    run = subprocess.run([*command, "-S", "-o", "-", str(path)], capture_output=True, text=True, cwd=root)
    if run.returncode:
        raise RuntimeError(f"{root / path}: {run.stderr.strip()[:400]}")
    return run.stdout


def differing(before: Path, after: Path) -> list[Path]:
    """Paths (relative) of files present in both trees whose text differs."""
    out = []
    for path in sorted(before.rglob("*")):
        twin = after / path.relative_to(before)
        if path.is_file() and twin.is_file() and not filecmp.cmp(path, twin, shallow=False):
            out.append(path.relative_to(before))
    return out


def main(before: Path, after: Path) -> int:
    changed = differing(before, after)
    compiled = [p for p in changed if _command(before, p) is not None]
    other = [p for p in changed if p not in compiled]

    def same(p: Path) -> bool:
        return assembly(before, p) == assembly(after, p)

    with ThreadPoolExecutor() as pool:
        results = list(pool.map(same, compiled))
    different = [p for p, ok in zip(compiled, results) if not ok]
    print(f"{len(changed)} files differ in text; {len(compiled)} compiled, "
          f"{len(compiled) - len(different)} of them to the same assembly")
    for p in different:
        print(f"  different assembly: {p}")
    for p in other:
        print(f"  not compiled (not C, CUDA or HIP): {p}")
    return 1 if different or other else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
