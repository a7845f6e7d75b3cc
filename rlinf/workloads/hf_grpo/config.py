"""The typed configuration of GRPO on a Hugging Face causal LM (``examples/grpo_hf.yaml``).

Every section is an attrs frozen class validated in its constructor; :func:`rlinf.api.structure_config` builds the
tree from the YAML mapping and refuses unknown keys. The model is either a local checkpoint directory
(``model.path``) or built from ``model.config`` (sizes of a Qwen2 or Llama model, with a BPE tokenizer trained on
the task), saved with ``save_pretrained`` and loaded back through ``from_pretrained``.
"""

from __future__ import annotations

from types import MappingProxyType

import attrs

from rlinf.algorithms.grpo import GrpoConfig
from rlinf.api import integer, positive, require
from rlinf.workloads.hf_grpo.task import (
    HELDOUT_SETS,
    HeldoutSets,
    TaskConfig,
    WordProblemsTask,
    heldout_sets,
    task_config,
)

ARCHITECTURES = ("qwen2", "llama")
BACKEND_NAMES = MappingProxyType(
    {"rollout": ("hf", "hf-generate", "vllm"), "inference": ("hf", "megatron"), "actor": ("hf", "megatron")}
)
"""The backends each model-holding component may run on (``rlinf.workloads.hf_grpo.backends``); ``hf`` is the
default."""


@attrs.frozen(kw_only=True)
class ModelSizes:
    """A small causal LM built from scratch (tests, demos, CPU runs)."""

    architecture: str = "qwen2"
    """``qwen2`` or ``llama`` (``transformers``' Qwen2Config / LlamaConfig)."""
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    """Key/value heads (grouped-query attention); must divide ``num_heads``."""
    intermediate_size: int = 256
    vocab_size: int = 512
    """Most tokens of the BPE trained on the task's text (the embedding has exactly this many rows)."""
    max_position_embeddings: int = 512
    tie_word_embeddings: bool = False
    """Whether the output layer shares the input embedding's weights (Qwen2.5 and Llama 3.2 small models do)."""
    rope_theta: float = 10000.0
    """Base of the rotary position embedding."""

    def __attrs_post_init__(self) -> None:
        require(
            self.architecture in ARCHITECTURES,
            "model.config.architecture",
            self.architecture,
            "unknown architecture",
            f"use one of {list(ARCHITECTURES)}",
        )
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size"):
            positive(f"model.config.{name}", getattr(self, name))
        require(
            self.hidden_size % self.num_heads == 0,
            "model.config.num_heads",
            self.num_heads,
            f"must divide hidden_size={self.hidden_size}",
            "pick num_heads that divides hidden_size",
        )
        require(
            self.num_heads % self.num_kv_heads == 0,
            "model.config.num_kv_heads",
            self.num_kv_heads,
            f"must divide num_heads={self.num_heads}",
            "pick num_kv_heads that divides num_heads",
        )
        require(
            self.vocab_size >= 300,
            "model.config.vocab_size",
            self.vocab_size,
            "must be >= 300 (256 bytes, 2 special tokens and some merges)",
            "use 512",
        )
        require(
            self.max_position_embeddings >= 64,
            "model.config.max_position_embeddings",
            self.max_position_embeddings,
            "must be >= 64",
            "use 512",
        )


MODEL_PRESETS = MappingProxyType(
    {
        "tiny": ModelSizes(),
        # The tiny model with an embedding sized for the addition task's BPE (256 bytes and 2 special tokens: digits
        # are single tokens and "+", "=" do not merge) and positions for its short sequences (8 + 6 tokens).
        "tiny-addition": ModelSizes(vocab_size=300, max_position_embeddings=64),
        # The shapes of public checkpoints (their config.json), built with random weights: what rlinf does with a
        # model of that size (memory, throughput), not what it learns. The tokenizer is the task's own BPE.
        "qwen2.5-0.5b": ModelSizes(
            architecture="qwen2", hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2,
            intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768, tie_word_embeddings=True,
            rope_theta=1_000_000.0,
        ),
        "qwen2.5-1.5b": ModelSizes(
            architecture="qwen2", hidden_size=1536, num_layers=28, num_heads=12, num_kv_heads=2,
            intermediate_size=8960, vocab_size=151936, max_position_embeddings=32768, tie_word_embeddings=True,
            rope_theta=1_000_000.0,
        ),
        "llama-3.2-1b": ModelSizes(
            architecture="llama", hidden_size=2048, num_layers=16, num_heads=32, num_kv_heads=8,
            intermediate_size=8192, vocab_size=128256, max_position_embeddings=131072, tie_word_embeddings=True,
            rope_theta=500_000.0,
        ),
    }
)  # fmt: skip
"""``model.config: <name>``: model shapes by name."""


def _sizes(value: ModelSizes | str | None) -> ModelSizes | None:
    """A preset's sizes for its name (:data:`MODEL_PRESETS`); sizes as they are."""
    if not isinstance(value, str):
        return value
    require(
        value in MODEL_PRESETS,
        "model.config",
        value,
        "unknown model preset",
        f"use one of {sorted(MODEL_PRESETS)} or give the sizes (architecture, hidden_size, ...)",
    )
    return MODEL_PRESETS[value]


@attrs.frozen(kw_only=True)
class ModelConfig:
    """Which causal LM every component runs."""

    path: str | None = None
    """A local Hugging Face checkpoint directory (``config.json``, weights, tokenizer files). Nothing is ever
    downloaded: point this at a checkpoint on disk. When set, ``config`` has no effect, and GRPO starts from the
    checkpoint's own weights, tokenizer and special tokens (no warm start unless ``warm_start.enabled``)."""
    config: ModelSizes | None = attrs.field(default=None, converter=_sizes)
    """Sizes of a model built from scratch when ``path`` is not set, or a preset's name (:data:`MODEL_PRESETS`:
    ``tiny``, ``tiny-addition``, ``qwen2.5-0.5b``, ``qwen2.5-1.5b``, ``llama-3.2-1b``)."""

    def __attrs_post_init__(self) -> None:
        require(
            self.path is None or bool(self.path.strip()),
            "model.path",
            self.path,
            "must not be empty",
            "name a checkpoint directory or leave model.path unset",
        )
        require(
            self.path is not None or self.config is not None,
            "model",
            None,
            "needs model.path or model.config",
            "set model.path to a checkpoint directory or give model.config sizes",
        )


@attrs.frozen(kw_only=True)
class WarmStartConfig:
    """Supervised steps on worked solutions before GRPO (cached by the settings they depend on)."""

    enabled: bool | None = None
    """Whether the warm start runs. Unset: it does for a model built from ``model.config`` and does not for a
    checkpoint (``model.path``), whose weights GRPO then starts from unchanged; ``true`` trains a checkpoint's
    weights first, ``false`` starts a built model's GRPO from its random weights."""
    num_steps: int = 300
    """Steps when the warm start runs; 0 starts GRPO from the model as loaded."""
    batch_size: int = 32
    lr: float = 2e-3
    teacher_error_rate: float = 0.0
    """Probability that a worked solution comes from a sloppy teacher who forgets carries in additions: the
    policy starts with a systematic error that GRPO can find and fix."""

    def __attrs_post_init__(self) -> None:
        require(
            0.0 <= self.teacher_error_rate <= 1.0,
            "warm_start.teacher_error_rate",
            self.teacher_error_rate,
            "must be in [0, 1]",
            "use a probability",
        )
        require(self.num_steps >= 0, "warm_start.num_steps", self.num_steps, "must be >= 0", "use 0 or more")
        positive("warm_start.batch_size", self.batch_size)
        positive("warm_start.lr", self.lr)


@attrs.frozen(kw_only=True)
class RlConfig:
    """The GRPO loop."""

    num_iterations: int = 50
    """The run's iterations (``execution.iterations``, copied by the workload's ``load_config``): the held-out
    eval also runs after the last."""
    prompts_per_iteration: int = 16
    group_size: int = 8
    max_new_tokens: int = 160
    """Longest response, EOS included."""
    max_prompt_tokens: int = 160
    """Longest prompt (payloads have fixed widths); a longer prompt is an error."""
    temperature: float = 1.0
    """Sampling temperature; the inference and actor score tokens under the same ``softmax(logits / T)``, so the
    policy GRPO optimizes is the one that sampled (greedy decoding, the held-out eval, is the same for every T)."""
    lr: float = 3e-4
    warmup_steps: int = 5
    """Linear learning-rate warm-up of the GRPO optimizer."""
    optimizer_steps_per_iteration: int = 1
    """The iteration's batch is cut into this many mini-batches, one optimizer step each."""
    micro_batch_size: int = 32
    """Sequences per forward/backward pass (gradient accumulation within a mini-batch)."""
    clip_eps: float = 0.2
    kl_coef: float = 0.0
    """Weight of the k3 KL penalty to the model GRPO starts from (the reference policy: the warm start, or the
    checkpoint as loaded when there is none); 0: no reference model."""
    max_grad_norm: float = 1.0
    """0 disables gradient clipping."""
    skip_zero_advantages: bool = False
    """The inference and actor skip responses whose advantage is 0 (every response of a group whose rewards are
    all equal): with ``kl_coef`` 0 such a response adds nothing to the gradient, so the update is the same (the
    mini-batch's mean still divides by all its responses) for less work. No effect when ``kl_coef > 0``."""

    def __attrs_post_init__(self) -> None:
        for name in (
            "num_iterations",
            "prompts_per_iteration",
            "max_new_tokens",
            "max_prompt_tokens",
            "lr",
            "micro_batch_size",
            "optimizer_steps_per_iteration",
        ):
            positive(f"grpo.{name}", getattr(self, name))
        require(
            self.group_size >= 2,
            "grpo.group_size",
            self.group_size,
            "must be >= 2 (advantages are relative within a group)",
            "use groups of 2 or more responses",
        )
        require(self.temperature > 0, "grpo.temperature", self.temperature, "must be > 0", "use 1.0")
        require(self.warmup_steps >= 0, "grpo.warmup_steps", self.warmup_steps, "must be >= 0", "use 5")
        require(self.max_grad_norm >= 0, "grpo.max_grad_norm", self.max_grad_norm, "must be >= 0", "use 1.0")

    @property
    def skips_zero_advantages(self) -> bool:
        """Whether zero-advantage responses are left out of scoring and training (never with a KL penalty)."""
        return self.skip_zero_advantages and self.kl_coef == 0.0

    def grpo(self) -> GrpoConfig:
        """The objective's hyperparameters (:mod:`rlinf.algorithms.grpo`)."""
        return GrpoConfig(clip_eps=self.clip_eps, kl_coef=self.kl_coef)


@attrs.frozen(kw_only=True)
class EvalConfig:
    """Held-out accuracy: greedy decoding on fixed problem sets, excluded from training draws. There are two
    disjoint sets of ``num_problems`` each (:class:`~rlinf.workloads.hf_grpo.task.HeldoutSets`): ``validation``
    (tune settings on it) and ``test`` (report final figures on it, choose nothing by it)."""

    num_problems: int = 200
    """Problems in each held-out set."""
    seed: int = 12345
    """Seed of the validation set (the single held-out set of earlier versions: the same problems)."""
    test_seed: int = 67890
    """Seed of the test set, whose draws skip the validation prompts."""
    sets: tuple[str, ...] = ("validation",)
    """The sets evaluated every ``every_iterations`` iterations and at the end, each reported as
    ``<set>_accuracy`` (and at the warm start as ``warm_start_<set>_accuracy``); the first is also
    ``heldout_accuracy`` (and ``warm_start_accuracy``): the set the run reports. The default tunes on validation;
    report a final figure with ``test`` first."""
    every_iterations: int = 10
    batch_size: int = 64
    enabled: bool = True
    """Evaluate held-out accuracy in the actor every ``every_iterations`` iterations and after the last."""

    def __attrs_post_init__(self) -> None:
        for name in ("num_problems", "every_iterations", "batch_size"):
            positive(f"eval.{name}", getattr(self, name))
        require(
            self.test_seed != self.seed,
            "eval.test_seed",
            self.test_seed,
            "must differ from eval.seed (the test set needs its own seed stream)",
            "choose another seed",
        )
        require(
            bool(self.sets) and len(set(self.sets)) == len(self.sets),
            "eval.sets",
            list(self.sets),
            "must name one or more sets, each once",
            f"use some of {list(HELDOUT_SETS)}",
        )
        for name in self.sets:
            require(
                name in HELDOUT_SETS,
                "eval.sets",
                name,
                "unknown held-out set",
                f"use some of {list(HELDOUT_SETS)}",
            )


@attrs.frozen(kw_only=True)
class BackendConfig:
    """Which engine runs each model-holding component (``backends:`` in the YAML)."""

    rollout: str = "hf"
    """``hf`` (transformers' model step by step, a KV cache that drops finished groups, which stream out),
    ``hf-generate`` (transformers' ``generate`` with a static KV cache; groups come out at the end) or ``vllm``
    (vLLM's offline engine; needs vllm and a GPU)."""
    inference: str = "hf"
    """``hf`` or ``megatron`` (megatron-core ``GPTModel``; needs megatron-core and a GPU)."""
    actor: str = "hf"
    """``hf`` or ``megatron``."""

    def __attrs_post_init__(self) -> None:
        for component, names in BACKEND_NAMES.items():
            value = getattr(self, component)
            require(
                value in names,
                f"backends.{component}",
                value,
                "unknown backend",
                f"use one of {list(names)}",
            )


MAX_SEED = 2**32 - 1


@attrs.frozen(kw_only=True)
class HfGrpoConfig:
    """The whole run."""

    seed: int = 0
    """The run's seed (``execution.seed``, copied by the workload's ``load_config``)."""
    model: ModelConfig = ModelConfig(config=ModelSizes())
    task: TaskConfig = attrs.field(default=WordProblemsTask(), converter=task_config)
    """``kind: word_problems`` (the default) or ``kind: addition``, with that task's keys
    (:mod:`~rlinf.workloads.hf_grpo.task`)."""
    warm_start: WarmStartConfig = WarmStartConfig()
    grpo: RlConfig = RlConfig()
    eval: EvalConfig = EvalConfig()
    backends: BackendConfig = BackendConfig()
    cache_dir: str = "runs/hf_grpo_cache"
    """Built models and warm starts, each in a folder named by a hash of the settings it depends on."""

    @property
    def trains_warm_start(self) -> bool:
        """Whether GRPO starts from a warm start rather than the model as loaded: ``warm_start.enabled`` when set,
        else only for a model built from ``model.config`` (never silently for a user's checkpoint), and never with
        ``warm_start.num_steps`` 0."""
        enabled = self.model.path is None if self.warm_start.enabled is None else self.warm_start.enabled
        return enabled and self.warm_start.num_steps > 0

    def heldout_sets(self) -> HeldoutSets:
        """The run's validation and test problems (:func:`~rlinf.workloads.hf_grpo.task.heldout_sets`)."""
        return heldout_sets(
            self.eval.num_problems, self.task, validation_seed=self.eval.seed, test_seed=self.eval.test_seed
        )

    def __attrs_post_init__(self) -> None:
        integer("seed", self.seed, minimum=0, maximum=MAX_SEED, fix=f"use a seed in [0, {MAX_SEED}]")
        require(
            bool(self.cache_dir.strip()), "cache_dir", self.cache_dir, "must not be empty", "name a directory"
        )
        distinct = self.task.num_distinct_problems
        require(
            distinct is None or 2 * self.eval.num_problems <= distinct // 2,
            "eval.num_problems",
            self.eval.num_problems,
            f"makes two held-out sets (validation and test) of more than half of the task's {distinct} distinct "
            "problems (training draws exclude the held-out ones)",
            "use fewer held-out problems or a larger task (more digits)",
        )
        sizes = self.model.config
        if self.model.path is None and sizes is not None:
            longest = self.grpo.max_prompt_tokens + self.grpo.max_new_tokens
            require(
                longest <= sizes.max_position_embeddings,
                "grpo.max_new_tokens",
                self.grpo.max_new_tokens,
                f"with grpo.max_prompt_tokens={self.grpo.max_prompt_tokens} makes sequences of {longest} tokens, "
                f"more than the model's {sizes.max_position_embeddings} positions",
                "lower grpo.max_new_tokens or grpo.max_prompt_tokens, or raise model.config.max_position_embeddings",
            )
