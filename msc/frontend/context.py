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
#: per stencil being traced, the errors `raised` noted (the first is what the user did wrong; a library
#: that catches it may try other conversions, which raise the others)
_raised: list[list[StencilDefinitionError]] = []


@contextlib.contextmanager
def tracing(stencil_name: str) -> Iterator[None]:
    """Trace `stencil_name`. A library that catches a definition error raised inside it and raises
    its own (NumPy's IndexError when a parameter indexes an array) gets the definition error back."""
    _active.append(stencil_name)
    _raised.append([])
    try:
        yield
    except StencilDefinitionError:
        raise
    except Exception as error:
        if _raised[-1]:
            raise _raised[-1][0] from error
        raise
    finally:
        _active.pop()
        _raised.pop()


def raised(error: StencilDefinitionError) -> StencilDefinitionError:
    """`error`, noted as raised in the user's code, where a library may catch it and raise another."""
    if _raised:
        _raised[-1].append(error)
    return error


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
