"""The inference engine's fixed cost of one decode step, from published step latencies: one table, with provenance.

A decode step of a small batch costs the read of the weights (and of the KV cache) plus work that no byte explains:
scheduling the batch, preparing its inputs, sampling, processing outputs, launching kernels or a CUDA graph. No
datasheet gives the second part, but an engine's published batch-1 latencies do: a step can be no faster than its
bytes at the GPU's datasheet bandwidth, so what the fastest published step has left beyond that is time the engine
spends whatever the model (:meth:`EngineStepCost.fixed_step_s`, a lower bound of the fixed cost). A straight line
through the latencies of several model sizes gives a second reading (its intercept,
:meth:`EngineStepCost.line_intercept_s`), reported beside it as a check.

A step of a large batch also does work per sequence in flight (scheduling it, preparing its inputs, sampling and
processing its token) that no byte explains either. A table that measures one model at several batch sizes, at a
context short enough that the KV cache is a small part of the bytes, gives it as the slope of the unexplained time
over the batch (:attr:`EngineStepCost.per_sequence_s`). A table of batch-1 steps only borrows that slope from the
nearest entry that has one (``per_sequence_from``), and says why.

Every entry below is a published table, read as it is; the constants are computed from it, never fitted to the
RL runs the analytic model is validated against (docs/analytic_validation.md). To add a measured value (for
instance rlinf's own rollout backend on an H100), add an :class:`EngineStepCost` whose ``measurements`` are the
measured step latencies of at least two model sizes (or batch sizes), with the command that produced them as
``source``.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from rlinf.core.errors import positive, registry_entry, require

BYTES_PER_PARAM_BF16 = 2.0


@attrs.frozen(kw_only=True)
class StepLatency:
    """One published decode-step latency: a model of ``num_params`` parameters in bf16, ``batch`` sequences."""

    model: str
    num_params: float
    step_s: float
    batch: int = 1
    kv_bytes: float = 0.0
    """KV-cache bytes the step reads (0 for a batch-1 step on a short prompt)."""

    def __attrs_post_init__(self) -> None:
        positive(f"{self.model}.num_params", self.num_params)
        positive(f"{self.model}.step_s", self.step_s)

    @property
    def bytes_read(self) -> float:
        """Weights (bf16) and KV cache read by the step."""
        return BYTES_PER_PARAM_BF16 * self.num_params + self.kv_bytes


def step_seconds_from_speed(tokens_per_s: float, *, input_tokens: int, output_tokens: int) -> float:
    """Seconds per decode step from a speed benchmark that reports ``(input + output tokens) / time`` for one
    request that prefills ``input_tokens`` and generates ``output_tokens`` (the Qwen speed benchmarks' metric)."""
    positive("tokens_per_s", tokens_per_s)
    return (input_tokens + output_tokens) / tokens_per_s / output_tokens


@attrs.frozen(kw_only=True)
class EngineStepCost:
    """One engine version on one GPU, with the published step latencies its fixed cost is read from."""

    key: str
    engine: str
    device: str
    device_bandwidth_bytes_per_s: float
    """The GPU's datasheet memory bandwidth."""
    device_source: str
    """Where that bandwidth was read."""
    source: str
    """Where the latencies were published (document, commit, section) and how they were measured."""
    measurements: tuple[StepLatency, ...]
    per_sequence_from: str = ""
    """Where the table measures batch 1 only: the key of the entry whose batch series gives the cost per sequence
    in flight (empty: none, 0)."""
    per_sequence_note: str = ""
    """Why that entry is the nearest, and which way it likely errs."""

    def __attrs_post_init__(self) -> None:
        require(
            len({(m.bytes_read, m.batch) for m in self.measurements}) >= 2,
            f"{self.key}.measurements",
            len(self.measurements),
            "need step latencies of at least two model sizes (or batches) to separate the fixed cost",
            "add the latency of another model size",
        )

    @property
    def per_sequence_source(self) -> str:
        """Which table the cost per sequence comes from: this one, a borrowed one (and why), or none."""
        if self.measured_per_sequence_s:
            return "measured here"
        if self.per_sequence_from:
            return f"from {self.per_sequence_from}: {self.per_sequence_note}"
        return "none published"

    def unexplained_s(self) -> np.ndarray:
        """Per measurement, its step seconds less its bytes read at the datasheet bandwidth."""
        return np.array(
            [m.step_s - m.bytes_read / self.device_bandwidth_bytes_per_s for m in self.measurements]
        )

    @property
    def per_sequence_s(self) -> float:
        """Seconds per sequence in flight beyond the bytes: :attr:`measured_per_sequence_s`, else the one of
        ``per_sequence_from`` (0 without either)."""
        if self.measured_per_sequence_s or not self.per_sequence_from:
            return self.measured_per_sequence_s
        return engine_step_cost(self.per_sequence_from).measured_per_sequence_s

    @property
    def measured_per_sequence_s(self) -> float:
        """Where the measurements include several batch sizes of one model: the least-squares slope of their
        unexplained time over the batch (0 with batch-1 tables)."""
        slopes = []
        for model in {m.model for m in self.measurements}:
            runs = [m for m in self.measurements if m.model == model]
            if len({m.batch for m in runs}) >= 2:
                unexplained = [m.step_s - m.bytes_read / self.device_bandwidth_bytes_per_s for m in runs]
                slopes.append(float(np.polyfit([m.batch for m in runs], unexplained, 1)[0]))
        return max(0.0, float(np.mean(slopes))) if slopes else 0.0

    @property
    def fixed_step_s(self) -> float:
        """The least time any published step spent beyond reading its bytes at the datasheet bandwidth (and its
        sequences' :attr:`per_sequence_s`): a lower bound of the engine's fixed per-step cost (never negative)."""
        unexplained = self.unexplained_s() - self.per_sequence_s * np.array(
            [m.batch for m in self.measurements]
        )
        return max(0.0, float(unexplained.min()))

    def _line(self) -> tuple[float, float]:
        single = [m for m in self.measurements if m.batch == 1]
        bytes_read = np.array([m.bytes_read for m in single])
        if len(set(bytes_read.tolist())) < 2:  # fewer than two model sizes at batch 1: no line over the bytes
            return math.nan, math.nan
        seconds = np.array([m.step_s for m in single])
        slope, intercept = np.polyfit(bytes_read, seconds, 1)
        return float(intercept), float(slope)

    @property
    def line_intercept_s(self) -> float:
        """The intercept of a least-squares line through the batch-1 steps' (bytes read, seconds): the check on
        :attr:`fixed_step_s` (a curved table puts it above or below)."""
        return self._line()[0]

    @property
    def effective_bandwidth_bytes_per_s(self) -> float:
        """The inverse slope of that line: the bytes per second the engine streams at these batches."""
        return 1.0 / self._line()[1]


def _qwen_speed(model: str, num_params: float, tokens_per_s: float) -> StepLatency:
    """A row of a Qwen speed benchmark: batch 1, input length 1, 2,048 generated tokens, bf16."""
    return StepLatency(
        model=model,
        num_params=num_params,
        step_s=step_seconds_from_speed(tokens_per_s, input_tokens=1, output_tokens=2048),
    )


QWEN3_SPEED = (
    "Qwen3 speed benchmark, SGLang tables, rows 'Input Length 1, BF16, 1 GPU' (docs/source/getting_started/"
    "speed_benchmark.md of github.com/QwenLM/Qwen3 at c7f51a1, 2025-05-20; rendered at "
    "https://qwen.readthedocs.io/en/latest/getting_started/speed_benchmark.html): NVIDIA H20 96GB, SGLang "
    "0.4.6.post1 (CUDA graphs on, its default), batch 1, 2,048 generated tokens, speed = (prompt + generated "
    "tokens) / time; parameter counts from the Qwen3 model cards"
)
QWEN25_SPEED = (
    "Qwen2.5 speed benchmark, vLLM tables, rows 'Input Length 1, BF16' (docs/source/benchmark/speed_benchmark.rst "
    "of github.com/QwenLM/Qwen2.5 at a912d23, 2024-11-06): NVIDIA A100 80GB, vLLM 0.6.3 with "
    "enforce_eager=False (CUDA graphs), batch 1, 2,048 generated tokens, speed = (prompt + generated tokens) / "
    "time; parameter counts from the Qwen2.5 model cards"
)

PURE_DECODE_OUTPUT_TOKENS = 128
QWEN25_05B_KV_BYTES = 2 * 24 * 2 * 64 * 2
"""Qwen2.5-0.5B's KV cache per token in bf16: K and V, 24 layers, 2 KV heads of 64 dims."""
QWEN3_17B_KV_BYTES = 2 * 28 * 8 * 128 * 2
"""Qwen3-1.7B's: K and V, 28 layers, 8 KV heads of 128 dims."""


def _vllm_pure_decode(model: str, num_params: float, kv_bytes_per_token: float, batch: int, tpot_ms: float,
                      cache_len: int = 128) -> StepLatency:  # fmt: skip
    """A row of vLLM PR #53060's FA3 column: ``batch`` sequences of ``cache_len`` cached tokens decode 128 tokens
    each, so a step reads on average ``cache_len + 64`` tokens of KV cache per sequence."""
    return StepLatency(
        model=model,
        num_params=num_params,
        step_s=tpot_ms / 1000.0,
        batch=batch,
        kv_bytes=batch * (cache_len + PURE_DECODE_OUTPUT_TOKENS / 2) * kv_bytes_per_token,
    )


VLLM_PURE_DECODE = (
    "vLLM pull request #53060 ('turboquant decode attetnion optimization', github.com/vllm-project/vllm/pull/53060, "
    "performance comment of 2026-08-20), column 'TPOT FA3' (FlashAttention 3, bf16 weights and KV cache, the "
    "baseline of the comparison), rows at cache length 128: NVIDIA H100 PCIe 80 GB with an 8-core AMD EPYC 7232P, "
    "vLLM's V1 engine at the pull request's base (CUDA graphs, its default), one GPU; pure decode (the prompts were "
    "prefilled by a priming run and enter the measured decode together, with no prefill mixed in), 128 generated "
    "tokens, time per output token of the whole engine (scheduler included); batch 1, 8 and 32 of Qwen2.5-0.5B and "
    "batch 1 of Qwen3-1.7B; parameter counts from the model cards (tied embeddings counted once). The same table's "
    "rows at 4K-40K tokens of cache check the model's decode step (docs/analytic_validation.md)"
)

ENGINE_STEP_COSTS: dict[str, EngineStepCost] = {
    "sglang-0.4": EngineStepCost(
        key="sglang-0.4",
        engine="SGLang 0.4.6.post1, CUDA graphs",
        device="H20",
        device_bandwidth_bytes_per_s=4.0e12,
        device_source="96 GB HBM3 at 4.0 TB/s (willitrunai.com/gpus/h20-96gb; NVIDIA H20 product brief)",
        source=QWEN3_SPEED,
        per_sequence_from="vllm-v1",
        per_sequence_note="no batch series of SGLang was found; vLLM's V1 engine on an H100 is the nearest engine "
        "of its kind (a Python scheduler in front of CUDA graphs), measured with a slow 8-core host CPU",
        measurements=(
            _qwen_speed("Qwen3-0.6B", 0.6e9, 414.17),
            _qwen_speed("Qwen3-1.7B", 1.7e9, 227.80),
            _qwen_speed("Qwen3-4B", 4.0e9, 133.13),
            _qwen_speed("Qwen3-8B", 8.2e9, 81.73),
            _qwen_speed("Qwen3-14B", 14.8e9, 47.10),
            _qwen_speed("Qwen3-32B", 32.8e9, 20.72),
        ),
    ),
    "vllm-0.6": EngineStepCost(
        key="vllm-0.6",
        engine="vLLM 0.6.3, CUDA graphs",
        device="A100 80GB",
        device_bandwidth_bytes_per_s=2.0e12,
        device_source="the A100 preset of rlinf.core.cluster (80 GB, 2.0 TB/s; NVIDIA's A100 80GB SXM datasheet: 2,039 GB/s)",
        source=QWEN25_SPEED,
        per_sequence_from="vllm-v1",
        per_sequence_note="no batch series of vLLM 0.6 was found; its V0 engine schedules and processes each "
        "sequence in Python (vLLM's RFC #6913 measured 3.4 ms of output processing at a batch of 32 on 4 H100, "
        "before 0.6 overlapped it with the next step), so the V1 figure is more likely low than high here",
        measurements=(
            _qwen_speed("Qwen2.5-0.5B", 0.49e9, 311.55),
            _qwen_speed("Qwen2.5-1.5B", 1.54e9, 183.33),
            _qwen_speed("Qwen2.5-3B", 3.09e9, 127.61),
            _qwen_speed("Qwen2.5-7B", 7.61e9, 84.28),
        ),
    ),
    "vllm-v1": EngineStepCost(
        key="vllm-v1",
        engine="vLLM V1 engine (2026), CUDA graphs",
        device="H100 PCIe",
        device_bandwidth_bytes_per_s=2.0e12,
        device_source="NVIDIA H100 datasheet: H100 PCIe 80 GB, 2 TB/s of GPU memory bandwidth",
        source=VLLM_PURE_DECODE,
        measurements=(
            _vllm_pure_decode("Qwen2.5-0.5B", 0.49e9, QWEN25_05B_KV_BYTES, 1, 1.677),
            _vllm_pure_decode("Qwen2.5-0.5B", 0.49e9, QWEN25_05B_KV_BYTES, 8, 1.725),
            _vllm_pure_decode("Qwen2.5-0.5B", 0.49e9, QWEN25_05B_KV_BYTES, 32, 2.148),
            _vllm_pure_decode("Qwen3-1.7B", 1.7e9, QWEN3_17B_KV_BYTES, 1, 3.199),
        ),
    ),
}
"""The engines whose fixed per-step cost has a published source, by key (``rlinf trace synth --engine KEY``)."""


def engine_step_cost(key: str) -> EngineStepCost:
    """The table entry ``key``; raises listing the known keys."""
    return registry_entry(ENGINE_STEP_COSTS, key, "engine", "has no published per-step cost here")
