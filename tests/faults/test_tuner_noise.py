"""A noisy machine must not decide the tuner's choice: one lucky timing of a
schedule that is slower in truth loses to the schedule that is steadily
faster, because the finalists are timed again, interleaved, and compared by
their medians."""

from __future__ import annotations

from collections import Counter

import numpy as np
from conftest import StandInKernel, heat

from msc.poly.schedule import Schedule
from msc.tune.tuner import AutoKernel, _order, candidates, trial_steps_for

STEPS = 8


class _ScriptedKernel(StandInKernel):
    """A stand-in kernel whose ms/step per timed run (steps > 1) follows `script`."""

    def __init__(self, name: str, script, counts: Counter) -> None:
        super().__init__()
        self.name, self.script, self.counts = name, script, counts

    def run(self, steps: int, threads: int | None = None, **inputs) -> dict:
        ms = 1.0
        if steps > 1:
            ms = self.script(self.name, self.counts[self.name])
            self.counts[self.name] += 1
        self.last_run.seconds = ms * steps / 1e3
        return {"u": inputs["u"]}


def test_one_lucky_timing_does_not_win(tmp_path, monkeypatch):
    monkeypatch.setenv("MSC_CACHE_DIR", str(tmp_path))
    pool = _order(heat.poly(), candidates(heat.poly(), (40, 40), "all", trial_steps_for(STEPS)))
    lucky, steady = pool[1], pool[2]
    assert Schedule() not in (lucky, steady)

    def script(name: str, n: int) -> float:
        if name == str(lucky):
            return 0.3 if n == 0 else 1.2  # one lucky moment, then slower than the default
        if name == str(steady):
            return 0.8
        return 1.0 if name == str(Schedule()) else 2.0

    counts: Counter = Counter()
    kernel = AutoKernel(heat.poly(), lambda s, n: _ScriptedKernel(str(s), script, counts), threads=1, budget_s=60.0,
                        echo=False)
    kernel.run(steps=STEPS, u=np.zeros((40, 40)), alpha=0.1)
    report = kernel.report
    assert report.schedule == steady.with_threads(1), report.schedule
    assert report.ms_per_step == 0.8 and report.default_ms_per_step == 1.0
    assert counts[str(lucky)] >= 3 and counts[str(steady)] >= 3  # timed again, several times each
