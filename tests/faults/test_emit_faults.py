"""Faults while writing files: emitted trees and every other file msc writes
get the umask's mode, as open() would give them; a full disk or a read-only
directory leaves no partial tree under the target name and gives EmitError."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from conftest import heat

import msc.runtime.build as build
from msc.errors import EmitError

TREE = [".msc-files", "Makefile", "kernel.c", "main.c", "npy.h"]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o027, 0o002], ids=oct)
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def test_emitted_tree_gets_the_umask_mode(tmp_path, umask):
    out = heat.emit("openmp", tmp_path / "heat")
    assert sorted(p.name for p in out.iterdir()) == TREE
    assert _mode(out) == 0o777 & ~umask
    for p in out.iterdir():
        assert _mode(p) == 0o666 & ~umask, p
    again = heat.emit("openmp", out)  # rewriting an existing tree: the same modes
    assert all(_mode(p) == 0o666 & ~umask for p in again.iterdir())


def test_atomic_writes_get_the_umask_mode(tmp_path, umask):
    """The helper behind the caches, pictures and JSON reports."""
    build.atomic_write_bytes(tmp_path / "picture.png", b"\x89PNG")
    assert _mode(tmp_path / "picture.png") == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["picture.png"]


def _full_disk_after(monkeypatch, writes: int) -> None:
    """The `writes`+1-th file write fails as on a full disk."""
    real = build._write_all
    done = []

    def write(fd: int, data: bytes) -> None:
        if len(done) >= writes:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        done.append(fd)
        real(fd, data)

    monkeypatch.setattr(build, "_write_all", write)


def test_full_disk_leaves_no_partial_tree(tmp_path, monkeypatch):
    _full_disk_after(monkeypatch, 2)
    with pytest.raises(EmitError, match="No space left on device.*nothing was written there"):
        heat.emit("openmp", tmp_path / "heat")
    assert list(tmp_path.iterdir()) == []  # neither the tree nor its staging directory


def test_full_disk_keeps_an_existing_tree(tmp_path, monkeypatch):
    out = heat.emit("openmp", tmp_path / "heat")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "main.c").write_text("/* edited */\n")
    before["main.c"] = b"/* edited */\n"
    _full_disk_after(monkeypatch, 1)
    with pytest.raises(EmitError, match="No space left on device"):
        heat.emit("openmp+mpi", out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["heat"]


def test_a_file_msc_did_not_write_is_never_replaced(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "main.c").write_text("int main(void) { return 0; }\n")  # the user's own
    with pytest.raises(EmitError, match="main.c there was not written by msc and would be replaced; emit into a new "
                                        "folder, or move them away; nothing was written there"):
        heat.emit("openmp", out)
    assert [p.name for p in out.iterdir()] == ["main.c"] and "return 0" in (out / "main.c").read_text()


def test_emitting_again_removes_the_earlier_emit_s_files_it_does_not_write(tmp_path):
    out = heat.emit("openmp+mpi", tmp_path / "heat")
    assert {"halo.c", "halo.h"} <= {p.name for p in out.iterdir()}
    (out / "notes.txt").write_text("mine\n")
    heat.emit("openmp", out)
    assert sorted(p.name for p in out.iterdir()) == sorted(TREE + ["notes.txt"])
    (out / build.TREE_LIST).unlink()  # a tree emitted before the list existed: recognised by its headers
    assert sorted(p.name for p in heat.emit("openmp", out).iterdir()) == sorted(TREE + ["notes.txt"])


def test_read_only_directory(tmp_path, deny_write):
    parent = tmp_path / "shared"
    parent.mkdir()
    deny_write(parent)
    with pytest.raises(EmitError, match=f"cannot write the source tree {parent / 'heat'}: Permission denied"):
        heat.emit("openmp", parent / "heat")
    assert list(parent.iterdir()) == []


def test_target_is_a_file(tmp_path):
    (tmp_path / "heat").write_text("not a directory")
    with pytest.raises(EmitError, match="cannot write the source tree"):
        heat.emit("openmp", tmp_path / "heat")
    assert (tmp_path / "heat").read_text() == "not a directory"
    assert [p.name for p in tmp_path.iterdir()] == ["heat"]


def test_read_only_existing_tree(tmp_path, deny_write):
    out = heat.emit("openmp", tmp_path / "heat")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    deny_write(out)
    with pytest.raises(EmitError, match="Permission denied.*nothing was written there"):
        heat.emit("openmp", out, dtype="float32")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
