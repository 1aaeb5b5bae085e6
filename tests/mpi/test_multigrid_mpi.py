"""msc.solve(comm=...) with multigrid under mpiexec -n 1, 2, 4: the same solution as one process to
1e-10 relative, the same iteration count within one on every rank count (Jacobi and Chebyshev smoothing), halo traffic close to its
faces-only minimum, the form where each rank gives and gets its own blocks, and unsupported grids
refused on every rank."""

from __future__ import annotations

import pytest
from launch import mpiexec, run_json

pytest.importorskip("mpi4py")
pytestmark = [pytest.mark.mpi, pytest.mark.skipif(mpiexec() is None, reason="no mpiexec (pip install 'msc[mpi]')")]

CASES = ("div_k_grad_3d", "div_k_grad_3d_even_rows", "div_k_grad_3d_chebyshev", "periodic_2d", "drift_gmres_2d")


def test_distributed_multigrid_matches_one_process_on_any_rank_count():
    runs = {ranks: run_json(ranks, "run_multigrid.py") for ranks in (1, 2, 4)}
    for ranks, results in runs.items():
        for name in CASES:
            case = results[name]
            assert case["ranks"] == ranks and case["difference"] <= 1e-10, (ranks, name, case)
            assert case["blocks_difference"] <= 1e-10, (ranks, name, case)  # each rank's blocks in and out
            assert abs(case["iterations"] - runs[1][name]["iterations"]) <= 1, (ranks, name)
            if name == "drift_gmres_2d":
                assert case["solver"] == "multigrid-gmres"
            faces = case["halo_face_bytes_per_iteration"]
            assert faces <= case["halo_bytes_per_iteration"] <= 1.2 * faces, (ranks, name, case)
            if ranks > 1:
                assert faces > 0
        assert "every axis must halve" in results["errors"]["odd_periodic"]
        assert "rhs must be this rank's interior block of shape" in results["errors"]["wrong_block"]
    for name in ("div_k_grad_3d", "div_k_grad_3d_even_rows", "div_k_grad_3d_chebyshev"):  # a real hierarchy
        assert runs[1][name]["iterations"] == runs[1][name]["serial_iterations"]
