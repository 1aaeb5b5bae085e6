"""The generated wmma kernels (codegen/cuda_tensor_core.py), run by the CUDA
emulator, equal the numpy replay of their plan and the reference interpreter
for 2D and 3D, star and box stencils of radius 1-4, both boundaries, in
every precision; and every one compiles with nvcc for sm_80 and sm_90."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from test_tensor_core import CASES, U, U32, magnitude, make_inputs, make_stencil, run_replay
from test_tensor_core import _two as two_statements

from msc.codegen import cuda_tensor_core as ctc
from msc.codegen.tensor_core import MMA_SHAPES
from msc.runtime import cuda_emu

PRECISIONS = tuple(MMA_SHAPES)
NVCC_FLAGS = ("-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
              "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Werror")  # fmt: skip


def dtype_of(precision: str) -> str:
    return "float64" if precision == "fp64" else "float32"


@pytest.fixture(scope="module")
def kernels():
    """Per precision: the stencils, their kernels and one emulated library holding them all."""
    built = {}
    for precision in PRECISIONS:
        stencils = [make_stencil(*case) for case in CASES]
        ks = [ctc.generate(st.ir, 0, precision, dtype_of(precision), f"tc{case[0]}", wrap=case[4] == "periodic")
              for st, case in zip(stencils, CASES)]
        built[precision] = (stencils, ks, ctc.build_emulated(ks, f"tensor_cores_{precision}"))
    return built


def sources(inputs: dict) -> dict:
    return {("u", 0): inputs["u"][1], ("u", -1): inputs["u"][0], ("k", None): inputs["k"]}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("index", range(len(CASES)))
def test_emulated_kernel_equals_replay_and_reference(kernels, precision, index):
    seed, ndim, shape, radius, boundary = CASES[index]
    stencils, ks, library = kernels[precision]
    st, kernel = stencils[index], ks[index]
    dtype = dtype_of(precision)
    inputs = make_inputs(st, seed, dtype)
    out = inputs["u"][1]
    got = ctc.step(kernel, library, sources(inputs), out, {"alpha": inputs["alpha"]})
    replayed, ref = run_replay(st, kernel.plan, inputs, dtype)
    periodic = boundary == "periodic"
    inner = tuple(slice(None) if periodic else slice(r, -r) for r in st.ir.radius)
    if not periodic:  # the ring is left as it was
        ring = np.ones(out.shape, dtype=bool)
        ring[inner] = False
        np.testing.assert_array_equal(got[ring], out[ring])
    got = got[inner]
    if precision == "fp64":
        np.testing.assert_allclose(got, replayed, rtol=0, atol=1e-14)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)
        return
    # the emulator's MMA is the replay's model: each block's exact sum rounded once to float32
    np.testing.assert_allclose(got, replayed, rtol=1e-6, atol=1e-7)
    s, absolute = magnitude(st, inputs, precision)
    bound = (2 * U + U * U + (kernel.plan.mmas_per_tile + 3) * U32) * s + 2.0 ** -25 * absolute
    err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    assert np.all(err <= bound), f"max error / sum|w||x| = {np.max(err / s):.3g}"


def test_second_statement_reads_the_first_ones_new_level():
    rng = np.random.default_rng(7)
    inputs = {"a": rng.random((19, 12)), "b": rng.random((19, 12)), "beta": 0.4}
    ref = two_statements.reference(steps=1, **inputs)
    ks = [ctc.generate(two_statements.ir, s, "fp64", "float64", f"two{s}") for s in (0, 1)]
    library = ctc.build_emulated(ks, "tensor_cores_two")
    levels = {("a", 0): inputs["a"], ("b", 0): inputs["b"], ("a", 1): ref["a"]}
    for kernel, target in zip(ks, "ab"):
        got = ctc.step(kernel, library, levels, inputs[target], {"beta": 0.4})
        np.testing.assert_allclose(got[1:-1, 1:-1], ref[target][1:-1, 1:-1], rtol=0, atol=1e-12)


def test_staging_is_aligned_for_wmma(kernels):
    for precision in PRECISIONS:
        _, ks, _ = kernels[precision]
        elements = 32 // {"double": 8, "tf32": 4, "half": 2}[MMA_SHAPES[precision].operand]
        for kernel in ks:
            for s in kernel.staging:
                assert s.pitch % elements == 0 and s.offset % elements == 0
                assert (s.column_offset + kernel.plan.column_alignment(s.source)) % elements == 0
            assert kernel.shared_bytes <= ctc.MAX_SHARED


def test_nvcc_compiles_every_tensor_core_kernel(kernels, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found on PATH: the tensor-core kernels are not compiled for sm_80/sm_90")
    files = []
    for precision in PRECISIONS:
        path = tmp_path / f"tensor_cores_{precision}.cu"
        path.write_text(ctc.source_file(kernels[precision][1]))
        files.append(str(path))
    command = [nvcc, "-c", *NVCC_FLAGS, f"-I{cuda_emu.EMULATOR_DIR}", *files, "-odir", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
