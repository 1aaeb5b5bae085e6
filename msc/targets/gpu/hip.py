"""The HIP target (AMD GPUs): the CUDA target's generator with AMD's runtime.

Everything but the runtime's names is the GPU family's, written once: the
kernel IR, its mapping onto the grid, time tiles in shared memory and the
host loop come from the CUDA target, and `VENDOR` renames the runtime calls
the generated code makes (what AMD's hipify does), with the header
msc/runtime/cuda/msc_hip.h. A name the table lacks fails the generation, so no
CUDA call reaches a HIP source. The same kernel.hip builds with hipcc for an
AMD GPU, or with g++ and the CUDA emulator (`emulate=True`, `make emulate`).
Tensor cores are CUDA's wmma API: refused here.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
from pathlib import Path

from msc.codegen import register
from msc.errors import TargetError
from msc.poly import PolyIR
from msc.poly.schedule import LoweredSchedule
from msc.runtime.build import write_tree
from msc.targets import ctarget
from msc.targets.gpu.cuda import CudaTarget, cuda_parameters
from msc.targets.gpu.cuda_printer import CudaPrinter
from msc.targets.templates_env import render

NAME = "hip"
HIPCC = "hipcc"
DEFAULT_ARCH = "gfx90a"  # MI250X, of an emitted Makefile
HEADER = "msc_hip.h"

#: The CUDA runtime's names in generated code -> HIP's.
VENDOR = {
    "msc_cuda.h": HEADER, "MSC_CUDA_CHECK": "MSC_HIP_CHECK", "cudaError_t": "hipError_t", "cudaSuccess": "hipSuccess",
    "cudaGetLastError": "hipGetLastError", "cudaGetErrorString": "hipGetErrorString", "cudaMalloc": "hipMalloc",
    "cudaFree": "hipFree", "cudaMemcpy": "hipMemcpy", "cudaMemcpyHostToDevice": "hipMemcpyHostToDevice",
    "cudaMemcpyDeviceToHost": "hipMemcpyDeviceToHost", "cudaMemcpyDeviceToDevice": "hipMemcpyDeviceToDevice",
    "cudaDeviceSynchronize": "hipDeviceSynchronize", "cudaFuncSetAttribute": "hipFuncSetAttribute",
    "cudaFuncAttributeMaxDynamicSharedMemorySize": "hipFuncAttributeMaxDynamicSharedMemorySize", "CUDA": "HIP",
}
_NAMES = re.compile(r"\b(" + "|".join(map(re.escape, sorted(VENDOR, key=len, reverse=True))) + r")\b")
_LEFT = re.compile(r"\bcuda[A-Z]\w*")


def hipify(source: str) -> str:
    """`source` with the CUDA runtime's names replaced by HIP's; a CUDA call the table
    lacks is an error (a generator change that needs a new entry)."""
    out = _NAMES.sub(lambda m: VENDOR[m.group(1)], source)
    left = sorted(set(_LEFT.findall(out)))
    if left:
        raise TargetError(f"target 'hip': no HIP name for {', '.join(left)}: add it to msc/targets/gpu/hip.py VENDOR")
    return out


class HipTarget(CudaTarget):
    """HIP C++ for AMD GPUs: JIT-built with hipcc on a machine with an AMD GPU, or with
    g++ and the CUDA emulator (`emulate=True`); emitted as a standalone hipcc project."""

    def __init__(self) -> None:
        super().__init__()
        self.name = NAME
        self.schedule_options = ("prefetch",)  # tensor cores are CUDA's wmma path (no rocWMMA path yet)

    def generate(self, poly: PolyIR, schedule: LoweredSchedule, box: bool = False) -> str:
        return hipify(super().generate(poly, schedule, box))

    def printer(self, dtype: str) -> CudaPrinter:
        """CUDA's printer without unroll hints on loops that hold a barrier (clang refuses them)."""
        return CudaPrinter(dtype, barrier_unroll=False)

    def build_toolchain(self, emulate: bool) -> ctarget.Toolchain:
        """g++ and the CUDA emulator (`emulate`); there is no JIT path to an AMD GPU yet."""
        from msc.runtime import cuda_emu

        if not emulate:
            why = "no AMD GPU was found" if not has_amd_gpu() else "JIT builds for AMD GPUs are not supported yet"
            raise TargetError(f"target 'hip': {why}; compile(target='hip', emulate=True) runs the same generated HIP "
                              "on the CPU with msc's emulator, and emit('hip', dir) writes an hipcc project")
        digest = hashlib.sha256((Path(cuda_emu.EMULATOR_DIR) / HEADER).read_bytes()).hexdigest()[:16]
        return ctarget.Toolchain(cc=cuda_emu.compiler(), flags=(*cuda_emu.flags(shared=True), f"-DMSC_HIP_H_DIGEST={digest}"))

    def emit(self, poly: PolyIR, directory: Path, *, schedule: object = None) -> Path:
        """kernel.hip, main.hip, npy.h, a Makefile (hipcc for ARCH, gfx90a by default; `make
        emulate`: g++ and the CUDA emulator) and the runtime headers with the emulator's runtime, written atomically."""
        from msc.runtime import cuda_emu

        stencil = poly.ir
        values = dict(ctarget.program_values(stencil), parameters=cuda_parameters(stencil, False))
        runtime = {name: (Path(cuda_emu.EMULATOR_DIR) / name).read_text(encoding="utf-8")
                   for name in (HEADER, *cuda_emu.FILES)}
        files = {
            "kernel.hip": self.source(poly, schedule),
            "main.hip": hipify(render(self.toolchain.main_template, gpu=True, **values)),
            "npy.h": render("npy.h"),
            "Makefile": render("hip_Makefile.j2", emulate_flags=cuda_emu.PROGRAM_FLAGS, emulator_files=list(runtime),
                               emulator_runtime=cuda_emu.RUNTIME, arch=DEFAULT_ARCH, **values),
            **runtime,
        }
        return write_tree(directory, files)


def has_amd_gpu() -> bool:
    """Whether AMD's HIP runtime is installed and sees a device."""
    try:
        runtime = ctypes.CDLL("libamdhip64.so")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return runtime.hipGetDeviceCount(ctypes.byref(count)) == 0 and count.value > 0


register(NAME, HipTarget)
