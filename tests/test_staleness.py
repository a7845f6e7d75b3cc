"""Asynchronous plans (a staleness bound ``k``): the plan dimension, the lowering's buffered edges, the simulated
steady state, the planner and the CLI; real runs record the policy version behind every sample (at most ``k``
behind the trainer), PPO's ratio reads the behaviour log-probabilities, and a killed worker under a bound restarts
into exactly the run an undisturbed one computes; the custom-workload example reports its lag too. GRPO's own:
``tests/test_staleness_grpo.py``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import attrs
import numpy as np
import pytest
import torch
from factories import costs_for, grpo_trace
from test_auto_mode import SMALL, synthetic_trace
from test_fault_injection import computed, has_checkpoint, kill_when, local_workers

from executor.devices import Device
from planner import search
from planner.brute_force import brute_force
from planner.space import build_space
from rlinf.api import WorkerContext
from rlinf.app.checkpoint import load_latest
from rlinf.app.jobs import load_job_config
from rlinf.capacity.planning import propose
from rlinf.cli import main
from rlinf.core.costs import fit
from rlinf.core.errors import ConfigError
from rlinf.core.lowering import lower
from rlinf.core.plan import plan_from_yaml
from rlinf.core.trace import load_trace
from rlinf.core.workflow import Component, Edge, Workflow, workflow_from_dict
from rlinf.workloads.embodied.actor_worker import ActorWorker
from rlinf.workloads.embodied.env_worker import EnvWorker
from rlinf.workloads.embodied.rollout_worker import RolloutWorker
from simulator import simulate

ROOT = Path(__file__).resolve().parent.parent
APART = "placement: {rollout: 0-3, reward: 0-3, inference: 0-3, actor: 4-7}\n"
"""The factory GRPO flow with the rollout side on devices 0-3 and the actor on 4-7."""
TOGETHER = "placement: {rollout: 0-7, reward: 0-7, inference: 0-7, actor: 0-7}\n"


def _lowered(placement: str, k: int):
    trace = grpo_trace()
    cluster = trace.cluster.with_num_devices(8)
    program = lower(trace.workflow, plan_from_yaml(placement + f"max_staleness: {k}\n", 8), cluster)
    return program, simulate(program, costs_for(trace))


# ---------------------------------------------------------------------------------------------- the plan
def test_the_bound_round_trips_through_yaml_and_names_the_plan() -> None:
    plan = plan_from_yaml(APART + "max_staleness: 2\n", 8)
    assert plan.max_staleness == 2 and plan.describe().endswith("| staleness 2")
    assert plan_from_yaml(plan.to_yaml(), 8) == plan
    synchronous = plan_from_yaml(APART, 8)
    assert synchronous.max_staleness == 0 and "staleness" not in synchronous.describe()
    assert "max_staleness" not in synchronous.to_dict() and synchronous != plan


@pytest.mark.parametrize("value", [-1, 65, "one"])
def test_a_bad_bound_is_refused_naming_the_field(value: object) -> None:
    with pytest.raises(ConfigError, match="max_staleness"):
        plan_from_yaml(APART + f"max_staleness: {value}\n", 8)


def test_a_bound_needs_an_edge_into_a_training_component() -> None:
    flow = Workflow(
        name="no-trainer",
        components=[Component(name="rollout", role="rollout"), Component(name="reward", role="reward")],
        edges=[Edge(src="rollout", dst="reward", bytes_per_sample=64)],
        batch_size=8,
        group_size=4,
    )
    plan = plan_from_yaml("placement: {rollout: 0, reward: 0}\nmax_staleness: 1\n", 1)
    with pytest.raises(ConfigError, match="max_staleness.*needs an edge from the rollout side"):
        lower(flow, plan, grpo_trace().cluster.with_num_devices(1))


# ---------------------------------------------------------------------------------------------- lowering
def test_the_lowering_cuts_only_the_buffered_edge_and_counts_its_samples() -> None:
    synchronous, _ = _lowered(APART, 0)
    lagged, _ = _lowered(APART, 1)
    train = [i for i, op in enumerate(lagged.ops) if op.component == "actor" and op.kind == "compute"]
    assert len(train) == 1
    op = lagged.ops[train[0]]
    feeding = lagged.ops[op.lagged[0]]
    assert op.deps == () and feeding.component == "inference"  # read a step later, no dependency now
    same = synchronous.ops[train[0]]
    assert same.deps == op.lagged and same.lagged == ()  # the same edge is a dependency when synchronous
    sync = next(o for o in lagged.ops if o.kind == "sync_weights")
    assert train[0] in sync.deps  # the weights still go to the rollout after the training step
    # One iteration of the actor's input (256 samples x 8192 bytes) per bound, split over its 4 devices.
    assert dict(lagged.buffered_bytes_per_device) == {"actor": 256 * 8192 // 4}
    assert dict(_lowered(APART, 2)[0].buffered_bytes_per_device) == {"actor": 2 * 256 * 8192 // 4}
    assert synchronous.buffered_bytes_per_device == ()


def test_apart_the_steady_state_is_the_slower_side_plus_the_weight_sync() -> None:
    program, timeline = _lowered(APART, 0)
    _, lagged = _lowered(APART, 1)
    spans = {
        (op.component, op.kind): (s, e)
        for op, s, e in zip(program.ops, timeline.start_s, timeline.end_s, strict=True)
    }
    rollout_side = spans[("inference", "transfer")][1]
    actor = spans[("actor", "compute")][1] - spans[("actor", "compute")][0]
    weight_sync = spans[("actor", "sync_weights")][1] - spans[("actor", "sync_weights")][0]
    assert timeline.iteration_s == pytest.approx(rollout_side + actor + weight_sync)
    assert lagged.iteration_s == pytest.approx(max(rollout_side, actor) + weight_sync, rel=1e-4)
    assert lagged.iteration_s < 0.8 * timeline.iteration_s
    # The buffered batch is memory on the actor's devices.
    extra = [b - a for a, b in zip(timeline.peak_memory_bytes, lagged.peak_memory_bytes, strict=True)]
    assert extra == [0] * 4 + [256 * 8192 // 4] * 4


def test_collocated_a_bound_time_slices_and_gains_nothing() -> None:
    assert _lowered(TOGETHER, 1)[1].iteration_s == pytest.approx(_lowered(TOGETHER, 0)[1].iteration_s)


def test_from_two_the_rollout_generates_continuously() -> None:
    """From ``k = 2`` a generate op costs what the trace's ``generate_continuous`` samples say (two batches in flight
    at a time); below, the batch's own ``generate`` cost."""
    trace = load_trace(ROOT / "traces/grpo_7b_h100.json")
    costs = fit(trace)
    plan = plan_from_yaml(
        "placement: {rollout: 0-11, reward: 12-17, inference: 12-17, actor: 18-31}\n",
        trace.cluster.num_devices,
    )
    seconds = {}
    for k in (0, 1, 2):
        program = lower(trace.workflow, attrs.evolve(plan, max_staleness=k), trace.cluster)
        durations = costs.durations(program)
        seconds[k] = sum(d for op, d in zip(program.ops, durations, strict=True) if op.name == "generate")
    assert seconds[0] == seconds[1] > seconds[2] > 0


# ---------------------------------------------------------------------------------------------- planner
def test_the_planner_searches_the_bound_and_reports_the_synchronous_best() -> None:
    trace = grpo_trace()
    cluster = trace.cluster.with_num_devices(8)
    costs = fit(trace, cluster)
    synchronous = search(trace.workflow, cluster, costs, time_limit_s=5.0)
    assert {e.plan.max_staleness for e in synchronous.ranking} == {0}
    bounded = search(trace.workflow, cluster, costs, time_limit_s=5.0, max_staleness=1)
    assert bounded.plan.max_staleness == 1
    assert bounded.best_synchronous is not None
    assert bounded.best_synchronous.iteration_s <= synchronous.best.iteration_s * 1.005
    speedup = bounded.to_dict()["speedup_over_synchronous"]
    assert speedup == pytest.approx(bounded.best_synchronous.iteration_s / bounded.best.iteration_s)
    assert bounded.best.iteration_s < synchronous.best.iteration_s  # overlap pays on this flow
    assert bounded.best.iteration_s <= _lowered(APART, 1)[1].iteration_s  # no worse than the hand-made split


def test_with_a_bound_the_planner_matches_brute_force() -> None:
    trace = grpo_trace()
    cluster = trace.cluster.with_num_devices(4)
    costs = fit(trace, cluster)
    result = search(trace.workflow, cluster, costs, max_granularity=4, max_staleness=1)
    space = build_space(trace.workflow, 4, max_granularity=4, max_staleness=1)
    exhaustive = brute_force(trace.workflow, cluster, costs, space)
    assert exhaustive.best.plan.max_staleness == 1
    assert result.best.iteration_s <= exhaustive.best.iteration_s * 1.005


def test_rlinf_plan_prints_the_bound_and_its_speedup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "trace.json"
    grpo_trace().save(path)
    assert (
        main(["plan", "--trace", str(path), "--cluster", "1x8xH100", "--max-staleness", "1", "--json"]) == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["max_staleness"] == result["plan"]["max_staleness"] == 1
    assert result["speedup_over_synchronous"] == pytest.approx(
        result["best_synchronous"]["iteration_s"] / result["predicted_iteration_s"]
    )
    assert main(["plan", "--trace", str(path), "--cluster", "1x8xH100", "--max-staleness", "1"]) == 0
    assert re.search(
        r"the best synchronous plan takes [\d.]+ s: the chosen plan is [\d.]+x faster",
        capsys.readouterr().out,
    )


# ---------------------------------------------------------------------------------------------- the buffer's place
def test_the_buffer_may_sit_before_reward_and_inference_components_that_feed_only_the_trainers() -> None:
    grpo = grpo_trace().workflow
    assert grpo.buffer_cuts == ((), ("inference",), ("inference", "reward"))
    assert [e.key for e in grpo.buffered_edges_for(("inference",))] == ["reward->inference"]
    assert grpo.training_side(("inference",)) == ("inference", "actor")
    hopper = load_trace(ROOT / "traces/hopper_ppo_cpu2.json").workflow
    assert hopper.buffer_cuts == ((),)  # the loop's env and policy stay on the rollout side


def test_a_component_that_takes_weights_goes_behind_the_buffer_only_if_it_keeps_versions() -> None:
    """Behind the buffer, version ``v + 1`` arrives before the batch ``v`` sampled: a worker that scores with
    whatever it holds last would score with the wrong policy, so only one that keeps versions may go there."""
    big = load_trace(ROOT / "traces/grpo_7b_h100.json").workflow
    assert big.component("inference").keeps_versions and ("inference",) in big.buffer_cuts
    forgetful = attrs.evolve(big, components=[attrs.evolve(c, keeps_versions=False) for c in big.components])
    assert forgetful.buffer_cuts == ((),)  # the reward alone cannot go: it feeds the rollout-side inference
    assert forgetful.same_flow(big)  # a profile of either measures the other
    assert "keeps_versions" not in forgetful.to_dict()["components"][2]
    assert workflow_from_dict(big.to_dict()) == big
    with pytest.raises(ConfigError, match="keeps_versions"):
        Component(name="x", role="inference", keeps_versions="yes")


def test_buffer_before_round_trips_names_the_plan_and_is_checked() -> None:
    plan = plan_from_yaml(APART + "max_staleness: 1\nbuffer_before: [inference]\n", 8)
    assert plan.buffer_before == ("inference",)
    assert plan.describe().endswith("| staleness 1 (buffer before inference)")
    assert plan_from_yaml(plan.to_yaml(), 8) == plan and plan != attrs.evolve(plan, buffer_before=())
    with pytest.raises(ConfigError, match="buffer_before.*needs a staleness bound"):
        plan_from_yaml(APART + "buffer_before: [inference]\n", 8)
    with pytest.raises(ConfigError, match="buffer_before.*reward.*use one of"):
        trace = grpo_trace()
        bad = plan_from_yaml(APART + "max_staleness: 1\nbuffer_before: [reward]\n", 8)
        lower(
            trace.workflow, bad, trace.cluster.with_num_devices(8)
        )  # reward feeds the rollout-side inference


def test_behind_the_buffer_the_inference_reads_the_buffered_batch_and_keeps_an_older_weight_copy() -> None:
    trace = grpo_trace()
    cluster = trace.cluster.with_num_devices(8)
    plan = plan_from_yaml(APART + "max_staleness: 1\nbuffer_before: [inference]\n", 8)
    program = lower(trace.workflow, plan, cluster)
    infer = next(op for op in program.ops if op.component == "inference" and op.kind == "compute")
    train = next(op for op in program.ops if op.component == "actor" and op.kind == "compute")
    assert infer.deps == () and program.ops[infer.lagged[0]].component == "reward"
    assert train.lagged == () and train.deps  # the actor reads the inference of its own iteration
    assert program.trainer_side == ("inference", "actor")
    edge = next(e for e in trace.workflow.edges if e.key == "reward->inference")
    assert dict(program.buffered_bytes_per_device) == {"inference": 256 * edge.bytes_per_sample // 4}
    # An inference that takes the actor's weights keeps the version that sampled the buffered batch beside the
    # newer one: one more weight copy per staleness step (the 7B trace's inference is synced, 15.24 GB).
    big = load_trace(ROOT / "traces/grpo_7b_h100.json")
    placement = "placement: {rollout: 0-13, reward: 0-13, inference: 14-19, actor: 20-31}\n"
    for k in (1, 2):
        behind = plan_from_yaml(placement + f"max_staleness: {k}\nbuffer_before: [inference]\n", 32)
        kept = dict(lower(big.workflow, behind, big.cluster).buffered_bytes_per_device)["inference"]
        edge = next(e for e in big.workflow.edges if e.key == "reward->inference")
        assert kept == -(-k * big.workflow.batch_size * edge.bytes_per_sample // 6) + k * 15_240_000_000


def test_on_the_7b_trace_a_staleness_1_plan_is_15_percent_faster_with_the_inference_behind_the_buffer() -> (
    None
):
    """The issue's target: ``rlinf plan --trace traces/grpo_7b_h100.json --max-staleness 1``. With the buffer
    before the actor the rollout side's own fill and drain (inference after generation) keeps it at 1.09x."""
    trace = load_trace(ROOT / "traces/grpo_7b_h100.json")
    costs = fit(trace)
    result = search(trace.workflow, trace.cluster, costs, max_staleness=1)
    assert result.plan.max_staleness == 1 and "inference" in result.plan.buffer_before
    assert result.to_dict()["speedup_over_synchronous"] >= 1.15
    moved = attrs.evolve(result.plan, buffer_before=())  # the same plan, the buffer before the actor
    slower = simulate(lower(trace.workflow, moved, trace.cluster), costs).iteration_s
    assert slower > 1.04 * result.best.iteration_s


def test_the_disaggregated_baseline_tries_the_bound_as_the_one_step_off_layout() -> None:
    """``rlinf capacity --max-staleness 1``: the disaggregated strategy runs its splits one step ahead too (the
    layout other systems run asynchronously), the collocated one stays synchronous (a bound gains it nothing)."""
    trace = load_trace(ROOT / "traces/grpo_7b_h100.json")
    costs = fit(trace)
    plans = {
        (strategy, k): propose(
            trace.workflow, trace.cluster, costs, strategy, time_limit_s=5.0, seed=0, max_staleness=k
        ).plan
        for strategy in ("disaggregated", "collocated")
        for k in (0, 1)
    }
    assert plans[("disaggregated", 0)].max_staleness == 0 and plans[("disaggregated", 1)].max_staleness == 1
    assert plans[("collocated", 1)] == plans[("collocated", 0)]

    def seconds(plan) -> float:
        return simulate(lower(trace.workflow, plan, trace.cluster), costs).iteration_s

    assert seconds(plans[("disaggregated", 1)]) < seconds(plans[("disaggregated", 0)])


# ---------------------------------------------------------------------------------------------- real runs
TRAIN = [sys.executable, "-m", "rlinf", "train", "examples/hopper_ppo.yaml", "--no-progress"]
TINY = ["--set", "num_envs=4", "--set", "num_steps=16", "--set", "num_epochs=2"]


def _train(out: Path, *args: str) -> list[dict]:
    subprocess.run([*TRAIN, *TINY, "--out", str(out), *args], check=True, timeout=300, capture_output=True)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("k", [1, 2])  # k = 0: tests/test_workload_port.py (the baseline, lag keys 0)
def test_each_sample_records_a_policy_at_most_k_behind_the_trainer(tmp_path: Path, k: int) -> None:
    """Iteration ``j`` (trained at step ``j + k``) was sampled by the weights of ``j - 1 - k`` training steps
    (the initial ones for ``j <= k + 1``): exactly ``min(j - 1, k)`` behind. Ignoring the bound would show 0."""
    iterations = 5
    metrics = _train(
        tmp_path / "run",
        "--mode",
        "disaggregated",
        "--iterations",
        str(iterations),
        "--max-staleness",
        str(k),
    )
    assert [m["iteration"] for m in metrics] == list(range(1, iterations + k + 1))
    assert [m.get("phase", "steady") for m in metrics] == ["fill"] * k + ["steady"] * (iterations - k) + [
        "drain"
    ] * k
    trained = [m for m in metrics if "policy_lag_max" in m]
    assert len(trained) == iterations  # every batch produced is trained on once
    lags = [m["policy_lag_max"] for m in trained]
    assert lags == [float(min(j - 1, k)) for j in range(1, iterations + 1)]
    assert all(m["policy_lag_mean"] == m["policy_lag_max"] for m in trained)  # one version per batch
    # The behaviour policy differs from the trainer's exactly when the samples are stale.
    assert all((m["behaviour_kl"] != 0.0) == (lag > 0) for m, lag in zip(trained, lags, strict=True))
    assert metrics[-1]["env_steps"] == iterations * 4 * 16
    if k == 0:
        assert all("phase" not in m and "trained_iterations" not in m for m in metrics)
    else:
        assert [m["trained_iterations"] for m in metrics][-1] == iterations


def _context(component: str, num_envs: int) -> WorkerContext:
    return WorkerContext(
        component=component,
        rank=0,
        world=1,
        device=Device(index=0, kind="cpu", core=0),
        num_micro_batches=1,
        micro_batch_groups=((0, num_envs),),
        group_size=1,
        loop_stages=1,
        offload=False,
        seed=0,
    )


def test_ppo_ratio_is_taken_against_the_behaviour_log_probabilities() -> None:
    """One real trajectory trained on twice by fresh actors: as recorded (the behaviour policy is the actor's own
    weights: ratio 1 at the start, KL 0), and with its behaviour log-probabilities lowered by 0.5 (a policy that
    found those actions less likely): the ratio starts at e^0.5, beyond the clip range, for every sample. An actor
    that recomputed the old log-probabilities from its own weights would report the same for both."""
    job, config = load_job_config("examples/hopper_ppo.yaml", ["num_envs=4", "num_steps=16", "num_epochs=1"])
    env, rollout = EnvWorker(), RolloutWorker()
    env.setup(config, _context("env", 4))
    rollout.setup(config, _context("rollout", 4))
    out, _ = env.compute("env_step", 0, 0, [])
    for step in range(1, config.num_steps + 1):
        act, _ = rollout.compute("act", 0, step, [out])
        out, _ = env.compute("env_step", 0, step, [act])
    trajectory = out

    def train(batch: dict) -> dict:
        actor = ActorWorker()
        actor.setup(config, _context("actor", 4))
        torch.manual_seed(0)
        return actor.compute("train", 0, 1, [batch])[1]

    recorded = train(trajectory)
    shifted = train({**trajectory, "log_probs": trajectory["log_probs"] - np.float32(0.5)})
    assert abs(recorded["behaviour_kl"]) < 1e-6
    assert shifted["behaviour_kl"] == pytest.approx(-0.5, abs=1e-5)
    assert recorded["clip_fraction"] < 0.5 < 0.9 < shifted["clip_fraction"]
    assert recorded["policy_loss"] != shifted["policy_loss"]


def test_rlinf_train_auto_chooses_an_asynchronous_plan_within_the_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The synthetic Hopper costs make the actor's training dominate: with a bound, the auto mode overlaps it with
    the next iteration's rollout, and fill and drain steps are reported as such, not against the prediction."""
    trace_path = tmp_path / "trace.json"
    synthetic_trace().save(trace_path)
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "examples/hopper_ppo.yaml",
            "--mode",
            "auto",
            "--trace",
            str(trace_path),
            "--iterations",
            "3",
        ]
        + ["--devices", "2", "--max-staleness", "1", "--out", str(out), "--no-progress"]
        + [arg for item in SMALL for arg in ("--set", item)]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    chosen = next(line for line in printed.splitlines() if line.startswith("auto: chose "))
    assert "| staleness 1" in chosen
    assert "step 1 (fill, the rollout side alone)" in printed and "step 4 (drain" in printed
    assert "iteration 2: measured " in printed
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["phase"] for m in metrics] == ["fill", "steady", "steady", "drain"]


def test_a_fixed_plan_file_and_a_different_bound_conflict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("placement: {env: 0, rollout: 0, actor: 1}\n")
    code = main(["train", "examples/hopper_ppo.yaml", "--plan", str(plan), "--max-staleness", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--max-staleness" in err and "conflicts with --plan, whose max_staleness is 0" in err
    assert "Traceback" not in err


def test_a_worker_killed_under_a_bound_restarts_into_the_undisturbed_run(tmp_path: Path) -> None:
    """``k = 1``, a checkpoint every 2 steps: the checkpoint holds the batch produced but not yet trained on; a
    worker killed after it makes the run restart from it and finish computing exactly what an undisturbed run
    computes (bitwise: CPU, every RNG, MuJoCo and buffered state restored)."""
    command = [*TRAIN, *TINY, "--mode", "disaggregated", "--max-staleness", "1", "--iterations", "6"]
    command += ["--set", "execution.checkpoint_every=2", "--set", "num_steps=64"]
    straight, survived = tmp_path / "straight", tmp_path / "survived"
    subprocess.run([*command, "--out", str(straight)], check=True, timeout=300, capture_output=True)
    run = subprocess.Popen(
        [*command, "--out", str(survived)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _, err = kill_when(run, has_checkpoint(survived), lambda: local_workers(run.pid))
    assert run.returncode == 0, err
    assert "restarted the workers at iteration 3" in err, err
    assert [m["iteration"] for m in computed(survived)] == list(range(1, 8))
    assert computed(survived) == computed(straight)


def test_the_custom_example_reports_how_far_behind_its_samples_were(tmp_path: Path) -> None:
    """The example workload (``examples/custom_workload``) under ``k = 1``: the weights carry their version to the
    policy, every sample records it, and the actor reports lag ``min(j - 1, 1)`` for iteration ``j``; its
    checkpoint keeps the version (the iterations trained)."""
    out = tmp_path / "run"
    args = [
        "train",
        str(ROOT / "examples/custom_workload/config.yaml"),
        "--mode",
        "collocated",
        "--devices",
        "1",
    ]
    args += ["--iterations", "3", "--max-staleness", "1", "--set", "num_steps=16", "--set", "epochs=1"]
    assert main([*args, "--no-progress", "--out", str(out)]) == 0
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["phase"] for m in metrics] == ["fill", "steady", "steady", "drain"]
    assert [m.get("policy_lag_max") for m in metrics] == [None, 0.0, 1.0, 1.0]
    assert [m.get("policy_lag_mean") for m in metrics] == [None, 0.0, 1.0, 1.0]
    assert load_latest(out / "checkpoints").state["workers"]["actor"][0]["version"] == 3


def test_the_learning_benchmark_builds_each_of_its_settings():
    """``benchmarks/learn_staleness.py`` (run by hand, 20-60 minutes) builds the job and config of each workload
    and seed it compares, so that a change to the config API breaks this test instead of the benchmark."""
    from benchmark_scripts import load

    learn = load("learn_staleness")
    assert set(learn.SETTINGS) == {"hopper", "grpo"}
    for setting in learn.SETTINGS.values():
        job, config = setting.config(1)
        assert job.settings.seed == 1
        assert getattr(config, "seed", 1) == 1
        assert setting.y_key in job.workload.headline  # a metric the workload reports


def test_a_drained_run_resumed_with_more_iterations_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    """A finished run under a bound drained its buffer; more --iterations would have its next steady step wait
    for a batch nobody produces (it stalled until the watchdog): refused up front, naming the flag."""
    flags = [
        "train", "examples/hopper_ppo.yaml", "--mode", "collocated", "--max-staleness", "1", "--no-progress",
        "--set", "num_steps=8", "--set", "num_epochs=1", "--set", "num_minibatches=2", "--out", str(tmp_path),
    ]  # fmt: skip
    assert main([*flags, "--iterations", "3"]) == 0
    capsys.readouterr()
    assert main([*flags, "--iterations", "5", "--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--iterations=5" in err and "0 of the 1 buffered batch" in err
    assert main([*flags, "--iterations", "3", "--resume", str(tmp_path)]) == 0  # as started: complete
