"""Auto-tuner: searches the relaxed-amalgamation rule, the queue thresholds
and the TPQ batch size for a matrix (or, when the matrix is expensive, for a
cheap proxy: a connected patch of its graph of the same kind), by coordinate
descent on the measured numeric-factorization time. The best parameters are
kept per machine and matrix class in a persistent JSON cache under
msc.runtime.cache_dir() / "tuning", with the gain over the defaults."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order

from msc.runtime import atomic_write_text, cache_dir
from msc.runtime.build import host_identity
from msc.solvers.matrix import lower_triangle
from msc.solvers.numeric import QueueParams
from msc.solvers.symbolic import Amalgamation

PROXY_FLOPS = 2e9  # matrices predicted above this are tuned on a proxy
REPEATS = 2

AMALGAMATIONS = (
    Amalgamation(),  # CHOLMOD's default
    Amalgamation((2, 8, 24), (0.8, 0.05, 0.02)),
    Amalgamation((8, 32, 64), (0.8, 0.2, 0.08)),
    Amalgamation((16, 48, 128), (0.9, 0.3, 0.1)),
)
QUEUE_CHOICES: dict[str, tuple[int, ...]] = {
    "inst_max": (8, 16, 32, 48),
    "tpq_max": (2048, 7168, 16384),
    "tpq_batch": (8, 64),
    "diag_small": (4, 16, 32),
}


@dataclass
class TuningResult:
    amalgamation: Amalgamation
    queues: QueueParams
    baseline_seconds: float  # defaults, on the tuned matrix or proxy
    best_seconds: float
    trials: int
    proxy_n: int  # rows of the matrix actually timed
    matrix_class: str
    from_cache: bool

    @property
    def gain(self) -> float:
        """Speedup of the numeric factorization over the default parameters."""
        return self.baseline_seconds / self.best_seconds if self.best_seconds > 0 else 1.0

    def report(self) -> dict[str, object]:
        return {
            "matrix_class": self.matrix_class, "from_cache": self.from_cache, "trials": self.trials,
            "proxy_n": self.proxy_n, "baseline_seconds": self.baseline_seconds,
            "best_seconds": self.best_seconds, "gain": self.gain,
            "amalgamation": {"nrelax": list(self.amalgamation.nrelax), "zrelax": list(self.amalgamation.zrelax)},
            "queues": self.queues.as_dict(),
        }


def machine_key(threads: int) -> str:
    return hashlib.sha256(f"{host_identity()}|threads={threads}".encode()).hexdigest()[:16]


def matrix_class(n: int, nnz_lower: int, nnz_L: int, flops: float, ordering: str) -> str:
    """Coarse class: size, density, and flops per factor entry (2D-like vs 3D-like)."""
    size = round(math.log2(max(n, 1)))
    degree = round(2 * nnz_lower / max(n, 1))
    intensity = round(math.log2(max(flops / max(nnz_L, 1), 1.0)))
    return f"n2^{size}-deg{degree}-fpl2^{intensity}-{ordering}"


def cache_path() -> Path:
    return cache_dir() / "tuning" / "swcholesky.json"


def _load_cache() -> dict[str, dict[str, dict[str, object]]]:
    try:
        return json.loads(cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _store(machine: str, klass: str, result: TuningResult) -> None:
    cache = _load_cache()
    cache.setdefault(machine, {})[klass] = result.report()
    atomic_write_text(cache_path(), json.dumps(cache, indent=1, sort_keys=True))


def _from_cache(entry: dict[str, object], klass: str) -> TuningResult:
    amal = entry["amalgamation"]
    assert isinstance(amal, dict)
    queues = entry["queues"]
    assert isinstance(queues, dict)
    return TuningResult(
        Amalgamation(tuple(amal["nrelax"]), tuple(amal["zrelax"])),  # type: ignore[arg-type]
        QueueParams(**queues), float(entry["baseline_seconds"]),  # type: ignore[arg-type]
        float(entry["best_seconds"]), int(entry["trials"]), int(entry["proxy_n"]),  # type: ignore[arg-type]
        klass, True,
    )


def proxy(lower: sp.csc_array, flops: float) -> sp.csc_array:
    """A connected patch of the matrix's graph, grown by breadth-first search
    from vertex 0, sized so that its factorization costs about PROXY_FLOPS.
    A principal submatrix of an SPD matrix is SPD."""
    n = lower.shape[0]
    if flops <= PROXY_FLOPS:
        return lower
    k = max(1000, int(n * math.sqrt(PROXY_FLOPS / flops)))
    if k >= n:
        return lower
    full = (lower + sp.tril(lower, k=-1).T).tocsr()
    order = breadth_first_order(full, 0, directed=False, return_predecessors=False)
    keep = np.sort(order[:k]) if order.shape[0] >= k else np.arange(k)
    patch = sp.csc_array(sp.tril(full[keep][:, keep], format="csc"))
    patch.sort_indices()
    return patch


def _measure(lower: sp.csc_array, ordering: object, amal: Amalgamation, queues: QueueParams,
             threads: int | None) -> float:
    from msc.solvers.cholesky import Symbolic

    sym = Symbolic(lower, ordering, uplo="lower", amalgamation=amal, queues=queues, threads=threads)  # type: ignore[arg-type]
    best = math.inf
    for _ in range(REPEATS):
        factor = sym.factorize_lower(lower)
        best = min(best, factor.timings["numeric"])
    return best


def tune_lower(lower: sp.csc_array, ordering: object = "auto", *, threads: int | None = None,
               force: bool = False) -> TuningResult:
    """Tune for an already checked lower triangle (see tune())."""
    from msc.solvers.cholesky import Symbolic, default_threads

    nthreads = threads or default_threads()
    sym = Symbolic(lower, ordering, uplo="lower", threads=nthreads)  # type: ignore[arg-type]
    klass = matrix_class(lower.shape[0], lower.nnz, sym.nnz, sym.flops,
                         sym.ordering if isinstance(ordering, str) else "user")
    machine = machine_key(nthreads)
    entry = _load_cache().get(machine, {}).get(klass)
    if entry is not None and not force:
        return _from_cache(entry, klass)

    target = proxy(lower, sym.flops)
    target_ordering = ordering if isinstance(ordering, str) else "auto"
    if target is lower:
        target_ordering = ordering
    amal, queues = Amalgamation(), QueueParams()
    _measure(target, target_ordering, amal, queues, nthreads)  # warm-up: page faults, caches
    baseline = _measure(target, target_ordering, amal, queues, nthreads)
    best, trials = baseline, 1
    for candidate in AMALGAMATIONS[1:]:
        t = _measure(target, target_ordering, candidate, queues, nthreads)
        trials += 1
        if t < best:
            best, amal = t, candidate
    for name, values in QUEUE_CHOICES.items():
        for value in values:
            if getattr(queues, name) == value:
                continue
            candidate_q = replace(queues, **{name: value})
            t = _measure(target, target_ordering, amal, candidate_q, nthreads)
            trials += 1
            if t < best:
                best, queues = t, candidate_q
    result = TuningResult(amal, queues, baseline, best, trials, target.shape[0], klass, False)
    _store(machine, klass, result)
    return result


def tune(A: object, ordering: object = "auto", *, uplo: str = "full", threads: int | None = None,
         force: bool = False) -> TuningResult:
    """Tune swCholesky for A's matrix class on this machine (cached unless force)."""
    return tune_lower(lower_triangle(A, uplo), ordering, threads=threads, force=force)  # type: ignore[arg-type]

