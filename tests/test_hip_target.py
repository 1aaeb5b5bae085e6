"""The HIP target (AMD GPUs): the GPU family's generator with AMD's runtime
names. Generated stencils and holdout-style cases (star and box, 2D and 3D,
two time levels, float32) run through the CUDA emulator (`emulate=True`: the
same kernel.hip built by g++) against the reference interpreter, time tiles
with the emulator's blocks in reverse order; every HIP kernel these tests
generate compiles with hipcc for gfx90a, warnings as errors; the emitted
hipcc project builds both ways and fails loudly without an AMD GPU."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from stencil_gen import generate, program_arguments
from test_schedules import random_schedule

import msc
from msc import Schedule, t, x, y, z
from msc.codegen import get_target, target_names
from msc.errors import ScheduleError, TargetError
from msc.runtime import cuda_emu
from msc.runtime.build import atomic_write_text, cache_dir
from msc.targets.gpu.hip import VENDOR, has_amd_gpu, hipify

pytestmark = pytest.mark.usefixtures("without_counters")  # results only (conftest.py)

HIPCC = shutil.which("hipcc")
needs_hipcc = pytest.mark.skipif(HIPCC is None, reason="hipcc is not installed (tools/toolchains.sh installs it)")
ARCH = "gfx90a"
HIP_ENV = dict(os.environ, HIP_PLATFORM="amd")  # hipcc beside nvcc builds for NVIDIA unless told


@pytest.fixture(autouse=True)
def reverse_blocks(monkeypatch):
    """Every emulated launch runs its blocks last first and reports a byte two blocks both write;
    a block's threads run last first too (a read of a lower thread's write needs its barrier)."""

    monkeypatch.setenv(cuda_emu.BLOCK_ORDER, "reverse")
    monkeypatch.setenv(cuda_emu.THREAD_ORDER, "reverse")


def hipcc_check(source: str, directory: Path) -> None:
    """`hipcc -c` for gfx90a, warnings as errors, when hipcc is installed; a source checked
    before (same text, header and hipcc) is not compiled again."""
    if HIPCC is None:
        return

    header = b"".join(path.read_bytes() for path in sorted(Path(cuda_emu.EMULATOR_DIR).glob("msc_*.h")))
    digest = hashlib.sha256(source.encode() + header + str(Path(HIPCC).resolve()).encode()).hexdigest()[:32]
    stamp = cache_dir() / "hipcc-checked" / digest
    if stamp.exists():
        return
    path = directory / "kernel.hip"
    path.write_text(source)
    cmd = [HIPCC, "-c", f"--offload-arch={ARCH}", f"-I{cuda_emu.EMULATOR_DIR}", "-Wall", "-Werror", "-x", "hip",
           str(path), "-o", str(directory / "kernel.o")]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=HIP_ENV)
    assert proc.returncode == 0, proc.stderr[-4000:]
    atomic_write_text(stamp, "")


def check_against_reference(stencil, inputs, steps, dtype, schedule, tmp_path, assert_matches):
    inputs = {k: [a.astype(dtype) for a in v] if isinstance(v, list) else v.astype(dtype) if isinstance(v, np.ndarray)
              else v for k, v in inputs.items()}
    expected = stencil.reference(steps=steps, dtype=dtype, **inputs)
    kernel = stencil.compile(target="hip", dtype=dtype, schedule=schedule, emulate=True)
    assert kernel.target == "hip" and "hipMalloc" in kernel.source and "cuda" not in kernel.source.replace(
        "__cuda_array_interface__", "")
    assert_matches(kernel.run(steps=steps, **inputs), expected, dtype, (stencil.name, schedule))
    hipcc_check(kernel.source, tmp_path)


def test_hip_is_registered_and_says_how_to_run_without_a_gpu():
    assert "hip" in target_names() and get_target("hip").compile_options == ("emulate",)
    with pytest.raises(TargetError, match=r"target 'hip': no AMD GPU was found; compile\(target='hip', emulate=True\)"):
        heat.compile(target="hip")


@pytest.mark.parametrize("seed", range(0, 48, 3))
def test_generated_stencils_match_the_reference(seed, tmp_path, assert_matches):
    case = generate(seed)
    schedule = replace(random_schedule(seed, case.stencil), streaming=False, prefetch_distance=0) if seed % 2 else None
    check_against_reference(case.stencil, case.inputs, case.steps, case.dtype, schedule, tmp_path, assert_matches)


@msc.stencil
def heat(u, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1]
                                           - 4 * u[t, x, y])


@msc.stencil
def box2d9p(u):
    u[t + 1, x, y] = sum(u[t, x + i, y + j] * (0.1 + 0.01 * (i + 2 * j)) for i in (-1, 0, 1) for j in (-1, 0, 1))


@msc.stencil
def heat3d(u):
    u[t + 1, x, y, z] = 0.4 * u[t, x, y, z] + 0.1 * (u[t, x - 1, y, z] + u[t, x + 1, y, z] + u[t, x, y - 1, z]
                                                     + u[t, x, y + 1, z] + u[t, x, y, z - 1] + u[t, x, y, z + 1])


@msc.stencil
def box3d27p(u):
    u[t + 1, x, y, z] = sum(u[t, x + i, y + j, z + k] for i in (-1, 0, 1) for j in (-1, 0, 1)
                            for k in (-1, 0, 1)) / 27.5


@msc.stencil
def wave(u, c):
    u[t + 1, x, y] = 2 * u[t, x, y] - u[t - 1, x, y] + c[x, y] * (
        u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y])


def _inputs(stencil: msc.Stencil, shape: tuple[int, ...]) -> dict:
    rng = np.random.default_rng(5)
    out: dict = {f.name: [rng.random(shape) for _ in range(f.window)] if f.window > 1 else rng.random(shape)
                 for f in stencil.ir.fields}
    out.update({p: 0.1 for p in stencil.ir.params})
    if "c" in out:
        out["c"] = 0.1 * out["c"]
    return out


@pytest.mark.parametrize("stencil,shape,dtype,schedule", [
    (heat, (34, 66), "float64", None),
    (heat, (34, 66), "float32", Schedule().time_tile(2, x=8, y=32)),
    (box2d9p, (30, 40), "float64", Schedule().tile(x=8, y=32)),
    (heat3d, (12, 14, 36), "float64", None),
    (box3d27p, (10, 12, 34), "float32", None),
    (wave, (26, 40), "float64", Schedule().time_tile(3, x=8, y=16)),
    (box3d27p, (10, 30, 34), "float64", Schedule().time_tile(4, x=32, y=24, z=24)),  # 64 KiB of dynamic shared memory
    (heat3d, (12, 14, 36), "float32", Schedule().prefetch(4)),  # loads 4 planes ahead
], ids=["heat2d", "heat2d-f32-time-tile", "box2d9p-tiled", "heat3d", "box3d27p-f32", "wave-time-tile",
        "box3d27p-dynamic-shared", "heat3d-f32-prefetch"])
def test_holdout_style_cases_match_the_reference(stencil, shape, dtype, schedule, tmp_path, assert_matches):
    check_against_reference(stencil, _inputs(stencil, shape), 7, dtype, schedule, tmp_path, assert_matches)


def test_tensor_cores_are_refused_naming_the_target():
    with pytest.raises(ScheduleError, match=r"target 'hip' has no tensor cores; they run on target 'cuda'"):
        heat.compile(target="hip", emulate=True, schedule=Schedule().tensor_cores("fp64"))


def test_every_cuda_runtime_name_has_a_hip_name():
    assert hipify("cudaMalloc(&p, n); MSC_CUDA_CHECK(cudaDeviceSynchronize());") == \
        "hipMalloc(&p, n); MSC_HIP_CHECK(hipDeviceSynchronize());"
    with pytest.raises(TargetError, match="no HIP name for cudaStreamCreate: add it to msc/targets/gpu/hip.py VENDOR"):
        hipify("cudaStreamCreate(&s);")
    assert all(k != v for k, v in VENDOR.items())


def test_emitted_project_builds_with_hipcc_and_the_emulator(tmp_path):
    out = heat.emit("hip", tmp_path / "heat", dtype="float64")
    assert {"kernel.hip", "main.hip", "Makefile", "msc_hip.h"} <= {p.name for p in out.iterdir()}
    makefile = (out / "Makefile").read_text()
    assert "HIPCC ?= hipcc" in makefile and f"ARCH ?= {ARCH}" in makefile and "--offload-arch=$(ARCH)" in makefile
    assert "HIP_PLATFORM ?= amd" in makefile and "export HIP_PLATFORM" in makefile
    done = subprocess.run(["make", "-C", str(out), "emulate"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    inputs = _inputs(heat, (20, 36))
    args = program_arguments(inputs, tmp_path)
    run = subprocess.run([str(out / "heat-emulated"), "--steps", "5", *args, "--out", f"u={tmp_path / 'u.npy'}"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(np.load(tmp_path / "u.npy"), heat.reference(steps=5, **inputs)["u"], rtol=1e-12)
    if HIPCC is None:
        pytest.skip("hipcc is not installed (tools/toolchains.sh installs it): the hipcc build was not checked")
    plain = {k: v for k, v in os.environ.items() if k != "HIP_PLATFORM"}  # the Makefile's own HIP_PLATFORM ?= amd
    built = subprocess.run(["make", "-C", str(out)], capture_output=True, text=True, env=plain)
    assert built.returncode == 0, built.stderr
    real = subprocess.run([str(out / "heat"), "--steps", "5", *args, "--out", f"u={tmp_path / 'gpu.npy'}"],
                          capture_output=True, text=True)
    if has_amd_gpu():
        assert real.returncode == 0, real.stderr
        np.testing.assert_allclose(np.load(tmp_path / "gpu.npy"), heat.reference(steps=5, **inputs)["u"], rtol=1e-12)
    else:  # fails loudly: non-zero, no throughput, no output file
        assert real.returncode == 2 and "msc: HIP error" in real.stderr and not (tmp_path / "gpu.npy").exists()
        assert real.stdout == ""
