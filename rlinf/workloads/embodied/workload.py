"""Embodied PPO as a workload (:class:`rlinf.api.Workload`): env and rollout in a loop pipelined by the plan, the
actor trained on the trajectories, weights synced back every iteration."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from rlinf.api import IterationResult, RunSettings, WorkerContext, Workflow, episode_mean
from rlinf.workloads.embodied.actor_worker import ActorWorker, check_share
from rlinf.workloads.embodied.config import EmbodiedConfig, check_env_id, config_from_dict
from rlinf.workloads.embodied.env_worker import EnvWorker
from rlinf.workloads.embodied.rollout_worker import RolloutWorker
from rlinf.workloads.embodied.workflow import embodied_workflow


@attrs.frozen
class EmbodiedWorkload:
    """PPO on a gymnasium MuJoCo task (CleanRL's continuous-action recipe)."""

    name: str = "embodied_ppo"
    headline: Mapping[str, str] = attrs.field(
        factory=lambda: {"episodic_return": "ret", "env_steps_per_s": "sps"}
    )

    def load_config(self, data: Mapping[str, Any], source: str, settings: RunSettings) -> EmbodiedConfig:
        """Validate the config (unknown keys are errors); the workers seed from the run's seed."""
        return attrs.evolve(config_from_dict(dict(data), source), seed=settings.seed)

    def workflow(self, config: EmbodiedConfig) -> Workflow:
        """env <-> rollout loop, trajectories to the actor, weight sync back."""
        obs_dim, act_dim = check_env_id(config.env_id)
        return embodied_workflow(config, obs_dim, act_dim)

    def check_replica(self, config: EmbodiedConfig, context: WorkerContext) -> None:
        """An actor replica's share holds a sample per minibatch (refused before any worker starts)."""
        if context.component == "actor":
            check_share(config, context)

    def workers(self, config: EmbodiedConfig) -> dict[str, type]:
        """The env, rollout and actor workers."""
        return {"env": EnvWorker, "rollout": RolloutWorker, "actor": ActorWorker}

    def metrics(self, result: IterationResult, config: EmbodiedConfig, iteration: int) -> dict[str, Any]:
        """Returns of finished episodes, env steps/s (whole iteration and rollout loop), losses."""
        timeline = result.timeline
        env_steps = config.num_envs * config.num_steps
        loop_spans = [s for s in timeline.spans if s.name in ("act", "env_step")]
        loop_s = max(s.end_s for s in loop_spans) - min(s.start_s for s in loop_spans)
        returns = [r for info in result.infos for r in info.info.get("episode_returns", [])]
        losses: dict[str, list[float]] = {}
        for info in result.infos:
            if info.op_name == "train":
                for key, value in info.info.items():
                    losses.setdefault(key, []).append(float(value))
        metrics: dict[str, Any] = {
            "iteration": iteration,
            "env_steps": iteration * env_steps,
            "iteration_s": timeline.iteration_s,
            "env_steps_per_s": env_steps / timeline.iteration_s,
            "rollout_env_steps_per_s": env_steps / loop_s if loop_s > 0 else 0.0,
            "episodes": len(returns),
            "episodic_return": float(np.mean(returns)) if returns else None,
        }
        metrics.update({key: float(np.mean(values)) for key, values in sorted(losses.items())})
        return metrics

    def summary(self, recent: Sequence[Mapping[str, Any]]) -> str:
        """Env steps and throughput of the last iteration, and the mean return of the episodes the recent
        iterations finished."""
        last = recent[-1]
        mean, episodes = episode_mean(recent)
        returned = (
            f"no episode finished in the last {len(recent)} iterations"
            if mean is None
            else f"episodic return {mean:.1f} (mean of the {episodes} episodes of the last {len(recent)} iterations)"
        )
        return (
            f"{last['env_steps']} env steps, {last['env_steps_per_s']:.0f} env steps/s (last iteration), "
            f"{returned}"
        )


WORKLOAD = EmbodiedWorkload()
