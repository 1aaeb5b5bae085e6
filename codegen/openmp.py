"""The OpenMP C backend: StencilIR + schedule -> one C file with `msc_run`.

The whole time loop runs in C inside one `omp parallel` region; the loop
that isl's dependence analysis marks parallel gets `omp for`, innermost
loops are left unit-stride for the vectorizer. Written fields live in ring
buffers of `slots` levels, addressed through restrict pointers declared
once per time step, so no level is ever copied.
"""

from __future__ import annotations

from dataclasses import dataclass

from pathlib import Path

import islpy as isl

import msc
from msc.errors import ScheduleError
from msc.runtime.build import atomic_write_text
from msc.runtime.kernel import CompiledKernel
from msc.codegen.cexpr import c_expr
from msc.codegen.isl_ast import C_HELPERS, AstPrinter
from msc.codegen.templates_env import render
from msc import ir
from msc.poly import PolyIR, PolyStatement

C_TYPES = {"float64": "double", "float32": "float"}


def level_name(name: str, dt: int) -> str:
    """C name of the pointer to level t+dt of field `name`."""
    if dt == 0:
        return f"{name}_t0"
    return f"{name}_t{'p' if dt > 0 else 'm'}{abs(dt)}"


@dataclass(frozen=True)
class KernelSignature:
    """What the caller passes to msc_run, in order."""

    fields: tuple[ir.FieldDecl, ...]
    params: tuple[str, ...]
    ndim: int

    def c_parameters(self, ctype: str) -> list[str]:
        out = []
        for f in self.fields:
            out.append(f"real *restrict {f.name}_buf" if f.written else f"const real *restrict {f.name}")
        out += [f"double {p}_arg" for p in self.params]
        out += [f"long P{d}" for d in range(self.ndim)]
        return out + ["long t0", "long T", "int nthreads"]


@dataclass
class _Hooks:
    """Fills in statement bodies and loop decorations for the AST printer."""

    poly: PolyIR
    parallel: set[int]
    time_dim: int = 0

    @property
    def ir(self) -> ir.StencilIR:
        return self.poly.ir

    def _index(self, coords: list[str], offsets: tuple[int, ...]) -> str:
        terms = [f"{c} + {o}" if o > 0 else f"{c} - {-o}" if o < 0 else c for c, o in zip(coords, offsets)]
        index = terms[0]
        for d in range(1, len(terms)):
            index = f"({index}) * P{d} + {terms[d]}"
        return index

    def statement(self, name: str, args: list[str]) -> list[str]:
        st = next(s for s in self.poly.statements if s.name == name)
        if st.stmt is None:
            return [self._wrap_call(st)]
        coords = args[1:]

        def access(a: ir.FieldRead) -> str:
            ptr = a.name if a.dt is None else level_name(a.name, a.dt)
            return f"{ptr}[{self._index(coords, a.offsets)}]"

        rhs = c_expr(st.stmt.expr, self.ir.dtype, access)
        lhs = f"{level_name(st.target, 1)}[{self._index(coords, (0,) * self.ir.ndim)}]"
        return [f"{lhs} = {rhs};"]

    def _wrap_call(self, st: PolyStatement) -> str:
        n = ["1"] * (3 - self.ir.ndim) + [f"P{d}" for d in range(self.ir.ndim)]
        r = ["0"] * (3 - self.ir.ndim) + [str(v) for v in self.ir.radius]
        return f"msc_wrap({level_name(st.target, 1)}, {', '.join(n)}, {', '.join(r)});"

    def before_loop(self, dim: int, enclosing: list[int]) -> list[str]:
        """Work-share the outermost parallel loop of each nest (time loops run on every thread)."""
        if dim == self.time_dim or dim not in self.parallel:
            return []
        if any(e in self.parallel for e in enclosing if e != self.time_dim):
            return []
        return ["#pragma omp for schedule(static)"]

    def loop_prologue(self, dim: int, iterator: str) -> list[str]:
        if dim != self.time_dim:
            return []
        lines = []
        for f in self.ir.written_fields:
            for dt in sorted(_levels_used(self.ir, f.name), reverse=True):
                const = "" if dt == 1 else "const "
                slot = f"((t0 + {iterator} + {dt + f.slots}) % {f.slots})"
                lines.append(f"{const}real *restrict {level_name(f.name, dt)} = {f.name}_buf + {slot} * V;")
        return lines


def _levels_used(stencil: ir.StencilIR, name: str) -> set[int]:
    levels = {1}
    for s in stencil.statements:
        levels |= {a.dt for a in s.reads if a.name == name and a.dt is not None}
    return levels


def signature(stencil: ir.StencilIR) -> KernelSignature:
    return KernelSignature(stencil.fields, stencil.params, stencil.ndim)


def generate(poly: PolyIR, schedule: isl.UnionMap | None = None, schedule_text: str = "default") -> str:
    """The complete C source of the kernel for `poly` under `schedule`."""
    stencil = poly.ir
    sched = poly.default_schedule if schedule is None else schedule
    hooks = _Hooks(poly, poly.parallel_dims(sched))
    body = AstPrinter(hooks).print(poly.ast(sched))
    ctype = C_TYPES[stencil.dtype]
    volume = " * ".join(f"P{d}" for d in range(stencil.ndim))
    preamble = [f"const real {p} = (real){p}_arg;" for p in stencil.params]
    preamble.append(f"const long V = {volume};")
    preamble.append("(void)V;")
    return render(
        "openmp_kernel.c.j2",
        version=msc.__version__,
        name=stencil.name,
        ndim=stencil.ndim,
        boundary=stencil.boundary,
        dtype=stencil.dtype,
        ctype=ctype,
        schedule=schedule_text,
        int_helpers=C_HELPERS,
        periodic=stencil.boundary == "periodic",
        parameters=signature(stencil).c_parameters(ctype),
        preamble=preamble,
        body=body,
    )


def _schedule_map(poly: PolyIR, schedule: object) -> tuple[isl.UnionMap | None, str]:
    if schedule is None or schedule == "default":
        return None, "default (time, statement, space in order)"
    raise ScheduleError(
        f"schedule {schedule!r} is not supported by this version; use schedule=None (the default)"
    )


class OpenMPTarget:
    """OpenMP C: JIT-compiled in process, or emitted as a standalone tree."""

    name = "openmp"

    def source(self, poly: PolyIR, schedule: object = None) -> str:
        sched, text = _schedule_map(poly, schedule)
        return generate(poly, sched, text)

    def compile(self, poly: PolyIR, *, threads: int | None = None, schedule: object = None) -> CompiledKernel:
        return CompiledKernel.build(poly.ir, self.source(poly, schedule), self.name, threads)

    def emit(self, poly: PolyIR, directory: Path, *, schedule: object = None) -> Path:
        """kernel.c, main.c, npy.h and a Makefile in `directory` (written atomically)."""
        stencil = poly.ir
        ctype = C_TYPES[stencil.dtype]
        call_args = [f"buffers[{k}]" for k in range(len(stencil.fields))]
        call_args += [f"params[{k}]" for k in range(len(stencil.params))]
        call_args += [f"padded[{3 - stencil.ndim + d}]" for d in range(stencil.ndim)]
        call_args += ["0", "steps", "nthreads"]
        values = dict(
            version=msc.__version__,
            name=stencil.name,
            ndim=stencil.ndim,
            ctype=ctype,
            descr="<f8" if stencil.dtype == "float64" else "<f4",
            params=stencil.params,
            fields=stencil.fields,
            periodic=stencil.boundary == "periodic",
            radius3=[0] * (3 - stencil.ndim) + list(stencil.radius),
            parameters=signature(stencil).c_parameters(ctype),
            call_args=call_args,
            statements=len(stencil.statements),
        )
        files = {
            "kernel.c": self.source(poly, schedule),
            "main.c": render("main.c.j2", **values),
            "npy.h": render("npy.h"),
            "Makefile": render("Makefile.j2", **values),
        }
        for name, text in files.items():
            atomic_write_text(directory / name, text)
        return directory
