"""msc.codegen: backends that turn StencilIR + a schedule into source code.

A registry maps target names to backends; each backend offers `compile`
(JIT into a runnable kernel) and `emit` (a standalone source tree).
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from msc.errors import TargetError


class Target(Protocol):
    name: str

    def compile(self, poly: Any, *, threads: int | None, schedule: Any) -> Any: ...

    def emit(self, poly: Any, directory: Any, *, schedule: Any) -> Any: ...


_TARGETS = {"openmp": ("msc.codegen.openmp", "OpenMPTarget"), "openmp+mpi": ("msc.codegen.openmp_mpi", "OpenMPMPITarget")}


def get_target(name: str) -> Target:
    """The backend for `name` (only its own modules are imported)."""
    if name not in _TARGETS:
        raise TargetError(f"unknown target {name!r}; available: {', '.join(sorted(_TARGETS))}")
    module, cls = _TARGETS[name]
    return getattr(importlib.import_module(module), cls)()


def target_names() -> list[str]:
    return sorted(_TARGETS)
