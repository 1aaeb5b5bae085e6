"""The `msc` command: one-line errors, emit/run/bench on a user's file, demo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from msc.cli import main

STENCIL_FILE = '''
import msc
from msc import t, x, y

@msc.stencil
def heat(u, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y])

def broken(u):
    u[t + 1, x] = u[t, 2 * x]
'''


@pytest.fixture
def user_file(tmp_path) -> Path:
    path = tmp_path / "user_stencils.py"
    path.write_text(STENCIL_FILE)
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
    from msc.cli import load_source

    want = load_source(f"{user_file}:heat").reference(steps=5, u=u0, alpha=0.1)["u"]
    np.testing.assert_allclose(np.load(out), want, rtol=1e-12)
    assert msc.__version__


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


def test_schedule_option_on_run_bench_and_emit(user_file, tmp_path, capsys):
    u0 = np.random.default_rng(1).random((30, 33))
    np.save(tmp_path / "u0.npy", u0)
    assert main(["run", f"{user_file}:heat", "--steps", "6", "--param", "alpha=0.1", "--in", f"u={tmp_path / 'u0.npy'}",
                 "--schedule", "time_tile(3, x=8).parallel('x_tile')", "--check"]) == 0
    assert "max relative difference to the reference 0.00e+00" in capsys.readouterr().out
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
        (["emit", "heat", "-o", "x"], "SOURCE must be path/file.py:function"),
        (["emit", "{file}:nothing", "-o", "x"], "has no function 'nothing'"),
        (["emit", "{file}:broken", "-o", "x"], "not an affine index"),
        (["emit", "{file}:heat", "--target", "fpga", "-o", "x"], "unknown target 'fpga'"),
        (["run", "{file}:heat", "--steps", "1", "--param", "alpha"], "--param expects NAME=VALUE"),
        (["run", "{file}:heat", "--steps", "1", "--param", "alpha=0.1"], "missing argument(s) u"),
        (["run", "{file}:heat", "--steps", "1", "--param", "alpha=0.04xyz"], "--param alpha: '0.04xyz' is not a number"),
        (["run", "{file}:heat", "--steps", "1", "--param", "alpha=nan"], "--param alpha: 'nan' is not a finite number"),
        (["run", "{file}:heat", "--steps", "1", "--in", "u=missing.npy", "--param", "alpha=1"], "cannot read missing.npy"),
        (["bench", "{file}:heat", "--shape", "ax3"], "--shape expects sizes like 512x512"),
        (["bench", "{file}:heat", "--schedule", "tile(x=8).warp(2)"], "unknown primitive 'warp'; the primitives are tile,"),
        (["bench", "{file}:heat", "--schedule", "__import__('os')"], "unknown primitive '__import__'"),
        (["bench", "{file}:heat", "--schedule", "u.tile(x=4)"], "is not a chain of primitives"),
        (["bench", "{file}:heat", "--schedule", "tile(x=n)"], "the arguments of tile() must be numbers and quoted names"),
        (["emit", "{file}:heat", "-o", "x", "--schedule", "auto"], "tuned for a problem size"),
    ],
)
def test_failures_are_one_line_without_traceback(argv, words, user_file, capsys):
    code = main([a.format(file=user_file) for a in argv])
    err = capsys.readouterr().err
    assert code != 0
    assert words in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_debug_shows_the_traceback(user_file):
    with pytest.raises(Exception, match="not an affine index"):
        main(["--debug", "emit", f"{user_file}:broken", "-o", "x"])


def test_demo_runs_checks_and_draws(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "msc.cli", "demo", "--size", "96", "--steps", "40",
                           "--picture", str(tmp_path / "heat.png")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "GStencil/s" in proc.stdout and "(OK)" in proc.stdout
    png = (tmp_path / "heat.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 200


def test_msc_file_is_accepted_by_run_and_bench(tmp_path, capsys):
    source = str(Path(__file__).resolve().parents[1] / "examples" / "heat2d.msc")
    u0 = np.random.default_rng(1).random((16, 18))
    np.save(tmp_path / "u0.npy", u0)
    assert main(["run", source, "--steps", "3", "--param", "alpha=0.1", "--in", f"u={tmp_path / 'u0.npy'}",
                 "--out", f"u={tmp_path / 'u.npy'}", "--check"]) == 0
    assert "max relative difference to the reference 0.00e+00" in capsys.readouterr().out
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
