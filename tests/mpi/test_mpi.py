"""Distributed runs under mpiexec on 1-4 ranks: the halo library, generated and
hand-written stencils against the single-process kernel (bitwise) and the
reference, temporally tiled schedules (deeper halos, exchanged every depth
steps), exchanges overlapped with the inner box, errors on every rank, and the emitted openmp+mpi program."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from launch import ENV, mpi_command, mpiexec, run_json
from stencil_gen import generate, program_arguments

import msc
from msc import t, x, y

pytest.importorskip("mpi4py")
pytestmark = [pytest.mark.mpi, pytest.mark.skipif(mpiexec() is None, reason="no mpiexec (pip install 'msc[mpi]')")]

RANKS = [1, 2, 3, 4]
SEEDS = [str(s) for s in range(16)]


@pytest.mark.parametrize("ranks", RANKS)
def test_halo_library(ranks):
    report = run_json(ranks, "run_halo.py")
    errors = report.pop("errors")
    assert len(report) == 24 and all(case["wrong"] == 0 for case in report.values()), report
    if ranks > 1:  # a box stencil sends edges and corners on top of a star's faces
        for split in ("even", "given"):
            assert report[f"2d-dirichlet-box-{split}"]["bytes"] >= report[f"2d-dirichlet-star-{split}"]["bytes"] > 0
    # given block bounds: from 0 to the interior's size, one more than ranks, no empty block
    assert errors["short"].endswith("block bounds must run from 0 to 11, got 0 to 10"), errors
    assert "one more bound than ranks per dimension" in errors["count"], errors
    if ranks > 1:
        assert errors["empty"].endswith("dimension x: block 0 would be empty (bounds 0, 0)"), errors


@pytest.mark.parametrize("ranks", RANKS)
def test_generated_stencils_equal_the_serial_kernel(ranks):
    outcomes = run_json(ranks, "run_generated.py", *SEEDS, timeout=400)
    ran = [o for o in outcomes if o["status"] == "ran"]
    assert len(ran) >= len(SEEDS) // 2, outcomes
    for o in ran:
        assert o["bitwise"] and o["shapes"], o
        assert o["reference_error"] <= 1e-5, o  # float32 cases included; float64 ones agree bitwise above
    assert {o["boundary"] for o in ran} == {"dirichlet", "periodic"}
    assert {o["ndim"] for o in ran} == {1, 2, 3}


@pytest.mark.parametrize("ranks", RANKS)
def test_cases_and_errors(ranks):
    results = run_json(ranks, "run_cases.py")
    for name, ok in results.items():
        if not name.startswith("error_"):
            assert ok is True, (name, results)
    prefix = "" if ranks == 1 else "rank 0: "
    assert results["error_dims"] == f"{prefix}dims with a product of {ranks + 1} do not fit {ranks} MPI ranks"
    assert results["error_missing_input"] == f"{prefix}stencil 'heat': missing argument(s) u"
    assert "shape (3, 3)" in results["error_local_shape_on_last_rank"]
    if ranks > 1:
        assert "thinnest local block has 2 points, fewer than the halo width 3" in results["error_thin_domain"]


@pytest.mark.parametrize("ranks", RANKS)
def test_overlap_of_exchange_and_inner_box(ranks):
    results = run_json(ranks, "run_overlap.py")
    assert len(results) == 5, results
    for name, r in results.items():
        assert r["bitwise"], (name, r)
        if ranks == 1:  # only a periodic wrap is in flight on one rank
            assert r["split_ranks"] == (1 if "periodic" in name else 0), (name, r)
        else:  # a rank whose halos meet (the middle of 3 blocks of 4 with radius 2) computes its block after finish
            assert r["split_ranks"] >= ranks - 1, (name, r)


@pytest.mark.parametrize("ranks", RANKS)
def test_time_tiled_schedules(ranks):
    results = run_json(ranks, "run_time_tiled.py")
    cases = {name: r for name, r in results.items() if isinstance(r, dict)}
    assert len(cases) == 10, results
    for name, r in cases.items():
        assert r["bitwise"] and r["reference_error"] <= 1e-12, (name, r)
    assert results["local_function_fill"] is True
    assert results["run_with_compiled_schedule"] is True
    assert results["inherited_halo"] == [3, 3]
    assert results["local_halo"] == [3, 3]
    assert results["local_exchanges"] == 2  # 8 steps in runs of 3: before steps 3 and 6
    assert (results["local_bytes"] > 0) == (ranks > 1)
    if ranks > 1:
        assert "thinnest local block has 3 points, fewer than the halo width 4" in results["error_thin_for_depth"]
    else:
        assert results["error_thin_for_depth"] is None


def _emit_and_build(stencil, directory: Path, dtype: str, schedule: msc.Schedule | None = None,
                    target: str = "openmp+mpi") -> Path:
    stencil.emit(target, directory, dtype=dtype, schedule=schedule)
    _make(directory)
    return directory / stencil.name


def _make(directory: Path) -> None:
    mpicc = Path(sys.executable).parent / "mpicc"
    make = ["make", "-C", str(directory)] + ([f"MPICC={mpicc}"] if mpicc.exists() else [])
    proc = subprocess.run(make, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("seed", [0, 5, 10, 23])
def test_emitted_mpi_program(seed, tmp_path):
    case = generate(seed)
    program = _emit_and_build(case.stencil, tmp_path / "src", case.dtype)
    cmd = ["--steps", str(case.steps), "--threads", "1", *program_arguments(case.inputs, tmp_path)]
    written = [f.name for f in case.stencil.ir.written_fields]
    serial = case.stencil.compile(dtype=case.dtype).run(steps=case.steps, **case.inputs)
    env = dict(os.environ, **ENV)
    for ranks in (1, 2, 3):
        outs = [arg for n in written for arg in ("--out", f"{n}={tmp_path / f'out_{n}_{ranks}.npy'}")]
        proc = subprocess.run(mpi_command(ranks, str(program), *cmd, *outs), capture_output=True, text=True,
                              env=env, timeout=120)
        if proc.returncode != 0 and "thinnest local block" in proc.stderr:
            continue
        assert proc.returncode == 0, proc.stderr
        assert f"on {ranks} ranks" in proc.stdout
        for n in written:
            assert np.array_equal(np.load(tmp_path / f"out_{n}_{ranks}.npy"), serial[n]), (n, ranks, case)


@msc.stencil
def three_phases(p, q, r, k):  # each statement reads the previous one's new level at an offset
    p[t + 1, x, y] = 0.5 * p[t, x, y] + 0.1 * (r[t, x + 1, y] - r[t, x - 1, y + 1])
    q[t + 1, x, y] = 0.5 * q[t, x, y] + k * (p[t + 1, x, y + 1] - p[t + 1, x - 1, y - 1])
    r[t + 1, x, y] = 0.5 * r[t, x, y] + k * (q[t + 1, x + 1, y] + q[t + 1, x, y - 1]) - 0.1 * p[t + 1, x, y]


def test_emitted_program_overlaps_phases(tmp_path):
    program = _emit_and_build(three_phases, tmp_path / "src", "float64")
    assert "msc_run_box_phase2(" in (tmp_path / "src" / "main.c").read_text()
    rng = np.random.default_rng(4)
    inputs = {name: rng.random((17, 21)) for name in "pqr"}
    args = ["--steps", "5", "--param", "k=0.3"]
    for name, value in inputs.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--in", f"{name}={tmp_path / f'{name}.npy'}"]
    serial = three_phases.compile().run(steps=5, k=0.3, **inputs)
    _check_program_bitwise(program, args, serial, (1, 2, 4), tmp_path)


def test_emitted_mpi_program_errors(tmp_path):
    case = generate(6, ndim=2, boundary="dirichlet", coeff=True)  # fields f0 (one level) and c
    assert [f.name for f in case.stencil.ir.fields] == ["f0", "c"] and not isinstance(case.inputs["f0"], list)
    program = _emit_and_build(case.stencil, tmp_path / "src", case.dtype)
    env = dict(os.environ, **ENV)
    np.save(tmp_path / "f.npy", case.inputs["f0"])
    np.save(tmp_path / "c.npy", case.inputs["c"])
    base = [str(program), "--steps", "1", "--param", "a=0.5", "--in", f"c={tmp_path / 'c.npy'}", "--in", f"f0={tmp_path / 'f.npy'}"]
    bad_dims = subprocess.run(mpi_command(2, *base, "--dims", "3x1"), capture_output=True, text=True, env=env, timeout=60)
    assert bad_dims.returncode != 0 and "dims with a product of 3 do not fit 2 MPI ranks" in bad_dims.stderr
    missing = subprocess.run(mpi_command(2, *base[:-2], "--in", "f0=nowhere.npy"), capture_output=True, text=True,
                             env=env, timeout=60)
    assert missing.returncode != 0 and "nowhere.npy (--in f0): cannot open it: No such file" in missing.stderr
    out = tmp_path / "out.npy"
    for option, value, message in [("--param", "a=0.5x", "--param a: '0.5x' is not a number"),
                                   ("--steps", "-5", "--steps must be a whole number >= 0, got '-5'")]:
        given = base[:base.index(option)] + base[base.index(option) + 2:]  # the bad value instead of the good one
        bad = subprocess.run(mpi_command(2, *given, "--out", f"f0={out}", option, value), capture_output=True,
                             text=True, env=env, timeout=60)
        assert bad.returncode != 0 and bad.stdout == "" and message in bad.stderr, (bad.stdout, bad.stderr)
        assert not out.exists()


def test_emitted_program_whose_kernel_fails_on_one_rank_writes_nothing(tmp_path):
    """Every phase kernel (entry and box entry) of rank 1 returns 3 (the rank as the launcher tells it: MPICH's
    PMI_RANK, Open MPI's OMPI_COMM_WORLD_RANK): every rank ends, no throughput, no output."""
    directory = tmp_path / "src"
    three_phases.emit("openmp+mpi", directory)
    failing = ("#include <stdlib.h>\nstatic int msc_test_status(void)\n{\n"
               '    const char *r = getenv("PMI_RANK") ? getenv("PMI_RANK") : getenv("OMPI_COMM_WORLD_RANK");\n'
               "    return r && atoi(r) == 1 ? 3 : 0;\n}\n")
    for kernel in directory.glob("kernel_phase*.c"):
        text = kernel.read_text()
        assert text.count("    return 0;\n}") == 2, kernel
        kernel.write_text(failing + text.replace("    return 0;\n}", "    return msc_test_status();\n}"))
    _make(directory)
    args = ["--steps", "5", "--param", "k=0.3"]
    for name in "pqr":
        np.save(tmp_path / f"{name}.npy", np.zeros((17, 21)))
        args += ["--in", f"{name}={tmp_path / f'{name}.npy'}"]
    proc = subprocess.run(mpi_command(2, str(directory / "three_phases"), *args, "--out", f"p={tmp_path / 'out.npy'}"),
                          capture_output=True, text=True, env=dict(os.environ, **ENV), timeout=60)
    assert proc.returncode != 0 and proc.stdout == "", (proc.stdout, proc.stderr)
    assert "three_phases: the kernel failed on 1 of 2 ranks; no output written" in proc.stderr, proc.stderr
    assert not (tmp_path / "out.npy").exists()


@msc.stencil
def wave(u, c):
    u[t + 1, x] = 2 * u[t, x] - u[t - 1, x] + c[x] * (u[t, x - 2] - 2 * u[t, x] + u[t, x + 2])


@msc.stencil
def chain(p, q):  # q reads p's new level at an offset: halos of 2 x radius x depth
    p[t + 1, x] = 0.5 * p[t, x] + 0.2 * (q[t, x + 1] + q[t, x - 1])
    q[t + 1, x] = 0.5 * q[t, x] + 0.2 * (p[t + 1, x + 1] - p[t + 1, x - 1])


@pytest.mark.parametrize("stencil, depth", [(wave, 3), (chain, 2)], ids=["wave", "chain"])
def test_emitted_time_tiled_program(stencil, depth, tmp_path):
    rng = np.random.default_rng(depth)
    schedule = msc.Schedule().time_tile(depth, x=5)
    program = _emit_and_build(stencil, tmp_path / "src", "float64", schedule)
    names = [f.name for f in stencil.ir.fields]
    inputs = {name: rng.random(41) for name in names}
    for name, value in inputs.items():
        np.save(tmp_path / f"{name}.npy", value)
    serial = stencil.compile(schedule=schedule).run(steps=10, **inputs)
    args = ["--steps", "10"] + [a for n in names for a in ("--in", f"{n}={tmp_path / f'{n}.npy'}")]
    _check_program_bitwise(program, args, serial, (1, 2, 3), tmp_path)


def test_emitted_staged_time_tiled_program(tmp_path):
    """Time tiles staged in thread-local buffers (cache_read/cache_write under
    time_tile) on each rank's block: bitwise the single-process run."""
    schedule = msc.Schedule().time_tile(2, x=5)
    for name in "pq":
        schedule = schedule.cache_read(name).cache_write(name)
    program = _emit_and_build(chain, tmp_path / "src", "float64", schedule)
    inputs = {name: np.random.default_rng(5).random(41) + k for k, name in enumerate("pq")}
    for name, value in inputs.items():
        np.save(tmp_path / f"{name}.npy", value)
    serial = chain.compile(schedule=schedule).run(steps=10, **inputs)
    args = ["--steps", "10"] + [a for n in inputs for a in ("--in", f"{n}={tmp_path / f'{n}.npy'}")]
    _check_program_bitwise(program, args, serial, (1, 2, 3), tmp_path)


@pytest.mark.parametrize("stencil, schedule", [(three_phases, None), (wave, msc.Schedule().time_tile(3, x=5))],
                         ids=["phases", "time_tiled"])
def test_emitted_program_over_another_node_target(stencil, schedule, tmp_path):
    """serial+mpi: the same MPI driver over the serial C target (no OpenMP anywhere),
    through the node interface alone; bitwise equal to the serial target in process."""
    program = _emit_and_build(stencil, tmp_path / "src", "float64", schedule, target="serial+mpi")
    assert not re.search(r"\bomp_|omp\.h|OMP_", (tmp_path / "src" / "main.c").read_text())
    assert "-fopenmp" not in (tmp_path / "src" / "Makefile").read_text()
    rng = np.random.default_rng(6)
    shape = (17, 21) if stencil.ir.ndim == 2 else (41,)
    inputs = {f.name: rng.random(shape) for f in stencil.ir.fields}
    params = {"k": 0.3} if stencil.ir.params else {}
    args = ["--steps", "7"] + [a for p, v in params.items() for a in ("--param", f"{p}={v}")]
    for name, value in inputs.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--in", f"{name}={tmp_path / f'{name}.npy'}"]
    serial = stencil.compile(target="serial", schedule=schedule).run(steps=7, **params, **inputs)
    _check_program_bitwise(program, args, serial, (1, 2, 3), tmp_path)


def _check_program_bitwise(program: Path, args: list[str], serial: dict, ranks_list: tuple[int, ...],
                           tmp_path: Path) -> None:
    """Run the emitted MPI program on each rank count: its .npy output equals `serial` bitwise."""
    env = dict(os.environ, **ENV)
    for ranks in ranks_list:
        outs = [a for n in serial for a in ("--out", f"{n}={tmp_path / f'out_{n}_{ranks}.npy'}")]
        proc = subprocess.run(mpi_command(ranks, str(program), *args, *outs), capture_output=True, text=True,
                              env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        for n in serial:
            assert np.array_equal(np.load(tmp_path / f"out_{n}_{ranks}.npy"), serial[n]), (n, ranks)


def test_plan_of_time_tiled_schedules():
    from msc.codegen.halo_plan import plan

    tiled = msc.Schedule().time_tile
    step = plan(chain.ir)
    assert (step.depth, step.halo, len(step.phases)) == (1, (1,), 2)
    deep = plan(chain.ir, tiled(3, x=4))  # 2 phases x radius 1 x depth 3, one kernel, no exchange between phases
    assert (deep.depth, deep.halo, len(deep.phases), deep.phases[0].exchange) == (3, (6,), 1, ())
    wave_plan = plan(wave.ir, tiled(3, x=8))  # c is read without offset, but computed into the halo
    assert wave_plan.halo == (6,) and wave_plan.directions == {"u": ((-1,), (1,)), "c": ((-1,), (1,))}
    assert plan(wave.ir).directions == {"u": ((-1,), (1,))}
