"""The analytic model against published RL post-training runs: the table of docs/analytic_validation.md.

    python benchmarks/analytic_validation.py [--json docs/analytic_validation.json] [--markdown]

Each :class:`PublishedRun` below is one configuration that an RL system published with its iteration time,
with where each number was read and what had to be assumed. For each, the script builds the analytic model's
workload (:class:`rlinf.llm_workload.LLMWorkload` at its default efficiencies: nothing is fitted to these runs),
synthesizes a trace on the run's cluster, lowers the run's placement (collocated, or disaggregated for the
one-step-off-policy runs) and simulates one iteration. The prediction is the simulated iteration time; for a
one-step-off-policy run, whose generation of step k+1 overlaps the training of step k, it is the busy time of
the busiest device in that iteration (the pipeline's steady-state step, see :func:`predict`). The ratio is
predicted over reported seconds. Every row is predicted twice: by the model as it was before this validation
("before": no attention FLOPs, no activation recomputation) and as it is now.

``--markdown`` prints the doc's table, summaries and sources; ``--json`` writes everything as JSON.
tests/test_analytic_validation.py recomputes both and checks that the doc and its JSON still agree.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from rlinf.analytic import synthesize
from rlinf.cluster import DEVICE_PRESETS, Cluster, DeviceSpec, Links
from rlinf.costs import fit
from rlinf.errors import RlinfWarning
from rlinf.llm_workload import LLMWorkload, ModelSpec, ResponseLengths
from rlinf.lowering import lower
from rlinf.plan import plan_from_dict
from simulator import simulate

SEED = 0
RESPONSE_SIGMA = 0.6
"""Lognormal spread of response lengths (the project's recipes' value): no source states a distribution."""

NEMO_DOC = (
    "NeMo RL performance summary, section 'Nemo RL v0.5', table '{table}' "
    "(docs/about/performance-summary.md of github.com/NVIDIA-NeMo/RL at e7c0123d71ee, 2026-04-14; "
    "rendered at https://docs.nvidia.com/nemo/rl/0.5.0/about/performance-summary.html); recipe "
    "examples/configs/recipes/llm/performance/{recipe}.yaml at the same commit"
)
VERL_LOG = (
    "veRL docs 'Algorithm Baselines' (docs/algo/baseline.md), GSM8k table, row 'AMD MI300 | "
    "deepseek-ai/deepseek-llm-7b-chat | {algo}', linked log "
    "https://github.com/yushengsu-thu/verl_training_log/blob/main/gsm8k/{log} (commit deb1507ca074): mean of "
    "timing_s/step over its 1,008 steps without validation"
)

# Model shapes: Megatron-Bridge model providers (github.com/NVIDIA-NeMo/Megatron-Bridge,
# src/megatron/bridge/models/{llama/llama_provider.py, qwen/qwen_provider.py}) and the Hugging Face config of
# deepseek-llm-7b; parameter counts are computed from the shapes (embeddings untied). Qwen3-32B has 64 heads of
# 128 dims (8 KV heads) on a 5120 hidden size.
LLAMA31_8B = ModelSpec(
    name="Llama-3.1-8B",
    num_params=8.03e9,
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
)
QWEN3_32B = ModelSpec(
    name="Qwen3-32B",
    num_params=32.76e9,
    num_layers=64,
    hidden_size=5120,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=128,
)
DEEPSEEK_7B = ModelSpec(
    name="deepseek-llm-7b",
    num_params=6.91e9,
    num_layers=30,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=32,
)

# Devices that rlinf.cluster has no preset for. GB200 (per GPU of a GB200 NVL72, 1,200 W): 2.5 PFLOP/s dense BF16
# and 8 TB/s HBM3e (glennklockwood.com/garden/processors/B200), 13.4 TB of HBM3e per 72 GPUs = 186 GB
# (aiwiki.ai/wiki/nvidia_gb200_nvl72), NVLink 5 at 900 GB/s per direction across the rack
# (verda.com/blog/gb300-nvl72-architecture); host link assumed 450 GB/s (NVLink-C2C of one Grace shared by two
# GPUs). MI300X: 192 GB HBM3 at 5.3 TB/s, ~1.3 PFLOP/s dense FP16/BF16
# (jaredwatkins.com/research/ai-accelerators/amd-instinct/mi300-series; aiwiki.ai/wiki/amd_instinct_mi300x),
# Infinity Fabric 448 GB/s aggregate per GPU (emergentmind.com/topics/amd-mi300x-gpu), host link as the H100
# preset's PCIe Gen5 x16.
DEVICES: dict[str, tuple[DeviceSpec, Links]] = {
    "H100": DEVICE_PRESETS["H100"],
    "GB200": (
        DeviceSpec(
            name="GB200", memory_bytes=186 * 10**9, peak_flops=2.5e15, memory_bandwidth_bytes_per_s=8e12
        ),
        Links(intra_node_bytes_per_s=900e9, inter_node_bytes_per_s=900e9, host_device_bytes_per_s=450e9),
    ),
    "MI300X": (
        DeviceSpec(
            name="MI300X", memory_bytes=192 * 10**9, peak_flops=1.3e15, memory_bandwidth_bytes_per_s=5.3e12
        ),
        Links(intra_node_bytes_per_s=448e9, inter_node_bytes_per_s=50e9, host_device_bytes_per_s=55e9),
    ),
}


PHASES: dict[str, tuple[str, ...]] = {
    "generation": ("rollout",),
    "log-probs": ("inference",),
    "update": ("actor", "critic"),
    "other": ("onload", "offload", "reward", "sync_weights", "transfer"),
}
"""A reported phase and the simulated components (and movement kinds) whose seconds it compares with."""


@attrs.frozen(kw_only=True)
class PublishedRun:
    """One published configuration and its reported iteration time."""

    key: str
    system: str
    source: str
    """Where every number of the row was read (document, section or table, commit)."""
    model: ModelSpec
    device: str
    """A key of :data:`DEVICES`."""
    num_devices: int
    devices_per_node: int
    num_prompts: int
    group_size: int
    prompt_tokens: int
    response_mean_tokens: float
    max_response_tokens: int
    """The generation limit: max_response_length (veRL), or max_model_len minus the prompt (NeMo RL's vLLM)."""
    mode: str
    """``collocated`` (synchronous, every component on every device) or ``one-step-off`` (generation on the
    first ``rollout_devices`` devices, one step ahead of training on the others)."""
    reported_s: float
    """Reported seconds per iteration (training step)."""
    rollout_mp: int
    train_mp: int
    """Model-parallel size of training and of the log-prob forwards (a replica's devices)."""
    kv_cache_fraction: float
    activation_recompute: bool
    """The run's training recomputes activations (its config turns activation checkpointing on)."""
    algorithm: str = "grpo"
    rollout_devices: int = 0
    max_concurrent_sequences: int = 256
    reported_phases_s: tuple[tuple[str, float], ...] = ()
    """Per-phase seconds where the source breaks the step down: keys of :data:`PHASES`."""
    assumptions: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        if self.mode not in ("collocated", "one-step-off"):
            raise ValueError(f"{self.key}: mode {self.mode!r} is not collocated or one-step-off")
        if self.mode == "one-step-off" and not 0 < self.rollout_devices < self.num_devices:
            raise ValueError(
                f"{self.key}: rollout_devices {self.rollout_devices} must split {self.num_devices}"
            )
        unknown = {phase for phase, _ in self.reported_phases_s} - set(PHASES)
        if unknown:
            raise ValueError(f"{self.key}: unknown phases {sorted(unknown)}, use {sorted(PHASES)}")
        if self.device not in DEVICES:
            raise ValueError(f"{self.key}: unknown device {self.device!r}, use one of {sorted(DEVICES)}")


def kv_cache_fraction(model: ModelSpec, device: str, rollout_mp: int, gpu_memory_utilization: float) -> float:
    """The KV pool's share of a rollout device: the engine's memory share less the bf16 weights' share."""
    weights = 2.0 * model.num_params / (rollout_mp * DEVICES[device][0].memory_bytes)
    return round(gpu_memory_utilization - weights, 3)


def nemo_prompt_tokens(
    tokens_per_gpu_s: float, num_gpus: int, step_s: float, samples: int, response: float
) -> int:
    """The mean prompt of a NeMo RL row. Its Tokens/sec/GPU counts prompt + response tokens over the whole step
    (``print_performance_metrics`` in nemo_rl/algorithms/utils.py), so the prompt is what the table's tokens leave
    beside its mean response."""
    prompt = tokens_per_gpu_s * num_gpus * step_s / samples - response
    if prompt <= 0:
        raise ValueError(
            f"the reported tokens leave no prompt ({prompt:.1f} tokens): check the row's figures"
        )
    return round(prompt)


_NEMO_PROMPT = (
    "mean prompt tokens derived from the table's Tokens/sec/GPU x GPUs x step time / 2,048 samples minus the mean "
    "response (the table's G-Average Seq len, which that identity shows to be the generated length)"
)
_NEMO_COMMON = (
    "response lengths lognormal (sigma 0.6) with the reported mean, cut at 4,096 minus the prompt (max_model_len)",
    "vLLM max_num_seqs at its default 256; KV pool = gpu_memory_utilization x memory - weights",
)
_SHARDED = (
    "training's model-parallel size raised to {mp} so that Adam state fits: the model has no ZeRO/distributed-"
    "optimizer sharding over data-parallel ranks (compute does not depend on it)"
)
_ONE_OFF = (
    "one-step-off-policy: prediction = busiest device's busy time in one simulated iteration of the disaggregated "
    "plan (generation overlaps the previous step's training; rlinf simulates one synchronous iteration)"
)


def _nemo(key: str, *, table: str, recipe: str, model: ModelSpec, device: str, gpus: int, per_node: int,
          response: float, tokens_per_gpu_s: float, step_s: float, mode: str, rollout_mp: int, train_mp: int,
          gpu_util: float, rollout_devices: int = 0, extra: tuple[str, ...] = ()) -> PublishedRun:  # fmt: skip
    # The Llama recipes set megatron_cfg.activation_checkpointing: true; the Qwen3-32B ones keep the default false.
    prompt = nemo_prompt_tokens(tokens_per_gpu_s, gpus, step_s, 2048, response)
    return PublishedRun(
        key=key,
        system="NeMo RL 0.5",
        source=NEMO_DOC.format(table=table, recipe=recipe),
        model=model,
        device=device,
        num_devices=gpus,
        devices_per_node=per_node,
        num_prompts=64,
        group_size=32,
        prompt_tokens=prompt,
        response_mean_tokens=response,
        max_response_tokens=4096 - prompt,
        mode=mode,
        reported_s=step_s,
        rollout_mp=rollout_mp,
        train_mp=train_mp,
        kv_cache_fraction=kv_cache_fraction(model, device, rollout_mp, gpu_util),
        rollout_devices=rollout_devices,
        activation_recompute=model is LLAMA31_8B,
        assumptions=(_NEMO_PROMPT, *_NEMO_COMMON, *extra),
    )


_VERL_ASSUMED = (
    "'AMD MI300' of the veRL table taken as MI300X",
    "response lengths lognormal (sigma 0.6) with the log's mean response_length/mean, cut at the max response",
    "veRL's rollout defaults when the log was written (verl/trainer/config/ppo_trainer.yaml at 44a65f956d72): "
    "max_num_seqs 1,024, enforce_eager true; KV pool = gpu_memory_utilization x memory - weights",
)


def _verl(key: str, *, algo: str, log: str, group_size: int, response: float, max_response: int, step_s: float,
          rollout_mp: int, gpu_util: float, phases: tuple[tuple[str, float], ...]) -> PublishedRun:  # fmt: skip
    # Both runs: 1 node of 8 GPUs, train_batch_size 1024, max_prompt_length 512, FSDP actor with
    # enable_gradient_checkpointing=True, colocated hybrid engine; the logs' mean prompt_length/mean is 82.6.
    return PublishedRun(
        key=key,
        system="veRL (ROCm)",
        source=VERL_LOG.format(algo=algo, log=log),
        model=DEEPSEEK_7B,
        device="MI300X",
        num_devices=8,
        devices_per_node=8,
        num_prompts=1024,
        group_size=group_size,
        prompt_tokens=83,
        response_mean_tokens=response,
        max_response_tokens=max_response,
        mode="collocated",
        reported_s=step_s,
        rollout_mp=rollout_mp,
        train_mp=1,
        kv_cache_fraction=kv_cache_fraction(DEEPSEEK_7B, "MI300X", rollout_mp, gpu_util),
        activation_recompute=True,
        algorithm="ppo" if algo == "PPO" else "grpo",
        max_concurrent_sequences=1024,
        reported_phases_s=phases,
        assumptions=_VERL_ASSUMED,
    )


H100_TABLE, GB200_TABLE = "H100 BF16 Benchmarks", "GB200 BF16 Benchmarks"
RUNS: tuple[PublishedRun, ...] = (
    _nemo("nemo-llama8b-h100-16", table=H100_TABLE, recipe="grpo-llama3.1-8b-instruct-2n8g", model=LLAMA31_8B,
          device="H100", gpus=16, per_node=8, response=1019, tokens_per_gpu_s=1581, step_s=92.8,
          mode="collocated", rollout_mp=1, train_mp=2, gpu_util=0.6),
    _nemo("nemo-llama8b-h100-16-off1", table=H100_TABLE, recipe="grpo-llama3.1-8b-instruct-2n8g-async-1off",
          model=LLAMA31_8B, device="H100", gpus=16, per_node=8, response=1123, tokens_per_gpu_s=2478, step_s=64.8,
          mode="one-step-off", rollout_mp=1, train_mp=2, gpu_util=0.8, rollout_devices=8,
          extra=(_ONE_OFF, _SHARDED.format(mp=2))),
    _nemo("nemo-qwen32b-h100-32", table=H100_TABLE, recipe="grpo-qwen3-32b-4n8g", model=QWEN3_32B,
          device="H100", gpus=32, per_node=8, response=3251, tokens_per_gpu_s=571, step_s=376,
          mode="collocated", rollout_mp=4, train_mp=16, gpu_util=0.6),
    _nemo("nemo-qwen32b-h100-64-off1", table=H100_TABLE, recipe="grpo-qwen3-32b-8n8g-async-1off",
          model=QWEN3_32B, device="H100", gpus=64, per_node=8, response=3252, tokens_per_gpu_s=538, step_s=200,
          mode="one-step-off", rollout_mp=4, train_mp=16, gpu_util=0.8, rollout_devices=32, extra=(_ONE_OFF,)),
    _nemo("nemo-llama8b-gb200-8", table=GB200_TABLE, recipe="grpo-llama3.1-8b-instruct-2n4g", model=LLAMA31_8B,
          device="GB200", gpus=8, per_node=4, response=1066, tokens_per_gpu_s=3359, step_s=91.0,
          mode="collocated", rollout_mp=1, train_mp=1, gpu_util=0.6),
    _nemo("nemo-llama8b-gb200-8-off1", table=GB200_TABLE, recipe="grpo-llama3.1-8b-instruct-2n4g-async-1off",
          model=LLAMA31_8B, device="GB200", gpus=8, per_node=4, response=1107, tokens_per_gpu_s=4463, step_s=71.1,
          mode="one-step-off", rollout_mp=1, train_mp=1, gpu_util=0.8, rollout_devices=4, extra=(_ONE_OFF,)),
    _nemo("nemo-qwen32b-gb200-16", table=GB200_TABLE, recipe="grpo-qwen3-32b-4n4g", model=QWEN3_32B,
          device="GB200", gpus=16, per_node=4, response=3253, tokens_per_gpu_s=1127, step_s=381,
          mode="collocated", rollout_mp=1, train_mp=4, gpu_util=0.6, extra=(_SHARDED.format(mp=4),)),
    _nemo("nemo-qwen32b-gb200-32-off1", table=GB200_TABLE, recipe="grpo-qwen3-32b-8n4g-async-1off",
          model=QWEN3_32B, device="GB200", gpus=32, per_node=4, response=3258, tokens_per_gpu_s=1025, step_s=210,
          mode="one-step-off", rollout_mp=1, train_mp=4, gpu_util=0.8, rollout_devices=16,
          extra=(_ONE_OFF, _SHARDED.format(mp=4))),
    _verl("verl-deepseek7b-grpo-mi300x-8", algo="GRPO", log="grpo_run_deepseek7b_llm.log", group_size=5,
          response=133.4, max_response=1024, step_s=74.07, rollout_mp=2, gpu_util=0.6,
          phases=(("generation", 38.46), ("log-probs", 5.56 + 5.94), ("update", 23.21), ("other", 0.89))),
    _verl("verl-deepseek7b-ppo-mi300x-8", algo="PPO", log="ppo_run_deepseek7b_llm.log", group_size=1,
          response=136.1, max_response=512, step_s=37.70, rollout_mp=4, gpu_util=0.4,
          phases=(("generation", 22.32), ("log-probs", 1.21 + 1.33 + 1.15), ("update", 5.24 + 6.26),
                  ("other", 0.18))),
)  # fmt: skip


def median_for_mean(mean_tokens: float, max_tokens: int, *, sigma: float = RESPONSE_SIGMA, seed: int = SEED,
                    num_lengths: int = 4096) -> float:  # fmt: skip
    """The lognormal median whose clipped draw (as :func:`rlinf.analytic.synthesize` makes it) has the given mean."""
    if not 1 <= mean_tokens < max_tokens:
        raise ValueError(f"mean response {mean_tokens} must lie in [1, max_tokens={max_tokens})")
    low, high = 1.0, float(max_tokens)

    def mean_of(median: float) -> float:
        lengths = ResponseLengths(median_tokens=median, sigma=sigma, max_tokens=max_tokens)
        return float(lengths.draw(num_lengths, np.random.default_rng(seed)).mean())

    if mean_of(high) < mean_tokens:
        raise ValueError(f"no median up to {max_tokens} gives a mean of {mean_tokens} with sigma {sigma}")
    for _ in range(60):
        middle = math.sqrt(low * high)
        low, high = (middle, high) if mean_of(middle) < mean_tokens else (low, middle)
    return math.sqrt(low * high)


def workload_of(run: PublishedRun, *, model_terms: bool = True) -> LLMWorkload:
    """The analytic model's workload for ``run``: the run's facts, the model's default efficiencies. With
    ``model_terms=False``, the model as it was before this validation: no attention FLOPs, no recomputation."""
    return LLMWorkload(
        model=run.model,
        num_prompts=run.num_prompts,
        group_size=run.group_size,
        prompt_tokens=run.prompt_tokens,
        response=ResponseLengths(
            median_tokens=median_for_mean(run.response_mean_tokens, run.max_response_tokens),
            sigma=RESPONSE_SIGMA,
            max_tokens=run.max_response_tokens,
        ),
        algorithm=run.algorithm,
        rollout_model_parallel=run.rollout_mp,
        inference_model_parallel=run.train_mp,
        actor_model_parallel=run.train_mp,
        kv_cache_fraction=run.kv_cache_fraction,
        max_concurrent_sequences=run.max_concurrent_sequences,
        activation_recompute=run.activation_recompute and model_terms,
        count_attention_flops=model_terms,
    )


def cluster_of(run: PublishedRun) -> Cluster:
    """The run's cluster: whole nodes of its device."""
    device, links = DEVICES[run.device]
    per_node = min(run.devices_per_node, run.num_devices)
    return Cluster(
        num_nodes=run.num_devices // per_node, devices_per_node=per_node, device=device, links=links
    )


def plan_of(run: PublishedRun, components: Sequence[str]) -> dict[str, Any]:
    """Collocated: every component on every device, each state offloaded when it yields them. One-step-off:
    rollout and reward on the first ``rollout_devices``, the log-prob forwards and training on the rest."""
    edges = {"rollout->reward": 1, "reward->inference": 1, "inference->actor": 1}
    if run.mode == "collocated":
        stateful = [c for c in components if c != "reward"]
        return {"placement": dict.fromkeys(components, "all"), "granularity": edges, "offload": stateful}
    generate = f"0-{run.rollout_devices - 1}"
    train = f"{run.rollout_devices}-{run.num_devices - 1}"
    placement = {c: generate if c in ("rollout", "reward") else train for c in components}
    return {"placement": placement, "granularity": edges}


@attrs.frozen(kw_only=True)
class Prediction:
    """rlinf's side of one row."""

    key: str
    predicted_s: float
    iteration_s: float
    """The simulated synchronous iteration (equal to ``predicted_s`` for collocated runs)."""
    component_s: dict[str, float]
    ratio: float
    """predicted_s / reported_s."""


def predict(run: PublishedRun, *, model_terms: bool = True) -> Prediction:
    """Synthesize, lower and simulate ``run``; for one-step-off runs take the busiest device's busy seconds."""
    workload, cluster = workload_of(run, model_terms=model_terms), cluster_of(run)
    trace = synthesize(workload, cluster, seed=SEED, date="unused")
    names = [c.name for c in trace.workflow.components]
    plan = plan_from_dict(plan_of(run, names), cluster.num_devices, source=run.key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RlinfWarning)
        timeline = simulate(lower(trace.workflow, plan, cluster), fit(trace, cluster))
    predicted = timeline.iteration_s
    if run.mode == "one-step-off":
        predicted = float(timeline.device_busy_seconds().max())
    component = {name: round(seconds, 3) for name, seconds in sorted(timeline.component_seconds().items())}
    return Prediction(
        key=run.key,
        predicted_s=predicted,
        iteration_s=timeline.iteration_s,
        component_s=component,
        ratio=predicted / run.reported_s,
    )


def summarize(predictions: Sequence[Prediction]) -> dict[str, Any]:
    """Median ratio, and the worst one (farthest from 1 in either direction, i.e. largest |log ratio|)."""
    ratios = [p.ratio for p in predictions]
    worst = max(predictions, key=lambda p: abs(math.log(p.ratio)))
    return {
        "num_runs": len(ratios),
        "median_ratio": round(statistics.median(ratios), 2),
        "worst_ratio": round(worst.ratio, 2),
        "worst_run": worst.key,
        "median_abs_error": round(statistics.median(abs(r - 1) for r in ratios), 3),
    }


def summary_line(summary: dict[str, Any], label: str) -> str:
    """One must-show line of the doc."""
    return (
        f"**{label}: {summary['num_runs']} configurations, median ratio {summary['median_ratio']:.2f}, worst ratio "
        f"{summary['worst_ratio']:.2f} ({summary['worst_run']})**"
    )


def markdown(runs: Sequence[PublishedRun], before: Sequence[Prediction], now: Sequence[Prediction]) -> str:
    """The doc's results table, its two summary lines and the list of sources and assumptions per row."""
    lines = [
        "| # | key | system | model | GPUs | prompts x group | prompt / response (mean tokens) | mode "
        "| reported s/step | predicted before | ratio before | predicted now | ratio now |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for index, (run, old, new) in enumerate(zip(runs, before, now, strict=True), start=1):
        mode = run.mode if run.algorithm == "grpo" else f"{run.mode}, PPO"
        lines.append(
            f"| {index} | {run.key} | {run.system} | {run.model.name} | {run.num_devices}x {run.device} "
            f"| {run.num_prompts} x {run.group_size} | {run.prompt_tokens} / {run.response_mean_tokens:g} | {mode} "
            f"| {run.reported_s:g} | {old.predicted_s:.1f} | {old.ratio:.2f} | {new.predicted_s:.1f} "
            f"| {new.ratio:.2f} |"
        )
    lines += ["", summary_line(summarize(before), "Before"), "", summary_line(summarize(now), "Now"), ""]
    lines.append("Sources and assumptions, per row:")
    lines.append("")
    for index, run in enumerate(runs, start=1):
        lines.append(f"{index}. `{run.key}`: {run.source}. Assumed: " + "; ".join(run.assumptions) + ".")
    lines += ["", "Per phase, where the source breaks the step down (seconds; predicted now):", ""]
    lines += ["| key | phase | reported | predicted | ratio |", "| --- | --- | ---: | ---: | ---: |"]
    for run, prediction in zip(runs, now, strict=True):
        for phase, reported in run.reported_phases_s:
            predicted = phase_seconds(prediction, phase)
            lines.append(
                f"| {run.key} | {phase} | {reported:.2f} | {predicted:.2f} | {predicted / reported:.2f} |"
            )
    return "\n".join(lines)


def phase_seconds(prediction: Prediction, phase: str) -> float:
    """The predicted seconds of a reported phase: the sum of its components' (and movements') seconds."""
    return sum(prediction.component_s.get(name, 0.0) for name in PHASES[phase])


def report(runs: Sequence[PublishedRun] = RUNS) -> dict[str, Any]:
    """Every row (its facts, assumptions and both predictions) and the summaries, JSON-ready."""
    before = [predict(run, model_terms=False) for run in runs]
    now = [predict(run) for run in runs]
    rows = []
    for run, old, new in zip(runs, before, now, strict=True):
        row = attrs.asdict(run, recurse=True)
        row.update(
            response_median_tokens=round(workload_of(run).response.median_tokens, 1),
            predicted_s_before=round(old.predicted_s, 1),
            ratio_before=round(old.ratio, 2),
            predicted_s=round(new.predicted_s, 1),
            ratio=round(new.ratio, 2),
            simulated_iteration_s=round(new.iteration_s, 1),
            component_s=new.component_s,
        )
        rows.append(row)
    return {
        "command": "python benchmarks/analytic_validation.py --json docs/analytic_validation.json",
        "seed": SEED,
        "summary_before": summarize(before),
        "summary": summarize(now),
        "runs": rows,
        "markdown": markdown(runs, before, now),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, default=None, help="write the rows and summaries to this file")
    parser.add_argument(
        "--markdown", action="store_true", help="print the doc's table, summaries and sources"
    )
    args = parser.parse_args()
    result = report()
    if args.markdown:
        print(result["markdown"])
    else:
        for row in result["runs"]:
            print(
                f"{row['key']:<30} reported {row['reported_s']:>6.1f} s  before {row['predicted_s_before']:>6.1f} s "
                f"({row['ratio_before']:.2f})  now {row['predicted_s']:>6.1f} s ({row['ratio']:.2f})"
            )
        print(summary_line(result["summary_before"], "Before"))
        print(summary_line(result["summary"], "Now"))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
