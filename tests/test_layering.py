"""The import rules of ARCHITECTURE.md ("Two layers, checked"), enforced by import-linter (``lint-imports``, run
by .ci/run with the contracts in pyproject.toml): this shows that the check passes on the tree and fails on a
planted violation of each kind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rlinf", "executor", "planner", "simulator")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the packages under ``tree`` with the project's contracts."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; lint_imports_command()",
         "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the packages and pyproject.toml, to plant violations in."""
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def plant(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        (
            "executor/devices.py",
            "import planner.space  # planted",
            "The executor imports neither the planner",
        ),
        ("rlinf/lowering.py", "import rlinf.runner  # planted", "The core imports no application module"),
        ("simulator/__init__.py", "import executor  # planted", "The simulator imports only the rlinf core"),
        ("rlinf/profiling.py", "import rlinf.runner  # planted", "No import cycles between sibling modules"),
    ],
)
def test_a_planted_violation_breaks_its_contract(tree: Path, module: str, line: str, contract: str) -> None:
    if module == "rlinf/profiling.py":  # a cycle needs both directions: the runner already imports profiling
        assert "rlinf.profiling" in (tree / "rlinf/runner.py").read_text()
    plant(tree / module, line)
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout
