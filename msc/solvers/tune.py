"""Auto-tuner: searches the relaxed-amalgamation rule, the queue thresholds
and the TPQ batch size for a matrix (or, when the matrix is expensive, for a
cheap proxy: a connected patch of its graph of the same kind), by coordinate
descent on the measured numeric-factorization time (median of REPEATS runs
per trial, so that one noisy moment does not decide). The best parameters
are kept per machine and matrix class in a persistent JSON cache under
msc.runtime.cache_dir() / "tuning", with the gain over the defaults. A cache
file that cannot be read, or an entry that does not parse, is rebuilt with
one warning; a cached choice that runs clearly slower than it predicts is
re-measured, and re-tuned when the slowness is confirmed."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order

from msc.runtime import atomic_write_text, cache_dir
from msc.runtime.build import host_identity
from msc.solvers.cholesky import Symbolic, default_threads
from msc.solvers.matrix import lower_triangle
from msc.solvers.numeric import QueueParams
from msc.solvers.symbolic import Amalgamation

PROXY_FLOPS = 2e9  # matrices predicted above this are tuned on a proxy
REPEATS = 3  # timed factorizations per trial; the median counts
RECHECK_RATIO = 3.0  # a cached choice this much slower than predicted is re-measured
RECHECK_MIN_SECONDS = 0.05  # ... when the factorization took at least this long


def needs_recheck(cached: "TuningResult", seconds: float, flops: float) -> bool:
    """Whether a factorization that took `seconds` ran clearly slower than the
    cached choice predicts."""
    return seconds >= RECHECK_MIN_SECONDS and seconds > RECHECK_RATIO * cached.predicted_seconds(flops)

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
    proxy_flops: float  # its factorization flops
    matrix_class: str
    from_cache: bool
    # (amalgamation, queues, median seconds) of every trial, in order; empty from the cache
    history: list[tuple[Amalgamation, QueueParams, float]] = field(default_factory=list)
    rechecked: bool = False  # the cached choice ran slow and was measured again

    @property
    def gain(self) -> float:
        """Speedup of the numeric factorization over the default parameters."""
        return self.baseline_seconds / self.best_seconds if self.best_seconds > 0 else 1.0

    def predicted_seconds(self, flops: float) -> float:
        """Numeric time this choice predicts for a factorization of `flops`."""
        return self.best_seconds * flops / max(self.proxy_flops, 1.0)

    def report(self) -> dict[str, object]:
        return {
            "matrix_class": self.matrix_class, "from_cache": self.from_cache, "trials": self.trials,
            "proxy_n": self.proxy_n, "proxy_flops": self.proxy_flops, "rechecked": self.rechecked,
            "baseline_seconds": self.baseline_seconds,
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


Cache = dict[str, dict[str, dict[str, object]]]


def _load_cache() -> Cache:
    """The cache file's contents; {} (with one warning) when it is unreadable."""
    path = cache_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        warnings.warn(f"tuning cache {path} cannot be read ({exc}); it will be rebuilt", RuntimeWarning, stacklevel=3)
        return {}
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or not all(
            isinstance(v, dict) and all(isinstance(e, dict) for e in v.values()) for v in data.values()
        ):
            raise ValueError("not a mapping of machine -> matrix class -> entry")
    except ValueError as exc:
        warnings.warn(f"tuning cache {path} is damaged ({exc}); it will be rebuilt", RuntimeWarning, stacklevel=3)
        return {}
    return data


def _store(cache: Cache, machine: str, klass: str, result: TuningResult) -> None:
    cache.setdefault(machine, {})[klass] = result.report()
    atomic_write_text(cache_path(), json.dumps(cache, indent=1, sort_keys=True))


def _from_cache(entry: dict[str, object], klass: str) -> TuningResult:
    """The stored result; ValueError when the entry does not parse (hand-edited,
    truncated or from an older version)."""
    try:
        amal = entry["amalgamation"]
        queues = entry["queues"]
        if not isinstance(amal, dict) or not isinstance(queues, dict):
            raise TypeError("amalgamation and queues must be mappings")
        nrelax = tuple(int(v) for v in amal["nrelax"])  # type: ignore[attr-defined]
        zrelax = tuple(float(v) for v in amal["zrelax"])  # type: ignore[attr-defined]
        if len(nrelax) != 3 or len(zrelax) != 3:
            raise ValueError("nrelax and zrelax need three values each")
        q = QueueParams(**{k: int(v) for k, v in queues.items()})  # type: ignore[call-overload]
        result = TuningResult(
            Amalgamation(nrelax, zrelax), q,  # type: ignore[arg-type]
            float(entry["baseline_seconds"]), float(entry["best_seconds"]),  # type: ignore[arg-type]
            int(entry["trials"]), int(entry["proxy_n"]), float(entry["proxy_flops"]),  # type: ignore[arg-type]
            klass, True,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"entry {klass!r}: {exc!r}") from exc
    if not (result.best_seconds > 0 and math.isfinite(result.best_seconds) and result.proxy_flops > 0):
        raise ValueError(f"entry {klass!r}: times and flops must be positive")
    return result


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
             threads: int | None) -> tuple[float, float]:
    """(median numeric seconds over REPEATS runs, flops) of one configuration."""
    sym = Symbolic(lower, ordering, uplo="lower", amalgamation=amal, queues=queues, threads=threads)  # type: ignore[arg-type]
    times = [sym.factorize_lower(lower).timings["numeric"] for _ in range(REPEATS)]
    return statistics.median(times), sym.flops


def tune_lower(lower: sp.csc_array, ordering: object = "auto", *, threads: int | None = None,
               force: bool = False) -> TuningResult:
    """Tune for an already checked lower triangle (see tune())."""
    nthreads = threads or default_threads()
    sym = Symbolic(lower, ordering, uplo="lower", threads=nthreads)  # type: ignore[arg-type]
    klass = matrix_class(lower.shape[0], lower.nnz, sym.nnz, sym.flops,
                         sym.ordering if isinstance(ordering, str) else "user")
    machine = machine_key(nthreads)
    cache = _load_cache()
    entry = cache.get(machine, {}).get(klass)
    if entry is not None and not force:
        try:
            return _from_cache(entry, klass)
        except ValueError as exc:
            warnings.warn(f"tuning cache {cache_path()}: {exc}; re-tuning and rebuilding the entry",
                          RuntimeWarning, stacklevel=2)

    target = proxy(lower, sym.flops)
    target_ordering = ordering if target is lower else "auto"
    amal, queues = Amalgamation(), QueueParams()
    _measure(target, target_ordering, amal, queues, nthreads)  # warm-up: page faults, caches
    baseline, target_flops = _measure(target, target_ordering, amal, queues, nthreads)
    history = [(amal, queues, baseline)]
    best = baseline
    for candidate in AMALGAMATIONS[1:]:
        t, _ = _measure(target, target_ordering, candidate, queues, nthreads)
        history.append((candidate, queues, t))
        if t < best:
            best, amal = t, candidate
    for name, values in QUEUE_CHOICES.items():
        start = queues
        for value in values:
            if getattr(start, name) == value:
                continue
            candidate_q = replace(start, **{name: value})
            t, _ = _measure(target, target_ordering, amal, candidate_q, nthreads)
            history.append((amal, candidate_q, t))
            if t < best:
                best, queues = t, candidate_q
    result = TuningResult(amal, queues, baseline, best, len(history), target.shape[0], target_flops, klass,
                          False, history)
    _store(cache, machine, klass, result)
    return result


def recheck(lower: sp.csc_array, ordering: object, cached: TuningResult, *,
            threads: int | None = None) -> TuningResult:
    """A cached choice ran clearly slower than it predicted: measure it again
    on its proxy (median of REPEATS). Re-tune when the slowness is confirmed,
    else keep it (it was a noisy moment)."""
    nthreads = threads or default_threads()
    sym = Symbolic(lower, ordering, uplo="lower", threads=nthreads)  # type: ignore[arg-type]
    target = proxy(lower, sym.flops)
    target_ordering = ordering if target is lower else "auto"
    again, _ = _measure(target, target_ordering, cached.amalgamation, cached.queues, nthreads)
    if again <= RECHECK_RATIO * cached.best_seconds:
        return replace(cached, rechecked=True)
    return replace(tune_lower(lower, ordering, threads=nthreads, force=True), rechecked=True)


def tune(A: object, ordering: object = "auto", *, uplo: str = "full", threads: int | None = None,
         force: bool = False) -> TuningResult:
    """Tune swCholesky for A's matrix class on this machine (cached unless force)."""
    return tune_lower(lower_triangle(A, uplo), ordering, threads=threads, force=force)  # type: ignore[arg-type]

