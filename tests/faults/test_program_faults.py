"""Faults met by the emitted standalone program: --help, bad .npy input (each
a one-line error naming the file), an --out write that fails (no half file),
and arrays too large for the machine's memory (refused before allocation)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import diffuse

from msc.arguments import memory_bytes


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
