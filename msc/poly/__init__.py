"""PolyIR: the polyhedral form of a stencil, built with islpy.

Statement S<k> (the k-th statement) runs over the parametric domain
  { S<k>[t, i0, ...] : 0 <= t < T and r_d <= i_d < P_d - r_d }
where P_d is the padded array extent and r_d the radius. Periodic stencils
also get a zero-dimensional statement W<k>[t] that refreshes the ghost cells
of the level S<k> wrote. Reads and writes are access relations on logical
(unbounded-time) arrays; value-based flow dependences come from isl, and
memory-based ones from the ring-buffer storage map (level mod slots).

A schedule is an isl map from statement instances to time-stamp vectors;
legality and loop parallelism are decided from the dependences mapped into
schedule space.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cached_property

import islpy as isl

from msc import ir


def _aff(var: str, offset: int) -> str:
    return var if offset == 0 else f"{var} {'+' if offset > 0 else '-'} {abs(offset)}"


@dataclass(frozen=True)
class PolyStatement:
    name: str
    index: int
    stmt: ir.Statement | None  # None: the ghost refresh of a periodic stencil
    target: str


class PolyIR:
    """Domains, accesses, dependences and the default schedule of one stencil."""

    def __init__(self, stencil: ir.StencilIR) -> None:
        self.ir = stencil
        self.dims = [f"i{d}" for d in range(stencil.ndim)]
        self.extent_params = [f"P{d}" for d in range(stencil.ndim)]
        self.params = ["T", *self.extent_params]
        self.statements: list[PolyStatement] = []
        for k, s in enumerate(stencil.statements):
            self.statements.append(PolyStatement(f"S{k}", k, s, s.target))
            if stencil.boundary == "periodic" and stencil.reads_spatially(s.target):
                self.statements.append(PolyStatement(f"W{k}", k, None, s.target))

    # -- sets and maps ------------------------------------------------------

    def _p(self) -> str:
        return "[" + ", ".join(self.params) + "]"

    def instance(self, st: PolyStatement) -> str:
        if st.stmt is None:
            return f"{st.name}[t]"
        return f"{st.name}[t, {', '.join(self.dims)}]"

    def domain_constraints(self, st: PolyStatement) -> str:
        cons = ["0 <= t < T"]
        if st.stmt is not None:
            for i, p, r in zip(self.dims, self.extent_params, self.ir.radius):
                cons.append(f"{r} <= {i} < {p} - {r}")
        return " and ".join(cons)

    @cached_property
    def context(self) -> isl.Set:
        """What is assumed of the parameters: arrays wider than twice the radius."""
        cons = ["T >= 0"] + [f"{p} >= {2 * r + 1}" for p, r in zip(self.extent_params, self.ir.radius)]
        return isl.Set(f"{self._p()} -> {{ : {' and '.join(cons)} }}")

    @cached_property
    def domain(self) -> isl.UnionSet:
        parts = [f"{self.instance(st)} : {self.domain_constraints(st)}" for st in self.statements]
        return isl.UnionSet(f"{self._p()} -> {{ {'; '.join(parts)} }}")

    def _access(self, storage: bool, kind: str) -> isl.UnionMap:
        """Reads or writes of every statement; with storage=True, levels map to ring slots.
        The reads of one field level are its footprint: the offsets read, as a few boxes."""
        parts: list[str] = []
        for st in self.statements:
            src = self.instance(st)
            cons = self.domain_constraints(st)
            if st.stmt is None:
                # a ghost refresh reads and writes (conservatively) the whole new level
                level = self._level(st.target, 1, storage)
                parts.append(f"{src} -> {self.isl_name(st.target)}[{level}, {', '.join(self.dims)}] : {cons}")
                continue
            if kind == "read":
                footprints: dict[tuple[str, int | None], set[tuple[int, ...]]] = {}
                for a in st.stmt.reads:
                    footprints.setdefault((a.name, a.dt), set()).add(a.offsets)
            else:
                footprints = {(st.target, 1): {(0,) * self.ir.ndim}}
            outs = [f"j{d}" for d in range(self.ir.ndim)]
            for (name, dt), offsets in footprints.items():
                space = list(outs) if dt is None else [self._level(name, dt, storage), *outs]
                for box in offset_boxes(offsets):
                    bounds = " and ".join(
                        f"{i} + {lo} <= {j} <= {i} + {hi}" for i, j, (lo, hi) in zip(self.dims, outs, box)
                    )
                    parts.append(f"{src} -> {self.isl_name(name)}[{', '.join(space)}] : {cons} and {bounds}")
        return isl.UnionMap(f"{self._p()} -> {{ {'; '.join(parts)} }}")

    def isl_name(self, field: str) -> str:
        """The field's name in isl's text: itself, or `msc_field<k>` for a name isl cannot read (one with
        letters beyond ASCII, which the language allows)."""
        if field.isascii():
            return field
        return f"msc_field{[f.name for f in self.ir.fields].index(field)}"

    def _level(self, name: str, dt: int, storage: bool) -> str:
        if not storage:
            return _aff("t", dt)
        slots = self.ir.field(name).slots
        return f"({_aff('t', dt)} + {slots}) mod {slots}"

    @cached_property
    def reads(self) -> isl.UnionMap:
        return self._access(False, "read")

    @cached_property
    def writes(self) -> isl.UnionMap:
        return self._access(False, "write")

    def footprint(self, field: str, dt: int | None, box: Sequence[tuple[int, int]], extents: Sequence[int],
                  access: str = "read", statements: Collection[str] | None = None) -> tuple[tuple[int, int], ...] | None:
        """The bounding box (inclusive bounds per space dimension) of the points
        of level t+dt of `field` (dt None: a time-invariant field) that the
        `statements` (default: all) read (`access`: or "write") at the instances of one step
        whose space coordinates lie in `box` ([lo, hi) per dimension), in
        arrays of `extents` points (so the domain clips a box at its edge):
        the image of the box under the access relations. None when they
        access none."""
        names = [st.name for st in self.statements
                 if st.stmt is not None and (statements is None or st.name in statements)]
        within = " and ".join(f"{lo} <= {i} < {hi}" for i, (lo, hi) in zip(self.dims, box))
        point = ", ".join(["t", *self.dims])
        tile = isl.UnionSet(f"{self._p()} -> {{ {'; '.join(f'{n}[{point}] : t = 0 and {within}' for n in names)} }}")
        fixed = " and ".join(["T = 1", *(f"{p} = {n}" for p, n in zip(self.extent_params, extents))])
        relation = {"read": self.reads, "write": self.writes}[access]
        image = relation.intersect_domain(tile).intersect_params(isl.Set(f"{self._p()} -> {{ : {fixed} }}")).range()
        level = 0 if dt is None else 1  # the set's dimensions: [level,] j0, j1, ...
        for points in _sets_of(image):
            if points.get_tuple_name() != self.isl_name(field):
                continue
            if dt is not None:
                points = points.fix_val(isl.dim_type.set, 0, dt)
            if points.is_empty():
                continue
            return tuple((points.dim_min_val(level + d).to_python(), points.dim_max_val(level + d).to_python())
                         for d in range(self.ir.ndim))
        return None

    # -- schedules and dependences -----------------------------------------

    @cached_property
    def default_schedule(self) -> isl.UnionMap:
        """Time outermost, statements in program order, then the space loops in order."""
        parts = []
        pad = ["0"] * self.ir.ndim
        for pos, st in enumerate(self.statements):
            inner = pad if st.stmt is None else self.dims
            parts.append(f"{self.instance(st)} -> [t, {pos}, {', '.join(inner)}]")
        return isl.UnionMap(f"{self._p()} -> {{ {'; '.join(parts)} }}").intersect_domain(
            self.domain
        )

    @cached_property
    def flow_dependences(self) -> isl.UnionMap:
        """Value-based read-after-write dependences, computed by isl."""
        info = isl.UnionAccessInfo.from_sink(self.reads).set_must_source(self.writes)
        flow = info.set_schedule_map(self.default_schedule).compute_flow()
        return flow.get_must_dependence()

    @cached_property
    def memory_dependences(self) -> isl.UnionMap:
        """Anti and output dependences through the ring-buffer slots (storage reuse)."""
        sched = self.default_schedule
        reads = self._access(True, "read").intersect_domain(self.domain)
        writes = self._access(True, "write").intersect_domain(self.domain)
        before = sched.lex_lt_union_map(sched)
        anti = reads.apply_range(writes.reverse()).intersect(before)
        output = writes.apply_range(writes.reverse()).intersect(before)
        return anti.union(output)

    @cached_property
    def dependences(self) -> isl.UnionMap:
        return self.flow_dependences.union(self.memory_dependences).coalesce()

    def violated(self, schedule: isl.UnionMap) -> isl.UnionMap:
        """The dependences that `schedule` does not keep in order (empty if legal)."""
        sched = schedule.intersect_domain(self.domain)
        kept = sched.lex_lt_union_map(sched)
        return self.dependences.subtract(kept)

    def parallel_dims(self, schedule: isl.UnionMap) -> set[int]:
        """Schedule dimensions whose loops carry no dependence."""
        sched = schedule.intersect_domain(self.domain)
        deltas = self.dependences.apply_domain(sched).apply_range(sched).deltas()
        n = _out_dims(sched)
        result = set()
        for d in range(n):
            carried = False
            for s in _sets_of(deltas):
                zero_prefix = s
                for e in range(d):
                    zero_prefix = zero_prefix.fix_val(isl.dim_type.set, e, 0)
                nonzero = zero_prefix.lower_bound_val(isl.dim_type.set, d, 1).union(
                    zero_prefix.upper_bound_val(isl.dim_type.set, d, -1)
                )
                if not nonzero.is_empty():
                    carried = True
                    break
            if not carried:
                result.add(d)
        return result

    def ast(self, schedule: isl.UnionMap) -> isl.AstNode:
        """isl's AST for `schedule`, one loop per schedule dimension ("atomic"):
        no loop is split into special cases, so every statement sits inside
        every loop of its nest (work-sharing and per-step set-up rely on it)."""
        n = _out_dims(schedule)
        space = ", ".join(f"d{k}" for k in range(n))
        build = isl.AstBuild.from_context(self.context).set_options(
            isl.UnionMap(f"[{', '.join(self.params)}] -> {{ [{space}] -> atomic[x] }}")
        )
        return build.node_from_schedule_map(schedule.intersect_domain(self.domain))


Box = tuple[tuple[int, int], ...]


def offset_boxes(offsets: set[tuple[int, ...]]) -> list[Box]:
    """An exact cover of a set of integer offsets by disjoint boxes (inclusive
    bounds per dimension): a box stencil is one box, a 3D star five."""
    if not offsets:
        return []
    if len(next(iter(offsets))) == 0:
        return [()]
    rests: dict[int, set[tuple[int, ...]]] = {}
    for o in offsets:
        rests.setdefault(o[0], set()).add(o[1:])
    boxes: list[Box] = []
    run: tuple[int, int, list[Box]] | None = None  # first coordinates lo..hi sharing one cover of the rest
    for first in sorted(rests):
        cover = sorted(offset_boxes(rests[first]))
        if run is not None and run[1] == first - 1 and run[2] == cover:
            run = (run[0], first, cover)
            continue
        if run is not None:
            boxes += [((run[0], run[1]), *b) for b in run[2]]
        run = (first, first, cover)
    assert run is not None
    return boxes + [((run[0], run[1]), *b) for b in run[2]]


def _out_dims(schedule: isl.UnionMap) -> int:
    maps: list[isl.Map] = []
    schedule.foreach_map(maps.append)
    return maps[0].dim(isl.dim_type.out)


def _sets_of(u: isl.UnionSet) -> list[isl.Set]:
    sets: list[isl.Set] = []
    u.foreach_set(sets.append)
    return sets
