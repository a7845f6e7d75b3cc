"""How efficiently a training framework turns a device's FLOPs into training, from published scaling measurements.

A training step of a data-parallel replica costs its FLOPs at some model FLOPs utilization (MFU) plus work that does
not shrink with the tokens each device trains on: the optimizer step, the gradient reduction and parameter gathers
that overlapping leaves exposed, data loading, logging. Two published measurements give the two parts, each read
as it is (never fitted to the RL runs the analytic model is validated against, docs/analytic_validation.md):

* **MFU by model size, at many tokens per device** (:meth:`TrainingEfficiency.plateau_mfu`): larger models run
  larger matrix products, which run closer to the peak. A framework's published weak-scaling table (each model on
  enough devices, at a fixed batch per device) gives it; between the published sizes the MFU is interpolated in the
  logarithm of the parameter count, outside them it is held at the nearest.
* **The fixed per-step cost** (:attr:`TrainingEfficiency.fixed_tokens_per_step`): a strong-scaling measurement (one
  model and global batch on more and more devices, so fewer tokens per device per optimizer step) gives the MFU at
  two token counts per device. With ``MFU(t) = plateau * t / (t + t0)`` (a step's time is its tokens' time at the
  plateau plus the time of ``t0`` more tokens), the two readings give ``t0``: the fixed per-step cost, in tokens'
  worth of training on that device. ``t0`` is in tokens per device, so it carries over between model sizes as far
  as the fixed work grows with the parameters per device as the FLOPs of a token do (gradients, optimizer state,
  parameter gathers all do).

:func:`training_efficiency` names the table entry a run's framework is priced by; ``rlinf trace synth
--train-efficiency KEY`` sets a workload's ``train_mfu`` to the entry's plateau for its model and its
``train_fixed_tokens_per_step`` to the entry's ``t0``.
"""

from __future__ import annotations

import math

import attrs

from rlinf.core.errors import positive, registry_entry, require


@attrs.frozen(kw_only=True)
class PublishedMfu:
    """One published MFU: a model of ``num_params`` parameters at ``tokens_per_device_per_step`` tokens per device
    per optimizer step (0: not stated; large)."""

    num_params: float
    mfu: float
    tokens_per_device_per_step: float = 0.0
    what: str = ""

    def __attrs_post_init__(self) -> None:
        positive("num_params", self.num_params)
        require(
            0 < self.mfu < 1, "mfu", self.mfu, "must be in (0, 1)", "give the published MFU as a fraction"
        )


@attrs.frozen(kw_only=True)
class TrainingEfficiency:
    """One training framework's published MFU by model size and, where published, its strong scaling."""

    key: str
    framework: str
    device: str
    source: str
    by_model_size: tuple[PublishedMfu, ...]
    """MFU at many tokens per device, by model size (at least one)."""
    strong_scaling: tuple[PublishedMfu, ...] = ()
    """One model and global batch at two device counts (two readings), or none."""
    note: str = ""
    """What the measurements leave out or assume (power limit, compilation, which recomputation)."""

    def __attrs_post_init__(self) -> None:
        require(
            bool(self.by_model_size),
            f"{self.key}.by_model_size",
            len(self.by_model_size),
            "needs at least one published MFU",
            "add the MFU of one model size",
        )
        require(
            len(self.strong_scaling) in (0, 2),
            f"{self.key}.strong_scaling",
            len(self.strong_scaling),
            "needs the MFU at two token counts per device, or none",
            "give the two ends of the strong-scaling measurement",
        )

    def plateau_mfu(self, num_params: float) -> float:
        """The MFU at many tokens per device for a model of ``num_params`` parameters: the published sizes'
        interpolated in log(parameters), held at the nearest outside them."""
        positive("num_params", num_params)
        points = sorted(self.by_model_size, key=lambda p: p.num_params)
        if num_params <= points[0].num_params:
            return points[0].mfu
        if num_params >= points[-1].num_params:
            return points[-1].mfu
        for low, high in zip(points, points[1:], strict=False):
            if low.num_params <= num_params <= high.num_params:
                where = math.log(num_params / low.num_params) / math.log(high.num_params / low.num_params)
                return low.mfu + where * (high.mfu - low.mfu)
        raise AssertionError("unreachable: the sizes bracket num_params")

    @property
    def fixed_tokens_per_step(self) -> float:
        """``t0`` of ``MFU(t) = plateau * t / (t + t0)`` from the two strong-scaling readings (0 without them):
        ``m1 (t1 + t0) / t1 = m2 (t2 + t0) / t2``."""
        if not self.strong_scaling:
            return 0.0
        (t1, m1), (t2, m2) = ((p.tokens_per_device_per_step, p.mfu) for p in self.strong_scaling)
        return max(0.0, (m2 - m1) / (m1 / t1 - m2 / t2))

    def mfu(self, num_params: float, tokens_per_device_per_step: float) -> float:
        """The MFU of a model of ``num_params`` parameters training ``tokens_per_device_per_step`` tokens on each
        device per optimizer step."""
        positive("tokens_per_device_per_step", tokens_per_device_per_step)
        t0 = self.fixed_tokens_per_step
        return self.plateau_mfu(num_params) * tokens_per_device_per_step / (tokens_per_device_per_step + t0)


MEGATRON_README = (
    "Megatron-LM README, sections 'Performance Benchmarking', 'Weak Scaling Results' and 'Strong Scaling Results' "
    "(github.com/NVIDIA/Megatron-LM, README.md at d98e8a64dd, 2026-08-22): GPT models of 2B to 462B parameters on "
    "H100 in bf16, sequence length 4,096, with data-parallel, tensor-parallel and pipeline communication overlapped; "
    "'throughputs include all operations (data loading, optimizer steps, communication, and logging)'; 'MFU "
    "increases from 41% for the smallest model considered to 47-48% for the largest models'; strong scaling of the "
    "175B GPT-3 model 'from 96 H100 GPUs to 4,608 GPUs, using the same batch size of 1,152 sequences throughout "
    "[...] leading to a reduction in MFU from 47% to 42%'"
)
TORCHTITAN_BENCHMARK = (
    "torchtitan benchmark 'llama3_h100_202412_torchtitan' (github.com/pytorch/torchtitan, "
    "benchmarks/llama3_h100_202412_torchtitan.md at b5bcd76c6, measured 2024-12): Llama 3.1 8B, FSDP on 8 and on "
    "128 H100 (96 GB, at a 500 W power limit), local batch 2 x 8,192 tokens, selective activation checkpointing, "
    "bf16: 5,762 and 5,605 tokens/s per GPU eagerly, 6,667 and 6,514 with torch.compile; '1D Llama 3.1 8B model "
    "training on 8 or 128 H100 GPUs without Float8 achieves 33% to 39% MFU' (33% eager, 39% compiled: the MFU "
    "scales with the tokens per second)"
)

TRAINING_EFFICIENCIES: dict[str, TrainingEfficiency] = {
    "megatron": TrainingEfficiency(
        key="megatron",
        framework="Megatron-LM (Megatron-Core), the training backend of NeMo RL and of RLinf's math recipes",
        device="H100",
        source=MEGATRON_README,
        by_model_size=(
            PublishedMfu(num_params=2e9, mfu=0.41, what="the smallest model of the weak-scaling table, 2B"),
            PublishedMfu(
                num_params=175e9, mfu=0.47, what="GPT-3 175B on 96 H100, the strong scaling's start"
            ),
            PublishedMfu(num_params=462e9, mfu=0.475, what="the largest, 462B: '47-48%'"),
        ),
        strong_scaling=(
            PublishedMfu(
                num_params=175e9,
                mfu=0.47,
                tokens_per_device_per_step=1152 * 4096 / 96,
                what="1,152 sequences of 4,096 tokens on 96 H100",
            ),
            PublishedMfu(
                num_params=175e9,
                mfu=0.42,
                tokens_per_device_per_step=1152 * 4096 / 4608,
                what="the same on 4,608 H100",
            ),
        ),
        note="pretraining with overlapped communication and (for the large models) selective recomputation; an RL "
        "trainer that recomputes every layer computes 8*N FLOPs per token, which rlinf prices at this utilization",
    ),
    "fsdp": TrainingEfficiency(
        key="fsdp",
        framework="PyTorch FSDP / FSDP2 without torch.compile, the training backend of veRL's FSDP recipes",
        device="H100 (500 W)",
        source=TORCHTITAN_BENCHMARK,
        by_model_size=(
            PublishedMfu(num_params=8.03e9, mfu=0.33, what="Llama 3.1 8B, FSDP, eager, 8 and 128 H100"),
        ),
        note="one model size, so the same MFU at every size; no strong scaling is published (the batch per GPU "
        "was fixed), so no fixed per-step cost is priced; measured at a 500 W power limit, below the H100's 700 W",
    ),
}
"""The training frameworks whose efficiency has a published source, by key (``rlinf trace synth
--train-efficiency KEY``)."""


def training_efficiency(key: str) -> TrainingEfficiency:
    """The table entry ``key``; raises listing the known keys."""
    return registry_entry(
        TRAINING_EFFICIENCIES, key, "train_efficiency", "has no published training efficiency here"
    )
