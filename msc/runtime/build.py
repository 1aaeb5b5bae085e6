"""JIT building of C sources into shared libraries, with a persistent cache.

The cache key is the SHA-256 of the source text, the compiler's identity, the
flags and the host CPU, so a changed compiler or machine never reuses a stale
library. Builds go to a private temporary file and are moved into place with
an atomic rename under a per-key file lock: several processes may build the
same kernel at once and none ever loads a half-written library. Each library
has a digest beside it, checked before it is loaded: a damaged, truncated or
unreadable entry is rebuilt, with one CacheWarning saying so.

Files msc writes for users (emitted trees, pictures, caches) get the mode
`open()` would give them (0666 less the umask), and appear whole or not at
all (`atomic_write_bytes`, `write_tree`).
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import hashlib
import os
import platform
import re
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from msc.errors import CacheWarning, CompileError, EmitError
from msc.version import __version__

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
    src = cache_dir() / f"{name}-{key}{suffix}"

    def compile_into(out: Path) -> None:
        atomic_write_text(src, source)
        proc = subprocess.run([cc, *flags, str(src), "-o", str(out), *extra_libs, "-lm"],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr[:200])
            raise CompileError(f"compiling {src} failed: {first.strip()}\n{proc.stderr}",
                               source_path=str(src), output=proc.stderr)

    return cached_build(cache_dir() / f"{name}-{key}.so", compile_into)


def side_by_side(jobs: Sequence[Callable[[], object]]) -> bool:
    """Run build `jobs` in parallel threads, at most one per core: the compilers (gcc, nvcc) run
    side by side while code generation takes its turns. Returns False, running none of them,
    where there are fewer than two jobs or cores (each is then built when first used)."""
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers < 2:
        return False
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda job: job(), jobs))
    return True


def cached_build(artifact: Path, make: Callable[[Path], None]) -> Path:
    """The one compile-and-cache step of every build (C, CUDA and HIP libraries,
    athread programs): `artifact` as it is when it matches its digest, else
    built by `make(out)` into a temporary file beside it, under a lock (one
    process builds, the others wait and reuse it), its digest written before
    it is moved into place, so a killed build or a damaged file is never
    trusted (a damaged one is rebuilt with a CacheWarning)."""
    if artifact.exists() and _damage(artifact) is None:
        return artifact
    root, stem, suffix = artifact.parent, artifact.stem, artifact.suffix
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        damage = _damage(artifact) if artifact.exists() else None
        if artifact.exists() and damage is None:  # another process built it while we waited
            return artifact
        for stale in root.glob(f".{stem}-*{suffix}"):  # left by a build killed midway (we hold the lock)
            stale.unlink(missing_ok=True)
        if damage is not None:
            warnings.warn(f"msc: the cached build {artifact} is damaged ({damage}); rebuilding it",
                          CacheWarning, stacklevel=3)
        fd, tmp = tempfile.mkstemp(prefix=f".{stem}-", suffix=suffix, dir=root)
        os.close(fd)
        try:
            make(Path(tmp))
        except BaseException:
            os.unlink(tmp)
            raise
        # the digest first: an artifact without its digest is never trusted
        atomic_write_text(_digest_path(artifact), _file_digest(Path(tmp)))
        os.replace(tmp, artifact)
    return artifact


def _digest_path(lib: Path) -> Path:
    return lib.with_suffix(".sha256")


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def is_intact(lib: Path) -> bool:
    """Whether the cached library `lib` exists and matches its digest."""
    return lib.exists() and _damage(lib) is None


def _damage(lib: Path) -> str | None:
    """Why the cached library `lib` cannot be trusted, or None when it matches its digest."""
    try:
        expected = _digest_path(lib).read_text().strip()
    except OSError as e:
        return f"its digest is unreadable: {e.strerror or e}"
    try:
        actual = _file_digest(lib)
    except OSError as e:
        return f"it is unreadable: {e.strerror or e}"
    return None if actual == expected else "its content does not match its digest (truncated or corrupted)"


def load_library(path: Path) -> ctypes.CDLL:
    """Load a built library; ctypes.CDLL calls release the GIL while running."""
    _wait_passively_if_oversubscribed()
    return ctypes.CDLL(str(path))


LOCAL_RANKS_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")  # MPICH (Hydra), Open MPI


@functools.lru_cache(maxsize=1)
def _wait_passively_if_oversubscribed() -> None:
    """OpenMP reads its wait policy once, when its library loads with the first
    kernel. Under an MPI launcher whose ranks on this node would run more
    OpenMP threads (OMP_NUM_THREADS each) than the node has cores, ask for
    passive waiting then: threads spinning at a barrier would starve the
    ranks that must answer halo messages. A policy the user set is kept."""
    if os.environ.get("OMP_WAIT_POLICY") or os.environ.get("GOMP_SPINCOUNT"):
        return
    local = next((os.environ[v] for v in LOCAL_RANKS_VARIABLES if os.environ.get(v)), "")
    threads = os.environ.get("OMP_NUM_THREADS", "").split(",")[0]
    if local.isdigit() and threads.isdigit() and int(local) * int(threads) > (os.cpu_count() or 1):
        os.environ["OMP_WAIT_POLICY"] = "passive"


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return next(int(ln.split()[1], 8) for ln in f if ln.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):  # no procfs: read it by setting it (not thread-safe)
        umask = os.umask(0o022)
        os.umask(umask)
        return umask


def file_mode() -> int:
    """The mode `open()` gives a new file: 0666 less the process's umask."""
    return 0o666 & ~_umask()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_target(path: Path) -> tuple[Path, bool]:
    """Where a write of `path` lands, and whether it is atomic: a symbolic link's file (the link
    stays a link), written whole; a device or a pipe (/dev/null), written through as it is."""
    target = Path(os.path.realpath(path))
    return target, not (target.exists() and not target.is_file() and not target.is_dir())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write a file so that readers see the old or the new content, never half;
    it gets the mode `open()` would give it. Through a symbolic link, its file (`write_target`)."""
    path, atomic = write_target(path)
    if not atomic:
        path.write_bytes(data)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        try:
            os.fchmod(fd, file_mode())
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def atomic_write_with(path: Path, write: Callable[[str], object]) -> None:
    """As atomic_write_bytes, for a writer that takes a file name (a library that writes the
    file itself): write(temporary path) beside `path`, then rename the result into place. The
    temporary is named for its writer (`writer_tag`); once `path` is in place, the temporaries
    that earlier writers of `path` left when they were killed midway are removed (`is_left_over`).
    Through a symbolic link, its file (`write_target`)."""
    path, atomic = write_target(path)
    if not atomic:
        write(str(path))
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{path.name}-"
    fd, tmp = tempfile.mkstemp(prefix=f"{prefix}{writer_tag()}-", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, file_mode())  # the mode open() would give it, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    for entry in path.parent.glob(f"{glob_escape(prefix)}*.tmp"):
        if is_left_over(entry, prefix):
            entry.unlink(missing_ok=True)


#: a leftover whose writer cannot be asked (another host's) counts as abandoned once untouched for this long
ABANDONED_S = 3600.0


def writer_tag() -> str:
    """`<host>.<pid>` of this process, for the names of what it writes in stages: `is_left_over` reads it."""
    return f"{re.sub(r'[^A-Za-z0-9_]', '_', socket.gethostname())[:40]}.{os.getpid()}"


def is_left_over(entry: Path, prefix: str) -> bool:
    """Whether `entry` (a temporary file or a staging folder named `<prefix><writer_tag>-...`) was left
    by a writer that is gone: one of this host whose process has ended, or (another host's, or a name
    without a tag) one untouched for ABANDONED_S. A live writer's entry is never taken."""
    tag = re.match(r"([A-Za-z0-9_]+)\.(\d+)-", entry.name[len(prefix):])
    here = writer_tag().rsplit(".", 1)[0]
    if tag is not None and tag.group(1) == here:
        return not _running(int(tag.group(2)))
    try:
        touched = max([entry.stat().st_mtime, *(p.stat().st_mtime for p in entry.iterdir())]
                      if entry.is_dir() else [entry.stat().st_mtime])
    except OSError:
        return False  # gone meanwhile, or unreadable: not ours to judge
    return time.time() - touched > ABANDONED_S


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def glob_escape(text: str) -> str:
    """`text` matched literally by Path.glob."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


#: in a tree `write_tree` wrote: the names of its files, one per line
TREE_LIST = ".msc-files"


def write_tree(directory: Path, files: dict[str, str]) -> Path:
    """Write `files` (name -> text) into `directory`, all or nothing.

    They are written into a private staging directory, then renamed into
    place: the staging directory becomes `directory` when that does not
    exist yet; inside an existing one, each file replaces its namesake, and
    the files an earlier write listed (TREE_LIST) that this one does not
    write are removed. A file there that msc did not write (not listed, and
    not saying msc in its first lines: a user's own main.c) is never
    replaced: EmitError, nothing written. A full disk or a refused write
    thus leaves nothing partial under the target name. Raises EmitError
    naming the directory and the cause.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise EmitError(f"cannot write the source tree {directory}: it exists and is not a directory; "
                        "nothing was written")
    files = {**files, TREE_LIST: "".join(f"{name}\n" for name in sorted(files))}
    staging: Path | None = None
    replaced = 0
    try:
        existing = directory.is_dir()
        listed = _listed(directory) if existing else set()
        foreign = [name for name in files if existing and name not in listed | {TREE_LIST}
                   and not _written_by_msc(directory / name)]
        if foreign:
            raise EmitError(f"cannot write the source tree {directory}: {', '.join(foreign)} there "
                            f"{'was' if len(foreign) == 1 else 'were'} not written by msc and would be replaced; "
                            "emit into a new folder, or move them away; nothing was written there")
        if not existing:
            directory.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory if existing else directory.parent))
        os.chmod(staging, 0o777 & ~_umask())  # as mkdir would create it
        for name, text in files.items():
            fd = os.open(staging / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            try:
                _write_all(fd, text.encode("utf-8"))
            finally:
                os.close(fd)
        if existing:
            for name in files:
                os.replace(staging / name, directory / name)
                replaced += 1
            staging.rmdir()
            for name in listed - set(files):  # an earlier emit's, which this one does not write
                (directory / name).unlink(missing_ok=True)
        else:
            os.rename(staging, directory)
        staging = None
    except OSError as e:
        what = f"{e.strerror} ({e.filename})" if e.strerror and e.filename else (e.strerror or str(e))
        done = f"{replaced} of its files were replaced" if replaced else "nothing was written there"
        raise EmitError(f"cannot write the source tree {directory}: {what}; {done}") from e
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return directory


def _listed(directory: Path) -> set[str]:
    """The plain file names an earlier `write_tree` listed in `directory` (none without its list)."""
    try:
        lines = (directory / TREE_LIST).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return set()
    return {n for n in lines if n and Path(n).name == n and n not in (".", "..")}


def _written_by_msc(path: Path) -> bool:
    """Whether a file that may be replaced is msc's: absent, or naming msc in its first 256 bytes
    (every file msc emits does; a tree emitted before TREE_LIST existed is recognised so)."""
    if not path.exists():
        return True
    try:
        with open(path, "rb") as f:
            return path.is_file() and b"msc" in f.read(256)
    except OSError:
        return False


@functools.lru_cache(maxsize=1)
def generator_fingerprint() -> str:
    """A hash of the code generator's own sources (targets, passes, printers, templates, IR, PolyIR,
    schedules, the platforms' cost models): a changed generator never reuses an indexed kernel or a
    tuning choice. Taken once per process, so it names the code the process runs: a generator
    edited while a process runs does not index that process's kernels under the edited code."""
    package = Path(__file__).resolve().parents[1]
    files = sorted(p for layer in ("ir", "poly", "codegen", "targets") for p in (package / layer).rglob("*")
                   if p.is_file() and p.suffix in (".py", ".j2", ".h", ".c"))
    h = hashlib.sha256(__version__.encode())
    for f in files:
        h.update(str(f.relative_to(package)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()
