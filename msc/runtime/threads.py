"""The default OpenMP thread count of a run: the cores no other process is using right now.

A compiled time loop ends every step at a barrier. When other processes keep
the cores busy, one of the kernel's threads is descheduled and every step waits
a scheduler slice for it: measured on 2 cores with two busy processes, 200
steps of a 256^2 heat stencil took 0.50 s with 2 threads against 0.02 s with
one. So a run given no thread count (no `threads=`, no OMP_NUM_THREADS) takes
the cores minus the other processes' running threads, at least one. The count
is read from /proc/loadavg's running tasks (a snapshot, least of three reads to
skip blips) less this process's own running threads (/proc/self/task); where
/proc is missing it is all the cores.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

SAMPLES = 3
#: the most threads a kernel or factorization is given: beyond the largest nodes' hardware threads,
#: and below what makes the OpenMP runtime fail to start them (which ends the process)
MAX_THREADS = 1024


def _running_tasks() -> int | None:
    """Tasks running or runnable on the machine now (/proc/loadavg's fourth field), None without /proc."""
    try:
        return int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def _own_running_threads() -> int:
    """This process's threads that are running now (state R in /proc/self/task/*/stat)."""
    count = 0
    try:
        for task in Path("/proc/self/task").iterdir():
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            if stat[stat.rindex(")") + 2:].startswith("R"):
                count += 1
    except OSError:
        return 1
    return max(count, 1)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def free_cores(cores: int | None = None, running: Callable[[], int | None] = _running_tasks,
               own: Callable[[], int] = _own_running_threads) -> int:
    """The cores not busy with other processes' threads (at least 1)."""
    cores = cores or usable_cores()
    others = None
    for _ in range(SAMPLES):
        total = running()
        if total is None:
            return cores
        busy = max(0, total - own())
        others = busy if others is None else min(others, busy)
    return max(1, cores - (others or 0))


def default_threads() -> int:
    """The thread count for a run given none: 0 (OpenMP's own) when OMP_NUM_THREADS is set, else the free cores."""
    if os.environ.get("OMP_NUM_THREADS"):
        return 0
    return free_cores()
