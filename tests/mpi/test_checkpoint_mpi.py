"""Checkpoints of distributed runs: saved on some ranks, resumed on the same
number or another (and a single-process checkpoint resumed over ranks), both
as global arrays gathered on rank 0 and as blocks no rank holds whole; every
continued run bitwise equal to the single-process kernel (1D and 2D). The saving
run also writes a time series on rank 0, and a save given another path on each
rank is refused on all; fields and parameters are set over the ranks as in one
process."""

from __future__ import annotations

import pytest
from launch import mpiexec, run_json

pytest.importorskip("mpi4py")
pytestmark = [pytest.mark.mpi, pytest.mark.skipif(mpiexec() is None, reason="no mpiexec (pip install 'msc[mpi]')")]


@pytest.mark.parametrize("saved_on,resumed_on", [(2, 2), (1, 2), (2, 3)])
def test_saved_runs_continue_bitwise_on_any_number_of_ranks(saved_on, resumed_on, tmp_path):
    saved = run_json(saved_on, "run_checkpoint.py", "save", str(tmp_path))
    # one block folder per distributed checkpoint: saving again removed the first save's folder
    assert len(saved["block folders"]) == 8
    results = run_json(resumed_on, "run_checkpoint.py", "resume", str(tmp_path))
    assert len(results) == 12
    for name, result in results.items():
        assert result == {"step": 13, "equal": True, "blocks_equal": True}, name
