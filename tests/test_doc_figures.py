"""The simulated figures of the README and docs equal what the code computes now (benchmarks/doc_figures.py), and
a hand edit of any of them is caught."""

from __future__ import annotations

import re

import pytest
from benchmark_scripts import load

figures = load("doc_figures")


@pytest.fixture(scope="module")
def tables() -> dict[tuple[str, str], str]:
    return figures.compute()


def test_the_docs_equal_what_the_code_computes(tables) -> None:
    assert figures.differences(figures.read_docs(), tables) == [], (
        "run: python benchmarks/doc_figures.py --write"
    )


@pytest.mark.parametrize("figure", figures.FIGURES, ids=lambda f: f"{f.path}:{f.name}")
def test_a_hand_edited_figure_is_caught(tables, figure) -> None:
    texts = figures.read_docs()
    found = figures.block(figure.name).search(texts[figure.path])
    assert found is not None, f"{figure.path} has no block {figure.name}"
    decimals = list(re.finditer(r"\d\.\d+", found.group(2)))
    assert decimals, f"{figure.path}:{figure.name} shows no figure"
    start = found.start(2) + decimals[-1].end() - 1  # the last digit of its last decimal figure
    edited = "1" if texts[figure.path][start] != "1" else "2"
    texts[figure.path] = texts[figure.path][:start] + edited + texts[figure.path][start + 1 :]
    assert figures.differences(texts, tables) == [f"{figure.path}:{figure.name}"]


@pytest.mark.parametrize("stale", ["figures", "measured", "analytic"])
def test_one_command_checks_every_kind_of_generated_figure(stale, monkeypatch) -> None:
    """``doc_figures.py --check`` fails when any kind of generated block is stale: its own simulated figures, the
    measured ones (``measurements.py``) or the analytic validation's; without a flag it checks nothing."""
    calls: list[tuple[str, list[str]]] = []

    def kind(name: str):
        def check(*args) -> int:
            calls.append((name, list(args[-1]) if name != "figures" else []))
            return int(name == stale)

        return check

    monkeypatch.setattr(figures.suite, "check_or_write", kind("figures"))
    monkeypatch.setattr(figures.measurements, "main", kind("measured"))
    monkeypatch.setattr(figures.analytic_validation, "main", kind("analytic"))
    assert figures.main(["--check"]) == 1
    assert calls == [("figures", []), ("measured", ["--check"]), ("analytic", ["--check"])]
    calls.clear()
    assert figures.main([]) == int(stale == "figures")
    assert [name for name, _ in calls] == ["figures"]
