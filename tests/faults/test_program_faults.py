"""Faults met by the emitted standalone program: --help, bad .npy input (each
a one-line error naming the file), an --out write that fails (no half file),
arrays too large for the machine's memory (refused before allocation), and,
for the openmp, athread (emulated) and cuda (emulated, and nvcc's build on a
machine without a GPU) programs, arguments that are not numbers and a kernel
that fails: an error, no throughput line and no output file."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from conftest import diffuse, heat

from msc.ir.arguments import memory_bytes
from msc.targets.gpu.cuda import device_arch


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    out = diffuse.emit("openmp", tmp_path_factory.mktemp("emit") / "diffuse")
    proc = subprocess.run(["make", "-s", "-C", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out / "diffuse"


def _run(program: Path, *args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(program), "--steps", "3", *args], capture_output=True, text=True, **kwargs)


def _inputs(tmp: Path, u: np.ndarray, c: np.ndarray | None = None) -> list[str]:
    np.save(tmp / "c.npy", np.full(u.shape, 0.1) if c is None else c)
    return ["--in", f"u={tmp / 'u.npy'}", "--in", f"c={tmp / 'c.npy'}"]


def test_help(program):
    proc = subprocess.run([str(program), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == ""
    for text in ("Usage: diffuse --steps N", "--in u=FILE.npy", "--in c=FILE.npy", "time-invariant input",
                 "--out u=FILE.npy", "float64 ('<f8')", "shape (X, Y) with x first", "width (1, 1)",
                 "at least (3, 3)"):
        assert text in proc.stdout, text
    assert subprocess.run([str(program), "-h"], capture_output=True, text=True).stdout == proc.stdout


def _write(path: Path, fault: str) -> str:
    """Write a bad u.npy; return what the error must say."""
    good = np.random.default_rng(0).random((12, 14))
    if fault == "truncated":
        np.save(path, good)
        path.write_bytes(path.read_bytes()[:700])
        return "bytes of data where its header's shape needs 1344 (truncated or damaged)"
    if fault == "not-npy":
        path.write_bytes(b"x,y\n1,2\n")
        return "not a .npy file"
    if fault == "empty":
        path.write_bytes(b"")
        return "not a .npy file"
    if fault == "header-cut":
        np.save(path, good)
        path.write_bytes(path.read_bytes()[:30])
        return "truncated .npy header"
    if fault == "int64":
        np.save(path, good.astype(np.int64))
        return "dtype '<i8', expected '<f8' (float64); save it as a.astype(numpy.float64)"
    if fault == "float32":
        np.save(path, good.astype(np.float32))
        return "dtype '<f4', expected '<f8'"
    if fault == "big-endian":
        np.save(path, good.astype(">f8"))
        return "dtype '>f8', expected '<f8'"
    if fault == "fortran":
        np.save(path, np.asfortranarray(good))
        return "Fortran order"
    if fault == "3d":
        np.save(path, good.reshape(2, 6, 14))
        return "a 3D array, expected 2D"
    if fault == "missing":
        return "cannot open it: No such file or directory"
    raise AssertionError(fault)


FAULTS = ["truncated", "not-npy", "empty", "header-cut", "int64", "float32", "big-endian", "fortran", "3d", "missing"]


@pytest.mark.parametrize("fault", FAULTS)
def test_bad_npy_input(program, tmp_path, fault):
    want = _write(tmp_path / "u.npy", fault)
    proc = _run(program, *_inputs(tmp_path, np.zeros((12, 14))))
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr  # one line
    assert proc.stderr.startswith(f"diffuse: {tmp_path / 'u.npy'} (--in u): "), proc.stderr
    assert want in proc.stderr, proc.stderr


def test_shapes_that_differ(program, tmp_path):
    np.save(tmp_path / "u.npy", np.zeros((12, 14)))
    proc = _run(program, *_inputs(tmp_path, np.zeros((12, 14)), c=np.zeros((12, 15))))
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1
    assert f"{tmp_path / 'c.npy'} (--in c): shape (12, 15), but {tmp_path / 'u.npy'} has (12, 14)" in proc.stderr


def test_too_small(program, tmp_path):
    np.save(tmp_path / "u.npy", np.zeros((2, 14)))
    proc = _run(program, *_inputs(tmp_path, np.zeros((2, 14))))
    assert proc.returncode != 0
    assert "shape (2, 14) is too small for the stencil: it needs at least (3, 3)" in proc.stderr


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_failed_out_write_leaves_no_file(program, tmp_path):
    u = np.random.default_rng(1).random((40, 40))
    np.save(tmp_path / "u.npy", u)
    args = [*_inputs(tmp_path, u), "--out", f"u={tmp_path / 'out.npy'}"]
    proc = _run(program, *args, preexec_fn=_limit_file_size)
    assert proc.returncode != 0 and f"cannot write {tmp_path / 'out.npy'}" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npy", "u.npy"]  # no half file, no temporary
    proc = _run(program, *args)  # the same run without the limit writes it whole
    assert proc.returncode == 0 and np.load(tmp_path / "out.npy").shape == u.shape
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npy", "out.npy", "u.npy"]


def test_out_file_gets_the_umask_mode(program, tmp_path):
    u = np.zeros((8, 8))
    np.save(tmp_path / "u.npy", u)
    old = os.umask(0o027)
    try:
        proc = _run(program, *_inputs(tmp_path, u), "--out", f"u={tmp_path / 'out.npy'}")
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.npy").stat().st_mode & 0o777 == 0o640


def test_input_larger_than_memory(program, tmp_path):
    """A (sparse) .npy whose data exceed the machine's memory is refused before it is read."""
    n = int((2 * memory_bytes() / 8) ** 0.5) + 1
    header = np.lib.format.header_data_from_array_1_0(np.zeros((1, 1)))
    header["shape"] = (n, n)
    path = tmp_path / "u.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.truncate(f.tell() + 8 * n * n)
    np.save(tmp_path / "c.npy", np.zeros((3, 3)))
    proc = _run(program, "--in", f"u={path}", "--in", f"c={tmp_path / 'c.npy'}")
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1
    assert "GiB of data exceed this machine's" in proc.stderr and str(path) in proc.stderr


# -- arguments that are not numbers, and kernels that fail, in every single-process program --

MAKE_ARGUMENTS = {"openmp": [], "athread": ["EMULATE=1"], "cuda": ["emulate"]}


@pytest.fixture(scope="module")
def heat_program(tmp_path_factory) -> Callable[[str], Path]:
    """heat's program for a target, emitted and built once: nvcc's for "cuda-nvcc", else the CPU build."""
    built: dict[str, Path] = {}

    def get(target: str) -> Path:
        if target not in built:
            directory = heat.emit(target.split("-")[0], tmp_path_factory.mktemp(target) / "heat")
            make = ["ARCH=sm_80"] if target == "cuda-nvcc" else MAKE_ARGUMENTS[target]
            proc = subprocess.run(["make", "-s", "-C", str(directory), *make], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
            built[target] = directory / ("heat-emulated" if target == "cuda" else "heat")
        return built[target]

    return get


def _heat_run(program: Path, tmp: Path, *args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    """Run heat on a 12 x 14 array with --out; `args` (option, value pairs) stand in for the good value of each
    option they give (a program refuses an option given twice)."""
    np.save(tmp / "u.npy", np.random.default_rng(2).random((12, 14)))
    good = {"--steps": "3", "--param": "alpha=0.1", "--in": f"u={tmp / 'u.npy'}", "--out": f"u={tmp / 'out.npy'}"}
    options = {**good, **dict(zip(args[::2], args[1::2]))}
    return subprocess.run([str(program), *(a for pair in options.items() for a in pair)], capture_output=True,
                          text=True, **kwargs)


def _refused(proc: subprocess.CompletedProcess[str], tmp: Path, message: str) -> None:
    """Exit 2 with `message` as the last line; no throughput, no output file."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == "", proc.stdout
    assert proc.stderr.splitlines()[-1] == message, proc.stderr
    assert sorted(p.name for p in tmp.iterdir()) == ["u.npy"]


@pytest.mark.parametrize("target", list(MAKE_ARGUMENTS))
@pytest.mark.parametrize("value, what", [("abc", "a number"), ("0.04xyz", "a number"), ("", "a number"),
                                         ("inf", "a finite number"), ("nan", "a finite number")])
def test_param_that_is_not_a_number(heat_program, target, value, what, tmp_path):
    proc = _heat_run(heat_program(target), tmp_path, "--param", f"alpha={value}")
    _refused(proc, tmp_path, f"heat: --param alpha: '{value}' is not {what}")


@pytest.mark.parametrize("target", list(MAKE_ARGUMENTS))
@pytest.mark.parametrize("value", ["-5", "5x", "", "2.5"])
def test_steps_that_are_not_a_whole_number(heat_program, target, value, tmp_path):
    proc = _heat_run(heat_program(target), tmp_path, "--steps", value)
    _refused(proc, tmp_path, f"heat: --steps must be a whole number >= 0, got '{value}'")


def test_threads_that_are_not_a_whole_number(heat_program, tmp_path):
    proc = _heat_run(heat_program("openmp"), tmp_path, "--threads", "two")
    _refused(proc, tmp_path, "heat: --threads must be a whole number >= 0, got 'two'")


def test_out_of_an_input_field_is_refused_before_the_run(program, tmp_path):
    u = np.zeros((8, 8))
    np.save(tmp_path / "u.npy", u)
    proc = _run(program, *_inputs(tmp_path, u), "--out", f"u={tmp_path / 'u_out.npy'}",
                "--out", f"c={tmp_path / 'c_out.npy'}")
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr == "diffuse: not a computed field: c\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npy", "u.npy"]


def test_failed_emulated_cuda_run_writes_nothing(heat_program, tmp_path):
    """Every cudaMalloc of the CUDA emulator fails (its aligned_alloc, replaced by LD_PRELOAD)."""
    (tmp_path / "no_memory.c").write_text("#include <errno.h>\n#include <stddef.h>\n"
                                          "void *aligned_alloc(size_t alignment, size_t size)\n"
                                          "{ (void)alignment; (void)size; errno = ENOMEM; return NULL; }\n")
    shim = tmp_path / "no_memory.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(tmp_path / "no_memory.c")], check=True)
    runs = tmp_path / "runs"
    runs.mkdir()
    proc = _heat_run(heat_program("cuda"), runs, env=dict(os.environ, LD_PRELOAD=str(shim)))
    assert "msc: CUDA error at kernel.cu" in proc.stderr and ": out of memory" in proc.stderr
    _refused(proc, runs, "heat: the kernel failed (msc_run returned 2); no output written")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA compiler) is not on PATH")
def test_nvcc_program_without_a_gpu_writes_nothing(heat_program, tmp_path):
    if device_arch() is not None:
        pytest.skip("a GPU is present: the nvcc program runs (test_cuda_target.py checks its output there)")
    proc = _heat_run(heat_program("cuda-nvcc"), tmp_path)
    assert "msc: CUDA error at kernel.cu" in proc.stderr, proc.stderr
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout)
    assert "heat: the kernel failed (msc_run returned " in proc.stderr.splitlines()[-1], proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["u.npy"]
