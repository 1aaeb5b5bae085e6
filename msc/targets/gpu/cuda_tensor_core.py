"""CUDA wmma kernels for the tensor-core plans of msc/targets/gpu/tensor_core.py.

`generate(stencil_ir, statement, precision, dtype, name)` prints, for one
statement, the device kernel and its host helpers (`<name>_bands`,
`<name>_launch`, `<name>_step`); `source_file(kernels)` makes a complete .cu
that includes msc_cuda.h. Per block: `warps` warps stacked along the rows,
each computing one m x n output tile of the same column range in one plane.

* Staging: each source's tile plus `plan.halo(source)` goes to dynamic
  shared memory in the operand type (tf32 rounded with `__float_to_tf32`,
  fp16 with `__float2half`), zeros past the array (Dirichlet) or wrapped
  (periodic); columns are laid out so `plan.column_alignment(source)` lands
  on 256 bits and the row pitch is a multiple of 32 bytes, as wmma loads
  require.
* Products: per line and chunk, in the plan's order, one `load_matrix_sync`
  of the input operand at `line.input_origin(chunk, k)`, one of the weight
  block, `mma_sync`. The weight blocks (`line.band`) are filled by
  `<name>_bands` from the scalar parameters on the host.
* Output: `store_matrix_sync` to shared memory, the plan's constant added,
  the interior points written. Fragments are touched only through
  load/store/fill, so nothing depends on the fragment element order.

`<name>_launch` takes device pointers (a time loop calls it per step);
`<name>_step` is a host entry for one step on host arrays, used by `step()`
to run a plan, emulated or on a device, against `replay` and the reference.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as kir
from msc.codegen.lower import array_name, extent, level_name, param_name
from msc.codegen.printers.cexpr import c_expr
from msc.errors import ScheduleError
from msc.poly import PolyIR
from msc.poly.schedule import LoweredSchedule
from msc.runtime import build, cuda_emu
from msc.targets.gpu.cuda_pass import CustomLaunch, DeviceFunction
from msc.targets.gpu.tensor_core import Source, TensorCorePlan, tensor_core_plan

ALIGN_BYTES = 32  # wmma: 256-bit aligned pointers
DEFAULT_SHARED = 48 * 1024  # dynamic shared memory without cudaFuncSetAttribute
MAX_SHARED = 163 * 1024  # the opt-in limit of sm_80 (sm_90: 227 KiB): the kernels run on both
MAX_WARPS = 4

_OPERAND = {"double": ("double", "double", 8), "tf32": ("nvcuda::wmma::precision::tf32", "float", 4),
            "half": ("__half", "__half", 2)}  # fragment type, storage type, bytes
_ACC_BYTES = {"double": 8, "float": 4}
_C_TYPE = {"float64": "double", "float32": "float"}


@dataclass(frozen=True)
class Staging:
    """Where one source's tile and halo sit in shared memory (in operand elements)."""

    source: Source
    planes: int  # 1 in 2D
    plane_below: int
    rows: int
    row_below: int
    pitch: int  # elements per row, a multiple of 32 bytes
    column_offset: int  # staging column of the tile's first column
    offset: int  # first element of this source's region

    @property
    def size(self) -> int:
        return self.planes * self.rows * self.pitch


@dataclass(frozen=True)
class TensorCoreKernel:
    """The CUDA code for one statement's plan."""

    name: str
    plan: TensorCorePlan
    dtype: str
    params: tuple[str, ...]
    radius: tuple[int, ...]
    wrap: bool  # levels have no ring and reads wrap (periodic, unpadded); else a ring of `radius`
    warps: int
    staging: tuple[Staging, ...]
    shared_bytes: int
    band_elements: int
    code: str

    @property
    def sources(self) -> tuple[Source, ...]:
        return tuple(s.source for s in self.staging)


def generate(stencil_ir: ir.StencilIR, statement: int, precision: str, dtype: str, name: str, *,
             wrap: bool = False) -> TensorCoreKernel:
    """The wmma kernel and host helpers of statement `statement`; ScheduleError if it has no plan
    or its staging does not fit the shared memory of one block."""
    plan = tensor_core_plan(stencil_ir, statement, precision)
    if dtype not in _C_TYPE:
        raise ScheduleError(f"tensor_cores: dtype must be float64 or float32, got {dtype!r}")
    shape = plan.shape
    _, _, op_bytes = _OPERAND[shape.operand]
    acc_bytes = _ACC_BYTES[shape.accumulator]
    sources = list(dict.fromkeys(line.source for line in plan.lines))
    for warps in range(MAX_WARPS, 0, -1):
        staging = _staging(plan, sources, warps)
        stage_bytes = sum(s.size for s in staging) * op_bytes
        shared = stage_bytes + warps * shape.m * shape.n * acc_bytes
        if shared <= MAX_SHARED:
            break
    else:
        raise ScheduleError(f"tensor_cores: statement writing '{plan.target}': staging its sources for one "
                            f"{shape.m} x {shape.n} tile needs {shared} bytes of shared memory, over the "
                            f"{MAX_SHARED} bytes of a block")
    band_elements = sum(len(line.chunks) * (shape.k * shape.n if line.axis == "cols" else shape.m * shape.k)
                        for line in plan.lines)
    kernel = TensorCoreKernel(name, plan, dtype, stencil_ir.params, stencil_ir.radius, wrap, warps,
                              tuple(staging), shared, band_elements, "")
    return TensorCoreKernel(**{**kernel.__dict__, "code": _print(kernel)})


def _staging(plan: TensorCorePlan, sources: list[Source], warps: int) -> list[Staging]:
    shape = plan.shape
    align = ALIGN_BYTES // _OPERAND[shape.operand][2]  # == shape.k for every shape
    out, offset = [], 0
    for source in sources:
        halo = plan.halo(source)
        (rl, rh), (cl, ch) = halo[-2], halo[-1]
        planes, below = (halo[0][0] + halo[0][1] + 1, halo[0][0]) if plan.ndim == 3 else (1, 0)
        column_offset = cl + (-plan.column_alignment(source) - cl) % align
        pitch = math.ceil((column_offset + shape.n + ch) / align) * align
        stage = Staging(source, planes, below, warps * shape.m + rl + rh, rl, pitch, column_offset, offset)
        out.append(stage)
        offset += stage.size
    return out


def _source_name(source: Source) -> str:
    field, dt = source
    return f"{field}_{'in' if dt is None else ('n' if dt < 0 else 'p') + str(abs(dt))}"


def _print(k: TensorCoreKernel) -> str:
    plan, shape = k.plan, k.plan.shape
    frag_t, op_t, op_bytes = _OPERAND[shape.operand]
    acc_t, t = shape.accumulator, _C_TYPE[k.dtype]
    m, n, kk, nd, name = shape.m, shape.n, shape.k, plan.ndim, k.name
    dims = [f"n{d}" for d in range(nd)]
    ring = [0 if k.wrap else r for r in k.radius]
    extent = [f"({d} + {2 * r})" if r else d for d, r in zip(dims, ring)]
    srcs = [f"src_{_source_name(s.source)}" for s in k.staging]
    wmma = "nvcuda::wmma"
    to_op = {"double": "(double)({})", "tf32": f"{wmma}::__float_to_tf32((float)({{}}))",
             "half": "__float2half((float)({}))"}[shape.operand]

    def index(coords: list[str]) -> str:  # array element of interior coordinates (already wrapped/valid)
        text = f"(size_t)({coords[0]} + {ring[0]})"
        for d in range(1, nd):
            text = f"({text} * {extent[d]} + ({coords[d]} + {ring[d]}))"
        return text

    L: list[str] = ["#include <stdint.h>", "#include <string.h>", ""]
    w = L.append
    w(f"/* Tensor cores ({plan.precision}, wmma {shape.name}) for the statement writing '{plan.target}': "
      f"{plan.mmas_per_tile} MMAs per {m} x {n} tile, {100 * plan.useful_fraction:.1f}% of their "
      "multiply-adds useful. */")
    if shape.operand == "tf32":
        w(f"static inline float {name}_tf32(float v) /* cvt.rna.tf32.f32 on the host */")
        w("{")
        w("    uint32_t bits;")
        w("    memcpy(&bits, &v, sizeof bits);")
        w("    if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & 0xffffe000u;")
        w("    memcpy(&v, &bits, sizeof bits);")
        w("    return v;")
        w("}")
        w("")
    if k.wrap:
        w(f"__device__ __forceinline__ int {name}_wrap(int i, int n)")
        w("{")
        w("    i %= n;")
        w("    return i < 0 ? i + n : i;")
        w("}")
        w("")
    w("/* the weight blocks of every MMA, in issue order */")
    w(f"static __device__ __align__(32) {op_t} {name}_weights[{k.band_elements}];")
    w("")
    w(f"__global__ void __launch_bounds__({32 * k.warps}) {name}_kernel({t} *__restrict__ out, "
      + "".join(f"const {t} *__restrict__ {s}, " for s in srcs)
      + f"const {acc_t} constant, " + ", ".join(f"const int {d}" for d in dims) + ")")
    w("{")
    w("    MSC_DYNAMIC_SHARED(unsigned char, msc_tc_shared);")
    w(f"    {op_t} *const stage = reinterpret_cast<{op_t} *>(msc_tc_shared);")
    w(f"    {acc_t} *const tiles = reinterpret_cast<{acc_t} *>(msc_tc_shared + "
      f"{sum(s.size for s in k.staging) * op_bytes});")
    w(f"    const int c0 = blockIdx.x * {n}, r0 = blockIdx.y * {k.warps * m};")
    if nd == 3:
        w("    const int z = blockIdx.z;")
    for s, src in zip(k.staging, srcs):
        w(f"    for (int e = threadIdx.x; e < {s.size}; e += blockDim.x) {{ /* {s.source[0]} (dt {s.source[1]}) */")
        w(f"        const int c = c0 + e % {s.pitch} - {s.column_offset}, "
          f"r = r0 + e / {s.pitch} % {s.rows} - {s.row_below};")
        coords = ["r", "c"]
        if nd == 3:
            w(f"        const int p = z + e / {s.pitch * s.rows} - {s.plane_below};")
            coords = ["p", "r", "c"]
        if k.wrap:
            wrapped = [f"{name}_wrap({c}, {d})" for c, d in zip(coords, dims)]
            w(f"        stage[{s.offset} + e] = {to_op.format(f'{src}[{index(wrapped)}]')};")
        else:  # zeros past the array: the tail tiles and zero-weight columns
            inside = " && ".join(f"{c} >= {-r} && {c} < {d} + {r}" for c, d, r in zip(coords, dims, ring))
            w(f"        stage[{s.offset} + e] = {to_op.format(f'{inside} ? {src}[{index(coords)}] : 0')};")
        w("    }")
    w("    __syncthreads();")
    w(f"    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tr = warp * {m};")
    w(f"    {wmma}::fragment<{wmma}::matrix_a, {m}, {n}, {kk}, {frag_t}, {wmma}::row_major> a;")
    w(f"    {wmma}::fragment<{wmma}::matrix_b, {m}, {n}, {kk}, {frag_t}, {wmma}::row_major> b;")
    w(f"    {wmma}::fragment<{wmma}::accumulator, {m}, {n}, {kk}, {acc_t}> acc;")
    w(f"    {wmma}::fill_fragment(acc, ({acc_t})0);")
    stage_of = {s.source: s for s in k.staging}
    band = 0
    for line in plan.lines:
        s = stage_of[line.source]
        w(f"    /* {line.source[0]} (dt {line.source[1]}): {line.axis} line, shift {line.shift}, "
          f"offsets {line.lo}..{line.hi} */")
        for chunk in line.chunks:
            o = line.input_origin(chunk, kk)
            plane = f"{o[0] + s.plane_below} * {s.rows} + " if nd == 3 else ""
            operand = f"stage + {s.offset} + ({plane}tr + {o[-2] + s.row_below}) * {s.pitch} + {o[-1] + s.column_offset}"
            if line.axis == "cols":
                w(f"    {wmma}::load_matrix_sync(a, {operand}, {s.pitch});")
                w(f"    {wmma}::load_matrix_sync(b, {name}_weights + {band}, {n});")
                band += kk * n
            else:
                w(f"    {wmma}::load_matrix_sync(a, {name}_weights + {band}, {kk});")
                w(f"    {wmma}::load_matrix_sync(b, {operand}, {s.pitch});")
                band += m * kk
            w(f"    {wmma}::mma_sync(acc, a, b, acc);")
    w(f"    {acc_t} *const tile = tiles + warp * {m * n};")
    w(f"    {wmma}::store_matrix_sync(tile, acc, {n}, {wmma}::mem_row_major);")
    w("    __syncwarp();")
    w(f"    for (int e = lane; e < {m * n}; e += 32) {{")
    w(f"        const int r = r0 + tr + e / {n}, c = c0 + e % {n};")
    w(f"        if (r < {dims[-2]} && c < {dims[-1]}) out[{index((['z'] if nd == 3 else []) + ['r', 'c'])}] = "
      f"({t})(tile[e] + constant);")
    w("    }")
    w("}")
    w("")
    params = [f"double p_{p}" for p in k.params]
    coefficient = lambda e: c_expr(e, "float64", _no_field, lambda p: f"p_{p}")
    host_op = {"double": "{}", "tf32": f"{name}_tf32((float)({{}}))", "half": "__float2half((float)({}))"}
    w(f"static void {name}_bands({', '.join([f'{op_t} *bands', *params])})")
    w("{")
    band = 0
    for line in plan.lines:
        rows_, cols_ = (kk, n) if line.axis == "cols" else (m, kk)
        w(f"    {{ /* {line.axis} line of {line.source[0]} (dt {line.source[1]}), shift {line.shift} */")
        w(f"        const double w[{len(line.coefficients)}] = {{{', '.join(coefficient(c) for c in line.coefficients)}}};")
        w(f"        const int chunks[{len(line.chunks)}] = {{{', '.join(map(str, line.chunks))}}};")
        w(f"        for (int ci = 0; ci < {len(line.chunks)}; ++ci)")
        w(f"            for (int i = 0; i < {rows_}; ++i)")
        w(f"                for (int j = 0; j < {cols_}; ++j) {{")
        if line.axis == "cols":  # input column chunk * k + i of the window feeds output column j
            w(f"                    const int b = chunks[ci] * {kk} + i - j;")
        else:  # output row i reads input row chunk * k + j of the window
            w(f"                    const int b = chunks[ci] * {kk} + j - i;")
        w(f"                    bands[{band} + ci * {rows_ * cols_} + i * {cols_} + j] = "
          + host_op[shape.operand].format(f"b >= 0 && b < {len(line.coefficients)} ? w[b] : 0.0") + ";")
        w("                }")
        w("    }")
        band += len(line.chunks) * rows_ * cols_
    w("}")
    w("")
    constant = coefficient(plan.constant) if plan.constant is not None else "0.0"
    w("/* One step on device pointers (each level the interior plus a ring of the stencil's radius, "
      + ("none: reads wrap" if k.wrap else "the ring read, never written") + "); the weights are uploaded "
      "when the parameters change. */")
    w(f"static int {name}_launch({', '.join([f'{t} *out', *(f'const {t} *{s}' for s in srcs), *params, *(f'int {d}' for d in dims)])})")
    w("{")
    w(f"    static double uploaded[{len(k.params) + 1}];")
    w("    static bool ready = false;")
    w(f"    const double now[{len(k.params) + 1}] = {{{''.join(f'p_{p}, ' for p in k.params)}0.0}};")
    w("    if (!ready || memcmp(uploaded, now, sizeof now) != 0) {")
    w(f"        static {op_t} bands[{k.band_elements}];")
    w(f"        {name}_bands({', '.join(['bands', *(f'p_{p}' for p in k.params)])});")
    w(f"        MSC_CUDA_CHECK(cudaMemcpyToSymbol({name}_weights, bands, sizeof bands));")
    w("        memcpy(uploaded, now, sizeof now);")
    w("        ready = true;")
    w("    }")
    grid_z = dims[0] if nd == 3 else "1"
    w(f"    const dim3 grid(({dims[-1]} + {n - 1}) / {n}, ({dims[-2]} + {k.warps * m - 1}) / {k.warps * m}, {grid_z});")
    if k.shared_bytes > DEFAULT_SHARED:
        w(f"    MSC_CUDA_CHECK(cudaFuncSetAttribute({name}_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, "
          f"{k.shared_bytes}));")
    w(f"    MSC_LAUNCH({name}_kernel, grid, dim3({32 * k.warps}), {k.shared_bytes}, "
      + ", ".join(["out", *srcs, f"({acc_t})({constant})", *dims]) + ");")
    w("    return 0;")
    w("}")
    return "\n".join(L) + "\n"


def standalone_entry(k: TensorCoreKernel) -> str:
    """`extern "C" int <name>_step(out, sources..., params..., extents...)`: one step on host arrays
    (copied to the device and back; out's ring is kept)."""
    t = _C_TYPE[k.dtype]
    dims = [f"n{d}" for d in range(k.plan.ndim)]
    ring = [0 if k.wrap else r for r in k.radius]
    count = " * ".join(f"(size_t)({d} + {2 * r})" for d, r in zip(dims, ring))
    srcs = [f"src_{_source_name(s)}" for s in k.sources]
    params = [f"double p_{p}" for p in k.params]
    L = [f'extern "C" int {k.name}_step({", ".join([f"{t} *out", *(f"const {t} *{s}" for s in srcs), *params, *(f"int {d}" for d in dims)])})',
         "{",
         f"    const size_t bytes = sizeof({t}) * {count};",
         f"    {t} *d_out = nullptr;",
         "    MSC_CUDA_CHECK(cudaMalloc(&d_out, bytes));",
         "    MSC_CUDA_CHECK(cudaMemcpy(d_out, out, bytes, cudaMemcpyHostToDevice));"]
    for s in srcs:
        L += [f"    {t} *d_{s} = nullptr;",
              f"    MSC_CUDA_CHECK(cudaMalloc(&d_{s}, bytes));",
              f"    MSC_CUDA_CHECK(cudaMemcpy(d_{s}, {s}, bytes, cudaMemcpyHostToDevice));"]
    args = ", ".join(["d_out", *(f"d_{s}" for s in srcs), *(f"p_{p}" for p in k.params), *dims])
    L += [f"    if (const int status = {k.name}_launch({args})) return status;",
          "    MSC_CUDA_CHECK(cudaMemcpy(out, d_out, bytes, cudaMemcpyDeviceToHost));",
          *(f"    MSC_CUDA_CHECK(cudaFree({p}));" for p in ["d_out", *(f"d_{s}" for s in srcs)]),
          "    return 0;",
          "}"]
    return "\n".join(L) + "\n"


def _no_field(read: ir.FieldRead) -> str:
    raise AssertionError(f"a weight reads field {read.name}")  # the plan refuses variable coefficients


INCLUDES = '#include "msc_cuda.h"\n'


def source_file(kernels: Sequence[TensorCoreKernel]) -> str:
    """A complete .cu holding `kernels` (distinct names), each with its host entry `<name>_step`."""
    return INCLUDES + "".join("\n" + k.code + "\n" + standalone_entry(k) for k in kernels)


def step(kernel: TensorCoreKernel, library: ctypes.CDLL, read: Mapping[Source, np.ndarray],
         out: np.ndarray, params: Mapping[str, float]) -> np.ndarray:
    """Run `<name>_step` of a built library: one step of the statement into a copy of `out`
    (arrays in the reference layout: the interior plus the stencil's ring, none when the kernel wraps)."""
    c_t = np.dtype(kernel.dtype)
    result = np.array(out, dtype=c_t, order="C")
    arrays = [np.ascontiguousarray(read[s], dtype=c_t) for s in kernel.sources]
    if any(a.shape != result.shape for a in arrays):
        raise ValueError(f"{kernel.name}: every source must have out's shape {result.shape}")
    ring = [0 if kernel.wrap else r for r in kernel.radius]
    interior = [e - 2 * r for e, r in zip(result.shape, ring)]
    args = [result.ctypes.data_as(ctypes.c_void_p), *(a.ctypes.data_as(ctypes.c_void_p) for a in arrays),
            *(ctypes.c_double(params[p]) for p in kernel.params), *(ctypes.c_int(n) for n in interior)]
    status = getattr(library, f"{kernel.name}_step")(*args)
    if status != 0:
        raise RuntimeError(f"{kernel.name}_step failed with CUDA error {status}")
    return result


def build_emulated(kernels: Sequence[TensorCoreKernel], name: str) -> ctypes.CDLL:
    """Build `kernels` with their host entries into one emulated library (cached) and load it."""
    return build.load_library(cuda_emu.build_shared(source_file(kernels), name))


# ---------------------------------------------------------------- the CUDA target's hook

ROUNDED = {"tf32": 10, "fp16": 10}  # mantissa bits of the precisions that round float64 operands

def custom_launch(poly: PolyIR, schedule: LoweredSchedule, launch: DeviceFunction) -> CustomLaunch | None:
    """Under `Schedule().tensor_cores(precision)`, the tensor-core kernel of the statement that
    `launch` computes (the CUDA target's `GPUPlatform.custom_launch`); None without tensor cores,
    and for the box entry msc_run_box (a sub-box of the domain: the plain kernel computes it)."""
    sched = schedule.schedule
    precision = sched.tensor_core_precision
    if precision is None or any(name == "L0" for _, name in launch.scope):
        return None
    stencil = poly.ir
    used = [p for p, on in (("tile", sched.tiles and not sched.time_depth), ("time_tile", sched.time_depth),
                            ("cache_read", sched.cached_reads), ("cache_write", sched.cached_writes),
                            ("compute_at", sched.fuse_at), ("reorder", sched.order), ("unroll", sched.unrolls),
                            ("vectorize", sched.vector_loop), ("parallel", sched.parallel_loop)) if on]
    if used:
        raise ScheduleError(f"tensor_cores on stencil '{stencil.name}' cannot be combined with "
                            f"{', '.join(f'{p}()' for p in used)}: the tensor-core kernel tiles the grid by its MMA "
                            "fragments and stages its inputs itself")
    assigns = [node for node in kir.walk(launch.body) if isinstance(node, kir.Assign)]
    if len(assigns) != 1:
        raise ScheduleError(f"tensor_cores on stencil '{stencil.name}': launch {launch.name} computes "
                            f"{len(assigns)} statements; tensor cores take one statement per launch")
    assign = assigns[0]
    index = next(i for i, st in enumerate(stencil.statements) if st.target == assign.field and st.expr == assign.rhs)
    kernel = generate(stencil, index, precision, stencil.dtype, f"{launch.name}_tc")
    if stencil.dtype == "float64" and precision in ROUNDED and not sched.tensor_core_lossy:
        raise ScheduleError(
            f"tensor_cores({precision!r}) on float64 stencil '{stencil.name}': {precision} operands keep "
            f"{ROUNDED[precision]} mantissa bits (about 5e-4 relative error per output, docs/tensor_cores.md), "
            f"against float64's 52; use tensor_cores('fp64'), or tensor_cores({precision!r}, lossy=True) to accept "
            "the loss, or compile with dtype='float32'")
    pointers = [level_name(assign.field, 1), *(array_name(*source) for source in kernel.sources)]
    missing = sorted(set(pointers) - {name for _, name in launch.scope})
    assert not missing, f"launch {launch.name} has no level pointers {missing} in scope"
    args = (*(ix.Var(p) for p in pointers),
            *(ix.Cast("double", ix.Var(param_name(p))) for p in stencil.params),
            *(ix.Cast("int", extent(d) - 2 * r) for d, r in enumerate(stencil.radius)))
    return CustomLaunch(kernel.code, kir.Call(f"{kernel.name}_launch", args))
