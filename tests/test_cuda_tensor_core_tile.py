"""Tensor cores fused with time tiles (msc/targets/gpu/cuda_tensor_core_tile.py): the
emulated kernel advances 1 to `depth` steps in one launch and equals the reference
interpreter (fp64) and the stepped numpy replay of its plan (tf32), star and box
stencils of radius 1-3, default tiles and tiles with tails, threads in both orders;
through the CUDA target's time loop (launches of `depth` steps and a shorter last
one); nvcc compiles them for sm_80 and sm_90; schedules that cannot fuse are refused
with their reason."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_cuda_tensor_core import assert_nvcc_compiles

import msc
from msc.errors import ScheduleError
from msc.runtime import cuda_emu
from msc.targets.gpu import cuda_tensor_core as tc
from msc.targets.gpu import cuda_tensor_core_tile as fused
from msc.targets.gpu.tensor_core import replay

pytestmark = pytest.mark.usefixtures("without_counters")  # results only (conftest.py)

PRECISIONS = {"fp64": "float64", "tf32": "float32"}
SHAPE = (45, 77)  # interior points: several blocks of every tile below, with tails


def make_stencil(shape: str, radius: int, seed: int) -> msc.Stencil:
    """u[t+1] = weighted star or box of u[t] (the centre carries most weight), alpha-scaled reads,
    a time-invariant k, a constant."""
    rng = np.random.default_rng(seed)
    offsets = [(i, j) for i in range(-radius, radius + 1) for j in range(-radius, radius + 1)
               if shape == "box" or i == 0 or j == 0]
    weights = rng.uniform(-1, 1, len(offsets)) * 0.5 / len(offsets)

    def at(o: tuple[int, int]) -> str:
        return ", ".join(f"{v}{'+' if d >= 0 else '-'}{abs(d)}" if d else v for v, d in zip("xy", o))

    terms = " + ".join(f"{float(w)!r} * u[t, {at(o)}]" for w, o in zip(weights, offsets))
    source = (f"@msc.stencil(boundary='dirichlet')\ndef fused{seed}(u, k, alpha):\n"
              f"    u[t+1, x, y] = 0.5 * u[t, x, y] + {terms} + alpha * u[t, {at(offsets[0])}]"
              f" + 0.25 * k[{at(offsets[-1])}] + 0.001\n")
    namespace: dict[str, Any] = {"msc": msc, "t": msc.t, "x": msc.x, "y": msc.y}
    exec(compile(source, f"<fused stencil {seed}>", "exec"), namespace)
    return namespace[f"fused{seed}"]


CASES = [("star", 1, 4), ("box", 2, 3), ("star", 3, 2)]  # shape, radius, depth


def inputs(st: msc.Stencil, dtype: str, seed: int) -> dict[str, Any]:
    r = st.ir.radius
    rng = np.random.default_rng(seed)
    padded = tuple(n + 2 * rr for n, rr in zip(SHAPE, r))
    return {"u": rng.random(padded).astype(dtype), "k": rng.random(padded).astype(dtype), "alpha": 0.3}


def stepped_replay(st: msc.Stencil, plan, values: dict[str, Any], steps: int, dtype: str) -> np.ndarray:
    """`replay` of the plan `steps` times, the interior written back each step (the ring kept)."""
    u = values["u"].copy()
    inner = tuple(slice(r, -r) for r in st.ir.radius)
    for _ in range(steps):
        def read(name: str, dt: int | None) -> np.ndarray:
            return u if name == "u" else values[name]
        u[inner] = replay(plan, read, {"alpha": values["alpha"]}, SHAPE, dtype)
    return u


@pytest.fixture(scope="module")
def kernels():
    """Per precision and case: the stencil and two fused kernels (the default tile, and one of
    odd sizes), all in one emulated library per precision."""
    built = {}
    for precision, dtype in PRECISIONS.items():
        cases = []
        for i, (shape, radius, depth) in enumerate(CASES):
            st = make_stencil(shape, radius, i)
            st_ir = st.typed(dtype)
            tiles = [fused.default_tile(st_ir, precision, depth), {"x": 21, "y": 37}]
            cases.append((st, depth, [fused.generate(st_ir, precision, depth, t, f"fz{i}_{j}")
                                      for j, t in enumerate(tiles)]))
        library = tc.build_emulated([k.kernel for _, _, ks in cases for k in ks], f"fused_{precision}")
        built[precision] = (cases, library)
    return built


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("variant", ["default tile", "odd tile"])
def test_fused_steps_equal_reference_and_replay(kernels, precision, case, variant, monkeypatch):
    if (case + (variant == "odd tile")) % 2:  # a missing barrier between steps shows in one order or the other
        monkeypatch.setenv(cuda_emu.THREAD_ORDER, "reverse")
        monkeypatch.setenv(cuda_emu.BLOCK_ORDER, "reverse")  # and a point two blocks write is diagnosed
    cases, library = kernels[precision]
    st, depth, ks = cases[case]
    kernel = ks[variant == "odd tile"].kernel
    dtype = PRECISIONS[precision]
    values = inputs(st, dtype, case)
    inner = tuple(slice(r, -r) for r in st.ir.radius)
    ring = np.ones(values["u"].shape, dtype=bool)
    ring[inner] = False
    for steps in sorted({1, 2, depth}):
        got = tc.step(kernel, library, {("u", 0): values["u"], ("k", None): values["k"]}, values["u"],
                      {"alpha": values["alpha"]}, steps=steps)
        np.testing.assert_array_equal(got[ring], values["u"][ring])  # the ring is never written
        ref = st.reference(steps=steps, dtype=dtype, **values)["u"]
        if precision == "fp64":
            np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)
            continue
        # each step rounds what the next one stages to tf32, as the one-step kernel's next launch would
        np.testing.assert_allclose(got, stepped_replay(st, kernel.plan, values, steps, dtype), rtol=1e-6, atol=1e-6)
        assert np.abs(got - ref).max() <= 2e-3 * steps, steps


def test_default_tiles_fit_and_compute_few_extra_fragments(kernels):
    for precision in PRECISIONS:
        for _, depth, ks in kernels[precision][0]:
            default = ks[0]
            assert default.kernel.shared_bytes <= fused.DEFAULT_BUDGET
            assert default.tile.fragments_per_update() < 2.5, (precision, depth, default.tile)
            assert default.tile.halo[1] % default.tile.shape.k == 0  # the frame keeps wmma's column alignment


def test_fused_tensor_cores_through_the_target(tmp_path):
    """Launches of 4 steps and a last shorter one (9 steps), ring slots swapped between launches
    (tf32 runs the same time loop; its kernels are checked above); a tile of the user's sizes."""
    st = make_stencil("box", 1, 7)
    kernel = st.compile("cuda", schedule=msc.Schedule().tensor_cores("fp64").time_tile(4), emulate=True)
    assert "fused with time tiles of 4 steps" in kernel.source and "nvcuda::wmma::mma_sync" in kernel.source
    values = inputs(st, "float64", 7)
    np.testing.assert_allclose(kernel.run(steps=9, **values)["u"], st.reference(steps=9, **values)["u"],
                               rtol=0, atol=1e-12)
    sized = st.compile("cuda", schedule=msc.Schedule().tensor_cores("fp64").time_tile(3, x=16, y=24), emulate=True)
    assert "tile 16 x 24" in sized.source
    values = inputs(st, "float64", 8)
    np.testing.assert_allclose(sized.run(steps=5, **values)["u"], st.reference(steps=5, **values)["u"],
                               rtol=0, atol=1e-12)


def test_schedules_that_cannot_fuse_are_refused():
    st = make_stencil("star", 1, 9)

    def compile_with(schedule: msc.Schedule, stencil: msc.Stencil = st, dtype: str = "float64") -> None:
        stencil.compile("cuda", dtype=dtype, schedule=schedule, emulate=True)

    with pytest.raises(ScheduleError, match=r"fp16's fragments of 8 columns .* 32-byte boundaries"):
        compile_with(msc.Schedule().tensor_cores("fp16").time_tile(4), dtype="float32")
    with pytest.raises(ScheduleError, match=r"tensor_cores\('tf32'\) on float64 .*lossy=True"):
        compile_with(msc.Schedule().tensor_cores("tf32").time_tile(4))
    with pytest.raises(ScheduleError, match=r"name a size of at least 1 for both x and y"):
        compile_with(msc.Schedule().tensor_cores("fp64").time_tile(4, x=16))
    with pytest.raises(ScheduleError, match=r"without unroll\(\)"):
        compile_with(msc.Schedule().tensor_cores("fp64").time_tile(4, x=16, y=32).unroll("y", 2))
    with pytest.raises(ScheduleError, match=r"need \d+ bytes of shared memory, over the"):
        compile_with(msc.Schedule().tensor_cores("fp64").time_tile(4, x=512, y=512))

    @msc.stencil(boundary="dirichlet")
    def leapfrog(u):
        u[msc.t + 1, msc.x, msc.y] = 0.5 * u[msc.t, msc.x + 1, msc.y] + 0.5 * u[msc.t - 1, msc.x, msc.y]

    with pytest.raises(ScheduleError, match=r"time_tile\(4\) on stencil 'leapfrog': field 'u' keeps 2 past levels"):
        compile_with(msc.Schedule().tensor_cores("fp64").time_tile(4), leapfrog)

    @msc.stencil(boundary="dirichlet")
    def heat3d(u):
        u[msc.t + 1, msc.x, msc.y, msc.z] = 0.5 * (u[msc.t, msc.x, msc.y, msc.z] + u[msc.t, msc.x, msc.y, msc.z + 1])

    with pytest.raises(ScheduleError, match=r"fused time tiles are 2D, stencil 'heat3d' is 3D"):
        compile_with(msc.Schedule().tensor_cores("fp64").time_tile(4), heat3d)


def test_nvcc_compiles_fused_kernels(kernels, tmp_path):
    sources = {f"fused_{p}.cu": tc.source_file([k.kernel for _, _, ks in kernels[p][0] for k in ks])
               for p in PRECISIONS}
    assert_nvcc_compiles(tmp_path, sources, "the fused tensor-core kernels")
