"""Simulations that persist, report and show themselves: checkpoints resumed
bitwise and opened by xarray, their errors, a writer killed midway, netCDF
time series, progress bars, steering between advances, short reprs and the
notebook HTML of each object."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import xarray as xr

import msc
from msc import Schedule, t, x, y
from msc.errors import CheckpointError, StencilArgumentError
from msc.runtime.build import ABANDONED_S, writer_tag


@msc.stencil
def wave(u, c):  # two time levels and an input field
    u[t + 1, x, y] = 2 * u[t, x, y] - u[t - 1, x, y] + c[x, y] * (
        u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y])


@msc.stencil(boundary="periodic")
def drift(u, a):
    u[t + 1, x, y] = (1 - a) * u[t, x, y] + a * u[t, x - 1, y + 1]


@msc.stencil
def heat(u, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1]
                                           - 4 * u[t, x, y])


def wave_inputs() -> dict:
    rng = np.random.default_rng(3)
    return {"u": [rng.random((21, 40)), rng.random((21, 40))], "c": 0.1 * rng.random((21, 40))}


@pytest.mark.parametrize("stencil,inputs,schedule", [
    (wave, wave_inputs(), None),
    (wave, wave_inputs(), Schedule().time_tile(3, x=4)),
    (drift, {"u": np.random.default_rng(4).random((9, 12)), "a": 0.3}, None),
], ids=["wave", "wave-time-tiled", "periodic"])
def test_save_at_13_resume_and_advance_17_equals_30(stencil, inputs, schedule, tmp_path):
    kernel = stencil.compile(threads=1, schedule=schedule)
    sim = kernel.start(**inputs)
    sim.advance(13)
    path = sim.save(tmp_path / "run.nc")
    resumed = kernel.resume(path)
    assert resumed.step == 13
    resumed.advance(17)
    whole = kernel.start(**inputs)
    whole.advance(30)
    assert np.array_equal(resumed.fields["u"], whole.fields["u"])
    with xr.open_dataset(path) as data:  # no options
        assert np.array_equal(data["u"].values, sim.fields["u"])
        assert data["u"].dims == ("x", "y") and data.attrs["step"] == 13 and data.attrs["msc_stencil"] == stencil.name


@msc.stencil
def heat1d(u, a):
    u[t + 1, x] = u[t, x] + a * (u[t, x - 1] - 2 * u[t, x] + u[t, x + 1])


def test_a_1d_run_resumes_from_a_str_path_with_a_tilde(tmp_path, monkeypatch):
    """A 1D checkpoint's shape comes back from the file as a scalar; `~` is the home folder."""
    monkeypatch.setenv("HOME", str(tmp_path))
    kernel = heat1d.compile(threads=1)
    u = np.random.default_rng(5).random(30)
    sim = kernel.start(u=u, a=0.2)
    sim.advance(4)
    assert sim.save("~/runs/one.nc") == tmp_path / "runs" / "one.nc"
    resumed = kernel.resume("~/runs/one.nc")
    resumed.advance(3)
    assert np.array_equal(resumed.fields["u"], heat1d.reference(steps=7, u=u, a=0.2)["u"])


def test_a_checkpoint_that_cannot_be_written_is_a_checkpoint_error(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    sim = wave.compile(threads=1).start(**wave_inputs())
    (tmp_path / "file").write_text("")
    with pytest.raises(CheckpointError, match=r"checkpoint .*file/run.nc cannot be written: File exists"):
        sim.save(tmp_path / "file" / "run.nc")
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 30, 1 << 30, 100_000))
    with pytest.raises(CheckpointError, match=r"needs about 0\.\d MiB and its file system has 0\.1 MiB free: "
                                              "nothing was written"):
        sim.save(tmp_path / "run.nc")
    assert list(tmp_path.iterdir()) == [tmp_path / "file"]


def test_a_checkpoint_is_named_as_the_netcdf_file_it_is(tmp_path):
    """`sim.save("run.npy")` would write netCDF under a name that says otherwise (np.load then fails far
    from the cause): refused before anything is written, naming the file and what to call it."""
    sim = wave.compile(threads=1).start(**wave_inputs())
    for name in ("run.npy", "run", "run.h5"):
        with pytest.raises(CheckpointError, match=rf"checkpoint .*{re.escape(name)}: a checkpoint is a netCDF "
                                                  r"file; name it \.nc or \.nc4 \(e\.g\. .*run\.nc\)"):
            sim.save(tmp_path / name)
    assert list(tmp_path.iterdir()) == []
    assert sim.save(tmp_path / "RUN.NC4").is_file()


def test_truncated_damaged_and_foreign_files_are_named_errors(tmp_path):
    kernel = wave.compile(threads=1)
    sim = kernel.start(**wave_inputs())
    sim.advance(2)
    good = sim.save(tmp_path / "good.nc")
    data = good.read_bytes()
    (tmp_path / "cut.nc").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"cut.nc cannot be read \(truncated or damaged\?\)"):
        kernel.resume(tmp_path / "cut.nc")
    (tmp_path / "noise.nc").write_bytes(b"\x89HDF\r\n" + bytes(200))
    with pytest.raises(CheckpointError, match="noise.nc cannot be read"):
        kernel.resume(tmp_path / "noise.nc")
    with pytest.raises(CheckpointError, match="missing.nc: no such file"):
        kernel.resume(tmp_path / "missing.nc")
    for call in (sim.save, kernel.resume):  # not a raw OSError, nor "no such file"
        with pytest.raises(CheckpointError, match=rf"checkpoint {re.escape(str(tmp_path))} is a directory: a "
                                                  rf"checkpoint is a file, give its path \(e.g. "
                                                  rf"{re.escape(str(tmp_path))}/run.nc"):
            call(tmp_path)
    xr.Dataset({"u": (("x",), np.zeros(3))}).to_netcdf(tmp_path / "other.nc", engine="h5netcdf")
    with pytest.raises(CheckpointError, match="other.nc is a netCDF file but not an msc checkpoint"):
        kernel.resume(tmp_path / "other.nc")
    with pytest.raises(CheckpointError, match=r"holds a run of stencil 'wave'; this kernel runs stencil 'heat'"):
        heat.compile(threads=1).resume(good)
    with pytest.raises(CheckpointError, match=r"good.nc is float64; this kernel of 'wave' is float32"):
        wave.compile(threads=1, dtype="float32").resume(good)

    def other(u, c):  # the same name, another definition
        u[t + 1, x, y] = u[t, x, y] - u[t - 1, x, y] + c[x, y] * u[t, x - 1, y]

    with pytest.raises(CheckpointError, match="holds a run of another definition of 'wave'"):
        msc.stencil(name="wave")(other).compile(threads=1).resume(good)


WRITER = textwrap.dedent('''
    import sys
    import numpy as np
    import msc
    from msc import t, x, y

    @msc.stencil
    def heat(u, alpha):
        u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] - 2 * u[t, x, y])

    sim = heat.compile(threads=1).start(u=np.random.default_rng(1).random((1500, 1500)), alpha=0.1)
    sim.save(sys.argv[1])
    print("saved", flush=True)
    while True:  # killed in the middle of one of these
        sim.advance(1)
        sim.save(sys.argv[1])
''')


def test_a_writer_killed_midway_leaves_the_previous_checkpoint(tmp_path):
    path = tmp_path / "run.nc"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "saved\n"
        time.sleep(0.4)  # a few saves of 36 MB each: the kill lands in one of them
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()

    @msc.stencil
    def heat(u, alpha):  # the writer's stencil
        u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] - 2 * u[t, x, y])

    sim = heat.compile(threads=1).resume(path)
    assert sim.fields["u"].shape == (1500, 1500) and sim.parameters == {"alpha": 0.1}
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == ["run.nc"]
    sim.save(path)  # the killed writer's temporary, if the kill left one, goes with the next save
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.nc"]


NOT_A_PID = 2**22 + 1  # above the largest pid_max Linux allows: no process has it


def test_a_save_through_a_symbolic_link_writes_its_file_and_a_device_is_written_through(tmp_path):
    """A save (and every other file msc writes whole) replaced a symbolic link by a new file, and
    /dev/full by a regular file: the link's file is now written whole, a device or a pipe as it is."""
    from msc.runtime.build import atomic_write_bytes, atomic_write_text

    kernel = wave.compile(threads=1)
    sim = kernel.start(**wave_inputs())
    (tmp_path / "real").mkdir()
    sim.advance(5)
    sim.save(tmp_path / "real" / "run.nc")
    (tmp_path / "latest.nc").symlink_to("real/run.nc")
    sim.advance(2)
    sim.save(tmp_path / "latest.nc")
    assert (tmp_path / "latest.nc").is_symlink()
    assert kernel.resume(tmp_path / "real" / "run.nc").step == 7
    (tmp_path / "note").symlink_to("real/note.txt")  # a link to a file not yet there
    atomic_write_text(tmp_path / "note", "kept")
    assert (tmp_path / "note").is_symlink() and (tmp_path / "real" / "note.txt").read_text() == "kept"
    import threading

    pipe = tmp_path / "pipe"  # as /dev/null: not a file to replace, but one to write into
    os.mkfifo(pipe)
    heard: list[bytes] = []
    reader = threading.Thread(target=lambda: heard.append(pipe.read_bytes()), daemon=True)
    reader.start()
    atomic_write_bytes(pipe, b"through")
    reader.join(timeout=10)
    assert heard == [b"through"] and pipe.is_fifo()


def test_the_next_save_removes_what_killed_writers_left_and_nothing_else(tmp_path):
    here = writer_tag().rsplit(".", 1)[0]
    stale = [f".run.nc-{here}.{NOT_A_PID}-abcdefgh.tmp",  # this host's, its process ended
             ".run.nc-elsewhere.13-abcdefgh.tmp", ".run.nc-abcdefgh.tmp"]  # another host's, or untagged: old
    kept = [f".run.nc-{here}.{os.getpid()}-abcdefgh.tmp",  # a live writer's
            ".run.nc-elsewhere.12-abcdefgh.tmp",  # another host's, touched a moment ago
            f".other.nc-{here}.{NOT_A_PID}-abcdefgh.tmp", "run.nc-notes.tmp"]  # not a temporary of run.nc
    for name in stale + kept:
        (tmp_path / name).write_bytes(b"x")
    two_hours_ago = time.time() - 2 * ABANDONED_S
    for name in stale[1:]:
        os.utime(tmp_path / name, (two_hours_ago, two_hours_ago))
    wave.compile(threads=1).start(**wave_inputs()).save(tmp_path / "run.nc")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept + ["run.nc"])


def test_time_series_every_n_steps_opens_in_xarray(tmp_path):
    kernel = wave.compile(threads=1)
    sim = kernel.start(**wave_inputs())
    sim.advance(3)
    snapshots = {}
    sim.advance(12, every=5, out=tmp_path / "series.nc")  # steps 5, 10 and 15
    sim.advance(5, every=5, out=tmp_path / "series.nc")  # appended: step 20
    for step in (5, 10, 15, 20):
        replay = kernel.start(**wave_inputs())
        replay.advance(step)
        snapshots[step] = replay.fields["u"].copy()
    with xr.open_dataset(tmp_path / "series.nc") as data:
        assert data.attrs["Conventions"] == "CF-1.8"
        assert list(data["time"].values) == [5, 10, 15, 20]
        assert data["u"].dims == ("time", "y", "x")  # CF order: x varies fastest
        for k, step in enumerate((5, 10, 15, 20)):
            assert np.array_equal(data["u"].isel(time=k).transpose("x", "y").values, snapshots[step])
    with pytest.raises(StencilArgumentError, match="every= and out= go together"):
        sim.advance(5, every=5)


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler, as a user's process has it (a test worker may ignore SIGINT)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("python_sigint")
def test_ctrl_c_during_a_run_or_a_snapshot_leaves_the_simulation_and_the_series_whole(tmp_path, monkeypatch):
    """SIGINT while the compiled loop runs used to raise before `step` counted the steps the loop
    had made (later fields and snapshots then disagreed with the step), and during a snapshot it
    left a time whose field was never written. Now it raises once the steps are counted or the
    snapshot is whole."""
    import h5netcdf

    kernel = wave.compile(threads=1)
    advance = type(kernel).advance

    def interrupted_advance(self, *args):  # type: ignore[no-untyped-def]
        advance(self, *args)
        signal.raise_signal(signal.SIGINT)  # as a Ctrl-C that came while the loop ran

    sim = kernel.start(**wave_inputs())
    monkeypatch.setattr(type(kernel), "advance", interrupted_advance)
    with pytest.raises(KeyboardInterrupt):
        sim.advance(7)
    monkeypatch.setattr(type(kernel), "advance", advance)
    assert sim.step == 7
    assert np.array_equal(sim.fields["u"], kernel.run(steps=7, **wave_inputs())["u"])

    setitem = h5netcdf.core.BaseVariable.__setitem__
    writes = []

    def interrupted_write(self, key, value):  # type: ignore[no-untyped-def]
        writes.append(self.name)
        if len(writes) == 6:  # the third snapshot, between its time and its field
            signal.raise_signal(signal.SIGINT)
        setitem(self, key, value)

    monkeypatch.setattr(h5netcdf.core.BaseVariable, "__setitem__", interrupted_write)
    with pytest.raises(KeyboardInterrupt):
        sim.advance(10, every=1, out=tmp_path / "series.nc")
    monkeypatch.setattr(h5netcdf.core.BaseVariable, "__setitem__", setitem)
    assert sim.step == 10
    with xr.open_dataset(tmp_path / "series.nc") as data:
        assert list(data["time"].values) == [8, 9, 10]
        assert np.array_equal(data["u"].isel(time=2).transpose("x", "y").values, sim.fields["u"])


def test_a_time_series_out_is_checked_before_a_step_runs(tmp_path, monkeypatch):
    """out= names a .nc file whose folder is made or writable, before any step; a full file
    system stops the run at the snapshot it cannot hold, with the series as it was."""
    import shutil
    from collections import namedtuple

    sim = wave.compile(threads=1).start(**wave_inputs())
    for name, said in [("s.csv", "the time series is a netCDF file; name it .nc or .nc4"),
                       ("file/s.nc", "its folder cannot be made")]:
        (tmp_path / "file").write_text("")
        with pytest.raises(StencilArgumentError, match=re.escape(said)):
            sim.advance(2, every=1, out=tmp_path / name)
        assert sim.step == 0
    sim.advance(2, every=1, out=tmp_path / "new" / "s.nc")  # the folder is made
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 30, 1 << 30, 100_000))
    with pytest.raises(OSError, match="step 3 of stencil 'wave' was not appended to the time series"):
        sim.advance(2, every=1, out=tmp_path / "new" / "s.nc")
    with xr.open_dataset(tmp_path / "new" / "s.nc") as data:
        assert list(data["time"].values) == [1, 2]


def test_a_time_series_goes_on_only_after_its_last_step_and_of_the_same_run(tmp_path):
    """The README's long run written twice would repeat every step, and another stencil's, shape's or dtype's
    fields would land under the first one's title: refused, naming the file and why, with the file unchanged.
    A run resumed from a checkpoint goes on with its series."""
    series = tmp_path / "series.nc"
    kernel = wave.compile(threads=1)
    sim = kernel.start(**wave_inputs())
    sim.advance(4)
    checkpoint = sim.save(tmp_path / "run.nc")
    sim.advance(6, every=5, out=series)  # step 5 and 10
    before = series.read_bytes()
    again = kernel.resume(checkpoint)
    with pytest.raises(StencilArgumentError, match=rf"stencil 'wave': out={re.escape(str(series))} already holds "
                                                   r"steps up to 10, and this run's next snapshot is step 5"):
        again.advance(6, every=5, out=series)
    assert again.step == 4  # refused before a step ran
    u0 = np.random.default_rng(2).random((21, 40))
    with pytest.raises(StencilArgumentError, match=rf"out={re.escape(str(series))} holds a series of stencil 'wave'"):
        heat.compile(threads=1).start(u=u0, alpha=0.1).advance(5, every=5, out=series)
    with pytest.raises(StencilArgumentError, match=r"holds float64 fields of shape \(21, 40\); this run's are "
                                                   r"float64 of shape \(21, 30\)"):
        kernel.start(u=[u0[:, :30]] * 2, c=u0[:, :30]).advance(5, every=5, out=series)
    inputs32 = {"u": [a.astype("float32") for a in wave_inputs()["u"]], "c": wave_inputs()["c"].astype("float32")}
    with pytest.raises(StencilArgumentError, match=r"this run's are float32 of shape \(21, 40\)"):
        wave.compile(threads=1, dtype="float32").start(**inputs32).advance(15, every=5, out=series)
    for out, why in ((checkpoint, "exists and is not an msc time series"), (tmp_path, "is a directory")):
        with pytest.raises(StencilArgumentError, match=rf"out={re.escape(str(out))} {why}"):
            kernel.start(**wave_inputs()).advance(5, every=5, out=out)
    assert series.read_bytes() == before
    resumed = kernel.resume(sim.save(checkpoint))  # at step 10: goes on with 15 and 20
    resumed.advance(10, every=5, out=series)
    with xr.open_dataset(series) as data:
        assert list(data["time"].values) == [5, 10, 15, 20] and data.attrs["title"] == "msc stencil 'wave'"


def test_an_auto_kernel_resumes_tuning_on_the_checkpoint(tmp_path, monkeypatch):
    """`resume` of a schedule="auto" kernel that has not run tunes for the checkpoint's size on its arrays (as
    `start` tunes), then goes on bitwise; a checkpoint of a run over MPI ranks is refused."""
    from msc.runtime.checkpoint import header, write_manifest

    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))  # a fresh tuning cache: it tunes here
    sim = wave.compile(threads=1).start(**wave_inputs())
    sim.advance(7)
    path = sim.save(tmp_path / "run.nc")
    auto = wave.compile(schedule="auto", threads=1)
    auto.budget_s, auto.echo = 0.0, False
    resumed = auto.resume(path)
    assert auto.report is not None and not auto.report.from_cache and resumed.step == 7
    resumed.advance(5)
    sim.advance(5)
    assert np.array_equal(resumed.fields["u"], sim.fields["u"])
    assert auto.resume(path).kernel is resumed.kernel  # tuned once per size
    write_manifest(tmp_path / "ranks.nc", header(wave.ir, 3, {}, (21, 40)), ["ranks/rank-00000.nc"])
    with pytest.raises(CheckpointError, match="ranks.nc is of a run over MPI ranks, which schedule='auto' does not "
                                              "tune"):
        wave.compile(schedule="auto").resume(tmp_path / "ranks.nc")


def test_progress_bar_on_stderr(capsys):
    sim = heat.compile(threads=1).start(u=np.zeros((40, 40)), alpha=0.1)
    sim.advance(200, progress=True)
    err = capsys.readouterr().err
    assert "heat: 100%" in err and "200/200" in err and "GStencil/s" in err
    assert sim.step == 200


def test_steering_between_advances():
    rng = np.random.default_rng(8)
    u0 = rng.random((12, 14))
    sim = heat.compile(threads=1).start(u=u0, alpha=0.1)
    sim.advance(4)
    sim.set(alpha=0.2)
    kick = np.array(sim.fields["u"])
    kick[5, 5] += 1.0
    sim.set(u=kick)
    sim.advance(3)
    expected = heat.reference(steps=3, u=kick, alpha=0.2)["u"]
    np.testing.assert_allclose(sim.fields["u"], expected, rtol=1e-12, atol=1e-12)
    older, newest = sim.levels["u"]
    assert newest is not None and np.array_equal(newest, sim.fields["u"]) and not older.flags.writeable
    with pytest.raises(StencilArgumentError, match="has no parameter or field 'beta'; it has alpha, u"):
        sim.set(beta=1.0)
    with pytest.raises(StencilArgumentError, match=r"'u' has shape \(12, 14\), got an array of shape \(3, 3\)"):
        sim.set(u=np.zeros((3, 3)))
    with pytest.raises(StencilArgumentError, match="'u' has dtype float32 but the stencil runs in float64"):
        sim.set(u=np.zeros((12, 14), np.float32))  # as run and start refuse it
    boundary = rng.random((12, 14))  # a new ring: every later step keeps it (it used to return every other step)
    sim.set(u=boundary)
    for steps in (1, 2, 3):
        sim.advance(1)
        expected = heat.reference(steps=steps, u=boundary, alpha=0.2)["u"]
        np.testing.assert_allclose(sim.fields["u"], expected, rtol=1e-12, atol=1e-12)


def test_reprs_are_short_and_notebooks_get_html():
    kernel = heat.compile(threads=1)
    sim = kernel.start(u=np.zeros((10, 10)), alpha=0.1)
    assert len(repr(kernel)) < 200 and "heat" in repr(kernel) and "openmp" in repr(kernel)
    assert repr(Schedule().tile(x=8)) == "Schedule().tile(x=8)"
    assert repr(sim) == "<msc.Simulation of 'heat' at step 0, openmp>"
    assert "u[t+1, x, y] = u[t, x, y] + alpha" in heat._repr_html_() and "radius (1, 1)" in heat._repr_html_()
    assert "target</th><td style='text-align:left'>openmp" in kernel._repr_html_()
    page = sim._repr_html_()
    assert "msc simulation of &#x27;heat&#x27;" in page and "<img src=\"data:image/png;base64," in page
    assert "#include" in kernel.source


def test_a_save_over_a_distributed_checkpoint_removes_its_block_folders_and_nothing_else(tmp_path):
    """Only folders named as msc names block folders, beside the checkpoint, are removed, whatever
    the replaced manifest names (here also a folder above it)."""
    from msc.runtime.checkpoint import header, write_manifest

    sim = heat.compile(threads=1).start(u=np.random.default_rng(6).random((9, 8)), alpha=0.1)
    (tmp_path / "run.nc.blocks-3-abc").mkdir()
    (tmp_path / "keep").mkdir()
    write_manifest(tmp_path / "run.nc", header(heat.ir, 3, {"alpha": 0.1}, (9, 8)),
                   ["run.nc.blocks-3-abc/rank-00000.nc", "keep/rank-00001.nc", "../rank-00002.nc"])
    sim.save(tmp_path / "run.nc")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep", "run.nc"]
    with pytest.raises(StencilArgumentError, match="a grid spacing is a positive number"):
        sim.to_xarray(spacing=0)
