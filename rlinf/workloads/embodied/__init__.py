"""Embodied PPO on gymnasium MuJoCo: config, policy, the env / rollout / actor workers and the workflow; the
workload object is :data:`rlinf.workloads.embodied.workload.WORKLOAD` (built-in name ``embodied_ppo``)."""

from rlinf.workloads.embodied.config import EmbodiedConfig, check_env_id, config_from_dict
from rlinf.workloads.embodied.workflow import embodied_workflow

__all__ = ["EmbodiedConfig", "check_env_id", "config_from_dict", "embodied_workflow"]
