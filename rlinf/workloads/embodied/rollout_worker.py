"""The rollout component: the MLP policy, inferring actions for one pipeline stage at a time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rlinf.algorithms.ppo import RunningNorm
from rlinf.worker_context import WorkerContext
from rlinf.workloads.embodied.arrays import Batch, concat_rows
from rlinf.workloads.embodied.config import EmbodiedConfig
from rlinf.workloads.embodied.policy import ActorCritic, load_payload


class RolloutWorker:
    """Samples actions with the weights and observation statistics last synced from the actor."""

    collective = False
    """Calls no collective: its replicas need no group (:attr:`executor.WorkerSpec.collective`)."""

    def setup(self, config: EmbodiedConfig, context: WorkerContext) -> None:
        from rlinf.workloads.embodied.config import check_env_id

        obs_dim, act_dim = check_env_id(config.env_id)
        self.config = config
        rank = context.rank
        self.device = torch.device(context.device.torch_device)
        torch.manual_seed(config.seed)
        self.model = ActorCritic(obs_dim, act_dim, config.hidden_sizes).to(self.device)
        self.norm = RunningNorm.zeros((obs_dim,))
        self.model_state = [*self.model.parameters(), *self.model.buffers()]
        """Listed once: the same tensor objects for the worker's life (weights load and offload work in place), and
        the executor counts them after every op, where walking the modules cost ~20 us each time."""
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(config.seed * 1_000 + 17 + rank)

    def compute(
        self, op_name: str, micro_batch: int, step: int, inputs: Sequence[Batch]
    ) -> tuple[Batch, dict[str, Any]]:
        assert op_name == "act", f"rollout workers run act, not {op_name}"
        if step == 0:
            return {}, {}
        obs = concat_rows(inputs)["obs"]
        norm_obs = self.norm.normalize(obs, self.config.obs_clip)
        actions, log_probs, values = self.model.act(
            torch.as_tensor(norm_obs, device=self.device), self.generator
        )
        data = {
            "norm_obs": norm_obs,
            "actions": actions.cpu().numpy(),
            "log_probs": log_probs.cpu().numpy(),
            "values": values.cpu().numpy(),
        }
        return data, {}

    def state_tensors(self) -> list:
        return list(self.model_state)

    def weights(self) -> dict[str, np.ndarray]:
        raise AssertionError("rollout workers do not send weights")

    def load_weights(self, payload: Batch) -> None:
        load_payload(self.model, dict(payload))
        self.norm = RunningNorm(
            mean=payload["norm.mean"], var=payload["norm.var"], count=float(payload["norm.count"][0])
        )

    def checkpoint(self) -> dict[str, Any]:
        """The synced weights and statistics, and the action-sampling generator."""
        return {
            "model": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()},
            "norm": {"mean": self.norm.mean, "var": self.norm.var, "count": self.norm.count},
            "generator": self.generator.get_state(),
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`checkpoint` of the same replica."""
        self.model.load_state_dict({k: v.to(self.device) for k, v in state["model"].items()})
        self.norm = RunningNorm(**state["norm"])
        self.generator.set_state(state["generator"])
