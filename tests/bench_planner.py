"""Search time (CP-SAT candidates + simulation of every candidate) on the shipped 7B trace.

Run: pytest -m benchmark --benchmark-enable tests/bench_planner.py
"""

from __future__ import annotations

import warnings

import pytest

from planner import search
from rlinf.core.costs import fit
from rlinf.core.errors import ExtrapolationWarning
from rlinf.core.trace import load_trace


@pytest.mark.benchmark
@pytest.mark.parametrize(
    "trace_path", ["traces/grpo_1.5b_h100.json", "traces/grpo_7b_h100.json", "traces/grpo_32b_h200.json"]
)
@pytest.mark.parametrize("num_devices", [256, 1024])
def test_search_time(benchmark, trace_path, num_devices):
    trace = load_trace(trace_path)
    cluster = trace.cluster.with_num_devices(num_devices)
    costs = fit(trace, cluster)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        result = benchmark.pedantic(lambda: search(trace.workflow, cluster, costs), rounds=3, iterations=1)
    assert result.best.fits
