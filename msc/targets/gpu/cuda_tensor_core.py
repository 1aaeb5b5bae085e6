"""CUDA wmma kernels for the tensor-core plans of msc/targets/gpu/tensor_core.py.

`generate(stencil_ir, statement, precision, dtype, name)` builds, for one
statement, the device kernel as kernel IR (`device_function`: the matrix
unit's fragments, loads, products and stores are kernel IR nodes), printed
by the CUDA printer, and its host helpers (`<name>_bands`, `<name>_launch`,
`<name>_step`) from templates/cuda_tensor_core*.cu.j2; `source_file(kernels)`
makes a complete .cu that includes msc_cuda.h. Per block: `warps` warps
stacked along the rows, each computing `tiles` m x n output tiles side by
side (TILES, one accumulator each, where shared memory and wmma's alignment
allow) of the same column range in one plane; in 3D a block computes PLANES
planes in order, each source's staging a ring of the planes it reads (all of
them staged at the block's first plane, then only the newest per plane).

* Staging: each source's tile plus `plan.halo(source)` goes to dynamic
  shared memory in the operand type (tf32 rounded with `__float_to_tf32`,
  fp16 with `__float2half`), zeros past the array (Dirichlet) or wrapped
  (periodic); columns are laid out so `plan.column_alignment(source)` lands
  on 256 bits and the row pitch is a multiple of 32 bytes, as wmma loads
  require, padded (columns never loaded) to the pitch whose fragment loads
  meet the fewest bank conflicts.
* Products: per line and chunk, in the plan's order, one `load_matrix_sync`
  of the weight block, then per tile one of the input operand at
  `line.input_origin(chunk, k)` (n columns further per tile) and `mma_sync`
  into that tile's accumulator: independent chains, each weight block
  loaded once for all tiles. The weight blocks (`line.band`) are filled by
  `<name>_bands` from the scalar parameters on the host.
* Output: `store_matrix_sync` to shared memory (rows padded against bank
  conflicts, `tile_pitch`), the plan's constant added, the interior points
  written. Fragments are touched only through
  load/store/fill, so nothing depends on the fragment element order.

`<name>_launch` takes device pointers (a time loop calls it per step);
`<name>_step` is a host entry for one step on host arrays, used by `step()`
to run a plan, emulated or on a device, against `replay` and the reference.
"""

from __future__ import annotations

import collections
import ctypes
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from msc import ir
from msc.codegen import index as ix
from msc.codegen import kernel_ir as kir
from msc.codegen.lower import array_name, extent, level_name, param_name
from msc.codegen.printers.c import c_int
from msc.codegen.printers.cexpr import c_expr
from msc.errors import ScheduleError
from msc.poly import PolyIR
from msc.poly.schedule import LoweredSchedule, Schedule
from msc.runtime import build, cuda_emu
from msc.targets.gpu.cuda_pass import CustomLaunch, DeviceFunction
from msc.targets.gpu.cuda_printer import INDEX_TYPE, CudaPrinter
from msc.targets.gpu.cuda_stream import conjunction
from msc.targets.gpu.tensor_core import MmaShape, Source, TensorCorePlan, tensor_core_plan
from msc.targets.templates_env import render

ALIGN_BYTES = 32  # wmma: 256-bit aligned pointers
BANK_BYTES = 128  # shared memory serves 32 banks of 4 bytes per wavefront
DEFAULT_SHARED = 48 * 1024  # dynamic shared memory without cudaFuncSetAttribute
MAX_SHARED = 163 * 1024  # the opt-in limit of sm_80 (sm_90: 227 KiB): the kernels run on both
MAX_WARPS = 4
TILES = 4  # output tiles per warp along the columns: independent MMA chains, each weight block loaded once for all
WEIGHT_REGISTERS = 32  # at most these 32-bit registers per lane hold the weight blocks for a whole block's work
PLANES = 16  # 3D: output planes a block computes in order, staging each input plane once into a ring of planes

_OPERAND = {"double": ("double", 8), "tf32": ("float", 4), "half": ("__half", 2)}  # storage type, bytes
_ACC_BYTES = {"double": 8, "float": 4}
_C_TYPE = {"float64": "double", "float32": "float"}
_ELEMENT = {"double": "float64", "float": "float32", "tf32": "float32", "half": "float16"}  # staged in shared memory
_FRAGMENT = {"double": "float64", "tf32": "tf32", "half": "float16"}  # an operand fragment's element


@dataclass(frozen=True)
class Staging:
    """Where one source's tile and halo sit in shared memory (in operand elements)."""

    source: Source
    planes: int  # 1 in 2D
    plane_below: int
    rows: int
    row_below: int
    pitch: int  # elements per row, a multiple of 32 bytes, padded so that fragment loads meet no bank conflicts
    column_offset: int  # staging column of the tile's first column
    offset: int  # first element of this source's region
    columns: int  # staged columns of a row (the fragments read no others; the rest of the pitch is padding)
    copies: int = 1  # 2: the level a fused time tile steps, in two copies it steps between

    @property
    def size(self) -> int:
        """Elements of one copy."""
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
    tiles: int  # m x n output tiles per warp, side by side along the columns (one accumulator each)
    staging: tuple[Staging, ...]
    shared_bytes: int
    band_elements: int
    code: str
    fused: bool = False  # a launch takes up to `steps` steps (a fused time tile, cuda_tensor_core_tile.py)

    @property
    def holds_weights(self) -> bool:
        """Whether each warp holds every weight block in a fragment of its own (`weight_fragments`)."""
        return weight_registers(self) <= WEIGHT_REGISTERS

    @property
    def sources(self) -> tuple[Source, ...]:
        return tuple(s.source for s in self.staging)

    @property
    def ring(self) -> tuple[int, ...]:
        """A level's ring per dimension: the radius, or none where reads wrap."""
        return tuple(0 if self.wrap else r for r in self.radius)


def generate(stencil_ir: ir.StencilIR, statement: int, precision: str, dtype: str, name: str, *,
             wrap: bool = False) -> TensorCoreKernel:
    """The wmma kernel and host helpers of statement `statement`; ScheduleError if it has no plan
    or its staging does not fit the shared memory of one block."""
    plan = tensor_core_plan(stencil_ir, statement, precision)
    if dtype not in _C_TYPE:
        raise ScheduleError(f"tensor_cores: dtype must be float64 or float32, got {dtype!r}")
    shape = plan.shape
    widest = tiles_per_warp(shape)
    for tiles, warps in ((t, w) for t in dict.fromkeys((widest, 1)) for w in range(MAX_WARPS, 0, -1)):
        staging = staging_of(plan, (0, 0), (warps * shape.m, tiles * shape.n))  # wide tiles before more warps
        shared = shared_bytes(shape, staging, warps, tiles)
        if shared <= MAX_SHARED:
            break
    else:
        raise ScheduleError(f"tensor_cores: statement writing '{plan.target}': staging its sources for one "
                            f"{shape.m} x {shape.n} tile needs {shared} bytes of shared memory, over the "
                            f"{MAX_SHARED} bytes of a block")
    kernel = TensorCoreKernel(name, plan, dtype, stencil_ir.params, stencil_ir.radius, wrap, warps, tiles,
                              tuple(staging), shared, band_elements(plan), "")
    return replace(kernel, code=printed(kernel, device_function(kernel)))


def staging_of(plan: TensorCorePlan, before: tuple[int, int], end: tuple[int, int],
               stepped: Source | None = None, stored: bool = False) -> list[Staging]:
    """Where each source of the plan sits in shared memory, for products whose output fragments
    start from `before` (rows, columns) before a block's first output point to `end` after it
    (fragments included); `stepped` gets two copies, and its pitch also suits accumulators
    `stored` into it."""
    shape = plan.shape
    op_bytes = _OPERAND[shape.operand][1]
    align = ALIGN_BYTES // op_bytes  # == shape.k for every shape
    out, offset = [], 0
    for source in dict.fromkeys(line.source for line in plan.lines):
        halo = plan.halo(source)
        (rl, rh), (cl, ch) = halo[-2], halo[-1]
        rl, cl = rl + before[0], cl + before[1]
        planes, below = (halo[0][0] + halo[0][1] + 1, halo[0][0]) if plan.ndim == 3 else (1, 0)
        column_offset = cl + (-plan.column_alignment(source) - cl) % align
        # operand fragments read from this staging: A (m rows of k) for column lines, B (k rows of n) for row lines
        reads = {(shape.m, shape.k) if line.axis == "cols" else (shape.k, shape.n)
                 for line in plan.lines if line.source == source}
        if stored and source == stepped:
            reads.add((shape.m, shape.n))
        least = math.ceil((column_offset + end[1] + ch) / align) * align
        pitch = _least_conflicts(least, op_bytes, reads)
        stage = Staging(source, planes, below, end[0] + rl + rh, rl, pitch, column_offset, offset, least,
                        2 if source == stepped else 1)
        out.append(stage)
        offset += stage.size * stage.copies
    return out


def block_elements(shape: MmaShape, axis: str) -> int:
    """Elements of one weight block: k x n for a column line (b), m x k for a row line (a)."""
    return shape.k * shape.n if axis == "cols" else shape.m * shape.k


def band_elements(plan: TensorCorePlan) -> int:
    """Elements of every weight block of the plan, in issue order (the `<name>_weights` array)."""
    return sum(len(line.chunks) * block_elements(plan.shape, line.axis) for line in plan.lines)


def tiles_per_warp(shape: MmaShape) -> int:
    """TILES, unless n columns of the operand are fewer bytes than wmma's 256-bit alignment (fp16's
    n = 8 halves): a warp's next tile starts n columns on."""
    return TILES if shape.n * _OPERAND[shape.operand][1] % ALIGN_BYTES == 0 else 1


def shared_bytes(shape: MmaShape, staging: Sequence[Staging], warps: int, tiles: int) -> int:
    """Dynamic shared memory of a block: the staging (copies included) and each warp's output tiles."""
    staged = sum(s.size * s.copies for s in staging) * _OPERAND[shape.operand][1]
    return staged + warps * shape.m * tile_pitch(shape, tiles) * _ACC_BYTES[shape.accumulator]


def _least_conflicts(least: int, element_bytes: int, reads: set[tuple[int, int]]) -> int:
    """Of the four pitches from `least` elements up, 32 bytes apart (wmma's alignment), the
    one whose fragment accesses of (rows, columns) meet the fewest bank conflicts."""
    step = ALIGN_BYTES // element_bytes
    return min((least + i * step for i in range(BANK_BYTES // ALIGN_BYTES)),
               key=lambda p: max(_wavefronts(p * element_bytes, rows, cols * element_bytes) for rows, cols in reads))


def tile_pitch(shape: MmaShape, tiles: int) -> int:
    """Elements between the rows of a warp's output tiles in shared memory: its `tiles`
    accumulators stored side by side, padded against bank conflicts."""
    return _least_conflicts(tiles * shape.n, _ACC_BYTES[shape.accumulator], {(shape.m, shape.n)})


def _wavefronts(pitch_bytes: int, rows: int, row_bytes: int) -> float:
    """Shared-memory wavefronts of a warp's fragment load of `rows` rows of `row_bytes`
    at this pitch, over the ideal (1.0: no bank conflicts): the most distinct 4-byte words
    one of the 32 banks serves, at least the bytes over BANK_BYTES (the emulator's model)."""
    banks = collections.Counter((r * pitch_bytes + b) // 4 % 32 for r in range(rows) for b in range(0, row_bytes, 4))
    ideal = math.ceil(rows * row_bytes / BANK_BYTES)
    return max(max(banks.values()), ideal) / ideal


def _source_name(source: Source) -> str:
    field, dt = source
    return f"{field}_{'in' if dt is None else ('n' if dt < 0 else 'p') + str(abs(dt))}"


def device_function(kern: TensorCoreKernel) -> DeviceFunction:
    """The kernel's `__global__` function as kernel IR: stage each source's tile and halo in
    shared memory, the MMAs of every line and chunk, the tile stored, the interior written."""
    plan, shape = kern.plan, kern.plan.shape
    m, n, nd = shape.m, shape.n, plan.ndim
    width = kern.tiles * n  # the columns of a warp's tiles
    t = _C_TYPE[kern.dtype]
    dims = extents(nd)
    e, z, tr = ix.Var("e"), ix.Var("z"), ix.Var("tr")
    body: list[kir.Node] = [
        *buffers(kern),
        kir.Decl("c0", "int", ix.Var("blockIdx.x") * width),
        kir.Decl("r0", "int", ix.Var("blockIdx.y") * (kern.warps * m)),
        *([kir.Decl("z0", "int", ix.Var("blockIdx.z") * PLANES)] if nd == 3 else [])]
    staging: list[kir.Node] = []  # in 3D, for plane z of the block's PLANES
    for s in kern.staging:
        if nd == 2:
            staging.append(staged_rows(kern, s, [], ix.Lit(0)))
            continue
        # the block's first plane stages every plane of the ring, each next one only its newest
        pl, p = ix.Var("pl"), ix.Var("p")
        staging.append(kir.Loop("pl", ix.Select(z.eq(ix.Var("z0")), ix.Lit(0), ix.Lit(s.planes - 1)),
                                pl.lt(s.planes), kir.Block((
                                    kir.Decl("p", "int", z + pl - s.plane_below),
                                    staged_rows(kern, s, [p], _slot(p, s.planes) * (s.rows * s.pitch)))), kind="int"))
    warp = warp_fragments(kern, kir.Decl("tr", "int", ix.Var("warp") * m))

    def operand(s: Staging, o: tuple[int, ...], i: int) -> ix.Expr:  # a pointer to the input fragment
        first = ix.Op("+", ix.Op("*", _slot(z + o[0], s.planes), ix.Lit(s.rows)), tr) if nd == 3 else tr
        row = first + (o[-2] + s.row_below)
        return ix.Var("stage") + s.offset + row * s.pitch + (o[-1] + s.column_offset + i * n)

    r, c, i = ix.Var("r"), ix.Var("c"), ix.Var("i")
    written = kir.Store(kir.Ref("out", element(kern, [*([z] if nd == 3 else []), r, c])),
                        ix.Cast(t, ix.Op("+", tile_value(kern, i, e), ix.Var("constant"))))
    products = [*products_of(kern, operand), *stored_tiles(kern),
                down_columns(kern, [kir.Decl("c", "int", ix.Var("c0") + e)], c.lt(dims[-1]),
                             [kir.Decl("r", "int", ix.Var("r0") + tr + i)], r.lt(dims[-2]), written)]
    staged = [*staging, kir.Barrier()]
    if nd == 2:
        body += [*lane_ids(), *staged, *warp, *products]
    else:  # the block's planes in order: the rings keep what the next plane reads again
        body += [*lane_ids(), *warp, kir.Loop("z", ix.Var("z0"), z.lt(ix.Var("z0") + PLANES).and_(z.lt(dims[0])),
                                 kir.Block((*staged, *products,
                                            kir.Comment("before the next plane overwrites a ring's oldest"),
                                            kir.Barrier())), kind="int")]
    rows = kern.warps * m
    grid = (ix.Op("/", dims[-1] + (width - 1), ix.Lit(width)), ix.Op("/", dims[-2] + (rows - 1), ix.Lit(rows)),
            ix.Op("/", dims[0] + (PLANES - 1), ix.Lit(PLANES)) if nd == 3 else ix.Lit(1))
    return DeviceFunction(f"{kern.name}_kernel", kir.Block(tuple(body)), grid, (32 * kern.warps,), scope(kern),
                          indexed=True)


# ---------------------------------------------------------------- pieces of a kernel (fused time tiles share them)


def extents(ndim: int) -> list[ix.Var]:
    """The interior's extents, the kernel's parameters n0, n1[, n2]."""
    return [ix.Var(f"n{d}") for d in range(ndim)]


def scope(kern: TensorCoreKernel, *extra: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    """The kernel's parameters (type, name): out, the sources, the constant, the extents, then `extra`."""
    t = _C_TYPE[kern.dtype]
    return (("double *" if t == "double" else "float *", "out"),
            *((f"const {t} *", f"src_{_source_name(s.source)}") for s in kern.staging),
            (kern.plan.shape.accumulator, "constant"), *(("int", f"n{d}") for d in range(kern.plan.ndim)), *extra)


def buffers(kern: TensorCoreKernel) -> list[kir.Node]:
    """The dynamic shared memory: `stage` (every source's staging, copies included), then `tiles`
    (each warp's output tiles)."""
    shape = kern.plan.shape
    staged = sum(s.size * s.copies for s in kern.staging)
    return [kir.Buffer("stage", kir.Space.SHARED, (staged,), element=_ELEMENT[shape.operand], offset=0),
            kir.Buffer("tiles", kir.Space.SHARED, (kern.warps * shape.m * tile_pitch(shape, kern.tiles),),
                       element=_ELEMENT[shape.accumulator], offset=staged * _OPERAND[shape.operand][1])]


def element(kern: TensorCoreKernel, coords: list[ix.Expr]) -> ix.Expr:
    """The array element of interior coordinates (already wrapped or in the array)."""
    ring = kern.ring
    dims = extents(kern.plan.ndim)
    at: ix.Expr = ix.Cast(INDEX_TYPE, coords[0] + ring[0])  # the kernel's index type: int where a level allows
    for d in range(1, kern.plan.ndim):
        at = ix.Op("+", at * (dims[d] + 2 * ring[d]), coords[d] + ring[d])
    return at


def staged_rows(kern: TensorCoreKernel, s: Staging, coords: list[ix.Expr], first: ix.Expr) -> kir.Loop:
    """One plane of `s`'s staging (`coords`: the plane's, before its rows'; `first`: its first element
    in the staging), the block's warps over its rows (`q`), each warp's lanes over a row's columns: no
    division per element, the pitch's padding columns left alone."""
    q, e = ix.Var("q"), ix.Var("e")
    columns = lanes(s.columns, [kir.Decl("c", "int", ix.Var("c0") + e - s.column_offset),
                                *stage_stores(kern, s, [*coords, ix.Var("r"), ix.Var("c")], first + q * s.pitch + e)])
    return kir.Loop("q", ix.Var("warp"), q.lt(s.rows), kir.Block((
        kir.Comment(f"{s.source[0]} (dt {s.source[1]}){', in both copies' if s.copies == 2 else ''}"),
        kir.Decl("r", "int", ix.Var("r0") + q - s.row_below), columns)), step=ix.Lit(kern.warps), kind="int")


def lanes(count: int, body: list[kir.Node]) -> kir.Loop:
    """`body` for each `e` below `count`, the warp's lanes side by side: a loop of a trip count
    known to the compiler, which unrolls it."""
    j, e = ix.Var("j"), ix.Var("e")
    return kir.Loop("j", ix.Lit(0), j.lt(-(-count // 32)), kir.Block((
        kir.Decl("e", "int", ix.Var("lane") + j * 32),
        *(body if count % 32 == 0 else [kir.If(e.lt(count), kir.Block(tuple(body)))]))), kind="int")


def down_columns(kern: TensorCoreKernel, column: list[kir.Node], column_ok: ix.Expr | None, row: list[kir.Node],
                 row_ok: ix.Expr | None, body: kir.Node) -> kir.Node:
    """`body` at each element (row `i`, column `e`) of the warp's stored tiles, each lane down a
    column (a row's columns side by side; where the tiles are narrower than a warp, 32 / width rows
    at once): `column` declares what a column needs, `column_ok` is checked once per column, `row`
    and `row_ok` per element. No division per element."""
    width, m, i = kern.tiles * kern.plan.shape.n, kern.plan.shape.m, ix.Var("i")
    per = max(1, 32 // width)
    rows = kir.Loop("i", ix.Lit(0) if per == 1 else ix.Op("/", ix.Var("lane"), ix.Lit(width)), i.lt(m), kir.Block((
        *row, body if row_ok is None else kir.If(row_ok, kir.Block((body,))))), step=ix.Lit(per), kind="int")
    lane = [*column, rows if column_ok is None else kir.If(column_ok, kir.Block((rows,)))]
    if per == 1:
        return lanes(width, lane)
    return kir.Block((kir.Decl("e", "int", ix.Var("lane") % width), *lane), scoped=True)


def stage_stores(kern: TensorCoreKernel, s: Staging, coords: list[ix.Expr], at: ix.Expr) -> list[kir.Node]:
    """Element `at` of each copy of `s` = the source at interior `coords`, in the operand type:
    wrapped (periodic), or zero past the array (dirichlet: the tail tiles and zero-weight columns)."""
    value = staged_value(kern, s.source, coords)
    return [kir.Store(kir.Ref("stage", s.offset + copy * s.size + at, kir.Space.SHARED), value)
            for copy in range(s.copies)]


def staged_value(kern: TensorCoreKernel, source: Source, coords: list[ix.Expr]) -> ix.Expr:
    """The source at interior `coords` in the operand type: wrapped (periodic), or zero past the
    array (dirichlet)."""
    src, dims = f"src_{_source_name(source)}", extents(kern.plan.ndim)
    if kern.wrap:
        wrapped = [ix.Call(f"{kern.name}_wrap", (c, d)) for c, d in zip(coords, dims)]
        value: ix.Expr = kir.Load(kir.Ref(src, element(kern, wrapped)))
    else:
        inside = conjunction([b for c, d, r in zip(coords, dims, kern.radius) for b in (c.ge(-r), c.lt(d + r))])
        value = ix.Select(inside, kir.Load(kir.Ref(src, element(kern, coords))), ix.Lit(0))
    return to_operand(kern.plan.shape.operand, value)


def lane_ids() -> list[kir.Node]:
    """A thread's warp of the block and lane of the warp."""
    return [kir.Decl("warp", "int", ix.Op("/", ix.Var("threadIdx.x"), ix.Lit(32))),
            kir.Decl("lane", "int", ix.Var("threadIdx.x") % 32)]


def warp_fragments(kern: TensorCoreKernel, *first: kir.Node) -> list[kir.Node]:
    """`first`, the warp's operand fragments and one accumulator per tile, then, where the kernel holds
    its weights, the weight blocks (`weight_fragments`), the operand fragments only those inputs take
    (after `lane_ids`)."""
    held = kern.holds_weights
    shape, acc = kern.plan.shape, _ELEMENT[kern.plan.shape.accumulator]
    mnk = (shape.m, shape.n, shape.k)
    roles = {"a" if line.axis == "cols" else "b" for line in kern.plan.lines} if held else {"a", "b"}
    return [*first,
            *(kir.Fragment(role, role, mnk, _FRAGMENT[shape.operand]) for role in ("a", "b") if role in roles),
            *(kir.Fragment(f"acc{i}", "accumulator", mnk, acc) for i in range(kern.tiles)),
            *(weight_fragments(kern) if held else [])]


def products_of(kern: TensorCoreKernel, operand: Callable[[Staging, tuple[int, ...], int], ix.Expr],
                start: ix.Expr | None = None) -> list[kir.Node]:
    """The warp's accumulators set to `start` (zero), then its MMAs: per line and chunk, in the
    plan's order, the weight block loaded once for the tiles and per tile the input fragment at
    `operand(staging, input origin, tile)`; or, where the kernel holds its weight blocks
    (`weight_fragments`), per distinct input fragment (a tile's chunk is often another tile's next
    one) one load and every MMA that reads it."""
    plan, shape, held = kern.plan, kern.plan.shape, kern.holds_weights
    acc_t = shape.accumulator
    first = ix.Cast(acc_t, ix.Lit(0)) if start is None else start
    out: list[kir.Node] = [*(kir.MatrixFill(f"acc{i}", first) for i in range(kern.tiles))]
    stage_of = {s.source: s for s in kern.staging}
    blocks = iter(_weight_blocks(kern))
    reads: dict[tuple[object, ...], list[kir.Node]] = {}  # held: an input fragment's load, then its MMAs
    for line in plan.lines:
        s = stage_of[line.source]
        if not held:
            out.append(kir.Comment(f"{line.source[0]} (dt {line.source[1]}): {line.axis} line, shift {line.shift}, "
                                   f"offsets {line.lo}..{line.hi}"))
        input_fragment = "a" if line.axis == "cols" else "b"
        for chunk in line.chunks:
            o = line.input_origin(chunk, shape.k)
            # the weight block is b for column lines (a for row lines) in every tile's product, the input
            # the other; loaded after the first tile's input, whose load then reads the staging first
            j, load = next(blocks)
            weight = f"w{j}" if held else load.fragment
            a, b = ("a", weight) if line.axis == "cols" else (weight, "b")
            for i in range(kern.tiles):
                fetch = kir.MatrixLoad(input_fragment, operand(s, o, i), s.pitch)
                product = kir.MatrixMultiply(f"acc{i}", a, b)
                if held:  # keyed by where the input fragment starts
                    key = (line.source, input_fragment, *o[:-1], o[-1] + i * shape.n)
                    reads.setdefault(key, [fetch]).append(product)
                    continue
                out += [fetch, load, product] if i == 0 else [fetch, product]
    if held:
        out.append(kir.Comment("each input fragment loaded once, for every tile and weight block that reads it"))
    return out + [node for nodes in reads.values() for node in nodes]


def _weight_blocks(kern: TensorCoreKernel) -> list[tuple[int, kir.MatrixLoad]]:
    """Per line and chunk in the plan's order: its number and the load of its weight block into
    fragment b (a column line) or a (a row line)."""
    shape, weights = kern.plan.shape, f"{kern.name}_weights"
    out, band = [], 0
    for line in kern.plan.lines:
        for _ in line.chunks:
            fragment, stride = ("b", shape.n) if line.axis == "cols" else ("a", shape.k)
            out.append((len(out), kir.MatrixLoad(fragment, ix.Var(weights) + band, stride)))
            band += block_elements(shape, line.axis)
    return out


def weight_fragments(kern: TensorCoreKernel) -> list[kir.Node]:
    """Every weight block loaded once into a fragment of its own (w0, w1, ...), which `products_of` then
    uses: held for all of a block's tiles, planes and steps, where they take at most WEIGHT_REGISTERS."""
    shape = kern.plan.shape
    mnk = (shape.m, shape.n, shape.k)
    out: list[kir.Node] = []
    for j, load in _weight_blocks(kern):
        out += [kir.Fragment(f"w{j}", load.fragment, mnk, _FRAGMENT[shape.operand]),
                kir.MatrixLoad(f"w{j}", load.address, load.stride)]
    return out


def weight_registers(kern: TensorCoreKernel) -> int:
    """32-bit registers per lane that `weight_fragments` hold."""
    shape = kern.plan.shape
    elements = band_elements(kern.plan)
    return elements * _OPERAND[shape.operand][1] // (4 * 32)


def stored_tiles(kern: TensorCoreKernel) -> list[kir.Node]:
    """The warp's accumulators stored side by side to its rows of `tiles` (`tile`), then a warp barrier."""
    shape = kern.plan.shape
    pitch = tile_pitch(shape, kern.tiles)
    return [kir.Decl("tile", "pointer", ix.Var("tiles") + ix.Var("warp") * (shape.m * pitch), restrict=False,
                     element=_ELEMENT[shape.accumulator]),
            *(kir.MatrixStore(ix.Var("tile") + i * shape.n, f"acc{i}", pitch) for i in range(kern.tiles)),
            kir.Barrier("warp")]


def tile_value(kern: TensorCoreKernel, row: ix.Expr, column: ix.Expr) -> ix.Expr:
    """The element at `row`, `column` of the warp's stored tiles (m x tiles * n, side by side)."""
    return kir.Load(kir.Ref("tile", row * tile_pitch(kern.plan.shape, kern.tiles) + column, kir.Space.SHARED))


def _slot(plane: ix.Expr, planes: int) -> ix.Expr:
    """The ring slot of a source's staged plane (planes from -planes on)."""
    return (plane + planes) % planes


def to_operand(operand: str, value: ix.Expr) -> ix.Expr:
    """`value` converted to the MMA's operand type (tf32 and half: rounded from float)."""
    if operand == "double":
        return ix.Cast("double", value)
    to = "nvcuda::wmma::__float_to_tf32" if operand == "tf32" else "__float2half"
    return ix.Call(to, (ix.Cast("float", value),))


def printed(kern: TensorCoreKernel, function: DeviceFunction) -> str:
    """The kernel's CUDA source: `function` (its `__global__` function) and the host helpers (a
    fused kernel's `<name>_launch` takes `steps` too)."""
    plan, shape = kern.plan, kern.plan.shape
    printer = CudaPrinter(kern.dtype)
    coefficient = lambda e: c_expr(e, "float64", _no_field, lambda p: f"p_{p}")  # noqa: E731
    lines, band = [], 0
    for line in plan.lines:
        rows, cols = (shape.k, shape.n) if line.axis == "cols" else (shape.m, shape.k)
        lines.append(dict(axis=line.axis, field=line.source[0], dt=line.source[1], shift=line.shift, rows=rows,
                          cols=cols, coefficients=[coefficient(c) for c in line.coefficients], chunks=line.chunks,
                          band=band))
        band += len(line.chunks) * rows * cols
    return render("cuda_tensor_core.cu.j2", name=kern.name, precision=plan.precision, shape=shape.name,
                  target=plan.target, mmas=plan.mmas_per_tile, m=shape.m, n=shape.n, k=shape.k,
                  useful=f"{100 * plan.useful_fraction:.1f}", operand=shape.operand, wrap=kern.wrap,
                  op_t=_OPERAND[shape.operand][0], band_elements=kern.band_elements, threads=32 * kern.warps,
                  parameters=[printer.parameter(t, v) for t, v in function.scope], body=printer.lines(function.body),
                  index_type=INDEX_TYPE, points=level_points(kern),
                  params=kern.params, lines=lines, t=_C_TYPE[kern.dtype], acc_t=shape.accumulator,
                  sources=[f"src_{_source_name(s.source)}" for s in kern.staging],
                  dims=[f"n{d}" for d in range(plan.ndim)], grid=[c_int(g) for g in function.grid],
                  opt_in=kern.shared_bytes > DEFAULT_SHARED, shared_bytes=kern.shared_bytes,
                  steps=kern.fused,
                  constant=coefficient(plan.constant) if plan.constant is not None else "0.0")


def level_points(kern: TensorCoreKernel) -> str:
    """The C expression of a level's elements (the interior and its ring, or none where reads
    wrap): what decides the kernel's index type (MSC_LAUNCH_INDEXED)."""
    ring = kern.ring
    return " * ".join(f"(long)(n{d} + {2 * r})" for d, r in enumerate(ring))


def standalone_entry(kern: TensorCoreKernel) -> str:
    """`extern "C" int <name>_step(out, sources..., params..., extents...[, steps])`: one step (a fused
    kernel: `steps`) on host arrays (copied to the device and back; out's ring is kept)."""
    dims = [f"n{d}" for d in range(kern.plan.ndim)]
    ring = kern.ring
    return render("cuda_tensor_core_step.cu.j2", name=kern.name, t=_C_TYPE[kern.dtype], params=kern.params, dims=dims,
                  steps=kern.fused,
                  sources=[f"src_{_source_name(s)}" for s in kern.sources],
                  count=" * ".join(f"(size_t)({d} + {2 * r})" for d, r in zip(dims, ring)))


def _no_field(read: ir.FieldRead) -> str:
    raise AssertionError(f"a weight reads field {read.name}")  # the plan refuses variable coefficients


INCLUDES = '#include "msc_cuda.h"\n'


def source_file(kernels: Sequence[TensorCoreKernel]) -> str:
    """A complete .cu holding `kernels` (distinct names), each with its host entry `<name>_step`."""
    return INCLUDES + "".join("\n" + k.code + "\n" + standalone_entry(k) for k in kernels)


def step(kernel: TensorCoreKernel, library: ctypes.CDLL, read: Mapping[Source, np.ndarray],
         out: np.ndarray, params: Mapping[str, float], steps: int = 1) -> np.ndarray:
    """Run `<name>_step` of a built library: one step of the statement into a copy of `out` (a fused
    kernel: `steps` steps, from the level `read` holds of out's field) (arrays in the reference layout:
    the interior plus the stencil's ring, none when the kernel wraps)."""
    if steps != 1 and not kernel.fused:
        raise ValueError(f"{kernel.name}: a kernel of one step cannot take {steps}")
    c_t = np.dtype(kernel.dtype)
    result = np.array(out, dtype=c_t, order="C")
    arrays = [np.ascontiguousarray(read[s], dtype=c_t) for s in kernel.sources]
    if any(a.shape != result.shape for a in arrays):
        raise ValueError(f"{kernel.name}: every source must have out's shape {result.shape}")
    ring = [0 if kernel.wrap else r for r in kernel.radius]
    interior = [e - 2 * r for e, r in zip(result.shape, ring)]
    args = [result.ctypes.data_as(ctypes.c_void_p), *(a.ctypes.data_as(ctypes.c_void_p) for a in arrays),
            *(ctypes.c_double(params[p]) for p in kernel.params), *(ctypes.c_int(n) for n in interior),
            *([ctypes.c_int(steps)] if kernel.fused else [])]
    status = getattr(library, f"{kernel.name}_step")(*args)
    if status != 0:
        raise RuntimeError(f"{kernel.name}_step failed with CUDA error {status}")
    return result


def build_emulated(kernels: Sequence[TensorCoreKernel], name: str) -> ctypes.CDLL:
    """Build `kernels` with their host entries into one emulated library (cached) and load it."""
    return build.load_library(cuda_emu.build_shared(source_file(kernels), name))


# ---------------------------------------------------------------- the CUDA target's hook

ROUNDED = {"tf32": 10, "fp16": 10}  # mantissa bits of the precisions that round float64 operands

def check_loss(stencil: ir.StencilIR, schedule: Schedule) -> None:
    """ScheduleError for tf32 or fp16 operands on a float64 stencil, unless `lossy=True` accepts them."""
    precision = schedule.tensor_core_precision
    if stencil.dtype == "float64" and precision in ROUNDED and not schedule.tensor_core_lossy:
        raise ScheduleError(
            f"tensor_cores({precision!r}) on float64 stencil '{stencil.name}': {precision} operands keep "
            f"{ROUNDED[precision]} mantissa bits (about 5e-4 relative error per output, docs/tensor_cores.md), "
            f"against float64's 52; use tensor_cores('fp64'), or tensor_cores({precision!r}, lossy=True) to accept "
            "the loss, or compile with dtype='float32'")


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
    check_loss(stencil, sched)
    pointers = [level_name(assign.field, 1), *(array_name(*source) for source in kernel.sources)]
    missing = sorted(set(pointers) - {name for _, name in launch.scope})
    assert not missing, f"launch {launch.name} has no level pointers {missing} in scope"
    args = (*(ix.Var(p) for p in pointers),
            *(ix.Cast("double", ix.Var(param_name(p))) for p in stencil.params),
            *(ix.Cast("int", extent(d) - 2 * r) for d, r in enumerate(stencil.radius)))
    return CustomLaunch(kernel.code, kir.Call(f"{kernel.name}_launch", args))
