"""The CUDA emulator (msc/runtime/cuda/) on hand-written kernels (tests/cuda/):
results against numpy (the shared-memory stencil with the blocks in reverse
order, where two blocks writing one byte is an error), each fault it must
detect, and the same sources compiled by nvcc for sm_80 and sm_90 with
warnings as errors."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from msc.runtime import build, cuda_emu
from msc.targets.gpu.tensor_core import round_operand

DATA = Path(__file__).parent / "cuda"
SOURCES = sorted(DATA.glob("*.cu"))
NVCC_FLAGS = ("--threads", "2", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
              "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Werror")  # fmt: skip
PTR = ctypes.c_void_p


def ptr(a: np.ndarray) -> ctypes.c_void_p:
    return a.ctypes.data_as(PTR)


@pytest.fixture
def reverse_blocks(monkeypatch):
    """Launches run their blocks last first and report a byte two blocks both write."""
    monkeypatch.setenv(cuda_emu.BLOCK_ORDER, "reverse")


@pytest.fixture(scope="module")
def lib():
    def load(name: str) -> ctypes.CDLL:
        return build.load_library(cuda_emu.build_shared((DATA / f"{name}.cu").read_text(), name))

    return load


def test_nvcc_compiles_every_test_kernel(tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found on PATH: the CUDA sources are not compiled for sm_80/sm_90")
    command = [nvcc, "-c", *NVCC_FLAGS, f"-I{cuda_emu.EMULATOR_DIR}", *map(str, SOURCES), "-odir", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.glob("*.o")) == sorted(f"{s.stem}.o" for s in SOURCES)


def jacobi(u: np.ndarray, steps: int) -> np.ndarray:
    for _ in range(steps):
        v = u.copy()
        v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        u = v
    return u


@pytest.mark.parametrize("shape", [(37, 50), (8, 16), (5, 3)])
def test_shared_memory_stencil_matches_numpy(lib, shape, reverse_blocks):
    stencil2d = lib("stencil2d").stencil2d
    u = np.random.default_rng(1).random((shape[0] + 2, shape[1] + 2))
    out = u.copy()
    assert stencil2d(ptr(out), shape[1], shape[0], 3, 1) == 0
    np.testing.assert_allclose(out, jacobi(u, 3), rtol=1e-14, atol=0)


def test_missing_syncthreads_changes_the_result(lib, reverse_blocks):
    # thread 0 runs until it blocks: without the barrier it reads tile cells its
    # neighbours have not staged yet (poisoned with NaN before every block)
    stencil2d = lib("stencil2d").stencil2d
    u = np.random.default_rng(2).random((39, 52))
    out = u.copy()
    assert stencil2d(ptr(out), 50, 37, 1, 0) == 0
    ref = jacobi(u, 1)
    wrong = ~np.isclose(out, ref)
    assert wrong.sum() > 0.5 * 37 * 50, f"only {wrong.sum()} of {37 * 50} points differ"


def test_shared_memory_another_block_wrote_is_poison(lib):
    # blocks run in order, and block 0 leaves its cells in shared memory: only the poisoning hides them
    result = np.zeros(3 * 32)
    assert lib("stencil2d").shared_between_blocks(ptr(result), 3) == 0
    np.testing.assert_array_equal(result[:32], np.arange(1, 33))
    assert np.isnan(result[32:]).all(), result[32:]


@pytest.mark.parametrize("n,blocks,threads", [(1000, 3, 96), (5000, 2, 1024), (17, 1, 32)])
def test_warp_shuffle_reduction_and_ballot(lib, n, blocks, threads):
    x = np.random.default_rng(n).standard_normal(n)
    partial, positives = np.zeros(blocks), np.zeros(blocks, dtype=np.int32)
    assert lib("warp_ops").reduce(ptr(x), n, blocks, threads, ptr(partial), ptr(positives)) == 0
    owner = np.arange(n) // threads % blocks
    np.testing.assert_allclose(partial, [x[owner == b].sum() for b in range(blocks)], rtol=1e-12)
    np.testing.assert_array_equal(positives, [(x[owner == b] > 0).sum() for b in range(blocks)])


def test_warp_scan_and_segmented_broadcast(lib):
    v = np.random.default_rng(3).integers(-50, 50, 256).astype(np.int32)
    scan, head = np.zeros_like(v), np.zeros_like(v)
    assert lib("warp_ops").scan(ptr(v), ptr(scan), ptr(head), v.size) == 0
    np.testing.assert_array_equal(scan, np.cumsum(v.reshape(-1, 32), axis=1).ravel())
    np.testing.assert_array_equal(head, np.repeat(v[::8], 8))


def test_launch_errors_as_the_runtime_reports_them(lib):
    codes = np.zeros(10, dtype=np.int32)
    assert lib("warp_ops").launch_errors(ptr(codes)) == 0
    invalid_configuration, invalid_value = 9, 1
    assert list(codes) == [
        invalid_configuration,  # 1025 threads
        invalid_configuration,  # blockDim.z 65
        invalid_value,  # 48 KiB + 8 of dynamic shared memory without the attribute
        0, 0, 42,  # raised to 200 KiB: the launch runs and its last byte is usable
        invalid_value,  # over the 227 KiB opt-in limit
        invalid_value, 0,  # cudaGetLastError: that error, then cleared
        227 * 1024,
    ]  # fmt: skip


def gemm_inputs(m: int, n: int, k: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * n + k)
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


def blocked_product(a: np.ndarray, b: np.ndarray, chunk: int) -> np.ndarray:
    """The MMA model: each k-chunk's product exact, rounded once to float32, added in float32."""
    acc = np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)
    for kk in range(0, a.shape[1], chunk):
        acc += (a[:, kk:kk + chunk] @ b[kk:kk + chunk]).astype(np.float32)
    return acc


def order(a: np.ndarray, row_major: bool) -> np.ndarray:
    return np.ascontiguousarray(a) if row_major else np.asfortranarray(a)


@pytest.mark.parametrize("variant", [0, 1])
def test_wmma_fp64_gemm(lib, variant):
    m, n, k = 24, 16, 12
    a, b = gemm_inputs(m, n, k, np.float64)
    c = order(np.zeros((m, n)), variant == 0)
    args = (ptr(order(a, variant == 0)), ptr(order(b, variant == 0)), ptr(c), m, n, k, variant)
    assert lib("wmma_gemm").gemm_f64(*args, ctypes.c_double(0.5)) == 0
    np.testing.assert_allclose(c, 0.5 * a @ b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("variant", [0, 1])
def test_wmma_tf32_gemm_rounds_operands(lib, variant):
    m, n, k = 32, 48, 24
    a, b = gemm_inputs(m, n, k, np.float32)
    c = order(np.zeros((m, n), dtype=np.float32), variant == 0)
    a_in, b_in = order(a, variant == 0), order(b, variant == 1)  # 0: A row, B col; 1: A col, B row
    assert lib("wmma_gemm").gemm_tf32(ptr(a_in), ptr(b_in), ptr(c), m, n, k, variant, ctypes.c_float(2.0)) == 0
    expected = 2 * blocked_product(round_operand(a, "tf32"), round_operand(b, "tf32"), 8)
    np.testing.assert_allclose(c, expected, rtol=1e-6, atol=1e-6)
    assert np.abs(c - 2 * a.astype(np.float64) @ b).max() > 1e-4  # tf32 operands, not float32


@pytest.mark.parametrize("variant,shape", [(0, (16, 16)), (1, (32, 8))])
def test_wmma_fp16_gemm(lib, variant, shape):
    m, n, k = 2 * shape[0], 3 * shape[1], 48
    a, b = gemm_inputs(m, n, k, np.float16)
    c = order(np.zeros((m, n), dtype=np.float32), variant == 0)
    a_in, b_in = order(a, variant == 0), order(b, variant == 0)
    assert lib("wmma_gemm").gemm_f16(ptr(a_in), ptr(b_in), ptr(c), m, n, k, variant, ctypes.c_float(1.0)) == 0
    expected = blocked_product(a.astype(np.float64), b.astype(np.float64), 16)
    np.testing.assert_allclose(c, expected, rtol=1e-6, atol=1e-6)


def test_code_relying_on_fragment_element_order_is_wrong(lib):
    m, n, k = 16, 16, 8
    a, b = gemm_inputs(m, n, k, np.float64)
    c = np.zeros((m, n))
    assert lib("wmma_gemm").gemm_f64_element_order(ptr(a), ptr(b), ptr(c), m, n, k) == 0
    expected = a @ b
    assert not np.allclose(c, expected)
    # the values are all there, each tile's in another order: a permutation of the fragment
    tiles = lambda x: np.sort(x.reshape(2, 8, 2, 8).transpose(0, 2, 1, 3).reshape(4, 64), axis=1)
    np.testing.assert_allclose(tiles(c), tiles(expected), rtol=1e-12)


FAULTS = {  # mode of tests/cuda/faults.cu -> what the emulator must say
    1: "__shfl_down_sync at faults.cu:27: lane 31 of warp 0, thread (31,0,0), never calls it (it exited)",
    2: "__syncthreads at faults.cu:30: thread (0,0,0) waits there, thread (5,0,0) exited",
    3: "load_matrix_sync at faults.cu:47: the pointer is not 256-bit (32-byte) aligned",
    4: "mma_sync at faults.cu:49: lane 16 of warp 0, thread (16,0,0), never calls it",
    5: "__syncthreads reached at different places",
    6: "its mask names lanes that warp 0 of a block of 16 threads does not have",
}


@pytest.fixture(scope="module", params=[(), ("MSC_CUDA_EMU_UCONTEXT",)], ids=["fibers", "ucontext-fibers"])
def faults(tmp_path_factory, request) -> Path:
    """The fault program with the emulator's own fibers (x86-64) and with its ucontext ones (elsewhere)."""
    return cuda_emu.build_program([DATA / "faults.cu"], tmp_path_factory.mktemp("cuda") / "faults",
                                  defs=request.param)


def run_faults(program: Path, mode: int, order: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, cuda_emu.BLOCK_ORDER: order}
    return subprocess.run([str(program), str(mode)], capture_output=True, text=True, timeout=60, check=False,
                          cwd=DATA, env=env)  # fmt: skip


def test_fault_free_mode_runs(faults):
    done = run_faults(faults, 0)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


@pytest.mark.parametrize("mode", sorted(FAULTS))
def test_faults_are_detected(faults, mode):
    done = run_faults(faults, mode)
    assert done.returncode != 0
    assert FAULTS[mode] in done.stderr.replace(str(DATA) + "/", "")
    assert "cudaGetLastError(): unspecified launch failure" in done.stderr  # sticky, via MSC_CUDA_CHECK


OVERLAPPING_WRITES = 7  # each of 3 blocks also writes the first element of the next


def test_two_blocks_writing_one_byte_are_reported_in_reverse_order(faults):
    forward = run_faults(faults, OVERLAPPING_WRITES, "forward")  # the later block's value lands, unnoticed
    assert forward.returncode == 0 and forward.stdout == "ok\n", forward.stderr
    done = run_faults(faults, OVERLAPPING_WRITES, "reverse")
    assert done.returncode != 0
    assert "kernel: block (2,0,0) and block (1,0,0) both write byte 10" in done.stderr, done.stderr
    assert f"of a cudaMalloc allocation of {(3 * 64 + 1) * 8} bytes" in done.stderr
    correct = run_faults(faults, 0, "reverse")
    assert correct.returncode == 0 and correct.stdout == "ok\n", correct.stderr
    unknown = run_faults(faults, 0, "sideways")
    assert unknown.returncode != 0 and "MSC_CUDA_EMU_BLOCKS: 'sideways' is not forward or reverse" in unknown.stderr


# tests/cuda/bounds.cu: each mode, what the emulator says, without and with counting (where every access is checked)
BOUNDS = {1: ("shared array 'tile' of 512 bytes: byte 512 (outside it) was written",
              "a store of 8 bytes at byte 512 of shared array 'tile', which has 512 bytes"),
          2: ("shared array 'tile' of 512 bytes: byte -8 (outside it) was written",
              "a store of 8 bytes at byte -8 of shared array 'tile', which has 512 bytes"),
          3: (None, "a load of 8 bytes at byte 512 of shared array 'tile', which has 512 bytes"),
          4: ("dynamic shared memory of 512 bytes: byte 512 (outside it) was written",
              "a store of 8 bytes at byte 512 of the dynamic shared memory, which has 512 bytes"),
          5: ("shared array 'big' of 49152 bytes takes the block's static shared memory to 49664 bytes",) * 2}


@pytest.fixture(scope="module")
def bounds(tmp_path_factory) -> dict[bool, Path]:
    out = tmp_path_factory.mktemp("cuda")
    return {counting: cuda_emu.build_program([DATA / "bounds.cu"], out / f"bounds{int(counting)}", counting=counting)
            for counting in (False, True)}


@pytest.mark.parametrize("counting", [False, True])
@pytest.mark.parametrize("mode", [0, *sorted(BOUNDS)])
def test_shared_accesses_outside_an_array_are_reported(bounds, mode, counting):
    """Guard bands around each MSC_SHARED array and the dynamic shared memory: a write outside is reported
    after the block; in counting builds any access, when it runs (naming the thread). A read outside
    without counting reads the poison (NaN), so the result is wrong."""
    done = run_faults(bounds[counting], mode)
    if mode == 0:
        assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
        return
    said = BOUNDS[mode][counting]
    if said is None:
        assert done.returncode == 1 and "wrong: out[0] = " in done.stdout and "nan" in done.stdout, done
        return
    assert done.returncode != 0 and said in done.stderr, done.stderr
    assert ("thread (0,0,0): " in done.stderr) == (counting or mode == 5)
    assert "cudaGetLastError(): unspecified launch failure" in done.stderr


@pytest.mark.parametrize(("offset", "stride", "load_sectors"), [(0, 1, 8), (1, 1, 9), (0, 2, 16), (0, 4, 32), (3, 0, 1)])
def test_counters_model_coalescing(lib, offset, stride, load_sectors):
    """One warp loads 32 doubles (aligned, shifted by one, strided, all one) and stores
    32 aligned ones: the sectors of each warp-level access, by hand."""
    counters = lib("counters")
    counters.run_strided.argtypes = [ctypes.c_int, ctypes.c_int]
    before = cuda_emu.read_counters(counters.msc_emu_counters)
    assert counters.run_strided(offset, stride) == 0
    got = cuda_emu.counted(before, cuda_emu.read_counters(counters.msc_emu_counters))
    assert got["load_bytes"] == got["store_bytes"] == 32 * 8
    assert got["sectors"] == load_sectors + 8 and got["dram_bytes"] == 32 * (load_sectors + 8)
    assert got["launches"] == 1 and got["shared_accesses"] == 0


def test_each_library_keeps_its_own_emulator(lib):
    """Every emulated library links the emulator's runtime, compiled once, with its symbols hidden: a
    launch counted in one library leaves another's counters alone, and a library exports
    msc_emu_counters but none of the emulator's functions or state."""
    counters, other = lib("counters"), lib("warp_ops")
    before = cuda_emu.read_counters(other.msc_emu_counters)
    counters.run_strided.argtypes = [ctypes.c_int, ctypes.c_int]
    assert counters.run_strided(0, 1) == 0
    assert cuda_emu.read_counters(other.msc_emu_counters) == before
    exported = subprocess.run(["nm", "-D", "--defined-only", "-C", counters._name], capture_output=True, text=True,
                              check=True).stdout
    assert "msc_emu_counters" in exported and "msc_emu::" not in exported and "cudaMalloc" not in exported
    assert str(cuda_emu.runtime_object(counting=True)) in cuda_emu.flags(shared=True)


@pytest.mark.parametrize(("ldm", "ways"), [(4, 1), (8, 2), (16, 4), (20, 1)])
def test_counters_model_fragment_loads_and_stores_as_one_access(lib, ldm, ways):
    """A warp's load_matrix_sync or store_matrix_sync is one access over the fragment's rows,
    whatever lane holds which element. An 8 x 4 double fragment's 8 rows of 32 bytes: 64 or
    128 bytes apart they share 16 or 8 banks (2 and 4 times the ideal 2 wavefronts), 160
    bytes apart they cover all 32 (the tensor-core staging's padded pitch). Then an 8 x 8
    product stored in 512 contiguous bytes: its ideal 4 wavefronts (2 elements per lane,
    which counted lane by lane in the emulator's element order would look conflicted). Its one
    mma_sync counts 2 m n k flops."""
    counters = lib("counters")
    counters.run_fragment.argtypes = [ctypes.c_int]
    before = cuda_emu.read_counters(counters.msc_emu_counters)
    assert counters.run_fragment(ldm) == 0
    got = cuda_emu.counted(before, cuda_emu.read_counters(counters.msc_emu_counters))
    assert got["shared_accesses"] == 2 and got["shared_wavefronts_per_access"] == (2 * ways + 4) / 6
    assert got["store_bytes"] == got["load_bytes"] == 0
    assert got["mma_flops"] == 2 * 8 * 8 * 4  # one mma_sync of m8n8k4


@pytest.mark.parametrize(("stride", "ways"), [(1, 1), (2, 2), (32, 32), (0, 1), (33, 1), (4, 4)])
def test_counters_model_bank_conflicts(lib, stride, ways):
    """Lane i writes and reads shared float word stride * i: conflict-free, n-way
    conflicts, one word (a broadcast), and a stride that spreads over every bank."""
    counters = lib("counters")
    counters.run_banks.argtypes = [ctypes.c_int]
    before = cuda_emu.read_counters(counters.msc_emu_counters)
    assert counters.run_banks(stride) == 0
    got = cuda_emu.counted(before, cuda_emu.read_counters(counters.msc_emu_counters))
    assert got["shared_accesses"] == 2 and got["shared_wavefronts_per_access"] == ways
    assert got["store_bytes"] == 32 * 4 and got["load_bytes"] == 0


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("barrier", [1, 0])
def test_reverse_thread_order_exposes_a_missing_barrier(lib, monkeypatch, order, barrier):
    """Thread i reads what thread i-1 wrote to shared memory. In the forward order
    thread i-1 has always run first, so a missing __syncthreads passes unseen; in the
    reverse order (MSC_CUDA_EMU_THREADS=reverse) thread i reads the NaN poison."""
    monkeypatch.setenv(cuda_emu.THREAD_ORDER, order)
    run = lib("order").run_neighbour
    run.argtypes = [PTR, ctypes.c_int, ctypes.c_int]
    out = np.zeros(64, np.float32)
    assert run(ptr(out), 64, barrier) == 0
    expected = np.arange(64, dtype=np.float32)
    if barrier or order == "forward":
        np.testing.assert_array_equal(out, expected)
    else:
        assert np.isnan(out[1:]).all()


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("barrier", [1, 0])
def test_warps_run_apart_until_a_barrier(lib, monkeypatch, order, barrier):
    """Thread i reads what thread i + 32 (the next warp) wrote, past a __syncwarp only.
    A block runs warp by warp, each as far as it goes before the next: so in the forward
    order warp 0 reads before warp 1 has written (the NaN poison), and warp 1 reads what
    warp 0 wrote; in the reverse order the other way round. With __syncthreads both read
    the values."""
    monkeypatch.setenv(cuda_emu.THREAD_ORDER, order)
    run = lib("order").run_next_warp
    run.argtypes = [PTR, ctypes.c_int, ctypes.c_int]
    out = np.zeros(64, np.float32)
    assert run(ptr(out), 64, barrier) == 0
    expected = (np.arange(64, dtype=np.float32) + 32) % 64 + 1
    if barrier:
        np.testing.assert_array_equal(out, expected)
        return
    late, early = (slice(0, 32), slice(32, 64)) if order == "forward" else (slice(32, 64), slice(0, 32))
    assert np.isnan(out[late]).all()
    np.testing.assert_array_equal(out[early], expected[early])


@pytest.mark.parametrize("width, points, size", [("", 1 << 30, 4), ("", (1 << 30) + 1, 8), ("32", 5, 4), ("64", 5, 8)])
def test_indexed_launches_take_32_bit_indices_where_the_points_allow(lib, monkeypatch, width, points, size):
    """MSC_LAUNCH_INDEXED: index_t is int up to 2^30 points, long above, and long under
    MSC_CUDA_EMU_INDEX=64 (how the tests run kernels of either width on small grids)."""
    monkeypatch.setenv(cuda_emu.INDEX_WIDTH, width)
    out = np.zeros(1, np.int32)
    assert lib("index_width").run_index_bytes(ptr(out), ctypes.c_long(points)) == 0
    assert out[0] == size


def test_an_unknown_index_width_is_an_error(lib, monkeypatch, capfd):
    monkeypatch.setenv(cuda_emu.INDEX_WIDTH, "48")
    out = np.zeros(1, np.int32)
    assert lib("index_width").run_index_bytes(ptr(out), ctypes.c_long(5)) != 0
    assert "MSC_CUDA_EMU_INDEX: '48' is not 32 or 64" in capfd.readouterr().err
