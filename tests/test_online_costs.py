"""The online cost model (rlinf.app.online): the plan in force re-predicted from the run's own iterations."""

from __future__ import annotations

import numpy as np
import pytest

from rlinf.app.online import TrackingPrediction, ratio_summary
from rlinf.core.costs import fit
from rlinf.core.lowering import lower
from rlinf.core.plan import plan_from_yaml
from rlinf.core.timeline import Timeline
from rlinf.core.trace import load_trace
from simulator import replay, simulate

TRACE = "traces/hopper_ppo_cpu2.json"
PLAN = "placement: {actor: 0, env: 0-1, rollout: 0-1}\ngranularity: {loop: 2}\n"


@pytest.fixture(scope="module")
def predicted() -> Timeline:
    trace = load_trace(TRACE)
    plan = plan_from_yaml(PLAN, trace.cluster.num_devices)
    program = lower(trace.workflow, plan, trace.cluster)
    return simulate(program, fit(trace))


def run_with(predicted: Timeline, factors: dict[tuple[str, str], float]) -> Timeline:
    """An iteration whose ops took the predicted seconds times a factor per (component, op): replayed by the
    simulator's engine, as the executor would have recorded it."""
    program = predicted.program
    base = np.asarray(predicted.end_s) - np.asarray(predicted.start_s)
    scale = [factors.get((op.component, op.name), 1.0) for op in program.ops]
    return replay(program, base * scale)


def test_without_drift_the_tracking_prediction_is_the_prediction(predicted: Timeline) -> None:
    tracking = TrackingPrediction(predicted)
    assert tracking.predict() == predicted.iteration_s  # before any iteration
    for _ in range(3):
        assert tracking.observe(run_with(predicted, {}))
    assert tracking.predict() == pytest.approx(predicted.iteration_s, rel=1e-9)
    assert all(r == pytest.approx(1.0) for r in tracking.ratios().values())


def test_a_component_that_slows_down_is_followed(predicted: Timeline) -> None:
    slower = {("env", "env_step"): 2.0}
    measured = run_with(predicted, slower)
    assert measured.iteration_s > predicted.iteration_s * 1.05  # the drift matters to this plan
    tracking = TrackingPrediction(predicted)
    for _ in range(4):
        tracking.observe(measured)
    assert tracking.ratios()[("env", "env_step")] == pytest.approx(2.0)
    assert tracking.predict() == pytest.approx(measured.iteration_s, rel=1e-9)
    assert "env.env_step x2.00" in ratio_summary(tracking.ratios())


def test_one_slow_iteration_in_the_window_moves_the_median_little(predicted: Timeline) -> None:
    tracking = TrackingPrediction(predicted, window=5)
    for _ in range(4):
        tracking.observe(run_with(predicted, {}))
    tracking.observe(run_with(predicted, {("actor", "train"): 10.0}))
    assert tracking.predict() == pytest.approx(predicted.iteration_s, rel=1e-9)


def test_the_window_forgets_what_is_over(predicted: Timeline) -> None:
    tracking = TrackingPrediction(predicted, window=3)
    slower = run_with(predicted, {("rollout", "act"): 1.5})
    for _ in range(3):
        tracking.observe(slower)
    for _ in range(3):
        tracking.observe(run_with(predicted, {}))
    assert tracking.predict() == pytest.approx(predicted.iteration_s, rel=1e-9)


def test_another_programs_iteration_is_not_taken(predicted: Timeline) -> None:
    trace = load_trace(TRACE)
    other = lower(trace.workflow, plan_from_yaml(PLAN.replace("loop: 2", "loop: 1"), 2), trace.cluster)
    tracking = TrackingPrediction(predicted)
    assert not tracking.observe(simulate(other, fit(trace)))
    assert tracking.iterations_seen == 0


def test_the_scaled_trace_carries_the_ratios_to_every_plan(predicted: Timeline) -> None:
    trace = load_trace(TRACE)
    tracking = TrackingPrediction(predicted)
    tracking.observe(run_with(predicted, {("env", "env_step"): 3.0}))
    scaled = tracking.scaled_trace(trace)
    for before, after in zip(trace.samples, scaled.samples, strict=True):
        expected = 3.0 if (before.component, before.op) == ("env", "env_step") else 1.0
        assert after.seconds == pytest.approx(before.seconds * expected, rel=1e-9)
