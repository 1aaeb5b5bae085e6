"""Faults of the kernel cache and the tuning cache: damaged, truncated and
unreadable entries are rebuilt with one warning; a build killed midway leaves
no entry; concurrent processes compiling one new stencil all succeed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import StandInKernel, heat

from msc.errors import CacheWarning
from msc.runtime.build import build_shared_library, load_library

SOURCE = "long msc_answer(long a) { return a * 3 + %d; }\n"


def _build(salt: int) -> tuple[Path, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lib = build_shared_library(SOURCE % salt, "answer")
    return lib, [w for w in caught if issubclass(w.category, CacheWarning)]


def _damage_truncate(lib: Path) -> None:
    lib.write_bytes(lib.read_bytes()[:1000])


def _damage_flip(lib: Path) -> None:
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(bytes(data))


def _damage_empty(lib: Path) -> None:
    lib.write_bytes(b"")


@pytest.mark.parametrize("damage", [_damage_truncate, _damage_flip, _damage_empty],
                         ids=["truncated", "corrupted", "empty"])
def test_damaged_library_is_rebuilt_with_one_warning(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    lib, said = _build(11)
    assert not said
    damage(lib)
    again, said = _build(11)
    assert again == lib and len(said) == 1
    assert "damaged" in str(said[0].message) and str(lib) in str(said[0].message)
    assert load_library(again).msc_answer(5) == 26
    assert _build(11)[1] == []  # rebuilt once: quiet from then on


def test_unreadable_library_is_rebuilt(tmp_path, monkeypatch, deny_read):
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    lib, _ = _build(12)
    deny_read(lib)
    again, said = _build(12)
    assert len(said) == 1 and "unreadable" in str(said[0].message)
    monkeypatch.undo()
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    assert load_library(again).msc_answer(5) == 27


def test_library_without_its_digest_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    lib, _ = _build(13)
    lib.with_suffix(".sha256").unlink()
    _, said = _build(13)
    assert len(said) == 1 and "digest" in str(said[0].message)


def test_damaged_athread_program_is_rebuilt_by_the_same_cache_step(tmp_path, monkeypatch):
    """athread's emulated programs go through the one compile-and-cache step
    (cached_build) as the C and CUDA libraries do: a damaged program is rebuilt
    with one warning, and the emitted tree stays beside it for reading."""
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    u = np.random.default_rng(0).random((20, 24))
    expected = heat.reference(steps=3, u=u, alpha=0.1)["u"]
    kernel = heat.compile(target="athread")
    program = kernel.program
    assert program.with_suffix(".sha256").is_file() and (program.parent / program.name.split("-", 1)[1] / "slave.c").is_file()
    program.write_bytes(program.read_bytes()[:2000])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = heat.compile(target="athread")
    said = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert again.program == program and len(said) == 1 and "damaged" in str(said[0].message)
    np.testing.assert_allclose(again.run(steps=3, u=u, alpha=0.1)["u"], expected, rtol=1e-12, atol=0)


def test_truncated_kernel_in_a_new_process(tmp_path):
    """The reported fault: a truncated cached kernel made every later compile of
    the stencil fail with a bare OSError; now the next process rebuilds it."""
    script = textwrap.dedent("""
        import numpy as np
        from conftest import heat
        u = np.random.default_rng(0).random((20, 24))
        out = heat.compile().run(steps=4, u=u, alpha=0.1)["u"]
        print(float(np.max(np.abs(out - heat.reference(steps=4, u=u, alpha=0.1)["u"]))))
    """)
    env = dict(os.environ, MSC_CACHE_DIR=str(tmp_path), PYTHONPATH=str(Path(__file__).parent))
    first = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr
    (lib,) = tmp_path.glob("msc_heat-*.so")
    lib.write_bytes(lib.read_bytes()[:4096])
    second = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert second.returncode == 0, second.stderr
    assert float(second.stdout) < 1e-12
    assert second.stderr.count("damaged") == 1 and "CacheWarning" in second.stderr


def test_build_killed_midway_leaves_no_entry(tmp_path):
    """A compiler that hangs is killed with its process; nothing half-built is
    left under the entry's name, and the next build succeeds and cleans up."""
    marker = tmp_path / "compiling"
    cc = tmp_path / "slowcc"
    cc.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && exec gcc --version\n"
                  f"[ -n \"$MSC_TEST_HANG\" ] && touch {marker} && sleep 60\nexec gcc \"$@\"\n")
    cc.chmod(0o755)
    cache = tmp_path / "cache"
    script = ("from msc.runtime import build_shared_library; "
              f"build_shared_library({SOURCE % 14!r}, 'answer', cc={str(cc)!r})")
    env = dict(os.environ, MSC_CACHE_DIR=str(cache), MSC_TEST_HANG="1")
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    try:
        for _ in range(600):
            if marker.exists():
                break
            time.sleep(0.05)
        assert marker.exists(), "the build never started"
        os.killpg(proc.pid, signal.SIGKILL)  # the Python process and the compiler under it
    finally:
        proc.wait()
    assert not list(cache.glob("answer-*.so")) and not list(cache.glob("answer-*.sha256"))
    assert list(cache.glob(".answer-*.so"))  # the killed build's temporary output
    env.pop("MSC_TEST_HANG")
    done = subprocess.run([sys.executable, "-c", script + "; print('built')"], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "built" in done.stdout, done.stderr
    assert len(list(cache.glob("answer-*.so"))) == 1
    assert not list(cache.glob(".answer-*.so"))  # the stale temporary was removed under the lock


def test_eight_processes_compile_one_new_stencil(tmp_path):
    script = textwrap.dedent("""
        import numpy as np
        from conftest import heat
        u = np.random.default_rng(1).random((18, 21))
        out = heat.compile().run(steps=3, u=u, alpha=0.05)["u"]
        ok = np.allclose(out, heat.reference(steps=3, u=u, alpha=0.05)["u"], rtol=1e-12, atol=0)
        print("ok" if ok else "wrong")
    """)
    env = dict(os.environ, MSC_CACHE_DIR=str(tmp_path), PYTHONPATH=str(Path(__file__).parent))
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(8)]
    outcomes = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [err for _, err in outcomes]
    assert [out.strip() for out, _ in outcomes] == ["ok"] * 8
    assert len(list(tmp_path.glob("msc_heat-*.so"))) == 1
    assert not list(tmp_path.glob(".msc_heat-*.so")) and not any("damaged" in err for _, err in outcomes)


# -- the tuning cache ---------------------------------------------------------

class _FixedKernel(StandInKernel):
    """Stands in for a compiled kernel: 1 ms per step, whatever it runs."""

    def run(self, steps: int, threads: int | None = None, **inputs) -> dict:
        self.last_run.seconds = steps * 1e-3
        return {"u": inputs["u"]}


def _tune(tmp_path: Path) -> tuple[object, list[warnings.WarningMessage]]:
    from msc.tune.tuner import AutoKernel

    kernel = AutoKernel(heat.poly(), lambda schedule, threads: _FixedKernel(), threads=1, budget_s=0.0, echo=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel.run(steps=4, u=np.zeros((10, 10)), alpha=0.1)
    return kernel.report, [w for w in caught if issubclass(w.category, CacheWarning)]


def _cache_file(tmp_path: Path) -> Path:
    return tmp_path / "tuning" / "stencils.json"


@pytest.mark.parametrize("damage", [
    lambda text: text[: len(text) // 2],  # truncated
    lambda text: "[1, 2, 3]",  # valid JSON of the wrong shape
    lambda text: text.replace('"schedule_text": "', '"schedule_text": "tile(q=', 1),  # a hand-edited schedule
    lambda text: text.replace('"ms_per_step": ', '"ms_per_step": "fast", "was": ', 1),  # a hand-edited timing
], ids=["truncated", "not-an-object", "bad-schedule", "bad-timing"])
def test_damaged_tuning_cache_is_rebuilt_with_one_message(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    report, said = _tune(tmp_path)
    assert not report.from_cache and not said
    path = _cache_file(tmp_path)
    path.write_text(damage(path.read_text()))
    report, said = _tune(tmp_path)
    assert not report.from_cache and len(said) == 1, [str(w.message) for w in said]
    assert str(path) in str(said[0].message)
    json.loads(path.read_text())  # rewritten whole
    report, said = _tune(tmp_path)
    assert report.from_cache and not said


@pytest.mark.parametrize("schedule", ["Schedule().parallel('t')", "Schedule().tensor_cores('fp64')"])
def test_a_cached_schedule_the_stencil_refuses_is_a_damaged_entry(tmp_path, monkeypatch, schedule):
    """A hand-edited entry that parses but that the stencil or target refuses made every run raise the
    schedule's error, without a word of the cache; it is a damaged entry, tuned again."""
    from msc.tune.tuner import AutoKernel

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))

    def tuned() -> tuple[object, list[warnings.WarningMessage]]:
        kernel = AutoKernel(heat.poly(), lambda s, n: heat.compile(schedule=s, threads=n), threads=1, budget_s=0.0,
                            echo=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kernel.run(steps=4, u=np.zeros((10, 10)), alpha=0.1)
        return kernel.report, [w for w in caught if issubclass(w.category, CacheWarning)]

    tuned()
    path = _cache_file(tmp_path)
    path.write_text(re.sub(r'"schedule_text": "[^"]*"', json.dumps({"schedule_text": schedule})[1:-1],
                           path.read_text()))
    report, said = tuned()
    assert not report.from_cache and len(said) == 1
    assert "damaged entry for 'heat' (ScheduleError" in str(said[0].message)
    report, said = tuned()
    assert report.from_cache and not said


def test_processes_tuning_at_once_keep_each_others_entries(tmp_path):
    """Four processes store tuning results for four problem sizes at once: all four stay."""
    script = textwrap.dedent("""
        import sys
        import numpy as np
        from conftest import StandInKernel, heat
        from msc.tune.tuner import AutoKernel

        class Kernel(StandInKernel):
            def run(self, steps, threads=None, **inputs):
                self.last_run.seconds = 1e-3
                return {}

        n = int(sys.argv[1])
        AutoKernel(heat.poly(), lambda s, t: Kernel(), threads=1, budget_s=0.0, echo=False).run(
            steps=4, u=np.zeros((10 + n, 10)), alpha=0.1)
    """)
    env = dict(os.environ, MSC_CACHE_DIR=str(tmp_path), PYTHONPATH=str(Path(__file__).parent))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(n)], env=env) for n in range(4)]
    assert [p.wait(timeout=300) for p in procs] == [0] * 4
    entries = json.loads(_cache_file(tmp_path).read_text()).values()
    assert sorted(e["shape"][0] for e in entries) == [10, 11, 12, 13]
