"""msc.codegen: lowering to the kernel IR, passes, printers, and the targets.

A target module registers itself with `register(name, factory)` when it is
imported; `target_names` imports every module of this package first, and
`get_target` does when the modules named after the target (each `+` part:
`openmp+mpi` -> openmp.py, mpi.py) do not register it, so a new target is
one new module (plus its templates); `register_node` also registers its
MPI variant.
Each target offers `compile` (JIT into a runnable kernel) and `emit` (a
standalone source tree).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from msc.errors import TargetError


class Target(Protocol):
    name: str
    compile_options: tuple[str, ...]  # keyword options of `compile` beyond threads and schedule
    emit_options: tuple[str, ...]  # keyword options of `emit` beyond schedule

    def compile(self, poly: Any, *, threads: int | None, schedule: Any, **options: Any) -> Any: ...

    def emit(self, poly: Any, directory: Any, *, schedule: Any, **options: Any) -> Any: ...


def check_options(target: str, call: str, options: dict[str, Any], allowed: tuple[str, ...]) -> None:
    """A TargetError naming every option of `call` that `target` does not take."""
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) if allowed else "none"
        raise TargetError(f"target {target!r} has no {call} option {', '.join(map(repr, unknown))} "
                          f"(its {call} options: {takes})")


_REGISTRY: dict[str, Callable[[], Target]] = {}


def register(name: str, factory: Callable[[], Target]) -> None:
    """Make target `name` available; `factory()` builds it."""
    if name in _REGISTRY and _REGISTRY[name] is not factory:
        raise TargetError(f"target {name!r} is registered twice")
    _REGISTRY[name] = factory


def register_node(name: str, factory: Callable[[], Target]) -> None:
    """Register node target `name` and `name+mpi`, MPI over it (msc/codegen/mpi.py,
    imported only when that target is built; the node implements msc/codegen/node.py)."""
    register(name, factory)
    register(f"{name}+mpi", functools.partial(_over_mpi, name))


def _over_mpi(node: str) -> Target:
    """The MPI driver over node target `node`; its module is found by name, as every
    target module is (the driver's module imports this registry, not the reverse)."""
    return importlib.import_module(f"{__name__}.mpi").MPITarget(node)


@lru_cache(maxsize=1)
def _discover() -> None:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def _import_named_modules(name: str) -> None:
    """Import the modules a target is conventionally named after (`openmp` ->
    `openmp.py`, `openmp+mpi` -> `openmp.py` and `mpi.py`), so that the usual
    lookup imports one backend instead of all of them (a cached kernel loads
    in milliseconds)."""
    for module in name.split("+"):
        if module.isidentifier() and (Path(__file__).parent / f"{module}.py").is_file():
            importlib.import_module(f"{__name__}.{module}")


def get_target(name: str) -> Target:
    """The registered target `name` (every module is imported only when its
    conventional module does not register it)."""
    if name not in _REGISTRY:
        _import_named_modules(name)
    if name not in _REGISTRY:
        _discover()
    if name not in _REGISTRY:
        raise TargetError(f"unknown target {name!r}; available: {', '.join(target_names())}")
    return _REGISTRY[name]()


def target_names() -> list[str]:
    _discover()
    return sorted(_REGISTRY)
