"""The README's simulated figures equal what the code computes now (benchmarks/readme_figures.py), and a hand
edit of any figure is caught."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("readme_figures", ROOT / "benchmarks" / "readme_figures.py")
assert _spec is not None and _spec.loader is not None
figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(figures)


def test_the_readme_tables_are_what_the_code_computes() -> None:
    tables = {name: make() for name, make in figures.TABLES.items()}
    readme = (ROOT / "README.md").read_text()
    assert figures.differences(readme, tables) == [], "run: python benchmarks/readme_figures.py --write"


def test_a_hand_edited_figure_is_caught() -> None:
    tables = {name: make() for name, make in figures.TABLES.items()}
    readme = (ROOT / "README.md").read_text()
    assert "| 232.0 s |" in readme and "| 227.6 |" in readme
    assert figures.differences(readme.replace("| 232.0 s |", "| 222.0 s |"), tables) == ["simulate-7b"]
    assert figures.differences(readme.replace("| 227.6 |", "| 217.6 |"), tables) == ["plan-by-size-7b"]
