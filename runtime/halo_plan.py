"""What a distributed run of a stencil exchanges, and when (no MPI needed).

Each rank owns a block of the global interior and stores it padded by a
halo of `radius * depth` points per dimension (depth: the time-tile depth of
a temporally tiled schedule; 1 for the step-by-step schedule). A padded
block is exactly the array of a dirichlet stencil on the block, so the
local kernel is the same stencil with boundary "dirichlet" and its radius
pinned to the halo width.

A step runs in phases: a new phase starts at a statement that reads, at a
spatial offset, the new level a statement of the current phase wrote,
because that level's halo must be exchanged in between. After each phase
the new levels of its fields that are read at an offset are exchanged; the
halo regions exchanged for a field are those its reads reach (faces only
for a star stencil, edges and corners too for a box).
This module serves the Python runtime and the emitted MPI programs alike.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from msc import ir

TIME_TILE_DEPTH = 1  # the step-by-step schedule; temporal tiling widens halos by its depth


@dataclass(frozen=True)
class LocalStencilIR(ir.StencilIR):
    """A stencil on one rank's padded block: dirichlet, some of the statements,
    and `halo` (the padding of the block) in place of the derived radius."""

    halo: tuple[int, ...] = ()

    @property  # type: ignore[override]
    def radius(self) -> tuple[int, ...]:
        return self.halo


@dataclass(frozen=True)
class Phase:
    """Statements run by one kernel call, then the fields whose new level is exchanged."""

    stencil: LocalStencilIR
    exchange: tuple[str, ...]


@dataclass(frozen=True)
class HaloPlan:
    stencil: ir.StencilIR
    local: LocalStencilIR  # all statements: the layout of every rank's arrays
    halo: tuple[int, ...]
    phases: tuple[Phase, ...]
    directions: dict[str, tuple[tuple[int, ...], ...]]  # per field read at an offset

    @property
    def exchanged(self) -> tuple[str, ...]:
        """Fields whose halos are ever exchanged (all their levels once at the start)."""
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


def plan(stencil: ir.StencilIR, depth: int = TIME_TILE_DEPTH) -> HaloPlan:
    halo = tuple(r * depth for r in stencil.radius)
    directions: dict[str, set[tuple[int, ...]]] = {}
    for s in stencil.statements:
        for a in s.reads:
            if any(a.offsets):
                directions.setdefault(a.name, set()).update(_regions(a.offsets))

    groups: list[list[ir.Statement]] = [[]]
    for s in stencil.statements:
        written_here = {p.target for p in groups[-1]}
        if any(a.dt == 1 and a.name in written_here and any(a.offsets) for a in s.reads):
            groups.append([])
        groups[-1].append(s)

    def local(name: str, statements: tuple[ir.Statement, ...]) -> LocalStencilIR:
        return LocalStencilIR(name, stencil.ndim, stencil.fields, stencil.params, statements,
                              boundary="dirichlet", dtype=stencil.dtype, loc=stencil.loc, halo=halo)

    phases = []
    for k, group in enumerate(groups):
        name = stencil.name if len(groups) == 1 else f"{stencil.name}_phase{k}"
        exchange = tuple(dict.fromkeys(s.target for s in group if s.target in directions))
        phases.append(Phase(local(name, tuple(group)), exchange))
    return HaloPlan(stencil, local(stencil.name, stencil.statements), halo, tuple(phases), {f: tuple(sorted(d)) for f, d in directions.items()})
