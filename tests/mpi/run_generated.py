"""Under mpiexec: generated stencils run distributed against the serial kernel
and the reference interpreter. Rank 0 prints one JSON list of outcomes."""

from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI
from stencil_gen import generate

from msc.runtime.distributed import DistributedError

comm = MPI.COMM_WORLD
outcomes = []
for seed in (int(s) for s in sys.argv[1:]):
    case = generate(seed)
    kernel = case.stencil.compile(dtype=case.dtype, threads=1)
    on_root = {n: v if comm.rank == 0 or not isinstance(v, (np.ndarray, list)) else None for n, v in case.inputs.items()}
    try:
        result = kernel.run(steps=case.steps, comm=comm, **on_root)
    except DistributedError as e:
        if "thinnest local block" not in str(e):
            raise
        outcomes.append({"seed": seed, "status": "too thin"})
        continue
    if comm.rank == 0:
        serial = kernel.run(steps=case.steps, **case.inputs)
        reference = case.stencil.reference(steps=case.steps, dtype=case.dtype, **case.inputs)
        outcomes.append({
            "seed": seed, "status": "ran", "ndim": case.stencil.ir.ndim, "boundary": case.stencil.ir.boundary,
            "bitwise": all(np.array_equal(result[n], serial[n]) for n in serial),
            "shapes": all(result[n].shape == serial[n].shape and result[n].dtype == serial[n].dtype for n in serial),
            "reference_error": max(float(np.max(np.abs(result[n].astype(float) - reference[n])))
                                   / max(float(np.max(np.abs(reference[n]))), 1e-300) for n in reference),
        })
if comm.rank == 0:
    print(json.dumps(outcomes))
