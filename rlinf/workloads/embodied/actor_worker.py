"""The actor component: PPO updates on the trajectories of every stage, data-parallel over its replicas.

Each replica trains on its share of the environments; gradients (and the normalisation statistics) are averaged
with ``torch.distributed`` all-reduce over the component's group (gloo on CPUs, NCCL on GPUs), so every replica
keeps identical weights and rank 0 sends them to the rollout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rlinf.algorithms.ppo import RunningNorm, discounted_returns, gae, normalize_advantages, ppo_loss
from rlinf.api import Payload, WorkerContext, concat_payloads, require, stamp_of
from rlinf.workloads.embodied.config import EmbodiedConfig, check_env_id
from rlinf.workloads.embodied.policy import ActorCritic, to_payload


def check_share(config: EmbodiedConfig, context: WorkerContext) -> None:
    """Raise unless an actor replica's share of the environments holds a sample per minibatch (the workload checks
    it for every plan before any worker starts, :meth:`EmbodiedWorkload.check_replica`)."""
    first, end = context.my_batch()  # this replica's environments (replicas may hold one more or less)
    samples = (end - first) * config.num_steps
    require(
        samples >= config.num_minibatches, "num_minibatches", config.num_minibatches,
        f"exceeds the {samples} samples of each of the {context.world} actor replicas",
        "use fewer minibatches or fewer actor devices",
    )  # fmt: skip


class ActorWorker:
    """Owns the trained weights, the optimizer and the observation / reward statistics."""

    def setup(self, config: EmbodiedConfig, context: WorkerContext) -> None:
        obs_dim, act_dim = check_env_id(config.env_id)
        self.config = config
        rank, self.rank, self.world = context.rank, context.rank, context.world
        check_share(config, context)
        self.device = torch.device(context.device.torch_device)
        torch.manual_seed(config.seed)
        self.model = ActorCritic(obs_dim, act_dim, config.hidden_sizes).to(self.device)
        # One fused kernel per step for all parameters (CPU and CUDA): the for-loop Adam issued about ten torch ops
        # per parameter tensor, a tenth of a 64x64 policy's minibatch step.
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=config.learning_rate, eps=1e-5, fused=True
        )
        self.model_state = [*self.model.parameters(), *self.model.buffers()]
        """Listed once, as in the rollout worker (the optimizer's state is added per call: it appears at the first
        step and is replaced by a restore)."""
        self.obs_norm = RunningNorm.zeros((obs_dim,))
        self.return_norm = RunningNorm.zeros(())
        self.running_returns: np.ndarray | None = None
        self.rng = np.random.default_rng(config.seed * 7_919 + rank)

    # ------------------------------------------------------------------ collectives
    def _all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor)
        return tensor

    def _merged(self, norm: RunningNorm, batch: np.ndarray) -> RunningNorm:
        """``norm`` updated with the union of every replica's ``batch`` (moments summed over the group)."""
        flat = batch.reshape(len(batch), -1).astype(np.float64)
        count = float(len(flat))
        local = torch.as_tensor(np.concatenate([[count], flat.sum(0), (flat**2).sum(0)]), dtype=torch.float64)
        sums = self._all_reduce(local).numpy()
        total = float(sums[0])
        width = flat.shape[1]
        mean = sums[1 : 1 + width] / total
        var = np.maximum(sums[1 + width :] / total - mean**2, 0.0)
        return norm.merge(mean.reshape(norm.mean.shape), var.reshape(norm.var.shape), total)

    # ------------------------------------------------------------------ training
    def compute(
        self, op_name: str, micro_batch: int, step: int, inputs: Sequence[Payload]
    ) -> tuple[Payload, dict[str, Any]]:
        assert op_name == "train", f"actor workers run train, not {op_name}"
        batch = concat_payloads(inputs)
        advantages, returns = self._advantages(batch)
        n, steps = batch["rewards"].shape
        flat = {
            "obs": batch["obs"].reshape(n * steps, -1),
            "actions": batch["actions"].reshape(n * steps, -1),
            "log_probs": batch["log_probs"].reshape(-1),
            "advantages": advantages.transpose(1, 0).reshape(-1),
            "returns": returns.transpose(1, 0).reshape(-1),
        }
        tensors = {k: torch.as_tensor(v, device=self.device) for k, v in flat.items()}
        # How many training steps behind this actor the policy that acted was (the executor's stamp, per env).
        lag = np.concatenate([np.full(len(p["rewards"]), stamp_of(p).lag) for p in inputs if p])
        stats = {
            "policy_lag_max": float(lag.max()),
            "policy_lag_mean": float(lag.mean()),
            "behaviour_kl": self._behaviour_kl(tensors),
        }
        stats.update(self._update(tensors))
        self.obs_norm = self._merged(self.obs_norm, batch["raw_obs"].reshape(n * steps, -1))
        return {}, stats

    def _behaviour_kl(self, data: dict[str, torch.Tensor]) -> float:
        """Mean ``log pi_behaviour - log pi_current`` over the batch's actions before the update (an estimate of
        KL(behaviour || current)): 0 when the rollout acted with the actor's current weights (synchronous), above
        under a staleness bound. PPO's ratio stays against the behaviour log-probabilities the batch carries."""
        with torch.no_grad():
            current, _, _ = self.model.evaluate(data["obs"], data["actions"])
        return float((data["log_probs"] - current).mean())

    def _advantages(self, batch: Payload) -> tuple[np.ndarray, np.ndarray]:
        """Time-major ``[T, n]`` advantages and returns; rewards scaled, truncations bootstrapped."""
        cfg = self.config
        rewards = batch["rewards"].T.astype(np.float64)
        dones = batch["dones"].T
        if cfg.normalize_rewards:
            if self.running_returns is None or len(self.running_returns) != rewards.shape[1]:
                self.running_returns = np.zeros(rewards.shape[1])
            discounted, self.running_returns = discounted_returns(
                self.running_returns, rewards, dones, cfg.gamma
            )
            self.return_norm = self._merged(self.return_norm, discounted.reshape(-1))
            rewards = rewards / np.sqrt(self.return_norm.var + 1e-8)
        with torch.no_grad():
            last_values = self._values(batch["next_obs"])
            n, steps = batch["truncated"].shape
            final_values = self._values(batch["final_obs"].reshape(n * steps, -1)).reshape(n, steps).T
        rewards = rewards + cfg.gamma * final_values * batch["truncated"].T
        return gae(rewards, batch["values"].T, dones, last_values, gamma=cfg.gamma, lam=cfg.gae_lambda)

    def _values(self, raw_obs: np.ndarray) -> np.ndarray:
        obs = torch.as_tensor(self.obs_norm.normalize(raw_obs, self.config.obs_clip), device=self.device)
        return self.model.values(obs).cpu().numpy().astype(np.float64)

    def _update(self, data: dict[str, torch.Tensor]) -> dict[str, float]:
        cfg = self.config
        rows = len(data["returns"])
        size = max(1, rows // cfg.num_minibatches)
        totals: dict[str, float] = {}
        count = 0
        for _ in range(cfg.num_epochs):
            order = torch.as_tensor(self.rng.permutation(rows), device=self.device)
            for start in range(0, size * cfg.num_minibatches, size):
                index = order[start : start + size]
                log_probs, entropy, values = self.model.evaluate(data["obs"][index], data["actions"][index])
                loss, stats = ppo_loss(
                    log_probs,
                    data["log_probs"][index],
                    normalize_advantages(data["advantages"][index]),
                    values,
                    data["returns"][index],
                    entropy,
                    clip_coef=cfg.clip_coef,
                    value_coef=cfg.value_coef,
                    entropy_coef=cfg.entropy_coef,
                )
                self.optimizer.zero_grad()
                loss.backward()
                self._average_gradients()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0.0) + value
                count += 1
        self.optimizer.zero_grad(set_to_none=True)
        return {key: value / count for key, value in totals.items()}

    def _average_gradients(self) -> None:
        if self.world == 1:
            return
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        flat = self._all_reduce(torch.cat([g.reshape(-1) for g in grads])) / self.world
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()

    # ------------------------------------------------------------------ protocol
    def state_tensors(self) -> list:
        tensors = list(self.model_state)
        for state in self.optimizer.state.values():
            tensors.extend(v for v in state.values() if torch.is_tensor(v))
        return tensors

    def weights(self) -> dict[str, np.ndarray]:
        out = to_payload(self.model)
        out["norm.mean"] = self.obs_norm.mean.astype(np.float64)
        out["norm.var"] = self.obs_norm.var.astype(np.float64)
        out["norm.count"] = np.array([self.obs_norm.count])
        return out

    def load_weights(self, payload: Payload) -> None:
        raise AssertionError("the actor is the source of weights")

    def checkpoint(self) -> dict[str, Any]:
        """Weights, optimizer, normalisation statistics and the minibatch RNG: enough to resume exactly."""
        return {
            "model": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "obs_norm": {"mean": self.obs_norm.mean, "var": self.obs_norm.var, "count": self.obs_norm.count},
            "return_norm": {
                "mean": self.return_norm.mean,
                "var": self.return_norm.var,
                "count": self.return_norm.count,
            },
            "running_returns": None if self.running_returns is None else self.running_returns.copy(),
            "rng": self.rng.bit_generator.state,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`checkpoint` of the same replica."""
        self.model.load_state_dict({k: v.to(self.device) for k, v in state["model"].items()})
        self.optimizer.load_state_dict(state["optimizer"])
        self.obs_norm = RunningNorm(**state["obs_norm"])
        self.return_norm = RunningNorm(**state["return_norm"])
        running = state["running_returns"]
        self.running_returns = None if running is None else np.array(running)
        self.rng.bit_generator.state = state["rng"]
