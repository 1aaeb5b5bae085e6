"""The msc error hierarchy: every failure a user can cause is one of these."""

from __future__ import annotations


class MscError(Exception):
    """Base class of every error msc raises on purpose."""


class StencilDefinitionError(MscError):
    """The stencil's definition is invalid (found while tracing it)."""


class StencilArgumentError(MscError):
    """The arguments given to run/reference do not fit the stencil."""


class ScheduleError(MscError):
    """A schedule is malformed or violates a dependence."""


class CompileError(MscError):
    """The C/CUDA compiler failed; carries its output and the source path."""

    def __init__(self, message: str, source_path: str = "", output: str = "") -> None:
        super().__init__(message)
        self.source_path = source_path
        self.output = output


class TargetError(MscError):
    """An unknown or unavailable code-generation target."""


class EmitError(MscError):
    """A standalone source tree could not be written (nothing partial is left)."""


class CheckpointError(MscError):
    """A checkpoint cannot be read, or belongs to another stencil, dtype or shape."""


class ConvergenceError(MscError):
    """An iterative solve did not reach its tolerance; `residuals` is its relative residual history."""

    def __init__(self, message: str, residuals: list[float]) -> None:
        super().__init__(message)
        self.residuals = residuals


class NonFiniteWarning(RuntimeWarning):
    """A run left NaN or infinite values in a field (an unstable step, most often)."""


class StencilDefinitionWarning(UserWarning):
    """A stencil definition that is valid but most likely not what was meant (a parameter no statement reads)."""


class CacheWarning(UserWarning):
    """A damaged cache entry was found and is being rebuilt."""
