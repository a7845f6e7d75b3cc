"""The assumptions of the analytic LLM model: model shape, batch, response lengths, parallel sizes, efficiencies.

:class:`LLMWorkload` is the one value :func:`rlinf.analytic.synthesis.synthesize` turns into a trace. Every field has a
default that is typical of RL post-training of a dense LLM with vLLM-style rollout and Megatron-style training;
each is written into the synthesized trace's provenance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from rlinf.core.errors import ConfigError, build_from_mapping, number, positive, require

ALGORITHMS = ("grpo", "ppo")
NUM_STORED_LENGTHS = 4096
"""Response lengths a synthesized trace keeps as its empirical distribution, by default."""
OPS = ("generate", "reward", "infer", "train")
"""The ops the analytic model costs: rollout generation, reward, inference forwards, training."""


def _fraction(field: str, value: float) -> None:
    require(0 < value <= 1, field, value, "must be in (0, 1]", f"set {field} to a utilization such as 0.5")


def _at_least_one(field: str, value: int) -> None:
    require(
        isinstance(value, int) and value >= 1,
        field,
        value,
        "must be an integer >= 1",
        f"set {field} to 1 or more",
    )


@attrs.frozen(kw_only=True)
class ModelSpec:
    """Shape of a dense decoder-only transformer."""

    name: str
    num_params: float
    """Parameters, embeddings included."""
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    """Key/value heads (grouped-query attention); decides the KV-cache size."""
    head_dim: int | None = None
    """Dimension of one attention head; ``None`` means ``hidden_size / num_attention_heads`` (most models; Qwen3
    and Gemma set it apart, e.g. Qwen3-32B: 64 heads of 128 on a 5120 hidden size)."""

    def __attrs_post_init__(self) -> None:
        positive("model.num_params", self.num_params)
        for field in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads"):
            _at_least_one(f"model.{field}", getattr(self, field))
        if self.head_dim is not None:
            _at_least_one("model.head_dim", self.head_dim)
        require(
            self.num_kv_heads <= self.num_attention_heads,
            "model.num_kv_heads",
            self.num_kv_heads,
            f"exceeds num_attention_heads={self.num_attention_heads}",
            "use at most one KV head per attention head",
        )

    @property
    def attention_head_dim(self) -> float:
        """``head_dim``, else ``hidden_size / num_attention_heads``."""
        return (
            float(self.head_dim) if self.head_dim is not None else self.hidden_size / self.num_attention_heads
        )

    @property
    def attention_dim(self) -> float:
        """Width of the attention's queries (and outputs): heads x head dimension."""
        return self.num_attention_heads * self.attention_head_dim


# Public model cards (Qwen2.5 family, the base of DeepSeek-R1-Distill-Qwen used in RL math-reasoning runs).
MODEL_PRESETS: dict[str, ModelSpec] = {
    "1.5b": ModelSpec(
        name="1.5b",
        num_params=1.78e9,
        num_layers=28,
        hidden_size=1536,
        num_attention_heads=12,
        num_kv_heads=2,
    ),
    "7b": ModelSpec(
        name="7b", num_params=7.62e9, num_layers=28, hidden_size=3584, num_attention_heads=28, num_kv_heads=4
    ),
    "32b": ModelSpec(
        name="32b", num_params=32.8e9, num_layers=64, hidden_size=5120, num_attention_heads=40, num_kv_heads=8
    ),
}


def model_preset(name: str) -> ModelSpec:
    """The preset called ``name``; raises listing the valid names."""
    key = str(name).lower()
    if key not in MODEL_PRESETS:
        raise ConfigError(
            "model", name, "unknown model preset", f"use one of {sorted(MODEL_PRESETS)} or give --params"
        )
    return MODEL_PRESETS[key]


@attrs.frozen(kw_only=True)
class ResponseLengths:
    """Generated tokens per response: lognormal with the given median and sigma, clipped to ``[1, max_tokens]``."""

    median_tokens: float
    sigma: float
    """Standard deviation of the log-length; 0.6 puts the 99th percentile at about 4x the median."""
    max_tokens: int
    """The generation limit (``max_new_tokens``); longer responses are truncated."""

    def __attrs_post_init__(self) -> None:
        positive("response.median_tokens", self.median_tokens)
        require(self.sigma >= 0, "response.sigma", self.sigma, "must be >= 0", "use e.g. 0.6")
        _at_least_one("response.max_tokens", self.max_tokens)
        require(
            self.median_tokens <= self.max_tokens,
            "response.median_tokens",
            self.median_tokens,
            f"exceeds max_tokens={self.max_tokens}",
            "raise max_tokens or lower the median",
        )

    def draw(self, num_responses: int, rng: np.random.Generator) -> np.ndarray:
        """``num_responses`` whole-token lengths drawn with ``rng``."""
        raw = rng.lognormal(mean=math.log(self.median_tokens), sigma=self.sigma, size=num_responses)
        return np.clip(np.rint(raw), 1, self.max_tokens)


@attrs.frozen(kw_only=True)
class LLMWorkload:
    """Everything the analytic model assumes about one RL iteration of a dense LLM."""

    model: ModelSpec
    num_prompts: int
    group_size: int
    """Responses per prompt."""
    prompt_tokens: int = 512
    response: ResponseLengths
    algorithm: str = "grpo"
    """``grpo`` (no critic) or ``ppo`` (a critic trained like the actor; inference also computes values)."""
    reference_model: bool = True
    """Inference runs a frozen reference model's forward (for a KL term) besides the old policy's; off for runs
    without a KL term (e.g. ``kl_beta: 0``), whose inference holds and runs the old policy only."""
    rollout_model_parallel: int = 1
    inference_model_parallel: int = 1
    actor_model_parallel: int = 2
    """Also the critic's, for PPO."""
    pipeline_parallel: int = 1
    """Pipeline stages of a training (actor, critic) or inference replica (Megatron
    ``pipeline_model_parallel_size``): its model-parallel size is tensor-parallel x pipeline, so
    ``actor_model_parallel`` and ``inference_model_parallel`` must be multiples of it; its data-parallel size is its
    devices over the model-parallel size. Tensor-parallel all-reduces run among ``model_parallel / pipeline``
    ranks, within a stage; with ``count_pipeline_bubbles`` the schedule's bubble and the stage-to-stage transfers
    are priced too. The rollout has no pipeline stages (its model-parallel size is all tensor parallel, as in
    vLLM)."""
    prefill_mfu: float = 0.5
    """Model FLOPs utilization of prefill and inference forward passes (also the decode compute ceiling)."""
    train_mfu: float = 0.35
    """Model FLOPs utilization of training (forward + backward)."""
    decode_mbu: float = 0.7
    """Memory-bandwidth utilization of decode steps."""
    kv_cache_fraction: float = 0.4
    """Share of each rollout device's memory reserved for the KV-cache pool."""
    max_concurrent_sequences: int = 256
    """The inference engine's cap on sequences in flight per replica (vLLM ``max_num_seqs``)."""
    weight_bytes_per_param: float = 2.0
    """bf16 weights: rollout, inference, weight sync."""
    train_state_bytes_per_param: float = 16.0
    """Mixed-precision Adam: bf16 weights and grads, fp32 master weights and two moments."""
    optimizer_state_bytes_per_param: float = 12.0
    """The part of ``train_state_bytes_per_param`` that is optimizer state (fp32 master weights and two Adam
    moments), which ``optimizer_shards`` splits."""
    optimizer_shards: int = 1
    """Data-parallel ranks over which a training replica's optimizer state is sharded (ZeRO-1, Megatron's
    distributed optimizer, FSDP): a replica holds ``optimizer_state_bytes_per_param / optimizer_shards`` of it per
    parameter. 1 (the default) keeps all of it on every replica. FSDP also shards weights and gradients; the model
    keeps those whole per replica (an upper bound on memory)."""
    kv_bytes_per_element: float = 2.0
    activation_recompute: bool = False
    """Training recomputes each layer's forward during the backward pass (full activation checkpointing, e.g.
    Megatron ``recompute_granularity=full``, Hugging Face ``gradient_checkpointing``): four passes of the
    forward's FLOPs (8*N per token) instead of three (6*N)."""
    count_attention_flops: bool = False
    """Add causal self-attention's FLOPs (scores and weighted values) to prefill, inference forwards and training:
    ``2 * num_layers * attention_dim * context`` per token and forward pass, which the ``2*N`` per token of the
    weights leaves out (a few percent at 1-4k tokens for 7-32B models, more for long sequences). Off by default,
    so that traces synthesized before it existed re-synthesize unchanged."""
    count_tensor_parallel_comm: bool = False
    """Price tensor parallelism's all-reduces (:func:`rlinf.analytic.roofline.allreduce_seconds`): every layer of a forward
    pass ends its attention and its MLP with an all-reduce of the tokens' activations (``hidden_size`` bf16 values
    per token) among a replica's tensor-parallel ranks; training's backward pass adds two per layer and its
    recomputation two more. Decode pays them once per step, for the sequences in flight. They run over the
    cluster's intra-node link (inter-node when the tensor-parallel ranks span nodes) after the link latency of
    :data:`rlinf.core.costs.LINK_LATENCY_S`, and are not overlapped with compute (vLLM's decode cannot; Megatron only
    with ``tp_comm_overlap``). Off by default, so that traces synthesized before it existed re-synthesize
    unchanged."""
    mesh_link_bytes_per_s: float | None = None
    """Where a node's devices form a point-to-point mesh (AMD Infinity Fabric) rather than hang off a switch: the
    bandwidth of one peer link. An all-reduce among ``t`` devices then gets ``t - 1`` such links, at most the
    cluster's intra-node link. ``None``: a switch (NVLink through NVSwitch) gives any peer the intra-node rate."""
    count_pipeline_bubbles: bool = False
    """Price pipeline parallelism's schedule (:class:`rlinf.analytic.pipeline.PipelineSchedule`): a replica of
    ``pipeline_parallel`` stages runs each optimizer step's micro-batches of ``train_micro_batch_tokens`` tokens
    through its stages one after another (1F1B), so its compute takes ``(m + p - 1) / m`` times the split share
    (the bubble: the stages filling and draining), and each micro-batch's activations (and in training, their
    gradients) cross every stage boundary over the cluster's links, not overlapped. Off by default, so that traces
    synthesized before it existed re-synthesize unchanged."""
    train_micro_batch_tokens: int = 4096
    """Tokens of one training (and log-prob forward) micro-batch of a replica (sequence packing up to this many,
    e.g. NeMo RL's ``train_mb_tokens``): with ``count_pipeline_bubbles``, how many micro-batches fill a
    pipeline."""
    optimizer_steps: int = 1
    """Optimizer steps per iteration: the batch over the training global batch (PPO/GRPO mini-batches, e.g. veRL's
    ``train_batch_size / ppo_mini_batch_size``, NeMo RL's ``num_prompts x generations / train_global_batch_size``).
    Each pays the fixed per-step cost (``train_fixed_tokens_per_step``) and, with pipeline stages, its bubble."""
    train_fixed_tokens_per_step: float = 0.0
    """The training framework's fixed cost of an optimizer step (optimizer update, exposed gradient reduction and
    parameter gathers, data loading), in tokens' worth of training per device: a step of ``t`` tokens per device
    takes ``(t + train_fixed_tokens_per_step) / t`` times its tokens' time, i.e. the MFU is
    ``train_mfu * t / (t + t0)`` (:mod:`rlinf.analytic.training_costs`, from a published strong-scaling
    measurement). 0 (the default): the MFU whatever the tokens per device."""
    forwards_at_train_mfu: bool = False
    """The inference component's forwards (old-policy and reference log-probs, values) run in the training
    framework (Megatron, FSDP: NeMo RL's ``get_logprobs``, veRL's ``compute_log_prob``) and are priced at
    ``train_mfu``, the framework's, instead of ``prefill_mfu`` (the inference engine's prefill). Off by default, so
    that traces synthesized before it existed re-synthesize unchanged."""
    reshard_bytes_per_device_per_s: float | None = None
    """Where the rollout shares the actor's devices (collocated), the rate at which the weights are resharded
    into the engine in place, in bytes of weights per rollout device per second (:mod:`rlinf.analytic.weight_sync`,
    from a published resharding time): the actor's sync to the rollout then takes ``weight bytes /
    rollout_model_parallel / rate`` beyond its bytes. ``None`` (the default): the bytes at memory bandwidth alone."""
    free_kv_cache_on_offload: bool = False
    """A rollout that yields its devices frees its KV-cache pool and reallocates it when it returns (vLLM's sleep
    mode, veRL's ``free_cache_engine``) instead of copying it to host memory: its onload and offload move its
    weights only. The trace then carries one onload and one offload sample of the rollout that say so; every other
    movement is still costed from the cluster's links."""
    kv_preemption: bool = False
    """Schedule decoding as vLLM and SGLang do (:func:`rlinf.analytic.decode.schedule_decode`): admit waiting sequences
    while the KV-cache pool has room for the tokens they hold, preempt the newest when it fills up (they recompute
    their tokens when readmitted), at most ``max_concurrent_sequences`` in flight. Off (the default, so that traces
    synthesized before it existed re-synthesize unchanged): at most ``pool // (prompt + mean response)`` sequences
    run at once and none is preempted."""
    decode_step_overhead_s: float = 0.0
    """Seconds the devices wait on the inference engine in every decode step (scheduling, input preparation,
    sampling and output processing on the CPU; kernel launches without CUDA graphs), on top of the roofline step.
    No datasheet gives it: 0 (the default) prices the roofline alone; a profile or a calibration can set it."""
    decode_step_overhead_per_sequence_s: float = 0.0
    """Seconds the engine adds to a decode step for each sequence in flight (scheduling, sampling and output
    processing that grow with the batch), on top of ``decode_step_overhead_s``. 0 (the default) prices the fixed
    cost alone; :mod:`rlinf.analytic.engine_costs` reads it from latencies measured at several batch sizes."""
    reward_seconds_per_sample: float = 0.002
    """CPU time of the rule-based reward (answer extraction and comparison) per response."""
    op_overhead_s: float = 0.02
    """Fixed cost of launching one op (scheduling, data loading, collective setup)."""
    op_overheads_s: Mapping[str, float] = attrs.field(factory=dict, hash=False)
    """Per-op fixed costs (keys from :data:`OPS`) that replace ``op_overhead_s`` for the ops they name; a
    calibrated workload (:mod:`rlinf.analytic.calibration`) sets all four."""
    num_stored_lengths: int = NUM_STORED_LENGTHS
    """Response lengths kept in the trace as its empirical distribution."""

    def __attrs_post_init__(self) -> None:
        _at_least_one("num_prompts", self.num_prompts)
        _at_least_one("group_size", self.group_size)
        _at_least_one("prompt_tokens", self.prompt_tokens)
        require(
            self.algorithm in ALGORITHMS,
            "algorithm",
            self.algorithm,
            "unknown algorithm",
            f"use one of {list(ALGORITHMS)}",
        )
        for field in (
            "rollout_model_parallel",
            "inference_model_parallel",
            "actor_model_parallel",
            "pipeline_parallel",
            "optimizer_shards",
            "max_concurrent_sequences",
            "num_stored_lengths",
            "train_micro_batch_tokens",
            "optimizer_steps",
        ):
            _at_least_one(field, getattr(self, field))
        for field in ("prefill_mfu", "train_mfu", "decode_mbu"):
            _fraction(field, getattr(self, field))
        require(
            0 < self.kv_cache_fraction < 1,
            "kv_cache_fraction",
            self.kv_cache_fraction,
            "must be in (0, 1)",
            "use e.g. 0.4",
        )
        for field in ("weight_bytes_per_param", "train_state_bytes_per_param", "kv_bytes_per_element"):
            positive(field, getattr(self, field))
        if self.mesh_link_bytes_per_s is not None:
            positive("mesh_link_bytes_per_s", self.mesh_link_bytes_per_s)
        if self.reshard_bytes_per_device_per_s is not None:
            positive("reshard_bytes_per_device_per_s", self.reshard_bytes_per_device_per_s)
        for field in ("inference_model_parallel", "actor_model_parallel"):
            require(
                getattr(self, field) % self.pipeline_parallel == 0,
                field,
                getattr(self, field),
                f"is not a multiple of pipeline_parallel={self.pipeline_parallel}",
                f"set {field} to tensor-parallel x pipeline stages",
            )
        number("optimizer_state_bytes_per_param", self.optimizer_state_bytes_per_param)
        require(
            0 <= self.optimizer_state_bytes_per_param <= self.train_state_bytes_per_param,
            "optimizer_state_bytes_per_param",
            self.optimizer_state_bytes_per_param,
            f"must lie in [0, train_state_bytes_per_param={self.train_state_bytes_per_param:g}]",
            "use e.g. 12 (fp32 master weights and two Adam moments)",
        )
        for field in (
            "reward_seconds_per_sample",
            "op_overhead_s",
            "decode_step_overhead_s",
            "decode_step_overhead_per_sequence_s",
            "train_fixed_tokens_per_step",
        ):
            number(field, getattr(self, field))
            require(
                getattr(self, field) >= 0,
                field,
                getattr(self, field),
                "must be >= 0",
                f"set {field} to 0 or more",
            )

        for field in (
            "activation_recompute",
            "count_attention_flops",
            "count_tensor_parallel_comm",
            "count_pipeline_bubbles",
            "forwards_at_train_mfu",
            "free_kv_cache_on_offload",
            "kv_preemption",
            "reference_model",
        ):
            require(
                isinstance(getattr(self, field), bool),
                field,
                getattr(self, field),
                "must be true or false",
                f"set {field} to true or false",
            )
        for op, seconds in self.op_overheads_s.items():
            require(op in OPS, "op_overheads_s", op, "unknown op", f"use keys from {list(OPS)}")
            number(f"op_overheads_s.{op}", seconds)
            require(seconds >= 0, f"op_overheads_s.{op}", seconds, "must be >= 0", "use 0 or more seconds")

    def overhead_s(self, op: str) -> float:
        """Fixed cost of one ``op``: its entry in ``op_overheads_s``, else ``op_overhead_s``."""
        return float(self.op_overheads_s.get(op, self.op_overhead_s))

    @property
    def train_state_bytes_per_replica_param(self) -> float:
        """Training state a replica holds per parameter: weights and gradients whole, optimizer state sharded."""
        optimizer = self.optimizer_state_bytes_per_param
        return self.train_state_bytes_per_param - optimizer + optimizer / self.optimizer_shards

    @property
    def batch_size(self) -> int:
        """Responses per iteration: prompts x group size."""
        return self.num_prompts * self.group_size

    @property
    def num_reference_forwards(self) -> int:
        """Forward passes of the inference component per sample: old policy, reference (unless
        ``reference_model`` is off) and, for PPO, the critic's values."""
        return 1 + int(self.reference_model) + int(self.algorithm == "ppo")


def workload_from_dict(data: Any, source: str = "workload") -> LLMWorkload:
    """Rebuild a workload from its ``attrs.asdict`` form (as recorded in a synthesized trace's provenance)."""
    require(
        isinstance(data, Mapping),
        source,
        type(data).__name__,
        "must be a mapping",
        "pass the provenance.workload of a trace made by rlinf trace synth",
    )
    fields = dict(data)
    fields["model"] = build_from_mapping(ModelSpec, fields.get("model"), f"{source}.model")
    fields["response"] = build_from_mapping(ResponseLengths, fields.get("response"), f"{source}.response")
    return build_from_mapping(LLMWorkload, fields, source)
