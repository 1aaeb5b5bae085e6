"""The schedule auto-tuner behind `compile(schedule="auto")`.

The problem size is known only when the kernel first runs, so tuning happens
then: the candidate schedules the target's platform offers
(`Platform.tuning_space`; on the CPU single sweeps with and without
streaming stores and prefetching, spatial tiles, skewed time tiles of
several depths and widths; then the platform's `refinements` of the
fastest: prefetching, thread counts) are compiled and timed on short runs of
the real inputs within a time budget, with progress printed. A platform
with a cost model (the CPU's: msc/targets/cpu/model.py) has only the
default and the TIMED - 1 candidates it ranks best timed (some of them time
tiles), then the neighbours of the fastest time tile (deeper, wider,
narrower, shallower) while one is faster (`_climb`); each timing runs
whole time tiles for about SAMPLE_S seconds, after one warm-up step. A platform
that does not measure ranks them by its cost model instead, running
nothing. One timing on a busy machine can be lucky, so the
finalists (the fastest few and those close behind them, the default, and
the fastest one's prefetching and thread-count variants) are timed again in
interleaved rounds of one run-off (one far or clearly slower stops after one
or two) and the one with the best median wins.
Every target tunes here: the CPU measures, a GPU measures on a device, and
the Sunway platforms (no chip at hand) and the GPU under its emulator rank by
their models.
The winner is kept per stencil, dtype, problem size, thread limit,
platform and machine in a persistent JSON cache, so the next call measures nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from tqdm.auto import tqdm

from msc.codegen import get_target
from msc.errors import CacheWarning, CheckpointError, MscError, NonFiniteWarning, ScheduleError, TargetError
from msc.ir.arguments import bind_arguments
from msc.poly import PolyIR
from msc.poly.schedule import Schedule, lower, parse_schedule
from msc.runtime.build import atomic_write_text, cache_dir, generator_fingerprint, host_identity, side_by_side
from msc.runtime.kernel import check_threads
from msc.version import __version__

if TYPE_CHECKING:
    from msc.targets.ctarget import Platform

DEFAULT_BUDGET_S = 30.0


@dataclass
class Trial:
    schedule: str
    ms_per_step: float


@dataclass(frozen=True)
class Estimate:
    """A platform model's view of one schedule: modelled ms per step, what breaks
    ties (`rank`, compared after the time), the model's own figures (`detail`),
    a line saying what it predicts (`text`) and why the model trusts its own
    figure less (`caveat`; empty: it does not): a candidate with a caveat ranks
    after every candidate without one."""

    ms_per_step: float
    rank: tuple[float, ...] = ()
    detail: Any = None
    text: str = ""
    caveat: str = ""


@dataclass
class TuningReport:
    """What the tuner chose and measured (empty `trials` when it came from the
    cache); `estimate`: the model's view of the choice, on a platform that models."""

    schedule: Schedule
    ms_per_step: float
    default_ms_per_step: float
    from_cache: bool
    trials: list[Trial] = field(default_factory=list)
    estimate: Estimate | None = None
    seconds: float = 0.0  # how long choosing took (nothing when it came from the cache)

    @property
    def speedup(self) -> float:
        """Gain of the chosen schedule over the default single sweep."""
        return self.default_ms_per_step / self.ms_per_step if self.ms_per_step > 0 else 1.0

    def __repr__(self) -> str:
        if not self.ms_per_step and not self.from_cache:
            return f"<TuningReport {self.schedule}: the default, kept (this platform neither times nor models)>"
        done = "ranked by the cost model" if self.estimate else "timed"
        how = "from the cache" if self.from_cache else f"{len(self.trials)} candidates {done}"
        return (f"<TuningReport {self.schedule}: {self.ms_per_step:.3g} ms/step, {self.speedup:.2f}x the default "
                f"({how})>")


KINDS = ("all", "sweep", "temporal")


def _cpu_platform() -> Platform:
    """The default platform: the CPU's, as the openmp target has it."""
    return get_target("openmp").platform  # type: ignore[attr-defined, no-any-return]


def candidates(poly: PolyIR, shape: tuple[int, ...], kinds: str = "all", steps: int = 16,
               platform: Platform | None = None) -> list[Schedule]:
    """The schedules `platform` (default: the CPU's) offers for this stencil,
    size and step count: single sweeps ("sweep"), time tiles ("temporal"), or both ("all")."""
    space = (platform or _cpu_platform()).tuning_space(poly, shape, steps)
    return [s for s in _dedupe(space) if kinds == "all" or (kinds == "temporal") == bool(s.time_depth)]


def _dedupe(items: list[Schedule]) -> list[Schedule]:
    seen, out = set(), []
    for s in items:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def _order(poly: PolyIR, items: list[Schedule]) -> list[Schedule]:
    """Default first, then time tiles by a cache-fit prior with the
    prefetching and in-place sweeps among the likeliest of them, then the rest."""
    def prior(s: Schedule) -> float:
        if not s.time_depth:
            return -1.0 if s == Schedule() else 1.0 if s.prefetch_distance or s.in_place else 1e9
        w = dict(s.tiles)
        return abs(s.time_depth - 8) + abs(np.log2(w.get("x", 32) / 32)) + abs(np.log2(w.get("y", 32) / 32))
    return sorted(items, key=prior)


def _steps(tile: Schedule, space: list[Schedule]) -> list[Schedule]:
    """The time tiles of `space` one step from `tile` (the same options and tiled dimensions; the depth or one
    tile size doubled or halved; the depth also quadrupled: a tile twice as deep can time slower where one four
    times as deep is faster), in the order the climb tries them: deeper, wider, narrower, shallower."""
    sizes = dict(tile.tiles)
    moves = [(2.0, None), (4.0, None), *((2.0, d) for d in sizes), *((0.5, d) for d in sizes), (0.5, None)]
    out = []
    for factor, dim in moves:
        depth = tile.time_depth * factor if dim is None else tile.time_depth
        tiles = {d: n * factor if d == dim else n for d, n in sizes.items()}
        for s in space:
            if s.time_depth == depth and dict(s.tiles) == tiles and replace(s, time_depth=tile.time_depth,
                                                                            tiles=tile.tiles) == tile:
                out.append(s)
    return out


def _too_deep(tile: Schedule, timed: dict[Schedule, float]) -> float:
    """The least depth of `tile` (its tiles and options, deeper) timed FAR_SLOWER than `tile` (inf: none)."""
    return min((s.time_depth for s, ms in timed.items() if s.time_depth > tile.time_depth
                and replace(s, time_depth=tile.time_depth) == tile and ms > FAR_SLOWER * timed[tile]), default=math.inf)


MAX_TRIAL_STEPS = 64
FINALISTS = 3  # the fastest of the first pass timed again against each other (and the default)
#: and up to CLOSE_FINALISTS more whose first timing was within CLOSE of the fastest: one timing on a shared
#: machine can be 1.1x off, and a fourth that close may be the best (box3d27p 256^3, 2 threads:
#: time_tile(16, x=16, y=16).pipeline() timed 9.28 ms/step in one first pass, 4th behind 8.79, and 7.97 in
#: another; alone it runs 7.90, the 8.79 one 8.91)
CLOSE = 1.1
CLOSE_FINALISTS = 2
ROUNDS = 5  # interleaved timings of each finalist; the median decides
#: a finalist whose fastest timing after two rounds is this much slower than the leader's slowest stops early:
#: more rounds cannot make it win (a run-off of fewer threads often has one); after one round, one FAR_SLOWER
CLEARLY_SLOWER = 1.25
FAR_SLOWER = 1.5
#: after three rounds the run-off ends when it is decided (the leader's slowest timing beats every other's
#: fastest) or tied (the medians all within TIED of each other): more rounds would change nothing, or pick by
#: noise (prefetch distances of one deep time tile often tie)
TIED = 1.02
TIMED = 6  # the candidates a platform with a cost model has timed: the default and the best it ranks
TIME_TILE_SLOTS = 2  # of those, at least this many time tiles (the model's best), where the space has them
#: the climb from the best time tile timed (`_climb`): it starts when that tile is within CLIMB_WITHIN of the
#: best schedule timed, moves to a neighbour CLIMB_GAIN faster (not to one a timing's noise makes faster),
#: times at most CLIMB_TIMINGS neighbours, and stops when CLIMB_SHARE of the budget is spent
CLIMB_WITHIN = 1.5
CLIMB_GAIN = 1.03
CLIMB_TIMINGS = 6
CLIMB_SHARE = 0.4
SAMPLE_S = 0.15  # a timing runs whole time tiles for at least this long (at most the trial's steps)
#: fewer threads are tried only for kernels whose steps are shorter than this (ms): there a barrier per step
#: (microseconds on free cores) is a visible share of a step. On longer steps, fewer threads win only while
#: another process holds a core (measured: heat2d 4096^2, a time tile on 1 thread 6.2 ms/step against 6.3 on
#: 2 in a tuning that shared the machine, and 2 threads 3.6 ms/step once it was quiet); a tuned choice runs
#: on the cores free at each run instead (msc.runtime.threads).
FEWER_THREADS_BELOW_MS = 0.5


def _bands(schedule: Schedule, threads: int, trial_steps: int) -> int:
    """The bands of time tiles (each `time_depth` steps) one timing of `schedule` runs at least. Along one
    tiled dimension a band's tiles form a chain (each tile's wavefront holds that band's one tile), so
    one band runs on one thread at a time: box2d9p 4096^2, `time_tile(16, x=64)` took 8.4-9.0 ms/step over
    16 steps and 4.3-5.4 over 32 or 64. A timing runs a band per thread, as far as the trial's steps
    allow (a run as short as the trial has no more to overlap either). With two or more tiled dimensions,
    one band's wavefronts already hold many tiles."""
    if not schedule.time_depth or len(schedule.tiles) != 1:
        return 1
    return max(1, min(threads, trial_steps // schedule.time_depth))


def trial_steps_for(steps: int) -> int:
    """Candidates are timed on the run's own step count (capped): how deep a
    time tile pays off depends on how many steps there are to fuse."""
    return max(1, min(steps, MAX_TRIAL_STEPS))


def _key(poly: PolyIR, shape: tuple[int, ...], threads: int, kinds: str, trial_steps: int, platform: str) -> str:
    stencil = poly.ir
    text = repr((stencil.ndim, stencil.fields, stencil.params,
                 [(s.target, s.expr) for s in stencil.statements], stencil.boundary, stencil.dtype))
    parts = [text, str(shape), str(threads), kinds, str(trial_steps), platform, host_identity(), __version__,
             generator_fingerprint()]  # a changed generator or cost model decides afresh
    h = hashlib.sha256("\0".join(parts).encode())
    return h.hexdigest()[:24]


def _cache_file() -> Path:
    return cache_dir() / "tuning" / "stencils.json"


def _load_cache(warn: bool = True) -> dict[str, Any]:
    """The tuning cache; a damaged one (truncated, not JSON of the expected
    shape, unreadable) counts as empty, with one CacheWarning (`warn`): it is
    rewritten whole by the next store."""
    path = _cache_file()
    try:
        data = json.loads(path.read_text())
        if isinstance(data, dict):
            return data
        problem = f"a JSON {type(data).__name__}, not an object"
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        problem = str(e)
    if warn:
        warnings.warn(f"msc tune: the tuning cache {path} is damaged ({problem}); it will be rebuilt",
                      CacheWarning, stacklevel=3)
    return {}


def _cached_choice(entry: Any) -> tuple[Schedule, float, float]:
    """The schedule and timings a cache entry holds; ValueError/TypeError/ScheduleError if it is malformed."""
    schedule = parse_schedule(entry["schedule_text"])
    if not isinstance(schedule, Schedule):
        raise ValueError(f"{entry['schedule_text']!r} is not a schedule")
    ms, default_ms = float(entry["ms_per_step"]), float(entry["default_ms_per_step"])
    if not (ms > 0 and default_ms > 0):
        raise ValueError(f"timings {ms} and {default_ms} are not positive")
    return schedule, ms, default_ms


def _store(key: str, entry: dict[str, Any]) -> None:
    """Add an entry; under a lock, so that processes tuning at once keep each other's entries."""
    path = _cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".stencils.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = _load_cache(warn=False)
        data[key] = entry
        atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True))


class AutoKernel:
    """A kernel whose schedule is tuned on the first run, start or resume for each
    problem size, among the schedules `platform` (default: the CPU's) offers.
    `schedule` and `source` are those of the size tuned for last (MscError before any)."""

    def __init__(self, poly: PolyIR, compile_fn: Callable[[Schedule, int | None], Any],
                 threads: int | None = None, budget_s: float = DEFAULT_BUDGET_S, echo: bool = True,
                 kinds: str = "all", platform: Platform | None = None) -> None:
        if kinds not in KINDS:
            raise ValueError(f"kinds must be one of {KINDS}, got {kinds!r}")
        check_threads(threads)
        self.kinds = kinds
        self.platform = platform or _cpu_platform()
        self.poly = poly
        self.ir = poly.ir
        self._compile = compile_fn
        self.threads = threads
        self.budget_s = budget_s
        self.echo = echo
        self.report: TuningReport | None = None
        self._kernels: dict[tuple[int, ...], Any] = {}
        self._sims: dict[Schedule, tuple[Any, int]] = {}  # (kernel, steps of one timing) kept for run-offs
        self._current: Any = None  # the simulation every trial goes on from (`kernel.follow`): one copy of the inputs

    @property
    def budget_s(self) -> float:
        """Seconds a tuning may take (DEFAULT_BUDGET_S); set it before the run that tunes."""
        return self._budget_s

    @budget_s.setter
    def budget_s(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < math.inf:
            raise ScheduleError(f"budget_s: the tuner's budget must be a number of seconds (0 or more), "
                                f"got {seconds!r}")
        self._budget_s = float(seconds)

    @property
    def echo(self) -> bool:
        """Whether a tuning prints its progress on stderr."""
        return self._echo

    @echo.setter
    def echo(self, on: bool) -> None:
        if not isinstance(on, bool):
            raise ScheduleError(f"echo: the tuner's progress lines are on (True) or off (False), got {on!r}")
        self._echo = on

    @property
    def last_run(self) -> Any:
        kernel = next(reversed(self._kernels.values()), None)
        return kernel.last_run if kernel else None

    def _latest(self, what: str) -> tuple[tuple[int, ...], Any]:
        """The problem size tuned for last and its kernel; MscError, naming `what` was asked for, before any."""
        if not self._kernels:
            raise MscError(f"the kernel of '{self.ir.name}' with schedule='auto' is not tuned yet, so it has no "
                           f"{what}: it is tuned for the problem size at its first run, start or resume")
        return next(reversed(self._kernels.items()))

    @property
    def schedule(self) -> Schedule:
        """The schedule chosen for the problem size tuned for last (MscError before the first tuning)."""
        schedule: Schedule = self._latest("schedule")[1].schedule
        return schedule

    @property
    def source(self) -> str:
        """The generated source of the kernel tuned for last (MscError before the first tuning)."""
        source: str = self._latest("source")[1].source
        return source

    def __repr__(self) -> str:
        threads = self.threads or "default"
        if not self._kernels:
            return (f"<msc kernel '{self.ir.name}' schedule=auto (not tuned yet) platform={self.platform.name} "
                    f"dtype={self.ir.dtype} threads={threads}>")
        shape, kernel = self._latest("repr")
        return (f"<msc kernel '{self.ir.name}' target={kernel.target} dtype={self.ir.dtype} schedule=auto: "
                f"{kernel.schedule} for {'x'.join(map(str, shape))} threads={threads}>")

    def _say(self, text: str, bar: Any = None) -> None:
        """A line on stderr (above the candidates' bar while there is one)."""
        if self.echo:
            if bar is not None:
                bar.write(f"msc tune: {text}", file=sys.stderr)
            else:
                print(f"msc tune: {text}", file=sys.stderr, flush=True)

    def run(self, steps: int, threads: int | None = None, **inputs: Any) -> dict[str, np.ndarray]:
        args = bind_arguments(self.ir, steps, inputs)
        if args.shape not in self._kernels:
            self._kernels[args.shape] = self._kernel_for(args.shape, lambda: inputs, trial_steps_for(steps))
        return self._kernels[args.shape].run(steps=steps, threads=threads, **inputs)

    def start(self, threads: int | None = None, **inputs: Any) -> Any:
        """A simulation (CompiledKernel.start) of the schedule tuned now, on these inputs,
        for runs of MAX_TRIAL_STEPS steps or more (how long it will run is not known yet)."""
        args = bind_arguments(self.ir, 0, inputs)
        if args.shape not in self._kernels:
            self._kernels[args.shape] = self._kernel_for(args.shape, lambda: inputs, MAX_TRIAL_STEPS)
        return self._kernels[args.shape].start(threads, **inputs)

    def resume(self, path: str | Path, threads: int | None = None) -> Any:
        """A simulation continued from the checkpoint `path` (CompiledKernel.resume) by the schedule
        tuned for its problem size: tuned now, on the checkpoint's arrays, as `start` tunes, if that
        size is not yet. A checkpoint of a run over MPI ranks is refused (CheckpointError)."""
        from msc.runtime.checkpoint import checkpoint_blocks, checkpoint_path, int_tuple, run_inputs

        path = checkpoint_path(path)
        attrs, _ = checkpoint_blocks(path, self.ir, None)
        if "msc_blocks" in attrs:
            raise CheckpointError(f"checkpoint {path} is of a run over MPI ranks, which schedule='auto' does not "
                                  "tune: resume it with comm= on a kernel compiled with a schedule")
        shape = int_tuple(attrs["msc_shape"])
        if shape not in self._kernels:
            self._kernels[shape] = self._kernel_for(shape, partial(run_inputs, path, self.ir), MAX_TRIAL_STEPS)
        return self._kernels[shape].resume(path, threads)

    def _kernel_for(self, shape: tuple[int, ...], inputs: Callable[[], dict[str, Any]], trial_steps: int) -> Any:
        """The kernel of the schedule for `shape`, from the cache or tuned now on `inputs()` (called only then)."""
        max_threads = self.threads or os.cpu_count() or 1
        key = _key(self.poly, shape, max_threads, self.kinds, trial_steps, self.platform.name)
        hit = _load_cache().get(key)
        if hit is not None:
            try:  # hand-edited, or an older format: a schedule that does not parse, or that this stencil refuses
                schedule, ms, default_ms = _cached_choice(hit)
                kernel = self._compile(schedule, schedule.threads)
            except (KeyError, TypeError, ValueError, ScheduleError, TargetError) as e:
                warnings.warn(f"msc tune: the tuning cache {_cache_file()} has a damaged entry for "
                              f"'{self.ir.name}' ({type(e).__name__}: {e}); tuning again",
                              CacheWarning, stacklevel=3)
            else:
                estimate = (None if self.platform.measures
                            else self.platform.cost(self.poly, shape, trial_steps, schedule))
                self.report = TuningReport(schedule, ms, default_ms, True, estimate=estimate)
                self._say(f"'{self.ir.name}' {'x'.join(map(str, shape))}: cached {schedule} "
                          f"({ms:.3f} ms/step, {self.report.speedup:.2f}x the default)")
                return kernel
        if self.platform.measures:
            with warnings.catch_warnings():  # a field that grows beyond range in the trials is the run's to report
                warnings.simplefilter("ignore", NonFiniteWarning)
                report = self._tune(shape, self.platform.trial_inputs(inputs()), max_threads, trial_steps)
        else:
            report = model_choice(self.poly, shape, trial_steps, self.platform, self.kinds, self._say)
        if report.ms_per_step > 0 and report.default_ms_per_step > 0:  # a platform that neither times nor
            # models (the GPU emulator) keeps the default, and has nothing to remember
            _store(key, {"schedule_text": str(report.schedule), "ms_per_step": report.ms_per_step,
                         "default_ms_per_step": report.default_ms_per_step, "shape": list(shape),
                         "stencil": self.ir.name, "trials": [asdict(t) for t in report.trials]})
        self.report = report
        return self._compile(report.schedule, report.schedule.threads)

    def _prebuild(self, schedules: list[Schedule], max_threads: int) -> None:
        """Build the schedules' kernels side by side before any is timed: the compilers
        (gcc, nvcc) run in parallel while code generation takes its turns, and each
        timing then loads its kernel from the kernel index. A schedule that fails to
        build fails again, and is said, when it is timed."""
        def build(schedule: Schedule) -> None:
            try:
                self._compile(schedule, schedule.threads or max_threads)
            except MscError:
                pass

        side_by_side([partial(build, s) for s in schedules])

    def _started(self, schedule: Schedule, max_threads: int, inputs: dict[str, Any],
                 trial_steps: int) -> tuple[Any, int]:
        """The kernel of `schedule` and the steps of one timing. It runs on the schedule's threads, else on
        `max_threads`; the default (the baseline of "Nx the default") runs as an untuned kernel does: on the
        threads asked for, else on the cores free at each timing (msc.runtime.threads), so that a busy machine
        does not make the gain of tuning look larger than it is. A timing runs whole time tiles, enough
        for SAMPLE_S seconds at the speed of a first step (which also starts threads),
        at most the trial's steps, and at least `_bands` of tiles. (The first step is
        one step, not a whole deep tile: a tile of 16 or 32 steps of a 256^3 grid took
        as long as the timing.) The inputs are copied in once per tuning, by the first
        trial; every later step goes on from the last one, in the same buffers (`_timing`)."""
        threads = schedule.threads or max_threads
        kernel = self._compile(schedule, self.threads if schedule == Schedule() else threads)
        self._current = kernel.start(**inputs) if self._current is None else kernel.follow(self._current)
        whole = max(1, schedule.time_depth)
        self._current.advance(1)
        per_step = max(kernel.last_run.seconds, 1e-9)
        steps = max(whole * _bands(schedule, threads, trial_steps), min(trial_steps, math.ceil(SAMPLE_S / per_step)))
        return kernel, -(-steps // whole) * whole

    def _timing(self, kernel: Any, steps: int) -> float:
        """ms per step of `steps` more steps by `kernel`, from where the last trial stopped."""
        if self._current.kernel is not kernel:
            self._current = kernel.follow(self._current)
        self._current.advance(steps)
        return kernel.last_run.seconds / steps * 1e3

    def _time(self, schedule: Schedule, max_threads: int, inputs: dict[str, Any], trial_steps: int,
              timed: dict[Schedule, float]) -> float:
        """ms per step of `schedule`'s first timing; its kernel and steps are kept for the run-off."""
        kernel, steps = self._started(schedule, max_threads, inputs, trial_steps)
        ms = timed[schedule] = self._timing(kernel, steps)
        self._sims[schedule] = (kernel, steps)
        return ms

    def _ranked(self, pool: list[Schedule], shape: tuple[int, ...], trial_steps: int) -> list[Schedule]:
        """The default and the TIMED - 1 candidates the platform's cost model ranks
        best (ties keep the pool's order), TIME_TILE_SLOTS of them time tiles where the
        pool has them (a model that cannot tell tiles apart still has some timed, and the
        climb starts from them); the whole pool when it has no model."""
        try:
            costs = {s: self.platform.cost(self.poly, shape, trial_steps, s).ms_per_step for s in pool}
        except (NotImplementedError, MscError):  # no model, or a candidate it cannot place: the pool in order
            return pool
        ranked = sorted((s for s in pool if s != Schedule()), key=costs.__getitem__)
        tiles = [s for s in ranked if s.time_depth][:TIME_TILE_SLOTS]
        best = [s for s in ranked if s not in tiles][:TIMED - 1 - len(tiles)]
        best = sorted([*best, *tiles], key=ranked.index)
        self._say(f"the cost model of {self.platform.name} ranked {len(pool)} schedules; timing the default "
                  f"and the best {len(best)}")
        return [Schedule(), *best]

    def _climb(self, space: list[Schedule], timed: dict[Schedule, float], max_threads: int, inputs: dict[str, Any],
               trial_steps: int, trials: list[Trial], start: float) -> None:
        """From the fastest time tile timed, if it is within CLIMB_WITHIN of the fastest schedule: time its
        untimed neighbours in `space` (`_steps`: deeper first, then wider, narrower, shallower) and move to
        the first that is CLIMB_GAIN faster, until none is, CLIMB_TIMINGS neighbours are timed or CLIMB_SHARE
        of the budget is spent (the run-offs that follow time deep tiles in whole tiles). A deeper neighbour
        FAR_SLOWER than the tile it climbs from ends the way down in depth: the one four times as deep is not
        timed (heat2d 4096^2: depth 16 and 32 both took 1.8x depth 8's time, and timing both used the climb's
        budget before it reached the narrower tile that was faster; `_too_deep`).
        A cost model ranks deep and large tiles by how it thinks they fit the caches; the climb measures them."""
        here = min((s for s in timed if s.time_depth), key=timed.__getitem__, default=None)
        if here is None or timed[here] > CLIMB_WITHIN * min(timed.values()):
            return
        budget = CLIMB_TIMINGS
        while budget > 0:
            near = [s for s in _steps(here, space) if s not in timed]
            self._prebuild(near[:min(budget, os.cpu_count() or 1)], max_threads)  # the likeliest, side by side
            moved = False
            for schedule in near:
                if budget <= 0 or time.perf_counter() - start > CLIMB_SHARE * self.budget_s:
                    return
                if schedule.time_depth > _too_deep(here, timed):
                    continue
                budget -= 1
                try:
                    ms = self._time(schedule, max_threads, inputs, trial_steps, timed)
                except MscError as e:
                    self._say(f"climb: {schedule}: skipped ({str(e).splitlines()[0]})")
                    continue
                trials.append(Trial(str(schedule), ms))
                self._say(f"climb from {here}: {schedule}: {ms:.3f} ms/step (best {min(timed.values()):.3f})")
                if ms * CLIMB_GAIN < timed[here]:
                    here, moved = schedule, True
                    break
            if not moved:
                return

    def _runoff(self, schedules: list[Schedule], max_threads: int, inputs: dict[str, Any], trial_steps: int,
                trials: list[Trial], timed: dict[Schedule, float]) -> tuple[dict[Schedule, float], set[Schedule]]:
        """Median ms/step of each schedule that compiles (on the threads `_started` gives it)
        over ROUNDS interleaved rounds, so that a lucky or unlucky moment of the machine
        touches every schedule alike, and its first timing (`timed`) where it has one:
        one unlucky round cannot outweigh it; a schedule
        FAR_SLOWER than the leader after one round, or CLEARLY_SLOWER after two, is no
        longer timed (its median is of the timings it had), and after three rounds the
        run-off ends when it is decided or TIED (`_settled`). Also the schedules still
        timed at the end: the only ones that may win (a schedule stopped early kept the
        timings of its moment, which a later load on the machine did not touch)."""
        started = {}
        for schedule in schedules:
            try:
                started[schedule] = self._sims.get(schedule) or self._started(schedule, max_threads, inputs,
                                                                                trial_steps)
            except MscError as e:  # e.g. no private innermost loop to prefetch in
                self._say(f"{schedule}: skipped ({str(e).splitlines()[0]})")
        samples: dict[Schedule, list[float]] = {s: [timed[s]] if s in timed else [] for s in started}
        running = dict(started)
        for round_ in range(ROUNDS):
            if round_ >= 1 and running and self._settled(samples, running, round_):
                break
            for schedule, (kernel, steps) in running.items():
                samples[schedule].append(self._timing(kernel, steps))
        medians = {s: float(np.median(v)) for s, v in samples.items()}
        for s, ms in medians.items():
            trials.append(Trial(str(s), ms))
        self._say(f"again, interleaved, median of at most {ROUNDS}: "
                  + ", ".join(f"{s}: {ms:.3f}" for s, ms in sorted(medians.items(), key=lambda p: p[1])))
        return medians, set(running)

    def _settled(self, samples: dict[Schedule, list[float]], running: dict[Schedule, Any], rounds: int) -> bool:
        """After `rounds` rounds of a run-off: drop from `running` the schedules CLEARLY_SLOWER than the
        leader (FAR_SLOWER after one round); from three rounds on, whether the run-off is decided or TIED."""
        leader = min(running, key=lambda s: float(np.median(samples[s])))
        slowest = max(samples[leader])
        slower = FAR_SLOWER if rounds == 1 else CLEARLY_SLOWER
        for schedule in [s for s in running if min(samples[s]) > slower * slowest]:
            self._say(f"{schedule}: stopped after {rounds} rounds, {min(samples[schedule]):.3f} ms/step at "
                      f"best against {leader}'s {slowest:.3f} at worst")
            del running[schedule]
        if rounds < 3:
            return False
        medians = [float(np.median(samples[s])) for s in running]
        if max(medians) <= TIED * min(medians):
            self._say(f"tied within {TIED:.2f}x after {rounds} rounds: {', '.join(map(str, running))}")
            return True
        if slowest < min((min(samples[s]) for s in running if s != leader), default=math.inf):
            self._say(f"decided after {rounds} rounds: {leader} was the fastest in every round")
            return True
        return False

    def _tune(self, shape: tuple[int, ...], inputs: dict[str, Any], max_threads: int, trial_steps: int) -> TuningReport:
        start = time.perf_counter()
        self._sims, self._current = {}, None
        pool = _order(self.poly, candidates(self.poly, shape, self.kinds, trial_steps, self.platform))
        if Schedule() not in pool:  # the default is always measured: it is the baseline
            pool.insert(0, Schedule())
        space, pool = pool, self._ranked(pool, shape, trial_steps)
        self._say(f"tuning '{self.ir.name}' for {'x'.join(map(str, shape))} on up to {max_threads} threads: "
                  f"{len(pool)} schedules, budget {self.budget_s:.0f} s")
        self._prebuild(pool, max_threads)
        trials: list[Trial] = []
        timed: dict[Schedule, float] = {}
        failures: list[MscError] = []
        shown = self.echo and (sys.stderr.isatty() or "ipykernel" in sys.modules)  # not as frames in a log file
        with tqdm(total=len(pool), desc=f"msc tune '{self.ir.name}'", unit="schedule", file=sys.stderr,
                  disable=not shown, leave=False) as bar:  # the candidates as a bar, each line above it
            for n, schedule in enumerate(pool, 1):
                if trials and time.perf_counter() - start > self.budget_s:
                    self._say(f"budget spent after {len(trials)} of {len(pool)} schedules", bar)
                    break
                try:
                    ms = self._time(schedule, max_threads, inputs, trial_steps, timed)
                except MscError as e:  # an illegal or failing candidate is skipped, and said
                    failures.append(e)
                    self._say(f"[{n}/{len(pool)}] {schedule}: skipped ({str(e).splitlines()[0]})", bar)
                    continue
                finally:
                    bar.update(1)
                trials.append(Trial(str(schedule), ms))
                self._say(f"[{n}/{len(pool)}] {schedule}: {ms:.3f} ms/step (best {min(timed.values()):.3f})", bar)
        if not trials:  # every candidate failed: the platform's own error (no device) as it is, else named
            if all(isinstance(e, TargetError) for e in failures):
                raise failures[0]
            raise ScheduleError(f"schedule='auto' on stencil '{self.ir.name}': none of the {len(pool)} candidates "
                                f"of {self.platform.name} ran; the first: {str(failures[0]).splitlines()[0]}")
        self._climb(space, timed, max_threads, inputs, trial_steps, trials, start)
        # a busy machine makes single timings noisy: the finalists, the default and the platform's variants of
        # the fastest (CPU: prefetching, fewer threads), again, interleaved, in one run-off
        ranked = sorted(timed, key=timed.__getitem__)
        variants = self.platform.refinements(ranked[0], max_threads)
        if timed[ranked[0]] >= FEWER_THREADS_BELOW_MS:
            variants = [v for v in variants if not v.threads]
        close = [s for s in ranked[FINALISTS:FINALISTS + CLOSE_FINALISTS] if timed[s] <= CLOSE * timed[ranked[0]]]
        finalists = _dedupe([Schedule(), *ranked[:FINALISTS], *close, *variants])
        self._prebuild(finalists, max_threads)
        medians, contenders = self._runoff(finalists, max_threads, inputs, trial_steps, trials, timed)
        default_ms = medians[Schedule()]
        chosen = min(contenders, key=medians.__getitem__)
        ms = medians[chosen]
        self._sims, self._current = {}, None
        if self.platform.thread_counts and self.threads and not chosen.threads:
            chosen = chosen.with_threads(self.threads)  # the count asked for; none: the free cores of each run
        self._say(f"chose {chosen}: {ms:.3f} ms/step, {default_ms / ms:.2f}x the default "
                  f"({time.perf_counter() - start:.1f} s)")
        return TuningReport(chosen, ms, default_ms, False, trials, seconds=time.perf_counter() - start)



def model_choice(poly: PolyIR, shape: tuple[int, ...], steps: int, platform: Platform, kinds: str = "all",
                 say: Callable[[str], None] = lambda text: None) -> TuningReport:
    """The legal candidate the platform's cost model ranks first (nothing is run).
    A candidate the model refuses (its buffers do not fit, say), or one ranked
    above the winner that is illegal (a dependence, a loop the stencil lacks),
    is skipped and said; legality is checked in rank order only until a legal
    one is found, so a model may rank thousands of tiles."""
    costs: dict[Schedule, Estimate] = {}
    for schedule in _dedupe([Schedule(), *candidates(poly, shape, kinds, steps, platform)]):
        try:
            costs[schedule] = platform.cost(poly, shape, steps, schedule)
        except MscError as e:
            say(f"{schedule}: skipped ({str(e).splitlines()[0]})")
    if not costs:
        raise ScheduleError(f"schedule='auto' on stencil '{poly.ir.name}': no candidate of {platform.name} "
                            f"fits a problem of {'x'.join(map(str, shape))}")
    ranked = sorted(costs, key=lambda s: (bool(costs[s].caveat), costs[s].ms_per_step, *costs[s].rank))  # stable
    for schedule in ranked:
        try:
            lower(schedule, poly)
        except MscError as e:
            say(f"{schedule}: skipped ({str(e).splitlines()[0]})")
            del costs[schedule]
            continue
        chosen = schedule
        break
    else:
        raise ScheduleError(f"schedule='auto' on stencil '{poly.ir.name}': no candidate of {platform.name} is legal")
    estimate = costs[chosen]
    say(estimate.text or f"chose {chosen} for '{poly.ir.name}' {'x'.join(map(str, shape))} by the cost model of "
                         f"{platform.name}: {estimate.ms_per_step:.3f} ms/step modelled, {len(costs)} schedules ranked")
    fastest = min(costs, key=lambda s: costs[s].ms_per_step)
    if costs[fastest].ms_per_step < estimate.ms_per_step:
        say(f"{fastest} is predicted faster ({costs[fastest].ms_per_step:.3f} ms/step) but ranked after it: "
            f"{costs[fastest].caveat}")
    default = costs.get(Schedule(), estimate)
    return TuningReport(chosen, estimate.ms_per_step, default.ms_per_step, False,
                        [Trial(str(s), e.ms_per_step) for s, e in costs.items()], estimate)
