"""RL workloads (tasks, models, components); they know nothing of the executor."""
