"""The generated wmma kernels (msc/targets/gpu/cuda_tensor_core.py), run by the CUDA
emulator, equal the numpy replay of their plan and the reference interpreter
for 2D and 3D, star and box stencils of radius 1-4, both boundaries, in
every precision, alone and inside the CUDA target's time loop
(`Schedule().tensor_cores(precision)`); every one compiles with nvcc for
sm_80 and sm_90."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from test_tensor_core import CASES, U32, U, magnitude, make_inputs, make_stencil, run_replay
from test_tensor_core import _nonlinear as nonlinear
from test_tensor_core import _two as two_statements
from test_tensor_core import _variable as variable

import msc
from msc.codegen import get_target
from msc.errors import ScheduleError
from msc.poly.schedule import TENSOR_CORE_PRECISIONS, parse_schedule
from msc.runtime import cuda_emu
from msc.targets.gpu import cuda_tensor_core as ctc
from msc.targets.gpu.tensor_core import MMA_SHAPES

pytestmark = pytest.mark.usefixtures("without_counters")  # results only (conftest.py)

PRECISIONS = tuple(MMA_SHAPES)
NVCC_FLAGS = ("--threads", "2", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
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
def test_emulated_kernel_equals_replay_and_reference(kernels, precision, index, monkeypatch):
    if index % 2:  # half the cases with each block's threads last first: a staging barrier that is missing shows
        monkeypatch.setenv(cuda_emu.THREAD_ORDER, "reverse")
        monkeypatch.setenv(cuda_emu.BLOCK_ORDER, "reverse")  # and blocks last first: a point two write is diagnosed
    seed, boundary = CASES[index][0], CASES[index][4]
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


def test_staging_divides_no_element_by_its_pitch(kernels):
    """The warps stage a plane by rows, their lanes over a row's columns (`staged_rows`): no
    staged element is divided by the pitch or the plane (what took most of the instructions of
    staging element by element over the block's threads)."""
    for precision in PRECISIONS:
        _, ks, _ = kernels[precision]
        for kernel in ks:
            start = kernel.code.index("for (int q = warp;")
            staging = kernel.code[start:kernel.code.index("__syncthreads();", start)]
            for s in kernel.staging:
                divided = re.findall(rf"[/%] ({s.pitch}|{s.rows * s.pitch})\b", staging)
                assert not divided, (kernel.name, s.source, divided)


def test_held_weights_are_loaded_once_and_shared_inputs_once(kernels):
    """Where the weight blocks fit WEIGHT_REGISTERS, a warp loads each into a fragment of its own
    before its products, and an input fragment that several (tile, chunk) products read is loaded
    once: fewer loads than products, the same products."""
    from msc.codegen import kernel_ir as k

    held = 0
    for precision in PRECISIONS:
        for kernel in kernels[precision][1]:
            if ctc.weight_registers(kernel) > ctc.WEIGHT_REGISTERS:
                continue
            held += 1
            nodes = list(k.walk(ctc.device_function(kernel).body))
            loads = [n for n in nodes if isinstance(n, k.MatrixLoad)]
            products = [n for n in nodes if isinstance(n, k.MatrixMultiply)]
            weights = [n for n in loads if n.fragment.startswith("w")]
            assert len(weights) == kernel.plan.mmas_per_tile
            assert all(nodes.index(w) < nodes.index(products[0]) for w in weights)
            assert len(products) == kernel.plan.mmas_per_tile * kernel.tiles
            if kernel.tiles > 1 and any(line.axis == "cols" and len(line.chunks) > 1 for line in kernel.plan.lines):
                assert len(loads) - len(weights) < len(products)
    assert held >= 10


def assert_nvcc_compiles(tmp_path, sources: dict[str, str], what: str) -> None:
    """nvcc compiles each source (name: text) for sm_80 and sm_90 without a warning; a skip
    naming `what` where nvcc is not on PATH."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip(f"nvcc not found on PATH: {what} are not compiled for sm_80/sm_90")
    files = []
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
        files.append(str(tmp_path / name))
    command = [nvcc, "-c", *NVCC_FLAGS, f"-I{cuda_emu.EMULATOR_DIR}", *files, "-odir", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_nvcc_compiles_every_tensor_core_kernel(kernels, tmp_path):
    assert_nvcc_compiles(tmp_path, {f"tensor_cores_{p}.cu": ctc.source_file(kernels[p][1]) for p in PRECISIONS},
                         "the tensor-core kernels")


# ---------------------------------------------------------------- through the CUDA target

TARGET_CASES = [CASES[i] for i in (1, 7, 11, 12)]  # 2D star/box, 3D star/box, both boundaries, radius 1-4


def target_params() -> list:
    """TARGET_CASES in every precision (each is a build of its own): by default fp64 on all of
    them and one case of tf32 and fp16, the rest slow. Every case in every precision runs
    through the generator itself above (one build per precision)."""
    default = {("fp64", c) for c in TARGET_CASES} | {("tf32", TARGET_CASES[1]), ("fp16", TARGET_CASES[2])}
    return [pytest.param(p, c, id=f"{p}-{c[1]}d-{c[2]}-r{c[3]}-{c[4]}",
                         marks=() if (p, c) in default else pytest.mark.slow)
            for p in PRECISIONS for c in TARGET_CASES]


@pytest.mark.parametrize("precision,case", target_params())
def test_target_cuda_with_tensor_cores_matches_reference(precision, case):
    st = make_stencil(*case)
    dtype = dtype_of(precision)
    inputs = make_inputs(st, case[0], dtype)
    kernel = st.compile("cuda", dtype=dtype, schedule=msc.Schedule().tensor_cores(precision), emulate=True)
    assert "nvcuda::wmma::mma_sync" in kernel.source
    got = kernel.run(steps=3, **inputs)
    ref = st.reference(steps=3, dtype=dtype, **inputs)
    for name in ref:
        err = np.abs(got[name].astype(np.float64) - ref[name].astype(np.float64)).max()
        # fp64 to rounding; tf32/fp16: three steps of the per-step bound (about 5e-4 of sum|w x|,
        # inputs in [0, 1)): measured up to 1.5e-4
        assert err <= (1e-12 if precision == "fp64" else 1e-3 * np.abs(ref[name]).max()), (name, err)


@pytest.mark.parametrize("index", [9, 12])  # 3D star r2 dirichlet, 3D box r1 periodic
def test_3d_blocks_stream_their_planes(index, monkeypatch):
    """In 3D a block computes ctc.PLANES planes in order, staging each input plane once into
    a ring of planes: with more planes than that (two blocks and a tail along the first
    dimension) every plane still matches the reference, threads in reverse order too, the
    ring slots of every source (u at t and t-1, k) included."""
    monkeypatch.setenv(cuda_emu.THREAD_ORDER, "reverse")
    case = CASES[index]
    assert case[1] == 3
    st = make_stencil(*case)
    r = st.ir.radius
    periodic = case[4] == "periodic"
    shape = tuple(n + (0 if periodic else 2 * rr) for n, rr in zip((2 * ctc.PLANES + 3, 9, 10), r))
    rng = np.random.default_rng(case[0])
    inputs = {"u": [rng.random(shape), rng.random(shape)], "k": rng.random(shape), "alpha": 0.3}
    if not periodic:  # the reference fixes the ring of every level to the newest one's
        inner = tuple(slice(rr, n - rr) for rr, n in zip(r, shape))
        ring = inputs["u"][1].copy()
        ring[inner] = inputs["u"][0][inner]
        inputs["u"][0] = ring
    kernel = st.compile("cuda", schedule=msc.Schedule().tensor_cores("fp64"), emulate=True)
    got, ref = kernel.run(steps=2, **inputs), st.reference(steps=2, **inputs)
    for name in ref:
        assert np.abs(got[name] - ref[name]).max() <= 1e-12, name


def test_target_second_statement_reads_the_first_ones_new_level():
    rng = np.random.default_rng(5)
    inputs = {"a": rng.random((19, 12)), "b": rng.random((19, 12)), "beta": 0.4}
    kernel = two_statements.compile("cuda", schedule=msc.Schedule().tensor_cores("fp64"), emulate=True)
    got, ref = kernel.run(steps=4, **inputs), two_statements.reference(steps=4, **inputs)
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=0, atol=1e-12)


def test_tensor_cores_schedule_primitive():
    s = msc.Schedule().tensor_cores("tf32")
    assert str(s) == "Schedule().tensor_cores('tf32')" and parse_schedule(str(s)) == s
    assert msc.Schedule().tensor_cores("fp64") != s  # part of the kernel cache key
    with pytest.raises(ScheduleError, match="precision must be one of 'fp64', 'tf32', 'fp16', got 'bf16'"):
        msc.Schedule().tensor_cores("bf16")
    assert set(MMA_SHAPES) == set(TENSOR_CORE_PRECISIONS)
    lossy = msc.Schedule().tensor_cores("fp16", lossy=True)
    assert str(lossy) == "Schedule().tensor_cores('fp16', lossy=True)" and parse_schedule(str(lossy)) == lossy


@pytest.mark.parametrize("precision", ["tf32", "fp16"])
def test_rounded_precisions_on_float64_are_refused_unless_lossy(precision):
    """tf32 and fp16 keep 10 mantissa bits of float64's 52: asked for by name only."""
    st = make_stencil(*CASES[0])
    with pytest.raises(ScheduleError, match=rf"tensor_cores\('{precision}'\) on float64 .*10 mantissa bits.*lossy=True"):
        st.compile("cuda", schedule=msc.Schedule().tensor_cores(precision), emulate=True)
    kernel = st.compile("cuda", schedule=msc.Schedule().tensor_cores(precision, lossy=True), emulate=True)
    assert kernel.ir.dtype == "float64"
    st.compile("cuda", dtype="float32", schedule=msc.Schedule().tensor_cores(precision), emulate=True)


@pytest.mark.parametrize("target", ["openmp", "serial"])
def test_other_targets_refuse_tensor_cores(target):
    st = make_stencil(*CASES[0])
    with pytest.raises(ScheduleError, match=f"target '{target}' has no tensor cores; they run on target 'cuda'"):
        st.compile(target, schedule=msc.Schedule().tensor_cores("fp64"))


def test_refusals_name_the_term_and_the_primitive():
    with pytest.raises(ScheduleError, match=r"not linear.*u\[t, x, y\] \* u\[t, x\+1, y\]"):
        nonlinear.compile("cuda", schedule=msc.Schedule().tensor_cores("fp64"), emulate=True)
    with pytest.raises(ScheduleError, match=r"variable coefficient.*c\[x, y\].*u\[t, x-1, y\]"):
        variable.compile("cuda", schedule=msc.Schedule().tensor_cores("fp16"), emulate=True)
    st = make_stencil(*CASES[0])
    with pytest.raises(ScheduleError, match=r"cannot be combined with tile\(\), parallel\(\)"):
        st.compile("cuda", schedule=msc.Schedule().tile(x=8, y=32).parallel("x_tile").tensor_cores("fp64"),
                   emulate=True)


@pytest.mark.slow  # the kernels are the ones test_nvcc_compiles_every_tensor_core_kernel compiles
def test_nvcc_compiles_target_sources_with_tensor_cores(tmp_path):
    target = get_target("cuda")
    sources = {f"{p}_{case[0]}.cu": target.source(make_stencil(*case).poly(dtype_of(p)), msc.Schedule().tensor_cores(p))
               for p in PRECISIONS for case in TARGET_CASES[:2]}
    assert_nvcc_compiles(tmp_path, sources, "the CUDA target's tensor-core sources")
