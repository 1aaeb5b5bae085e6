"""The CUDA target: a GPU platform x the CUDA C++ printer x nvcc (or g++ and
the project's CUDA emulator).

The generated kernel.cu runs the whole time loop on the device: the host
code keeps the loops that must run in order (time, wavefronts) and launches
one `__global__` function per statement (per parallel loop of the schedule),
with the loops that carry no dependence mapped onto the grid
(`passes/cuda.py`). Written fields are ring buffers on the device; a step
switches levels by pointer. `msc_run` takes host arrays (copied in once and
out once per call), `msc_run_device` device arrays (used in place: CuPy's,
through `__cuda_array_interface__`). Every launch goes through
`MSC_LAUNCH` and every runtime call through `MSC_CUDA_CHECK` from
msc/runtime/cuda/msc_cuda.h, so the same source builds with nvcc for a GPU, or
with g++ and `-DMSC_CUDA_EMULATE` for the emulator that runs it on the CPU.

A launch can be written by another generator instead (the tensor-core path):
`GPUPlatform.custom_launch` is the hook.
"""

from __future__ import annotations

import ctypes
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Sequence

from msc import ir
from msc.codegen import check_schedule_options, register
from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen.lower import field_name, lower_kernel, param_name, ring_buffer
from msc.codegen.printers.c import int_helpers
from msc.errors import ScheduleError, TargetError
from msc.poly import PolyIR
from msc.poly.schedule import LoweredSchedule, Schedule, as_schedule, describe_loops
from msc.runtime.build import build_shared_library, write_tree
from msc.runtime.cuda_kernel import CudaKernel, is_device_array
from msc.runtime.kernel import BOX_ENTRY, ENTRY
from msc.targets import ctarget
from msc.targets.gpu import cuda_pass as mapping
from msc.targets.gpu import cuda_stream as stream
from msc.targets.gpu import cuda_tensor_core
from msc.targets.gpu import cuda_tensor_core_tile as tensor_core_tile
from msc.targets.gpu import cuda_time_tile as time_tile
from msc.targets.gpu.cuda_pass import CustomLaunch
from msc.targets.gpu.cuda_printer import INDEX_TYPE, CudaPrinter
from msc.targets.gpu.tensor_core import tensor_core_plan
from msc.targets.templates_env import render
from msc.tune.tuner import AutoKernel, Estimate

NAME = "cuda"
DEVICE_FUNCTION = "__host__ __device__ inline"  # how device code declares a helper the host may call too
NVCC = "nvcc"
NVCC_FLAGS = ("-O3", "-shared", "-Xcompiler", "-fPIC")
DEFAULT_ARCH = "sm_90"  # of an emitted Makefile


class GPUPlatform(ctarget.Platform):
    """An NVIDIA GPU: loops onto the grid, cache buffers in a block's shared memory.
    schedule="auto" times `cuda_candidates` on the device (device time per step)."""

    name = "NVIDIA GPU (CUDA)"
    kernel_template = "cuda_kernel.cu.j2"
    capacity: ClassVar[dict[k.Space, int]] = {k.Space.SHARED: mapping.STATIC_SHARED}
    tunes = True

    def tuning_space(self, poly: PolyIR, shape: tuple[int, ...], steps: int) -> list[Schedule]:
        return cuda_candidates(poly.ir)

    def default_time_tile(self, stencil: ir.StencilIR, depth: int) -> dict[str, int]:
        """Streamed tiles of the default time tile's block in 2D and 3D (`cuda_stream.default_tile`);
        in 1D a block's shape (the tuner's middle one), halved until the tile and its halo fit a block."""
        return time_tile.default_tile(stencil, depth, BLOCKS[stencil.ndim][1])

    def trial_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
        return {name: _host_copy(value) for name, value in inputs.items()}  # device arrays are run in place

    def custom_launch(self, poly: PolyIR, schedule: LoweredSchedule,
                      launch: mapping.DeviceFunction) -> CustomLaunch | None:
        """Device code of its own for `launch` (None: print the mapped kernel IR)."""
        if schedule.schedule.tensor_core_precision is None:
            return None
        return cuda_tensor_core.custom_launch(poly, schedule, launch)


class EmulatedGPUPlatform(GPUPlatform):
    """The GPU under the emulator, which times nothing (it counts memory traffic,
    but no cost model is built on the counts yet), so schedule="auto" keeps the
    default launch (and says so)."""

    name = "NVIDIA GPU (CUDA), emulated"
    measures = False

    def tuning_space(self, poly: PolyIR, shape: tuple[int, ...], steps: int) -> list[Schedule]:
        return [Schedule()]

    def cost(self, poly: PolyIR, shape: tuple[int, ...], steps: int, schedule: Schedule) -> Estimate:
        return Estimate(0.0, text=f"'{poly.ir.name}' under the GPU emulator (CUDA and HIP): kept the default "
                                  "launch (timing the candidates needs a GPU; there is no GPU cost model yet)")


EMULATED = EmulatedGPUPlatform()


def _entry_scope(stencil: ir.StencilIR, box: bool) -> list[tuple[str, str]]:
    """The entry point's variables a launch may use: (C type, name)."""
    scope = [("real *" if f.written else "const real *", _pointer(f)) for f in stencil.fields]
    scope += [("real", param_name(p)) for p in stencil.params]
    scope += [("index", f"P{d}") for d in range(stencil.ndim)]
    if box:
        scope += [("index", f"{b}{d}") for d in range(stencil.ndim) for b in ("L", "H")]
    return scope + [("index", "V"), ("long", "t0"), ("long", "T")]  # steps stay 64-bit: a run may take 2^31


def _launch_points(stencil: ir.StencilIR, used: Sequence[tuple[str, str]]) -> ix.Expr:
    """The most points a grid-mapped launch indexes from one pointer: a level's, or where it
    takes the ring buffers' slot volume V (levels chosen inside the kernel), all slots'."""
    if any(name == "V" for _, name in used):
        return ix.Var("V") * max(f.slots for f in stencil.fields)
    return mapping.level_points(stencil.ndim)


def _pointer(f: ir.FieldDecl) -> str:
    return ring_buffer(f.name) if f.written else field_name(f.name)


def _printed(function: mapping.DeviceFunction, parameters: Sequence[tuple[str, str]], body: list[str],
             printer: CudaPrinter) -> dict[str, object]:
    """A device function for the kernel template: its name, `body` (its lines), threads per block,
    `parameters` and, where it is indexed, the template line of its index type."""
    return dict(name=function.name, source="", body=body, threads=math.prod(function.block),
                parameters=[printer.parameter(t, v) for t, v in parameters],
                template=f"template <typename {INDEX_TYPE}>" if function.indexed else "")


def _printer_of(function: mapping.DeviceFunction, printer: CudaPrinter) -> CudaPrinter:
    """The printer of a device function's body and parameters: an indexed one's index is its template's."""
    return replace(printer, index=INDEX_TYPE) if function.indexed else printer


def _printed_whole(function: mapping.DeviceFunction, printer: CudaPrinter) -> dict[str, object]:
    """A device function whose parameters are its whole scope."""
    printer = _printer_of(function, printer)
    return _printed(function, function.scope, printer.lines(function.body), printer)


def cuda_parameters(stencil: ir.StencilIR, box: bool) -> list[str]:
    return ctarget.signature(stencil).c_parameters(box, restrict=CudaPrinter.restrict)


class CudaTarget(ctarget.CTarget):
    """CUDA C++: JIT-built (nvcc on a machine with a CUDA device, or g++ and the
    emulator with `emulate=True`), or emitted as a standalone nvcc project."""

    def __init__(self) -> None:
        super().__init__(NAME, GPUPlatform(), ctarget.Toolchain(cc=NVCC, flags=NVCC_FLAGS), compile_options=("emulate",),
                         schedule_options=("tensor_cores", "prefetch"))

    # -- generation ------------------------------------------------------------

    def generate(self, poly: PolyIR, schedule: LoweredSchedule, box: bool = False) -> str:
        stencil = poly.ir
        check_schedule_options(self.name, schedule.schedule, self.schedule_options)
        printer = self.printer(stencil.dtype)
        entries = []
        for name, is_box in [(ENTRY, False)] + ([(BOX_ENTRY, True)] if box else []):
            entries.append(self._entry(poly, schedule, name, is_box, printer))
        fields = [dict(c=_pointer(f), slots=f.slots, written=f.written) for f in stencil.fields]
        return render(
            self.platform.kernel_template,
            **ctarget.stencil_values(stencil),
            schedule=f"{schedule.schedule} (loops: {describe_loops(schedule)})",
            int_helpers=int_helpers(DEVICE_FUNCTION),
            entries=entries,
            level_sets=any(entry.get("level_sets", False) for entry in entries),
            fields=fields,
            volume=" * ".join(f"P{d}" for d in range(stencil.ndim)),
            radius3=[0] * (3 - stencil.ndim) + list(stencil.radius),
        )

    def printer(self, dtype: str) -> CudaPrinter:
        """The printer of the target's kernels."""
        return CudaPrinter(dtype)

    def _entry(self, poly: PolyIR, schedule: LoweredSchedule, name: str, box: bool,
               printer: CudaPrinter) -> dict[str, object]:
        stencil = poly.ir
        parameters = cuda_parameters(stencil, box)
        arguments = [re.split(r"[ *]", p)[-1] for p in parameters]
        device = [f"d_{a}" if a in {_pointer(f) for f in stencil.fields} else a for a in arguments]
        entry = dict(name=name, parameters=parameters, arguments=arguments, device_arguments=device,
                     **ctarget.entry_values(stencil, box))
        sched = schedule.schedule
        why_not = time_tile.prefetch_reason(stencil, schedule) if sched.prefetch_distance and not box else None
        if why_not is not None:
            raise ScheduleError(f"prefetch({sched.prefetch_distance}) on {self.name} sets how many planes ahead a "
                                f"streamed tile's loads run, and cannot here: {why_not}")
        if sched.tensor_core_precision and sched.time_depth and not box:
            source, loop = tensor_core_tile.entry_loop(stencil, sched, name)
            return dict(entry, launches=[dict(source=source)], body=printer.lines(loop))
        tiled = None if box else time_tile.shared_time_tile(stencil, schedule)
        if tiled is not None:
            functions = time_tile.device_functions(tiled, f"{name}_tt")
            return dict(entry, launches=[_printed_whole(f, printer) for f in functions],
                        body=printer.lines(time_tile.host_loop(tiled, functions)),
                        level_sets=time_tile.writes_level_sets(tiled))
        kernel = lower_kernel(poly, schedule, name, box)
        why = time_tile.reason_not_shared(stencil, schedule) if schedule.schedule.time_depth else None
        try:
            host, launches = mapping.split(kernel, poly, schedule, _entry_scope(stencil, box))
        except ScheduleError as e:
            if why is None:
                raise
            raise ScheduleError(f"{e}; in shared memory they cannot run either: {why}") from None
        for launch in launches:
            ctarget.check_capacity(k.Kernel(launch.name, launch.body), poly, schedule, self.platform, self.name)
        printed = []
        calls: dict[str, k.Node] = {}
        for launch in launches:
            custom = self.platform.custom_launch(poly, schedule, launch) if isinstance(self.platform, GPUPlatform) else None
            if custom is not None:
                calls[launch.name] = custom.call
                printed.append(dict(source=custom.source))
                continue
            own = _printer_of(launch, printer)
            body = own.lines(launch.body)
            text = "\n".join(body)
            used = [(t, v) for t, v in launch.scope if re.search(rf"\b{re.escape(v)}\b", text)]
            printed.append(_printed(launch, used, body, own))
            calls[launch.name] = k.Launch(launch.name, launch.grid, launch.block, tuple(ix.Var(v) for _, v in used),
                                          points=_launch_points(stencil, used) if launch.indexed else None)

        def fill(node: k.Node) -> k.Node:
            return calls[node.name] if isinstance(node, k.Launch) else node

        host = k.transform_kernel(host, fill)
        note = [] if why is None else [k.Comment(f"skewed time tiles in global memory, not in shared memory: {why}")]
        return dict(entry, launches=printed, body=printer.lines(k.Block((*note, host.body))))

    def complete(self, poly: PolyIR, schedule: Schedule | None) -> Schedule | None:
        """A time tile with tensor cores that names no sizes takes the fused kernel's tile where it fuses."""
        if (schedule is not None and schedule.tensor_core_precision and schedule.time_depth and not schedule.tiles
                and tensor_core_tile.reason(poly.ir, schedule) is None):
            tile = tensor_core_tile.default_tile(poly.ir, schedule.tensor_core_precision, schedule.time_depth)
            return replace(schedule, tiles=tuple(tile.items()))
        return super().complete(poly, schedule)

    # -- building ----------------------------------------------------------------

    def build_toolchain(self, emulate: bool) -> ctarget.Toolchain:
        """g++ and the emulator (`emulate`), else nvcc for this machine's CUDA
        device (a TargetError when it has none). Both read msc/runtime/cuda/; the
        emulator's digest is a define, so a changed runtime never reuses a built library."""
        from msc.runtime import cuda_emu

        if emulate:
            return ctarget.Toolchain(cc=cuda_emu.compiler(), flags=cuda_emu.flags(shared=True))
        arch = device_arch()
        if arch is None:
            raise TargetError(
                "target 'cuda': no CUDA device was found (no driver, or the driver sees no GPU); "
                "compile(target='cuda', emulate=True) runs the same generated CUDA on the CPU with msc's emulator")
        return ctarget.Toolchain(cc=NVCC, flags=(*NVCC_FLAGS, f"-arch={arch}", f"-I{cuda_emu.EMULATOR_DIR}",
                                                 f"-DMSC_CUDA_EMU_DIGEST={cuda_emu.emulator_digest()}"))

    def compile(self, poly: PolyIR, *, threads: int | None = None, schedule: object = None,
                box: bool = False, emulate: bool = False) -> CudaKernel | AutoKernel:
        """A kernel built before (same IR, schedule, generator, toolchain) is
        loaded through the kernel index without any isl work."""
        if not isinstance(emulate, bool):
            raise TargetError(f"target 'cuda': emulate must be True or False, got {emulate!r}")
        if schedule == "auto":
            return AutoKernel(poly, lambda s, n: self.compile(poly, threads=n, schedule=s, box=box, emulate=emulate),
                              threads, platform=EMULATED if emulate else self.platform)
        toolchain = self.build_toolchain(emulate)
        sched = self.complete(poly, as_schedule(schedule))
        key = ctarget.kernel_key(self.name, poly.ir, sched, box, toolchain)

        def build() -> tuple[str, Path]:
            source = self.source(poly, sched, box)
            return source, build_shared_library(source, f"msc_{poly.ir.name}", cc=toolchain.cc,
                                                flags=toolchain.flags, suffix=".cu")

        return ctarget.through_index(
            key, lambda source, library: CudaKernel(poly.ir, source, library, self.name, threads, sched), build, ".cu")

    # -- a standalone tree ---------------------------------------------------------

    def emit(self, poly: PolyIR, directory: Path, *, schedule: object = None) -> Path:
        """kernel.cu, main.cu, npy.h, a Makefile (nvcc; `make emulate`: g++ and
        the emulator) and the CUDA runtime header with the emulator (header and runtime), written atomically."""
        from msc.runtime import cuda_emu

        stencil = poly.ir
        source = self.source(poly, schedule)
        values = dict(ctarget.program_values(stencil), parameters=cuda_parameters(stencil, False))
        runtime = {name: (Path(cuda_emu.EMULATOR_DIR) / name).read_text(encoding="utf-8") for name in cuda_emu.FILES}
        files = {
            "kernel.cu": source,
            "main.cu": render(self.toolchain.main_template, gpu=True, **values),
            "npy.h": render("npy.h"),
            "Makefile": render("cuda_Makefile.j2", emulate_flags=cuda_emu.PROGRAM_FLAGS, emulator_files=list(runtime),
                               emulator_runtime=cuda_emu.RUNTIME, **values),
            **runtime,
        }
        return write_tree(directory, files)


# -- schedule="auto" -------------------------------------------------------------

# blocks (threads along x, y[, z], the last dimension innermost) the tuner tries
BLOCKS = {1: ((256,), (128,), (512,)),
          2: ((4, 64), (8, 32), (8, 64), (16, 32), (2, 128)),
          3: ((1, 8, 32), (2, 4, 32), (1, 4, 64), (4, 4, 32), (2, 8, 32))}
TIME_DEPTHS = (2, 3, 4, 8)
# threads per inner dimension (outer first) of the streamed blocks the tuner tries besides the
# default: of one step, and of time tiles
STREAM_BLOCKS = {2: ((64,), (256,)), 3: ((8, 32), (8, 64), (32, 32))}
TIME_TILE_BLOCKS = {2: ((256,),), 3: ((32, 32), (16, 32))}
# planes ahead of the streamed default the tuner tries besides its AHEAD loads in flight per thread
PREFETCH = 4
# 3D streamed blocks (threads, outer first) whose threads take ROWS points of the middle
# dimension each (`unroll(y, ROWS)`), of one step and of time tiles
ROWS = 2
ROW_BLOCKS = ((8, 32), (16, 32))


def cuda_candidates(stencil: ir.StencilIR) -> list[Schedule]:
    """The default launch (and, where that streams, the grid-mapped one, a point per
    thread, the default with its loads PREFETCH planes ahead, and streamed blocks of
    other shapes), then tiles of several block shapes
    (a tile is a block), then time tiles of four depths (dirichlet stencils only), of
    the default time tile's block and, in 2D and 3D, of TIME_TILE_BLOCKS' shapes, that fit a block and whose
    halo leaves most of what a block loads computed into outputs
    (`cuda_time_tile.pays`: a degenerate tile would take seconds per step). In 3D the
    streamed candidates include blocks whose threads take ROWS points of y each. Then
    `tensor_candidates`."""
    out = [Schedule()]
    streams = time_tile.default_stream(stencil) is not None
    if streams:
        out += [Schedule().parallel(stencil.dims[0]), Schedule().prefetch(PREFETCH)]
        out += _streamed(stencil, 1, [(threads, 1) for threads in STREAM_BLOCKS[stencil.ndim]] + _row_blocks(stencil))
    tiles = [dict(zip(stencil.dims, block)) for block in BLOCKS[stencil.ndim]]
    out += [Schedule().tile(**t) for t in tiles]
    if stencil.boundary == "dirichlet":
        for depth in TIME_DEPTHS:
            tile = time_tile.default_tile(stencil, depth, BLOCKS[stencil.ndim][1])
            shapes = [Schedule().time_tile(depth, **tile)] if time_tile.pays(stencil, depth, tile) else []
            if streams:
                blocks = [(threads, 1) for threads in TIME_TILE_BLOCKS[stencil.ndim]] + _row_blocks(stencil)
                shapes += _streamed(stencil, depth, blocks)
            out += [schedule for schedule in shapes if schedule not in out]
    return out + tensor_candidates(stencil)


TENSOR_DEPTHS = (2, 4, 8)  # steps per launch of the fused tensor-core candidates


def tensor_candidates(stencil: ir.StencilIR) -> list[Schedule]:
    """For a float64 stencil of one statement with a tensor-core plan: `tensor_cores("fp64")`
    (exact to rounding, so the tuner may choose it; tf32 and fp16 are never chosen for the
    user), and where it fuses, with time tiles of TENSOR_DEPTHS steps whose tile fits."""
    tensor = Schedule().tensor_cores("fp64")
    if stencil.dtype != "float64" or len(stencil.statements) != 1:
        return []
    try:
        tensor_core_plan(stencil, 0, "fp64")
    except ScheduleError:  # not linear with constant weights, or not 2D/3D
        return []
    out = [tensor]
    if stencil.boundary == "dirichlet" and tensor_core_tile.reason(stencil, tensor.time_tile(2)) is None:
        for depth in TENSOR_DEPTHS:
            try:
                tile = tensor_core_tile.default_tile(stencil, "fp64", depth)
            except ScheduleError:  # no tile of this depth's halo fits
                continue
            out.append(tensor.time_tile(depth, **tile))
    return out


def _row_blocks(stencil: ir.StencilIR) -> list[tuple[tuple[int, ...], int]]:
    return [(threads, ROWS) for threads in ROW_BLOCKS] if stencil.ndim == 3 else []


def _streamed(stencil: ir.StencilIR, depth: int, blocks: list[tuple[tuple[int, ...], int]]) -> list[Schedule]:
    """Streamed tiles of `depth` steps for blocks of these threads (outer first), each
    thread taking `rows` points of the middle dimension: those that stream, fit and pay."""
    if stream.reason(stencil, depth) is not None:
        return []
    out = []
    for threads, rows in blocks:
        tile = stream.block_tile(stencil, depth, threads, rows)
        if tile is not None and time_tile.pays(stencil, depth, tile, rows):
            schedule = Schedule().time_tile(depth, **tile)
            out.append(schedule.unroll(stencil.dims[1], rows) if rows > 1 else schedule)
    return out


def _host_copy(value: Any) -> Any:
    """A device array's host copy for the trials (CuPy arrays have .get()): a tuner's
    simulation keeps its buffers on the host; anything else as it is."""
    if isinstance(value, list):
        return [_host_copy(v) for v in value]
    if not is_device_array(value):
        return value
    if not hasattr(value, "get"):
        raise TargetError("schedule='auto' with device arrays tries its candidates on host copies of them: "
                          f"pass arrays with a .get() method (CuPy's), not {type(value).__name__}")
    return value.get()


# CUdevice_attribute values of the driver API (cuda.h)
_CC_MAJOR, _CC_MINOR = 75, 76


def device_arch() -> str | None:
    """sm_XY of the first CUDA device, through the driver library (no CUDA
    toolkit or CuPy needed); None without a driver or a device."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    count, device, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return None
    if (driver.cuDeviceGet(ctypes.byref(device), 0) != 0
            or driver.cuDeviceGetAttribute(ctypes.byref(major), _CC_MAJOR, device) != 0
            or driver.cuDeviceGetAttribute(ctypes.byref(minor), _CC_MINOR, device) != 0):
        return None
    return f"sm_{major.value}{minor.value}"


register(NAME, CudaTarget)
