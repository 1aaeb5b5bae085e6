"""The tracing context: which stencil is being traced, and where in the user's
code we are, so every definition error names the stencil and file:line."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

from msc.errors import StencilDefinitionError
from msc.ir import SourceLoc

_MSC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_active: list[str] = []


@contextlib.contextmanager
def tracing(stencil_name: str) -> Iterator[None]:
    _active.append(stencil_name)
    try:
        yield
    finally:
        _active.pop()


def user_location() -> SourceLoc:
    """The innermost stack frame outside the msc package: the user's line."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_MSC_ROOT):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return SourceLoc("<unknown>", 0)
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno)


def definition_error(message: str, loc: SourceLoc | None = None) -> StencilDefinitionError:
    """An error for the stencil being traced, prefixed with file:line and its name."""
    where = loc or user_location()
    name = _active[-1] if _active else "?"
    return StencilDefinitionError(f"{where}: in stencil '{name}': {message}")
