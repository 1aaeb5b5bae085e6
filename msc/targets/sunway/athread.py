"""The Sunway athread target: one core group of a SW26010 or SW26010-Pro.

The MPE (host.c) spawns one slave function for the whole run (a time tile:
one per tile of `depth` steps); the CPEs step through it themselves, pointing
the argument struct at each step's ring slots, running every statement (and
wrapping a periodic level) with an array barrier after each. Each CPE
(slave.c) takes the spatial tiles _MYID, _MYID + 64, ... (static cyclic
assignment) and brings each tile's footprint of every level it reads into
LDM by DMA: in 2D and 3D streamed along x, a row (plane) at a time through a
window of rows, the next row's fetch overlapping this row's compute; in 1D a
tile at a time, double-buffered. It computes there and writes the tile back
by DMA.

What a CPE computes is the lowered kernel's (`lower_kernel`): each
statement's point update, as lowering built it from the schedule, rebound to
the LDM buffers of the slave function's plan (`athread_plan.py`), which
decides the tiles, the DMA and the rings. The schedule's `tile(...)` is the
LDM block (a dimension it leaves out gets the platform's default size);
every level read and every field written is staged in LDM, so `cache_read`/`cache_write` name what happens anyway. The
footprint of each slave function (all its buffers: windows of rows, double
buffers) is checked against the chip's LDM less the stack reserve before any
code is written (`ctarget.check_capacity`). `compile` builds the emitted tree
with `make EMULATE=1` and runs it under the project's athread emulator: an
emulation for correctness, not a performance figure. `athread+mpi` runs
the kernels under the project's MPI driver (one MPE per rank) through the
node interface (`node_build`, `node_kernel`: msc/targets/node.py).
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, ClassVar

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen import register_node
from msc.codegen.lower import (
    array_name,
    field_name,
    level_name,
    levels_used,
    lower_kernel,
    param_name,
    ring_buffer,
    ring_slot,
)
from msc.codegen.printers.c import ATOM, c_int, int_helpers
from msc.errors import ScheduleError
from msc.poly import PolyIR
from msc.poly.schedule import Schedule, as_schedule, lower
from msc.runtime import athread_emu
from msc.runtime.build import cache_dir, cached_build, write_tree
from msc.runtime.kernel import BOX_ENTRY, ENTRY, check_threads
from msc.targets import ctarget
from msc.targets.node import MakeRule, NodeBuild, NodeKernel
from msc.targets.sunway import athread_model, chips
from msc.targets.sunway.athread_plan import (
    CPES,
    SCHEDULE_OPTIONS,
    SlaveKernel,
    TileKernel,
    TimeTileKernel,
    _itemsize,
    athread_schedule,
    slave_kernels,
)
from msc.targets.sunway.chips import DEFAULT_CHIP, NAME, Chip, as_chip
from msc.targets.sunway.simd import SimdPrinter, simd_values
from msc.targets.templates_env import render
from msc.tune.tuner import AutoKernel, Estimate
from msc.version import __version__

# The emulator's files, copied into an emitted tree for `make EMULATE=1`.
EMULATOR_FILES = ("athread_emu.h", "athread.h", "slave.h", "crts.h", "simd.h", "athread_emu.c")


class SunwayPlatform(ctarget.Platform):
    """A Sunway core group: 64 CPEs with their LDM (Space.LOCAL). No chip is at
    hand, so schedule="auto" ranks the tiles that fit by the cost model
    (athread_model.py) and runs nothing to choose."""

    chip: ClassVar[Chip]
    tunes = True
    measures = False

    def tuning_space(self, poly: PolyIR, shape: tuple[int, ...], steps: int) -> list[Schedule]:
        return athread_model.candidates(poly.ir, shape, self.chip)

    def cost(self, poly: PolyIR, shape: tuple[int, ...], steps: int, schedule: Schedule) -> Estimate:
        return athread_model.estimate(poly.ir, shape, schedule, self.chip)


class SW26010(SunwayPlatform):
    """A SW26010 core group: 64 CPEs, each with 64 KB of LDM."""

    name = "Sunway SW26010 (athread)"
    chip = chips.SW26010
    capacity: ClassVar[dict[k.Space, int]] = {k.Space.LOCAL: chip.ldm_capacity}


class SW26010Pro(SunwayPlatform):
    """A SW26010-Pro core group: 64 CPEs, each with 256 KB of LDM."""

    name = "Sunway SW26010-Pro (athread)"
    chip = chips.SW26010_PRO
    capacity: ClassVar[dict[k.Space, int]] = {k.Space.LOCAL: chip.ldm_capacity}


PLATFORMS: dict[str, SunwayPlatform] = {platform.chip.name: platform for platform in (SW26010(), SW26010Pro())}


# -- the target -----------------------------------------------------------------


class AthreadTarget:
    """Sunway athread C: emitted as a host/slave tree, or compiled and run under the emulator."""

    name = NAME
    compile_options = ("chip",)
    emit_options = ("chip",)
    schedule_options = SCHEDULE_OPTIONS

    def generate(self, poly: PolyIR, schedule: object = None, chip: Chip | str = DEFAULT_CHIP, tag: str = "",
                 box: bool = False) -> dict[str, str]:
        """Check the schedule and the LDM footprint of every slave function, then write the sources
        (`tag`: one kernel of a program of several, see `node_kernel`; `box`: with msc_run_box too)."""
        stencil = poly.ir
        platform = PLATFORMS[as_chip(chip).name]
        chip = platform.chip
        asked = as_schedule(schedule)
        if box and asked is not None and asked.time_depth:  # before the tiles: a box's stencil is one phase's
            raise ScheduleError(f"target '{NAME}': a time tile computes whole blocks, not a box of one "
                                f"(time_tile({asked.time_depth}, ...) needs a halo plan deeper than one step)")
        sched = athread_schedule(asked, stencil, chip)
        # lowering checks the fields named and the dependences (a time tile: without its parallel loop, since
        # its tiles overlap and run side by side, not in the skewed wavefronts lowering builds); the slave
        # functions compute the statements of the lowered kernel, on the tiles and in the LDM buffers of
        # their plan
        lowered = lower(replace(sched, parallel_loop=None) if sched.time_depth else sched, poly)
        assigns = statement_assigns(lower_kernel(poly, lowered, ENTRY), stencil)
        kernels = slave_kernels(stencil, tuple(size for _, size in sched.tiles), sched.time_depth)
        for tk in kernels:
            ctarget.check_capacity(k.Kernel(tk.function, k.Block(tuple(tk.buffers()))), poly, lowered, platform, NAME)
        return self._files(poly, sched, assigns, kernels, chip, tag, box)

    def _files(self, poly: PolyIR, sched: Schedule, assigns: dict[str, k.Assign], kernels: list[SlaveKernel],
               chip: Chip, tag: str, box: bool) -> dict[str, str]:
        stencil = poly.ir
        itemsize = _itemsize(stencil)
        unroll = {stencil.dims.index(loop): f for loop, f in sched.unrolls}
        printer = SimdPrinter(stencil.dtype)
        levels = _all_levels(stencil)
        common = dict(ctarget.stencil_values(stencil), chip=chip.name, slave_header=chip.slave_header,
                      simd=simd_values(chip.name, stencil.dtype),
                      schedule=str(sched))
        params = [param_name(p) for p in stencil.params]
        suffix = f"_{tag}" if tag else ""
        names = {"host.c": f"host{suffix}.c", "slave.c": f"slave{suffix}.c", "msc_args.h": f"msc_args{suffix}.h"}
        common["args_header"] = names["msc_args.h"]
        time_tile = None
        if isinstance(kernels[0], TimeTileKernel):
            time_tile = _time_tile(kernels[0], assigns, printer, unroll, itemsize, suffix)
            slaves = []
            members = [dict(const=True, name=f"{field_name(f.name)}{'_src' if f.written else ''}")
                       for f, _ in kernels[0].arrays()]
            members += [dict(const=False, name=f"{field_name(f.name)}_dst") for f in stencil.written_fields]
        else:
            slaves = [_slave(tk, assigns[tk.statement.target], stencil, printer, unroll, itemsize, suffix)
                      for tk in kernels if isinstance(tk, TileKernel)]
            members = [dict(const=lv["const"], name=lv["member"]) for lv in levels]
            members += [dict(const=False, name=f"{field_name(f.name)}_ring") for f in stencil.written_fields]
        args = render("athread_args.h.j2", members=members, params=params, guard=f"MSC_ARGS{suffix.upper()}_H",
                      cpes=CPES, time_tile=time_tile is not None, **common)
        # one spawn per run: the CPEs step through it, periodic levels wrapped on the CPEs too
        run = dict(function=f"msc_slave_run{suffix}", written=[field_name(f.name) for f in stencil.written_fields],
                   steps=_run_steps(poly, suffix)) if time_tile is None else None
        slave = render("athread_slave.c.j2", kernels=slaves, time_tile=time_tile, radius=list(stencil.radius),
                       int_helpers=int_helpers(), cpes=CPES, params=params, run=run, levels=levels, **common)
        signature = ctarget.signature(stencil)
        entries = [dict(name=f"{ENTRY}{suffix}", parameters=signature.c_parameters(), box=False)]
        if box:
            entries.append(dict(name=f"{BOX_ENTRY}{suffix}", parameters=signature.c_parameters(box=True), box=True))
        host = render("athread_host.c.j2", run=run, fields=_host_fields(stencil), cpes=CPES,
                      entries=entries, levels=levels, params=params, radius=list(stencil.radius),
                      time_tile=time_tile, **common)
        return {names["host.c"]: host, names["slave.c"]: slave, names["msc_args.h"]: args}

    def _tree(self, poly: PolyIR, schedule: object, chip: Chip) -> dict[str, str]:
        """A standalone program: the kernel, main.c, npy.h, a Makefile and the emulator's sources."""
        stencil = poly.ir
        files = self.generate(poly, schedule, chip)
        files["main.c"] = render("main.c.j2", openmp=False, **ctarget.program_values(stencil))
        files["npy.h"] = render("npy.h")
        files["Makefile"] = render("athread_Makefile.j2", emulator_makefile=athread_emu.MAKEFILE.read_text(),
                                   version=__version__, name=stencil.name, chip=chip.name)
        files.update({f: (athread_emu.EMULATOR_DIR / f).read_text() for f in EMULATOR_FILES})
        return files

    # -- the node interface (msc/targets/node.py): athread+mpi, one MPE per rank

    def node_build(self, chip: Chip | str = DEFAULT_CHIP) -> NodeBuild:
        """The MPI program's Make variables: the Sunway toolchain by default (host code through
        $(MPICC) -mhost, slave code through swgcc -mslave, hybrid link), gcc and the emulator
        (copied into the tree) with EMULATE=1."""
        chip = as_chip(chip)
        emulate = "$(filter 1,$(EMULATE))"
        # -Wno-psabi as in the emulator's own Makefile: simd.h's vectors passed by value on a host without
        # AVX-512 make gcc note an ABI that only this program's own functions share
        emu_flags = (f"-pthread -I. -DATHREAD_EMU_LDM_BYTES={chip.ldm_bytes} "
                     f"-DATHREAD_EMU_CHIP='\"{chip.name}\"' {athread_emu.STRICT_FLAGS} -Wno-psabi")
        sunway_slave = (chip.slave_cc, f"{chip.slave_flag} -msimd -O2 -std=gnu99")
        variables = (
            ("EMULATE", "0"),
            ("ATHREAD_EMU_FLAGS", emu_flags),
            ("HOST_FLAGS", f"$(if {emulate},$(ATHREAD_EMU_FLAGS),{chip.host_flag})"),
            ("SLAVE_CC", f"$(if {emulate},gcc,{sunway_slave[0]})"),
            ("SLAVE_FLAGS", f"$(if {emulate},-O2 -std=gnu99 $(ATHREAD_EMU_FLAGS),{sunway_slave[1]})"),
            ("LINK_FLAGS", f"$(if {emulate},-pthread -rdynamic,{chip.link_flag})"),
            ("ATHREAD_EMU_LINK", f"$(if {emulate},$(ATHREAD_EMU_FLAGS) athread_emu.c -ldl,)"),
        )
        return NodeBuild(cflags="-O2 -std=gnu99", threads=False, variables=variables,
                         ldlibs=f"-lm $(if {emulate},,-lm_slave -lrt)",
                         link="$(MPICC) $(CFLAGS) $(LINK_FLAGS) -o $@ $(OBJECTS) $(ATHREAD_EMU_LINK) $(LDLIBS)",
                         files={f: (athread_emu.EMULATOR_DIR / f).read_text() for f in EMULATOR_FILES})

    def node_kernel(self, poly: PolyIR, schedule: Schedule | None, tag: str, box: bool,
                    chip: Chip | str = DEFAULT_CHIP) -> NodeKernel:
        """host_<tag>.c (entry points msc_run_<tag>, msc_run_box_<tag>), slave_<tag>.c, msc_args_<tag>.h."""
        files = self.generate(poly, schedule, chip, tag, box)
        header = f"msc_args_{tag}.h"
        rules = (MakeRule(f"host_{tag}.o", (f"host_{tag}.c", header),
                          (f"$(MPICC) $(CFLAGS) $(HOST_FLAGS) -c host_{tag}.c -o $@",)),
                 MakeRule(f"slave_{tag}.o", (f"slave_{tag}.c", header),
                          (f"$(SLAVE_CC) $(SLAVE_FLAGS) -c slave_{tag}.c -o $@",)))
        return NodeKernel(files, rules, f"{ENTRY}_{tag}", f"{BOX_ENTRY}_{tag}" if box else None)

    def emit(self, poly: PolyIR, directory: Path, *, schedule: object = None, chip: Chip | str = DEFAULT_CHIP) -> Path:
        """host.c, slave.c, msc_args.h, main.c, npy.h, a Makefile and the emulator's sources in `directory`."""
        return write_tree(directory, self._tree(poly, schedule, as_chip(chip)))

    def compile(self, poly: PolyIR, *, threads: int | None = None, schedule: object = None,
                chip: Chip | str = DEFAULT_CHIP) -> athread_emu.AthreadKernel | AutoKernel:
        """The emitted tree, built with `make EMULATE=1` through the one
        compile-and-cache step (`cached_build`: lock, digest; keyed by the kernel
        key, which includes the chip; the tree is kept beside the program for
        reading), as a kernel whose `run` executes it under the athread emulator
        in a child process. An emulation for
        correctness: its timings and counters are no Sunway performance figure."""
        chip = as_chip(chip)
        check_threads(threads)  # the CPEs run the kernel; a count is still checked as on every target
        if schedule == "auto":  # chosen by the platform's cost model when the kernel runs and the size is known
            return AutoKernel(poly, lambda s, _threads: self.compile(poly, schedule=s, chip=chip), threads,
                              platform=PLATFORMS[chip.name])
        sched = as_schedule(schedule)
        key = ctarget.kernel_key(f"{NAME}:{chip.name}:{_emulator_digest()}", poly.ir, sched, False)
        tree = cache_dir() / NAME / key

        def build_into(out: Path) -> None:  # under cached_build's lock
            shutil.rmtree(tree, ignore_errors=True)  # a build killed midway left it
            write_tree(tree, self._tree(poly, sched, chip))
            athread_emu.build_tree(tree, chip.name)
            os.replace(tree / poly.ir.name, out)

        program = cached_build(cache_dir() / NAME / f"{poly.ir.name}-{key}", build_into)
        return athread_emu.AthreadKernel(poly.ir, program, chip.name, sched, tree)


@functools.lru_cache(maxsize=1)
def _emulator_digest() -> str:
    """A hash of the emulator's sources (built into every compiled athread kernel, outside codegen/)."""
    h = hashlib.sha256()
    for name in (*EMULATOR_FILES, "Makefile"):
        h.update(name.encode() + b"\0" + (athread_emu.EMULATOR_DIR / name).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _all_levels(stencil: ir.StencilIR) -> list[dict[str, Any]]:
    """Every array the slave functions read or write, as members of the argument struct."""
    out = []
    for f in stencil.fields:
        if not f.written:
            out.append(dict(member=field_name(f.name), const=True, field=field_name(f.name), dt=None, slots=1))
            continue
        for dt in sorted(levels_used(stencil, f.name), reverse=True):
            out.append(dict(member=level_name(f.name, dt), const=dt != 1, field=field_name(f.name), dt=dt,
                            slot=c_int(ring_slot(ix.Var("t"), dt, f.slots), ATOM)))
    return out


def _host_fields(stencil: ir.StencilIR) -> list[dict[str, Any]]:
    return [dict(buffer=ring_buffer(f.name) if f.written else field_name(f.name), slots=f.slots, written=f.written)
            for f in stencil.fields]


def _run_steps(poly: PolyIR, suffix: str) -> list[dict[str, Any]]:
    """What the CPEs do each step, in order: a statement's slave function, or wrap a periodic level (its name)."""
    out: list[dict[str, Any]] = []
    n = 0
    for st in poly.statements:
        if st.stmt is not None:
            out.append(dict(spawn=f"msc_slave{n}{suffix}", wrap=""))
            n += 1
        else:
            out.append(dict(spawn="", wrap=level_name(st.target, 1)))
    return out


def _slave(tk: TileKernel, assign: k.Assign, stencil: ir.StencilIR, printer: SimdPrinter, unroll: dict[int, int],
           itemsize: int, suffix: str) -> dict[str, Any]:
    """What the slave template needs for one statement: buffers (offsets into
    one LDM block, in elements; `size` per slot: a streamed tile's row, else the
    whole footprint), the tile's compute as C lines."""
    ndim, streamed = stencil.ndim, tk.streamed
    per_slot = (lambda extent: math.prod(extent[1:])) if streamed else math.prod
    offset = 0
    buffers = []
    for lv, buffer in zip(tk.levels, tk.buffers()):
        size = per_slot(lv.extent(tk.tile))
        buffers.append(dict(name=buffer.name, member=lv.array, offset=offset, size=size, lo=list(lv.lo),
                            span=[h - lo for h, lo in zip(lv.hi, lv.lo)]))
        offset += int(buffer.shape[0]) * size
    out_size = per_slot(tk.tile)
    out = dict(offset=offset, size=out_size, member=level_name(tk.statement.target, 1))
    total = offset + 2 * out_size
    values = dict(function=tk.function + suffix, target=tk.statement.target, line=tk.statement.loc,
                  tile=list(tk.tile), buffers=buffers, out=out, bytes=total * itemsize,
                  streamed=streamed)
    if not streamed:
        return dict(values, body=printer.lines(compute_tile(tk, assign, ndim, unroll), 3))
    block, rows = compute_row(tk, assign, ndim, unroll)
    by_array = {b["member"]: b for b in buffers}
    pointers = k.Block(tuple(
        k.Decl(name, "const pointer", ix.Var("ldm") + by_array[array]["offset"]
               + (ix.Var("i0") + step) % tk.ring * by_array[array]["size"]) for name, (array, step) in rows.items()))
    return dict(values, reach=tk.reach, ring=tk.ring, pointers=printer.lines(pointers), body=printer.lines(block, 4))


def _time_tile(tt: TimeTileKernel, assigns: dict[str, k.Assign], printer: SimdPrinter, unroll: dict[int, int],
               itemsize: int, suffix: str) -> dict[str, Any]:
    """What the templates need for a time tile: the LDM arrays (offsets in
    elements of one set of box buffers, two of which alternate), each
    statement's compute as C lines (a streamed one: `_streamed_time_tile`)."""
    stencil = tt.stencil
    arrays, offset = [], 0
    for f, n in tt.arrays():
        arrays.append(dict(name=f"l_{field_name(f.name)}", field=field_name(f.name), count=n, offset=offset,
                           written=f.written, window=f.window if f.written else 0, slots=f.slots))
        offset += n * math.prod(tt.extent())
    values = dict(function=tt.function + suffix, tile=list(tt.tile), depth=tt.depth, arrays=arrays,
                  nst=len(stencil.statements),
                  written=[dict(field=field_name(f.name), slots=f.slots) for f in stencil.written_fields])
    if tt.streamed:
        return _streamed_time_tile(tt, assigns, values, printer, unroll, itemsize)
    statements = []
    for n, st in enumerate(stencil.statements):
        pointers: list[k.Node] = []
        for name, dt in sorted({(a.name, a.dt) for a in st.reads} | {(st.target, 1)},
                               key=lambda v: (v[0], -99 if v[1] is None else v[1])):
            f = next(f for f in stencil.fields if f.name == name)
            box = ix.Var(f"l_{field_name(name)}")
            if dt is None:
                pointers.append(k.Decl(f"v_{field_name(name)}", "const pointer", box))
            else:
                pointers.append(k.Decl(f"v_{level_name(name, dt)}", "pointer" if dt == 1 else "const pointer",
                                       box + (ix.Var("step") + (dt + f.slots)) % f.slots * ix.Var("W")))
        statements.append(dict(index=n, target=st.target, line=st.loc, pointers=printer.lines(k.Block(tuple(pointers))),
                               body=printer.lines(compute_time_tile(assigns[st.target], stencil.ndim, unroll), 4)))
    return dict(values, statements=statements, set=offset, out_offset=2 * offset, bytes=tt.ldm_bytes(itemsize),
                streamed=False)


def _streamed_time_tile(tt: TimeTileKernel, assigns: dict[str, k.Assign], values: dict[str, Any],
                        printer: SimdPrinter, unroll: dict[int, int], itemsize: int) -> dict[str, Any]:
    """What the template needs for a time tile streamed along x (TimeTileKernel.rings): per field its
    rings' offsets and lengths, per statement the row pointers of its reads (ring j + dt + window - 1 of a
    written field at row x + dx), and the row's compute."""
    stencil = tt.stencil
    rings = tt.rings()
    fields = []
    for f, _ in tt.arrays():
        mine = [r for r in rings if r.field == f.name]
        fields.append(dict(field=field_name(f.name), written=f.written, window=f.window if f.written else 0,
                           slots=f.slots, offsets=[r.offset for r in mine], lengths=[r.length for r in mine]))
    by_field = {f["field"]: f for f in fields}

    x, ldm = ix.Var("x"), ix.Var("ldm")

    def ring(name: str, dt: int | None, dx: int = 0) -> ix.Expr:
        """Row x + dx of a level's ring of rows in LDM (an input's one ring)."""
        f = by_field[field_name(name)]
        if not f["written"]:
            return ix.Call("msc_ring", (ldm, ix.Lit(f["offsets"][0]), ix.Lit(f["lengths"][0]), x + dx))
        kk = ix.Var("j") + (dt + f["window"] - 1)
        return ix.Call("msc_ring", (ldm, k.Load(k.Ref(f"msc_off_{f['field']}", kk, k.Space.LOCAL)),
                                    k.Load(k.Ref(f"msc_len_{f['field']}", kk, k.Space.LOCAL)), x + dx))

    statements = []
    for n, st in enumerate(stencil.statements):
        block, rows = compute_time_tile_row(assigns[st.target], stencil.ndim, unroll)
        pointers = k.Block(tuple(k.Decl(name, "const pointer", ring(a_name, dt, dx))
                                 for name, (a_name, dt, dx) in rows.items()))
        target = by_field[field_name(st.target)]
        newest = target["window"] - 1
        boundary = (ix.Call("msc_ring", (ldm, ix.Lit(target["offsets"][newest]), ix.Lit(target["lengths"][newest]), x))
                    if st.target in tt.boundary_from_newest() else ring(st.target, 0))
        statements.append(dict(index=n, target=st.target, line=st.loc, field=target["field"],
                               window=target["window"], slots=target["slots"], pointers=printer.lines(pointers),
                               out=c_int(ring(st.target, 1)), boundary=c_int(boundary), body=printer.lines(block, 7)))
    return dict(values, streamed=True, fields=fields, statements=statements, row=tt.row,
                out_row=math.prod(tt.tile[1:]), out_offset=rings[-1].offset + rings[-1].length * tt.row,
                bytes=tt.ldm_bytes(itemsize))


def _box_index(coords: list[ix.Var], offsets: tuple[int, ...], first: int) -> ix.Expr:
    """Row-major index of point coords + offsets (dimensions `first` on) in a packed box whose dimension d
    holds b_d <= i_d < b_d + w_d."""
    dims = range(first, len(coords))
    return ix.linear([coords[d] + offsets[d] - ix.Var(f"b{d}") for d in dims], [ix.Var(f"w{d}") for d in dims])


def _loop_nest(node: k.Assign, coords: list[ix.Var], first: int, bounds: Callable[[int], tuple[ix.Expr, ix.Expr]],
               unroll: dict[int, int]) -> k.Block:
    """`node` inside loops over dimensions `first` on (coords[d] over [bounds(d)[0], bounds(d)[1])), the
    innermost marked for vectors."""
    ndim = len(coords)
    nest: k.Node = node
    for d in reversed(range(first, ndim)):
        body = nest if isinstance(nest, k.Block) else k.Block((nest,))
        lo, hi = bounds(d)
        nest = k.Block((k.Loop(coords[d].name, lo, coords[d].lt(hi), body, dim=d,
                               unroll=unroll.get(d, 0), vector=d == ndim - 1),))
    assert isinstance(nest, k.Block)
    return nest


def _coords(ndim: int) -> list[ix.Var]:
    return [ix.Var(f"i{d}") for d in range(ndim)]


def _region(d: int) -> tuple[ix.Expr, ix.Expr]:
    """The points lo_d <= i_d < hi_d a time tile computes."""
    return ix.Var(f"lo{d}"), ix.Var(f"hi{d}")


def _packed(d: int) -> tuple[ix.Expr, ix.Expr]:
    """Every point 0 <= i_d < h_d of a packed output tile."""
    return ix.Lit(0), ix.Var(f"h{d}")


def statement_assigns(kernel: k.Kernel, stencil: ir.StencilIR) -> dict[str, k.Assign]:
    """Each statement's point update as the lowered kernel computes it, by the field it writes (each
    statement writes its own)."""
    found: dict[str, k.Assign] = {}
    for node in k.walk(kernel.body):
        if isinstance(node, k.Assign):
            found.setdefault(node.field, node)
    missing = [st.target for st in stencil.statements if st.target not in found]
    assert not missing, f"the lowered kernel computes no statement writing {missing}"
    return found


def _reads(assign: k.Assign) -> list[ir.FieldRead]:
    """The statement's field reads, each once, in order."""
    return list(dict.fromkeys(read for read, _ in assign.loads))


def _rebound(assign: k.Assign, lhs: k.Ref, loads: list[tuple[ir.FieldRead, k.Ref]],
             coords: tuple[ix.Expr, ...]) -> k.Assign:
    """The lowered statement, computed into `lhs` from the LDM elements `loads` gives its reads."""
    return k.Assign(lhs, assign.rhs, tuple(loads), assign.field, coords)


def compute_time_tile_row(assign: k.Assign, ndim: int, unroll: dict[int, int]) -> tuple[k.Block, dict[str, tuple[
        str, int | None, int]]]:
    """The kernel IR of one row (3D: plane) x of a statement in a streamed time tile: points lo_d <= i_d < hi_d
    (d >= 1) of the output row r_out, each read from its level's row x + dx (pointer r_<array>_<dx>) at
    i_d + offset_d; rows hold the box's points b_d <= i_d < b_d + w_d, packed. Also each row pointer's
    (field, dt, dx)."""
    coords = _coords(ndim)
    loads, rows = [], {}
    for a in _reads(assign):
        dx = a.offsets[0]
        name = f"r_{array_name(a.name, a.dt)}_{'m' if dx < 0 else 'p'}{abs(dx)}"
        rows[name] = (a.name, a.dt, dx)
        loads.append((a, k.Ref(name, _box_index(coords, a.offsets, 1), k.Space.LOCAL)))
    node = _rebound(assign, k.Ref("r_out", _box_index(coords, (0,) * ndim, 1), k.Space.LOCAL), loads,
                    (ix.Var("x"), *coords[1:]))
    return _loop_nest(node, coords, 1, _region, unroll), dict(sorted(rows.items()))


def compute_time_tile(assign: k.Assign, ndim: int, unroll: dict[int, int]) -> k.Block:
    """The kernel IR of one statement on the region lo_d <= i_d < hi_d of a time tile's LDM block,
    whose arrays hold the box b_d <= i_d < b_d + w_d (global coordinates i)."""
    coords = _coords(ndim)
    loads = [(a, k.Ref(f"v_{array_name(a.name, a.dt)}", _box_index(coords, a.offsets, 0), k.Space.LOCAL))
             for a in _reads(assign)]
    lhs = k.Ref(f"v_{level_name(assign.field, 1)}", _box_index(coords, (0,) * ndim, 0), k.Space.LOCAL)
    return _loop_nest(_rebound(assign, lhs, loads, tuple(coords)), coords, 0, _region, unroll)


def _tile_assign(tk: TileKernel, assign: k.Assign, coords: list[ix.Var],
                 first: int) -> tuple[k.Assign, dict[str, tuple[str, int]]]:
    """A tile's statement at point i over dimensions `first` on, all in LDM: level L read at i + offset -
    L.lo in its packed buffer l_L (row extents e_L_d) or, from dimension 1 on, through the row pointer
    r_L_q of the stream's step q = offset_0 - L.lo_0; the packed output l_out (extents h_d). Also each row
    pointer's (array, q)."""
    by_array = {lv.array: lv for lv in tk.levels}
    dims = range(first, len(coords))
    loads, rows = [], {}
    for a in _reads(assign):
        lv = by_array[array_name(a.name, a.dt)]
        index = ix.linear([coords[d] + (a.offsets[d] - lv.lo[d]) for d in dims], [ix.Var(f"e_{lv.array}_{d}") for d in dims])
        name = f"l_{lv.array}"
        if first:
            step = a.offsets[0] - lv.lo[0]
            name = f"r_{lv.array}_{step}"
            rows[name] = (lv.array, step)
        loads.append((a, k.Ref(name, index, k.Space.LOCAL)))
    out = k.Ref("l_out", ix.linear([coords[d] for d in dims], [ix.Var(f"h{d}") for d in dims]), k.Space.LOCAL)
    return _rebound(assign, out, loads, tuple(coords)), rows


def compute_row(tk: TileKernel, assign: k.Assign, ndim: int,
                unroll: dict[int, int]) -> tuple[k.Block, dict[str, tuple[str, int]]]:
    """The kernel IR of output row i0 of a streamed tile, all in LDM: point i (0 <= i_d < h_d, d >= 1) reads
    level L at offset o from its row pointer r_L_q (q = o_0 - L.lo_0: the step of the stream that brought the
    row), at i + o - L.lo in the row's packed box (extents e_L_d), and writes the packed output row (extents h_d).
    Also each row pointer's (array, q)."""
    coords = _coords(ndim)
    node, rows = _tile_assign(tk, assign, coords, 1)
    return _loop_nest(node, coords, 1, _packed, unroll), dict(sorted(rows.items()))


def compute_tile(tk: TileKernel, assign: k.Assign, ndim: int, unroll: dict[int, int]) -> k.Block:
    """The kernel IR of one tile's compute, all in LDM: point i (0 <= i_d < h_d)
    reads level L at i + offset - L.lo in its packed buffer (row extents e_L_d)
    and writes the packed output tile (extents h_d)."""
    coords = _coords(ndim)
    node, _ = _tile_assign(tk, assign, coords, 0)
    return _loop_nest(node, coords, 0, _packed, unroll)


register_node(NAME, AthreadTarget)
