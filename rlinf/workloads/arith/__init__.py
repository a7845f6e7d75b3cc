"""GRPO on a small decoder-only transformer for verifiable multi-digit addition (issue 6, workload half).

Modules: ``task`` (problems, worked solutions, verifier), ``tokenizer``, ``model`` (the transformer),
``generation`` (KV-cache sampling, streaming groups, log-probabilities), ``batches`` (training batches),
``backends`` (rollout/train backend protocols, torch implementations, registry), ``vllm_backend`` and
``megatron_backend`` (optional GPU backends, lazily imported), ``components`` (rollout, reward, inference,
actor, weight sync), ``config`` (YAML loader) and ``learn`` (the single-process learning script).
"""
