"""Run under mpiexec: rank 0 prints, for every rank, the default and explicit
thread counts of a distributed kernel and the OpenMP wait policy msc set, as
one JSON line."""

import json
import os

from conftest import heat
from mpi4py import MPI

from msc.runtime.distributed import DistributedKernel

comm = MPI.COMM_WORLD
kernel = heat.compile()
default = DistributedKernel(kernel, comm, (34, 34))
explicit = DistributedKernel(kernel, comm, (34, 34), threads=1)
again = DistributedKernel(kernel, comm, (34, 34))
mine = {"rank": comm.rank, "threads": default.threads, "explicit": explicit.threads, "again": again.threads,
        "cores": os.cpu_count(), "usable": len(os.sched_getaffinity(0)), "policy": os.environ.get("OMP_WAIT_POLICY")}
everyone = comm.gather(mine, root=0)
if comm.rank == 0:
    print(json.dumps(everyone), flush=True)
