"""RL algorithms as pure functions over tensors (advantages, losses); no executor, no processes."""
