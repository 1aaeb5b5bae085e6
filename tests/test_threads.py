"""The default thread count: the cores other processes leave free (msc.runtime.threads)."""

from __future__ import annotations

import numpy as np
import pytest

import msc
from msc import t, x, y
from msc.errors import StencilArgumentError
from msc.runtime import threads


def test_free_cores_subtracts_other_processes_running_threads():
    assert threads.free_cores(2, running=lambda: 1, own=lambda: 1) == 2        # only this process
    assert threads.free_cores(2, running=lambda: 2, own=lambda: 1) == 1        # one other busy thread
    assert threads.free_cores(2, running=lambda: 5, own=lambda: 1) == 1        # never below one
    assert threads.free_cores(4, running=lambda: 3, own=lambda: 3) == 4        # this process's own threads
    samples = iter([4, 1, 4])                                                    # a blip is not load
    assert threads.free_cores(2, running=lambda: next(samples), own=lambda: 1) == 2
    assert threads.free_cores(3, running=lambda: None, own=lambda: 1) == 3     # no /proc: all the cores


def test_omp_num_threads_wins(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.default_threads() == 0
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert 1 <= threads.default_threads() <= threads.usable_cores()


def test_runs_without_a_thread_count_take_the_free_cores(monkeypatch):
    @msc.stencil
    def heat(u):
        u[t + 1, x, y] = u[t, x, y] + 0.1 * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1]
                                           - 4 * u[t, x, y])

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "free_cores", lambda: 1)
    kernel = heat.compile()
    u0 = np.random.default_rng(0).random((20, 20))
    sim = kernel.start(u=u0)
    assert sim._nthreads == 1
    assert kernel.start(threads=2, u=u0)._nthreads == 2                         # asked for: kept
    np.testing.assert_allclose(kernel.run(steps=3, u=u0)["u"], heat.reference(steps=3, u=u0)["u"], rtol=1e-12)


def test_a_bad_thread_count_is_named_and_zero_is_the_default(monkeypatch):
    """threads=-1 or "2" is refused naming the value given (to compile or to run), by schedule="auto" when
    compiled; threads=0 is the default, as None is."""
    @msc.stencil
    def heat(u):
        u[t + 1, x, y] = u[t, x, y] + 0.1 * (u[t, x - 1, y] + u[t, x + 1, y] - 2 * u[t, x, y])

    u0 = np.zeros((6, 6))
    for bad in (-1, "2", 1.5):
        with pytest.raises(StencilArgumentError, match=rf"threads must be a positive integer \(or 0: the default\), "
                                                       rf"got {bad!r}"):
            heat.compile(threads=bad).run(steps=1, u=u0)
        with pytest.raises(StencilArgumentError, match=rf"got {bad!r}"):
            heat.compile().start(threads=bad, u=u0)
        with pytest.raises(StencilArgumentError, match=rf"got {bad!r}"):
            heat.compile(threads=bad, schedule="auto")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "free_cores", lambda: 1)
    assert heat.compile(threads=0).start(u=u0)._nthreads == heat.compile().start(threads=0, u=u0)._nthreads == 1


def test_a_negative_thread_count_is_not_told_to_go_by_name():
    @msc.stencil
    def heat(u):
        u[t + 1, x, y] = u[t, x, y]

    with pytest.raises(StencilArgumentError, match=r"threads must be a positive integer \(or 0: the default\), "
                                                   r"got -1$"):
        heat.compile(threads=-1)


def test_more_threads_than_msc_starts_are_refused_before_openmp_fails():
    """40000 threads made the OpenMP runtime end the process; compile and run name the ceiling instead."""
    @msc.stencil
    def heat(u):
        u[t + 1, x, y] = u[t, x, y]

    said = rf"threads={threads.MAX_THREADS + 1} is more than msc starts \(at most {threads.MAX_THREADS};"
    with pytest.raises(StencilArgumentError, match=said):
        heat.compile(threads=threads.MAX_THREADS + 1)
    with pytest.raises(StencilArgumentError, match=said):
        heat.compile().run(2, threads=threads.MAX_THREADS + 1, u=np.zeros((4, 4)))


def test_fields_given_by_position_are_told_to_go_by_name():
    """run(steps, u0, 0.1) puts the array where threads= stands and 0.1 where comm= does: both are named,
    before anything reaches the MPI driver or the argument binding."""
    @msc.stencil
    def heat(u, alpha):
        u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] - 2 * u[t, x, y])

    kernel, u0 = heat.compile(threads=1), np.zeros((6, 6))
    by_name = r"; fields and parameters go by name, as run\(steps, u=u0, alpha=0.1\)"
    for call in (lambda: kernel.run(3, u0, 0.1), lambda: kernel.start(u0, 0.1), lambda: kernel.run(3, u0, alpha=0.1)):
        with pytest.raises(StencilArgumentError, match=r"threads must be a positive integer \(or 0: the default\), "
                                                       r"got an object of type ndarray" + by_name):
            call()
    with pytest.raises(StencilArgumentError, match=r"comm must be an mpi4py communicator \(as MPI.COMM_WORLD\), "
                                                   r"got 'world'" + by_name):
        kernel.run(3, comm="world", u=u0, alpha=0.1)
    with pytest.raises(StencilArgumentError, match=r"comm must be an mpi4py communicator .* got 0.1"):
        kernel.start(1, 0.1, u=u0, alpha=0.1)
