"""The env component: vectorised MuJoCo environments, split into the plan's pipeline stages.

Replica ``r`` of ``R`` holds, for each stage ``s``, the environments ``[s*E/S + r*E/(S*R), ...)`` of the
``E`` environments, matching how the lowering splits a stage's micro-batch between replicas. Loop step 0 of an
iteration only reports the observations carried over (resetting on the first iteration); steps ``1..T`` apply
the policy's actions. The last step emits the stage's trajectory (environment-major arrays) for the actor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import TimeLimit

from rlinf.api import Payload, WorkerContext, concat_payloads
from rlinf.workloads.embodied.config import EmbodiedConfig

TRAJECTORY_KEYS = (
    "obs",
    "raw_obs",
    "actions",
    "log_probs",
    "values",
    "rewards",
    "dones",
    "truncated",
    "final_obs",
)


def _time_limit(env: gym.Env) -> TimeLimit | None:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, TimeLimit):
            return env
        env = env.env
    return None


def _env_state(env: gym.Env) -> dict[str, Any]:
    """Everything a MuJoCo env's future depends on: ``mjSTATE_INTEGRATION`` (time, qpos, qvel, warm start,
    controls, ...), its RNG (resets) and the time-limit counter."""
    import mujoco

    inner: Any = env.unwrapped
    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    physics = np.empty(mujoco.mj_stateSize(inner.model, spec))
    mujoco.mj_getState(inner.model, inner.data, physics, spec)
    limit = _time_limit(env)
    return {
        "physics": physics,
        "rng": inner.np_random.bit_generator.state,
        "elapsed_steps": None if limit is None else limit._elapsed_steps,
    }


def _set_env_state(env: gym.Env, seed: int, state: dict[str, Any]) -> None:
    import mujoco

    env.reset(seed=seed)  # the wrappers' own bookkeeping (order enforcing) wants one reset first
    inner: Any = env.unwrapped
    mujoco.mj_setState(inner.model, inner.data, state["physics"], mujoco.mjtState.mjSTATE_INTEGRATION)
    mujoco.mj_forward(inner.model, inner.data)
    inner.np_random.bit_generator.state = state["rng"]
    limit = _time_limit(env)
    if limit is not None:
        limit._elapsed_steps = state["elapsed_steps"]


class _Stage:
    """The environments of one pipeline stage on one replica, and the trajectory they are recording."""

    def __init__(self, env_id: str, seeds: Sequence[int]) -> None:
        self.envs = [gym.make(env_id) for _ in seeds]
        self.seeds = list(seeds)
        self.obs: np.ndarray | None = None
        self.episode_return = np.zeros(len(seeds))
        self.episode_length = np.zeros(len(seeds), dtype=np.int64)
        self.record: dict[str, list[np.ndarray]] = {k: [] for k in TRAJECTORY_KEYS}
        self.finished: list[tuple[float, int]] = []

    def observe(self) -> np.ndarray:
        if self.obs is None:
            self.obs = np.stack(
                [env.reset(seed=seed)[0] for env, seed in zip(self.envs, self.seeds, strict=True)]
            ).astype(np.float32)
        self.record = {k: [] for k in TRAJECTORY_KEYS}
        self.finished = []
        return self.obs

    def step(self, act: Payload) -> np.ndarray:
        assert self.obs is not None, "env stepped before it was observed"
        actions = np.asarray(act["actions"], dtype=np.float32)
        rewards = np.zeros(len(self.envs), dtype=np.float32)
        dones = np.zeros(len(self.envs), dtype=np.float32)
        truncated = np.zeros(len(self.envs), dtype=np.float32)
        final_obs = np.zeros_like(self.obs)
        next_obs = np.empty_like(self.obs)
        for i, env in enumerate(self.envs):
            space = env.action_space
            assert isinstance(space, gym.spaces.Box)
            low, high = space.low, space.high
            obs, reward, term, trunc, _ = env.step(np.clip(actions[i], low, high))
            rewards[i] = reward
            self.episode_return[i] += reward
            self.episode_length[i] += 1
            if term or trunc:
                dones[i] = 1.0
                if trunc and not term:
                    truncated[i] = 1.0
                    final_obs[i] = obs
                self.finished.append((float(self.episode_return[i]), int(self.episode_length[i])))
                self.episode_return[i], self.episode_length[i] = 0.0, 0
                obs, _ = env.reset()
            next_obs[i] = obs
        for key, value in (
            ("obs", act["norm_obs"]),
            ("raw_obs", self.obs),
            ("actions", actions),
            ("log_probs", act["log_probs"]),
            ("values", act["values"]),
            ("rewards", rewards),
            ("dones", dones),
            ("truncated", truncated),
            ("final_obs", final_obs),
        ):
            self.record[key].append(np.asarray(value, dtype=np.float32))
        self.obs = next_obs
        return next_obs

    def checkpoint(self) -> dict[str, Any]:
        """Between iterations: each environment's full MuJoCo state, RNG and step count, and the open episodes."""
        return {
            "obs": None if self.obs is None else self.obs.copy(),
            "episode_return": self.episode_return.copy(),
            "episode_length": self.episode_length.copy(),
            "envs": [_env_state(env) for env in self.envs],
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`checkpoint` (environments built with the same seeds)."""
        self.obs = None if state["obs"] is None else np.array(state["obs"])
        self.episode_return = np.array(state["episode_return"])
        self.episode_length = np.array(state["episode_length"])
        for env, seed, env_state in zip(self.envs, self.seeds, state["envs"], strict=True):
            _set_env_state(env, seed, env_state)

    def trajectory(self) -> dict[str, np.ndarray]:
        """Environment-major ``[n, T, ...]`` arrays plus the bootstrap observation ``next_obs`` ``[n, obs]``."""
        out = {key: np.stack(values, axis=1) for key, values in self.record.items()}
        assert self.obs is not None
        out["next_obs"] = self.obs.copy()
        return out


class EnvWorker:
    """Steps its stages' environments when the executor runs ``env_step`` ops."""

    collective = False
    """Calls no collective: its replicas need no group (:attr:`executor.WorkerSpec.collective`)."""

    def setup(self, config: EmbodiedConfig, context: WorkerContext) -> None:
        self.config = config
        self.stages = []
        for stage in range(context.num_micro_batches):  # the loop's pipeline stages
            first, last = context.my_groups(stage)  # this replica's environments of the stage
            self.stages.append(_Stage(config.env_id, [config.seed * 100_003 + i for i in range(first, last)]))

    def compute(
        self, op_name: str, micro_batch: int, step: int, inputs: Sequence[Payload]
    ) -> tuple[Payload, dict[str, Any]]:
        assert op_name == "env_step", f"env workers run env_step, not {op_name}"
        stage = self.stages[micro_batch]
        if step == 0:
            return {"obs": stage.observe()}, {}
        obs = stage.step(concat_payloads(inputs))
        if step < self.config.num_steps:
            return {"obs": obs}, {}
        returns = [r for r, _ in stage.finished]
        lengths = [n for _, n in stage.finished]
        return stage.trajectory(), {"episode_returns": returns, "episode_lengths": lengths}

    def state_tensors(self) -> list:
        return []

    def weights(self) -> dict[str, np.ndarray]:
        return {}

    def load_weights(self, payload: Payload) -> None:
        raise AssertionError("env workers receive no weights")

    def checkpoint(self) -> dict[str, Any]:
        """Every stage's environments and open episodes (taken between iterations)."""
        return {"stages": [stage.checkpoint() for stage in self.stages]}

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`checkpoint` of the same replica."""
        for stage, stage_state in zip(self.stages, state["stages"], strict=True):
            stage.restore(stage_state)
