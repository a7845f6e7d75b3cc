"""Plan space, CP-SAT candidates, search, baselines, infeasibility and the ``rlinf plan`` command."""

from __future__ import annotations

import json

import attrs
import pytest
from factories import costs_for, embodied_trace, grpo_trace, grpo_workflow

from planner import candidates, search
from planner.baselines import closed_form, fixed_collocated, fixed_disaggregated
from planner.cpsat import best_points
from planner.search import prepare
from planner.space import PlanPoint, build_space
from planner.surrogate import estimate
from rlinf.cli import main
from rlinf.cluster import GIB
from rlinf.costs import fit
from rlinf.errors import ConfigError, InfeasiblePlanError
from rlinf.plan import plan_from_yaml


@pytest.fixture
def grpo():
    trace = grpo_trace()
    cluster = trace.cluster.with_num_devices(8)
    return trace.workflow, cluster, fit(trace, cluster)


def test_space_counts_what_it_enumerates():
    space = build_space(grpo_workflow(num_prompts=8), 4, max_granularity=2)
    points = list(space.points())
    assert len(points) == space.count() == len(set(points))
    assert space.ladder == (1, 2)
    # 3 heavy components cut into runs (4 ways: 1, 2, 2 or 3 runs); the reward alone or in any run: 2+3+3+4
    assert len(space.partitions) == 12


def test_point_places_groups_on_consecutive_blocks():
    point = PlanPoint(
        groups=(("rollout",), ("reward", "inference", "actor")),
        sizes=(4, 2),
        granularity=(("rollout->reward", 2),),
    )
    plan = point.to_plan()
    assert plan.devices_of("rollout") == (0, 1, 2, 3)
    assert plan.devices_of("actor") == (4, 5)
    assert plan.mode == "hybrid"


def test_space_rejects_bad_caps():
    with pytest.raises(ConfigError, match="max_granularity"):
        build_space(grpo_workflow(), 8, max_granularity=0)


def test_cpsat_objective_equals_the_surrogate(grpo):
    workflow, cluster, costs = grpo
    _, tables = prepare(workflow, cluster, costs, max_granularity=8, max_loop_stages=4)
    points = best_points(tables, k=6, time_limit_s=10, seed=0)
    assert len(points) == 6
    values = [p.surrogate_s for p in points]
    assert values == sorted(values)
    for scored in points:
        assert scored.surrogate_s == pytest.approx(
            estimate(tables, scored.point).iteration_s, rel=1e-5, abs=1e-6
        )


def test_cpsat_best_is_the_surrogate_optimum_of_the_space(grpo):
    workflow, cluster, costs = grpo
    space, tables = prepare(workflow, cluster, costs, max_granularity=2, max_loop_stages=4)
    best = best_points(tables, k=1, time_limit_s=10, seed=0)[0]
    fitting = [estimate(tables, p) for p in space.points()]
    optimum = min(e.iteration_s for e in fitting if e.fits(tables.capacity_bytes))
    assert best.surrogate_s == pytest.approx(optimum, rel=1e-5)


def test_candidates_are_distinct_plans(grpo):
    workflow, cluster, costs = grpo
    plans = candidates(workflow, cluster, costs, k=10, time_limit_s=10, seed=0)
    assert len(plans) == 10
    assert len(set(plans)) == 10
    for plan in plans:
        plan.validate_for(workflow, cluster.num_devices)


def test_search_is_deterministic(grpo):
    workflow, cluster, costs = grpo
    first = search(workflow, cluster, costs, k=8, seed=3)
    second = search(workflow, cluster, costs, k=8, seed=3)
    assert first.plan == second.plan
    assert [e.plan for e in first.ranking] == [e.plan for e in second.ranking]
    assert first.best.iteration_s == second.best.iteration_s


def test_search_ranks_by_simulation_and_beats_baselines(grpo):
    workflow, cluster, costs = grpo
    result = search(workflow, cluster, costs, k=8)
    times = [e.iteration_s for e in result.ranking if e.fits]
    assert times == sorted(times)
    assert result.best.iteration_s == times[0]
    _, tables = prepare(workflow, cluster, costs, max_granularity=32, max_loop_stages=16)
    for baseline in (fixed_collocated, fixed_disaggregated, closed_form):
        evaluation = baseline(workflow, cluster, costs, tables)
        assert evaluation is not None and evaluation.fits
        assert result.best.iteration_s <= evaluation.iteration_s * (1 + 1e-9)


def test_embodied_search_uses_loop_stages():
    trace = embodied_trace()
    result = search(trace.workflow, trace.cluster, costs_for(trace), k=8)
    assert "loop" in result.plan.granularity
    assert trace.workflow.batch_size % result.plan.granularity["loop"] == 0


def test_state_larger_than_a_device_is_explained():
    trace = grpo_trace(grpo_workflow(state_gib=100.0))
    cluster = trace.cluster.with_num_devices(8)
    with pytest.raises(
        InfeasiblePlanError, match=r"component rollout needs 100.0 GiB .* H100 .*model_parallel_size"
    ):
        search(trace.workflow, cluster, costs_for(trace))


def test_activations_that_need_more_devices_are_explained():
    trace = grpo_trace(grpo_workflow(state_gib=30.0))  # actor state 60 GiB per device
    trace = attrs.evolve(trace, activation_bytes_per_sample={"actor": 8 * GIB})
    cluster = trace.cluster.with_num_devices(2)
    with pytest.raises(
        InfeasiblePlanError,
        match=r"component actor needs 92.0 GiB .*on 2 of the 2 devices.*fix: more devices",
    ):
        search(trace.workflow, cluster, costs_for(trace))
    wider = trace.cluster.with_num_devices(8)
    assert search(trace.workflow, wider, fit(trace, wider)).best.fits


def test_offload_makes_a_tight_collocation_fit():
    trace = grpo_trace(grpo_workflow(state_gib=30.0))
    cluster = trace.cluster.with_num_devices(4)
    result = search(trace.workflow, cluster, costs_for(trace), max_granularity=4)
    assert result.best.fits
    assert result.best.peak_memory_bytes <= cluster.device.memory_bytes


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "grpo.json"
    grpo_trace().save(path)
    return path


def test_cli_writes_a_plan_that_simulate_reads(trace_file, tmp_path, capsys):
    out = tmp_path / "plan.yaml"
    assert (
        main(["plan", "--trace", str(trace_file), "--cluster", "1x8xH100", "--top", "4", "--out", str(out)])
        == 0
    )
    text = capsys.readouterr().out
    assert "chosen:" in text and "iteration_s" in text
    plan = plan_from_yaml(out.read_text(), 8)
    assert plan.describe() in text
    assert (
        main(["simulate", "--trace", str(trace_file), "--cluster", "1x8xH100", "--plan", str(out), "--json"])
        == 0
    )


def test_cli_json(trace_file, capsys):
    assert (
        main(
            [
                "plan",
                "--trace",
                str(trace_file),
                "--cluster",
                "1x8xH100",
                "--top",
                "4",
                "--json",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert {"plan", "mode", "predicted_iteration_s", "search_s", "candidates"} <= set(report)
    assert report["mode"] == report["candidates"][0]["mode"]
    assert report["predicted_iteration_s"] == report["candidates"][0]["predicted_iteration_s"]


def test_cli_infeasible_exits_2(tmp_path, capsys):
    path = tmp_path / "big.json"
    grpo_trace(grpo_workflow(state_gib=100.0)).save(path)
    assert main(["plan", "--trace", str(path), "--cluster", "1x8xH100"]) == 2
    assert "needs 100.0 GiB" in capsys.readouterr().err


def test_cli_rejects_bad_top(trace_file, capsys):
    assert main(["plan", "--trace", str(trace_file), "--top", "0"]) == 2
    assert "--top" in capsys.readouterr().err
