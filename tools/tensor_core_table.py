"""Print the tables of docs/tensor_cores.md: MMAs per tile and the fraction of
useful multiply-adds per stencil shape and precision, then the replay's
measured error on the test suite's generated stencils.

    python3 tools/tensor_core_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_tensor_core import CASES, _offsets, magnitude, make_inputs, make_stencil, run_replay

from msc import ir
from msc.codegen.tensor_core import MMA_SHAPES, tensor_core_plan


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
    print("\n| precision | max abs error | max error / sum(abs(w*x)) |\n|---|---|---|")
    for precision in MMA_SHAPES:
        dtype = "float64" if precision == "fp64" else "float32"
        worst_rel = worst_abs = 0.0
        for seed, ndim, shape, radius, boundary in CASES:
            st = make_stencil(seed, ndim, shape, radius, boundary)
            inputs = make_inputs(st, seed, dtype)
            got, ref = run_replay(st, tensor_core_plan(st.ir, 0, precision), inputs, dtype)
            s, _ = magnitude(st, inputs, "fp64")
            err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
            worst_rel, worst_abs = max(worst_rel, float(np.max(err / s))), max(worst_abs, float(np.max(err)))
        print(f"| {precision} | {worst_abs:.2e} | {worst_rel:.2e} |")


if __name__ == "__main__":
    shape_table()
    error_table()
