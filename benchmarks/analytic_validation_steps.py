"""The analytic model's decode step against published steps it was not read from.

`rlinf/analytic/engine_costs.py` reads vLLM V1's fixed and per-sequence costs from the short-context rows (128
cached tokens) of vLLM pull request #53060's pure-decode table. The same table measured the same engine, GPU and
models at 4K to 40K cached tokens per sequence: there the KV cache is most of the bytes a step reads, which is
what a long chain-of-thought rollout's steps are. Each row here is priced as the model prices a decode step
(:func:`rlinf.analytic.roofline.decode_step_costs` at ``LLMWorkload``'s decode and prefill efficiencies, plus the
engine's fixed and per-sequence costs) and set beside the published step; a second column prices its bytes at the
GPU's datasheet bandwidth instead of the model's 70% of it. Nothing is fitted.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from rlinf.analytic import roofline
from rlinf.analytic.engine_costs import (
    PURE_DECODE_OUTPUT_TOKENS,
    QWEN3_17B_KV_BYTES,
    QWEN25_05B_KV_BYTES,
    engine_step_cost,
)
from rlinf.analytic.llm_workload import LLMWorkload

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
