"""msc: write a stencil once as a decorated Python function; run it in numpy,
compile it for a target (OpenMP C, serial C, CUDA, HIP, Sunway athread; MPI
over any of them), or emit standalone sources.

    from msc import t, x, y
    @msc.stencil
    def heat(u, alpha):
        u[t+1, x, y] = u[t, x, y] + alpha * (u[t, x-1, y] + u[t, x+1, y]
                                             + u[t, x, y-1] + u[t, x, y+1] - 4 * u[t, x, y])
"""


from msc import targets as _targets  # noqa: F401 - tells the target registry where the targets live
from msc.errors import (
    CompileError,
    ConvergenceError,
    MscError,
    NonFiniteWarning,
    ScheduleError,
    StencilArgumentError,
    StencilDefinitionError,
    StencilDefinitionWarning,
    TargetError,
)
from msc.frontend.symbols import abs, atan2, cos, exp, floor, log, maximum, minimum, sin, sqrt, t, tanh, where, x, y, z
from msc.ir.linear import NonLinearError
from msc.pde import Implicit, Operator, explicit, implicit, operator, solve
from msc.poly.schedule import Schedule
from msc.runtime import distributed as _distributed  # noqa: F401 - plugs the MPI driver into the kernels
from msc.stencil import Stencil, load_stencil, stencil
from msc.version import __version__

__all__ = [
    "CompileError", "ConvergenceError", "MscError", "ScheduleError", "StencilArgumentError", "StencilDefinitionError",
    "StencilDefinitionWarning", "TargetError", "NonFiniteWarning", "NonLinearError", "Operator", "Implicit",
    "operator", "explicit", "implicit", "solve",
    "Schedule", "Stencil", "stencil", "load_stencil", "t", "x", "y", "z",
    "sqrt", "exp", "log", "sin", "cos", "tanh", "floor", "abs", "minimum", "maximum", "atan2", "where", "__version__",
]
