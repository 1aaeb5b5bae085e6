"""The `msc` command: one-line errors, emit/run/bench on a user's file, demo."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from msc.cli import load_source, main

CHECKED = re.compile(r"max relative difference to the reference (\S+) \(tolerance \S+\): ok")


def assert_agrees_to_rounding(out: str) -> None:
    """`--check` passed, the run a few roundings from the reference (the CPU kernels fuse
    multiply-adds, which numpy rounds apart: ADR 0066)."""
    found = CHECKED.findall(out)
    assert found and all(float(d) <= 1e-15 for d in found), out

STENCIL_FILE = '''
import msc
from msc import t, x, y

@msc.stencil
def heat(u, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1]
                                           - 4 * u[t, x, y])

@msc.stencil
def line(u):
    u[t + 1, x] = (u[t, x - 1] + u[t, x + 1]) / 2

def undecorated(u):
    u[t + 1, x] = u[t, x]

def main():
    raise SystemExit("main() was called")

empty = None
'''


@pytest.fixture
def user_file(tmp_path) -> Path:
    path = tmp_path / "user_stencils.py"
    path.write_text(STENCIL_FILE)
    return path


@pytest.fixture
def broken_file(tmp_path) -> Path:
    path = tmp_path / "broken.py"
    path.write_text("import msc\nfrom msc import t, x\n\n@msc.stencil\ndef broken(u):\n    u[t + 1, x] = u[t, 2 * x]\n")
    return path


@pytest.fixture
def u0_file(tmp_path) -> Path:
    path = tmp_path / "u0.npy"
    np.save(path, np.random.default_rng(2).random((12, 13)))
    return path


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("msc 0.")


def test_run_writes_npy_and_checks(user_file, tmp_path, capsys):
    u0 = np.random.default_rng(0).random((20, 21))
    np.save(tmp_path / "u0.npy", u0)
    out = tmp_path / "u.npy"
    code = main(["run", f"{user_file}:heat", "--steps", "5", "--param", "alpha=0.1",
                 "--in", f"u={tmp_path / 'u0.npy'}", "--out", f"u={out}", "--check"])
    assert code == 0
    text = capsys.readouterr().out
    assert "GStencil/s" in text and "max relative difference to the reference" in text
    import msc

    want = load_source(f"{user_file}:heat").reference(steps=5, u=u0, alpha=0.1)["u"]
    np.testing.assert_allclose(np.load(out), want, rtol=1e-12)
    assert msc.__version__


@pytest.mark.parametrize("change, said", [(lambda u: u * (1 + 1e-6), "e-06 (tolerance 1e-10): FAILED"),
                                           (lambda u: np.where(u > 0.5, np.nan, u), "NaN or infinity where")])
def test_run_check_fails_with_exit_status_1_when_the_result_is_off(user_file, tmp_path, capsys, monkeypatch,
                                                                    change, said):
    """--check used to print the difference and exit 0 whatever it was."""
    from msc.stencil import Stencil

    np.save(tmp_path / "u0.npy", np.random.default_rng(0).random((20, 21)))
    reference = Stencil.reference
    monkeypatch.setattr(Stencil, "reference", lambda self, *a, **k: {n: change(v) for n, v in
                                                                      reference(self, *a, **k).items()})
    code = main(["run", f"{user_file}:heat", "--steps", "5", "--param", "alpha=0.1",
                 "--in", f"u={tmp_path / 'u0.npy'}", "--check"])
    captured = capsys.readouterr()
    assert code == 1 and said in captured.out and "msc: --check failed for u" in captured.err


def test_in_and_out_paths_take_commas_and_a_quoted_home(user_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    u0 = np.random.default_rng(3).random((10, 11))
    np.save(tmp_path / "a,b.npy", u0)  # a comma inside a path; FILE.npy,FILE.npy still gives levels
    code = main(["run", f"{user_file}:heat", "--steps", "2", "--param", "alpha=0.1",
                 "--in", f"u={tmp_path / 'a,b.npy'}", "--out", "u=~/out/u.npy"])
    assert code == 0 and (tmp_path / "out" / "u.npy").is_file() and not (tmp_path / "~").exists()


def test_emit_writes_a_tree(user_file, tmp_path, capsys):
    assert main(["emit", f"{user_file}:heat", "--target", "openmp", "-o", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "Makefile").exists() and (tmp_path / "out" / "kernel.c").exists()
    assert "make -C" in capsys.readouterr().out


def test_bench_writes_json(user_file, tmp_path):
    report = tmp_path / "bench.json"
    assert main(["bench", f"{user_file}:heat", "--shape", "64x64", "--steps", "5", "--repeat", "1",
                 "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["stencil"] == "heat" and data["gstencils_per_s"] > 0


def test_bench_says_the_threads_the_run_used_not_the_schedule_s(user_file, tmp_path, capsys):
    report = tmp_path / "bench.json"
    assert main(["bench", f"{user_file}:heat", "--shape", "64x64", "--steps", "5", "--repeat", "1", "--threads", "1",
                 "--schedule", "tile(x=16).with_threads(2)", "--json", str(report)]) == 0
    assert "Schedule().tile(x=16).with_threads(2) on 1 thread: " in capsys.readouterr().out
    assert json.loads(report.read_text())["threads"] == 1


def test_bench_on_athread_says_its_time_is_the_emulator_s(user_file, tmp_path, capsys):
    report = tmp_path / "bench.json"
    assert main(["bench", f"{user_file}:heat", "--target", "athread", "--shape", "10x10", "--steps", "2",
                 "--repeat", "1", "--json", str(report)]) == 0
    assert "under the athread emulator: a check of correctness, not a Sunway time" in capsys.readouterr().out
    assert json.loads(report.read_text())["emulated"] is True


def test_schedule_option_on_run_bench_and_emit(user_file, tmp_path, capsys):
    u0 = np.random.default_rng(1).random((30, 33))
    np.save(tmp_path / "u0.npy", u0)
    assert main(["run", f"{user_file}:heat", "--steps", "6", "--param", "alpha=0.1", "--in", f"u={tmp_path / 'u0.npy'}",
                 "--schedule", "time_tile(3, x=8).parallel('x_tile')", "--check"]) == 0
    assert_agrees_to_rounding(capsys.readouterr().out)
    report = tmp_path / "bench.json"
    assert main(["bench", f"{user_file}:heat", "--shape", "64x64", "--steps", "5", "--repeat", "1",
                 "--schedule", "Schedule().stream_stores().prefetch(64)", "--json", str(report)]) == 0
    assert json.loads(report.read_text())["schedule"] == "Schedule().stream_stores().prefetch(64)"
    assert main(["emit", f"{user_file}:heat", "-o", str(tmp_path / "out"), "--schedule", "tile(x=8, y=16)"]) == 0
    assert "Schedule: Schedule().tile(x=8, y=16)" in (tmp_path / "out" / "kernel.c").read_text()


@pytest.mark.parametrize(
    "argv, words",
    [
        (["emit", "nowhere.py:heat", "-o", "x"], "no such file: nowhere.py"),
        (["emit", "heat", "-o", "x"], "SOURCE must be path/file.py:NAME"),
        (["emit", "{file}:nothing", "-o", "x"], "has no function 'nothing'; its stencils: {file}:heat"),
        (["emit", "{file}:heat", "-o", ""], "-o/--output: give the directory to write (empty); '.' is this one"),
        (["emit", "{file}:heat", "-o", "{file}"], "cannot write the source tree {file}: it exists and is not a "
                                                  "directory; nothing was written"),
        (["emit", "{file}:undecorated", "-o", "x"],
         "{file}:undecorated is not a stencil (decorate it with @msc.stencil)"),
        (["emit", "{file}:msc", "-o", "x"], "{file}:msc is not a stencil (it is a module)"),
        (["emit", "{file}:heat", "--target", "fpga", "-o", "x"], "unknown target 'fpga'"),
        (["run", "{file}:heat", "--steps", "1", "--param", "alpha"], "--param expects NAME=VALUE"),
        (["run", "{file}:heat", "--steps", "1", "--param", "alpha=0.1"], "stencil 'heat': missing --in u=FILE.npy"),
        (["run", "{file}:heat", "--steps", "1", "--in", "u={u0}"], "stencil 'heat': missing --param alpha=VALUE"),
        (["run", "{file}:heat", "--steps", "1"], "stencil 'heat': missing --in u=FILE.npy --param alpha=VALUE"),
        (["run", "{file}:heat", "--steps", "1", "--in", "v={u0}"],
         "--in v: stencil 'heat' has no field 'v' (fields: u)"),
        (["bench", "{file}:heat", "--param", "beta=1"],
         "--param beta: stencil 'heat' has no parameter 'beta' (parameters: alpha)"),
        (["run", "{file}:heat", "--steps", "1", "--param", "alpha=0.04xyz"],
         "--param alpha: '0.04xyz' is not a number"),
        (["run", "{file}:heat", "--steps", "1", "--param", "alpha=nan"], "--param alpha: 'nan' is not a finite number"),
        (["run", "{file}:heat", "--steps", "1", "--in", "u=missing.npy", "--param", "alpha=1"],
         "cannot read missing.npy"),
        (["run", "{file}:heat", "--steps", "1", "--in", "u={file}", "--param", "alpha=1"],
         "cannot read {file}: not a .npy file"),
        (["run", "{file}:heat", "--steps", "1", "--in", "u={u0}", "--param", "alpha=1", "--param", "alpha=2"],
         "--param alpha is given twice (alpha=1 and alpha=2); give it once"),
        (["emit", "{file}:empty", "-o", "x"], "{file}:empty is not a stencil (it is a NoneType)"),
        (["bench", "{file}:heat", "--schedule", "tile(x=8).warp(2)"],
         "unknown primitive 'warp'; the primitives are tile,"),
        (["bench", "{file}:heat", "--schedule", "__import__('os')"], "unknown primitive '__import__'"),
        (["bench", "{file}:heat", "--schedule", "u.tile(x=4)"], "is not a chain of primitives"),
        (["bench", "{file}:heat", "--schedule", "tile(x=n)"],
         "the arguments of tile() must be numbers and quoted names"),
        (["bench", "{file}:line", "--shape", "8x8"], "--shape 8x8: stencil 'line' is 1D; give 1 size(s) like 1048576"),
        (["emit", "{file}:heat", "-o", "x", "--schedule", "auto"],
         "--schedule auto is tuned for a problem size when a kernel runs: `msc bench SOURCE --shape ... "
         "--schedule auto` prints the schedule it chooses"),
        (["show", "{file}:heat", "--schedule", "auto"], "--schedule auto is tuned for a problem size"),
        (["run", "{file}:heat", "--steps", "1", "--param", "alpha=0.1", "--in", "u={u0}", "--target", "openmp+mpi",
          "--schedule", "tile(x=8)"], "--target openmp+mpi runs here without a --schedule; `msc emit SOURCE --target"),
    ],
)
def test_failures_are_one_line_without_traceback(argv, words, user_file, u0_file, capsys):
    code = main([a.format(file=user_file, u0=u0_file) for a in argv])
    err = capsys.readouterr().err
    assert code != 0
    assert words.format(file=user_file) in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "compile(" not in err and "argument(s)" not in err  # no advice for Python callers


def test_a_folder_given_for_a_stencil_file_is_named(tmp_path, capsys):
    (tmp_path / "heat.msc").mkdir()
    assert main(["show", str(tmp_path / "heat.msc")]) == 1
    assert capsys.readouterr().err == f"msc: error: {tmp_path / 'heat.msc'} is a directory, not a stencil file\n"


def test_a_plain_function_is_not_called(user_file, capsys):
    assert main(["run", f"{user_file}:main", "--steps", "1"]) == 1
    assert capsys.readouterr().err == f"msc: error: {user_file}:main is not a stencil (decorate it with @msc.stencil)\n"


@pytest.mark.parametrize(
    "argv, words",
    [
        (["bench", "{file}:heat", "--shape", "ax3"], "argument --shape: expected sizes like 512x512, got 'ax3'"),
        (["bench", "{file}:heat", "--shape", "0x8"], "argument --shape: expected sizes >= 1 like 512x512, got '0x8'"),
        (["bench", "{file}:heat", "--steps", "0"], "argument --steps: expected a whole number >= 1, got '0'"),
        (["bench", "{file}:heat", "--repeat", "0"], "argument --repeat: expected a whole number >= 1, got '0'"),
        (["bench", "{file}:heat", "--repeat", "-1"], "argument --repeat: expected a whole number >= 1, got '-1'"),
        (["run", "{file}:heat", "--steps", "-1"], "argument --steps: expected a whole number >= 0, got '-1'"),
        (["run", "{file}:heat", "--steps", "2.5"], "argument --steps: expected a whole number >= 0, got '2.5'"),
        (["run", "{file}:heat", "--steps", "1", "--threads", "-2"],
         "argument --threads: expected a whole number >= 0, got '-2'"),
        (["demo", "--size", "0"], "argument --size: expected a whole number >= 3, got '0'"),
        (["demo", "--size", "-5"], "argument --size: expected a whole number >= 3, got '-5'"),
        (["demo", "pde", "--pde-size", "0"], "argument --pde-size: expected a whole number >= 3, got '0'"),
        (["demo", "--steps", "x"], "argument --steps: expected a whole number >= 0, got 'x'"),
    ],
)
def test_bad_counts_and_sizes_are_refused_when_parsed(argv, words, user_file, capsys):
    with pytest.raises(SystemExit) as info:
        main([a.format(file=user_file) for a in argv])
    assert info.value.code == 2
    assert words in capsys.readouterr().err


def test_debug_shows_the_traceback(broken_file):
    with pytest.raises(Exception, match="not an affine index"):
        main(["--debug", "emit", f"{broken_file}:broken", "-o", "x"])
    with pytest.raises(Exception, match="not an affine index"):
        main(["emit", f"{broken_file}:broken", "-o", "x", "--debug"])  # also after the subcommand


def test_definition_error_in_a_python_file(broken_file, capsys):
    assert main(["emit", f"{broken_file}:broken", "-o", "x"]) == 1
    assert "not an affine index" in capsys.readouterr().err


@pytest.mark.parametrize("target", ["openmp+mpi", "serial+mpi"])
def test_mpi_targets_run_without_a_schedule(target, user_file, u0_file, tmp_path, capsys):
    assert main(["run", f"{user_file}:heat", "--steps", "3", "--param", "alpha=0.1", "--in", f"u={u0_file}",
                 "--target", target, "--check"]) == 0
    assert_agrees_to_rounding(capsys.readouterr().out)
    report = tmp_path / "bench.json"
    assert main(["bench", f"{user_file}:heat", "--shape", "16x16", "--steps", "2", "--repeat", "1",
                 "--target", target, "--json", str(report)]) == 0
    assert json.loads(report.read_text())["schedule"] == "default"


def test_out_makes_missing_folders_and_is_checked_before_the_run(user_file, u0_file, tmp_path, capsys):
    out = tmp_path / "new" / "dir" / "u.npy"
    assert main(["run", f"{user_file}:heat", "--steps", "2", "--param", "alpha=0.1", "--in", f"u={u0_file}",
                 "--out", f"u={out}"]) == 0
    want = load_source(f"{user_file}:heat").compile().run(steps=2, u=np.load(u0_file), alpha=0.1)["u"]
    np.testing.assert_array_equal(np.load(out), want)  # the run's result, as it ran
    assert [p.name for p in out.parent.iterdir()] == ["u.npy"]  # no temporary left
    capsys.readouterr()
    (tmp_path / "file").write_text("")
    for path, words in [(tmp_path / "file" / "u.npy", "is not a writable directory"), (tmp_path, "is a directory")]:
        assert main(["run", f"{user_file}:heat", "--steps", "2", "--param", "alpha=0.1", "--in", f"u={u0_file}",
                     "--out", f"u={path}"]) == 1
        text = capsys.readouterr()
        assert words in text.err and "GStencil/s" not in text.out  # refused before the run


def test_in_files_are_converted_to_the_runs_dtype(user_file, u0_file, tmp_path, capsys):
    out = tmp_path / "u.npy"
    assert main(["run", f"{user_file}:heat", "--steps", "2", "--param", "alpha=0.1", "--in", f"u={u0_file}",
                 "--dtype", "float32", "--out", f"u={out}"]) == 0
    want = load_source(f"{user_file}:heat").reference(steps=2, dtype="float32", u=np.load(u0_file).astype(np.float32),
                                                      alpha=0.1)["u"]
    assert np.load(out).dtype == np.float32
    np.testing.assert_allclose(np.load(out), want, rtol=1e-6)
    ints = np.arange(12 * 13).reshape(12, 13)  # integers are real numbers too: converted as floats are
    np.save(tmp_path / "ints.npy", ints)
    assert main(["run", f"{user_file}:heat", "--steps", "2", "--param", "alpha=0.1", "--in",
                 f"u={tmp_path / 'ints.npy'}", "--out", f"u={out}"]) == 0
    want = load_source(f"{user_file}:heat").reference(steps=2, u=ints.astype(np.float64), alpha=0.1)["u"]
    np.testing.assert_allclose(np.load(out), want, rtol=1e-12)
    np.save(tmp_path / "complex.npy", ints + 1j)
    assert main(["run", f"{user_file}:heat", "--steps", "2", "--param", "alpha=0.1", "--in",
                 f"u={tmp_path / 'complex.npy'}"]) == 1
    err = capsys.readouterr().err
    assert (f"--in u: {tmp_path / 'complex.npy'} holds complex128 values; msc runs on real numbers (float or integer "
            "arrays, converted to the run's dtype)") in err


def test_gpu_target_without_its_gpu_gets_command_line_advice(user_file, u0_file, monkeypatch, capsys):
    import msc.targets.gpu.cuda as cuda

    monkeypatch.setattr(cuda, "device_arch", lambda: None)
    for target in ("cuda", "hip"):  # hip: no JIT path to an AMD GPU at all
        assert main(["run", f"{user_file}:heat", "--steps", "1", "--param", "alpha=0.1", "--in", f"u={u0_file}",
                     "--target", target]) == 1
        err = capsys.readouterr().err
        assert f"`msc emit SOURCE --target {target} -o DIR` then `make -C DIR emulate` builds DIR/heat-emulated" in err
        assert "compile(" not in err and err.count("\n") == 1
    # tuning, every candidate fails for the missing device: that error, not a failed tuning
    assert main(["bench", f"{user_file}:heat", "--shape", "34x34", "--steps", "1", "--repeat", "1", "--param",
                 "alpha=0.1", "--target", "cuda", "--schedule", "auto"]) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("msc: ") and "`make -C DIR emulate` builds DIR/heat-emulated" in err, err


def test_bench_shape_follows_the_stencils_dimensions(user_file, tmp_path):
    report = tmp_path / "bench.json"
    assert main(["bench", f"{user_file}:line", "--steps", "1", "--repeat", "1", "--json", str(report)]) == 0
    assert json.loads(report.read_text())["shape"] == [1 << 20]


def test_help_shows_defaults_and_the_targets_that_emit(capsys):
    def help_of(*argv: str) -> str:
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        return " ".join(capsys.readouterr().out.split())

    demo = help_of("demo")
    assert "--size SIZE heat: grid points per side, boundary ring included (default: 512)" in demo
    assert "--steps STEPS heat: time steps (default: 2000)" in demo
    bench = help_of("bench")
    assert "(default: 50)" in bench and "(default: 3)" in bench and "1024x1024 or 128x128x128" in bench
    for command in ("emit", "show"):
        text = help_of(command)
        targets = text.split("--target TARGET one of: ")[1].split(" (default")[0].split(", ")
        assert "serial" not in targets and {"openmp", "serial+mpi", "cuda"} <= set(targets)
        assert "--schedule SCHEDULE default, or primitives such as" in text


def test_demo_runs_checks_and_draws(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "msc.cli", "demo", "--size", "96", "--steps", "40",
                           "--picture", str(tmp_path / "heat.png")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "GStencil/s" in proc.stdout and "(OK)" in proc.stdout
    png = (tmp_path / "heat.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 200


def test_demo_pde_alone_draws_where_picture_says(tmp_path):
    """`msc demo pde --picture F` draws the one picture it makes to F (it went beside F, under another name)."""
    proc = subprocess.run([sys.executable, "-m", "msc.cli", "demo", "pde", "--pde-size", "24",
                           "--picture", str(tmp_path / "poisson.png")], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["poisson.png"]
    assert (tmp_path / "poisson.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize("target, marker", [("openmp", "msc_run"), ("cuda", "__global__"), ("hip", "__global__"),
                                            ("athread", "---- slave.c ----"), ("openmp+mpi", "msc_run"),
                                            ("athread+mpi", "---- slave_phase0.c ----")])
def test_show_prints_the_kernel_of_every_target_that_emits(target, marker, capsys):
    """`msc show --target hip` and `athread+mpi` printed nothing (their kernel files were not looked for)."""
    source = str(Path(__file__).resolve().parents[1] / "examples" / "heat2d.msc")
    assert main(["show", source, "--target", target]) == 0
    assert marker in capsys.readouterr().out


def test_msc_file_is_accepted_by_run_and_bench(tmp_path, capsys):
    source = str(Path(__file__).resolve().parents[1] / "examples" / "heat2d.msc")
    u0 = np.random.default_rng(1).random((16, 18))
    np.save(tmp_path / "u0.npy", u0)
    assert main(["run", source, "--steps", "3", "--param", "alpha=0.1", "--in", f"u={tmp_path / 'u0.npy'}",
                 "--out", f"u={tmp_path / 'u.npy'}", "--check"]) == 0
    assert_agrees_to_rounding(capsys.readouterr().out)
    assert main(["bench", source, "--shape", "32x32", "--steps", "2", "--repeat", "1"]) == 0


def test_msc_file_error_shows_line_and_caret(tmp_path, capsys):
    bad = tmp_path / "bad.msc"
    bad.write_text("stencil bad {\n  field u[x];\n  u[t+1, x] = u[t, 2*x];\n}\n")
    assert main(["emit", str(bad), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"msc: error: {bad}:3:") and "not an affine index" in err[0]
    assert err[1].strip() == "u[t+1, x] = u[t, 2*x];" and err[2].strip() == "^"


def test_demo_picture_puts_the_warm_edge_where_its_docstring_says():
    from msc.demo import initial_plate
    from msc.runtime.plot import figure

    u0 = initial_plate(16)
    assert "warm edge at y = 0" in initial_plate.__doc__ and "bottom of the picture" in initial_plate.__doc__
    axes = figure(u0, "plate").axes[0]
    image = axes.images[0]
    assert image.origin == "lower"  # row 0 of the image is drawn at the bottom
    np.testing.assert_array_equal(image.get_array()[0, :], u0[:, 0])  # the bottom row: y = 0, the warm edge
    np.testing.assert_array_equal(image.get_array()[:, 0], u0[0, :])  # the left column: x = 0
    assert axes.get_xlabel().startswith("x") and axes.get_ylabel().startswith("y")
