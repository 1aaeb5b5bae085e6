"""msc.solve's inputs checked: the arrays' shape and the right-hand side stacked over the interior."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from msc.errors import StencilArgumentError

if TYPE_CHECKING:
    from msc.pde.operator import Operator


def split_by_field(L: Operator, values: Mapping[str, Any] | np.ndarray | None, what: str) -> dict[str, Any]:
    """A dict per unknown from a single array (one unknown) or a dict."""
    if values is None:
        return {}
    if isinstance(values, Mapping):
        return dict(values)
    if len(L.ir.unknowns) != 1:
        raise StencilArgumentError(
            f"operator '{L.name}' has unknowns {', '.join(L.ir.unknowns)}: give {what} as a dict by field")
    return {L.ir.unknowns[0]: values}


def non_finite(values: np.ndarray, indices: str = "") -> str:
    """Where `values` is NaN or infinite ("nan at (5, 5) and at 3 more points", `indices` saying after the
    position what it indexes), or "" when it is finite."""
    bad = np.argwhere(~np.isfinite(values)) if values.dtype.kind in "fc" else ()
    if not len(bad):
        return ""
    at = tuple(int(i) for i in bad[0])
    return f"{values[at]} at {at}{indices}" + (f" and at {len(bad) - 1} more points" if len(bad) > 1 else "")


def checked_problem(L: Operator, rhs: Any, inputs: Mapping[str, Any],
                    shape: tuple[int, ...] | None) -> tuple[tuple[int, ...], np.ndarray]:
    """msc.solve's arrays' shape and the stacked right-hand side over the interior (unknowns in order)."""
    rhs_by = split_by_field(L, rhs, "rhs")
    if set(rhs_by) != set(L.ir.unknowns):
        raise StencilArgumentError(f"operator '{L.name}': rhs must give {', '.join(L.ir.unknowns)}")
    for u in L.ir.unknowns:
        bad = non_finite(np.asarray(rhs_by[u]), " (interior indices)")
        if bad:
            raise StencilArgumentError(f"operator '{L.name}': rhs for '{u}' is {bad}")
        if np.iscomplexobj(rhs_by[u]):
            raise StencilArgumentError(f"operator '{L.name}': rhs for '{u}' is complex; msc solves real problems "
                                       "(solve the real and imaginary parts apart)")
        given = inputs.get(u)
        if given is not None and not isinstance(given, np.ndarray):
            raise StencilArgumentError(f"operator '{L.name}': '{u}' (its ring values) must be a numpy array, "
                                       f"got {type(given).__name__}")
    taken_from = ""  # where the arrays' shape came from, when not from shape= or the rhs
    if shape is None:
        first = inputs.get(L.ir.unknowns[0])
        if first is not None:
            shape = tuple(first.shape)
            taken_from = f" (the interior of '{L.ir.unknowns[0]}', whose shape is {shape})"
        else:
            grow = 0 if L.ir.boundary == "periodic" else 2
            shape = tuple(n + grow * r for n, r in zip(np.shape(rhs_by[L.ir.unknowns[0]]), L.radius))
    shape = tuple(shape)
    n = L.interior_shape(shape)
    for u in L.ir.unknowns:
        given = inputs.get(u)
        if given is not None and given.shape != shape:
            raise StencilArgumentError(f"operator '{L.name}': '{u}' has shape {given.shape}, and the problem's "
                                       f"arrays have shape {shape}")
    for u in L.ir.unknowns:
        if np.shape(rhs_by[u]) != n:
            raise StencilArgumentError(
                f"operator '{L.name}': rhs for '{u}' must have the interior's shape {n}{taken_from}, "
                f"got {np.shape(rhs_by[u])}")
    return shape, np.concatenate([np.asarray(rhs_by[u], np.float64).reshape(-1) for u in L.ir.unknowns])
