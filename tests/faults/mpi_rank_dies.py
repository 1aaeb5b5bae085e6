"""Run under mpiexec -n 2: rank 1 is killed in the middle of a long distributed
run; rank 0, waiting on its halo, must not hang (the test checks that)."""

import os
import signal

import numpy as np
from conftest import heat
from mpi4py import MPI

import msc.runtime.halo as halo

comm = MPI.COMM_WORLD
kernel = heat.compile()
finished = 0
real_finish = halo.HaloExchanger.finish


def finish(self: halo.HaloExchanger) -> None:
    global finished
    finished += 1
    if comm.rank == 1 and finished == 50:
        print("rank 1: killing itself", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    real_finish(self)


halo.HaloExchanger.finish = finish  # type: ignore[method-assign]
u = np.random.default_rng(0).random((66, 66)) if comm.rank == 0 else None
kernel.run(steps=10**7, comm=comm, u=u, alpha=0.1)
print(f"rank {comm.rank}: finished", flush=True)
