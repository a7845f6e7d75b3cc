"""Roofline formulas for one replica of a dense decoder-only LLM: the physics behind :mod:`rlinf.analytic.synthesis`.

Every function is pure and takes plain numbers, so each formula can be read and tested on its own:

* prefill and forward passes are compute-bound: ``2 * N * tokens`` FLOPs at ``peak * mfu``;
* training is compute-bound: ``6 * N * tokens`` FLOPs (forward + backward) at ``peak * mfu``, ``8 * N * tokens``
  when the backward pass recomputes the forward (activation checkpointing);
* optionally, causal self-attention adds ``2 * layers * attention_dim * context`` FLOPs per token and forward
  pass (:func:`attention_flops_per_token`), which ``2 * N`` leaves out;
* decode is one step per generated token for every active sequence; a step reads the replica's weights and the
  KV cache of its active sequences from HBM at ``bandwidth * mbu`` and costs ``2 * N * active`` FLOPs; the step
  takes the longer of the two (roofline), which is memory for every batch a KV pool can hold in practice.

A replica spans ``model_parallel`` devices; weights, KV cache and FLOPs are split evenly over them.

Optionally, tensor parallelism costs communication the FLOPs leave out (:func:`allreduce_seconds`): every layer
of a forward pass ends its attention and its MLP with an all-reduce of the layer's activations among the
tensor-parallel ranks, and decode pays them once per step, on the critical path.
"""

from __future__ import annotations

import heapq
import math

import attrs
import numpy as np

GOLDEN_RATIO = (1.0 + math.sqrt(5.0)) / 2.0


@attrs.frozen(kw_only=True)
class OpTime:
    """One op of one replica, split into parts that each scale with one efficiency factor.

    Every part is in seconds at efficiency 1 (the reward part is a sample count), so :meth:`seconds` gives the
    roofline time at any efficiencies without recomputing the decode schedule: what calibration needs."""

    forward_s: float = 0.0
    """Prefill and inference forward passes at peak FLOP/s; divided by ``prefill_mfu``."""
    train_s: float = 0.0
    """Forward + backward at peak FLOP/s; divided by ``train_mfu``."""
    reward_samples: int = 0
    """Responses scored; multiplied by ``reward_seconds_per_sample``."""
    decode_memory_s: np.ndarray = attrs.field(factory=lambda: np.zeros(0), eq=False)
    """Per decode step, memory reads at full bandwidth; divided by ``decode_mbu``."""
    decode_compute_s: np.ndarray = attrs.field(factory=lambda: np.zeros(0), eq=False)
    """Per decode step, FLOPs at peak; divided by ``prefill_mfu`` (each step takes the longer of the two)."""
    fixed_s: float = 0.0
    """Seconds that no efficiency scales: tensor-parallel all-reduces and the engine's per-decode-step
    overhead (0 unless the workload turns them on)."""

    def seconds(
        self, *, prefill_mfu: float, train_mfu: float, decode_mbu: float, reward_seconds_per_sample: float
    ) -> float:
        """The op's seconds at the given efficiencies (no fixed overhead)."""
        total = self.forward_s / prefill_mfu + self.train_s / train_mfu + self.fixed_s
        total += self.reward_samples * reward_seconds_per_sample
        if self.decode_memory_s.size:
            total += float(
                np.maximum(self.decode_memory_s / decode_mbu, self.decode_compute_s / prefill_mfu).sum()
            )
        return total

    @property
    def num_decode_steps(self) -> int:
        """Decode steps of the op (0 for ops that do not decode)."""
        return int(self.decode_memory_s.size)


def kv_bytes_per_token(
    *,
    num_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    num_kv_heads: int,
    bytes_per_element: float,
    head_dim: float | None = None,
) -> float:
    """KV-cache bytes one token occupies: keys and values of every layer, ``num_kv_heads`` heads (GQA) of
    ``head_dim`` (default ``hidden_size / num_attention_heads``)."""
    if head_dim is None:
        head_dim = hidden_size / num_attention_heads
    return 2.0 * num_layers * num_kv_heads * head_dim * bytes_per_element


def attention_flops_per_token(*, num_layers: int, attention_dim: float, sequence_tokens: np.ndarray) -> float:
    """Mean causal self-attention FLOPs of one forward pass per token, over sequences of the given lengths.

    The token at position ``p`` scores ``p`` earlier keys and sums ``p`` values: ``4 * p * attention_dim`` FLOPs
    per layer. Summed over a sequence of ``L`` tokens that is ``2 * L**2 * attention_dim`` per layer, so the mean
    per token over many sequences is ``2 * num_layers * attention_dim * E[L**2] / E[L]`` (long sequences weigh
    more than their share of tokens)."""
    lengths = np.asarray(sequence_tokens, dtype=float)
    if lengths.size == 0 or lengths.sum() <= 0:
        return 0.0
    return 2.0 * num_layers * attention_dim * float((lengths**2).sum() / lengths.sum())


def compute_seconds(flops: float, *, num_devices: int, peak_flops: float, mfu: float) -> float:
    """Seconds for ``flops`` spread over ``num_devices`` devices running at ``peak_flops * mfu``."""
    return flops / (num_devices * peak_flops * mfu)


def forward_seconds(
    num_tokens: float,
    *,
    num_params: float,
    num_devices: int,
    peak_flops: float,
    mfu: float,
    attention_flops_per_token: float = 0.0,
) -> float:
    """One forward pass over ``num_tokens`` tokens: ``(2 * N + attention) * tokens`` FLOPs, compute-bound."""
    flops = (2.0 * num_params + attention_flops_per_token) * num_tokens
    return compute_seconds(flops, num_devices=num_devices, peak_flops=peak_flops, mfu=mfu)


def train_seconds(
    num_tokens: float,
    *,
    num_params: float,
    num_devices: int,
    peak_flops: float,
    mfu: float,
    attention_flops_per_token: float = 0.0,
    recompute: bool = False,
) -> float:
    """Forward + backward over ``num_tokens`` tokens, compute-bound: three forwards' FLOPs (``6 * N * tokens``
    without attention), four when ``recompute`` (the backward pass recomputes each layer's forward)."""
    passes = 4.0 if recompute else 3.0
    flops = passes * (2.0 * num_params + attention_flops_per_token) * num_tokens
    return compute_seconds(flops, num_devices=num_devices, peak_flops=peak_flops, mfu=mfu)


def admission_order(num_sequences: int) -> np.ndarray:
    """A deterministic, well-mixed order of ``num_sequences`` length-sorted sequences (golden-ratio sequence).

    Continuous batching admits requests in arrival order, which is unrelated to their (unknown) lengths; this
    order interleaves short and long ones the way a random arrival order would, without a random draw."""
    return np.argsort(np.mod((np.arange(num_sequences) + 1) * GOLDEN_RATIO, 1.0), kind="stable")


def decode_schedule(lengths: np.ndarray, max_concurrent: int) -> np.ndarray:
    """Start step of each sequence under continuous batching with at most ``max_concurrent`` in flight.

    Sequences are admitted in the given order; a slot freed at step ``t`` is refilled at step ``t``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size <= max_concurrent:
        return np.zeros(lengths.size, dtype=np.int64)
    starts = np.zeros(lengths.size, dtype=np.int64)
    free_at = [0] * max_concurrent
    for index, length in enumerate(lengths.tolist()):
        start = heapq.heappop(free_at)
        starts[index] = start
        heapq.heappush(free_at, start + length)
    return starts


def decode_activity(
    lengths: np.ndarray, *, prompt_tokens: int, max_concurrent: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per decode step of one replica, the sequences in flight ``active(t)`` and the tokens of KV cache they hold
    ``context(t)``: sequences are admitted in the given order (see :func:`decode_schedule`) and each holds its
    prompt plus the tokens generated so far. The steps run until the last sequence ends."""
    lengths = np.maximum(np.asarray(lengths, dtype=np.int64), 1)
    if lengths.size == 0:
        return np.zeros(0), np.zeros(0)
    starts = decode_schedule(lengths, max_concurrent)
    ends = starts + lengths
    num_steps = int(ends.max())
    size = num_steps + 1
    active = np.cumsum(np.bincount(starts, minlength=size) - np.bincount(ends, minlength=size))[:num_steps]
    start_sum = np.cumsum(
        np.bincount(starts, weights=starts.astype(float), minlength=size)
        - np.bincount(ends, weights=starts.astype(float), minlength=size)
    )[:num_steps]
    steps = np.arange(num_steps, dtype=float)
    # Each active sequence holds its prompt plus the tokens generated so far: prompt + t - start.
    context = active * (prompt_tokens + steps) - start_sum
    return active, context


def decode_step_costs(
    active: np.ndarray,
    context_tokens: np.ndarray,
    *,
    weight_bytes: float,
    kv_bytes_per_token: float,
    num_params: float,
    num_devices: int,
    memory_bandwidth_bytes_per_s: float,
    peak_flops: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Per decode step, the seconds of its memory reads at full bandwidth (the replica's weights and the
    ``context_tokens`` of KV cache its ``active`` sequences hold) and of its ``2 * N * active`` FLOPs at peak."""
    memory_s = (weight_bytes + kv_bytes_per_token * np.asarray(context_tokens, dtype=float)) / (
        num_devices * memory_bandwidth_bytes_per_s
    )
    compute_s = 2.0 * num_params * np.asarray(active, dtype=float) / (num_devices * peak_flops)
    return memory_s, compute_s


def decode_seconds(
    lengths: np.ndarray,
    *,
    prompt_tokens: int,
    max_concurrent: int,
    weight_bytes: float,
    kv_bytes_per_token: float,
    num_params: float,
    num_devices: int,
    memory_bandwidth_bytes_per_s: float,
    mbu: float,
    peak_flops: float,
    mfu: float,
) -> float:
    """Seconds one replica spends decoding sequences of the given response ``lengths`` (admission order).

    Step ``t`` has ``active(t)`` sequences holding ``context(t)`` tokens of KV cache in total; it takes
    ``max((weight_bytes + kv_bytes_per_token * context(t)) / (devices * bandwidth * mbu),
    2 * N * active(t) / (devices * peak * mfu))``. The sum runs over every step until the last sequence ends."""
    active, context = decode_activity(lengths, prompt_tokens=prompt_tokens, max_concurrent=max_concurrent)
    memory_s, compute_s = decode_step_costs(
        active,
        context,
        weight_bytes=weight_bytes,
        kv_bytes_per_token=kv_bytes_per_token,
        num_params=num_params,
        num_devices=num_devices,
        memory_bandwidth_bytes_per_s=memory_bandwidth_bytes_per_s,
        peak_flops=peak_flops,
    )
    return float(np.maximum(memory_s / mbu, compute_s / mfu).sum())


def allreduce_seconds(
    num_bytes: float | np.ndarray, *, num_ranks: int, link_bytes_per_s: float, latency_s: float
) -> np.ndarray:
    """One ring all-reduce of ``num_bytes`` among ``num_ranks`` devices: each sends and receives
    ``2 * (ranks - 1) / ranks`` of the bytes over its link, after a start-up ``latency_s`` (a small message, as in
    decode, costs about one latency: NCCL's low-latency protocols and vLLM's one-shot custom all-reduce). Zero
    on one rank. Elementwise over an array of sizes."""
    size = np.asarray(num_bytes, dtype=float)
    if num_ranks <= 1:
        return np.zeros_like(size)
    return latency_s + 2.0 * (num_ranks - 1) / num_ranks * size / link_bytes_per_s


def max_concurrent_sequences(
    *, kv_pool_bytes: float, kv_bytes_per_token: float, tokens_per_sequence: float, cap: int
) -> int:
    """Sequences a KV pool holds at once at ``tokens_per_sequence`` each, at most ``cap`` (the engine's limit)."""
    fit = int(kv_pool_bytes // (kv_bytes_per_token * tokens_per_sequence))
    return max(1, min(cap, fit))


def quantile_lengths(distribution: np.ndarray, num_sequences: int) -> np.ndarray:
    """``num_sequences`` response lengths at the mid-quantiles ``(i + 0.5) / n`` of an empirical distribution,
    rounded to whole tokens: the expected lengths of a batch, without a random draw."""
    quantiles = (np.arange(num_sequences) + 0.5) / num_sequences
    return np.maximum(np.rint(np.quantile(np.asarray(distribution, dtype=float), quantiles)), 1).astype(
        np.int64
    )
