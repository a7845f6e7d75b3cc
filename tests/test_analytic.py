"""The analytic LLM model: roofline physics, provenance, determinism, the shipped traces and the example plans."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import attrs
import numpy as np
import pytest

from rlinf.analytic import roofline
from rlinf.analytic.synthesis import MODEL_PRESETS, LLMWorkload, ModelSpec, ResponseLengths, synthesize
from rlinf.cli import main
from rlinf.core.cluster import Cluster, parse_cluster
from rlinf.core.costs import fit
from rlinf.core.errors import ConfigError, ExtrapolationWarning, InfeasiblePlanError
from rlinf.core.lowering import lower
from rlinf.core.plan import plan_from_yaml
from rlinf.core.trace import Trace, load_trace
from simulator import simulate

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "traces").glob("*.json"))
PLANS = ROOT / "examples" / "plans"
OPS = {"rollout": "generate", "reward": "reward", "inference": "infer", "actor": "train", "critic": "train"}


def small_workload(**changes) -> LLMWorkload:
    """7B GRPO with a small batch, for fast synthesis."""
    base = LLMWorkload(
        model=MODEL_PRESETS["7b"],
        num_prompts=64,
        group_size=8,
        response=ResponseLengths(median_tokens=2000, sigma=0.6, max_tokens=8192),
    )
    return attrs.evolve(base, **changes)


@pytest.fixture
def h100_cluster() -> Cluster:
    return parse_cluster("4x8xH100")


def seconds_of(trace: Trace, component: str, devices: int, samples: int) -> float:
    """The synthesized seconds of one (component, devices, samples) point."""
    (match,) = [
        s.seconds
        for s in trace.samples
        if s.component == component
        and s.devices == devices
        and s.samples == samples
        and s.op != "generate_continuous"
    ]
    return match


def test_decode_time_grows_with_response_length(h100_cluster):
    # No truncation (a high limit), so every length doubles with the median.
    shorter = small_workload(response=ResponseLengths(median_tokens=2000, sigma=0.6, max_tokens=65536))
    longer = small_workload(response=ResponseLengths(median_tokens=4000, sigma=0.6, max_tokens=65536))
    short = synthesize(shorter, h100_cluster, seed=0)
    long = synthesize(longer, h100_cluster, seed=0)
    for devices in (8, 64):
        assert seconds_of(long, "rollout", devices, 512) > 1.5 * seconds_of(short, "rollout", devices, 512)


def test_decode_is_memory_bound(h100_cluster):
    device = h100_cluster.device
    faster_memory = attrs.evolve(
        h100_cluster,
        device=attrs.evolve(device, memory_bandwidth_bytes_per_s=2 * device.memory_bandwidth_bytes_per_s),
    )
    faster_compute = attrs.evolve(h100_cluster, device=attrs.evolve(device, peak_flops=2 * device.peak_flops))
    base = synthesize(small_workload(), h100_cluster, seed=0)
    memory = synthesize(small_workload(), faster_memory, seed=0)
    compute = synthesize(small_workload(), faster_compute, seed=0)
    for devices in (8, 32):
        ratio = seconds_of(memory, "rollout", devices, 512) / seconds_of(base, "rollout", devices, 512)
        assert 0.48 < ratio < 0.56, ratio
        compute_ratio = seconds_of(compute, "rollout", devices, 512) / seconds_of(
            base, "rollout", devices, 512
        )
        assert compute_ratio > 0.95, compute_ratio


def test_decode_steps_follow_the_longest_sequence():
    common = dict(
        prompt_tokens=100,
        weight_bytes=1e9,
        kv_bytes_per_token=1e5,
        num_params=5e8,
        num_devices=1,
        memory_bandwidth_bytes_per_s=1e12,
        mbu=1.0,
        peak_flops=1e15,
        mfu=1.0,
    )
    one = roofline.decode_seconds(np.array([1000]), max_concurrent=8, **common)
    # Step t reads the weights and the KV cache of prompt + t tokens; compute (1e12 FLOP/step at 1e15) is smaller.
    reads = 1000 * 1e9 + 1e5 * (1000 * 100 + 1000 * 999 / 2)
    assert one == pytest.approx(reads / 1e12, rel=1e-9)
    # Four sequences in one batch share the weight reads; with one slot they decode one after another.
    batched = roofline.decode_seconds(np.array([1000] * 4), max_concurrent=8, **common)
    serial = roofline.decode_seconds(np.array([1000] * 4), max_concurrent=1, **common)
    assert batched < 1.5 * one
    assert serial == pytest.approx(4 * one, rel=1e-9)


def test_training_time_is_six_n_tokens_over_effective_flops(h100_cluster):
    workload = small_workload()
    trace = synthesize(workload, h100_cluster, seed=0)
    tokens_per_sample = trace.provenance["derived"]["tokens_per_sample"]
    device = h100_cluster.device
    for devices, samples in ((8, 512), (32, 512), (32, 64)):
        per_replica = samples / (devices // workload.actor_model_parallel)
        flops = 6 * workload.model.num_params * tokens_per_sample * per_replica
        expected = flops / (workload.actor_model_parallel * device.peak_flops * workload.train_mfu)
        measured = seconds_of(trace, "actor", devices, samples) - workload.op_overhead_s
        assert measured == pytest.approx(expected, rel=1e-9)
    longer = synthesize(small_workload(prompt_tokens=2048), h100_cluster, seed=0)
    ratio = (seconds_of(longer, "actor", 8, 512) - workload.op_overhead_s) / (
        seconds_of(trace, "actor", 8, 512) - workload.op_overhead_s
    )
    assert ratio == pytest.approx((tokens_per_sample + 2048 - 512) / tokens_per_sample, rel=1e-9)


def test_activation_recompute_adds_a_fourth_forward_to_training(h100_cluster):
    plain = synthesize(small_workload(), h100_cluster, seed=0)
    recompute = synthesize(small_workload(activation_recompute=True), h100_cluster, seed=0)
    overhead = small_workload().op_overhead_s
    for devices, samples in ((8, 512), (32, 64)):
        ratio = (seconds_of(recompute, "actor", devices, samples) - overhead) / (
            seconds_of(plain, "actor", devices, samples) - overhead
        )
        assert ratio == pytest.approx(8 / 6, rel=1e-9)
    # Only training recomputes: generation and the log-prob forwards are unchanged.
    assert seconds_of(recompute, "inference", 8, 512) == seconds_of(plain, "inference", 8, 512)
    assert seconds_of(recompute, "rollout", 8, 512) == seconds_of(plain, "rollout", 8, 512)


def test_attention_flops_per_token_is_two_layers_width_and_mean_square_length():
    # One sequence of L tokens: sum over positions p < L of 4 * p * width per layer = 2 * L * (L - 1) * width.
    # The formula's continuous 2 * L**2 * width per layer, per token 2 * L * width, is within 1/L of it.
    per_token = roofline.attention_flops_per_token(
        num_layers=3, attention_dim=128.0, sequence_tokens=np.array([1000])
    )
    assert per_token == pytest.approx(2 * 3 * 128 * 1000)
    exact = 3 * sum(4 * p * 128 for p in range(1000)) / 1000
    assert per_token == pytest.approx(exact, rel=2e-3)
    # Long sequences weigh by their tokens: [1000, 3000] averages E[L^2]/E[L] = 2500 per token, not 2000.
    mixed = roofline.attention_flops_per_token(
        num_layers=1, attention_dim=1.0, sequence_tokens=np.array([1000, 3000])
    )
    assert mixed == pytest.approx(2 * 2500)
    assert (
        roofline.attention_flops_per_token(num_layers=1, attention_dim=1.0, sequence_tokens=np.array([])) == 0
    )


def test_counting_attention_flops_slows_the_forward_ops_by_their_share(h100_cluster):
    workload = small_workload(count_attention_flops=True)
    plain = synthesize(small_workload(), h100_cluster, seed=0)
    counted = synthesize(workload, h100_cluster, seed=0)
    model = workload.model
    lengths = workload.prompt_tokens + np.asarray(counted.response_lengths)
    attention = 2 * model.num_layers * model.attention_dim * float((lengths**2).sum() / lengths.sum())
    overhead = workload.op_overhead_s
    for component in ("inference", "actor"):
        ratio = (seconds_of(counted, component, 8, 512) - overhead) / (
            seconds_of(plain, component, 8, 512) - overhead
        )
        assert ratio == pytest.approx(1 + attention / (2 * model.num_params), rel=1e-9)
    assert seconds_of(counted, "rollout", 8, 512) > seconds_of(plain, "rollout", 8, 512)


def test_head_dim_sets_the_kv_cache_and_attention_width():
    qwen3_like = ModelSpec(
        name="q", num_params=32.8e9, num_layers=64, hidden_size=5120, num_attention_heads=64, num_kv_heads=8,
        head_dim=128,
    )  # fmt: skip
    assert qwen3_like.attention_dim == 64 * 128
    assert MODEL_PRESETS["7b"].attention_head_dim == 3584 / 28
    kv = roofline.kv_bytes_per_token(
        num_layers=64, hidden_size=5120, num_attention_heads=64, num_kv_heads=8, bytes_per_element=2,
        head_dim=qwen3_like.attention_head_dim,
    )  # fmt: skip
    assert kv == 2 * 64 * 8 * 128 * 2
    with pytest.raises(ConfigError, match=r"model\.head_dim"):
        attrs.evolve(qwen3_like, head_dim=0)
    with pytest.raises(ConfigError, match="activation_recompute"):
        small_workload(activation_recompute="yes")


def test_state_bytes_and_weight_sync(h100_cluster):
    workload = small_workload()
    trace = synthesize(workload, h100_cluster, seed=0)
    n = workload.model.num_params
    workflow = trace.workflow
    assert workflow.component("actor").state_bytes == int(16 * n)
    kv_pool = workload.kv_cache_fraction * h100_cluster.device.memory_bytes * workload.rollout_model_parallel
    assert workflow.component("rollout").state_bytes == int(2 * n + kv_pool)
    assert workflow.component("inference").state_bytes == int(2 * 2 * n)
    assert {(s.src, s.dst, s.num_bytes) for s in workflow.weight_sync} == {
        ("actor", "rollout", int(2 * n)),
        ("actor", "inference", int(2 * n)),
    }
    assert [e.key for e in workflow.edges] == ["rollout->reward", "reward->inference", "inference->actor"]
    assert trace.activation_bytes_per_sample["actor"] > trace.activation_bytes_per_sample["inference"] > 0


def test_ppo_adds_a_critic_and_a_value_forward(h100_cluster):
    grpo = synthesize(small_workload(), h100_cluster, seed=0)
    ppo = synthesize(small_workload(algorithm="ppo"), h100_cluster, seed=0)
    assert "critic" in ppo.workflow.component_names and "critic" not in grpo.workflow.component_names
    assert "inference->critic" in [e.key for e in ppo.workflow.edges]
    assert seconds_of(ppo, "critic", 8, 512) == seconds_of(ppo, "actor", 8, 512)
    overhead = small_workload().op_overhead_s
    ratio = (seconds_of(ppo, "inference", 8, 512) - overhead) / (
        seconds_of(grpo, "inference", 8, 512) - overhead
    )
    assert ratio == pytest.approx(3 / 2, rel=1e-9)


def test_provenance_lists_the_assumptions(h100_cluster):
    workload = small_workload(train_mfu=0.31)
    trace = synthesize(workload, h100_cluster, seed=7, date="2025-10-01")
    provenance = trace.provenance
    assert provenance["kind"] == "synthesized"
    assert provenance["seed"] == 7 and provenance["date"] == "2025-10-01"
    assert provenance["device"]["name"] == "H100"
    assert provenance["workload"]["train_mfu"] == 0.31
    assert provenance["workload"]["train_state_bytes_per_param"] == 16.0
    assert provenance["batch"] == {"num_prompts": 64, "group_size": 8, "batch_size": 512}
    assert {"generate", "reward", "infer", "train"} <= set(provenance["formulas"])
    assert any("memory-bound" in line for line in provenance["assumptions"])
    json.dumps(provenance)  # the whole provenance is JSON


def test_same_seed_gives_the_identical_trace(h100_cluster):
    first = synthesize(small_workload(), h100_cluster, seed=3, date="d")
    second = synthesize(small_workload(), h100_cluster, seed=3, date="d")
    other = synthesize(small_workload(), h100_cluster, seed=4, date="d")
    assert first.to_dict() == second.to_dict()
    assert first.response_lengths != other.response_lengths


def test_samples_cover_8_to_1024_devices(h100_cluster):
    trace = synthesize(small_workload(), h100_cluster, seed=0)
    for component in trace.workflow.components:
        devices = {s.devices for s in trace.samples if s.component == component.name}
        mp = component.model_parallel_size
        assert {mp * 2**k for k in range(12) if mp * 2**k <= 1024} <= devices
        assert max(devices) >= 1024


@pytest.mark.parametrize("size", ["1.5b", "7b", "32b"])
def test_shipped_trace_fits_without_extrapolation(size):
    (path,) = [p for p in SHIPPED if f"_{size}_" in p.name]
    assert path.stat().st_size < 2_000_000
    trace = load_trace(path)
    assert trace.provenance["kind"] == "synthesized"
    assert trace.provenance["batch"]["batch_size"] == trace.workflow.batch_size
    assert len(trace.response_lengths) >= 1000
    costs = fit(trace)
    workflow = trace.workflow
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExtrapolationWarning)
        for component in workflow.components:
            mp = component.model_parallel_size
            for devices in (8, 16, 24, 32, 64, 128, 256, 512, 1024):
                if devices % mp:
                    continue
                for samples in (workflow.batch_size, workflow.batch_size // 8, workflow.group_size):
                    seconds = costs.compute_seconds(component.name, OPS[component.role], devices, samples)
                    assert seconds > 0
    # More devices never make the whole batch slower.
    generate = [
        costs.compute_seconds("rollout", "generate", d, workflow.batch_size) for d in (8, 32, 128, 1024)
    ]
    assert generate == sorted(generate, reverse=True)


def test_example_plans_lower_and_simulate_to_different_times():
    trace = load_trace(ROOT / "traces" / "grpo_7b_h100.json")
    costs = fit(trace)
    times = {}
    for name in ("collocated", "disaggregated", "hybrid"):
        plan = plan_from_yaml((PLANS / f"{name}.yaml").read_text(), trace.cluster.num_devices, source=name)
        assert plan.mode == name
        program = lower(trace.workflow, plan, trace.cluster)
        kinds = {op.kind for op in program.ops}
        assert ({"onload", "offload"} <= kinds) == (name == "collocated")
        times[name] = simulate(program, costs).iteration_s
    assert len({round(t, 3) for t in times.values()}) == 3, times


def test_collocated_plan_needs_offload():
    trace = load_trace(ROOT / "traces" / "grpo_7b_h100.json")
    text = (PLANS / "collocated.yaml").read_text()
    without = "\n".join(line for line in text.splitlines() if not line.startswith("offload"))
    plan = plan_from_yaml(without, trace.cluster.num_devices)
    with pytest.raises(InfeasiblePlanError, match="offload"):
        lower(trace.workflow, plan, trace.cluster)


def test_cli_synth_writes_a_loadable_trace(tmp_path, capsys):
    out = tmp_path / "t.json"
    code = main(
        [
            "trace",
            "synth",
            "--model",
            "1.5b",
            "--prompts",
            "32",
            "--group-size",
            "4",
            "--seed",
            "5",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    trace = load_trace(out)
    assert trace.workflow.batch_size == 128
    assert trace.provenance["seed"] == 5
    assert "--model 1.5b" in trace.provenance["command"]
    # not a terminal: no bar, but a line up front with the work to go and one per tenth of it, the last at 100%
    progress = capsys.readouterr().err.splitlines()
    assert progress[0].startswith("trace synth: ") and progress[0].endswith(" responses to go"), progress
    assert progress[-1].startswith("trace synth: 100% (") and 2 <= len(progress) <= 12, progress
    assert not any("\r" in line or "it/s" in line for line in progress)
    assert main(["trace", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "grpo-1.5b" in shown and "synthesized" in shown


def test_cli_command_in_provenance_regenerates_the_trace(tmp_path):
    out = tmp_path / "a.json"
    assert main(["trace", "synth", "--params", "2e9", "--layers", "24", "--hidden-size", "2048", "--prompts", "16",
                 "--date", "x", "--out", str(out)]) == 0  # fmt: skip
    first = load_trace(out)
    argv = first.provenance["command"].split()[1:] + ["--date", "x"]
    assert main(argv) == 0
    assert load_trace(out).to_dict() == first.to_dict()


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--model", "13b"], "model"),
        (["--model", "7b", "--params=-5e9"], "--params"),
        (["--params", "2e9"], "--layers"),
        (["--model", "7b", "--algorithm", "dpo"], "algorithm"),
        (["--model", "7b", "--device", "TPU"], "--device"),
        (["--model", "7b", "--group-size", "0"], "--group-size"),
        (["--model", "32b", "--device", "H100", "--actor-mp", "2"], "--actor-mp"),
    ],
)
def test_cli_bad_input_exits_2_naming_the_field(tmp_path, capsys, argv, field):
    out = tmp_path / "bad.json"
    assert main(["trace", "synth", *argv, "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("rlinf: error: ") and f"{field}=" in error
    assert len(error.strip().splitlines()) == 1
    assert not out.exists()


def test_invalid_workload_values_raise_naming_the_field():
    with pytest.raises(ConfigError, match=r"model\.num_params"):
        ModelSpec(
            name="x", num_params=-1.0, num_layers=2, hidden_size=8, num_attention_heads=1, num_kv_heads=1
        )
    with pytest.raises(ConfigError, match="prefill_mfu"):
        small_workload(prefill_mfu=1.5)
    with pytest.raises(ConfigError, match=r"response\.median_tokens"):
        ResponseLengths(median_tokens=9000, sigma=0.5, max_tokens=8192)
    with pytest.raises(ConfigError, match="max_devices"):
        synthesize(small_workload(), parse_cluster("8xH100"), seed=0, max_devices=512)
