"""The structural figures (``python -m tools.house_figures``) count what they say."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from tools.house_figures import attributes, figures, importers_of, init_parameters

ROOT = Path(__file__).resolve().parents[3]

SOURCE = textwrap.dedent(
    """
    class Wide:
        declared: int

        def __init__(self, a, b, *, c=1):
            self.a = a
            self.b: int = b
            self.a = 2  # counted once

        def later(self):
            self.c = 3
            other.d = 4  # not self's
    """
)


def test_attributes_are_every_name_set_on_self_and_declared_fields() -> None:
    [cls] = [n for n in ast.parse(SOURCE).body if isinstance(n, ast.ClassDef)]
    assert attributes(cls) == {"declared", "a", "b", "c"}
    assert init_parameters(cls) == 3


def test_at_most_six_modules_import_the_ledger() -> None:
    # Issue 42's bound: the rest read it through record/reading.py's read-only face.
    importers = importers_of("sentinel.record.ledger", ROOT)
    assert "sentinel.record.sink" in importers  # the count sees a real importer
    assert len(importers) <= 6, importers


def test_figures_name_every_object_they_follow() -> None:
    labels = dict(figures(ROOT))
    for name in ("Ledger", "Evaluator", "Scheduler", "Daemon"):
        assert isinstance(labels[f"{name} attributes"], int)
    assert labels["modules over 400 lines"] == 0
