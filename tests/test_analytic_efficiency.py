"""Efficiency by the work per device in the analytic model: a training framework's published MFU and fixed cost per
optimizer step, the pipeline schedule (bubble, stage-to-stage transfers), published resharding of a collocated weight
sync, and tensor x pipeline x data parallel sizes on the command line."""

from __future__ import annotations

import json
import math
import shlex

import attrs
import pytest
from factories import llm_7b

from rlinf.analytic.pipeline import PipelineSchedule, schedule_of
from rlinf.analytic.synthesis import MODEL_PRESETS, LLMWorkload, Physics, ResponseLengths, synthesize
from rlinf.analytic.training_costs import (
    TRAINING_EFFICIENCIES,
    PublishedMfu,
    TrainingEfficiency,
    training_efficiency,
)
from rlinf.analytic.weight_sync import RESHARD_MEASUREMENTS, reshard_measurement
from rlinf.cli import main
from rlinf.core.cluster import Cluster, parse_cluster
from rlinf.core.costs import fit
from rlinf.core.errors import ConfigError
from rlinf.core.lowering import lower
from rlinf.core.plan import plan_from_dict
from rlinf.core.trace import CostSample, load_trace
from rlinf.core.workflow import WeightSync
from simulator import simulate


def workload(**changes) -> LLMWorkload:
    """32B GRPO, 64 x 32 responses, tensor parallelism 4 x pipeline 4 for training and log-probs."""
    base = LLMWorkload(
        model=MODEL_PRESETS["32b"],
        num_prompts=64,
        group_size=32,
        response=ResponseLengths(median_tokens=2500, sigma=0.6, max_tokens=8192),
        rollout_model_parallel=4,
        inference_model_parallel=16,
        actor_model_parallel=16,
        pipeline_parallel=4,
        optimizer_steps=4,
        count_tensor_parallel_comm=True,
    )
    return attrs.evolve(base, **changes)


def small(**changes) -> LLMWorkload:
    """7B GRPO, 8 x 4 responses, every component on two tensor-parallel ranks."""
    return llm_7b(num_prompts=8, group_size=4, **changes)


@pytest.fixture
def cluster() -> Cluster:
    return parse_cluster("4x8xH100")


# ------------------------------------------------------------------ the training framework's published curve


def test_megatron_fixed_cost_reproduces_both_strong_scaling_readings():
    megatron = training_efficiency("megatron")
    t0 = megatron.fixed_tokens_per_step
    assert 100 < t0 < 150  # tokens' worth of training per device per optimizer step
    first, last = megatron.strong_scaling
    plateau = first.mfu * (first.tokens_per_device_per_step + t0) / first.tokens_per_device_per_step
    for reading in (first, last):
        t = reading.tokens_per_device_per_step
        assert plateau * t / (t + t0) == pytest.approx(reading.mfu, rel=1e-9)


def test_plateau_mfu_interpolates_in_log_parameters_and_holds_outside():
    megatron = training_efficiency("megatron")
    assert megatron.plateau_mfu(1e9) == 0.41
    assert megatron.plateau_mfu(1e12) == 0.475
    middle = math.sqrt(2e9 * 175e9)  # halfway in log between the first two published sizes
    assert megatron.plateau_mfu(middle) == pytest.approx((0.41 + 0.47) / 2)
    assert megatron.mfu(8e9, 1e9) == pytest.approx(megatron.plateau_mfu(8e9), rel=1e-6)
    assert megatron.mfu(8e9, 125) < 0.6 * megatron.plateau_mfu(8e9)  # few tokens per device: the fixed cost
    assert training_efficiency("fsdp").fixed_tokens_per_step == 0.0  # no strong scaling published


def test_training_efficiency_rejects_bad_tables_and_unknown_keys():
    with pytest.raises(ConfigError, match="two token counts"):
        TrainingEfficiency(key="x", framework="f", device="d", source="s",
                           by_model_size=(PublishedMfu(num_params=1e9, mfu=0.4),),
                           strong_scaling=(PublishedMfu(num_params=1e9, mfu=0.4, tokens_per_device_per_step=10),))  # fmt: skip
    with pytest.raises(ConfigError, match="at least one"):
        TrainingEfficiency(key="x", framework="f", device="d", source="s", by_model_size=())
    with pytest.raises(ConfigError, match="mfu"):
        PublishedMfu(num_params=1e9, mfu=47.0)
    with pytest.raises(ConfigError, match="megatron"):
        training_efficiency("deepspeed")
    with pytest.raises(ConfigError, match="nemo-rl"):
        reshard_measurement("slime")


def test_each_published_entry_names_its_source():
    for entry in TRAINING_EFFICIENCIES.values():
        assert "github.com" in entry.source
    for measurement in RESHARD_MEASUREMENTS.values():
        assert "github.com" in measurement.source


def test_a_step_pays_the_fixed_cost_of_its_optimizer_steps(cluster):
    plain = Physics.of(small(optimizer_steps=4), cluster, 0)
    fixed = Physics.of(small(optimizer_steps=4, train_fixed_tokens_per_step=500.0), cluster, 0)
    tokens = 8 * plain.tokens_per_sample
    per_device_per_step = tokens / (4 * 2)
    base, more = plain.train_time(tokens), fixed.train_time(tokens)
    assert more.train_s == pytest.approx(base.train_s * (1 + 500.0 / per_device_per_step))
    assert more.fixed_s == base.fixed_s


# ------------------------------------------------------------------ pipeline schedule


def test_pipeline_schedule_bubble_and_transfers():
    schedule = PipelineSchedule(stages=4, micro_batches=12)
    assert schedule.slots == 15
    assert schedule.bubble_factor == pytest.approx(15 / 12)
    assert schedule.transfer_seconds(0.001, passes=2) == pytest.approx(15 * 2 * 0.001)
    assert PipelineSchedule(stages=1, micro_batches=3).transfer_seconds(1.0, passes=2) == 0.0
    assert schedule_of(10_000, stages=4, micro_batch_tokens=4096).micro_batches == 3
    with pytest.raises(ConfigError, match="stages"):
        PipelineSchedule(stages=0, micro_batches=1)


def test_tp4_pp4_prices_the_bubble_and_stage_transfers_of_its_schedule(cluster):
    on = Physics.of(workload(count_pipeline_bubbles=True), cluster, 0)
    off = Physics.of(workload(), cluster, 0)
    tokens = 1024 * on.tokens_per_sample  # 1,024 responses on one replica of 16 devices
    step_tokens = tokens / 4
    schedule = on.pipeline_schedule(tokens, 16, steps=4)
    assert schedule.stages == 4 and schedule.micro_batches == math.ceil(step_tokens / 4096)
    priced, unpriced = on.train_time(tokens), off.train_time(tokens)
    assert priced.train_s == pytest.approx(unpriced.train_s * schedule.bubble_factor)
    # The replica's 16 devices span two nodes: one stage boundary crosses them, and every slot of every step sends
    # a micro-batch's activations forward and their gradients back across it.
    hop = 30e-6 + step_tokens / schedule.micro_batches * 5120 * 2 / cluster.links.inter_node_bytes_per_s
    transfers = 4 * schedule.slots * 2 * hop
    assert transfers > 0
    assert priced.fixed_s == pytest.approx(unpriced.fixed_s * schedule.bubble_factor + transfers)


def test_tp4_pp4_32b_trace_is_not_sixteen_way_tensor_parallelism_across_nodes(tmp_path):
    common = ["trace", "synth", "--model", "32b", "--device", "H100", "--num-devices", "32", "--prompts", "64",
              "--group-size", "32", "--response-median", "2500", "--rollout-mp", "4", "--optimizer-steps", "4",
              "--date", "x"]  # fmt: skip
    layouts = {
        "tp4pp4": ["--actor-tp", "4", "--inference-tp", "4", "--pp", "4"],
        "tp16": ["--actor-mp", "16", "--inference-mp", "16"],
        "no-bubble": ["--actor-tp", "4", "--inference-tp", "4", "--pp", "4", "--terms",
                      "attention,tp-comm,free-kv,kv-preemption"],
    }  # fmt: skip
    train = {}
    for name, flags in layouts.items():
        assert main([*common, *flags, "--out", str(tmp_path / f"{name}.json")]) == 0
        trace = load_trace(tmp_path / f"{name}.json")
        train[name] = fit(trace).compute_seconds("actor", "train", 32, 2048)
        if name == "tp4pp4":
            assert trace.provenance["workload"]["pipeline_parallel"] == 4
            assert trace.provenance["workload"]["actor_model_parallel"] == 16
            assert " --pp 4 " in trace.provenance["command"]
    assert train["tp16"] > 3 * train["tp4pp4"]  # all-reduces of 16 ranks over the inter-node link
    assert train["no-bubble"] < train["tp4pp4"]  # the pipeline term prices the bubble and the transfers


def test_parallel_and_efficiency_flags_are_checked(tmp_path, capsys):
    base = ["trace", "synth", "--model", "7b", "--out", str(tmp_path / "unused.json")]
    cases = {
        "--actor-tp": ["--actor-tp", "2", "--actor-mp", "4"],
        "multiple of pipeline_parallel": [
            "--pp",
            "4",
        ],  # the 7b recipe's sizes 2 and 1 are not multiples of 4
        "--train-efficiency": ["--train-efficiency", "megatron", "--train-mfu", "0.4"],
        "slime": ["--weight-sync", "slime"],
    }
    for needle, flags in cases.items():
        assert main([*base, *flags]) == 2, flags
        assert needle in capsys.readouterr().err, flags
    assert not (tmp_path / "unused.json").exists()


# ------------------------------------------------------------------ resharding a collocated weight sync


def test_reshard_rate_is_bytes_per_rollout_device_per_second():
    verl = reshard_measurement("verl")
    assert verl.bytes_per_device_per_s == pytest.approx(2 * 7.62e9 / 2 / 4.191206)
    assert verl.seconds_for(2 * 7.62e9, 2) == pytest.approx(4.191206)
    assert verl.seconds_for(2 * 7.62e9, 4) == pytest.approx(4.191206 / 2)


def test_collocated_sync_pays_the_resharding_and_a_split_one_does_not(cluster):
    rate = reshard_measurement("nemo-rl").bytes_per_device_per_s
    trace = synthesize(small(reshard_bytes_per_device_per_s=rate), cluster, seed=0, device_counts=(16, 32))
    (sync,) = [s for s in trace.workflow.weight_sync if s.dst == "rollout"]
    weights = 2 * MODEL_PRESETS["7b"].num_params
    assert sync.reshard_s == pytest.approx(weights / 2 / rate)
    assert all(s.reshard_s == 0 for s in trace.workflow.weight_sync if s.dst != "rollout")
    costs = fit(trace, cluster)

    def sync_seconds(plan: dict) -> dict[str, float]:
        timeline = simulate(lower(trace.workflow, plan_from_dict(plan, 32, source="p"), cluster), costs)
        return {span.peer: span.seconds for span in timeline.spans if span.kind == "sync_weights"}

    names = trace.workflow.component_names
    collocated = sync_seconds(
        {"placement": dict.fromkeys(names, "all"), "offload": ["actor", "inference", "rollout"]}
    )
    # The same bytes, the same link and the same sender: the resharding is the rollout's sync's alone.
    assert collocated["rollout"] - collocated["inference"] == pytest.approx(sync.reshard_s)
    split = {c: ("0-15" if c in ("rollout", "reward") else "16-31") for c in names}
    assert sync_seconds({"placement": split})["rollout"] < 1.0


def test_a_measured_sync_is_not_charged_the_resharding_again(cluster):
    rate = reshard_measurement("verl").bytes_per_device_per_s
    trace = synthesize(small(reshard_bytes_per_device_per_s=rate), cluster, seed=0, device_counts=(32,))
    (sync,) = [s for s in trace.workflow.weight_sync if s.dst == "rollout"]
    measured = attrs.evolve(
        trace,
        samples=(
            *trace.samples,
            CostSample(
                component="actor",
                op="sync_weights",
                devices=32,
                samples=0,
                seconds=1.5,
                num_bytes=sync.num_bytes,
            ),
        ),
    )
    plan = plan_from_dict(
        {"placement": dict.fromkeys(trace.workflow.component_names, "all"), "offload": ["actor", "rollout"]},
        32,
        source="p",
    )
    timeline = simulate(lower(measured.workflow, plan, cluster), fit(measured, cluster))
    seconds = {span.peer: span.seconds for span in timeline.spans if span.kind == "sync_weights"}
    assert seconds["rollout"] == pytest.approx(1.5, rel=1e-3)  # the measurement, not it plus the resharding
    assert sync.reshard_s > 1.5


def test_weight_sync_validates_and_round_trips_without_the_field_when_zero():
    with pytest.raises(ConfigError, match="reshard_s"):
        WeightSync(src="actor", dst="rollout", num_bytes=1, reshard_s=-1.0)
    trace_dict = {"src": "actor", "dst": "rollout", "num_bytes": 1}
    from rlinf.core.workflow import _weight_sync_dict

    assert _weight_sync_dict(WeightSync(**trace_dict)) == trace_dict
    assert _weight_sync_dict(WeightSync(**trace_dict, reshard_s=2.0))["reshard_s"] == 2.0


# ------------------------------------------------------------------ the command line


def test_synth_records_and_resynthesizes_the_efficiency_flags(tmp_path):
    flags = ["trace", "synth", "--model", "1.5b", "--prompts", "16", "--group-size", "4", "--date", "x",
             "--optimizer-steps", "2"]  # fmt: skip
    assert main([*flags, "--out", str(tmp_path / "a.json")]) == 0
    first = json.loads((tmp_path / "a.json").read_text())
    command = first["provenance"]["command"]
    for part in ("--pp 1", "--train-efficiency megatron", "--weight-sync nemo-rl", "--optimizer-steps 2"):
        assert part in command
    workload = first["provenance"]["workload"]
    assert workload["train_mfu"] == training_efficiency("megatron").plateau_mfu(
        workload["model"]["num_params"]
    )
    assert workload["forwards_at_train_mfu"] is True
    assert first["provenance"]["train_efficiency"]["key"] == "megatron"
    argv = shlex.split(command)[1:]
    argv[argv.index("--out") + 1] = str(tmp_path / "b.json")
    assert main([*argv, "--date", "x"]) == 0
    again = json.loads((tmp_path / "b.json").read_text())
    assert again["samples"] == first["samples"] and again["workflow"] == first["workflow"]


def test_cpu_and_none_keep_the_earlier_pricing(tmp_path):
    flags = ["trace", "synth", "--model", "1.5b", "--prompts", "16", "--group-size", "4", "--date", "x"]
    assert (
        main(
            [*flags, "--train-efficiency", "none", "--weight-sync", "none", "--out", str(tmp_path / "n.json")]
        )
        == 0
    )
    workload = json.loads((tmp_path / "n.json").read_text())["provenance"]["workload"]
    assert workload["train_mfu"] == attrs.fields_dict(LLMWorkload)["train_mfu"].default
    assert workload["reshard_bytes_per_device_per_s"] is None and workload["forwards_at_train_mfu"] is False
