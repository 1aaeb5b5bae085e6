"""The `msc` command: version, demo, emit, run and bench.

Failures print one line naming the problem and exit non-zero; --debug shows
the Python traceback instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

import msc
from msc.codegen import target_names
from msc.errors import MscError, StencilArgumentError, StencilDefinitionError
from msc.poly.schedule import parse_schedule
from msc.runtime.build import atomic_write_text
from msc.stencil import Stencil


class UsageError(MscError):
    """Bad command-line input."""


def load_source(source: str) -> Stencil:
    """A stencil from `path/file.py:function` or `path/file.msc`."""
    if source.endswith(".msc"):
        from msc.stencil import load_stencil

        if not Path(source).is_file():
            raise UsageError(f"no such file: {source}")
        return load_stencil(source)
    path, sep, func = source.rpartition(":")
    if not sep or not path.endswith(".py"):
        raise UsageError(f"SOURCE must be path/file.py:function or path/file.msc, got {source!r}")
    if not Path(path).is_file():
        raise UsageError(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(Path(path).resolve().parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    obj = getattr(module, func, None)
    if obj is None:
        raise UsageError(f"{path} has no function {func!r}")
    if isinstance(obj, Stencil):
        return obj
    if callable(obj):
        return msc.stencil(obj)
    raise UsageError(f"{path}:{func} is not a stencil function")


def _pairs(items: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"{what} expects NAME=VALUE, got {item!r}")
        out[name] = value
    return out


def _load_npy(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read {path}: {e}") from None


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(v) for v in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise UsageError(f"--shape expects sizes like 512x512, got {text!r}") from None
    if not shape or min(shape) < 1:
        raise UsageError(f"--shape expects positive sizes, got {text!r}")
    return shape


def cmd_demo(a: argparse.Namespace) -> int:
    from msc.demo import run_demo, run_pde_demo

    ok = True
    if a.part in ("all", "heat"):
        ok = run_demo(size=a.size, steps=a.steps, threads=a.threads, picture=a.picture).max_error < 1e-12
    if a.part in ("all", "pde"):
        picture = a.pde_picture or Path(a.picture).with_name("msc_demo_poisson.png")
        ok = run_pde_demo(size=a.pde_size, picture=picture).relative_residual < 1e-8 and ok
    return 0 if ok else 1


def cmd_emit(a: argparse.Namespace) -> int:
    st = load_source(a.source)
    options = {"chip": a.chip} if a.chip is not None else {}  # the target's own options, only when given
    out = st.emit(a.target, a.output, dtype=a.dtype, schedule=parse_schedule(a.schedule), **options)
    print(f"wrote {a.target} sources for '{st.name}' to {out}; build with: make -C {out}")
    return 0


KERNEL_FILES = ("kernel*.c", "kernel*.cu", "host.c", "slave.c")  # what a target generates; the rest is scaffolding


def cmd_show(a: argparse.Namespace) -> int:
    st = load_source(a.source)
    options = {"chip": a.chip} if a.chip is not None else {}
    with tempfile.TemporaryDirectory(prefix="msc-show-") as tmp:
        out = st.emit(a.target, Path(tmp) / st.name, dtype=a.dtype, schedule=parse_schedule(a.schedule), **options)
        files = sorted({f for pattern in KERNEL_FILES for f in Path(out).glob(pattern)})
        for f in files:
            if len(files) > 1:
                print(f"/* ---- {f.name} ---- */")
            print(f.read_text(), end="")
    return 0


def _inputs(st: Stencil, a: argparse.Namespace) -> dict[str, Any]:
    inputs: dict[str, Any] = {}
    for name, value in _pairs(a.param, "--param").items():
        try:
            inputs[name] = float(value)
        except ValueError:
            raise UsageError(f"--param {name}: {value!r} is not a number") from None
        if not np.isfinite(inputs[name]):
            raise UsageError(f"--param {name}: {value!r} is not a finite number")  # as the emitted programs say
    for name, files in _pairs(a.input, "--in").items():
        arrays = [_load_npy(f) for f in files.split(",")]
        inputs[name] = arrays[0] if len(arrays) == 1 else arrays
    return inputs


def cmd_run(a: argparse.Namespace) -> int:
    st = load_source(a.source)
    inputs = _inputs(st, a)
    if a.target == "reference":
        result = st.reference(steps=a.steps, dtype=a.dtype, **inputs)
    else:
        kernel = st.compile(target=a.target, dtype=a.dtype, threads=a.threads, schedule=parse_schedule(a.schedule))
        result = kernel.run(steps=a.steps, **inputs)
        stats = kernel.last_run
        print(f"{st.name}: {a.steps} steps in {stats.seconds:.6f} s, {stats.gstencils_per_second:.3f} GStencil/s")
    if a.check:
        ref = st.reference(steps=a.steps, dtype=a.dtype, **inputs)
        for name, arr in result.items():
            err = float(np.max(np.abs(arr - ref[name]), initial=0.0) / max(np.max(np.abs(ref[name]), initial=0.0), 1e-300))
            print(f"  {name}: max relative difference to the reference {err:.2e}")
    outputs = _pairs(a.output, "--out")
    for name, path in outputs.items():
        if name not in result:
            raise StencilArgumentError(f"--out {name}: not a computed field (computed: {', '.join(result)})")
        tmp = Path(path).with_name(Path(path).name + ".tmp.npy")
        np.save(tmp, result[name])
        tmp.replace(path)
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    st = load_source(a.source)
    shape = _shape(a.shape)
    rng = np.random.default_rng(0)
    dtype = a.dtype or st.ir.dtype
    inputs: dict[str, Any] = {f.name: rng.random(shape).astype(dtype) for f in st.ir.fields}
    params = _pairs(a.param, "--param")
    for p in st.ir.params:
        inputs[p] = float(params.get(p, 0.1))
    schedule = parse_schedule(a.schedule)
    kernel = st.compile(target=a.target, dtype=a.dtype, threads=a.threads, schedule=schedule)
    kernel.run(steps=a.steps if schedule == "auto" else 1, **inputs)  # warm-up (and tuning for these steps)
    best = None
    for _ in range(a.repeat):
        kernel.run(steps=a.steps, **inputs)
        if best is None or kernel.last_run.seconds < best.seconds:
            best = kernel.last_run
    assert best is not None
    report = {
        "stencil": st.name, "target": a.target, "shape": list(shape), "steps": a.steps, "dtype": dtype,
        "schedule": str(kernel.report.schedule if schedule == "auto" else schedule),
        "ms_per_step": best.seconds / a.steps * 1e3, "gstencils_per_s": best.gstencils_per_second,
    }
    print(f"{st.name} {'x'.join(map(str, shape))} {a.target}, {report['schedule']}: {report['ms_per_step']:.3f} "
          f"ms/step, {report['gstencils_per_s']:.3f} GStencil/s (best of {a.repeat})")
    if a.json:
        atomic_write_text(Path(a.json), json.dumps(report, indent=2))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="msc", description="msc: a stencil compiler for PDE solvers")
    p.add_argument("--version", action="version", version=f"msc {msc.__version__}")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="compile, run, check and picture a 2D heat equation; solve and picture "
                                    "a Poisson problem")
    d.add_argument("part", nargs="?", choices=("all", "heat", "pde"), default="all",
                   help="heat: the compiled stencil; pde: msc.solve with swCholesky; all (default): both")
    d.add_argument("--size", type=int, default=512)
    d.add_argument("--steps", type=int, default=2000)
    d.add_argument("--threads", type=int, default=None)
    d.add_argument("--picture", default="msc_demo_heat2d.png", help="PNG file of the heat part")
    d.add_argument("--pde-size", type=int, default=256)
    d.add_argument("--pde-picture", default=None,
                   help="PNG file of the pde part (default: msc_demo_poisson.png beside --picture)")
    d.set_defaults(func=cmd_demo)

    def schedule_option(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--schedule", default="default",
                        help="default, auto (tuned at the first run), or primitives such as "
                             "\"time_tile(8, x=32)\" or \"stream_stores().prefetch(512)\"")

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("source", help="path/file.py:function or path/file.msc")
        sp.add_argument("--target", default="openmp", help=f"one of: {', '.join(target_names())}")
        sp.add_argument("--dtype", default=None, choices=["float64", "float32"],
                        help="default: the stencil's own (float64 unless it declares float32)")
        sp.add_argument("--threads", type=int, default=None)
        sp.add_argument("--param", action="append", metavar="NAME=VALUE",
                        help="a scalar parameter's value, e.g. alpha=0.1; repeat for each")
        schedule_option(sp)

    e = sub.add_parser("emit", help="write standalone sources with a Makefile")
    e.add_argument("source", help="path/file.py:function or path/file.msc")
    e.add_argument("--target", default="openmp", help=f"one of: {', '.join(target_names())}")
    e.add_argument("--dtype", default=None, choices=["float64", "float32"],
                        help="default: the stencil's own (float64 unless it declares float32)")
    e.add_argument("-o", "--output", required=True, help="directory to write")
    e.add_argument("--chip", default=None, help="target athread: sw26010 or sw26010pro (default: sw26010pro)")
    schedule_option(e)
    e.set_defaults(func=cmd_emit)

    w = sub.add_parser("show", help="print the kernel code a target generates for a stencil")
    w.add_argument("source", help="path/file.py:function or path/file.msc")
    w.add_argument("--target", default="openmp", help=f"one of: {', '.join(target_names())}")
    w.add_argument("--dtype", default=None, choices=["float64", "float32"],
                   help="default: the stencil's own (float64 unless it declares float32)")
    w.add_argument("--chip", default=None, help="target athread: sw26010 or sw26010pro (default: sw26010pro)")
    schedule_option(w)
    w.set_defaults(func=cmd_show)

    r = sub.add_parser("run", help="run a stencil on .npy inputs")
    common(r)
    r.add_argument("--steps", type=int, required=True, help="time steps to run (a whole number >= 0)")
    r.add_argument("--in", dest="input", action="append", metavar="NAME=FILE.npy[,FILE.npy]",
                   help="a field's initial value (with its boundary ring); a field that reads W levels takes W "
                        "files, oldest first, or one for all; repeat for each field")
    r.add_argument("--out", dest="output", action="append", metavar="NAME=FILE.npy",
                   help="write the newest level of a computed field; repeat for each")
    r.add_argument("--check", action="store_true", help="compare with the reference interpreter")
    r.set_defaults(func=cmd_run)

    b = sub.add_parser("bench", help="time a stencil on random data")
    common(b)
    b.add_argument("--shape", default="1024x1024")
    b.add_argument("--steps", type=int, default=50)
    b.add_argument("--repeat", type=int, default=3)
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
