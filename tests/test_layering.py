"""The import rules of ARCHITECTURE.md (its folder table and "this round"), enforced by import-linter
(``lint-imports``, run by .ci/run with the contracts in pyproject.toml): the check passes on the tree and fails on a
violation planted against each contract: in each layer, a workload or the custom example reaching past rlinf.api
(the root package, any core module, a new one included), the planner importing the executor or rlinf.analytic,
the executor the planner, the simulator or rlinf.analytic, the simulator anything but the core, and a cycle."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rlinf", "executor", "planner", "simulator")
LAYERS = "Layers: a layer imports only the layers below it"
ONE_DOOR = "One door for workloads"
PLANNER = "The planner imports rlinf core and the simulator only"
EXECUTOR = "The executor imports rlinf core and the public API types only"
SIMULATOR = "The simulator imports rlinf core only"
POLICY = "rlinf/workloads/embodied/policy.py"
EXAMPLE = "examples/custom_workload/ppo_critic.py"
CYCLES = "No import cycles between sibling modules"


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
    for name in (*PACKAGES, "examples"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def plant(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 kept, 0 broken" in result.stdout


def test_every_module_is_in_a_layer() -> None:
    """The layers contract names packages, so a new module is covered by its folder; only the entry points of the
    root package stand outside."""
    layered = ("rlinf.cli", "rlinf.commands", "rlinf.capacity", "rlinf.app", "rlinf.workloads", "planner",
               "rlinf.analytic", "executor", "simulator", "rlinf.api", "rlinf.algorithms", "rlinf.core")  # fmt: skip
    outside = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if not any(module == name or module.startswith(f"{name}.") for name in layered):
                outside.append(module)
    assert sorted(outside) == ["rlinf.__init__", "rlinf.__main__"]
    text = (ROOT / "pyproject.toml").read_text()
    assert all(f'"{name}' in text for name in layered)


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("rlinf/core/lowering.py", "import rlinf.api.workload  # planted", LAYERS),  # core -> api
        ("rlinf/algorithms/grpo.py", "import rlinf.api  # planted", LAYERS),  # algorithms -> api
        ("rlinf/api/worker_context.py", "import executor.devices  # planted", LAYERS),  # api -> executor
        ("rlinf/analytic/decode.py", "import planner.search  # planted", LAYERS),  # analytic -> planner
        (
            "executor/devices.py",
            "import simulator.engine  # planted",
            LAYERS,
        ),  # sibling: executor -> simulator
        ("simulator/engine.py", "import executor  # planted", LAYERS),  # sibling: simulator -> executor
        ("planner/space.py", "import rlinf.app.runner  # planted", LAYERS),  # planner -> app
        ("rlinf/workloads/embodied/policy.py", "import rlinf.app.checkpoint  # planted", LAYERS),
        ("rlinf/workloads/embodied/policy.py", "import rlinf.core.plan  # planted", ONE_DOOR),
        # a workload through the root package: the three doors of issue 49, now one
        (POLICY, "from rlinf import CostModel, Plan, lower  # planted", ONE_DOOR),
        ("rlinf/workloads/hf_grpo/task.py", "from rlinf.core.errors import require  # planted", ONE_DOOR),
        ("rlinf/workloads/hf_grpo/task.py", "import rlinf.analytic.roofline  # planted", ONE_DOOR),
        ("rlinf/workloads/embodied/workload.py", "import executor  # planted", ONE_DOOR),
        (EXAMPLE, "from rlinf import Workflow  # planted", ONE_DOOR),
        (EXAMPLE, "from rlinf.core.limits import current  # planted", ONE_DOOR),
        ("planner/space.py", "import executor  # planted", PLANNER),
        ("planner/search.py", "from rlinf.analytic import roofline  # planted", PLANNER),
        ("planner/search.py", "import rlinf.api  # planted", PLANNER),
        ("executor/devices.py", "import planner.search  # planted", EXECUTOR),
        ("executor/dispatch.py", "import rlinf.analytic.decode  # planted", EXECUTOR),
        ("executor/dispatch.py", "import rlinf.algorithms.ppo  # planted", EXECUTOR),
        ("simulator/engine.py", "import rlinf.api  # planted", SIMULATOR),
        ("simulator/engine.py", "import rlinf.algorithms.grpo  # planted", SIMULATOR),
        ("rlinf/app/run_dir.py", "import rlinf.commands.train  # planted", LAYERS),  # app -> commands
        ("rlinf/capacity/config.py", "import rlinf.commands.plan  # planted", LAYERS),  # capacity -> commands
        ("rlinf/commands/values.py", "import rlinf.cli  # planted", LAYERS),  # commands -> cli
        ("rlinf/app/profiling.py", "import rlinf.app.runner  # planted", CYCLES),
    ],
)
def test_a_planted_violation_breaks_its_contract(tree: Path, module: str, line: str, contract: str) -> None:
    if (
        module == "rlinf/app/profiling.py"
    ):  # a cycle needs both directions: the runner already imports profiling
        assert "rlinf.app.profiling" in (tree / "rlinf/app/runner.py").read_text()
    plant(tree / module, line)
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    broken = [block for block in result.stdout.split("\n\n") if "BROKEN" in block]
    assert any(contract.split(":")[0] in block for block in broken), result.stdout


def test_a_workload_importing_a_core_module_added_later_breaks_the_one_door(tree: Path) -> None:
    """The one-door contract forbids ``rlinf.core`` as a whole, so a core module written after it is covered too."""
    (tree / "rlinf/core/added_later.py").write_text('"""A core module the contracts do not name."""\n')
    plant(tree / "rlinf/workloads/hf_grpo/rollout.py", "import rlinf.core.added_later  # planted")
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    broken = [block for block in result.stdout.split("\n\n") if "BROKEN" in block]
    assert len(broken) == 1 and ONE_DOOR in broken[0], result.stdout
    assert "rlinf.core.added_later" in result.stdout
