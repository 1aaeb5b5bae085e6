"""The standing mutation check (tools/mutate.py) stays applicable: each
hand-written mutant's text occurs exactly once in the file it mutates, so a
refactor that moves the code fails here instead of silently retiring a mutant."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("mutate", ROOT / "tools" / "mutate.py")
mutate = importlib.util.module_from_spec(_spec)
sys.modules["mutate"] = mutate  # dataclasses look their module up there
_spec.loader.exec_module(mutate)


@pytest.mark.parametrize("mutant", mutate.MUTANTS, ids=lambda m: m.name)
def test_mutant_text_occurs_once(mutant):
    text = (ROOT / mutant.path).read_text(encoding="utf-8")
    assert text.count(mutant.old) == 1, f"{mutant.name}: {mutant.path} no longer holds the mutated text once"
    assert mutant.new != mutant.old
