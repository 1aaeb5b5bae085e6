"""The `msc` command: version, demo, emit, run and bench.

Failures print one line naming the problem and exit non-zero; --debug shows
the Python traceback instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import re
import sys
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

import msc
from msc.codegen import target_names
from msc.errors import MscError, NonFiniteWarning, StencilDefinitionError, TargetError
from msc.poly.schedule import Schedule, parse_schedule
from msc.runtime.build import atomic_write_text, atomic_write_with
from msc.stencil import Stencil


class UsageError(MscError):
    """Bad command-line input."""


def load_source(source: str) -> Stencil:
    """The stencil of `path/file.py:NAME` (a @msc.stencil; nothing is called) or `path/file.msc`."""
    if source.endswith(".msc"):
        from msc.stencil import load_stencil

        if not Path(source).is_file():
            raise UsageError(_not_a_file(source))
        return load_stencil(source)
    path, sep, func = source.rpartition(":")
    if not sep or not path.endswith(".py"):
        raise UsageError(f"SOURCE must be path/file.py:NAME or path/file.msc, got {source!r}")
    if not Path(path).is_file():
        raise UsageError(_not_a_file(path))
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(Path(path).resolve().parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    if not hasattr(module, func):
        stencils = sorted(name for name, value in vars(module).items() if isinstance(value, Stencil))
        raise UsageError(f"{path} has no function {func!r}; its stencils: "
                         f"{', '.join(f'{path}:{name}' for name in stencils) or 'none'}")
    obj = getattr(module, func)
    if not isinstance(obj, Stencil):  # a plain function is never called: it may do anything
        hint = "decorate it with @msc.stencil" if inspect.isfunction(obj) else f"it is a {type(obj).__name__}"
        raise UsageError(f"{source} is not a stencil ({hint})")
    return obj


def _not_a_file(path: str) -> str:
    return f"{path} is a directory, not a stencil file" if Path(path).is_dir() else f"no such file: {path}"


def _pairs(items: list[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"{what} expects NAME=VALUE, got {item!r}")
        if name in out:
            raise UsageError(f"{what} {name} is given twice ({name}={out[name]} and {name}={value}); give it once")
        out[name] = value
    return out


def _whole(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= `least`."""
    def parse(text: str) -> int:
        try:
            value: int | None = int(text)
        except ValueError:
            value = None
        if value is None or value < least:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {least}, got {text!r}")
        return value
    return parse


def _shape(text: str) -> tuple[int, ...]:
    """An argparse type: sizes like 512x512, each >= 1."""
    try:
        shape = tuple(int(v) for v in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 512x512, got {text!r}") from None
    if min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected sizes >= 1 like 512x512, got {text!r}")
    return shape


def _sizes(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def _schedule(text: str | None, tunable: bool = True) -> Schedule | str | None:
    """--schedule as the library takes it: None (the default), "auto" (where a kernel runs: `tunable`) or primitives."""
    if text is None or text.strip() == "default":
        return None
    if text.strip() == "auto" and not tunable:
        raise UsageError("--schedule auto is tuned for a problem size when a kernel runs: `msc bench SOURCE --shape "
                         "... --schedule auto` prints the schedule it chooses; pass that to --schedule here")
    return parse_schedule(text)


def _check_names(st: Stencil, option: str, given: dict[str, str], known: Sequence[str], what: str) -> None:
    """Each NAME of `option` NAME=... is one of the stencil's `known` (its fields or parameters)."""
    for name in given:
        if name not in known:
            raise UsageError(f"{option} {name}: stencil '{st.name}' has no {what} {name!r} "
                             f"({what}s: {', '.join(known) or 'none'})")


def _params(st: Stencil, a: argparse.Namespace) -> dict[str, float]:
    """--param NAME=VALUE: parameters of the stencil, finite numbers."""
    params: dict[str, float] = {}
    given = _pairs(a.param, "--param")
    _check_names(st, "--param", given, st.ir.params, "parameter")
    for name, value in given.items():
        try:
            params[name] = float(value)
        except ValueError:
            raise UsageError(f"--param {name}: {value!r} is not a number") from None
        if not np.isfinite(params[name]):
            raise UsageError(f"--param {name}: {value!r} is not a finite number")  # as the emitted programs say
    return params


def _load_npy(path: str, field: str, dtype: str) -> np.ndarray:
    """The array of `--in field=path`, converted to the run's `dtype` (a CLI user cannot convert it)."""
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
        array = np.load(path, allow_pickle=False) if magic == b"\x93NUMPY" else None
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read {path}: {e}") from None
    if not isinstance(array, np.ndarray):
        raise UsageError(f"cannot read {path}: not a .npy file")
    if array.dtype.kind not in "fiu":
        raise UsageError(f"--in {field}: {path} holds {array.dtype} values; msc runs on real numbers (float or "
                         "integer arrays, converted to the run's dtype)")
    return array.astype(dtype, copy=False)


def _inputs(st: Stencil, a: argparse.Namespace) -> dict[str, Any]:
    """The run's arguments from --param and --in; a missing one is named with the option that gives it."""
    inputs: dict[str, Any] = dict(_params(st, a))
    files = _pairs(a.input, "--in")
    _check_names(st, "--in", files, [f.name for f in st.ir.fields], "field")
    missing = [f"--in {f.name}=FILE.npy" for f in st.ir.fields if f.name not in files]
    missing += [f"--param {p}=VALUE" for p in st.ir.params if p not in inputs]
    if missing:
        raise UsageError(f"stencil '{st.name}': missing {' '.join(missing)}")
    for name, paths in files.items():  # levels: FILE.npy,FILE.npy (a comma elsewhere belongs to a path)
        arrays = [_load_npy(os.path.expanduser(path), name, a.dtype or st.ir.dtype)
                  for path in re.split(r"(?<=\.npy),", paths)]
        inputs[name] = arrays[0] if len(arrays) == 1 else arrays
    return inputs


def _outputs(st: Stencil, a: argparse.Namespace) -> dict[str, Path]:
    """--out NAME=FILE.npy, checked before the run: a computed field, a file that can be written."""
    computed = [f.name for f in st.ir.written_fields]
    outputs = {}
    for name, given in _pairs(a.output, "--out").items():
        path = os.path.expanduser(given)  # a quoted ~ is the home folder too
        if name not in computed:
            raise UsageError(f"--out {name}: not a computed field (computed: {', '.join(computed)})")
        if Path(path).is_dir():
            raise UsageError(f"--out {name}: {path} is a directory")
        folder = Path(path).absolute().parent
        while not folder.exists():  # made when the result is written
            folder = folder.parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(f"--out {name}: cannot write {path}: {folder} is not a writable directory")
        outputs[name] = Path(path)
    return outputs


def _save_npy(path: Path, array: np.ndarray) -> None:
    """`array` written to `path` atomically, its missing folders made."""
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.save(f, array)
    try:
        atomic_write_with(path, write)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e}") from None


@contextmanager
def _emulation_advice(st: Stencil, target: str) -> Iterator[None]:
    """A GPU target without its GPU: the library's advice (compile(..., emulate=True)) in the command line's terms."""
    try:
        yield
    except TargetError as e:
        reason, python_advice, _ = str(e).partition("; compile(")
        if not python_advice:
            raise
        raise TargetError(f"{reason}; `msc emit SOURCE --target {target} -o DIR` then `make -C DIR emulate` builds "
                          f"DIR/{st.name}-emulated, which runs it on the CPU with msc's emulator") from None


def _compile(st: Stencil, a: argparse.Namespace, schedule: Schedule | str | None) -> Any:
    """The kernel that run and bench use (their --target, --dtype, --threads)."""
    if schedule is not None and a.target.endswith("+mpi"):
        raise UsageError(f"--target {a.target} runs here without a --schedule; `msc emit SOURCE --target {a.target} "
                         "--schedule ... -o DIR` writes an MPI program that uses one")
    return st.compile(target=a.target, dtype=a.dtype, threads=a.threads, schedule=schedule)


HEAT_PICTURE = "msc_demo_heat2d.png"


def cmd_demo(a: argparse.Namespace) -> int:
    from msc.demo import run_demo, run_pde_demo

    ok = True
    heat_picture = a.picture or HEAT_PICTURE
    if a.part in ("all", "heat"):
        ok = run_demo(size=a.size, steps=a.steps, threads=a.threads, picture=heat_picture).max_error < 1e-12
    if a.part in ("all", "pde"):
        alone = a.picture if a.part == "pde" else None  # `msc demo pde --picture F`: the one picture drawn
        picture = a.pde_picture or alone or Path(heat_picture).with_name("msc_demo_poisson.png")
        ok = run_pde_demo(size=a.pde_size, picture=picture).relative_residual < 1e-8 and ok
    return 0 if ok else 1


def cmd_emit(a: argparse.Namespace) -> int:
    if not a.output.strip():
        raise UsageError("-o/--output: give the directory to write (empty); '.' is this one")
    st = load_source(a.source)
    options = {"chip": a.chip} if a.chip is not None else {}  # the target's own options, only when given
    out = st.emit(a.target, a.output, dtype=a.dtype, schedule=_schedule(a.schedule, tunable=False), **options)
    print(f"wrote {a.target} sources for '{st.name}' to {out}; build with: make -C {out}")
    return 0


# what a target generates (its MPI form: one file per phase); the rest is scaffolding
KERNEL_FILES = ("kernel*.c", "kernel*.cu", "kernel*.hip", "host*.c", "slave*.c")


def cmd_show(a: argparse.Namespace) -> int:
    st = load_source(a.source)
    options = {"chip": a.chip} if a.chip is not None else {}
    schedule = _schedule(a.schedule, tunable=False)
    with tempfile.TemporaryDirectory(prefix="msc-show-") as tmp:
        out = st.emit(a.target, Path(tmp) / st.name, dtype=a.dtype, schedule=schedule, **options)
        files = sorted({f for pattern in KERNEL_FILES for f in Path(out).glob(pattern)})
        for f in files:
            if len(files) > 1:
                print(f"/* ---- {f.name} ---- */")
            print(f.read_text(), end="")
    return 0


def cmd_run(a: argparse.Namespace) -> int:
    st = load_source(a.source)
    outputs = _outputs(st, a)
    inputs = _inputs(st, a)
    if a.target == "reference":
        result = st.reference(steps=a.steps, dtype=a.dtype, **inputs)
    else:
        with _emulation_advice(st, a.target):
            kernel = _compile(st, a, _schedule(a.schedule))
            result = kernel.run(steps=a.steps, **inputs)
        stats = kernel.last_run
        print(f"{st.name}: {a.steps} steps in {stats.seconds:.6f} s, {stats.gstencils_per_second:.3f} GStencil/s"
              f"{_emulated(a.target)}")
    for name, path in outputs.items():
        _save_npy(path, result[name])
    if a.check:
        with warnings.catch_warnings():  # the run said so already
            warnings.simplefilter("ignore", NonFiniteWarning)
            ref = st.reference(steps=a.steps, dtype=a.dtype, **inputs)
        failed = [name for name, arr in result.items() if not _checked(name, arr, ref[name])]
        if failed:
            print(f"msc: --check failed for {', '.join(failed)}", file=sys.stderr)
            return 1
    return 0


#: the largest relative difference to the reference `msc run --check` accepts (rounding in a different order)
CHECK_TOLERANCE = {"float64": 1e-10, "float32": 1e-4}


def _checked(name: str, got: np.ndarray, expected: np.ndarray) -> bool:
    """Print how far `got` is from the reference, relative to its largest finite magnitude; NaN or
    infinity must sit where the reference has the same. True when within CHECK_TOLERANCE."""
    finite = np.isfinite(expected)
    same_specials = bool(np.array_equal(got[~finite], expected[~finite], equal_nan=True))
    same_specials = same_specials and bool(np.all(np.isfinite(got[finite])))
    scale = max(float(np.max(np.abs(expected[finite]), initial=0.0)), 1e-300)
    err = float(np.max(np.abs(got[finite] - expected[finite]), initial=0.0)) / scale
    tolerance = CHECK_TOLERANCE.get(str(got.dtype), CHECK_TOLERANCE["float64"])
    ok = same_specials and err <= tolerance
    where = "" if same_specials else "; NaN or infinity where the reference has none (or the other way round)"
    print(f"  {name}: max relative difference to the reference {err:.2e} (tolerance {tolerance:g}){where}: "
          f"{'ok' if ok else 'FAILED'}")
    return ok


DEFAULT_SHAPES = {1: (1 << 20,), 2: (1024, 1024), 3: (128, 128, 128)}  # bench's, about a million points


def cmd_bench(a: argparse.Namespace) -> int:
    st = load_source(a.source)
    shape = a.shape or DEFAULT_SHAPES[st.ir.ndim]
    if len(shape) != st.ir.ndim:
        raise UsageError(f"--shape {_sizes(shape)}: stencil '{st.name}' is {st.ir.ndim}D; give {st.ir.ndim} "
                         f"size(s) like {_sizes(DEFAULT_SHAPES[st.ir.ndim])}")
    params = _params(st, a)
    rng = np.random.default_rng(0)
    dtype = a.dtype or st.ir.dtype
    inputs: dict[str, Any] = {f.name: rng.random(shape).astype(dtype) for f in st.ir.fields}
    inputs.update({p: params.get(p, 0.1) for p in st.ir.params})
    schedule = _schedule(a.schedule)
    with _emulation_advice(st, a.target):
        kernel = _compile(st, a, schedule)
        kernel.run(steps=a.steps if schedule == "auto" else 1, **inputs)  # warm-up (and tuning for these steps)
        best = None
        for _ in range(a.repeat):
            kernel.run(steps=a.steps, **inputs)
            if best is None or kernel.last_run.seconds < best.seconds:
                best = kernel.last_run
    assert best is not None
    report = {
        "stencil": st.name, "target": a.target, "shape": list(shape), "steps": a.steps, "dtype": dtype,
        "schedule": str(kernel.report.schedule if schedule == "auto" else schedule or "default"),
        "ms_per_step": best.seconds / a.steps * 1e3, "gstencils_per_s": best.gstencils_per_second,
    }
    if best.threads:  # what the best run used: a busy machine leaves fewer cores than with_threads asks
        report["threads"] = best.threads
    if a.target in EMULATED_TARGETS:
        report["emulated"] = True
    on = f" on {best.threads} thread{'s' * (best.threads != 1)}" if best.threads else ""
    print(f"{st.name} {_sizes(shape)} {a.target}, {report['schedule']}{on}: {report['ms_per_step']:.3f} "
          f"ms/step, {report['gstencils_per_s']:.3f} GStencil/s (best of {a.repeat}){_emulated(a.target)}")
    if a.json:
        atomic_write_text(Path(a.json), json.dumps(report, indent=2))
    return 0


#: targets the command line runs only under an emulator here, whose times are not the hardware's
EMULATED_TARGETS = ("athread", "athread+mpi")


def _emulated(target: str) -> str:
    return "; under the athread emulator: a check of correctness, not a Sunway time" \
        if target in EMULATED_TARGETS else ""


EMIT_TARGETS_EXCLUDED = ("serial",)  # compiles in process only: no source tree to emit or show


def parser() -> argparse.ArgumentParser:
    debug = argparse.ArgumentParser(add_help=False)  # --debug is taken after the subcommand too
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show Python tracebacks on errors")
    p = argparse.ArgumentParser(prog="msc", description="msc: a stencil compiler for PDE solvers")
    p.add_argument("--version", action="version", version=f"msc {msc.__version__}")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", parents=[debug], help="compile, run, check and picture a 2D heat equation; solve and "
                                                     "picture a Poisson problem")
    d.add_argument("part", nargs="?", choices=("all", "heat", "pde"), default="all",
                   help="heat: the compiled stencil; pde: msc.solve with swCholesky; all (default): both")
    d.add_argument("--size", type=_whole(3), default=512,
                   help="heat: grid points per side, boundary ring included (default: %(default)s)")
    d.add_argument("--steps", type=_whole(0), default=2000, help="heat: time steps (default: %(default)s)")
    d.add_argument("--threads", type=_whole(0), default=None,
                   help="heat: OpenMP threads (default, or 0: the cores other processes leave free)")
    d.add_argument("--picture", default=None,
                   help=f"PNG file of the heat part (default: {HEAT_PICTURE}); with `demo pde`, of the pde part")
    d.add_argument("--pde-size", type=_whole(3), default=256,
                   help="pde: grid points per side, boundary ring included (default: %(default)s)")
    d.add_argument("--pde-picture", default=None,
                   help="PNG file of the pde part (default: msc_demo_poisson.png beside --picture)")
    d.set_defaults(func=cmd_demo)

    def source_options(sp: argparse.ArgumentParser, targets: Sequence[str], tunable: bool) -> None:
        sp.add_argument("source", help="path/file.py:NAME (a @msc.stencil) or path/file.msc")
        sp.add_argument("--target", default="openmp", help=f"one of: {', '.join(targets)} (default: %(default)s)")
        sp.add_argument("--dtype", default=None, choices=["float64", "float32"],
                        help="default: the stencil's own (float64 unless it declares float32)")
        sp.add_argument("--schedule", default=None,
                        help="default, " + ("auto (tuned at the first run), " if tunable else "") + "or primitives "
                             "such as \"time_tile(8, x=32)\" or \"stream_stores().prefetch(512)\"")

    def kernel_options(sp: argparse.ArgumentParser) -> None:
        source_options(sp, target_names(), tunable=True)
        sp.add_argument("--threads", type=_whole(0), default=None,
                        help="OpenMP threads (default, or 0: the cores other processes leave free)")
        sp.add_argument("--param", action="append", metavar="NAME=VALUE",
                        help="a scalar parameter's value, e.g. alpha=0.1; repeat for each (bench: 0.1 if not given)")

    emit_targets = [t for t in target_names() if t not in EMIT_TARGETS_EXCLUDED]
    e = sub.add_parser("emit", parents=[debug], help="write standalone sources with a Makefile")
    source_options(e, emit_targets, tunable=False)
    e.add_argument("-o", "--output", required=True, help="directory to write")
    e.add_argument("--chip", default=None, help="target athread: sw26010 or sw26010pro (default: sw26010pro)")
    e.set_defaults(func=cmd_emit)

    w = sub.add_parser("show", parents=[debug], help="print the kernel code a target generates for a stencil")
    source_options(w, emit_targets, tunable=False)
    w.add_argument("--chip", default=None, help="target athread: sw26010 or sw26010pro (default: sw26010pro)")
    w.set_defaults(func=cmd_show)

    r = sub.add_parser("run", parents=[debug], help="run a stencil on .npy inputs")
    kernel_options(r)
    r.add_argument("--steps", type=_whole(0), required=True, help="time steps to run (a whole number >= 0)")
    r.add_argument("--in", dest="input", action="append", metavar="NAME=FILE.npy[,FILE.npy]",
                   help="a field's initial value (with its boundary ring; converted to the run's dtype); a field "
                        "that reads W levels takes W files, oldest first, or one for all; repeat for each field")
    r.add_argument("--out", dest="output", action="append", metavar="NAME=FILE.npy",
                   help="write the newest level of a computed field; repeat for each")
    r.add_argument("--check", action="store_true", help="compare with the reference interpreter; exit status 1 "
                   "when a field differs by more than rounding (1e-10 relative, float32 1e-4) or has NaN elsewhere")
    r.set_defaults(func=cmd_run)

    defaults = [_sizes(shape) for shape in DEFAULT_SHAPES.values()]
    b = sub.add_parser("bench", parents=[debug], help="time a stencil on random data")
    kernel_options(b)
    b.add_argument("--shape", type=_shape, default=None,
                   help=f"grid size, boundary ring included (default: {', '.join(defaults[:-1])} or {defaults[-1]} "
                        "by the stencil's dimensions)")
    b.add_argument("--steps", type=_whole(1), default=50, help="time steps per timing (default: %(default)s)")
    b.add_argument("--repeat", type=_whole(1), default=3, help="timings, the best reported (default: %(default)s)")
    b.add_argument("--json", help="write the result as JSON to this file")
    b.set_defaults(func=cmd_bench)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `msc show ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # one line for the user; the traceback with --debug
        if args.debug:
            raise
        kind = "error" if isinstance(e, MscError) else type(e).__name__
        lines = str(e).splitlines() or [""]
        # a definition error in a .msc file carries its source line and a caret
        shown = lines if isinstance(e, StencilDefinitionError) else lines[:1]
        print(f"msc: {kind}: " + "\n".join(shown), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
