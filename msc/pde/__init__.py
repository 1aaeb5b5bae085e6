"""PDEs from one operator definition: sparse matrices, explicit kernels, implicit steps, steady solves.

    @msc.operator
    def lap(u, h):
        return (u[x-1, y] + u[x+1, y] + u[x, y-1] + u[x, y+1] - 4*u[x, y]) / h**2

    A, g = lap.matrix(shape=u.shape, h=h, u=u)     # L(u) = A @ u_interior + g
    u = msc.solve(lap, rhs, h=h, u=ring)           # steady: L(u) = rhs
    step = msc.implicit(lap, dt, "crank_nicolson", shape=u0.shape, h=h); step.run(steps=10, u=u0)
    st = msc.explicit(lap, dt, "rk2")              # an ordinary Stencil
"""

from msc.pde.operator import Operator, operator
from msc.pde.steps import ExplicitStencil, Implicit, explicit, implicit, solve

__all__ = ["ExplicitStencil", "Implicit", "Operator", "explicit", "implicit", "operator", "solve"]
