"""``rlinf simulate --drift``: a whole run whose costs drift, priced for the static plan, the best static plan in
hindsight and re-planning (rlinf.capacity.drift); the schedule's bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import attrs
import pytest
from factories import llm_7b

from planner.judge import judge
from rlinf.analytic.synthesis import synthesize
from rlinf.capacity.drift import (
    DriftReport,
    DriftSchedule,
    Strategy,
    apply_point,
    plan_over_run,
    switch_seconds,
)
from rlinf.cli import main
from rlinf.core.cluster import parse_cluster
from rlinf.core.config_structure import structure_config
from rlinf.core.costs import fit
from rlinf.core.trace import Trace

CLUSTER = "1x8xH100"
GROWTH = {
    "iterations": 100,
    "points": [
        {"at": 0, "response_median_tokens": 300},
        {"at": 30, "response_median_tokens": 2500},
        {"at": 60, "response_median_tokens": 6000},
    ],
}
"""Responses that grow 20x: the plan chosen for short ones splits the devices, long ones want them all."""


@pytest.fixture(scope="module")
def trace() -> Trace:
    return synthesize(llm_7b(), parse_cluster(CLUSTER), seed=0)


def schedule(data: dict) -> DriftSchedule:
    return structure_config(DriftSchedule, data, "schedule")


@pytest.fixture(scope="module")
def growth(trace: Trace) -> DriftReport:
    return plan_over_run(trace, trace.cluster, schedule(GROWTH))


def recomputed_total(report: DriftReport, strategy: Strategy, trace: Trace) -> float:
    """The strategy's total from its pieces, each iteration time simulated again from scratch, plus its switches."""
    total = 0.0
    for a, b, candidate, _ in strategy.pieces:
        index = max(i for i, p in enumerate(report.schedule.points) if p.at <= a)
        shifted = apply_point(trace, report.schedule.points[index])
        seconds = judge(
            shifted.workflow, trace.cluster, fit(shifted), report.plans[candidate], "check"
        ).iteration_s
        total += (b - a) * seconds
    return total + sum(s.switch_s for s in strategy.switches)


def test_re_planning_follows_growing_responses_and_says_why(growth: DriftReport, trace: Trace) -> None:
    replan, static = growth.replanning, growth.static
    assert replan.switches, "20x longer responses should move the plan"
    assert all(s.reason and s.switch_s > 0 for s in replan.switches)
    assert replan.total_s < static.total_s
    assert replan.total_s <= growth.hindsight.total_s * 1.05  # an oracle's fixed plan is no much better
    assert replan.total_s == pytest.approx(recomputed_total(growth, replan, trace), rel=1e-9)
    assert static.total_s == pytest.approx(recomputed_total(growth, static, trace), rel=1e-9)
    # every point's own plan is the fastest fitting candidate at that point
    for i in range(len(growth.schedule.points)):
        column = [row[i] for row in growth.seconds]
        assert growth.seconds[growth.chosen[i]][i] == pytest.approx(min(column))


def test_a_switch_waits_for_the_drift_to_be_seen(growth: DriftReport) -> None:
    detect = growth.assumptions["detect_iterations"]
    by_choice = [s for s in growth.replanning.switches if not s.reason.startswith("the plan in force")]
    assert by_choice
    assert all(s.iteration - detect in {p.at for p in growth.schedule.points} for s in by_choice)


def test_without_drift_re_planning_is_the_static_run(trace: Trace) -> None:
    flat = schedule({"iterations": 50, "points": [{"at": 0}, {"at": 20}]})  # the base trace throughout
    report = plan_over_run(trace, trace.cluster, flat)
    assert report.replanning.switches == ()
    assert (
        report.replanning.total_s
        == report.static.total_s
        == pytest.approx(50 * report.seconds[report.chosen[0]][0])
    )


def test_a_switch_that_cannot_pay_for_itself_is_not_made(trace: Trace) -> None:
    """A growth that leaves the start plan slower but fitting: with switches priced out of reach, re-planning
    keeps the static plan."""
    mild = schedule(
        {
            "iterations": 40,
            "points": [{"at": 0, "response_median_tokens": 300}, {"at": 10, "response_median_tokens": 900}],
        }
    )
    cheap = plan_over_run(trace, trace.cluster, mild, switch_overhead_s=0.0)
    costly = plan_over_run(trace, trace.cluster, mild, switch_overhead_s=1e9)
    assert costly.static.failed_at is None
    assert cheap.replanning.switches, "a free switch to a faster plan is taken"
    assert costly.replanning.switches == ()
    assert costly.replanning.total_s == costly.static.total_s


def test_switch_cost_moves_the_state_of_components_whose_devices_change(
    growth: DriftReport, trace: Trace
) -> None:
    a, b = growth.plans[growth.chosen[0]], growth.plans[growth.chosen[-1]]
    assert switch_seconds(trace, trace.cluster, a, a, 10.0, 5.0) == 0.0
    moved = sum(
        c.state_bytes for c in trace.workflow.components if a.devices_of(c.name) != b.devices_of(c.name)
    )
    assert moved > 0
    expected = 5.0 + moved / trace.cluster.links.intra_node_bytes_per_s + (10.0 if b.max_staleness else 0.0)
    assert switch_seconds(trace, trace.cluster, a, b, 10.0, 5.0) == pytest.approx(expected)


def test_cost_scale_multiplies_one_components_samples(trace: Trace) -> None:
    point = schedule({"iterations": 2, "points": [{"at": 0, "cost_scale": {"rollout": 3.0}}]}).points[0]
    scaled = apply_point(trace, point)
    for before, after in zip(trace.samples, scaled.samples, strict=True):
        factor = 3.0 if before.component == "rollout" else 1.0
        assert after.seconds == pytest.approx(before.seconds * factor)
        assert attrs.evolve(after, seconds=before.seconds) == before


def test_the_command_prints_writes_the_plot_and_the_json(tmp_path: Path, trace: Trace, capsys) -> None:
    trace_path = tmp_path / "trace.json"
    trace_path.write_text(json.dumps(trace.to_dict()))
    drift = tmp_path / "drift.yaml"
    drift.write_text(json.dumps(GROWTH))
    out = tmp_path / "out"
    assert main(["simulate", "--trace", str(trace_path), "--drift", str(drift), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "re-planning against static:" in printed and "switch at iteration" in printed
    assert (out / "drift.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((out / "drift.json").read_text())
    names = [s["name"] for s in data["strategies"]]
    assert names == ["static", "best static in hindsight", "re-planning"]
    assert data["replanning_speedup_over_static"] > 1
    replan = data["strategies"][2]
    assert replan["device_hours"] == pytest.approx(replan["total_s"] * 8 / 3600)


BAD = [
    ({"iterations": 10, "points": [{"at": 1}]}, "points[0].at"),
    ({"iterations": 10, "points": [{"at": 0}, {"at": 0}]}, "points[1].at"),
    ({"iterations": 10, "points": [{"at": 0}, {"at": 10}]}, "points[1].at"),
    ({"iterations": 0, "points": [{"at": 0}]}, "iterations"),
    ({"iterations": 10, "points": []}, "points"),
    ({"iterations": 10, "points": [{"at": 0, "lengths": 3}]}, "lengths"),
    ({"iterations": 10, "points": [{"at": 0, "cost_scale": {"nope": 2}}]}, "cost_scale.nope"),
    ({"iterations": 10, "points": [{"at": 0, "cost_scale": {"rollout": -1}}]}, "cost_scale.rollout"),
    ({"iterations": 10, "points": [{"at": 0, "response_median_tokens": 100000}]}, "response_median_tokens"),
    ({"iterations": 10, "points": [{"at": 0, "response_median_tokens": "long"}]}, "response_median_tokens"),
]


@pytest.mark.parametrize(("data", "field"), BAD, ids=[f for _, f in BAD])
def test_a_bad_schedule_is_one_line_and_exit_2(
    tmp_path: Path, trace: Trace, capsys, data: dict, field: str
) -> None:
    trace_path = tmp_path / "trace.json"
    trace_path.write_text(json.dumps(trace.to_dict()))
    drift = tmp_path / "drift.yaml"
    drift.write_text(json.dumps(data))
    assert main(["simulate", "--trace", str(trace_path), "--drift", str(drift)]) == 2
    err = capsys.readouterr().err.strip()
    assert field in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_a_workload_knob_on_a_profiled_trace_is_refused(tmp_path: Path, capsys) -> None:
    drift = tmp_path / "drift.yaml"
    drift.write_text(json.dumps({"iterations": 10, "points": [{"at": 0, "response_median_tokens": 100}]}))
    code = main(["simulate", "--trace", "traces/hopper_ppo_cpu2.json", "--drift", str(drift)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "points[0].response_median_tokens" in err and "synthesized" in err


def test_simulate_needs_a_plan_or_a_drift(capsys) -> None:
    assert main(["simulate", "--trace", "traces/grpo_7b_h100.json"]) == 2
    err = capsys.readouterr().err
    assert "--plan" in err and "--drift" in err


def test_infinite_totals_stay_out_of_the_json(growth: DriftReport) -> None:
    data = growth.to_dict()
    for strategy in data["strategies"]:
        assert strategy["total_s"] is None or math.isfinite(strategy["total_s"])
    json.dumps(data, allow_nan=False)


def test_a_given_plan_that_does_not_fit_at_the_start_is_switched_at_once(
    growth: DriftReport, trace: Trace
) -> None:
    """The plan chosen for 2,500-token responses does not fit 6,000-token ones (growth's forced switch): given as
    the static plan of a schedule that starts there, the static run stops at 0 and re-planning switches at 0."""
    forced = [s for s in growth.replanning.switches if s.reason.startswith("the plan in force")]
    assert forced
    start = next(p for p in growth.plans if p.describe() == forced[0].from_plan)
    late = schedule({"iterations": 10, "points": [{"at": 0, "response_median_tokens": 6000}]})
    report = plan_over_run(trace, trace.cluster, late, start_plan=start)
    assert report.static.failed_at == 0 and math.isinf(report.static.total_s)
    assert [s.iteration for s in report.replanning.switches] == [0] and math.isfinite(
        report.replanning.total_s
    )
