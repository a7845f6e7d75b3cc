"""Every file of ``benchmarks/`` states its purpose in its first line and imports; every script answers ``--help``.

Most benchmarks take minutes to hours and are not rerun here; these checks keep each one importable with its
command line intact, so that the command the docs name for a figure still starts."""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

import pytest
from benchmark_scripts import BENCHMARKS, load

FILES = sorted(BENCHMARKS.glob("*.py"))
SCRIPTS = [path for path in FILES if 'if __name__ == "__main__":' in path.read_text()]


def test_the_folder_holds_files_and_scripts() -> None:
    assert len(FILES) > len(SCRIPTS) > 20


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_the_first_line_states_the_purpose(path: Path) -> None:
    docstring = ast.get_docstring(ast.parse(path.read_text()), clean=False)
    assert docstring, f"{path.name} has no module docstring"
    first = docstring.splitlines()[0]
    assert first.endswith((".", "?")), f"{path.name}: the first line is not a whole sentence: {first!r}"
    assert len(first) <= 117, f"{path.name}: the first line has {len(first)} characters"


@pytest.mark.parametrize("path", [p for p in FILES if p not in SCRIPTS], ids=lambda p: p.name)
def test_each_shared_module_imports(path: Path) -> None:
    assert load(path.stem).__doc__


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_each_script_answers_help(path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    load("suite")  # puts benchmarks/ on sys.path, as running a script from there does
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(path), run_name="__main__")
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")
