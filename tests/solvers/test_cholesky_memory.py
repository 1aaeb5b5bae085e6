"""The factor's values: populated mappings, and the spare buffer that the
last dropped factor leaves for the next factorization."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import laplacian

from msc.solvers import analyze, cholesky, memory


@pytest.fixture(autouse=True)
def small_large_bytes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every array of at least 4 KiB counts as large; no spare before or after."""
    monkeypatch.setattr(memory, "LARGE_BYTES", 4096)
    memory.release_spare()
    yield
    gc.collect()
    memory.release_spare()


def test_small_arrays_are_plain() -> None:
    values = memory.factor_values(100, 2)
    assert values.shape == (100,) and values.dtype == np.float64 and values.flags.owndata
    del values
    assert memory.spare_bytes() == 0


def test_dropped_values_become_the_spare_and_are_reused() -> None:
    values = memory.factor_values(10_000, 2)
    values[:] = 1.5  # writable
    address = values.ctypes.data
    view = values[10:20]
    del values
    gc.collect()
    assert memory.spare_bytes() == 0  # a view still uses the buffer
    del view
    gc.collect()
    assert memory.spare_bytes() == 80_000
    again = memory.factor_values(9_000, 1)  # fits within the slack: the same pages
    assert again.ctypes.data == address and again.shape == (9_000,)
    assert memory.spare_bytes() == 0


def test_spare_much_larger_than_asked_is_released() -> None:
    big = memory.factor_values(100_000, 2)
    big_address = big.ctypes.data
    del big
    gc.collect()
    assert memory.spare_bytes() == 800_000
    small = memory.factor_values(1_000, 2)
    assert small.ctypes.data != big_address
    assert memory.spare_bytes() == 0
    memory.release_spare()


def test_refactorization_through_the_spare_is_exact(rng: np.random.Generator) -> None:
    """New values factored in the pages of a dropped factor (which still hold
    the old values) give the factor of a fresh run."""
    A = laplacian(30, 2)
    S = analyze(A, threads=2)
    F = S.factorize(A)
    del F
    gc.collect()
    assert memory.spare_bytes() > 0
    A2 = sp.csc_array(A + sp.diags_array(rng.uniform(0.5, 1.5, A.shape[0])))
    F2 = S.factorize(A2)
    assert memory.spare_bytes() == 0  # it took the spare
    fresh = cholesky(A2, threads=1, ordering=F2.perm)
    np.testing.assert_allclose(F2.L.toarray(), fresh.L.toarray(), rtol=0, atol=1e-12)
    b = rng.standard_normal(A.shape[0])
    assert np.linalg.norm(A2 @ F2.solve(b) - b) <= 1e-12 * np.linalg.norm(b) * 100


def test_small_pages_turns_numpy_huge_pages_off_inside_and_restores_them() -> None:
    setting = memory._set_huge_pages
    before = setting(True)
    try:
        with memory.small_pages():
            assert setting(False) is False  # off inside
            with pytest.raises(RuntimeError), memory.small_pages():
                raise RuntimeError("inner block fails")
            assert setting(False) is False  # still off: the outer block is open
        assert setting(True) is True  # restored after the last block
        setting(False)
        with memory.small_pages():
            pass
        assert setting(False) is False  # a process that had them off keeps them off
    finally:
        setting(before)


def test_solver_entry_points_run_with_small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    real = memory._set_huge_pages
    monkeypatch.setattr(memory, "_set_huge_pages", lambda on: seen.append(on) or real(on))
    A = laplacian(6, 2)
    F = cholesky(A)
    F.solve(np.ones(A.shape[0]))
    # cholesky, then solve: each turns them off once (nested entry points share
    # the outer block) and restores numpy's setting once
    assert len(seen) == 4 and seen[0::2] == [False, False]


def test_interpreter_exit_with_live_factors_prints_nothing() -> None:
    """Two factors alive when the interpreter exits: their mappings are neither given
    back nor closed while exported (that printed a BufferError traceback at exit)."""
    script = (
        "from msc.solvers import cholesky, memory\n"
        "from conftest import laplacian\n"
        "memory.LARGE_BYTES = 4096\n"
        "A = laplacian(30, 2)\n"
        "F1, F2 = cholesky(A), cholesky(A)\n"
        "print('factored', F1.nnz == F2.nnz)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parent, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and run.stdout == "factored True\n", run.stderr
    assert run.stderr == ""
