"""The generated tables of docs/analytic_validation.md: rows, summaries, engine costs, held-out fit, sensitivity.

The model's decode step is also set against published steps it was not read from (:func:`step_checks`):
``rlinf/analytic/engine_costs.py`` reads vLLM V1's fixed and per-sequence costs from the short-context rows (128
cached tokens) of vLLM pull request #53060's pure-decode table; its rows at 4K to 40K cached tokens per sequence
(where the KV cache is most of the bytes a step reads, as in a long chain-of-thought rollout) are priced as the
model prices a decode step and, in a second column, with the bytes at the GPU's datasheet bandwidth instead of the
model's 70% of it. Nothing is fitted."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import attrs
from analytic_validation_model import ABLATION, NOW, PREVIOUS, SENSITIVITY, Prediction, sigma_of
from analytic_validation_runs import ENGINES, PHASES, PublishedRun, step_cost_of

from rlinf.analytic import roofline
from rlinf.analytic.engine_costs import (
    ENGINE_STEP_COSTS,
    PURE_DECODE_OUTPUT_TOKENS,
    QWEN3_17B_KV_BYTES,
    QWEN25_05B_KV_BYTES,
    engine_step_cost,
)
from rlinf.analytic.llm_workload import LLMWorkload


def summarize(runs: Sequence[PublishedRun], ratios: Sequence[float]) -> dict[str, Any]:
    """Median ratio, and the worst one (farthest from 1 in either direction, i.e. largest |log ratio|)."""
    worst = max(range(len(ratios)), key=lambda i: abs(math.log(ratios[i])))
    return {
        "num_runs": len(ratios),
        "median_ratio": round(statistics.median(ratios), 2),
        "worst_ratio": round(ratios[worst], 2),
        "worst_run": runs[worst].key,
        "median_abs_error": round(statistics.median(abs(r - 1) for r in ratios), 3),
        "median_ratio_exact": round(statistics.median(ratios), 4),
        "worst_ratio_exact": round(ratios[worst], 4),
    }


def summary_line(summary: dict[str, Any], label: str) -> str:
    """One must-show line of the doc."""
    return (
        f"**{label}: {summary['num_runs']} runs, median ratio {summary['median_ratio']:.2f}, worst ratio "
        f"{summary['worst_ratio']:.2f} ({summary['worst_run']})**"
    )


def spread_text(run: PublishedRun) -> str:
    """The row's sigma and where it came from."""
    sigma = sigma_of(run, NOW)
    return f"{sigma:.2f} ({run.spread_source})" if run.spread_source else f"{sigma:.2f} (assumed)"


def results_table(runs: Sequence[PublishedRun], previous: Sequence[Prediction], now: Sequence[Prediction],
                  held_out: dict[str, float]) -> list[str]:  # fmt: skip
    """The doc's main table: the model now with nothing fitted, the previous page, the held-out fit."""
    lines = [
        "| # | key | system | model | GPUs | prompts x group | prompt / response (mean tokens) | sigma (from) | mode "
        "| reported s/step | now | ratio | previous page | ratio | fitted, held out | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for index, (run, old, new) in enumerate(zip(runs, previous, now, strict=True), start=1):
        mode = run.mode if run.algorithm == "grpo" else f"{run.mode}, PPO"
        fitted = held_out.get(run.key)
        tail = (
            "| fitted on it | - |" if fitted is None else f"| {fitted:.1f} | {fitted / run.reported_s:.2f} |"
        )
        flag = " (engine mode unpriced)" if run.unpriced_engine else ""
        lines.append(
            f"| {index} | {run.key}{flag} | {run.system} | {run.model.name} | {run.num_devices}x {run.device} "
            f"| {run.num_prompts} x {run.group_size} | {run.prompt_tokens} / {run.response_mean_tokens:g} "
            f"| {spread_text(run)} | {mode} | {run.reported_s:g} | {new.predicted_s:.1f} | {new.ratio:.2f} "
            f"| {old.predicted_s:.1f} | {old.ratio:.2f} {tail}"
        )
    return lines


def ablation_table(runs: Sequence[PublishedRun], ratios: dict[str, list[float]]) -> list[str]:
    """Median and worst ratio (all runs, long chain-of-thought runs) as each change is added."""
    long_cot = [i for i, run in enumerate(runs) if run.long_cot]
    lines = [
        "| model | median ratio | worst ratio | worst run | long-CoT median | long-CoT ratios |",
        "| --- | ---: | ---: | --- | ---: | --- |",
    ]
    for variant in ABLATION:
        summary = summarize(runs, ratios[variant.key])
        cot = [ratios[variant.key][i] for i in long_cot]
        lines.append(
            f"| {variant.label} | {summary['median_ratio']:.2f} | {summary['worst_ratio']:.2f} "
            f"| {summary['worst_run']} | {statistics.median(cot):.2f} | {', '.join(f'{r:.2f}' for r in cot)} |"
        )
    return lines


def engine_cost_table() -> list[str]:
    """Every published per-step cost: its measurements, the lower bound used, the line fit's check, the cost per
    sequence in flight and where it comes from."""
    lines = [
        "| key | engine | GPU | published step (ms; batch 1 unless noted) | fixed per step used (ms) "
        "| line intercept (ms) | line's bandwidth (TB/s) | per sequence in flight (us) | per sequence from |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for cost in ENGINE_STEP_COSTS.values():
        steps = ", ".join(
            f"{m.model}{'' if m.batch == 1 else f' x{m.batch}'} {1000 * m.step_s:.2f}"
            for m in cost.measurements
        )
        lines.append(
            f"| {cost.key} | {cost.engine} | {cost.device} | {steps} | {1000 * cost.fixed_step_s:.2f} "
            f"| {1000 * cost.line_intercept_s:.2f} | {cost.effective_bandwidth_bytes_per_s / 1e12:.2f} "
            f"| {1e6 * cost.per_sequence_s:.1f} | {cost.per_sequence_source} |"
        )
    return lines


def engine_map_table() -> list[str]:
    """Each run engine, the published cost that prices it, and how close that measurement is."""
    lines = [
        "| engine of the runs | priced by | ms per step | us per sequence in flight | how close |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for key, engine in ENGINES.items():
        fixed, per_sequence = step_cost_of(key)
        lines.append(
            f"| `{key}` | `{engine.step_cost}` | {1000 * fixed:.2f} | {1e6 * per_sequence:.1f} | {engine.match} |"
        )
    return lines


def step_check_table(checks: Sequence[StepCheck]) -> list[str]:
    """The model's decode step against published steps it was not read from (longer contexts)."""
    lines = [
        "| model | batch | cached tokens per sequence | published (ms) | model (ms) | ratio | model at the datasheet "
        "bandwidth (ms) | ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in checks:
        lines.append(
            f"| {c.model} | {c.batch} | {c.cache_len:,} | {1000 * c.published_s:.3f} | {1000 * c.model_s:.3f} "
            f"| {c.model_s / c.published_s:.2f} | {1000 * c.datasheet_s:.3f} | {c.datasheet_s / c.published_s:.2f} |"
        )
    return lines


def sensitivity_table(runs: Sequence[PublishedRun], now: Sequence[Prediction],
                      moved: dict[str, list[float | None]]) -> list[str]:  # fmt: skip
    """Per run, its ratio now and under each move of an input a user would not know (``n/a``: no cut lognormal
    of that spread has the run's mean under its limit)."""
    heads = " | ".join(f"{name} {move}" for name, move, _ in SENSITIVITY)
    lines = [f"| key | now | {heads} |", "| --- | ---: |" + " ---: |" * len(SENSITIVITY)]
    for run, prediction in zip(runs, now, strict=True):
        values = " | ".join("n/a" if ratio is None else f"{ratio:.2f}" for ratio in moved[run.key])
        lines.append(f"| {run.key} | {prediction.ratio:.2f} | {values} |")
    return lines


def phase_seconds(prediction: Prediction, phase: str) -> float:
    """The predicted seconds of a reported phase: the sum of its components' (and movements') seconds."""
    return sum(prediction.component_s.get(name, 0.0) for name in PHASES[phase])


def phase_table(runs: Sequence[PublishedRun], previous: Sequence[Prediction],
                now: Sequence[Prediction]) -> list[str]:  # fmt: skip
    """Per reported phase: reported, the previous page, now."""
    lines = [
        "| key | phase | reported | previous page | ratio | now | ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run, old, new in zip(runs, previous, now, strict=True):
        for phase, reported in run.reported_phases_s:
            before, after = phase_seconds(old, phase), phase_seconds(new, phase)
            lines.append(
                f"| {run.key} | {phase} | {reported:.2f} | {before:.2f} | {before / reported:.2f} | {after:.2f} "
                f"| {after / reported:.2f} |"
            )
    return lines


def straggler_table(runs: Sequence[PublishedRun], now: Sequence[Prediction]) -> list[str]:
    """Per long chain-of-thought run, the straggler tail of its predicted generation."""
    lines = [
        "| key | generation (s) | tail (s) | share of generation | share of the step |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for run, prediction in zip(runs, now, strict=True):
        if run.long_cot:
            generation = phase_seconds(prediction, "generation")
            lines.append(
                f"| {run.key} | {generation:.1f} | {prediction.straggler_s:.1f} | {prediction.tail_share:.2f} "
                f"| {prediction.straggler_s / prediction.predicted_s:.2f} |"
            )
    return lines


def sources(runs: Sequence[PublishedRun]) -> list[str]:
    """Every row's source and assumptions."""
    lines = []
    for index, run in enumerate(runs, start=1):
        lines.append(f"{index}. `{run.key}`: {run.source}. Assumed: " + "; ".join(run.assumptions) + ".")
    return lines


__all__ = [
    "NOW",
    "PREVIOUS",
    "ablation_table",
    "engine_cost_table",
    "engine_map_table",
    "phase_table",
    "results_table",
    "sensitivity_table",
    "sources",
    "straggler_table",
    "summarize",
    "summary_line",
]


# ------------------------------------------------------------- the decode step against published steps
H100_PCIE_PEAK_FLOPS = 756e12
"""NVIDIA H100 datasheet: H100 PCIe, 1,513 bf16 TFLOPS with sparsity, half of it dense."""

_FIELDS = attrs.fields_dict(LLMWorkload)
DECODE_MBU = float(_FIELDS["decode_mbu"].default)
PREFILL_MFU = float(_FIELDS["prefill_mfu"].default)


@attrs.frozen(kw_only=True)
class PublishedStep:
    """One row of the table: a model, a batch, the tokens cached per sequence, the step's published seconds."""

    model: str
    num_params: float
    kv_bytes_per_token: float
    batch: int
    cache_len: int
    published_s: float


@attrs.frozen(kw_only=True)
class StepCheck:
    """One published step beside the model's price of it."""

    model: str
    batch: int
    cache_len: int
    published_s: float
    model_s: float
    """The step as the model prices it."""
    datasheet_s: float
    """The same with the bytes read at the datasheet bandwidth."""


def _steps(
    model: str, num_params: float, kv: float, rows: Sequence[tuple[int, int, float]]
) -> list[PublishedStep]:
    return [
        PublishedStep(model=model, num_params=num_params, kv_bytes_per_token=kv, batch=batch, cache_len=cache,
                      published_s=ms / 1000.0)
        for batch, cache, ms in rows
    ]  # fmt: skip


LONG_CONTEXT_STEPS = (
    *_steps("Qwen2.5-0.5B", 0.49e9, QWEN25_05B_KV_BYTES, (
        (1, 4096, 1.689), (1, 16384, 1.732), (1, 32640, 1.868),
        (8, 4096, 1.854), (8, 16384, 2.528), (8, 32640, 3.383),
        (32, 4096, 2.885), (32, 16384, 6.074), (32, 32640, 10.399),
    )),
    *_steps("Qwen3-1.7B", 1.7e9, QWEN3_17B_KV_BYTES, ((1, 4096, 3.446), (1, 16384, 4.193), (1, 40832, 5.642))),
)  # fmt: skip
"""The FA3 column's rows above 128 cached tokens that the stored copy of the pull request shows (its Qwen3-1.7B
rows at batch 8 and 32 and its Qwen3-8B rows were not readable), in ms as published."""


def step_checks(engine: str = "vllm-v1") -> list[StepCheck]:
    """Every long-context row priced by the model with ``engine``'s published costs."""
    cost = engine_step_cost(engine)
    checks = []
    for step in LONG_CONTEXT_STEPS:
        context = step.batch * (step.cache_len + PURE_DECODE_OUTPUT_TOKENS / 2)
        memory_s, compute_s = roofline.decode_step_costs(
            [step.batch],
            [context],
            weight_bytes=2.0 * step.num_params,
            kv_bytes_per_token=step.kv_bytes_per_token,
            num_params=step.num_params,
            num_devices=1,
            memory_bandwidth_bytes_per_s=cost.device_bandwidth_bytes_per_s,
            peak_flops=H100_PCIE_PEAK_FLOPS,
        )
        engine_s = cost.fixed_step_s + cost.per_sequence_s * step.batch
        checks.append(
            StepCheck(
                model=step.model,
                batch=step.batch,
                cache_len=step.cache_len,
                published_s=step.published_s,
                model_s=float(max(memory_s[0] / DECODE_MBU, compute_s[0] / PREFILL_MFU)) + engine_s,
                datasheet_s=float(max(memory_s[0], compute_s[0] / PREFILL_MFU)) + engine_s,
            )
        )
    return checks
