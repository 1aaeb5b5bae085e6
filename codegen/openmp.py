"""The OpenMP C backend: StencilIR + schedule -> one C file with `msc_run`
(and, on request, `msc_run_box`, which computes only a sub-box of the domain).

The whole time loop runs in C inside one `omp parallel` region; the loop
that isl's dependence analysis marks parallel gets `omp for`, innermost
loops are left unit-stride for the vectorizer. Written fields live in ring
buffers of `slots` levels, addressed through restrict pointers declared
once per time step, so no level is ever copied.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import islpy as isl

import msc
from msc import ir
from msc.codegen.cexpr import c_expr
from msc.codegen.isl_ast import C_HELPERS, AstPrinter
from msc.codegen.templates_env import render
from msc.poly import PolyIR, PolyStatement
from msc.runtime.build import (
    DEFAULT_CC,
    DEFAULT_CFLAGS,
    atomic_write_text,
    cache_dir,
    host_identity,
    is_intact,
    write_tree,
)
from msc.runtime.kernel import CompiledKernel
from msc.schedule import LARGE_READS, LoweredSchedule, Schedule, as_schedule, describe_loops, lower

if TYPE_CHECKING:
    from msc.tuner import AutoKernel

C_TYPES = {"float64": "double", "float32": "float"}
BOX_ENTRY = "msc_run_box"


# User names are prefixed in C (f_ fields, p_ parameters) so that no name can
# clash with a C keyword, a loop iterator (c0, c1, ...) or the kernel's own names.
def field_name(name: str) -> str:
    return f"f_{name}"


def param_name(name: str) -> str:
    return f"p_{name}"


def level_name(name: str, dt: int) -> str:
    """C name of the pointer to level t+dt of field `name`."""
    if dt == 0:
        return f"f_{name}_t0"
    return f"f_{name}_t{'p' if dt > 0 else 'm'}{abs(dt)}"


@dataclass(frozen=True)
class KernelSignature:
    """What the caller passes to msc_run, in order."""

    fields: tuple[ir.FieldDecl, ...]
    params: tuple[str, ...]
    ndim: int

    def c_parameters(self, ctype: str, box: bool = False) -> list[str]:
        """msc_run's parameters; `box`: msc_run_box's, which adds the box
        lo[d] <= i_d < hi[d] (within the domain r_d <= i_d < P_d - r_d) after the extents."""
        out = []
        for f in self.fields:
            c = field_name(f.name)
            out.append(f"real *restrict {c}_buf" if f.written else f"const real *restrict {c}")
        out += [f"double {param_name(p)}_arg" for p in self.params]
        out += [f"long P{d}" for d in range(self.ndim)]
        out += ["const long *lo", "const long *hi"] if box else []
        return out + ["long t0", "long T", "int nthreads"]


@dataclass
class _Hooks:
    """Fills in statement bodies and loop decorations for the AST printer."""

    poly: PolyIR
    schedule: LoweredSchedule
    box: bool = False  # bounds of the computed points: the box L<d> <= i_d < H<d>, or the domain
    _iterators: dict[int, str] = field(default_factory=dict)
    _rows: dict[tuple[str, tuple[int, ...]], str] = field(default_factory=dict)  # (level pointer, leading offsets) -> row pointer
    _row_coord: str = ""  # the last coordinate, which row pointers are indexed by

    @property
    def ir(self) -> ir.StencilIR:
        return self.poly.ir

    def _index(self, coords: list[str], offsets: tuple[int, ...]) -> str:
        terms = [f"{c} + {o}" if o > 0 else f"{c} - {-o}" if o < 0 else c for c, o in zip(coords, offsets)]
        index = terms[0]
        for d in range(1, len(terms)):
            index = f"({index}) * P{d} + {terms[d]}"
        return index

    def statement(self, name: str, args: list[str], enclosing: list[int], into: str | None = None) -> list[str]:
        st = self._statement(name)
        body = [self._wrap_call(st)] if st.stmt is None else self._assignment(st, args[1:], into)
        if self.schedule.time_dim in enclosing:
            return body
        # isl fixed the time step without a loop over it: set up the levels here
        return ["{", *["    " + ln for ln in self._level_pointers(args[0])], *["    " + ln for ln in body], "}"]

    def _statement(self, name: str) -> PolyStatement:
        return next(s for s in self.poly.statements if s.name == name)

    def store_address(self, dim: int, name: str, args: list[str], enclosing: list[int]) -> str | None:
        """Whole lines are stored straight to the field (not to a cache_write
        buffer), through level pointers set up by an enclosing time loop."""
        st = self._statement(name)
        if (dim != self.schedule.line_dim or st.stmt is None or self.schedule.time_dim not in enclosing
                or st.target in self.schedule.schedule.cached_writes):
            return None
        return f"&{level_name(st.target, 1)}[{self._index(args[1:], (0,) * self.ir.ndim)}]"

    def line_prefetches(self, name: str, args: list[str]) -> list[str]:
        """prefetch(d): for each field level the statement reads from memory,
        its leading access (the largest offset, furthest ahead in row-major
        order), d points ahead."""
        distance = self.schedule.schedule.prefetch_distance
        st = self._statement(name)
        if not distance or st.stmt is None:
            return []
        leading: dict[tuple[str, int | None], tuple[int, ...]] = {}
        for a in st.stmt.reads:
            if a.name not in self.schedule.schedule.cached_reads:
                key = (a.name, a.dt)
                leading[key] = max(leading.get(key, a.offsets), a.offsets)
        lines = []
        for (field_, dt), offsets in leading.items():
            ptr = field_name(field_) if dt is None else level_name(field_, dt)
            lines.append(f"__builtin_prefetch(&{ptr}[{self._index(args[1:], offsets)} + {distance}]);")
        return lines

    def row_pointers(self, name: str, args: list[str], iterator: str, enclosing: list[int]) -> list[str]:
        """For a statement with many reads (LARGE_READS or more) whose
        innermost loop runs along the last dimension only, inside the time
        loop (which sets up the level pointers): one pointer per
        row it reads (field level and leading offsets), set up before the
        loop. Each read is then row[i + offset]; with hundreds of full
        addresses gcc's induction-variable pass takes seconds to minutes."""
        st = self._statement(name)
        coords = args[1:]
        moving = [re.search(rf"\b{iterator}\b", c) is not None for c in coords]
        if (st.stmt is None or self.ir.ndim == 1 or len(st.stmt.reads) < LARGE_READS
                or self.schedule.time_dim not in enclosing or moving != [False] * (self.ir.ndim - 1) + [True]):
            return []
        lines = []
        for a in st.stmt.reads:
            ptr = field_name(a.name) if a.dt is None else level_name(a.name, a.dt)
            key = (ptr, a.offsets[:-1])
            if a.name in self.schedule.schedule.cached_reads or key in self._rows:
                continue
            row = self._rows[key] = f"msc_row{len(self._rows)}"
            start = self._index(coords[:-1] + ["0"], a.offsets[:-1] + (0,))
            lines.append(f"const real *restrict {row} = {ptr} + {start};")
        self._row_coord = coords[-1]
        return lines

    def end_rows(self) -> None:
        self._rows.clear()

    def _assignment(self, st: PolyStatement, coords: list[str], into: str | None) -> list[str]:
        assert st.stmt is not None

        sched = self.schedule.schedule

        def access(a: ir.FieldRead) -> str:
            if a.name in sched.cached_reads:
                return f"{_read_cache(a.name, a.dt)}[{self._tile_index(coords, a.offsets, True)}]"
            ptr = field_name(a.name) if a.dt is None else level_name(a.name, a.dt)
            row = self._rows.get((ptr, a.offsets[:-1]))
            if row is not None:
                return f"{row}[{self._index([self._row_coord], a.offsets[-1:])}]"
            return f"{ptr}[{self._index(coords, a.offsets)}]"

        rhs = c_expr(st.stmt.expr, self.ir.dtype, access, param_name)
        zero = (0,) * self.ir.ndim
        if into is not None:
            lhs = into
        elif st.target in sched.cached_writes:
            lhs = f"{_write_cache(st.target)}[{self._tile_index(coords, zero, False)}]"
        else:
            lhs = f"{level_name(st.target, 1)}[{self._index(coords, zero)}]"
        return [f"{lhs} = {rhs};"]

    # -- cache_read / cache_write: thread-local tile buffers ------------------

    def _tile(self, d: int) -> tuple[str, int]:
        """(origin expression, size) of the current tile in space dimension d."""
        dim = next(k for k, (dd, _) in self.schedule.tiles.items() if dd == d)
        size = self.schedule.tiles[dim][1]
        return f"({size} * {self._iterators[dim]})", size

    def _extent(self, d: int, halo: bool) -> int:
        return self._tile(d)[1] + (2 * self.ir.radius[d] if halo else 0)

    def _tile_index(self, coords: list[str], offsets: tuple[int, ...], halo: bool) -> str:
        index = ""
        for d, (c, o) in enumerate(zip(coords, offsets)):
            origin, _ = self._tile(d)
            shift = o + (self.ir.radius[d] if halo else 0)
            term = f"({c} - {origin} + {shift})"
            index = term if d == 0 else f"({index}) * {self._extent(d, halo)} + {term}"
        return index

    def _cache_loops(self, halo: bool, body: str) -> list[str]:
        """Loops a0, a1, ... over the tile (with halo: clipped to the array;
        without: clipped to the interior) around `body`."""
        lines, pad = [], ""
        for d in range(self.ir.ndim):
            origin, size = self._tile(d)
            r = self.ir.radius[d]
            first, last = (f"L{d}", f"H{d}") if self.box else (str(r), f"P{d} - {r}")
            lo, hi = (f"msc_imax(0, {origin} - {r})", f"msc_imin(P{d}, {origin} + {size + r})") if halo else \
                (f"msc_imax({first}, {origin})", f"msc_imin({last}, {origin} + {size})")
            lines.append(f"{pad}for (long a{d} = {lo}; a{d} < {hi}; a{d}++)")
            pad += "    "
        return lines + [pad + body]

    def _cache_index(self, halo: bool) -> str:
        return self._tile_index([f"a{d}" for d in range(self.ir.ndim)], (0,) * self.ir.ndim, halo)

    def buffers(self) -> list[str]:
        """Declarations of the thread-local cache buffers (inside the parallel region)."""
        sched = self.schedule.schedule
        if not (sched.cached_reads or sched.cached_writes):
            return []
        sizes = {d: size for (d, size) in self.schedule.tiles.values()}
        halo = 1
        plain = 1
        for d in range(self.ir.ndim):
            halo *= sizes[d] + 2 * self.ir.radius[d]
            plain *= sizes[d]
        lines = [f"real {_read_cache(n, dt)}[{halo}];" for n, dt in self._cached_levels(None)]
        return lines + [f"real {_write_cache(n)}[{plain}];" for n in sched.cached_writes]

    def _cached_levels(self, statements: set[str] | None) -> list[tuple[str, int | None]]:
        levels = set()
        for st in self.poly.statements:
            if st.stmt is not None and (statements is None or st.name in statements):
                levels |= {(a.name, a.dt) for a in st.stmt.reads if a.name in self.schedule.schedule.cached_reads}
        return sorted(levels, key=lambda v: (v[0], v[1] if v[1] is not None else -99))

    def loop_epilogue(self, dim: int, iterator: str, statements: set[str]) -> list[str]:
        lines = []
        if self.schedule.schedule.cached_writes and dim == max(self.schedule.tiles, default=-1):
            for st in self.poly.statements:
                if st.name in statements and st.target in self.schedule.schedule.cached_writes:
                    dst = f"{level_name(st.target, 1)}[{self._index([f'a{d}' for d in range(self.ir.ndim)], (0,) * self.ir.ndim)}]"
                    lines += self._cache_loops(False, f"{dst} = {_write_cache(st.target)}[{self._cache_index(False)}];")
        if dim == self.schedule.omp_for_dim and self.schedule.schedule.streaming:
            # streamed stores are weakly ordered: drain them before the barrier lets other threads read
            lines.append("msc_stream_fence();")
        return lines

    def _wrap_call(self, st: PolyStatement) -> str:
        n = ["1"] * (3 - self.ir.ndim) + [f"P{d}" for d in range(self.ir.ndim)]
        r = ["0"] * (3 - self.ir.ndim) + [str(v) for v in self.ir.radius]
        return f"msc_wrap({level_name(st.target, 1)}, {', '.join(n)}, {', '.join(r)});"

    def before_loop(self, dim: int, enclosing: list[int]) -> list[str]:
        """The schedule's pragmas: work-sharing, SIMD, unrolling (loops outside
        the work-shared one run on every thread)."""
        sched = self.schedule
        lines = [f"#pragma GCC unroll {sched.unroll[dim]}"] if dim in sched.unroll else []
        if dim == sched.omp_for_dim:
            simd = " simd" if dim == sched.simd_dim else ""
            return lines + [f"#pragma omp for{simd} schedule(static)"]
        if dim == sched.simd_dim:
            return lines + ["#pragma omp simd"]
        return lines

    def loop_prologue(self, dim: int, iterator: str, statements: set[str]) -> list[str]:
        self._iterators[dim] = iterator
        if dim == self.schedule.time_dim:
            return self._level_pointers(iterator)
        if dim != max(self.schedule.tiles, default=-1):
            return []
        lines = []
        for name, dt in self._cached_levels(statements):
            src = field_name(name) if dt is None else level_name(name, dt)
            gidx = self._index([f"a{d}" for d in range(self.ir.ndim)], (0,) * self.ir.ndim)
            lines += self._cache_loops(True, f"{_read_cache(name, dt)}[{self._cache_index(True)}] = {src}[{gidx}];")
        return lines

    def _level_pointers(self, step: str) -> list[str]:
        """Restrict pointers to every level used at time step `step`."""
        lines = []
        for f in self.ir.written_fields:
            for dt in sorted(_levels_used(self.ir, f.name), reverse=True):
                const = "" if dt == 1 else "const "
                slot = f"((t0 + {step} + {dt + f.slots}) % {f.slots})"
                lines.append(f"{const}real *restrict {level_name(f.name, dt)} = {field_name(f.name)}_buf + {slot} * V;")
        return lines


def _read_cache(name: str, dt: int | None) -> str:
    return "cr_" + (field_name(name) if dt is None else level_name(name, dt))


def _write_cache(name: str) -> str:
    return f"cw_{field_name(name)}"


def _levels_used(stencil: ir.StencilIR, name: str) -> set[int]:
    levels = {1}
    for s in stencil.statements:
        levels |= {a.dt for a in s.reads if a.name == name and a.dt is not None}
    return levels


def signature(stencil: ir.StencilIR) -> KernelSignature:
    return KernelSignature(stencil.fields, stencil.params, stencil.ndim)


def _box(poly: PolyIR) -> isl.UnionSet:
    """Instances of the statements with space dimensions inside the box L<d> <= i_d < H<d>."""
    params = ", ".join([*poly.params, *(f"{b}{d}" for d in range(poly.ir.ndim) for b in "LH")])
    bounds = " and ".join(f"L{d} <= {i} < H{d}" for d, i in enumerate(poly.dims))
    parts = [f"{poly.instance(st)} : {bounds}" for st in poly.statements if st.stmt is not None]
    return isl.UnionSet(f"[{params}] -> {{ {'; '.join(parts)} }}")


def _entry(poly: PolyIR, schedule: LoweredSchedule, box: bool) -> dict[str, object]:
    """Name, parameters, preamble and body of msc_run, or of msc_run_box."""
    stencil = poly.ir
    hooks = _Hooks(poly, schedule, box)
    sched = schedule.map.intersect_domain(_box(poly)) if box else schedule.map
    body = hooks.buffers() + AstPrinter(hooks).print(poly.ast(sched))
    if schedule.schedule.streaming:
        body.append("msc_stream_fence();")
    volume = " * ".join(f"P{d}" for d in range(stencil.ndim))
    preamble = [f"const real {param_name(p)} = (real){param_name(p)}_arg;" for p in stencil.params]
    if box:
        preamble += [f"const long L{d} = lo[{d}], H{d} = hi[{d}];" for d in range(stencil.ndim)]
    preamble.append(f"const long V = {volume};")
    preamble.append("(void)V;")
    parameters = signature(stencil).c_parameters(C_TYPES[stencil.dtype], box)
    return dict(name=BOX_ENTRY if box else "msc_run", parameters=parameters, preamble=preamble, body=body)


def generate(poly: PolyIR, schedule: LoweredSchedule, box: bool = False) -> str:
    """The complete C source of the kernel for `poly` under `schedule`
    (`box`: with the entry point msc_run_box too)."""
    stencil = poly.ir
    ctype = C_TYPES[stencil.dtype]
    entries = [_entry(poly, schedule, False)] + ([_entry(poly, schedule, True)] if box else [])
    return render(
        "openmp_kernel.c.j2",
        version=msc.__version__,
        name=stencil.name,
        ndim=stencil.ndim,
        boundary=stencil.boundary,
        dtype=stencil.dtype,
        ctype=ctype,
        schedule=f"{schedule.schedule} (loops: {describe_loops(schedule)})",
        work_shared=schedule.omp_for_dim is not None,
        lines=schedule.line_dim is not None,
        streaming=schedule.schedule.streaming,
        suffix="pd" if stencil.dtype == "float64" else "ps",
        int_helpers=C_HELPERS,
        periodic=stencil.boundary == "periodic",
        entries=entries,
    )


# -- the kernel index: (IR, schedule text, generator, compiler, host) -> built library

@functools.lru_cache(maxsize=1)
def generator_fingerprint() -> str:
    """A hash of the code generator's own sources (backends, templates, IR,
    PolyIR, schedules): a changed generator never reuses an indexed kernel."""
    from msc import poly, schedule

    here = Path(__file__).resolve().parent
    files = sorted(p for p in here.rglob("*") if p.is_file() and p.suffix in (".py", ".j2", ".h", ".c"))
    h = hashlib.sha256(msc.__version__.encode())
    for f in files + [Path(m.__file__) for m in (ir, poly, schedule) if m.__file__]:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def ir_text(stencil: ir.StencilIR) -> str:
    """The IR as stable text, without source locations (they change no generated code)."""
    statements = [(s.target, s.expr) for s in stencil.statements]
    return repr((stencil.name, stencil.ndim, stencil.fields, stencil.params, statements,
                 stencil.boundary, stencil.dtype))


def _compiler_file(cc: str) -> str:
    """The compiler as a file (path, size, modification time): like its
    version banner, it changes when the compiler does, and costs no process."""
    exe = shutil.which(cc)
    if exe is None:
        return cc
    real = os.path.realpath(exe)
    info = os.stat(real)
    return f"{real} {info.st_size} {info.st_mtime_ns}"


def kernel_key(stencil: ir.StencilIR, schedule: Schedule | None, box: bool) -> str:
    """The kernel index key: what decides the generated library, known before any isl work."""
    cc = os.environ.get("CC", DEFAULT_CC)
    parts = (generator_fingerprint(), ir_text(stencil), str(schedule or Schedule()), str(box),
             cc, _compiler_file(cc), " ".join(DEFAULT_CFLAGS), host_identity())
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _index_path(key: str) -> Path:
    return cache_dir() / "index" / key


def _indexed(key: str) -> tuple[str, Path] | None:
    """(source, library path) of the kernel indexed under `key`, if both are still
    in the cache and the library matches its digest (a damaged one is rebuilt,
    with its warning, by the ordinary build path)."""
    try:
        library = cache_dir() / _index_path(key).read_text(encoding="utf-8").strip()
        source = library.with_suffix(".c").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return (source, library) if is_intact(library) else None


class OpenMPTarget:
    """OpenMP C: JIT-compiled in process, or emitted as a standalone tree."""

    name = "openmp"

    def source(self, poly: PolyIR, schedule: object = None, box: bool = False) -> str:
        """The kernel's C source (`box`: with the entry point msc_run_box too)."""
        return generate(poly, lower(as_schedule(schedule), poly), box)

    def compile(self, poly: PolyIR, *, threads: int | None = None, schedule: object = None,
                box: bool = False) -> CompiledKernel | AutoKernel:
        """A kernel built before (same IR, schedule text, generator, compiler and
        host) is loaded through the kernel index without any isl work; only a
        new one is lowered, checked for legality, generated and built."""
        if schedule == "auto":
            from msc.tuner import AutoKernel  # only a tuned kernel needs the tuner

            return AutoKernel(poly, lambda s, n: self.compile(poly, threads=n, schedule=s), threads)
        sched = as_schedule(schedule)
        threads = threads or (sched.threads if sched else None)
        key = kernel_key(poly.ir, sched, box)
        found = _indexed(key)
        if found is not None:
            source, library = found
            try:
                return CompiledKernel(poly.ir, source, library, self.name, threads, sched)
            except OSError:
                pass  # a damaged library: build it again below
        kernel = CompiledKernel.build(poly.ir, self.source(poly, sched, box), self.name, threads, sched)
        atomic_write_text(_index_path(key), kernel.library_path.name)
        return kernel

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
        return write_tree(directory, files)
