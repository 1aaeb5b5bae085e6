"""The stencil benchmark runs end to end (quick sizes, hand-written C as the
only peer) and its report renders: the numbers in docs/ come from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_stencil_benchmark_quick_run_and_report(tmp_path, monkeypatch):
    out = tmp_path / "s.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stencils.py"), "--quick", "--peers", "c",
                          "--only", "heat2d", "--repeat", "1", "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    data = json.loads(out.read_text())
    case = data["cases"][0]
    assert set(case["tools"]) == {"msc", "msc_sweep_tuned", "msc_time_tiled", "msc_auto", "c_handwritten"}
    assert set(case["msc_schedules"]) == {"msc", "msc_sweep_tuned", "msc_time_tiled", "msc_auto"}
    assert case["tools"]["c_handwritten"]["max_abs_diff_vs_msc"] < 1e-12  # same answer as the peer
    assert case["stream_copy_best_gbs"]["stream_copy"] > 0 and case["stream_copy_best_gbs"]["stream_copy_nt"] > 0
    for entry in case["tools"].values():  # a call's wall time holds its kernel time
        assert entry["loop_wall_ms_per_step"] >= entry["loop_kernel_ms_per_step"] > 0
        assert entry["one_shot_wall_ms_per_step"] >= entry["ms_per_step"] > 0
    report = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "report.py"), str(out)],
                            capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    assert "| msc_time_tiled |" in report.stdout and "best peer c_handwritten" in report.stdout
    assert "| msc_auto |" in report.stdout and "x, auto " in report.stdout


def test_readme_pde_figures_are_the_latest_committed_run():
    """Every PDE figure the README quotes is the one of the newest benchmarks/results/pde-run*.json."""
    latest = max((ROOT / "benchmarks" / "results").glob("pde-run*.json"), key=lambda p: int(p.stem.split("run")[1]))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert latest.name in readme
    cases = {c["case"]: c for c in json.loads(latest.read_text())["cases"]}
    two, three = cases["2D 1000^2"], cases["3D 64^3"]
    figures = [f"{two['assembly']['ratio_msc_over_kron']:.2f}x", f"{three['assembly']['ratio_msc_over_kron']:.2f}x",
               f"{two['implicit_step']['msc']['per_step_s']:.2f} s", f"{three['implicit_step']['msc']['per_step_s']:.2f} s",
               f"{two['implicit_step']['cholmod']['per_step_s']:.2f} s",
               f"{three['implicit_step']['cholmod']['per_step_s']:.2f} s",
               f"{round(1 / two['implicit_step']['ratio_msc_over_scipy_spsolve'], -1):.0f}x less"]
    text = " ".join(readme.split())
    for figure in figures:
        assert figure in text, f"README lacks {figure} from {latest.name}"


def test_several_level_counters_in_docs_are_the_committed_run():
    """docs/cuda.md's table of stencils of several levels or fields quotes every float64 row of
    benchmarks/results/cuda_counters-several.json, and that run met its goals."""
    data = json.loads((ROOT / "benchmarks" / "results" / "cuda_counters-several.json").read_text())
    assert data["all_goals_met"]
    lines = (ROOT / "docs" / "cuda.md").read_text(encoding="utf-8").splitlines()
    for row in (r for r in data["rows"] if r["dtype"] == "float64"):
        shared = row["shared_accesses_per_update"]
        cells = (f"| {row['load_bytes_per_update']:.2f} | {row['sectors_per_update']:.3f} | "
                 f"{row['dram_bytes_per_update']:.2f} | {f'{shared:.3f}' if shared else '0'} |")
        assert any(line.startswith(f"| {row['stencil']}") and line.endswith(cells) for line in lines), row


def test_readme_multigrid_figures_are_the_committed_run():
    """The multigrid figures the README quotes are those of benchmarks/results/pde-multigrid.json."""
    data = json.loads((ROOT / "benchmarks" / "results" / "pde-multigrid.json").read_text())
    cases = {c["unknowns"]: c for c in data["multigrid"]}
    small, large, huge = cases[64**3], cases[128**3], cases[256**3]
    figures = [f"{small['msc_multigrid']['total_s']:.3f} s at 64^3", f"{large['msc_multigrid']['total_s']:.2f} s at 128^3",
               f"{small['ratio_msc_over_pyamg']:.2f}x and {large['ratio_msc_over_pyamg']:.2f}x pyamg's time",
               f"in {huge['msc_multigrid']['total_s']:.1f} s", f"takes {small['msc_direct']['total_s']:.1f} s at 64^3",
               f"{small['msc_multigrid']['iterations']} iterations at every size"]
    assert {c["msc_multigrid"]["iterations"] for c in cases.values()} == {small["msc_multigrid"]["iterations"]}
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    for figure in figures:
        assert figure in text, f"README lacks {figure!r} from pde-multigrid.json"


@pytest.mark.parametrize("run", ["tuner.json", "tuner-xeon.json", "tuner-xeon-pipeline.json",
                                 "tuner-xeon-rings.json", "tuner-xeon-fma.json", "tuner-xeon-in-place.json"])
def test_tuner_table_is_the_committed_run(run):
    """docs/benchmarks.md's tuner tables (AMD EPYC, Intel Xeon) are the committed runs, row by row."""
    data = json.loads((ROOT / "benchmarks" / "results" / run).read_text())
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for row in data["rows"]:
        figures = (", ".join(f"{f['tuning_s']:.1f}" for f in row["fresh"]),
                   f"{row['exhaustive']['tuning_s']:.1f} ({row['exhaustive']['timed']})",
                   f"{row['worst_fresh_over_exhaustive']:.2f}x", f"{row['fresh_spread']:.2f}x")
        assert _table_has_row(text, row["stencil"], figures), (row["stencil"], figures)


def _table_has_row(text: str, stencil: str, figures: tuple[str, ...]) -> bool:
    """Whether a table row of `text` for `stencil` holds every one of `figures`."""
    return any(all(f in line for f in figures) for line in text.splitlines() if line.startswith(f"| {stencil} "))


@pytest.mark.parametrize("run", ["in_cache.json", "in_cache-xeon.json", "in_cache-xeon-pipeline.json"])
def test_in_cache_table_is_the_committed_run(run):
    """docs/benchmarks.md's tables of time tiles against their loops in cache (AMD EPYC, Intel Xeon
    with the grids between) are the committed runs, row by row."""
    data = json.loads((ROOT / "benchmarks" / "results" / run).read_text())
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for row in data["rows"]:
        figures = (row["schedule"].removeprefix("Schedule()."),
                   *(f"{row[key]:.2f}" for key in ("in_cache_gstencils_1_thread", "full_gstencils_1_thread",
                                                   "full_gstencils_per_thread", "per_thread_for_2x_best_peer")),
                   " | ".join(f"{g['gstencils']:.2f}" for g in row.get("growth_1_thread", [])))
        assert _table_has_row(text, row["stencil"], figures), (row["stencil"], figures)
        if "wavefront" in row:  # the same tile in wavefronts, timed in the same rounds
            wave = row["wavefront"]
            figures = (wave["schedule"].removeprefix("Schedule().") + "`",
                       *(f"{wave[key]:.2f}" for key in ("in_cache_gstencils_1_thread", "full_gstencils_1_thread",
                                                        "full_gstencils_per_thread")),
                       " | ".join(f"{g['gstencils']:.2f}" for g in wave["growth_1_thread"]))
            assert _table_has_row(text, f"{row['stencil']} (wavefronts)", figures), (row["stencil"], figures)


@pytest.mark.parametrize("run", ["stencils-full.json", "stencils-full-xeon.json", "stencils-full-xeon-pipeline.json",
                                 "stencils-full-xeon-jam.json", "stencils-full-xeon-rings.json",
                                 "stencils-full-xeon-auto.json", "stencils-full-xeon-fma.json",
                                 "stencils-full-xeon-runoff.json", "stencils-full-xeon-in-place.json"])
def test_full_size_stencil_tables_are_the_committed_run(run):
    """docs/benchmarks.md's full-size stencil tables (AMD EPYC, Intel Xeon) are
    benchmarks/report.py's rendering of the committed runs."""
    report = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "report.py"),
                             str(ROOT / "benchmarks" / "results" / run)],
                            capture_output=True, text=True, check=True)
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert report.stdout.strip() in text


def test_readme_says_what_the_test_command_runs_and_skips():
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    for words in ('-m "not slow"', "marked `slow`", "MSC_MATRICES", "skipped"):
        assert words in text, words


def test_gpu_model_bounds_every_kernel_measured_on_the_device(tmp_path):
    """benchmarks/gpu_model.py on the committed counters of the kernels the H200 measured
    (the ring form, cuda_counters-ring.json): its bound is an upper bound (no measured
    figure above it by more than noise), and docs/cuda.md shows this run's figures."""
    out = tmp_path / "model.json"
    results = ROOT / "benchmarks" / "results"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_model.py"), "--counters",
                          str(results / "cuda_counters-ring.json"), "--measured", str(results / "stencils_gpu.json"),
                          "--json", str(out)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    rows = [r for r in json.loads(out.read_text())["rows"] if r["measured_gstencil_per_s"] is not None]
    assert len(rows) == 8
    docs = (ROOT / "docs" / "cuda.md").read_text(encoding="utf-8")
    for r in rows:
        assert r["measured_gstencil_per_s"] <= 1.05 * r["bound_gstencil_per_s"], r
        line = f"| {r['stencil']} | {r['dtype']} | {r['schedule']} | {r['bound_gstencil_per_s']:.0f} |"
        assert line in docs, line


def test_gpu_model_tensor_core_issue_bounds_in_docs_are_the_committed_run(tmp_path):
    """benchmarks/gpu_model.py with the tensor-core kernels' committed SASS counts: each
    tensor-core kernel gets the instructions of its staging loads, MMAs (a warp's each) and
    written points, it bounds the kernel exactly where it is the smallest bound, and docs/cuda.md shows this
    run's figures."""
    out = tmp_path / "model.json"
    results = ROOT / "benchmarks" / "results"
    sass_files = sorted(results.glob("cuda_resources-tensor_cores*.json"))
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_model.py"), "--counters",
                          str(results / "cuda_counters.json"), "--resources", *map(str, sass_files),
                          "--json", str(out)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    rows = [r for r in json.loads(out.read_text())["rows"] if r["instructions_per_update"] is not None]
    assert {r["schedule"] for r in rows} == {"tensor cores", "tensor cores, time_tile(4)"} and len(rows) == 12
    counted = {(r["stencil"], r["dtype"], r["schedule"]): r
               for r in json.loads((results / "cuda_counters.json").read_text())["rows"]}
    kernels = {}
    for path in sass_files:
        sass = json.loads(path.read_text())
        fused = "time_tile" in sass["schedule"]
        for r in sass["rows"]:
            if r["index"] == "int":
                kernels[(r["stencil"], r["dtype"], "tensor cores, time_tile(4)" if fused else "tensor cores")] = r
    docs = (ROOT / "docs" / "cuda.md").read_text(encoding="utf-8")
    for r in rows:
        key = (r["stencil"], r["dtype"], r["schedule"])
        c, k, itemsize = counted[key], kernels[key], 8 if r["dtype"] == "float64" else 4
        assert k["flops_per_mma"] == (512 if r["dtype"] == "float64" else 1024)
        expected = (c["load_bytes_per_update"] / itemsize * k["instructions_per_load"]
                    + c["mma_flops_per_update"] / k["flops_per_mma"] * 32 * k["instructions_per_mma"]
                    + c["store_bytes_per_update"] / itemsize * k["instructions_per_point"])
        assert r["instructions_per_update"] == pytest.approx(expected)
        issue = 4 * 32 * 132 * 1.98e9 / r["instructions_per_update"] / 1e9
        assert (r["bounded_by"] == "instruction issue") == (abs(issue - r["bound_gstencil_per_s"]) < 1e-6 * issue)
        line = (f"| {r['stencil']} | {r['dtype']} | {r['schedule']} | {r['bound_gstencil_per_s']:.0f} | "
                f"{r['bounded_by']} | {issue:.0f} |")
        assert line in docs, line


def test_gpu_model_at_the_larger_2d_grid_is_the_committed_run(tmp_path):
    """benchmarks/gpu_model.py on the counters of the 292 x 1284 grid with the committed SASS
    counts gives the committed gpu_model-2d-1284.json, and docs/cuda.md shows its figures
    for every kernel but the grid-mapped ones, box2d25p's tensor cores among them."""
    out = tmp_path / "model.json"
    results = ROOT / "benchmarks" / "results"
    counters = results / "cuda_counters-2d-1284.json"
    sass_files = [results / "cuda_resources.json", results / "cuda_resources-time_tile4.json",
                  *sorted(results.glob("cuda_resources-tensor_cores*.json"))]
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_model.py"), "--counters", str(counters),
                          "--resources", *map(str, sass_files), "--json", str(out)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    rows = json.loads(out.read_text())["rows"]
    assert rows == json.loads((results / "gpu_model-2d-1284.json").read_text())["rows"]
    assert {(r["stencil"], r["schedule"]) for r in rows if r["instructions_per_update"] is not None} >= {
        ("box2d25p", "tensor cores"), ("box2d25p", "tensor cores, time_tile(4)")}
    counted = {(r["stencil"], r["dtype"], r["schedule"]): r for r in json.loads(counters.read_text())["rows"]}
    docs = (ROOT / "docs" / "cuda.md").read_text(encoding="utf-8")
    for r in rows:
        if r["schedule"] == "grid-mapped":
            continue
        c = counted[(r["stencil"], r["dtype"], r["schedule"])]
        line = (f"| {r['stencil']} | {r['dtype']} | {r['schedule']} | {c['dram_bytes_per_update']:.2f} | "
                f"{c['shared_accesses_per_update']:.3f} | {c['mma_flops_per_update']:.0f} | "
                f"{r['bound_gstencil_per_s']:.0f} | {r['bounded_by']} |")
        assert line in docs, line


def test_gpu_model_issue_bounds_in_docs_are_the_committed_run(tmp_path):
    """benchmarks/gpu_model.py with the committed SASS counts (--resources): the streamed
    kernels of the default schedule and of time_tile(4) get an issue bound, it is the
    bound where it is the smallest, and docs/cuda.md shows this run's figures."""
    out = tmp_path / "model.json"
    results = ROOT / "benchmarks" / "results"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_model.py"), "--counters",
                          str(results / "cuda_counters.json"), "--resources", str(results / "cuda_resources.json"),
                          str(results / "cuda_resources-time_tile4.json"), "--json", str(out)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    rows = [r for r in json.loads(out.read_text())["rows"] if r["instructions_per_update"] is not None]
    assert {r["schedule"] for r in rows} == {"default (streamed)", "time_tile(4)"} and len(rows) == 16
    docs = (ROOT / "docs" / "cuda.md").read_text(encoding="utf-8")
    for r in rows:
        issue = 4 * 32 * 132 * 1.98e9 / r["instructions_per_update"] / 1e9
        assert r["bound_gstencil_per_s"] <= issue * (1 + 1e-9)
        assert (r["bounded_by"] == "instruction issue") == (abs(issue - r["bound_gstencil_per_s"]) < 1e-6 * issue)
        line = (f"| {r['stencil']} | {r['dtype']} | {r['schedule']} | {r['bound_gstencil_per_s']:.0f} | "
                f"{r['bounded_by']} | {issue:.0f} |")
        assert line in docs, line
