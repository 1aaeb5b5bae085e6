"""The JIT build cache: keyed by source and flags, atomic under concurrent
builds, and clear about compiler failures."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import msc
from msc.errors import CompileError
from msc.runtime import build_shared_library, load_library
from msc.runtime.build import DEFAULT_CFLAGS

SOURCE = "long msc_answer(long a) { return a * 2 + %d; }\n"


def _build_and_call(args: tuple[str, int]) -> int:
    cache, salt = args
    os.environ["MSC_CACHE_DIR"] = cache
    lib = load_library(build_shared_library(SOURCE % salt, "answer"))
    return int(lib.msc_answer(20))


def test_cache_dir_setting_and_reuse(tmp_path, monkeypatch):
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    first = build_shared_library(SOURCE % 1, "answer")
    assert first.parent == tmp_path and first.exists()
    mtime = first.stat().st_mtime_ns
    assert build_shared_library(SOURCE % 1, "answer") == first
    assert first.stat().st_mtime_ns == mtime  # not rebuilt
    assert build_shared_library(SOURCE % 2, "answer") != first  # source is in the key
    assert build_shared_library(SOURCE % 1, "answer", flags=(*DEFAULT_CFLAGS, "-DX")) != first  # so are flags


def test_concurrent_builds_of_one_kernel(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.map(_build_and_call, [(str(tmp_path), 7)] * 8)
    assert results == [47] * 8
    assert len(list(tmp_path.glob("answer-*.so"))) == 1
    assert not list(tmp_path.glob(".answer-*.so"))  # no temporary left behind


def test_compile_error_carries_output_and_source(tmp_path, monkeypatch):
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    with pytest.raises(CompileError) as info:
        build_shared_library("int broken( { return; }\n", "broken")
    err = info.value
    assert "error" in err.output
    assert Path(err.source_path).read_text().startswith("int broken(")
    assert err.source_path in str(err)
    assert not list(tmp_path.glob("*.so")) and not list(tmp_path.glob(".broken-*.so"))


def test_missing_compiler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    with pytest.raises(CompileError, match="C compiler 'no-such-cc' not found"):
        build_shared_library(SOURCE % 3, "answer", cc="no-such-cc")


def test_generator_fingerprint_names_the_code_the_process_runs(tmp_path):
    """The kernel index and the tuning cache are keyed by a hash of the generator's sources,
    taken once per process: a generator file edited while a process runs (here, in a copy
    of the package) leaves that process's fingerprint as it was, so the kernels the process
    still generates with the code it loaded are never indexed under the edited code's key.
    A new process sees the edit."""
    shutil.copytree(Path(msc.__file__).parent, tmp_path / "msc", ignore=shutil.ignore_patterns("__pycache__"))
    edited = tmp_path / "msc" / "targets" / "node.py"
    script = ("from pathlib import Path; from msc.runtime.build import generator_fingerprint as f; "
              f"a = f(); p = Path({str(edited)!r}); p.write_text(p.read_text() + '\\n# edited\\n'); "
              "print(a, f())")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    first, during = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                                   env=env, cwd=tmp_path).stdout.split()
    assert during == first
    fresh = "from msc.runtime.build import generator_fingerprint as f; print(f())"
    after = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True, check=True,
                           env=env, cwd=tmp_path).stdout.strip()
    assert after != first


def test_compiled_templates_follow_the_cache_directory_and_survive_its_removal(tmp_path, monkeypatch):
    """Templates compiled in one cache directory, then in another set later in the same process; a
    template compiled again after its directory was removed renders as before (the compiled copy is
    simply not kept)."""
    from msc.targets.templates_env import environment, render

    first, second = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv("MSC_CACHE_DIR", str(first))
    text = render("npy.h")
    assert list((first / "templates").iterdir())
    monkeypatch.setenv("MSC_CACHE_DIR", str(second))
    assert render("npy.h") == text and list((second / "templates").iterdir())
    shutil.rmtree(second)
    environment().cache.clear()  # as when a template changes on disk: jinja2 compiles it again
    assert render("npy.h") == text
