"""JIT building of C sources into shared libraries, with a persistent cache.

The cache key is the SHA-256 of the source text, the compiler's identity, the
flags and the host CPU, so a changed compiler or machine never reuses a stale
library. Builds go to a private temporary file and are moved into place with
an atomic rename under a per-key file lock: several processes may build the
same kernel at once and none ever loads a half-written library.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from msc.errors import CompileError

DEFAULT_CC = "gcc"
DEFAULT_CFLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c11")


def cache_dir() -> Path:
    """The kernel cache directory: $MSC_CACHE_DIR, else ~/.cache/msc."""
    root = os.environ.get("MSC_CACHE_DIR")
    path = Path(root) if root else Path.home() / ".cache" / "msc"
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.lru_cache(maxsize=None)
def compiler_identity(cc: str) -> str:
    """The compiler's version banner (part of the cache key)."""
    exe = shutil.which(cc)
    if exe is None:
        raise CompileError(f"C compiler {cc!r} not found on PATH (set CC or install gcc)")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else exe


@functools.lru_cache(maxsize=None)
def host_identity() -> str:
    """Machine type plus CPU model and flags: -march=native code is per CPU."""
    text = platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("model name", "flags", "Features")):
                    text += line
                if line.strip() == "":
                    break
    except OSError:
        text += platform.processor()
    return text


def cache_key(source: str, cc: str, flags: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for part in (source, compiler_identity(cc), " ".join(flags), host_identity()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def build_shared_library(
    source: str,
    name: str,
    *,
    cc: str | None = None,
    flags: tuple[str, ...] = DEFAULT_CFLAGS,
    extra_libs: tuple[str, ...] = (),
    suffix: str = ".c",
) -> Path:
    """Compile `source` into a shared library (cached) and return its path.

    Raises CompileError with the compiler's output and the kept source path
    when compilation fails.
    """
    cc = cc or os.environ.get("CC", DEFAULT_CC)
    key = cache_key(source + "\0" + " ".join(extra_libs), cc, flags)
    root = cache_dir()
    lib = root / f"{name}-{key}.so"
    if lib.exists():
        return lib
    with open(root / f".{name}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if lib.exists():  # another process built it while we waited
            return lib
        src = root / f"{name}-{key}{suffix}"
        atomic_write_text(src, source)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".so", dir=root)
        os.close(fd)
        cmd = [cc, *flags, str(src), "-o", tmp, *extra_libs, "-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            os.unlink(tmp)
            first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr[:200])
            raise CompileError(
                f"compiling {src} failed: {first.strip()}\n{proc.stderr}",
                source_path=str(src),
                output=proc.stderr,
            )
        os.replace(tmp, lib)
    return lib


def load_library(path: Path) -> ctypes.CDLL:
    """Load a built library; ctypes.CDLL calls release the GIL while running."""
    return ctypes.CDLL(str(path))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write a file so that readers see the old or the new content, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
