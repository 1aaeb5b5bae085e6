"""What the scripts run under mpiexec share: the communicator, stencils used
by several of them, and the check that every rank raised the same error."""

from __future__ import annotations

from typing import Any, Callable

from mpi4py import MPI

import msc
from msc import t, x, y
from msc.runtime.distributed import DistributedError

comm = MPI.COMM_WORLD


@msc.stencil
def heat(u, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1] - 4 * u[t, x, y])


@msc.stencil(boundary="periodic")
def box9_periodic(u):
    u[t + 1, x, y] = sum(0.1 * (1 + abs(i) + 2 * abs(j)) * u[t, x + i, y + j] for i in (-1, 0, 1) for j in (-1, 0, 1)) / 2


def agreed_error(action: Callable[[], Any]) -> str | None:
    """Run `action` on every rank: the DistributedError message all ranks
    raised (None when none raised), or a line saying they disagreed."""
    try:
        action()
        message = None
    except DistributedError as e:
        message = str(e)
    messages = comm.allgather(message)
    return messages[0] if len(set(messages)) == 1 else f"not on every rank: {messages}"
