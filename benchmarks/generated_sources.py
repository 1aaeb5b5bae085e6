"""Write the sources msc generates for a fixed set of stencils and schedules
into a directory, so that two versions of the code generator can be compared
with `diff -r` (a refactor of the generator should change no text):

    python3 benchmarks/generated_sources.py OUT_DIR

The set: the four benchmark stencils (heat2d, box2d9p, heat3d, box3d27p)
under the default, tiled, time-tiled, streaming-store and prefetch schedules
(plus the MPI box entry point), and the 48 generated test stencils under a
random legal schedule each, as OpenMP C; and the emitted trees of every
emitting target (openmp, openmp+mpi, serial+mpi, cuda, hip, athread on both
chips, athread+mpi) for the four benchmark stencils and every fourth
generated stencil, default and time-tiled (and, for cuda and hip, with
the target's own time tiles in shared memory and with tensor cores),
under OUT_DIR/trees/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from stencil_gen import generate
from test_schedules import random_schedule

import msc
from benchmarks.stencils import CASES, msc_stencil
from msc.codegen import get_target
from msc.errors import ScheduleError

SCHEDULES = {
    "default": msc.Schedule(),
    "tiled": None,  # per dimension count, below
    "time_tile": None,
    "stream_stores": msc.Schedule().stream_stores(),
    "prefetch": msc.Schedule().prefetch(64),
}


def _schedules(ndim: int) -> dict[str, msc.Schedule]:
    out = dict(SCHEDULES)
    tiles = {"x": 16, "y": 16, "z": 64}
    out["tiled"] = msc.Schedule().tile(**{d: tiles[d] for d in "xyz"[:ndim]}).parallel("x_tile")
    out["time_tile"] = msc.Schedule().time_tile(4, x=32).parallel("x_tile")
    out["cached"] = msc.Schedule().tile(**{d: 8 for d in "xyz"[:ndim]}).cache_read("u").cache_write("u")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the directory to write the sources into")
    out = p.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    target = get_target("openmp")
    for case in CASES:
        st = msc_stencil(case)
        for name, schedule in _schedules(case.ndim).items():
            (out / f"{case.name}-{name}.c").write_text(target.source(st.poly(), schedule))
        (out / f"{case.name}-box.c").write_text(target.source(st.poly(), None, box=True))
    for seed in range(48):
        case = generate(seed)
        schedule = random_schedule(seed, case.stencil)
        try:
            text = target.source(case.stencil.poly(case.dtype), schedule)
        except ScheduleError as e:
            text = f"ScheduleError: {e}\n"
        (out / f"gen{seed:02d}.c").write_text(text)
    trees(out / "trees")


TREES = {"openmp": {}, "openmp+mpi": {}, "serial+mpi": {}, "cuda": {}, "hip": {},
         "athread": {"chip": "sw26010pro"}, "athread-sw26010": {"chip": "sw26010"}, "athread+mpi": {}}
KINDS = {"default": None, "time_tile": msc.Schedule().time_tile(2, x=8)}
# the GPU family's own kernels besides: time tiles in shared memory (the target's default tile) and tensor cores
# (7 steps: heat3d's rings go to dynamic shared memory)
GPU_KINDS = {"shared_time_tile": msc.Schedule().time_tile(3), "deep_time_tile": msc.Schedule().time_tile(7),
             "tensor_cores": msc.Schedule().tensor_cores("fp64")}


def trees(out: Path) -> None:
    """Every emitting target's tree (a ScheduleError's text where a target refuses the schedule)."""
    stencils = [(case.name, msc_stencil(case), "float64") for case in CASES]
    stencils += [(f"gen{seed:02d}", generate(seed).stencil, generate(seed).dtype) for seed in range(0, 48, 4)]
    for label, options in TREES.items():
        target = label.split("-")[0]
        for name, st, dtype in stencils:
            for kind, schedule in {**KINDS, **(GPU_KINDS if target in ("cuda", "hip") else {})}.items():
                where = out / label / f"{name}-{kind}"
                try:
                    st.emit(target, where, dtype=dtype, schedule=schedule, **options)
                except ScheduleError as e:
                    where.mkdir(parents=True, exist_ok=True)
                    (where / "ScheduleError").write_text(f"{e}\n")


if __name__ == "__main__":
    main()
