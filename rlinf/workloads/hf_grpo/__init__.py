"""GRPO on Hugging Face causal language models: the one GRPO workload of rlinf (built-in name ``grpo_hf``), on a
verifiable task of its choice (``task.kind``: multi-step math word problems or multi-digit addition).

Modules: ``task`` (the task interface: choosing a task by ``kind``, drawing problems, the held-out set),
``word_problems`` and ``addition`` (the tasks: problems, worked solutions with a sloppy teacher's errors, the
verifier), ``tokenizer`` (a byte-level BPE trained on the task for models built from a config), ``config`` (the
typed YAML config, model presets), ``checkpoints`` (checking ``model.path``, building and caching models, loading
through ``from_pretrained``), ``generation`` (KV-cache sampling, streaming finished groups), ``payloads``
(executor payloads and response log-probabilities), ``evaluation`` (held-out accuracy), ``warm_start`` (the cached
supervised warm start), ``backends`` (the rollout and policy engine interfaces, their ``transformers``
implementations and the choice of optional ones), ``megatron_layout`` (Hugging Face <-> megatron-core weight names
and layouts), ``vllm_rollout`` and ``megatron_policy`` (the optional GPU engines), ``rollout``, ``scoring`` (reward
and inference) and ``actor`` (the workers), and ``workload`` (the :class:`rlinf.api.Workload`).
"""
