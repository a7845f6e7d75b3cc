"""The arithmetic workload's backends by name: ``rollout.backend`` (``torch``, ``vllm``) and ``actor.backend``
(``torch``, ``megatron``). The optional ones are imported only when chosen (they need their packages and a GPU)."""

from __future__ import annotations

from types import MappingProxyType

from rlinf.core.errors import ConfigError
from rlinf.workloads.arith.backends import TorchRolloutBackend, TorchTrainBackend


def _vllm_class():
    from rlinf.workloads.arith.vllm_backend import VllmRolloutBackend

    return VllmRolloutBackend


def _megatron_class():
    from rlinf.workloads.arith.megatron_backend import MegatronTrainBackend

    return MegatronTrainBackend


ROLLOUT_BACKENDS = MappingProxyType({"torch": lambda: TorchRolloutBackend, "vllm": _vllm_class})
TRAIN_BACKENDS = MappingProxyType({"torch": lambda: TorchTrainBackend, "megatron": _megatron_class})


def rollout_backend_class(name: str) -> type:
    """The rollout backend class registered as ``name``; raises listing the valid names."""
    if name not in ROLLOUT_BACKENDS:
        raise ConfigError(
            "rollout.backend", name, "unknown rollout backend", f"use one of {sorted(ROLLOUT_BACKENDS)}"
        )
    return ROLLOUT_BACKENDS[name]()


def train_backend_class(name: str) -> type:
    """The train backend class registered as ``name``; raises listing the valid names."""
    if name not in TRAIN_BACKENDS:
        raise ConfigError(
            "actor.backend", name, "unknown train backend", f"use one of {sorted(TRAIN_BACKENDS)}"
        )
    return TRAIN_BACKENDS[name]()
