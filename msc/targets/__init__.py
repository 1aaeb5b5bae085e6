"""msc.targets: the platforms code is generated for, one folder per family
(cpu/: openmp, serial; gpu/: cuda, hip; sunway/: athread) and MPI over any
node target (mpi.py), with what they share (ctarget.py: C build, cache and
kernel index; node.py: the node-target protocol MPI drives; the jinja2
templates). Each target module registers itself in msc.codegen's registry
when imported; this package only tells the registry where to look."""

from __future__ import annotations

import sys

from msc.codegen import add_target_package

add_target_package(sys.modules[__name__])
