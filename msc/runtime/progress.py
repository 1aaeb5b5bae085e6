"""Progress of long runs: a tqdm bar with steps per second and GStencil/s on
stderr (a widget in notebooks), the chunks a run is split into so the bar
moves and snapshots fall on the steps asked for, and Ctrl-C held off until
a chunk's state is whole."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHUNK_SECONDS = 0.2  # a chunk of steps between two updates of the bar, about


class Progress:
    """`with Progress(name, steps, points, enabled) as bar: bar.update(count, seconds)`;
    does nothing when not enabled."""

    def __init__(self, name: str, steps: int, points: int, enabled: bool) -> None:
        self.enabled = bool(enabled)
        self.points = points
        self.seconds_per_step = 0.0  # measured so far (0: nothing run yet)
        self._steps = 0
        self._seconds = 0.0
        self._bar: Any = None
        if self.enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=steps, desc=name, unit="step", file=sys.stderr, dynamic_ncols=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()

    def update(self, count: int, seconds: float) -> None:
        self._steps += count
        self._seconds += seconds
        self.seconds_per_step = self._seconds / self._steps if self._steps else 0.0
        if self._bar is not None:
            rate = self.points * self._steps / self._seconds / 1e9 if self._seconds > 0 else 0.0
            self._bar.set_postfix_str(f"{rate:.3f} GStencil/s", refresh=False)
            self._bar.update(count)


def chunks(step: int, steps: int, every: int | None, bar: Progress) -> Iterator[int]:
    """Step counts adding up to `steps`, from step `step` on: one chunk when nothing
    watches; with `every`, chunks that end on each step it divides; with a bar, chunks
    of about CHUNK_SECONDS (one step first, then as many as that time allows)."""
    left = steps
    while left > 0:
        count = left
        if bar.enabled:
            per_step = bar.seconds_per_step
            count = min(count, max(1, int(CHUNK_SECONDS / per_step)) if per_step > 0 else 1)
        if every:
            count = min(count, every - step % every)
        yield count
        step += count
        left -= count


class ResidualProgress:
    """An iterative solve's bar: digits of residual reduction gained toward the tolerance's,
    with the iteration count and the residual; does nothing when not enabled."""

    def __init__(self, name: str, tol: float, enabled: bool) -> None:
        import math

        self._digits = -math.log10(tol)
        self._bar: Any = None
        self._name = name
        self._iterations = 0
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=round(self._digits, 1), desc=name, unit="digit", file=sys.stderr,
                             dynamic_ncols=True, bar_format="{desc} {percentage:3.0f}%|{bar}|")

    def __enter__(self) -> ResidualProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()

    def __call__(self, residual: float) -> None:
        import math

        self._iterations += 1
        if self._bar is None:
            return
        gained = min(self._digits, -math.log10(residual)) if residual > 0 else self._digits
        self._bar.n = round(max(gained, 0.0), 1)
        self._bar.set_description_str(f"{self._name}: iteration {self._iterations}, residual {residual:.1e}",
                                      refresh=False)
        self._bar.refresh()


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Ctrl-C (SIGINT) within the block raises KeyboardInterrupt when the block ends, not inside
    it: a compiled loop's steps and the step count, or a snapshot being written, stay whole. In
    the main thread under Python's own SIGINT handler; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if caught:
        raise KeyboardInterrupt
