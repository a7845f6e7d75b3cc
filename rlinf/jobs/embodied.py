"""Embodied PPO on gymnasium MuJoCo as a job: env, rollout and actor workers pipelined by the plan."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

import executor
from rlinf.errors import ConfigError
from rlinf.jobs import RunOptions
from rlinf.plan import Placement, Plan
from rlinf.workflow import Workflow
from rlinf.workloads.embodied.actor_worker import ActorWorker
from rlinf.workloads.embodied.config import EmbodiedConfig, check_env_id, config_from_dict
from rlinf.workloads.embodied.env_worker import EnvWorker
from rlinf.workloads.embodied.rollout_worker import RolloutWorker
from rlinf.workloads.embodied.workflow import check_plan_fits, embodied_workflow, plan_for_mode


@attrs.frozen
class EmbodiedJob:
    """The :class:`rlinf.jobs.Job` of embodied PPO."""

    name: str = "embodied_ppo"

    def config_from_mapping(self, data: Mapping[str, Any], source: str) -> EmbodiedConfig:
        """Validate the config; unknown keys are errors."""
        return config_from_dict(dict(data), source)

    def options(self, config: EmbodiedConfig) -> RunOptions:
        """Iterations, seed, mode and checkpoint interval."""
        return RunOptions(
            iterations=config.iterations,
            seed=config.seed,
            mode=config.mode,
            checkpoint_every=config.checkpoint_every,
        )

    def with_options(
        self, config: EmbodiedConfig, *, iterations: int | None, seed: int | None
    ) -> EmbodiedConfig:
        """Apply --iterations / --seed."""
        if iterations is not None:
            config = attrs.evolve(config, iterations=iterations)
        if seed is not None:
            config = attrs.evolve(config, seed=seed)
        return config

    def workflow(self, config: EmbodiedConfig) -> Workflow:
        """env <-> rollout loop, trajectories to the actor, weight sync back."""
        obs_dim, act_dim = check_env_id(config.env_id)
        return embodied_workflow(config, obs_dim, act_dim)

    def plan_for_mode(self, mode: str, num_devices: int, config: EmbodiedConfig) -> tuple[Plan, int]:
        """Fixed-mode plans (see :func:`rlinf.workloads.embodied.workflow.plan_for_mode`)."""
        return plan_for_mode(mode, num_devices, config)

    def check_plan(self, plan: Plan, config: EmbodiedConfig) -> None:
        """Environments must split evenly over stages and replicas."""
        check_plan_fits(plan, config)

    def with_plan(self, config: EmbodiedConfig, plan: Plan) -> EmbodiedConfig:
        """The loop's pipeline stages and the offload set come from the plan (env workers split by stages)."""
        offload = sorted(plan.offload)
        return attrs.evolve(config, stages=plan.granularity_of("loop"), offload=offload)  # type: ignore[arg-type]

    def probe_plans(self, num_devices: int, config: EmbodiedConfig) -> list[tuple[Plan, int]]:
        """Plans that cover the planner's space on ``num_devices`` devices (see :func:`probe_plans`)."""
        return probe_plans(num_devices, config)

    def worker_specs(self, config: EmbodiedConfig) -> dict[str, executor.WorkerSpec]:
        """The env, rollout and actor workers."""
        return {
            "env": executor.WorkerSpec(factory=EnvWorker, config=config),
            "rollout": executor.WorkerSpec(factory=RolloutWorker, config=config),
            "actor": executor.WorkerSpec(factory=ActorWorker, config=config),
        }

    def iteration_metrics(
        self, result: executor.RunResult, config: EmbodiedConfig, iteration: int
    ) -> dict[str, Any]:
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

    def progress(self, metrics: Mapping[str, Any]) -> dict[str, str]:
        """Return and env steps/s."""
        shown = metrics["episodic_return"]
        return {"ret": "-" if shown is None else f"{shown:.0f}", "sps": f"{metrics['env_steps_per_s']:.0f}"}

    def summary(self, metrics: Mapping[str, Any]) -> str:
        """Env steps, throughput and return of the last iteration."""
        shown = "n/a" if metrics["episodic_return"] is None else f"{metrics['episodic_return']:.1f}"
        return (
            f"{metrics['env_steps']} env steps, {metrics['env_steps_per_s']:.0f} env steps/s (last iteration), "
            f"episodic return {shown}"
        )


def probe_plans(num_devices: int, config: EmbodiedConfig) -> list[tuple[Plan, int]]:
    """Probe plans for the profiling phase, most informative first; each one's logical devices = ``num_devices``.

    The planner places consecutive groups of (env, rollout, actor) on contiguous device blocks and cuts the loop
    into 1..num_envs stages; env_step, act and the loop's transfers cost mostly a per-op round trip, so what
    matters is their cost at each device count and at the smallest, largest and a middle number of environments
    per replica (transfer sizes follow). With ``n`` devices and ``h = n // 2`` the probes are: everything
    collocated on ``n`` devices (1 stage); env + rollout on ``h``, actor on the rest (1 stage: the most
    environments per replica, the actor alone); env on ``h``, rollout + actor on the rest (the most stages: one
    environment per replica, the smallest loop transfers); env on ``h``, rollout on the rest, actor on all (1
    stage: the largest loop transfers, the trajectory transfer); env on ``h``, rollout + actor on the rest with
    stage counts a third and two thirds of the way (a pipelined loop's per-op cost depends on how many stages are
    in flight, not only on environments per op, so intermediate stage counts are measured, not interpolated);
    collocated with rollout and actor offloaded (onload/offload costs); collocated with the most stages that
    split evenly. Plans the config cannot run (uneven splits) are skipped."""
    all_devices = tuple(range(num_devices))
    half = num_devices // 2
    first, rest = tuple(range(half)), tuple(range(half, num_devices))
    layouts: list[tuple[dict[str, tuple[int, ...]], str, frozenset[str]]] = [
        ({"env": all_devices, "rollout": all_devices, "actor": all_devices}, "fewest", frozenset())
    ]
    if half >= 1:
        layouts += [
            ({"env": first, "rollout": first, "actor": rest}, "fewest", frozenset()),
            ({"env": first, "rollout": rest, "actor": rest}, "most", frozenset()),
            ({"env": first, "rollout": rest, "actor": all_devices}, "fewest", frozenset()),
        ]
    if half >= 1:
        layouts += [
            ({"env": first, "rollout": rest, "actor": rest}, "third", frozenset()),
            ({"env": first, "rollout": rest, "actor": rest}, "two-thirds", frozenset()),
        ]
    layouts += [
        (
            {"env": all_devices, "rollout": all_devices, "actor": all_devices},
            "middle",
            frozenset({"rollout", "actor"}),
        ),
        ({"env": all_devices, "rollout": all_devices, "actor": all_devices}, "most", frozenset()),
    ]
    out: list[tuple[Plan, int]] = []
    for placement, which, offload in layouts:
        stages = _stages(config, len(placement["env"]), len(placement["rollout"]), which)
        plan = Plan(
            placements=[Placement(component=name, devices=ids) for name, ids in placement.items()],
            granularity={"loop": stages},
            offload=offload,
        )
        try:
            check_plan_fits(plan, attrs.evolve(config, stages=stages))
        except ConfigError:
            continue
        if all(plan != known for known, _ in out):
            out.append((plan, num_devices))
    return out


def _stages(config: EmbodiedConfig, env_replicas: int, rollout_replicas: int, which: str) -> int:
    """The fewest (1), most, middle, a third or two thirds of the way through the loop stage counts whose
    environments split over the replicas."""
    replicas = max(env_replicas, rollout_replicas)
    fitting = [
        s
        for s in range(1, config.num_envs + 1)
        if config.num_envs % s == 0 and (config.num_envs // s) % replicas == 0
    ]
    if which == "fewest":
        return fitting[0]
    if which == "most":
        return fitting[-1]
    if which == "third":
        return fitting[len(fitting) // 3]
    if which == "two-thirds":
        return fitting[2 * len(fitting) // 3]
    return fitting[len(fitting) // 2]


JOB = EmbodiedJob()
