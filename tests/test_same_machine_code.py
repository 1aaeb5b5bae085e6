"""tools/same_machine_code.py: two trees of generated sources that differ only in spelling pass; a
change in what a file computes is named, and so is a differing file it cannot compile."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("same_machine_code", ROOT / "tools" / "same_machine_code.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)

KERNEL = "long f(const long *a, long P1, long i, long j) {{ return a[{index}]; }}\n"

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _trees(tmp_path: Path, before: str, after: str) -> tuple[Path, Path]:
    for name, index in (("before", before), ("after", after)):
        folder = tmp_path / name / "trees" / "openmp" / "heat2d-default"
        folder.mkdir(parents=True)
        (folder / "kernel.c").write_text(KERNEL.format(index=index))
        (folder / "Makefile").write_text("all:\n")
    return tmp_path / "before", tmp_path / "after"


def test_parentheses_alone_give_the_same_assembly(tmp_path, capsys):
    before, after = _trees(tmp_path, "((i) * P1 + j + 0)", "i * P1 + j")
    assert tool.main(before, after) == 0
    assert "1 files differ in text; 1 compiled, 1 of them to the same assembly" in capsys.readouterr().out


def test_a_changed_computation_is_named(tmp_path, capsys):
    before, after = _trees(tmp_path, "(i) * P1 + j", "i * P1 + j + 1")
    assert tool.main(before, after) == 1
    assert "different assembly: trees/openmp/heat2d-default/kernel.c" in capsys.readouterr().out


def test_a_differing_file_it_cannot_compile_is_named(tmp_path, capsys):
    before, after = _trees(tmp_path, "i", "i")
    for name, text in (("before", "all:\n"), ("after", "all: x\n")):
        (tmp_path / name / "trees" / "openmp" / "heat2d-default" / "Makefile").write_text(text)
    assert tool.main(before, after) == 1
    assert "not compiled (not C, CUDA or HIP): trees/openmp/heat2d-default/Makefile" in capsys.readouterr().out
