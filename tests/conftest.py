"""Benchmark provenance: a ``--benchmark-json`` file also records the load average at the start and the end of the
session and the command line (pytest-benchmark already records the machine, the commit and each round's time with
``--benchmark-save-data``), so a published benchmark figure carries the conditions it was measured under. The
order of the modules: the longest first, for the README's two-worker test command. And the fixtures many modules
share."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

_LOAD_AT_START: list[tuple[float, float, float]] = []


def pytest_sessionstart(session: Any) -> None:
    _LOAD_AT_START.append(os.getloadavg())


def pytest_benchmark_update_json(config: Any, benchmarks: Any, output_json: dict[str, Any]) -> None:
    output_json["load_average_before"] = list(_LOAD_AT_START[0]) if _LOAD_AT_START else None
    output_json["load_average_after"] = list(os.getloadavg())
    output_json["command"] = " ".join(["python3 -m pytest", *sys.argv[1:]])


LONGEST_MODULES = (
    "test_ray_backend.py",
    "test_planner_comparisons.py",
    "test_doc_figures.py",
    "test_ray_cli.py",
    "test_fault_injection.py",
    "test_staleness.py",
    "test_cli_simulate.py",
    "test_hf_grpo_train.py",
    "test_workload_api.py",
    "test_control_server.py",
    "test_fuzz_cli.py",
    "test_analytic_validation.py",
    "test_planner_optimality.py",
    "test_workload_port.py",
    "test_shapes_by_plans.py",
    "test_profiling.py",
    "test_ports.py",
    "test_executor.py",
)
"""The modules that take longest on 2 cores (`python3 -m pytest -n 2 --durations=0`, summed per module), longest
first, except that the two Ray modules do not start together (each starts its own Ray). With ``-n 2`` (the README's test command) each module runs whole on one worker (``--dist loadscope`` in
pyproject.toml: module fixtures are computed once); starting the longest ones first lets the two workers finish
together instead of one waiting on the other's last long module."""


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    rank = {name: position for position, name in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="session")
def grpo_cache(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The GRPO workload's model and warm-start cache (``cache_dir``), shared by every test of the session:
    each cached entry is keyed by the settings it depends on and built under a file lock, so the tiny addition
    model's warm start is trained once for all the modules (and both ``-n 2`` workers) that use it."""
    base = tmp_path_factory.getbasetemp()
    return (base if worker_id == "master" else base.parent) / "grpo_cache"
