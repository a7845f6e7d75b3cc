"""Response lengths from published statistics (rlinf/analytic/response_lengths.py), the engine per-step cost table
(rlinf/analytic/engine_costs.py), and the rlinf trace synth flags that use them."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

from rlinf.analytic.engine_costs import ENGINE_STEP_COSTS, EngineStepCost, StepLatency, engine_step_cost
from rlinf.analytic.llm_workload import ResponseLengths
from rlinf.analytic.response_lengths import clip_ratio, clipped_mean, lognormal_for, with_draw_mean
from rlinf.cli import main
from rlinf.core.errors import ConfigError
from rlinf.core.trace import load_trace


@pytest.mark.parametrize("sigma", [0.3, 0.6, 1.2])
def test_each_statistic_recovers_the_lognormal_it_came_from(sigma):
    truth = ResponseLengths(median_tokens=9000.0, sigma=sigma, max_tokens=27648)
    mean = clipped_mean(truth.median_tokens, sigma, truth.max_tokens)
    clip = clip_ratio(truth.median_tokens, sigma, truth.max_tokens)
    for fitted in (
        lognormal_for(mean, truth.max_tokens, sigma=sigma),
        lognormal_for(mean, truth.max_tokens, clip=clip),
        lognormal_for(mean, truth.max_tokens, median=truth.median_tokens),
    ):
        assert fitted.sigma == pytest.approx(sigma, rel=1e-4)
        assert fitted.median_tokens == pytest.approx(truth.median_tokens, rel=1e-4)


def test_a_longest_response_is_read_as_the_expected_largest_of_the_batch():
    truth = ResponseLengths(median_tokens=120.0, sigma=0.45, max_tokens=1024)
    draws = np.random.default_rng(1).lognormal(np.log(120.0), 0.45, size=(400, 5120))
    longest = float(np.median(draws.max(axis=1)))
    mean = clipped_mean(truth.median_tokens, truth.sigma, truth.max_tokens)
    fitted = lognormal_for(mean, truth.max_tokens, longest=(longest, 5120))
    assert fitted.sigma == pytest.approx(0.45, abs=0.02)


def test_the_clipped_mean_is_the_mean_of_cut_draws():
    draws = np.minimum(np.random.default_rng(0).lognormal(np.log(5000), 0.8, 400_000), 16384)
    assert clipped_mean(5000, 0.8, 16384) == pytest.approx(draws.mean(), rel=0.005)
    assert clip_ratio(5000, 0.8, 16384) == pytest.approx(float((draws >= 16384).mean()), abs=0.002)


def test_with_draw_mean_sets_the_drawn_mean():
    fitted = with_draw_mean(
        ResponseLengths(median_tokens=1.0, sigma=0.6, max_tokens=27648), 14255, num_lengths=4096, seed=3
    )
    drawn = fitted.draw(4096, np.random.default_rng(3))
    assert drawn.mean() == pytest.approx(14255, abs=1.0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "exactly one of"),
        ({"sigma": 0.6, "clip": 0.1}, "exactly one of"),
        ({"clip": 1.5}, "clip ratio"),
        ({"clip": 0.9}, "cannot go with a mean"),
        ({"median": 20000.0}, "response median"),
        ({"longest": (27648.0, 512)}, "longest response"),
        ({"longest": (30000.0, 1)}, "responses in the batch"),
    ],
)
def test_statistics_that_fit_no_lognormal_are_refused(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        lognormal_for(10000.0, 27648, **kwargs)
    with pytest.raises(ConfigError, match="response mean"):
        lognormal_for(30000.0, 27648, sigma=0.6)


def test_the_fixed_cost_is_a_lower_bound_computed_from_the_published_latencies():
    for cost in ENGINE_STEP_COSTS.values():
        unexplained = [
            m.step_s - m.bytes_read / cost.device_bandwidth_bytes_per_s - cost.per_sequence_s * m.batch
            for m in cost.measurements
        ]
        assert cost.fixed_step_s == pytest.approx(min(unexplained))
        assert 0 < cost.fixed_step_s < min(m.step_s for m in cost.measurements)
    # Qwen3-0.6B on SGLang: (1 + 2048) tokens / 414.17 tokens/s over 2048 steps, less 1.2 GB at 4.0 TB/s and one
    # sequence's cost in flight (borrowed from vLLM V1's batch series: SGLang publishes none).
    sglang, vllm_v1 = ENGINE_STEP_COSTS["sglang-0.4"], ENGINE_STEP_COSTS["vllm-v1"]
    assert sglang.measured_per_sequence_s == 0.0 and sglang.per_sequence_s == vllm_v1.per_sequence_s
    assert sglang.fixed_step_s == pytest.approx(
        2049 / 414.17 / 2048 - 1.2e9 / 4.0e12 - vllm_v1.per_sequence_s
    )
    assert "from vllm-v1" in sglang.per_sequence_source and vllm_v1.per_sequence_source == "measured here"


def test_vllm_v1s_cost_per_sequence_is_the_slope_of_its_short_context_batch_series():
    """vLLM PR #53060, Qwen2.5-0.5B at 128 cached tokens: 1.677, 1.725 and 2.148 ms at batch 1, 8 and 32; less the
    weights and the KV cache (192 tokens of 12,288 bytes per sequence) at 2 TB/s, the slope is about 15 us."""
    cost = ENGINE_STEP_COSTS["vllm-v1"]
    batches = np.array([1, 8, 32])
    bytes_read = 0.98e9 + batches * 192 * 12288
    slope = np.polyfit(batches, np.array([1.677e-3, 1.725e-3, 2.148e-3]) - bytes_read / 2.0e12, 1)[0]
    assert cost.per_sequence_s == pytest.approx(slope) and 13e-6 < slope < 16e-6
    # The line through the batch-1 steps of the two models checks the fixed cost from the other side.
    assert cost.line_intercept_s == pytest.approx(cost.fixed_step_s, rel=0.1)


def test_a_measurement_at_several_batch_sizes_gives_a_cost_per_sequence():
    cost = EngineStepCost(
        key="test", engine="e", device="d", device_bandwidth_bytes_per_s=1e12, device_source="s", source="s",
        measurements=tuple(
            StepLatency(model="m", num_params=1e9, step_s=0.003 + 2e-3 + 1e-5 * batch, batch=batch)
            for batch in (1, 64, 256)
        ),
    )  # fmt: skip
    assert cost.per_sequence_s == pytest.approx(1e-5)
    assert cost.fixed_step_s == pytest.approx(0.003)
    with pytest.raises(ConfigError, match="at least two"):
        EngineStepCost(key="x", engine="e", device="d", device_bandwidth_bytes_per_s=1e12, device_source="s",
                       source="s", measurements=(StepLatency(model="m", num_params=1e9, step_s=0.003),))  # fmt: skip
    with pytest.raises(ConfigError, match="use one of"):
        engine_step_cost("trt-llm")


SYNTH = (
    "trace synth --model 1.5b --device H100 --num-devices 8 --prompts 32 --group-size 16 --prompt-tokens 150 "
    "--response-mean 14255 --response-max 27648 --rollout-mp 2 --inference-mp 2 --actor-mp 2 --engine sglang-0.4 "
    "--terms all --max-num-seqs 1024 --kv-cache-fraction 0.379 --activation-recompute --no-reference-model "
    "--date 2026-01-01"
)


def test_synth_flags_describe_a_long_cot_run_and_its_command_resynthesizes_it(tmp_path, capsys):
    first = tmp_path / "first.json"
    assert main([*shlex.split(SYNTH), "--out", str(first)]) == 0
    trace = load_trace(first)
    workload = trace.provenance["workload"]
    assert np.mean(trace.response_lengths) == pytest.approx(14255, abs=1.0)
    assert (
        workload["kv_preemption"]
        and workload["count_attention_flops"]
        and workload["free_kv_cache_on_offload"]
    )
    assert workload["decode_step_overhead_s"] == engine_step_cost("sglang-0.4").fixed_step_s
    assert workload["max_concurrent_sequences"] == 1024
    assert workload["activation_recompute"] and not workload["reference_model"]
    assert trace.provenance["response_lengths_from"]["mean"] == 14255
    assert trace.provenance["engine"]["key"] == "sglang-0.4"
    again = tmp_path / "again.json"
    command = shlex.split(trace.provenance["command"])[1:]
    command[command.index("--out") + 1] = str(again)
    assert main([*command, "--date", "2026-01-01"]) == 0
    assert load_trace(again).samples == trace.samples


def test_a_clip_ratio_sets_the_spread(tmp_path):
    out = tmp_path / "clip.json"
    args = "trace synth --model 1.5b --response-mean 6000 --response-clip-ratio 0.05 --response-max 16384"
    assert main([*shlex.split(args), "--out", str(out)]) == 0
    provenance = json.loads(out.read_text())["provenance"]
    fitted = provenance["response_lengths_from"]["fitted"]
    assert fitted["sigma"] == pytest.approx(lognormal_for(6000, 16384, clip=0.05).sigma)
    assert provenance["response_lengths"]["share_truncated"] == pytest.approx(0.05, abs=0.01)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("--response-clip-ratio 0.1", "--response-clip-ratio=0.1: needs --response-mean"),
        ("--response-mean 3000 --response-median 2000", "--response-mean=3000.0: and --response-median"),
        ("--response-mean 3000 --response-clip-ratio 0.1 --response-sigma 0.5", "both set the spread"),
        ("--response-mean 30000", "--response-mean=30000.0: must lie in"),
        ("--engine trt", "--engine='trt': has no published per-step cost"),
        ("--engine sglang-0.4 --decode-step-overhead-s 0.01", "both set the per-step cost"),
        ("--terms bogus", "--terms='bogus': names no model term"),
        ("--response-clip-ratio 1", "--response-clip-ratio"),
    ],
)
def test_bad_long_cot_flags_are_one_line_and_exit_2(tmp_path, capsys, flags, message):
    assert (
        main(["trace", "synth", "--model", "1.5b", *shlex.split(flags), "--out", str(tmp_path / "x.json")])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_synth_defaults_to_the_validated_model_and_none_gives_the_earlier_one_back(tmp_path):
    """Without the flags a user gets every term and the least published engine cost (what docs/analytic_validation.md
    checks), not the whole-batch model; ``--terms none --engine none`` is the earlier model, sample for sample."""
    base = shlex.split(
        "trace synth --model 1.5b --num-devices 8 --prompts 32 --group-size 16 --response-max 16384"
    )
    runs = {
        "default": [],
        "explicit": ["--terms", "all", "--engine", "vllm-v1"],
        "earlier": ["--terms", "none", "--engine", "none"],
        "overhead 0": ["--terms", "none", "--decode-step-overhead-s", "0"],
    }
    traces = {}
    for name, flags in runs.items():
        out = tmp_path / f"{name}.json"
        assert main([*base, *flags, "--date", "x", "--out", str(out)]) == 0
        traces[name] = load_trace(out)
    default = traces["default"]
    workload = default.provenance["workload"]
    assert min(ENGINE_STEP_COSTS, key=lambda k: ENGINE_STEP_COSTS[k].fixed_step_s) == "vllm-v1"
    assert workload["decode_step_overhead_s"] == engine_step_cost("vllm-v1").fixed_step_s > 0
    assert workload["decode_step_overhead_per_sequence_s"] == engine_step_cost("vllm-v1").per_sequence_s > 0
    assert (
        workload["kv_preemption"]
        and workload["count_attention_flops"]
        and workload["free_kv_cache_on_offload"]
    )
    assert default.provenance["engine"]["key"] == "vllm-v1"
    assert "--engine vllm-v1" in default.provenance["command"]
    assert "--terms attention,tp-comm,free-kv,kv-preemption" in default.provenance["command"]
    assert traces["explicit"].samples == default.samples
    earlier = traces["earlier"]
    assert earlier.samples == traces["overhead 0"].samples != default.samples
    assert "engine" not in earlier.provenance and not earlier.provenance["workload"]["kv_preemption"]
    assert "--engine none --terms none" in earlier.provenance["command"]

    def generate_s(trace):
        return max(s.seconds for s in trace.samples if s.op == "generate" and s.devices == 8)

    assert generate_s(default) > generate_s(earlier)  # every decode step pays the engine; none is free


def test_synth_on_the_cpu_preset_takes_no_gpu_engine_by_default(tmp_path):
    out = tmp_path / "cpu.json"
    flags = "trace synth --params 2e6 --layers 2 --hidden-size 64 --device CPU --num-devices 2 --prompts 8"
    assert main([*shlex.split(flags), "--date", "x", "--out", str(out)]) == 0
    provenance = load_trace(out).provenance
    assert provenance["workload"]["decode_step_overhead_s"] == 0.0 and "engine" not in provenance
    assert main([*shlex.split(flags), "--engine", "vllm-0.6", "--date", "x", "--out", str(out)]) == 0
    assert load_trace(out).provenance["engine"]["key"] == "vllm-0.6"
