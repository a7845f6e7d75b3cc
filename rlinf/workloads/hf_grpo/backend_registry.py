"""The HF GRPO backends by name (``backends.rollout``: ``hf``, ``vllm``; ``backends.inference`` and
``backends.actor``: ``hf``, ``megatron``). The optional ones are imported only when chosen (they need their
packages and a GPU)."""

from __future__ import annotations

from pathlib import Path

import torch

from rlinf.api import require
from rlinf.workloads.hf_grpo.backends import (
    HfGenerateRolloutBackend,
    HfPolicyBackend,
    HfRolloutBackend,
    PolicyBackend,
    RolloutBackend,
)
from rlinf.workloads.hf_grpo.config import BACKEND_NAMES


def rollout_backend(
    name: str,
    directory: Path,
    *,
    device: torch.device,
    dtype: torch.dtype,
    eos_id: int,
    pad_id: int,
    seed: int,
) -> RolloutBackend:
    """The rollout backend ``name`` holding the checkpoint at ``directory``."""
    if name == "vllm":
        from rlinf.workloads.hf_grpo.vllm_rollout import VllmRolloutBackend

        return VllmRolloutBackend(directory, device=device, eos_id=eos_id, seed=seed)
    require(
        name in ("hf", "hf-generate"),
        "backends.rollout",
        name,
        "unknown backend",
        f"use one of {list(BACKEND_NAMES['rollout'])}",
    )
    engine = HfGenerateRolloutBackend if name == "hf-generate" else HfRolloutBackend
    return engine(directory, device=device, dtype=dtype, eos_id=eos_id, pad_id=pad_id)


def policy_backend(
    component: str, name: str, directory: Path, *, device: torch.device, dtype: torch.dtype, seed: int
) -> PolicyBackend:
    """The inference or actor backend ``name`` holding the checkpoint at ``directory``."""
    if name == "megatron":
        from rlinf.workloads.hf_grpo.megatron_policy import MegatronPolicyBackend

        return MegatronPolicyBackend(directory, device=device, dtype=dtype, seed=seed, component=component)
    require(
        name == "hf",
        f"backends.{component}",
        name,
        "unknown backend",
        f"use one of {list(BACKEND_NAMES[component])}",
    )
    return HfPolicyBackend(directory, device=device, dtype=dtype)
