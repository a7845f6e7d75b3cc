"""Batch shapes x plans as a property (issue 48): cases drawn by a seeded generator over embodied PPO shapes
(environments, steps, minibatches) and GRPO shapes (prompts, group size, response length) x plans (mode, 1-2
devices, granularity, offload on and off, staleness 0-1) each run one iteration on real workers under the executor's
watchdog, or are refused up front with one line; none hangs, none fails otherwise. The wider sweep of the same
generator is ``benchmarks/shape_sweep.py`` (its artifact: ``docs/data/shape_sweep.json``)."""

from __future__ import annotations

import time
from pathlib import Path

from benchmark_scripts import load

sweep = load("shape_sweep")
SEED, CASES, GRPO_EVERY = 34, 12, 12
"""The default suite's draw: 11 embodied PPO cases and one GRPO case; the seed was chosen for a draw that covers
every axis of the plan space among the cases that run (the test checks that it still does)."""
WATCHDOG_S = 20.0


def test_every_shape_by_plan_runs_or_is_refused_in_one_line_and_none_hangs(grpo_cache: Path) -> None:
    cases = sweep.draw_cases(CASES, SEED, grpo_every=GRPO_EVERY)
    # the draw covers the plan space's axes (a new seed that lost one would fail here, not pass quietly)
    assert {c.mode for c in cases} == set(sweep.MODES) and {c.num_devices for c in cases} == {1, 2}
    assert {c.offload for c in cases} == {False, True} and {c.staleness for c in cases} == {0, 1}
    assert {c.workload for c in cases} == {"embodied", "grpo"}
    started = time.monotonic()
    outcomes = [sweep.run_case(case, watchdog_s=WATCHDOG_S, cache=grpo_cache) for case in cases]
    report = "\n".join(f"{o.result} {o.seconds:.1f} s {o.case.describe()}: {o.message}" for o in outcomes)
    print(f"{len(cases)} cases in {time.monotonic() - started:.0f} s\n{report}")
    assert all(o.result in ("ran", "refused") for o in outcomes), report
    refusals = [o.message for o in outcomes if o.result == "refused"]
    assert all(message and "\n" not in message and "; fix: " in message for message in refusals), report
    ran = [o.case for o in outcomes if o.result == "ran"]
    assert {c.workload for c in ran} == {"embodied", "grpo"} and len(ran) >= CASES // 2, report
    assert {c.num_devices for c in ran} == {1, 2} and {c.staleness for c in ran} == {0, 1}, report
