"""What a distributed run of a stencil exchanges, and when (no MPI needed).

Each rank owns a block of the global interior and stores it padded by
`halo` points per dimension on every side that has a neighbour, and by the
stencil's radius (the fixed boundary ring) on a physical dirichlet edge. A
padded block is then exactly the array of a dirichlet stencil, so the local
kernel is the same stencil with boundary "dirichlet" and the global
stencil's radius: it computes the whole padded block but an outer ring of
the radius.

A step runs in phases: a new phase starts at a statement that reads, at a
spatial offset, the new level a statement of the current phase wrote.

- Step by step (depth 1): the halo is the radius; the local kernel computes
  exactly the owned block, and after each phase the new levels of its
  fields that are read at an offset are exchanged (the regions those reads
  reach: faces only for a star stencil, edges and corners too for a box).
- Temporally tiled (depth D > 1): halos are exchanged only every D steps,
  and the ranks compute redundantly into them in between. A phase's new
  levels are exact up to one radius less far out than the levels it reads
  at an offset (older levels, or earlier phases' new ones; a read without
  offset costs nothing), so each step shrinks the exact part of the padded
  block by at most phases * radius, and a halo of phases * radius * D
  keeps the owned block exact for D steps. At the start of each run of D steps every live level
  of every field read is exchanged, over every halo region (faces, edges
  and corners).
Compile-time planning: it serves the Python runtime and the emitted MPI
programs alike.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from msc import ir
from msc.poly.schedule import Schedule


@dataclass(frozen=True)
class LocalStencilIR(ir.StencilIR):
    """A stencil on one rank's padded block: dirichlet, some of the statements,
    and the whole stencil's radius (`ring`) in place of the derived one, so
    that every phase computes the same part of the block."""

    ring: tuple[int, ...] = ()

    @property  # type: ignore[override]
    def radius(self) -> tuple[int, ...]:
        return self.ring


@dataclass(frozen=True)
class Phase:
    """Statements run by one kernel call, then the fields whose new level is
    exchanged (step by step only)."""

    stencil: LocalStencilIR
    exchange: tuple[str, ...]


@dataclass(frozen=True)
class HaloPlan:
    stencil: ir.StencilIR
    local: LocalStencilIR  # all statements: the layout of every rank's arrays
    depth: int  # steps between exchanges of all live levels (1: exchanges after each phase instead)
    halo: tuple[int, ...]  # padding toward a neighbour: the width exchanged
    edge: tuple[int, ...]  # padding on a physical dirichlet edge: the boundary ring
    phases: tuple[Phase, ...]
    directions: dict[str, tuple[tuple[int, ...], ...]]  # per exchanged field: the halo regions filled

    @property
    def exchanged(self) -> tuple[str, ...]:
        """Fields whose halos are ever exchanged (every level at the start of a run)."""
        return tuple(self.directions)

    def interior_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Global interior points per dimension of global arrays of `shape`."""
        if self.stencil.boundary == "periodic":
            return shape
        return tuple(n - 2 * r for n, r in zip(shape, self.stencil.radius))


def _regions(offsets: tuple[int, ...]) -> set[tuple[int, ...]]:
    """The halo regions a read at `offsets` reaches from some interior point:
    each non-zero component keeps its sign or, away from that edge, is 0."""
    choices = [(0, (o > 0) - (o < 0)) if o else (0,) for o in offsets]
    return {v for v in itertools.product(*choices) if any(v)}


def _phases(stencil: ir.StencilIR) -> list[list[ir.Statement]]:
    """The statements in phases (see the module docstring), in order."""
    groups: list[list[ir.Statement]] = [[]]
    for s in stencil.statements:
        written_here = {p.target for p in groups[-1]}
        if any(a.dt == 1 and a.name in written_here and any(a.offsets) for a in s.reads):
            groups.append([])
        groups[-1].append(s)
    return groups


def plan(stencil: ir.StencilIR, schedule: Schedule | None = None) -> HaloPlan:
    """The plan for local kernels under `schedule` (time-tiled: exchanges every depth steps)."""
    depth = schedule.time_depth if schedule and schedule.time_depth else 1
    groups = _phases(stencil)
    reads = [a for s in stencil.statements for a in s.reads]

    def local(name: str, statements: tuple[ir.Statement, ...]) -> LocalStencilIR:
        return LocalStencilIR(name, stencil.ndim, stencil.fields, stencil.params, statements,
                              boundary="dirichlet", dtype=stencil.dtype, loc=stencil.loc, ring=stencil.radius)

    directions: dict[str, set[tuple[int, ...]]] = {}
    if depth == 1:
        for a in reads:
            if any(a.offsets):
                directions.setdefault(a.name, set()).update(_regions(a.offsets))
        halo = stencil.radius
        phases = tuple(
            Phase(local(stencil.name if len(groups) == 1 else f"{stencil.name}_phase{k}", tuple(group)),
                  tuple(dict.fromkeys(s.target for s in group if s.target in directions)))
            for k, group in enumerate(groups))
    else:
        # D steps of reads reach every region (a star stencil's corners too, after two steps)
        every = {v for v in itertools.product(*[(-1, 0, 1) if r else (0,) for r in stencil.radius]) if any(v)}
        directions = {a.name: every for a in reads if every}
        halo = tuple(r * len(groups) * depth for r in stencil.radius)
        phases = (Phase(local(stencil.name, stencil.statements), ()),)
    return HaloPlan(stencil, local(stencil.name, stencil.statements), depth, halo, stencil.radius, phases,
                    {f: tuple(sorted(d)) for f, d in directions.items()})
