"""Helpers for the fault-injection suite (docs/reliability.md lists every fault)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Callable

import pytest

import msc
import msc.runtime.build as build
from msc import t, x, y

AS_ROOT = os.geteuid() == 0  # root passes every permission check


@msc.stencil
def heat(u, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1]
                                           - 4 * u[t, x, y])


class StandInKernel:
    """Stands in for a compiled kernel in the tuner: `start` and `follow` give a simulation whose
    `advance` calls `run` (which sets `last_run.seconds`)."""

    def __init__(self) -> None:
        self.last_run = type("Stats", (), {"seconds": 0.0})()

    def run(self, steps: int, threads: int | None = None, **inputs) -> dict:
        raise NotImplementedError

    def start(self, threads: int | None = None, **inputs) -> StandInSimulation:
        return StandInSimulation(self, inputs)

    def follow(self, previous: StandInSimulation) -> StandInSimulation:
        return StandInSimulation(self, previous.inputs)


class StandInSimulation:
    def __init__(self, kernel: StandInKernel, inputs: dict) -> None:
        self.kernel, self.inputs = kernel, inputs

    def advance(self, steps: int) -> None:
        self.kernel.run(steps, **self.inputs)


def _refused(path: Path) -> PermissionError:
    return PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


@pytest.fixture
def deny_read(monkeypatch) -> Callable[[Path], None]:
    """Make a file unreadable: chmod 000, or (as root) the EACCES the kernel would give, raised by the cache's read."""

    def apply(path: Path) -> None:
        if not AS_ROOT:
            os.chmod(path, 0)
            return
        real = build._file_digest

        def digest(p: Path) -> str:
            if p == path:
                raise _refused(p)
            return real(p)

        monkeypatch.setattr(build, "_file_digest", digest)

    return apply


@pytest.fixture
def deny_write(monkeypatch) -> Callable[[Path], None]:
    """Make a directory read-only: chmod 0555, or (as root) EACCES on creating anything in it."""

    def apply(directory: Path) -> None:
        if not AS_ROOT:
            os.chmod(directory, 0o555)
            return
        real = tempfile.mkdtemp

        def mkdtemp(*args, **kwargs):
            if Path(kwargs.get("dir", "")) == directory:
                raise _refused(directory / str(kwargs.get("prefix", "")))
            return real(*args, **kwargs)

        monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)

    return apply


@msc.stencil
def diffuse(u, c):
    """Two fields: u evolves, c is a time-invariant coefficient."""
    u[t + 1, x, y] = u[t, x, y] + c[x, y] * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1]
                                              - 4 * u[t, x, y])
