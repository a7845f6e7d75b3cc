"""Benchmark provenance: a ``--benchmark-json`` file also records the load average at the start and the end of the
session and the command line (pytest-benchmark already records the machine, the commit and each round's time with
``--benchmark-save-data``), so a published benchmark figure carries the conditions it was measured under."""

from __future__ import annotations

import os
import sys
from typing import Any

_LOAD_AT_START: list[tuple[float, float, float]] = []


def pytest_sessionstart(session: Any) -> None:
    _LOAD_AT_START.append(os.getloadavg())


def pytest_benchmark_update_json(config: Any, benchmarks: Any, output_json: dict[str, Any]) -> None:
    output_json["load_average_before"] = list(_LOAD_AT_START[0]) if _LOAD_AT_START else None
    output_json["load_average_after"] = list(os.getloadavg())
    output_json["command"] = " ".join(["python3 -m pytest", *sys.argv[1:]])
