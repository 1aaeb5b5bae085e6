"""Print the tables of docs/tensor_cores.md: MMAs per tile and the fraction of
useful multiply-adds per stencil shape and precision, then the measured
error of the replay and of the generated kernels (run by the CUDA emulator)
on the test suite's generated stencils.

    python3 tools/tensor_core_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_tensor_core import CASES, _offsets, magnitude, make_inputs, make_stencil, run_replay

from msc import ir
from msc.targets.gpu.cuda_tensor_core import build_emulated, generate, step
from msc.targets.gpu.tensor_core import MMA_SHAPES, tensor_core_plan


def shape_table() -> None:
    print("| stencil | points | " + " | ".join(f"{p} {s.name}: MMAs per tile / useful"
                                             for p, s in MMA_SHAPES.items()) + " |")
    print("|---|---|" + "---|" * len(MMA_SHAPES))
    for ndim in (2, 3):
        for shape in ("star", "box"):
            for r in (1, 2, 3, 4):
                expr: ir.Expr | None = None
                for o in _offsets(ndim, r, shape):
                    term = ir.BinOp("*", ir.Const(0.1), ir.FieldRead("u", 0, o))
                    expr = term if expr is None else ir.BinOp("+", expr, term)
                assert expr is not None
                st = ir.StencilIR(f"{shape}{ndim}d{r}r", ndim, (ir.FieldDecl("u", ndim, "float64", 1, True),), (),
                                  (ir.Statement("u", expr, ir.SourceLoc("table", 1)),))
                plans = [tensor_core_plan(st, 0, p) for p in MMA_SHAPES]
                cells = [f"{p.mmas_per_tile} / {100 * p.useful_fraction:.1f}%" for p in plans]
                print(f"| {ndim}D {shape} r{r} | {plans[0].points} | " + " | ".join(cells) + " |")


def error_table() -> None:
    """Per precision, the worst error against the reference over the test suite's stencils (one
    step), of the numpy replay and of the generated kernel run by the CUDA emulator."""
    print("\n| precision | replay: max abs error | replay: max error / sum(abs(w*x)) "
          "| emulated kernel: max abs error | emulated kernel: max error / sum(abs(w*x)) |\n|---|---|---|---|---|")
    for precision in MMA_SHAPES:
        dtype = "float64" if precision == "fp64" else "float32"
        stencils = [make_stencil(*case) for case in CASES]
        kernels = [generate(st.ir, 0, precision, dtype, f"tc{case[0]}", wrap=case[4] == "periodic")
                   for st, case in zip(stencils, CASES)]
        library = build_emulated(kernels, f"tensor_core_table_{precision}")
        worst = np.zeros(4)
        for (seed, _, _, radius, boundary), st, kernel in zip(CASES, stencils, kernels):
            inputs = make_inputs(st, seed, dtype)
            got, ref = run_replay(st, kernel.plan, inputs, dtype)
            levels = {("u", 0): inputs["u"][1], ("u", -1): inputs["u"][0], ("k", None): inputs["k"]}
            ran = step(kernel, library, levels, inputs["u"][1], {"alpha": inputs["alpha"]})
            inner = tuple(slice(None) if boundary == "periodic" else slice(r, -r) for r in st.ir.radius)
            s, _ = magnitude(st, inputs, "fp64")
            for i, result in enumerate((got, ran[inner])):
                err = np.abs(result.astype(np.float64) - ref.astype(np.float64))
                worst[2 * i:2 * i + 2] = np.maximum(worst[2 * i:2 * i + 2], (err.max(), (err / s).max()))
        print(f"| {precision} | " + " | ".join(f"{v:.2e}" for v in worst) + " |")


if __name__ == "__main__":
    shape_table()
    error_table()
