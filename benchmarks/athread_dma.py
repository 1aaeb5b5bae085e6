"""DMA volume of the athread target's auto-tuned tiles, counted by the athread
emulator, against the minimum (every level read once, every field written
once), for the four standard stencils on both chips. Writes JSON.

    python3 benchmarks/athread_dma.py --json results.json [--tiles 1] [--only heat2d,box3d27p]
        [--previous earlier.json]

The schedule is the one the cost model chooses (`schedule="auto"`; its
prediction is printed, and the model's own count of bytes, transfers and
contiguous blocks is recorded beside the emulator's: they must agree). The
mean block (DMA bytes / blocks) decides the DMA engine's bandwidth; the
model's bandwidth for those blocks is recorded against its ceiling, and so is the
model's fastest candidate of all, DMA floor or not (where it differs from the
choice, the difference is what the floor costs by the model: ADR 0056). These are
counts, not timings: the emulator runs on a CPU and has no notion of Sunway
time. Every step of a spatial tile (every time tile of a temporal one) moves
the same bytes, so one step (one time tile: `depth` steps) is counted by
default. `--previous` copies each case's bytes per point from an earlier
result file beside the new one.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stencils import CASES, msc_stencil  # noqa: E402

from msc.runtime.athread_emu import AthreadKernel  # noqa: E402
from msc.targets.sunway.athread import PLATFORMS  # noqa: E402
from msc.targets.sunway.athread_model import fastest  # noqa: E402
from msc.targets.sunway.chips import CHIPS  # noqa: E402
from msc.tune.tuner import model_choice  # noqa: E402


def measure(case: Any, chip: str, tiles: int) -> dict[str, Any]:
    stencil = msc_stencil(case)
    shape = (case.n,) * case.ndim
    # what compile(schedule="auto") chooses when it runs on this shape
    model = model_choice(stencil.poly(), shape, 1, PLATFORMS[chip]).estimate.detail
    print(model.describe(), flush=True)
    best = fastest(stencil.ir, shape, chip)
    steps = max(model.schedule.time_depth, 1) * tiles
    kernel = stencil.compile(target="athread", schedule=model.schedule, chip=chip)
    assert isinstance(kernel, AthreadKernel)
    kernel.run(steps=steps, u=np.random.default_rng(0).random(shape))
    run = kernel.last_run
    points = run.points  # computed points per step (one statement)
    return dict(
        stencil=case.name, chip=chip, shape=[case.n] * case.ndim, steps=steps, schedule=str(model.schedule),
        get_bytes=run.get_bytes, put_bytes=run.put_bytes, transfers=run.transfers, dma_blocks=run.dma_blocks,
        mean_dma_block=run.mean_dma_block, peak_ldm=run.peak_ldm,
        bytes_per_point=run.dma_bytes / (points * steps), min_bytes_per_point=model.min_bytes_per_point,
        model_bytes_per_step=model.get_bytes + model.put_bytes, model_transfers_per_step=model.transfers,
        model_blocks_per_step=model.dma_blocks, model_dma_gb_s=model.dma_gb_s,
        model_ceiling_gb_s=CHIPS[chip].ceiling_gb_s, model_ms_per_step=model.step_s * 1e3,
        emulator_seconds=run.seconds,
        # the model's fastest candidate of all, DMA floor or not (the model's figures, not the emulator's)
        fastest_schedule=str(best.schedule), fastest_ms_per_step=best.step_s * 1e3,
        fastest_bytes_per_point=best.bytes_per_point, fastest_mean_dma_block=best.mean_dma_block,
        fastest_dma_gb_s=best.dma_gb_s,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--tiles", type=int, default=1, help="steps to count (time tiles: depths)")
    parser.add_argument("--only", default="")
    parser.add_argument("--previous", default="", help="an earlier result file: its bytes per point are copied")
    a = parser.parse_args()
    only = set(filter(None, a.only.split(",")))
    previous = {}
    if a.previous:
        earlier = json.loads(Path(a.previous).read_text())["results"]
        previous = {(r["stencil"], r["chip"]): r["bytes_per_point"] for r in earlier}
    rows = []
    for case in CASES:
        if only and case.name not in only:
            continue
        for chip in CHIPS:
            row = measure(case, chip, a.tiles)
            if (case.name, chip) in previous:
                row["previous_bytes_per_point"] = previous[case.name, chip]
            agree = (round(row["model_bytes_per_step"] * row["steps"]) == row["get_bytes"] + row["put_bytes"]
                     and round(row["model_blocks_per_step"] * row["steps"]) == row["dma_blocks"])
            print(f"{case.name} {chip}: {row['schedule']}: {row['bytes_per_point']:.3f} DMA bytes/point "
                  f"(minimum {row['min_bytes_per_point']:.1f}), {row['transfers']} transfers, mean block "
                  f"{row['mean_dma_block']:.0f} bytes ({row['model_dma_gb_s']:.1f} of {row['model_ceiling_gb_s']:.1f} "
                  f"GB/s by the model), peak LDM {row['peak_ldm']} bytes; model count "
                  f"{'agrees' if agree else 'DIFFERS'}", flush=True)
            rows.append(row)
    out = dict(machine=platform.node(), note="counts under the athread emulator, not timings", results=rows)
    Path(a.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
