"""PPO with a separate critic component on CartPole-v1, written only against rlinf's public workload API.

Four components: ``env`` (CartPole environments, this replica's share of each pipeline stage) and ``policy``
(samples actions) run the env <-> policy loop; the trajectories go to ``critic``, which fits the value function
and computes GAE advantages, then to ``actor``, which takes PPO steps and syncs its weights back to ``policy``.
rlinf stamps every batch it moves with the policy version that produced it (``stamp_of``), so under
``--max-staleness K`` (the policy acting up to K steps behind the actor) the actor reports the lag it reads there.
Train it with ``rlinf train examples/custom_workload/config.yaml`` (any ``--mode``, ``--plan`` or ``--mode auto``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import gymnasium as gym
import numpy as np
import torch

from rlinf.api import (
    Component,
    Edge,
    IterationResult,
    Loop,
    RunSettings,
    WeightSync,
    WorkerContext,
    Workflow,
    concat_payloads,
    episode_mean,
    stamp_of,
    structure_config,
)

OBS, ACTIONS = 4, 2


@attrs.frozen(kw_only=True)
class PPOConfig:
    num_envs: int = 8
    num_steps: int = 64
    hidden: int = 64
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    epochs: int = 4
    actor_lr: float = 3e-3
    critic_lr: float = 3e-3
    seed: int = 1  # the run's seed (execution.seed), set by load_config


def mlp(out: int, hidden: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(OBS, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, hidden),
                               torch.nn.Tanh(), torch.nn.Linear(hidden, out))  # fmt: skip


def average_gradients(model: torch.nn.Module, world: int) -> None:
    """Data-parallel replicas average their gradients (one all-reduce of a flat buffer)."""
    if world > 1:
        grads = [p.grad for p in model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        torch.distributed.all_reduce(flat)
        torch.nn.utils.vector_to_parameters(flat / world, grads)


class Env:
    """This replica's environments of every pipeline stage; records what the loop does."""

    def setup(self, config: PPOConfig, context: WorkerContext) -> None:
        self.steps = config.num_steps
        self.stages = []
        for stage in range(context.num_micro_batches):
            first, last = context.my_groups(stage)
            if first == last:  # a stage another replica runs (a pinned loop): never computed here
                self.stages.append({"envs": [], "obs": None, "returns": np.zeros(0)})
                continue
            envs = [gym.make("CartPole-v1") for _ in range(first, last)]
            seeds = range(config.seed * 1_000 + first, config.seed * 1_000 + last)
            obs = np.stack([env.reset(seed=seed)[0] for seed, env in zip(seeds, envs, strict=True)])
            self.stages.append({"envs": envs, "obs": obs.astype(np.float32), "returns": np.zeros(len(envs))})

    def compute(self, op_name: str, micro_batch: int, step: int, inputs: list) -> tuple[dict, dict]:
        stage = self.stages[micro_batch]
        if step == 0:
            stage["record"] = {k: [] for k in ("actions", "logp", "rewards", "dones", "obs")}
            return {"obs": stage["obs"]}, {}
        act, record, finished = concat_payloads(inputs), stage["record"], []
        record["obs"].append(stage["obs"])
        next_obs, rewards, dones = [], [], []
        for i, (env, action) in enumerate(zip(stage["envs"], act["actions"], strict=True)):
            obs, reward, terminated, truncated, _ = env.step(int(action))
            stage["returns"][i] += reward
            if terminated or truncated:
                finished.append(float(stage["returns"][i]))
                stage["returns"][i] = 0.0
                obs, _ = env.reset()
            next_obs.append(obs), rewards.append(reward), dones.append(terminated or truncated)
        stage["obs"] = np.stack(next_obs).astype(np.float32)
        values = (act["actions"], act["logp"], rewards, dones)
        for key, value in zip(record, values, strict=False):
            record[key].append(np.asarray(value, dtype=np.float32))
        if step < self.steps:
            return {"obs": stage["obs"]}, {"episode_returns": finished}
        trajectory = {k: np.stack(v, axis=1) for k, v in record.items()}  # [envs, steps, ...]
        return {**trajectory, "next_obs": stage["obs"]}, {"episode_returns": finished}

    def checkpoint(self) -> dict[str, Any]:
        return {"stages": [{"obs": s["obs"], "returns": s["returns"], "envs": [
            {"state": np.asarray(e.unwrapped.state), "rng": e.unwrapped.np_random.bit_generator.state,
             "elapsed": e.get_wrapper_attr("_elapsed_steps")} for e in s["envs"]]} for s in self.stages]}  # fmt: skip

    def restore(self, state: dict[str, Any]) -> None:
        for stage, saved in zip(self.stages, state["stages"], strict=True):
            stage["obs"], stage["returns"] = saved["obs"], saved["returns"]
            for env, env_state in zip(stage["envs"], saved["envs"], strict=True):
                env.unwrapped.state = env_state["state"]
                env.unwrapped.np_random.bit_generator.state = env_state["rng"]
                env.set_wrapper_attr("_elapsed_steps", env_state["elapsed"])


class Policy:
    """Samples actions with the weights last synced from the actor."""

    def setup(self, config: PPOConfig, context: WorkerContext) -> None:
        self.model = mlp(ACTIONS, config.hidden, config.seed)
        self.generator = torch.Generator().manual_seed(config.seed * 31 + context.rank)

    def compute(self, op_name: str, micro_batch: int, step: int, inputs: list) -> tuple[dict, dict]:
        if step == 0:
            return {}, {}
        with torch.no_grad():
            logits = self.model(torch.as_tensor(concat_payloads(inputs)["obs"]))
            actions = torch.multinomial(torch.softmax(logits, -1), 1, generator=self.generator)[:, 0]
            logp = torch.log_softmax(logits, -1).gather(1, actions[:, None])[:, 0]
        return {"actions": actions.numpy(), "logp": logp.numpy()}, {}

    def state_tensors(self) -> list:
        return list(self.model.parameters())

    def load_weights(self, payload: dict[str, np.ndarray]) -> None:
        self.model.load_state_dict({k: torch.as_tensor(v) for k, v in payload.items()})

    def checkpoint(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "generator": self.generator.get_state()}

    def restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.generator.set_state(state["generator"])


class Critic:
    """Fits the value function to the returns and hands GAE advantages to the actor."""

    def setup(self, config: PPOConfig, context: WorkerContext) -> None:
        self.config, self.world = config, context.world
        self.model = mlp(1, config.hidden, config.seed + 1)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.critic_lr)

    def compute(self, op_name: str, micro_batch: int, step: int, inputs: list) -> tuple[dict, dict]:
        batch, c = concat_payloads(inputs), self.config
        obs = torch.as_tensor(batch["obs"])
        with torch.no_grad():
            values = self.model(obs)[..., 0].numpy()
            last = self.model(torch.as_tensor(batch["next_obs"]))[:, 0].numpy()
        advantages, gae = np.zeros_like(values), 0.0
        for t in reversed(range(values.shape[1])):
            following = last if t == values.shape[1] - 1 else values[:, t + 1]
            alive = 1.0 - batch["dones"][:, t]
            delta = batch["rewards"][:, t] + c.gamma * following * alive - values[:, t]
            gae = delta + c.gamma * c.gae_lambda * alive * gae
            advantages[:, t] = gae
        returns = torch.as_tensor(advantages + values)
        for _ in range(c.epochs):
            loss = ((self.model(obs)[..., 0] - returns) ** 2).mean()
            self.optimizer.zero_grad()
            loss.backward()
            average_gradients(self.model, self.world)
            self.optimizer.step()
        out = {k: batch[k] for k in ("obs", "actions", "logp")}
        return {**out, "advantages": advantages}, {"value_loss": loss.item()}

    def state_tensors(self) -> list:
        return list(self.model.parameters())

    def checkpoint(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


class Actor(Critic):
    """PPO's clipped policy update; the source of the policy's weights."""

    def setup(self, config: PPOConfig, context: WorkerContext) -> None:
        self.config, self.world = config, context.world
        self.model = mlp(ACTIONS, config.hidden, config.seed)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.actor_lr)
        self.version = 0  # the version of these weights (from the executor's stamp), kept in the checkpoint

    def compute(self, op_name: str, micro_batch: int, step: int, inputs: list) -> tuple[dict, dict]:
        batch = {k: torch.as_tensor(v).flatten(0, 1) for k, v in concat_payloads(inputs).items()}
        advantages = (batch["advantages"] - batch["advantages"].mean()) / (batch["advantages"].std() + 1e-8)
        # How many steps behind this actor the policy that acted was: the lag of the executor's stamp, per sample.
        stamps = [(stamp_of(p), p["obs"].size // OBS) for p in inputs if p]
        lag = torch.cat([torch.full((n,), float(stamp.lag)) for stamp, n in stamps])
        for _ in range(self.config.epochs):
            logp = torch.log_softmax(self.model(batch["obs"]), -1)
            ratio = torch.exp(logp.gather(1, batch["actions"].long()[:, None])[:, 0] - batch["logp"])
            clipped = torch.clamp(ratio, 1 - self.config.clip, 1 + self.config.clip)
            loss = -torch.min(ratio * advantages, clipped * advantages).mean()
            self.optimizer.zero_grad()
            loss.backward()
            average_gradients(self.model, self.world)
            self.optimizer.step()
        self.version = stamps[0][0].read_at + 1  # one training step on from the version it read at
        lags = {"policy_lag_max": lag.max().item(), "policy_lag_mean": lag.mean().item()}
        return {}, {"policy_loss": loss.item(), **lags}

    def weights(self) -> dict[str, np.ndarray]:
        return {k: v.detach().numpy().copy() for k, v in self.model.state_dict().items()}

    def checkpoint(self) -> dict[str, Any]:
        return {**super().checkpoint(), "version": self.version}

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.version = state["version"]


@attrs.frozen
class PPOCritic:
    """The workload: what rlinf needs to plan and run it."""

    name: str = "cartpole_ppo_critic"
    headline: dict = attrs.field(factory=lambda: {"episodic_return": "ret", "env_steps_per_s": "sps"})

    def load_config(self, data: dict, source: str, settings: RunSettings) -> PPOConfig:
        return attrs.evolve(structure_config(PPOConfig, data, source), seed=settings.seed)

    def workflow(self, config: PPOConfig) -> Workflow:
        weights = 4 * sum(p.numel() for p in mlp(ACTIONS, config.hidden, 0).parameters())
        trajectory = 4 * (OBS + 4) * config.num_steps
        parts = {"env": ("env", 0), "policy": ("rollout", weights), "critic": ("critic", 3 * weights)}
        parts["actor"] = ("actor", 3 * weights)
        cpu_ok = {"env"}  # needs no GPU: beside GPUs it may run on CPU cores
        pairs = (("env", "critic"), ("critic", "actor"))
        return Workflow(
            name="ppo-critic-cartpole",
            components=[
                Component(name=n, role=r, state_bytes=b, cpu_ok=n in cpu_ok) for n, (r, b) in parts.items()
            ],
            edges=[Edge(src=a, dst=b, kind="barrier", bytes_per_sample=trajectory) for a, b in pairs],
            loop=Loop(env="env", policy="policy", num_steps=config.num_steps + 1, obs_bytes_per_env=4 * OBS),
            weight_sync=[WeightSync(src="actor", dst="policy", num_bytes=weights)],
            batch_size=config.num_envs,
            unit="env_steps",
        )

    def workers(self, config: PPOConfig) -> dict[str, type]:
        return {"env": Env, "policy": Policy, "critic": Critic, "actor": Actor}

    def metrics(self, result: IterationResult, config: PPOConfig, iteration: int) -> dict[str, Any]:
        returns = [r for i in result.infos for r in i.info.get("episode_returns", [])]
        reported = ("_loss", "_lag_max", "_lag_mean")  # the critic's and actor's losses, the actor's lag
        losses = {k: float(v) for i in result.infos for k, v in i.info.items() if k.endswith(reported)}
        steps = config.num_envs * config.num_steps
        return {"env_steps": iteration * steps, "iteration_s": result.timeline.iteration_s,
                "env_steps_per_s": steps / result.timeline.iteration_s, "episodes": len(returns),
                "episodic_return": float(np.mean(returns)) if returns else None, **losses}  # fmt: skip

    def summary(self, recent: Sequence[Mapping[str, Any]]) -> str:
        mean, episodes = episode_mean(recent)  # over the episodes the last iterations finished
        shown = "none finished" if mean is None else f"{mean:.1f} over {episodes} episodes"
        last = recent[-1]
        return f"{last['env_steps']} env steps, {last['env_steps_per_s']:.0f} env steps/s, return {shown}"


WORKLOAD = PPOCritic()
