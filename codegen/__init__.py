"""msc.codegen: backends that turn StencilIR + a schedule into source code.

A registry maps target names to backends; each backend offers `compile`
(JIT into a runnable kernel) and `emit` (a standalone source tree).
"""

from __future__ import annotations

from typing import Any, Protocol

from msc.errors import TargetError


class Target(Protocol):
    name: str

    def compile(self, poly: Any, *, threads: int | None, schedule: Any) -> Any: ...

    def emit(self, poly: Any, directory: Any, *, schedule: Any) -> Any: ...


def _targets() -> dict[str, Target]:
    from msc.codegen.openmp import OpenMPTarget
    from msc.codegen.openmp_mpi import OpenMPMPITarget

    return {"openmp": OpenMPTarget(), "openmp+mpi": OpenMPMPITarget()}


def get_target(name: str) -> Target:
    targets = _targets()
    if name not in targets:
        raise TargetError(f"unknown target {name!r}; available: {', '.join(sorted(targets))}")
    return targets[name]


def target_names() -> list[str]:
    return sorted(_targets())
