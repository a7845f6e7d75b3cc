"""GRPO on Hugging Face causal language models for multi-step math word problems (issue 13).

Modules: ``task`` (GSM8K-style problems, worked solutions, answer extraction and reward), ``tokenizer`` (a
byte-level BPE trained on the task for models built from a config), ``config`` (the typed YAML config),
``checkpoints`` (checking ``model.path``, building and caching models, loading through ``from_pretrained``),
``generation`` (KV-cache sampling, streaming finished groups), ``payloads`` (executor payloads and response
log-probabilities), ``evaluation`` (held-out accuracy), ``warm_start`` (the cached supervised warm start),
``backends`` (the rollout and policy engine interfaces, their ``transformers`` implementations and the choice of
optional ones), ``megatron_layout`` (Hugging Face <-> megatron-core weight names and layouts), ``vllm_rollout``
and ``megatron_policy`` (the optional GPU engines), ``rollout``, ``scoring`` (reward and inference) and ``actor``
(the workers), and ``workload`` (the :class:`rlinf.Workload`).
"""
