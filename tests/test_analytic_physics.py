"""The analytic model's terms that are off by default: tensor-parallel all-reduces, optimizer-state sharding, a KV
cache freed (not copied) on offload and the engine's per-decode-step overhead; and that with them off the shipped
analytic traces re-synthesize to the same samples."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
from factories import llm_7b

from rlinf.analytic import roofline
from rlinf.analytic.synthesis import MODEL_PRESETS, LLMWorkload, Physics, synthesize
from rlinf.cli import main
from rlinf.core.cluster import Cluster, parse_cluster
from rlinf.core.costs import LINK_LATENCY_S, fit
from rlinf.core.errors import ConfigError
from rlinf.core.lowering import lower
from rlinf.core.plan import plan_from_dict
from rlinf.core.trace import Trace, load_trace
from simulator import simulate

ROOT = Path(__file__).resolve().parents[1]


def workload(**changes) -> LLMWorkload:
    """7B GRPO with a small batch, every component on two tensor-parallel ranks."""
    return llm_7b(**changes)


@pytest.fixture
def cluster() -> Cluster:
    return parse_cluster("4x8xH100")


def seconds_of(trace: Trace, component: str, devices: int, samples: int) -> float:
    (match,) = [
        s.seconds
        for s in trace.samples
        if s.component == component and s.devices == devices and s.samples == samples and s.op not in ("onload", "generate_continuous")
        and s.op != "offload"
    ]  # fmt: skip
    return match


def test_allreduce_is_a_latency_plus_the_ring_bytes_and_free_on_one_rank():
    seconds = roofline.allreduce_seconds(1e9, num_ranks=4, link_bytes_per_s=1e11, latency_s=1e-5)
    assert seconds == pytest.approx(1e-5 + 2 * 3 / 4 * 1e9 / 1e11)
    assert roofline.allreduce_seconds(1e9, num_ranks=1, link_bytes_per_s=1e11, latency_s=1e-5) == 0
    many = roofline.allreduce_seconds(np.array([0.0, 1e9]), num_ranks=2, link_bytes_per_s=1e9, latency_s=1.0)
    assert many.tolist() == [1.0, 2.0]


def test_decode_activity_counts_the_sequences_in_flight_and_their_kv_tokens():
    # Two slots, lengths 3 and 1 admitted at step 0, prompts of 10: step 0 holds 10 + 10 tokens, then only the
    # 3-token sequence is left, holding 11 and 12.
    active, context = roofline.decode_activity(np.array([3, 1]), prompt_tokens=10, max_concurrent=2)
    assert active.tolist() == [2, 1, 1]
    assert context.tolist() == [20, 11, 12]


def test_tensor_parallel_comm_adds_two_allreduces_per_layer_and_pass(cluster):
    plain = synthesize(workload(), cluster, seed=0)
    counted = synthesize(workload(count_tensor_parallel_comm=True), cluster, seed=0)
    recompute = synthesize(
        workload(count_tensor_parallel_comm=True, activation_recompute=True), cluster, seed=0
    )
    model = workload().model
    tokens_per_sample = plain.provenance["derived"]["tokens_per_sample"]
    per_replica = 512 // (8 // 2)
    allreduce = roofline.allreduce_seconds(
        per_replica * tokens_per_sample * model.hidden_size * 2,
        num_ranks=2,
        link_bytes_per_s=cluster.links.intra_node_bytes_per_s,
        latency_s=LINK_LATENCY_S["intra_node"],
    )
    one_pass = 2 * model.num_layers * allreduce
    # Reference and old-policy forwards: one pass each. Training: forward and backward, plus the recomputation.
    assert seconds_of(counted, "inference", 8, 512) - seconds_of(plain, "inference", 8, 512) == pytest.approx(
        2 * one_pass, rel=1e-9
    )
    assert seconds_of(counted, "actor", 8, 512) - seconds_of(plain, "actor", 8, 512) == pytest.approx(
        2 * one_pass, rel=1e-9
    )
    with_recompute = seconds_of(recompute, "actor", 8, 512) - seconds_of(
        synthesize(workload(activation_recompute=True), cluster, seed=0), "actor", 8, 512
    )
    assert with_recompute == pytest.approx(3 * one_pass, rel=1e-9)
    # Decode pays the all-reduces of the sequences in flight in every step: at least their latency, at most the
    # bytes of a full batch of sequences, on top of the prefill's.
    physics = Physics.of(workload(count_tensor_parallel_comm=True), cluster, 0)
    steps = physics.op_time("rollout", 512, 4).num_decode_steps
    decode = seconds_of(counted, "rollout", 8, 512) - seconds_of(plain, "rollout", 8, 512)
    prefill = 2 * model.num_layers * float(physics.allreduce_seconds(128 * 512 * model.hidden_size * 2, 2))
    latency = steps * 2 * model.num_layers * LINK_LATENCY_S["intra_node"]
    full = steps * 2 * model.num_layers * float(physics.allreduce_seconds(128 * model.hidden_size * 2, 2))
    assert latency < decode - prefill <= full


def test_pipeline_stages_leave_only_the_tensor_parallel_part_to_communicate(cluster):
    staged = workload(count_tensor_parallel_comm=True, pipeline_parallel=2)
    trace = synthesize(staged, cluster, seed=0)
    plain = synthesize(workload(pipeline_parallel=2), cluster, seed=0)
    # Actor and inference: 2 devices = 1 tensor-parallel rank x 2 stages, nothing to all-reduce. The rollout has
    # no stages: its 2 devices are tensor parallel.
    assert seconds_of(trace, "actor", 8, 512) == seconds_of(plain, "actor", 8, 512)
    assert seconds_of(trace, "inference", 8, 512) == seconds_of(plain, "inference", 8, 512)
    assert seconds_of(trace, "rollout", 8, 512) > seconds_of(plain, "rollout", 8, 512)
    with pytest.raises(ConfigError, match="actor_model_parallel"):
        workload(pipeline_parallel=4, inference_model_parallel=4)


def test_allreduce_links_within_a_node_across_nodes_and_on_a_mesh():
    cluster = parse_cluster("2x4xH100")
    physics = Physics.of(workload(count_tensor_parallel_comm=True), cluster, 0)
    links = cluster.links
    assert float(physics.allreduce_seconds(1e6, 4)) == pytest.approx(
        LINK_LATENCY_S["intra_node"] + 1.5 * 1e6 / links.intra_node_bytes_per_s
    )
    assert float(physics.allreduce_seconds(1e6, 8)) == pytest.approx(
        LINK_LATENCY_S["inter_node"] + 1.75 * 1e6 / links.inter_node_bytes_per_s
    )
    # A point-to-point mesh of 64 GB/s peer links: t ranks get t - 1 links, at most the intra-node rate.
    mesh = Physics.of(workload(count_tensor_parallel_comm=True, mesh_link_bytes_per_s=64e9), cluster, 0)
    assert float(mesh.allreduce_seconds(1e9, 2)) == pytest.approx(LINK_LATENCY_S["intra_node"] + 1e9 / 64e9)
    assert float(mesh.allreduce_seconds(1e9, 4)) == pytest.approx(
        LINK_LATENCY_S["intra_node"] + 1.5e9 / 192e9
    )
    off = Physics.of(workload(), cluster, 0)
    assert float(off.allreduce_seconds(1e9, 4)) == 0


def test_optimizer_shards_divide_only_the_optimizer_state(cluster):
    n = MODEL_PRESETS["7b"].num_params
    sharded = workload(actor_model_parallel=1, optimizer_shards=8)
    trace = synthesize(sharded, cluster, seed=0)
    assert trace.workflow.component("actor").state_bytes == int(n * (16 - 12 + 12 / 8))
    # 16 bytes per parameter of a 7.6B model do not fit an 80 GiB H100; with the optimizer over 8 ranks they do.
    with pytest.raises(ConfigError, match="actor_model_parallel"):
        Physics.of(workload(actor_model_parallel=1), cluster, 0)
    with pytest.raises(ConfigError, match="optimizer_state_bytes_per_param"):
        workload(optimizer_state_bytes_per_param=20.0)
    with pytest.raises(ConfigError, match="optimizer_shards"):
        workload(optimizer_shards=0)


def test_a_freed_kv_cache_onloads_and_offloads_the_rollout_weights_only():
    cluster = parse_cluster("8xH100")
    plan = {
        "placement": dict.fromkeys(("rollout", "reward", "inference", "actor"), "all"),
        "offload": ["rollout", "inference", "actor"],
    }
    spans = {}
    for freed in (False, True):
        trace = synthesize(workload(free_kv_cache_on_offload=freed), cluster, seed=0)
        program = lower(trace.workflow, plan_from_dict(plan, 8), cluster)
        timeline = simulate(program, fit(trace, cluster))
        spans[freed] = {
            (program.ops[s.op_index].kind, program.ops[s.op_index].component): s.seconds
            for s in timeline.spans
            if program.ops[s.op_index].kind in ("onload", "offload")
        }
    weights_per_device = 2 * MODEL_PRESETS["7b"].num_params / 2
    host = cluster.links.host_device_bytes_per_s
    for kind in ("onload", "offload"):
        assert spans[True][(kind, "rollout")] == pytest.approx(
            LINK_LATENCY_S["host"] + weights_per_device / host
        )
        assert spans[False][(kind, "rollout")] > 3 * spans[True][(kind, "rollout")]
        # Every other state still moves whole.
        assert spans[True][(kind, "actor")] == spans[False][(kind, "actor")]


def test_decode_step_overhead_adds_its_seconds_per_step(cluster):
    plain = synthesize(workload(), cluster, seed=0)
    slowed = synthesize(workload(decode_step_overhead_s=0.003), cluster, seed=0)
    physics = Physics.of(workload(), cluster, 0)
    steps = physics.op_time("rollout", 512, 4).num_decode_steps
    assert steps >= max(plain.response_lengths[:512])
    added = seconds_of(slowed, "rollout", 8, 512) - seconds_of(plain, "rollout", 8, 512)
    assert added == pytest.approx(0.003 * steps, rel=1e-9)
    assert seconds_of(slowed, "actor", 8, 512) == seconds_of(plain, "actor", 8, 512)
    with pytest.raises(ConfigError, match="decode_step_overhead_s"):
        workload(decode_step_overhead_s=-1.0)


def test_new_switches_and_links_are_validated():
    with pytest.raises(ConfigError, match="count_tensor_parallel_comm"):
        workload(count_tensor_parallel_comm="yes")
    with pytest.raises(ConfigError, match="free_kv_cache_on_offload"):
        workload(free_kv_cache_on_offload=1)
    with pytest.raises(ConfigError, match="mesh_link_bytes_per_s"):
        workload(mesh_link_bytes_per_s=0.0)


@pytest.mark.parametrize("name", ["grpo_1.5b_h100", "grpo_7b_h100", "grpo_32b_h200"])
def test_shipped_analytic_traces_resynthesize_to_the_same_samples(tmp_path, name):
    path = ROOT / "traces" / f"{name}.json"
    shipped = json.loads(path.read_text())
    argv = shlex.split(shipped["provenance"]["command"])[1:]
    argv[argv.index("--out") + 1] = str(tmp_path / "again.json")
    assert main([*argv, "--date", shipped["provenance"]["date"]]) == 0
    again = load_trace(tmp_path / "again.json").to_dict()
    for part in ("workflow", "cluster", "samples", "distributions", "memory"):
        assert again[part] == shipped[part], part


def test_cli_synth_takes_the_decode_step_overhead_and_records_it(tmp_path, capsys):
    flags = ["trace", "synth", "--model", "1.5b", "--prompts", "16", "--group-size", "4", "--date", "x"]
    assert main([*flags, "--out", str(tmp_path / "plain.json")]) == 0
    assert main([*flags, "--decode-step-overhead-s", "0.01", "--out", str(tmp_path / "slow.json")]) == 0
    plain, slow = load_trace(tmp_path / "plain.json"), load_trace(tmp_path / "slow.json")
    assert "--decode-step-overhead-s 0.01" in slow.provenance["command"]
    assert slow.provenance["workload"]["decode_step_overhead_s"] == 0.01
    assert seconds_of(slow, "rollout", 8, 64) > seconds_of(plain, "rollout", 8, 64) + 0.01 * 100
    assert seconds_of(slow, "actor", 8, 64) == seconds_of(plain, "actor", 8, 64)
    capsys.readouterr()  # the good runs' progress lines
    assert main([*flags, "--decode-step-overhead-s", "-1", "--out", str(tmp_path / "bad.json")]) == 2
    error = capsys.readouterr().err
    assert "decode_step_overhead_s=" in error and len(error.strip().splitlines()) == 1
