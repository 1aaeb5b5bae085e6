"""CUDA loop mappings: split a kernel into host code and `__global__` launches.

The time loop and every loop that must run in order stay on the host; each
loop the schedule shares among workers (`Loop.parallel`) becomes one kernel
launch, with the loops below it that carry no dependence either
(`LoweredSchedule.parallel_dims`) mapped onto the grid:

- a point loop (no tiles, or the schedule made a point loop parallel) and
  the point loops nested in it map onto the whole grid, one point per
  thread in grid-stride loops (`global.x` innermost, then `.y`, `.z`);
- a tile loop and the tile loops nested in it map onto blocks (`block.*`,
  grid-stride); inside, point loops map onto the block's threads
  (`thread.*`, block-stride) with the tile as the block. A barrier
  (`__syncthreads`) follows each thread-mapped nest and each staging copy,
  whatever stays in order (the steps of a time tile, inner tile loops) is
  run by every thread of the block alike, and a nest with no loop to map is
  run by the block's first thread alone.

Every mapped loop strides by the size of what it is mapped on, so the launch
geometry decides speed, never correctness. cache_read/cache_write buffers
become the block's shared memory, filled and drained by all its threads.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

from msc.codegen import index as ix
from msc.codegen import kernel_ir as k
from msc.codegen.lower import extent
from msc.errors import ScheduleError
from msc.poly import PolyIR
from msc.poly.schedule import LoweredSchedule

AXES = ("x", "y", "z")
MAX_THREADS = 1024  # threads per block, every CUDA device since compute capability 2.0
STATIC_SHARED = 48 << 10  # static shared memory of a block on every CUDA device since compute capability 2.0;
# beyond it, a launch asks for dynamic shared memory
MAX_GRID_YZ = 65535
FIRST_THREAD = ix.Var("threadIdx.x").eq(0).and_(ix.Var("threadIdx.y").eq(0)).and_(ix.Var("threadIdx.z").eq(0))
# threads along a mapped point loop the tile does not bound: innermost, others
UNTILED_THREADS = (32, 4)
GLOBAL_BLOCK = {1: (256,), 2: (32, 8), 3: (32, 4, 2)}  # block of a global mapping, x first


@dataclass(frozen=True)
class DeviceFunction:
    """One `__global__` function: `body` runs on the device; `grid` (blocks, computed
    on the host) and `block` (threads) are its launch geometry, x first; `scope` the
    variables in scope at its launch (a `k.Launch` in the host code; type, name), its
    parameters when used. `indexed`: its index variables (declarations, and parameters,
    of kind "index") are of the template parameter `index_t`, 32 or 64 bits (`k.Launch.points`)."""

    name: str
    body: k.Block
    grid: tuple[ix.Expr, ...]
    block: tuple[int, ...]
    scope: tuple[tuple[str, str], ...]
    indexed: bool = False


def level_points(ndim: int) -> ix.Expr:
    """The points of a level, P0 x P1 ...: the `points` of an indexed launch (`k.Launch`)
    that reads and writes levels through the pointers it is given."""
    return functools.reduce(ix.mul, (ix.Var(f"P{d}") for d in range(ndim)))


def _contains(node: k.Node, what: type) -> bool:
    return any(isinstance(n, what) for n in k.walk(node))


def _has_parallel(node: k.Node) -> bool:
    return any(isinstance(n, k.Loop) and n.parallel and not n.degenerate for n in k.walk(node))


@dataclass(frozen=True)
class CustomLaunch:
    """Device code another generator writes for one launch: `source` (its
    `__global__` functions) replaces the launch's, `call` (host statements)
    its `k.Launch`."""

    source: str
    call: k.Node


@dataclass
class _Split:
    poly: PolyIR
    schedule: LoweredSchedule
    entry: str
    buffers: dict[str, k.Buffer]
    launches: list[DeviceFunction]
    _sizes: list[list[int]] = field(default_factory=list)  # threads per axis of each nest of the current block

    # -- what a loop iterates -------------------------------------------------

    def _tile_loop(self, loop: k.Loop) -> bool:
        return loop.dim in self.schedule.tiles

    def _mappable(self, loop: k.Loop, tile: bool) -> bool:
        return (not loop.degenerate and loop.unroll == 0 and loop.init is not None and loop.dim is not None
                and loop.dim in self.schedule.parallel_dims and self._tile_loop(loop) == tile
                and self.schedule.names[loop.dim] not in ("t", "wave", "t_tile"))

    def _space_dim(self, loop: k.Loop) -> int:
        assert loop.dim is not None
        if loop.dim in self.schedule.tiles:
            return self.schedule.tiles[loop.dim][0]
        return self.poly.ir.dims.index(self.schedule.names[loop.dim])

    def _tile_size(self, d: int) -> int | None:
        return next((size for (dd, size) in self.schedule.tiles.values() if dd == d), None)

    def _chain(self, loop: k.Loop, tile: bool) -> tuple[list[k.Loop], list[k.Decl], k.Block]:
        """The perfectly nested mappable loops from `loop` down (at most 3), the
        declarations between them (set-up that moves inside, e.g. row
        pointers), and the innermost one's body."""
        chain, decls, body = [loop], [], loop.body
        while len(chain) < len(AXES):
            nodes = body.body
            if len(nodes) == 1 and isinstance(nodes[0], k.Block):
                nodes = nodes[0].body
            if not nodes or not all(isinstance(n, k.Decl) for n in nodes[:-1]):
                break
            inner = nodes[-1]
            if not (isinstance(inner, k.Loop) and self._mappable(inner, tile)):
                break
            chain.append(inner)
            decls += [n for n in nodes[:-1] if isinstance(n, k.Decl)]
            body = inner.body
        return chain, decls, body

    def _mapped(self, chain: list[k.Loop], decls: list[k.Decl], body: k.Block, kind: str) -> k.Loop:
        """The chain with its mappings (the innermost on .x) and the declarations inside."""
        node: k.Loop | None = None
        inner_body = k.Block((*decls, *body.body))
        for axis, loop in zip(AXES, reversed(chain)):
            node = replace(loop, body=inner_body if node is None else k.Block((node,)), mapping=f"{kind}.{axis}")
        assert node is not None
        return node

    # -- host code ---------------------------------------------------------------

    def host(self, node: k.Node, scope: list[tuple[str, str]]) -> list[k.Node]:
        """`node` as host code: launches where it has work for the device."""
        if isinstance(node, k.Barrier):
            return []  # launches on one stream run one after the other
        if isinstance(node, k.Buffer) and node.field is not None:
            return []  # declared in the launches that use it
        if isinstance(node, (k.Assign, k.Copy)) or (
                not _has_parallel(node) and _contains(node, k.Assign) and not _contains(node, k.Call)):
            return [self._serial(node, scope)]
        if isinstance(node, k.Loop) and node.parallel and not node.degenerate:
            return [self._launch(node, scope)]
        if isinstance(node, k.Block):
            inner = list(scope)
            out: list[k.Node] = []
            for n in node.body:
                out += self.host(n, inner)
                if isinstance(n, k.Decl):
                    inner.append((_decl_type(n), n.name))
            return [k.Block(tuple(out), node.scoped)]
        if isinstance(node, k.Loop):
            body = k.Block(tuple(self.host(node.body, scope + [("long", node.iterator)])))
            return [replace(node, body=body, parallel=False)]
        if isinstance(node, k.If):
            then = k.Block(tuple(self.host(node.then, scope)))
            other = k.Block(tuple(self.host(node.otherwise, scope))) if node.otherwise is not None else None
            return [replace(node, then=then, otherwise=other)]
        return [node]  # declarations, runtime calls (the periodic wrap launches its own kernels)

    def _serial(self, node: k.Node, scope: list[tuple[str, str]]) -> k.Node:
        """Work with no loop to share (a schedule without a parallel loop): one device thread."""
        self._check_device(node)
        return self._add(k.Block((node,)), (ix.Lit(1),), (1,), scope)

    def _launch(self, loop: k.Loop, scope: list[tuple[str, str]]) -> k.Node:
        ir = self.poly.ir
        if self._tile_loop(loop):
            chain, decls, body = self._chain(loop, tile=True)
            self._sizes = []
            inside = k.Block(tuple(self._block(n) for n in body.body))
            mapped = self._mapped(chain, decls, inside, "block")
            block = _widest(self._sizes) or (1,)
            grid = tuple(_blocks(self._space_dim(c), self._tile_size(self._space_dim(c)), a)
                         for a, c in enumerate(reversed(chain)))
        else:
            if self.schedule.schedule.cached_reads or self.schedule.schedule.cached_writes:
                raise ScheduleError(
                    f"cache_read/cache_write on stencil '{ir.name}' for target 'cuda': the staged tile is one "
                    f"block's, so a tile loop must be the parallel one (parallel('{ir.dims[0]}_tile'), the default), "
                    f"not {self.schedule.names[loop.dim or 0]!r}")
            chain, decls, body = self._chain(loop, tile=False)
            self._check_device(body)
            mapped = self._mapped(chain, decls, body, "global")
            block = GLOBAL_BLOCK[len(chain)]
            grid = tuple(_blocks(self._space_dim(c), b, a) for a, (c, b) in enumerate(zip(reversed(chain), block)))
        return self._add(k.Block((mapped,)), grid, block, scope)

    def _add(self, body: k.Block, grid: tuple[ix.Expr, ...], block: tuple[int, ...],
             scope: list[tuple[str, str]]) -> k.Node:
        arrays = _arrays(body)
        shared = tuple(replace(b, space=k.Space.SHARED) for name, b in self.buffers.items() if name in arrays)
        name = f"{self.entry}_k{len(self.launches)}"
        self.launches.append(DeviceFunction(name, k.Block((*shared, *body.body)), grid, block, tuple(scope),
                                            indexed=True))
        return k.Launch(name, grid, block)

    def _check_device(self, node: k.Node) -> None:
        for n in k.walk(node):
            if isinstance(n, k.Call):
                raise ScheduleError(f"target 'cuda': {n.func}() would run inside a kernel launch; "
                                    "keep the periodic wrap outside the parallel loop")
            if isinstance(n, k.Copy):
                raise ScheduleError("target 'cuda': a cache_read/cache_write copy outside a block's tile loop")

    @staticmethod
    def _threads(tiles: list[int | None]) -> list[int]:
        """Threads per axis (x first): a tiled loop's tile; an untiled one what
        the tiles leave of the block (UNTILED_THREADS at most)."""
        left = MAX_THREADS
        for size in tiles:
            left //= size or 1
        out = []
        for axis, size in enumerate(tiles):
            if size is None:
                size = max(1, min(UNTILED_THREADS[min(axis, 1)], left))
                left //= size
            out.append(size)
        return out

    # -- inside a block ------------------------------------------------------------

    def _block(self, node: k.Node) -> k.Node:
        """`node` run by every thread of a block alike (block-uniform control)."""
        if isinstance(node, k.Barrier):
            return k.Block(())
        if isinstance(node, k.Copy):
            return k.Block((node, k.Barrier()))  # the printer shares the copy among the block's threads
        if isinstance(node, k.Loop) and self._mappable(node, tile=False):
            chain, decls, body = self._chain(node, tile=False)
            self._check_device(body)
            self._sizes.append(self._threads([self._tile_size(self._space_dim(loop)) for loop in reversed(chain)]))
            return k.Block((self._mapped(chain, decls, body, "thread"), k.Barrier()))
        if isinstance(node, (k.Assign, k.Call)) or (
                isinstance(node, k.Loop) and not any(isinstance(n, k.Loop) and self._mappable(n, False)
                                                     for n in k.walk(node)) and _contains(node, k.Assign)):
            self._check_device(node)
            return k.Block((k.If(FIRST_THREAD, k.Block((node,))), k.Barrier()))
        if isinstance(node, k.Block):
            return replace(node, body=tuple(self._block(n) for n in node.body))
        if isinstance(node, k.Loop):
            return replace(node, body=k.Block((self._block(node.body),)), parallel=False)
        if isinstance(node, k.If):
            other = k.Block((self._block(node.otherwise),)) if node.otherwise is not None else None
            return replace(node, then=k.Block((self._block(node.then),)), otherwise=other)
        return node


def _blocks(d: int, per_block: int | None, axis: int) -> ix.Expr:
    """Blocks along space dimension d for `per_block` points each, on grid axis `axis` (y and z are limited)."""
    assert per_block is not None, f"no tile size in dimension {d}"
    return ix.Call("msc_blocks", (extent(d), ix.Lit(per_block), ix.Lit(MAX_GRID_YZ if axis else 0)))


def _widest(sizes: list[list[int]]) -> tuple[int, ...]:
    """Per axis, the most threads any nest of the block asks for."""
    width = max((len(s) for s in sizes), default=0)
    return tuple(max(s[a] for s in sizes if len(s) > a) for a in range(width))


def _decl_type(d: k.Decl) -> str:
    if d.kind == "index":
        return "long"
    return "const real *" if d.kind == "const pointer" else "real *"


def _arrays(node: k.Node) -> set[str]:
    out = set()
    for n in k.walk(node):
        if isinstance(n, k.Assign):
            out |= {n.lhs.array, *(ref.array for _, ref in n.loads)}
        elif isinstance(n, k.Copy):
            out |= {n.src.array, n.dst.array}
    return out


def _to_shared(node: k.Node) -> k.Node:
    """Thread-local cache refs become the block's shared memory."""
    def moved(ref: k.Ref) -> k.Ref:
        return replace(ref, space=k.Space.SHARED) if ref.space == k.Space.STACK else ref

    if isinstance(node, k.Assign):
        return replace(node, lhs=moved(node.lhs), loads=tuple((r, moved(ref)) for r, ref in node.loads))
    if isinstance(node, k.Copy):
        return replace(node, src=moved(node.src), dst=moved(node.dst))
    if isinstance(node, k.Buffer) and node.field is not None:
        return replace(node, space=k.Space.SHARED)
    return node


def split(kernel: k.Kernel, poly: PolyIR, schedule: LoweredSchedule,
          scope: list[tuple[str, str]]) -> tuple[k.Kernel, list[DeviceFunction]]:
    """The host part of `kernel` (launching the device parts by name) and its launches;
    `scope`: the entry point's own variables (type, name)."""
    kernel = k.transform_kernel(kernel, _to_shared)
    buffers = {n.name: n for n in kernel.body.body if isinstance(n, k.Buffer) and n.field is not None}
    splitter = _Split(poly, schedule, kernel.name, buffers, [])
    body = splitter.host(kernel.body, list(scope))
    assert len(body) == 1 and isinstance(body[0], k.Block)
    launches = splitter.launches
    for launch in launches:
        threads = 1
        for b in launch.block:
            threads *= b
        if threads > MAX_THREADS:
            tiles = ", ".join(f"{d}={v}" for d, v in schedule.schedule.tiles)
            raise ScheduleError(
                f"stencil '{poly.ir.name}' on target 'cuda': a tile {tiles} makes blocks of "
                f"{' x '.join(map(str, launch.block))} = {threads} threads, more than the {MAX_THREADS} "
                "threads per block a CUDA device runs; use smaller tiles")
    return replace(kernel, body=body[0]), launches
