"""Solve the 2D Poisson problem -lap(u) = f on the unit square (Dirichlet,
5-point finite differences) with swCholesky and print the residual and the
error against the exact solution u = sin(pi x) sin(pi y).

    python3 examples/cholesky_poisson.py [m]      # m x m interior grid, default 300
"""

from __future__ import annotations

import sys

import numpy as np
import scipy.sparse as sp

from msc.solvers import cholesky


def poisson_2d(m: int) -> tuple[sp.csc_array, np.ndarray, np.ndarray]:
    h = 1.0 / (m + 1)
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(m, m))
    I = sp.eye_array(m)
    A = sp.csc_array(sp.kron(T, I) + sp.kron(I, T)) / h**2
    x = np.arange(1, m + 1) * h
    X, Y = np.meshgrid(x, x, indexing="ij")
    exact = np.sin(np.pi * X) * np.sin(np.pi * Y)
    f = 2 * np.pi**2 * exact
    return A, f.ravel(), exact.ravel()


def main() -> None:
    m = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    A, f, exact = poisson_2d(m)
    F = cholesky(A)
    u = F.solve(f)
    residual = np.linalg.norm(A @ u - f) / np.linalg.norm(f)
    error = np.abs(u - exact).max()
    print(f"n = {A.shape[0]:,}, ordering {F.stats['ordering']}, nnz(L) = {F.nnz:,}, "
          f"{F.stats['supernodes']:,} supernodes")
    print(f"analysis {F.timings['ordering'] + F.timings['symbolic']:.3f} s, numeric {F.timings['numeric']:.3f} s "
          f"({F.stats['gflops']:.1f} GFLOP/s), solve {F.timings['solve']:.3f} s")
    print(f"relative residual ||Au - f|| / ||f|| = {residual:.2e}")
    print(f"max error against sin(pi x) sin(pi y) = {error:.2e} (O(h^2) discretization error)")


if __name__ == "__main__":
    main()
