"""SIMD on the CPEs (msc/targets/sunway/simd.py): the innermost compute loop in the chip's vector type,
checked under the emulator against the reference on rows of every length around the vector's lanes, a
stencil without a vector form left scalar, and the emulator's simd.h as strict as the chips about
alignment."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import msc
from msc import t, x, y, z
from msc.runtime import athread_emu

CHIPS = sorted(athread_emu.LDM_BYTES)
EMULATOR = Path(athread_emu.__file__).resolve().parent / "athread"


@msc.stencil
def heat2d(u, alpha):
    u[t + 1, x, y] = u[t, x, y] + alpha * (u[t, x - 1, y] + u[t, x + 1, y] + u[t, x, y - 1] + u[t, x, y + 1]
                                           - 4 * u[t, x, y])


@msc.stencil
def box3d(u):
    u[t + 1, x, y, z] = (u[t, x - 1, y, z] + u[t, x + 1, y, z] + u[t, x, y - 1, z] + u[t, x, y + 1, z]
                         + u[t, x, y, z - 1] + u[t, x, y, z + 1] + 2 * u[t, x, y, z]) / 8.0


@msc.stencil
def rooted(u):
    u[t + 1, x, y] = msc.sqrt(u[t, x - 1, y] * u[t, x + 1, y] + 1.0)


def slave_source(stencil: msc.Stencil, chip: str, dtype: str, tmp_path: Path, schedule=None) -> str:
    out = stencil.emit("athread", tmp_path / f"{chip}-{dtype}", chip=chip, dtype=dtype, schedule=schedule)
    return (out / "slave.c").read_text()


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_inner_loop_is_in_the_chips_vector_type(chip, dtype, tmp_path):
    lanes = {"sw26010": 4, "sw26010pro": 8}[chip]
    vector = f"{'double' if dtype == 'float64' else 'float'}v{lanes}"
    source = slave_source(heat2d, chip, dtype, tmp_path)
    assert f"typedef {vector} realv;" in source and f"#define MSC_VLEN {lanes}" in source
    assert source.count("simd_loadu(") == 5 and "simd_storeu(" in source  # one load per neighbour
    assert "msc_vset(p_alpha)" in source  # a parameter broadcast once, before the loop


def test_an_operation_without_a_vector_form_stays_scalar(tmp_path):
    assert "simd_loadu(" not in slave_source(rooted, "sw26010", "float64", tmp_path)


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("width", [1, 3, 4, 5, 8, 9, 15, 17])
def test_rows_of_any_length_match_the_reference(chip, width, assert_matches):
    """Vector loops and the points left over after them, for rows shorter than, equal to and longer than
    the lanes; streamed tiles and time tiles."""
    u = np.random.default_rng(width).random((7, width + 2))
    expected = heat2d.reference(steps=3, u=u, alpha=0.1)
    for schedule in (None, msc.Schedule().time_tile(2, x=3, y=width)):
        got = heat2d.compile("athread", chip=chip, schedule=schedule).run(steps=3, u=u, alpha=0.1)
        assert_matches(got, expected, context=(chip, width, schedule))


@pytest.mark.parametrize("chip", CHIPS)
def test_3d_and_single_precision_match_the_reference(chip, assert_matches):
    u = np.random.default_rng(3).random((6, 7, 13))
    assert_matches(box3d.compile("athread", chip=chip).run(steps=2, u=u), box3d.reference(steps=2, u=u))
    u32 = u.astype(np.float32)
    assert_matches(heat2d.compile("athread", chip=chip, dtype="float32").run(steps=2, u=u32[0], alpha=0.1),
                   heat2d.reference(steps=2, u=u32[0], alpha=0.1, dtype="float32"), dtype="float32")


def test_the_emulator_stops_an_aligned_access_at_an_unaligned_address(tmp_path):
    """simd_load/simd_store need the vector's alignment, as on the chips; simd_loadu does not."""
    program = tmp_path / "align.c"
    program.write_text('#include <simd.h>\n'
                       'int main(void) {\n'
                       '    static double row[16] __attribute__((aligned(64)));\n'
                       '    doublev4 v;\n'
                       '    simd_loadu(v, row + 1);\n'
                       '    simd_load(v, row);\n'
                       '    simd_store(v, row + 4);\n'
                       '    simd_load(v, row + 1);\n'
                       '    return 0;\n'
                       '}\n')
    binary = tmp_path / "align"
    subprocess.run(["gcc", "-std=gnu99", f"-I{EMULATOR}", str(program), "-o", str(binary)], check=True)
    run = subprocess.run([str(binary)], capture_output=True, text=True)
    assert run.returncode != 0 and "simd_load at" in run.stderr and "not aligned" in run.stderr
