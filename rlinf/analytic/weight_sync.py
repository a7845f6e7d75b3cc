"""What a weight synchronization costs, from published measurements: resharding in place, and a broadcast.

After every training step the generation engine needs the new weights. Where generation and training share devices
(collocated), the training layout (sharded by FSDP, or split by Megatron's tensor and pipeline parallelism) is
gathered into full tensors, converted to the engine's names and layout, and loaded into the engine's own tensors
in place (veRL's ``reshard``, NeMo RL's ``refit`` through CUDA IPC handles). The bytes never leave the device, so
the link's bandwidth says nothing of it; what it costs is the gathering, conversion and loading, which published
step timings measure. Where generation has its own devices, the weights are broadcast over the links (NCCL) and
loaded by the engine; :mod:`rlinf.core.costs` prices that from the cluster's links.

A published resharding time of one model and one generation layout gives a rate in bytes of weights per rollout
device per second (each tensor-parallel rank of the engine receives its share, every replica at once):
:meth:`ReshardMeasurement.bytes_per_device_per_s`. A collocated plan then pays
``weight_bytes / rollout_model_parallel / rate`` per sync (``WeightSync.reshard_s``). Every entry is a published
figure read as it is, never fitted to the RL runs the analytic model is validated against.
"""

from __future__ import annotations

import attrs

from rlinf.core.errors import positive, registry_entry

BYTES_PER_PARAM_BF16 = 2.0


@attrs.frozen(kw_only=True)
class ReshardMeasurement:
    """One published resharding time: the weights of a ``num_params`` model (bf16) into a generation engine of
    ``rollout_model_parallel`` devices per replica, collocated with training."""

    key: str
    system: str
    model: str
    num_params: float
    rollout_model_parallel: int
    seconds: float
    source: str

    def __attrs_post_init__(self) -> None:
        positive(f"{self.key}.num_params", self.num_params)
        positive(f"{self.key}.seconds", self.seconds)

    @property
    def bytes_per_device_per_s(self) -> float:
        """Bytes of weights per rollout device resharded per second."""
        weights = BYTES_PER_PARAM_BF16 * self.num_params
        return weights / self.rollout_model_parallel / self.seconds

    def seconds_for(self, weight_bytes: float, rollout_model_parallel: int) -> float:
        """The resharding time of ``weight_bytes`` of weights into replicas of ``rollout_model_parallel`` devices
        at this measurement's rate."""
        return weight_bytes / rollout_model_parallel / self.bytes_per_device_per_s


RESHARD_MEASUREMENTS: dict[str, ReshardMeasurement] = {
    "verl": ReshardMeasurement(
        key="verl",
        system="veRL f252da3, FSDP training into SGLang (tensor parallelism 2), colocated, 8 nodes x 8 GPUs",
        model="DeepSeek-R1-Distill-Qwen-7B",
        num_params=7.62e9,
        rollout_model_parallel=2,
        seconds=4.191206,
        source="RLinf docs, blog 'Comparison with VeRL', veRL's DeepSeek-R1-Distill-Qwen-7B table ('Testing "
        "conducted on July 22, 2025', veRL f252da3, 8 nodes x 8 GPUs), metric 'reshard 4.191206 seconds' "
        "(docs/source-en/rst_source/resources/blog/compare_with_verl.rst of github.com/RLinf/RLinf, kept as a "
        "reStructuredText comment; its configuration is the page's bash example 'ds_7b_fsdp_sglang': rollout "
        "tensor_model_parallel_size 2, SGLang)",
    ),
    "nemo-rl": ReshardMeasurement(
        key="nemo-rl",
        system="NeMo RL (May 2025), DTensor training into vLLM (tensor parallelism 4) through CUDA IPC handles, "
        "colocated, 16 nodes x 8 GPUs",
        model="Qwen2.5-32B",
        num_params=32.5e9,
        rollout_model_parallel=4,
        seconds=7.0,
        source="NeMo RL pull request #449 'feat: refit speedup' (github.com/NVIDIA-NeMo/RL/pull/449, merged "
        "2025-05-28): 'For 16node on ~30B models [...] non-MoE: 18s -> 7s' refit time; the repository's 16-node "
        "~30B dense recipe then (examples/configs/recipes/llm/grpo-qwen2.5-32b-16n8g-fsdp2tp8sp-actckpt.v3.yaml at "
        "0c1c4844b): Qwen2.5-32B, vLLM tensor_parallel_size 4",
    ),
}
"""Published collocated resharding times, by key (``rlinf trace synth --weight-sync KEY``)."""

BROADCAST_CHECKS = (
    "veRL's fully asynchronous recipe (docs/advance/fully_async.md of github.com/volcengine/verl at b178a3cd5, "
    "'total sync time'): Qwen2.5-Math-7B from 4 training to 4 generation ranks, 0.12 s by NCCL and 0.02 s with its "
    "checkpoint engine; Qwen3-30B-A3B 16 to 16, 15.76 s and 4.38 s; Qwen3-235B-A22B 64 to 64, 58.57 s and 23.70 s",
    "veRL's one-step-off-policy recipe (docs/advance/one_step_off.md, same commit): the NCCL broadcast of a 7B "
    "model's weights to separate generation GPUs 'at most of time [...] under 300ms'",
)
"""Published broadcast times to separate generation devices: what rlinf's link pricing of a disaggregated sync is
checked against (the mixture-of-experts rows, whose thousands of expert tensors cost far more than their bytes,
are outside the dense model rlinf describes)."""


def reshard_measurement(key: str) -> ReshardMeasurement:
    """The table entry ``key``; raises listing the known keys."""
    return registry_entry(RESHARD_MEASUREMENTS, key, "weight_sync", "has no published resharding time here")
