"""The rollout component: the MLP policy, inferring actions for one pipeline stage at a time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rlinf.algorithms.ppo import RunningNorm
from rlinf.api import ConfigError, Payload, WorkerContext, concat_payloads
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
        self.device = torch.device(context.device.torch_device)
        torch.manual_seed(config.seed)
        self.model = ActorCritic(obs_dim, act_dim, config.hidden_sizes).to(self.device)
        self.norm = RunningNorm.zeros((obs_dim,))
        self.model_state = [*self.model.parameters(), *self.model.buffers()]
        """Listed once: the same tensor objects for the worker's life (weights load and offload work in place), and
        the executor counts them after every op, where walking the modules cost ~20 us each time."""
        # One action-sampling generator per stage, seeded by the stage and this replica's position among the
        # replicas that run it: a stage samples the same actions wherever the plan puts it (a loop pinned over two
        # cores and the same stages on one core train identically).
        self.generators: dict[int, torch.Generator] = {}
        for stage in range(context.num_micro_batches):
            position = context.my_position(stage)
            if position is not None:
                seed = _stage_seed(config.seed, stage, position[0])
                self.generators[stage] = torch.Generator(device=self.device).manual_seed(seed)

    def compute(
        self, op_name: str, micro_batch: int, step: int, inputs: Sequence[Payload]
    ) -> tuple[Payload, dict[str, Any]]:
        assert op_name == "act", f"rollout workers run act, not {op_name}"
        if step == 0:
            return {}, {}
        obs = concat_payloads(inputs)["obs"]
        norm_obs = self.norm.normalize(obs, self.config.obs_clip)
        actions, log_probs, values = self.model.act(
            torch.as_tensor(norm_obs, device=self.device), self.generators[micro_batch]
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

    def load_weights(self, payload: Payload) -> None:
        load_payload(self.model, dict(payload))
        self.norm = RunningNorm(
            mean=payload["norm.mean"], var=payload["norm.var"], count=float(payload["norm.count"][0])
        )

    def checkpoint(self) -> dict[str, Any]:
        """The synced weights and statistics, and each stage's action-sampling generator."""
        return {
            "model": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()},
            "norm": {"mean": self.norm.mean, "var": self.norm.var, "count": self.norm.count},
            "generators": {stage: g.get_state() for stage, g in self.generators.items()},
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`checkpoint` of the same replica."""
        self.model.load_state_dict({k: v.to(self.device) for k, v in state["model"].items()})
        self.norm = RunningNorm(**state["norm"])
        saved = state.get("generators")
        if not isinstance(saved, dict) or set(saved) != set(self.generators):
            raise ConfigError(
                "checkpoint", "rollout generators",
                f"hold the stages {sorted(saved) if isinstance(saved, dict) else saved} where this replica runs "
                f"{sorted(self.generators)}", "resume with the plan the checkpoint was written under",
            )  # fmt: skip
        for stage, generator in self.generators.items():
            generator.set_state(saved[stage])


def _stage_seed(seed: int, stage: int, position: int) -> int:
    """Seed of the action generator of ``stage`` on the replica at ``position`` among those that run it. Stage 0
    keeps the seed of the single generator earlier versions had per replica, so a 1-stage loop samples the same
    actions as before (``tests/data/port_baseline.json``)."""
    if stage == 0:
        return seed * 1_000 + 17 + position
    return int(np.random.SeedSequence([seed, 17, stage, position]).generate_state(1)[0])
