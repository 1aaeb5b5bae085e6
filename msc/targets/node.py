"""What a driver program needs from a node target to build and call its kernels.

The MPI driver (`msc/targets/mpi.py`) is written once: every rank runs one node
kernel per phase of its halo plan and exchanges halos between them. A node
target (openmp, serial, cuda, athread, ...) takes part by implementing
`NodeTarget`, and registers itself with `register_node(NAME, factory)`,
which registers its MPI variant `NAME+mpi` too:

- `node_kernel(poly, schedule, tag, box)`: the source files of one kernel
  and the Make rules that turn them into objects. Its entry points are
  named `msc_run_<tag>` (and, with `box`, `msc_run_box_<tag>`), and no other
  global symbol of two kernels of one program may clash (renamed per tag,
  or static).
- `node_build()`: what every kernel of a program shares: the driver's
  CFLAGS, further Make variables the rules use (with defaults), how the
  program is linked and with what, support files (headers, runtime sources and their rules), and
  whether the kernels run OpenMP threads (then the driver picks a per-rank
  thread count and OpenMP wait policy; otherwise `--threads` is passed
  through to `nthreads` and nothing of OpenMP is used).

How a kernel is called: `KernelSignature.c_parameters` (`ctarget.py`), the
same as the in-process entry points, on host memory the driver allocates:
each written field a ring buffer of `slots` padded levels of V points. The
driver writes halos into those levels between calls and reads the new
levels after them, so a node target with memory of its own (a GPU, a
scratchpad) copies in and out inside its entry points, and sets itself up
on its first call (device choice, CPE start-up): the driver has no hook.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from msc.codegen import Target
from msc.poly import PolyIR
from msc.poly.schedule import Schedule


@dataclass(frozen=True)
class MakeRule:
    """`target: deps` then the commands, in a Makefile (commands may use the
    driver's variables `$(MPICC)`, `$(CFLAGS)` and the node's own)."""

    target: str
    deps: tuple[str, ...]
    commands: tuple[str, ...]


@dataclass(frozen=True)
class NodeKernel:
    """One kernel of a node target, ready for a driver's Makefile."""

    files: dict[str, str]  # source files by name, unique to this kernel's tag
    rules: tuple[MakeRule, ...]  # how its files become the objects linked into the program
    entry: str  # msc_run_<tag>
    box_entry: str | None  # msc_run_box_<tag>, when asked for

    @property
    def objects(self) -> tuple[str, ...]:
        return tuple(r.target for r in self.rules)


@dataclass(frozen=True)
class NodeBuild:
    """What all kernels of a node target in one program share."""

    cflags: str  # CFLAGS of the driver's own C files (main.c, halo.c)
    threads: bool  # the kernels run OpenMP threads (nthreads: their count per rank)
    ldlibs: str = "-lm"  # linked after the objects
    link: str = "$(MPICC) $(CFLAGS) -o $@ $(OBJECTS) $(LDLIBS)"  # the command that links the program
    variables: tuple[tuple[str, str], ...] = ()  # further Make variables (name, default), set with ?=
    files: dict[str, str] | None = None  # support files every kernel uses (headers, runtime sources)
    rules: tuple[MakeRule, ...] = ()  # objects made from the support files, linked too


class NodeTarget(Target, Protocol):
    """A target whose kernels a driver program can build and call (see the module docstring)."""

    def node_build(self, **options: Any) -> NodeBuild: ...

    def node_kernel(self, poly: PolyIR, schedule: Schedule | None, tag: str, box: bool,
                    **options: Any) -> NodeKernel: ...
