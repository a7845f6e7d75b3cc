"""The GRPO arithmetic job: every mode trains through the executor; the rollout streams each group once, in
completion order; gradient accumulation over streamed micro-batches equals the whole-batch gradient; bad input
fails clearly."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import attrs
import numpy as np
import pytest
import torch

from rlinf.api.worker_context import WorkerContext, component_facts, context_for
from rlinf.app.checkpoint import load_latest
from rlinf.app.jobs import get_job, load_job_config
from rlinf.cli import main
from rlinf.core.errors import ConfigError
from rlinf.workloads.arith.backends import OptimConfig, TorchTrainBackend
from rlinf.workloads.arith.config import ArithGrpoConfig, load_config
from rlinf.workloads.arith.evaluation import model_config
from rlinf.workloads.arith.objectives import GrpoObjective
from rlinf.workloads.arith.payloads import concat_rows, unpack_training
from rlinf.workloads.arith.tokenizer import ArithTokenizer
from rlinf.workloads.arith.workers import ActorWorker, InferenceWorker, RewardWorker, RolloutWorker

CONFIG = "examples/grpo_arith.yaml"
CPU = SimpleNamespace(torch_device="cpu")


def tiny_sets(cache: Path) -> list[str]:
    """--set overrides for a quick run: 8 prompts x 4 responses, 5 warm-start steps, 20 held-out problems."""
    values = {
        "grpo.prompts_per_iteration": 8,
        "grpo.group_size": 4,
        "warm_start.num_steps": 5,
        "eval.num_problems": 20,
        "execution.granularity": 2,
        "execution.warm_start_cache": str(cache),
    }
    return [item for key, value in values.items() for item in ("--set", f"{key}={value}")]


@pytest.fixture
def tiny_config(tmp_path: Path) -> ArithGrpoConfig:
    sets = tiny_sets(tmp_path / "cache")
    _, config = load_job_config(CONFIG, [sets[i + 1] for i in range(0, len(sets), 2)])
    return config


@pytest.mark.parametrize("mode", ["collocated", "disaggregated", "hybrid"])
def test_train_each_mode(mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / mode
    args = ["train", CONFIG, "--mode", mode, "--iterations", "2", "--devices", "2", "--out", str(out)]
    assert main([*args, *tiny_sets(tmp_path / "cache"), "--no-progress"]) == 0
    printed = capsys.readouterr()
    assert f"{mode}:" in printed.out and "generated tokens/s" in printed.out
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [1, 2]
    assert all(m["tokens"] > 0 and m["tokens_per_s"] > 0 for m in metrics)
    assert all(m["optimizer_steps"] == 2 for m in metrics)  # optimizer_steps_per_iteration in the example
    assert "warm_start_accuracy" in metrics[0] and "heldout_accuracy" in metrics[-1]
    spans = json.loads((out / "timeline.json").read_text())["traceEvents"]
    names = {event.get("name", "") for event in spans}
    assert any("generate" in n for n in names) and any("sync_weights" in n for n in names)
    state = load_latest(out / "checkpoints").state
    assert state["workload"] == "grpo_arith" and "model" in state["workers"]["actor"][0]["actor"]


def context(config: ArithGrpoConfig, component: str, rank: int = 0, world: int = 1) -> WorkerContext:
    """What a replica of ``component`` gets at setup under the collocated plan on ``world`` devices."""
    job = get_job("grpo_arith")
    plan, logical = job.fixed_plan("collocated", world, config)
    facts = component_facts(job.workflow(config), plan, job.lower(plan, config, logical), seed=config.seed)
    return context_for(facts[component], rank=rank, world=world, device=CPU)


def _rollout(config: ArithGrpoConfig, rank: int = 0, world: int = 1) -> RolloutWorker:
    worker = RolloutWorker()
    worker.setup(config, context(config, "rollout", rank, world))
    return worker


def test_rollout_streams_each_group_once_in_completion_order(tiny_config: ArithGrpoConfig) -> None:
    config = attrs.evolve(
        tiny_config,
        grpo=attrs.evolve(tiny_config.grpo, max_new_tokens=12, long_tail_fraction=0.25),
        execution=attrs.evolve(tiny_config.execution, granularity=4),
    )
    worker = _rollout(config)
    payloads = [worker.compute("generate", k, 0, [])[0] for k in range(4)]
    assert [len(p["group_index"]) for p in payloads] == [2, 2, 2, 2]
    order = np.concatenate([p["group_index"] for p in payloads]).tolist()
    assert sorted(order) == list(range(8))  # every group exactly once
    # A group finishes when its longest response ends, so completion order sorts that length.
    finish = np.concatenate([p["response_len"].max(axis=1) for p in payloads]).tolist()
    assert finish == sorted(finish) and finish[-1] == 12  # the long-tail groups come last
    second = _rollout(config, rank=1, world=2)
    indices = np.concatenate([second.compute("generate", k, 0, [])[0]["group_index"] for k in range(4)])
    assert sorted(indices.tolist()) == list(range(4, 8))


def _training_payload(config: ArithGrpoConfig) -> dict[str, np.ndarray]:
    rollout, reward, inference = _rollout(config), RewardWorker(), InferenceWorker()
    reward.setup(config, context(config, "reward"))
    inference.setup(config, context(config, "inference"))
    generated = [rollout.compute("generate", k, 0, [])[0] for k in range(config.execution.granularity)]
    scored = [reward.compute("reward", k, 0, [p])[0] for k, p in enumerate(generated)]
    return concat_rows([inference.compute("infer", k, 0, [p])[0] for k, p in enumerate(scored)])


def _parameter_grads(actor: ActorWorker) -> list[torch.Tensor]:
    return [p.grad.clone() for p in actor.backend.model.parameters() if p.grad is not None]


def test_streamed_gradient_accumulation_equals_whole_batch(tiny_config: ArithGrpoConfig) -> None:
    config = attrs.evolve(
        tiny_config,
        grpo=attrs.evolve(
            tiny_config.grpo, optimizer_steps_per_iteration=1, micro_batch_size=3, max_grad_norm=0.0
        ),
    )
    payload = _training_payload(config)
    payload["advantages"] = np.linspace(-1.0, 1.0, payload["advantages"].size, dtype=np.float32).reshape(
        payload["advantages"].shape
    )  # a non-degenerate signal even if every reward of the tiny warm start is 0
    whole, streamed = ActorWorker(), ActorWorker()
    whole.setup(config, context(config, "actor"))
    streamed.setup(config, context(config, "actor"))
    whole.compute("train", 0, 0, [payload])
    for k in range(4):  # 4 micro-batches of 2 groups, each cut into accumulation chunks of 3 sequences
        streamed.compute("train", k, 0, [{key: v[2 * k : 2 * k + 2] for key, v in payload.items()}])
    reference = TorchTrainBackend(
        model_config(config, ArithTokenizer()), optim=OptimConfig(max_grad_norm=0.0), seed=config.seed
    )
    reference.load_weights({k: v.clone() for k, v in _initial_weights(config).items()})
    reference.train_step([unpack_training(payload)], GrpoObjective(config.grpo.grpo()))
    expected = [p.grad for p in reference.model.parameters() if p.grad is not None]
    for got_whole, got_streamed, want in zip(
        _parameter_grads(whole), _parameter_grads(streamed), expected, strict=True
    ):
        torch.testing.assert_close(got_whole, want, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(got_streamed, want, rtol=1e-4, atol=1e-6)
    assert any(float(g.abs().sum()) > 0 for g in expected)


def test_actor_fails_loudly_on_more_or_fewer_sequences_than_its_share(tiny_config: ArithGrpoConfig) -> None:
    """What a plan that fed a micro-batch twice delivered (rejected now by ``check_plan``,
    tests/test_grpo_routing.py) used to end in ``IndexError`` mid-iteration or in a half mini-batch carried into
    the next iteration; the actor names the count instead."""
    payload = _training_payload(tiny_config)  # 8 groups of 4: the actor's 32 sequences of one iteration
    actor = ActorWorker()
    actor.setup(tiny_config, context(tiny_config, "actor"))
    with pytest.raises(AssertionError, match="received 64 sequences in micro-batch 0 after 0: more than its"):
        actor.compute("train", 0, 0, [payload, payload])
    actor.compute("train", 0, 0, [{key: value[:4] for key, value in payload.items()}])
    with pytest.raises(AssertionError, match="starts an iteration with 16 of the last one's 32 sequences"):
        actor.compute("train", 0, 0, [payload])


def _initial_weights(config: ArithGrpoConfig) -> dict[str, torch.Tensor]:
    from rlinf.workloads.arith.warm_start import cached_warm_start

    return cached_warm_start(config, model_config(config, ArithTokenizer())).weights


def test_bad_config_keys_fail_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="bogus"):
        load_job_config(CONFIG, ["grpo.bogus=1"])
    with pytest.raises(ConfigError, match="execution.mode"):
        load_job_config(CONFIG, ["execution.mode=sideways"])
    code = main(
        ["train", CONFIG, "--iterations", "1", "--set", "execution.granularity=32", "--out", str(tmp_path)]
    )
    assert code == 2
    assert "a micro-batch of 1 groups leaves some of them without a whole group" in capsys.readouterr().err


def test_learn_loader_accepts_only_its_workload(tmp_path: Path) -> None:
    assert load_config(CONFIG).execution.granularity >= 1
    other = tmp_path / "other.yaml"
    other.write_text("workload: embodied_ppo\nseed: 1\n")
    with pytest.raises(ConfigError, match="workload"):
        load_config(other)


def test_probe_plans_run_and_the_shipped_trace_matches_the_example() -> None:
    from rlinf.core.trace import load_trace

    JOB, config = load_job_config(CONFIG)
    probes = JOB.probes(2, config)
    assert len(probes) >= 4 and {plan.mode for plan, _ in probes} == {"collocated", "hybrid"}
    for plan, logical in probes:
        assert logical == 2
        JOB.check_plan(plan, config)
    assert load_trace("traces/grpo_arith_cpu2.json").workflow == JOB.workflow(config)


def grpo_computed(run_dir: Path) -> list[dict]:
    """Per iteration, every metric that does not measure time (durations and rates end in ``_s``)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.endswith("_s")} for line in lines]


def test_resume_continues_exactly(tmp_path: Path) -> None:
    """Hybrid (rollout alone on one device, weight syncs every iteration): 2 iterations with a checkpoint, then
    ``--resume`` to 4 compute what an uninterrupted 4-iteration run computes (rewards, losses, accuracy)."""
    learned = [
        "task.min_digits=1",
        "task.max_digits=1",
        "warm_start.num_steps=150",
        "execution.checkpoint_every=2",
        "execution.heldout_eval=false",
    ]
    sets = [*tiny_sets(tmp_path / "cache"), *(f for v in learned for f in ("--set", v)), "--no-progress"]
    base = ["train", CONFIG, "--mode", "hybrid", "--devices", "2", *sets]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert main([*base, "--iterations", "4", "--out", str(straight)]) == 0
    assert main([*base, "--iterations", "2", "--out", str(resumed)]) == 0
    assert main([*base, "--iterations", "4", "--resume", str(resumed)]) == 0
    assert [m["iteration"] for m in grpo_computed(resumed)] == [1, 2, 3, 4]
    assert grpo_computed(resumed) == grpo_computed(straight)
    assert grpo_computed(straight)[2] != grpo_computed(straight)[3]
    assert any(m["mean_reward"] > 0 and m["policy_loss"] != 0 for m in grpo_computed(straight)[2:])  # teeth


def test_the_profile_records_every_response_length(tiny_config: ArithGrpoConfig) -> None:
    """The profiled trace keeps every response's length, so the cost model splits a streamed generation as the
    groups really complete (all within a few steps of each other here) instead of evenly; without the lengths the
    first of 2 micro-batches would be priced at exactly half of the generation."""
    from rlinf.app.profiling import ProfileSettings, profile
    from rlinf.core.costs import fit

    settings = ProfileSettings(budget_s=1.0, iterations_per_plan=1, warmup_iterations=0)  # one plan, once
    result = profile(get_job("grpo_arith"), tiny_config, 1, settings=settings, num_cores=1, progress=False)
    lengths = result.trace.response_lengths
    assert result.iterations == 1 and len(lengths) == 8 * 4  # 8 prompts x 4 responses
    assert all(1 <= n <= tiny_config.grpo.max_new_tokens and n == int(n) for n in lengths)
    group_max = np.sort(np.asarray(lengths).reshape(-1, 4).max(axis=1))  # not in generation order: sorted
    fractions = fit(result.trace).generation_fractions(2)
    assert fractions[-1] == pytest.approx(1.0) and fractions[0] > 0.5
    assert fractions[0] >= group_max[0] / group_max[-1] - 1e-9  # the first half ends after its slowest group
