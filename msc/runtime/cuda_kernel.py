"""A built CUDA kernel (for a GPU, or for the CUDA emulator): numpy arrays
through `msc_run` (copied to the device once per call, the whole time loop
there, copied back once), device arrays through `msc_run_device`, and
simulations (`start`) whose ring buffers stay on the device between
`advance` calls (copied back only when the host reads them).

Device arrays are any objects with `__cuda_array_interface__` (CuPy's; under
the emulator, host memory described the same way). They are used in place:
the kernel's ring buffers are built from them on the device, and after the
run the newest level of each written field is stored back into the array
given for its newest input level, which `run` returns.
"""

from __future__ import annotations

import ctypes
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from msc.errors import StencilArgumentError, TargetError
from msc.ir.arguments import bind_arguments
from msc.runtime import cuda_emu
from msc.runtime.buffers import buffer_bytes, padded_shape, slot_points
from msc.runtime.kernel import ENTRY, CompiledKernel, RunStats, Simulation

DEVICE_ENTRY = ENTRY + "_device"


def is_device_array(value: Any) -> bool:
    return hasattr(value, "__cuda_array_interface__")


def _any_device_array(inputs: dict[str, Any]) -> bool:
    return any(is_device_array(v) or (isinstance(v, list) and any(map(is_device_array, v))) for v in inputs.values())


@dataclass(frozen=True)
class _DeviceArray:
    pointer: int
    shape: tuple[int, ...]
    typestr: str
    readonly: bool


def _describe(name: str, value: Any) -> _DeviceArray:
    info = value.__cuda_array_interface__
    shape = tuple(int(n) for n in info["shape"])
    itemsize = np.dtype(info["typestr"]).itemsize
    contiguous = tuple(itemsize * int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape)))
    strides = info.get("strides")
    if strides is not None and tuple(strides) != contiguous and int(np.prod(shape)) > 1:
        raise StencilArgumentError(f"device array '{name}' is not C-contiguous (strides {tuple(strides)}); "
                                   "pass cupy.ascontiguousarray(a)")
    pointer, readonly = info["data"]
    return _DeviceArray(int(pointer or 0), shape, str(info["typestr"]), bool(readonly))


def _shadow(array: _DeviceArray) -> np.ndarray:
    """A numpy array of the device array's shape and dtype (no memory): the
    checks every backend runs on its arguments see it instead."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.dtype(array.typestr)), array.shape, (0,) * len(array.shape))


class CudaKernel(CompiledKernel):
    """A CompiledKernel whose `run` also takes device arrays (used in place)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        lib = self._lib
        lib.msc_device_alloc.restype = ctypes.c_void_p
        lib.msc_device_alloc.argtypes = [ctypes.c_long]
        lib.msc_device_free.argtypes = [ctypes.c_void_p]
        lib.msc_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_int]
        lib.msc_put_level.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_long),
                                      ctypes.POINTER(ctypes.c_long), ctypes.c_int]
        lib.msc_take_level.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_long),
                                       ctypes.POINTER(ctypes.c_long)]
        self._device_fn = self._entry(DEVICE_ENTRY, box=False)
        self._counters_fn = getattr(lib, "msc_emu_counters", None)  # only the emulator's libraries count

    @property
    def compile_options(self) -> dict[str, Any]:
        return {"emulate": self._counters_fn is not None}

    def __repr__(self) -> str:  # no thread count: the GPU (or its emulator) runs the blocks
        emulated = " (emulated)" if self._counters_fn is not None else ""
        return (f"<msc kernel '{self.ir.name}' target={self.target}{emulated} dtype={self.ir.dtype} "
                f"schedule={self.schedule or 'default'}>")

    def counters(self) -> tuple[int, ...] | None:
        return cuda_emu.read_counters(self._counters_fn) if self._counters_fn is not None else None

    def counters_since(self, before: Any) -> dict[str, float] | None:
        return None if before is None else cuda_emu.counted(before, self.counters())

    def run(self, steps: int, threads: int | None = None, comm: Any = None, dims: Any = None,
            **inputs: Any) -> Any:
        """As CompiledKernel.run; device arrays are used in place (see the module)."""
        if not _any_device_array(inputs):
            return super().run(steps, threads, comm, dims, **inputs)
        if comm is not None:
            raise StencilArgumentError(f"stencil '{self.ir.name}': device arrays cannot be spread over MPI ranks")
        return self._run_device(steps, inputs)

    def start(self, threads: int | None = None, comm: Any = None, dims: Any = None, **inputs: Any) -> Any:
        """As CompiledKernel.start, for host arrays (copied to the device once: a DeviceSimulation)."""
        if _any_device_array(inputs):
            raise StencilArgumentError(f"stencil '{self.ir.name}': start() takes host arrays (it copies them "
                                       "to the device once); pass device arrays to run(), which uses them in place")
        return super().start(threads, comm, dims, **inputs)

    def simulation(self, buffers: dict[str, np.ndarray], scalars: dict[str, float], nthreads: int,
                   step: int = 0) -> Simulation:
        return DeviceSimulation(self, buffers, scalars, nthreads, step)

    def _run_device(self, steps: int, inputs: dict[str, Any]) -> dict[str, Any]:
        stencil = self.ir
        devices: dict[str, list[_DeviceArray]] = {}
        shadows: dict[str, Any] = {}
        for name, value in inputs.items():
            if name in stencil.params:
                shadows[name] = value
                continue
            values = value if isinstance(value, list) else [value]
            if not all(map(is_device_array, values)):
                raise StencilArgumentError(f"stencil '{stencil.name}': '{name}' is a host array but other fields "
                                           "are device arrays; pass all fields one way")
            devices[name] = [_describe(name, v) for v in values]
            shadows[name] = [_shadow(a) for a in devices[name]] if isinstance(value, list) else _shadow(devices[name][0])
        args = bind_arguments(stencil, steps, shadows)
        for f in stencil.written_fields:
            if devices[f.name][-1].readonly:
                raise StencilArgumentError(f"stencil '{stencil.name}': device array '{f.name}' is read-only, "
                                           "but its newest level receives the result")
        shape3 = (ctypes.c_long * 3)(*([1] * (3 - stencil.ndim) + list(args.shape)))
        padded = padded_shape(stencil, args.shape)
        padded3 = (ctypes.c_long * 3)(*([1] * (3 - stencil.ndim) + list(padded)))
        slot_bytes = slot_points(stencil, int(np.prod(padded))) * np.dtype(stencil.dtype).itemsize
        lib = self._lib
        buffers: dict[str, int] = {}
        try:
            for f in stencil.fields:
                pointer = lib.msc_device_alloc(slot_bytes * f.slots)
                if not pointer:
                    raise TargetError(f"stencil '{stencil.name}': no device memory for the "
                                      f"{slot_bytes * f.slots} bytes of field '{f.name}'")
                buffers[f.name] = pointer
                levels = devices[f.name]
                for slot in range(f.slots):  # every slot starts with the newest level's ring
                    self._check(lib.msc_put_level(pointer + slot * slot_bytes, levels[-1].pointer, shape3, padded3, 0))
                for k, level in enumerate(levels[:-1]):
                    slot = (k - (len(levels) - 1)) % f.slots
                    interior = int(stencil.boundary != "periodic")
                    self._check(lib.msc_put_level(pointer + slot * slot_bytes, level.pointer, shape3, padded3,
                                                  interior))
            self.advance_device([buffers[f.name] for f in stencil.fields], [args.scalars[p] for p in stencil.params],
                                list(padded), 0, int(steps))
            out = {}
            for f in stencil.written_fields:
                slot = int(steps) % f.slots
                newest = devices[f.name][-1]
                self._check(lib.msc_take_level(newest.pointer, buffers[f.name] + slot * slot_bytes, shape3, padded3))
                given = inputs[f.name]
                out[f.name] = given[-1] if isinstance(given, list) else given
            return out
        finally:
            for pointer in buffers.values():
                lib.msc_device_free(pointer)

    def advance_device(self, pointers: list[int], scalars: list[float], extents: list[int], t0: int, steps: int) -> None:
        """Steps t0 .. t0+steps-1 on device ring buffers (one per field, laid
        out as `pack` lays out host ones), timed into `last_run`."""
        counted = self.counters()
        start = time.perf_counter()
        self._check(self._device_fn(*pointers, *scalars, *extents, t0, steps, 0))
        interior = int(np.prod([n - 2 * r for n, r in zip(extents, self.ir.radius)]))
        self.last_run = RunStats(time.perf_counter() - start, steps, interior * len(self.ir.statements),
                                 interior * steps, self.counters_since(counted))

    def advance(self, call: list[Any], t0: int, steps: int, nthreads: int) -> None:
        self._check(self._fn(*call, t0, steps, nthreads))

    def _check(self, status: int) -> None:
        if status != 0:
            raise TargetError(f"stencil '{self.ir.name}': a CUDA runtime call failed (its message is on stderr)")


class DeviceSimulation(Simulation):
    """A Simulation whose ring buffers live on the device: `advance` runs the
    time loop there (its time, in `kernel.last_run`, is device time and launches
    only); the host buffers are refreshed from the device when read (`fields`,
    `levels`, `save`) and copied over again before the next step after `set`."""

    def __init__(self, kernel: CudaKernel, buffers: dict[str, np.ndarray], scalars: dict[str, float],
                 nthreads: int, step: int = 0) -> None:
        super().__init__(kernel, buffers, scalars, nthreads, step)
        lib = kernel._lib
        self._device: dict[str, int] = {}
        self._finalizer = weakref.finalize(self, _free, lib, self._device)
        for name, array in buffers.items():
            size = buffer_bytes(array)
            pointer = lib.msc_device_alloc(size)
            if not pointer:
                raise TargetError(f"stencil '{kernel.ir.name}': no device memory for the {size} bytes "
                                  f"of field '{name}'")
            self._device[name] = pointer
        self._host_newer, self._device_newer = True, False

    def _copy(self, to_device: bool) -> None:
        lib, kernel = self.kernel._lib, self.kernel
        for name, array in self._buffers.items():
            if to_device or any(f.name == name and f.written for f in kernel.ir.fields):
                dst, src = (self._device[name], array.ctypes.data) if to_device else (array.ctypes.data, self._device[name])
                kernel._check(lib.msc_copy(dst, src, buffer_bytes(array), int(to_device)))

    def _steps(self, count: int) -> None:
        if self._host_newer:
            self._copy(to_device=True)
            self._host_newer = False
        kernel = self.kernel
        pointers = [self._device[f.name] for f in kernel.ir.fields]
        kernel._check(kernel._device_fn(*pointers, *(self._scalars[p] for p in kernel.ir.params),
                                        *self._extents, self.step, count, 0))
        self._device_newer = True

    def _host_buffers(self) -> dict[str, np.ndarray]:
        if self._device_newer:
            self._copy(to_device=False)
            self._device_newer = False
        return self._buffers

    def set(self, **values: Any) -> None:
        super().set(**values)
        self._host_newer = True


def _free(lib: Any, pointers: dict[str, int]) -> None:
    for pointer in pointers.values():
        lib.msc_device_free(pointer)
