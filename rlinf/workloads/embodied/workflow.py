"""The embodied PPO macro flow (rlinf derives its plans).

Components: ``env`` (vectorised MuJoCo) and ``rollout`` (the policy) in a loop, ``env -> actor`` as a barrier
edge carrying the trajectories, and weight sync ``actor -> rollout`` every iteration.
"""

from __future__ import annotations

from rlinf.api import Component, Edge, Loop, WeightSync, Workflow
from rlinf.workloads.embodied.config import EmbodiedConfig
from rlinf.workloads.embodied.policy import parameter_bytes


def embodied_workflow(config: EmbodiedConfig, obs_dim: int, act_dim: int) -> Workflow:
    """The macro flow for ``config`` with the environment's observation and action sizes."""
    weights = parameter_bytes(obs_dim, act_dim, config.hidden_sizes)
    per_transition = 4 * (3 * obs_dim + act_dim + 6)
    return Workflow(
        name=f"ppo-{config.env_id}",
        components=[
            Component(name="env", role="env", cpu_ok=True),
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
