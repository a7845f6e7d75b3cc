"""Simulator benchmarks (not part of the default run).

Run: ``pytest -m benchmark --benchmark-enable tests/bench_simulator.py``
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from factories import grpo_trace, grpo_workflow

from rlinf.core.cluster import parse_cluster
from rlinf.core.costs import fit
from rlinf.core.errors import RlinfWarning
from rlinf.core.lowering import lower
from rlinf.core.plan import Placement, Plan
from simulator import simulate

pytestmark = pytest.mark.benchmark


def _grpo_setup(num_devices: int, spec: str):
    """4-component GRPO, 64 micro-batches on every stream edge, disaggregated over ``num_devices``."""
    workflow = grpo_workflow(num_prompts=256, group_size=4)
    lengths = tuple(float(x) for x in np.random.default_rng(0).lognormal(7.3, 0.7, 2000))
    trace = grpo_trace(workflow, spec, response_lengths=lengths)
    quarter = num_devices // 4
    plan = Plan(
        placements=[
            Placement(component="rollout", devices=range(0, num_devices // 2)),
            Placement(component="reward", devices=range(num_devices // 2, num_devices // 2 + quarter // 2)),
            Placement(
                component="inference", devices=range(num_devices // 2 + quarter // 2, num_devices - quarter)
            ),
            Placement(component="actor", devices=range(num_devices - quarter, num_devices)),
        ],
        granularity={"rollout->reward": 64, "reward->inference": 64, "inference->actor": 64},
    )
    cluster = parse_cluster(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RlinfWarning)
        program = lower(workflow, plan, cluster)
        costs = fit(trace, cluster)
        simulate(program, costs)  # warm the cost model's warnings
    return workflow, plan, cluster, program, costs


def test_bench_grpo_64_micro_batches_64_devices(benchmark) -> None:
    _, _, _, program, costs = _grpo_setup(64, "8x8xH100")
    timeline = benchmark(simulate, program, costs)
    assert timeline.iteration_s > 0
    benchmark.extra_info["num_ops"] = program.num_ops
    benchmark.extra_info["simulations_per_s"] = 1.0 / benchmark.stats.stats.mean


def test_bench_grpo_1024_devices(benchmark) -> None:
    _, _, _, program, costs = _grpo_setup(1024, "128x8xH100")
    timeline = benchmark(simulate, program, costs)
    assert len(timeline.peak_memory_bytes) == 1024


def test_bench_lower_1024_devices(benchmark) -> None:
    workflow, plan, cluster, _, _ = _grpo_setup(1024, "128x8xH100")
    program = benchmark(lower, workflow, plan, cluster)
    assert program.num_ops > 256
