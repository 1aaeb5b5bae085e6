"""msc.codegen: the target-neutral middle (kernel IR, lowering, halo plans,
printers) and the registry of targets.

The targets themselves live in a layer above (msc/targets/), so this package
never imports them: a package of target modules announces itself with
`add_target_package` (msc/targets/__init__.py does, and `import msc` imports
it), and a target module registers itself with `register(name, factory)`
when it is imported. `get_target` imports only the modules named after the
target (each `+` part: `openmp+mpi` -> cpu/openmp.py, mpi.py), and every
module when those do not register it, so a new target is one new module
(plus its templates). `register_node` also registers the node's MPI variant,
built by the wrapper that the `mpi` module registers with `register_wrapper`.
Each target offers `compile` (JIT into a runnable kernel) and `emit` (a
standalone source tree).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any, Protocol

from msc.errors import ScheduleError, TargetError


class Target(Protocol):
    name: str
    compile_options: tuple[str, ...]  # keyword options of `compile` beyond threads and schedule
    emit_options: tuple[str, ...]  # keyword options of `emit` beyond schedule
    schedule_options: tuple[str, ...]  # the schedule's target options it takes (msc.poly.schedule.TARGET_OPTIONS)

    def compile(self, poly: Any, *, threads: int | None, schedule: Any, **options: Any) -> Any: ...

    def emit(self, poly: Any, directory: Any, *, schedule: Any, **options: Any) -> Any: ...


def check_options(target: str, call: str, options: dict[str, Any], allowed: tuple[str, ...],
                  arguments: tuple[str, ...] = ()) -> None:
    """A TargetError naming every option of `call` that `target` does not take, and the option or
    argument of `call` itself (`arguments`) each was likely meant to be."""
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) if allowed else "none"
        meant = [f"{u!r} looks like a misspelling of {close[0]!r}" for u in unknown
                 if (close := difflib.get_close_matches(u, (*arguments, *allowed), n=1))]
        hint = "; " + "; ".join(meant) if meant else ""
        raise TargetError(f"target {target!r} has no {call} option {', '.join(map(repr, unknown))} "
                          f"(its {call} options: {takes}){hint}")


#: How an error names a target option it refuses (the primitive otherwise).
_OPTION_NOUNS = {"tensor_cores": "tensor cores"}


def check_schedule_options(target: str, schedule: Any, taken: tuple[str, ...]) -> None:
    """A ScheduleError when `schedule` uses a target option that `target` does not
    take, naming the option and the targets that take it."""
    refused = [o for o in (schedule.target_options() if schedule is not None else ()) if o not in taken]
    if not refused:
        return
    option = refused[0]
    takers = [name for name in target_names() if option in getattr(_REGISTRY[name](), "schedule_options", ())]
    noun = _OPTION_NOUNS.get(option, f"{option}()")
    on = f"target{'s' if len(takers) > 1 else ''} {', '.join(map(repr, takers))}"
    where = ("no target takes it" if not takers else f"they run on {on}" if option in _OPTION_NOUNS
             else f"it is an option of {on}")
    takes = ", ".join(f"{o}()" for o in taken) or "none"
    raise ScheduleError(f"target {target!r} has no {noun}; {where} (the target options of {target!r}: {takes})")


_REGISTRY: dict[str, Callable[[], Target]] = {}
_WRAPPERS: dict[str, Callable[[str], Target]] = {}
_PACKAGES: list[Any] = []  # the packages of target modules (module objects with __path__)


def add_target_package(package: Any) -> None:
    """Let `get_target` and `target_names` find target modules in `package`."""
    if package not in _PACKAGES:
        _PACKAGES.append(package)
        _module_names.cache_clear()


def register(name: str, factory: Callable[[], Target]) -> None:
    """Make target `name` available; `factory()` builds it."""
    if name in _REGISTRY and _REGISTRY[name] is not factory:
        raise TargetError(f"target {name!r} is registered twice")
    _REGISTRY[name] = factory


def register_wrapper(name: str, wrap: Callable[[str], Target]) -> None:
    """Register `wrap(node)`, the target `<node>+<name>` over a node target (MPI's driver)."""
    _WRAPPERS[name] = wrap


def register_node(name: str, factory: Callable[[], Target]) -> None:
    """Register node target `name` and `name+mpi`, MPI over it (the `mpi` module's
    wrapper, imported only when that target is built; the node implements
    msc/targets/node.py)."""
    register(name, factory)
    register(f"{name}+mpi", functools.partial(_wrapped, "mpi", name))


def _wrapped(wrapper: str, node: str) -> Target:
    if wrapper not in _WRAPPERS:
        _import_named_modules(wrapper)
    return _WRAPPERS[wrapper](node)


@functools.lru_cache(maxsize=1)
def _module_names() -> tuple[str, ...]:
    """Every module of the target packages, by full name (found without importing them)."""
    names: list[str] = []
    for package in _PACKAGES:
        names += [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".") if not m.ispkg]
    return tuple(names)


def _discover() -> None:
    for module in _module_names():
        importlib.import_module(module)


def _import_named_modules(name: str) -> None:
    """Import the modules a target is conventionally named after (`openmp` ->
    `.../openmp.py`, `openmp+mpi` -> `.../openmp.py` and `.../mpi.py`), so that
    the usual lookup imports one backend instead of all of them (a cached
    kernel loads in milliseconds)."""
    parts = set(name.split("+"))
    for module in _module_names():
        if module.rsplit(".", 1)[-1] in parts:
            importlib.import_module(module)


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
