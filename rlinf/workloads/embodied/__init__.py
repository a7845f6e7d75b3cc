"""Embodied PPO on gymnasium MuJoCo: config, policy, the env / rollout / actor workers, the workflow and plans."""

from rlinf.workloads.embodied.config import EmbodiedConfig, check_env_id, config_from_dict
from rlinf.workloads.embodied.workflow import embodied_workflow, plan_for_mode

__all__ = [
    "EmbodiedConfig",
    "check_env_id",
    "config_from_dict",
    "embodied_workflow",
    "plan_for_mode",
]
