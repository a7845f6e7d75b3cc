"""The embodied PPO macro flow and its plans for each mode.

Components: ``env`` (vectorised MuJoCo) and ``rollout`` (the policy) in a loop, ``env -> actor`` as a barrier
edge carrying the trajectories, and weight sync ``actor -> rollout`` every iteration.
"""

from __future__ import annotations

from rlinf.errors import ConfigError, require
from rlinf.plan import Placement, Plan
from rlinf.workflow import Component, Edge, Loop, WeightSync, Workflow
from rlinf.workloads.embodied.config import EmbodiedConfig
from rlinf.workloads.embodied.policy import parameter_bytes

DISAGGREGATED_MIN_DEVICES = 3
"""env, rollout and actor on pairwise disjoint devices."""


def embodied_workflow(config: EmbodiedConfig, obs_dim: int, act_dim: int) -> Workflow:
    """The macro flow for ``config`` with the environment's observation and action sizes."""
    weights = parameter_bytes(obs_dim, act_dim, config.hidden_sizes)
    per_transition = 4 * (3 * obs_dim + act_dim + 6)
    return Workflow(
        name=f"ppo-{config.env_id}",
        components=[
            Component(name="env", role="env"),
            Component(name="rollout", role="rollout", state_bytes=weights),
            Component(name="actor", role="actor", state_bytes=3 * weights),
        ],
        edges=[
            Edge(src="env", dst="actor", kind="barrier", bytes_per_sample=per_transition * config.num_steps)
        ],
        loop=Loop(
            env="env",
            policy="rollout",
            num_steps=config.loop_steps,
            obs_bytes_per_env=4 * obs_dim,
            action_bytes_per_env=4 * (obs_dim + act_dim + 2),
        ),
        weight_sync=[WeightSync(src="actor", dst="rollout", num_bytes=weights)],
        batch_size=config.num_envs,
        unit="env_steps",
    )


def plan_for_mode(mode: str, num_devices: int, config: EmbodiedConfig) -> tuple[Plan, int]:
    """A plan for ``mode`` on ``num_devices`` devices, and the number of logical devices it uses.

    * collocated: every component on every device;
    * disaggregated: env, rollout and actor on disjoint thirds; with fewer than three devices it uses three
      logical devices (the caller maps them onto the physical ones and warns);
    * hybrid: env on the first half, rollout on the second, the actor on all."""
    require(num_devices >= 1, "--devices", num_devices, "must be >= 1", "use at least one device")
    devices = tuple(range(num_devices))
    if mode == "collocated":
        placement = {"env": devices, "rollout": devices, "actor": devices}
        logical = num_devices
    elif mode == "disaggregated":
        logical = max(num_devices, DISAGGREGATED_MIN_DEVICES)
        third = logical // 3
        placement = {
            "env": tuple(range(0, third)),
            "rollout": tuple(range(third, 2 * third)),
            "actor": tuple(range(2 * third, logical)),
        }
    elif mode == "hybrid":
        require(
            num_devices >= 2,
            "--devices",
            num_devices,
            "hybrid needs at least 2 devices (env and rollout apart, actor on both)",
            "use --devices 2 or more, or --mode collocated",
        )
        half = num_devices // 2
        placement = {"env": devices[:half], "rollout": devices[half:], "actor": devices}
        logical = num_devices
    else:
        raise ConfigError("mode", mode, "unknown mode", "use collocated, disaggregated or hybrid")
    plan = Plan(
        placements=[Placement(component=name, devices=ids) for name, ids in placement.items()],
        granularity={"loop": config.stages},
        offload=frozenset(config.offload),  # type: ignore[arg-type]  # attrs converter typed generically
    )
    return plan, logical


def check_plan_fits(plan: Plan, config: EmbodiedConfig) -> None:
    """Raise when the environments do not split evenly over stages and replicas."""
    env_replicas = len(plan.devices_of("env"))
    rollout_replicas = len(plan.devices_of("rollout"))
    per_stage = config.num_envs // config.stages
    for name, replicas in (("env", env_replicas), ("rollout", rollout_replicas)):
        require(
            per_stage % replicas == 0,
            "num_envs",
            config.num_envs,
            f"{per_stage} environments per stage do not split over {replicas} {name} replicas",
            f"use a multiple of {config.stages * replicas} environments",
        )
    actor_replicas = len(plan.devices_of("actor"))
    require(
        config.num_envs % actor_replicas == 0
        and config.num_envs * config.num_steps // actor_replicas >= config.num_minibatches,
        "num_envs",
        config.num_envs,
        f"does not split over {actor_replicas} actor replicas with {config.num_minibatches} minibatches each",
        f"use a multiple of {actor_replicas} environments or fewer minibatches",
    )
