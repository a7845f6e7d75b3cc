"""The configuration of the arithmetic GRPO run and its YAML loader.

Every section is an attrs frozen class validated in its constructor. :func:`load_config` reads a YAML file
whose keys must all be known: an unknown key (a typo) raises :class:`~rlinf.core.errors.ConfigError` naming the key
and listing the valid ones, instead of being ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from rlinf.algorithms.grpo import GrpoConfig
from rlinf.api import structure_config
from rlinf.core import limits
from rlinf.core.errors import integer, non_negative, positive, require
from rlinf.core.inputs import load_yaml
from rlinf.workloads.arith.task import TaskConfig

MAX_SEED = 2**32 - 1
MAX_PARAMETERS = 100_000_000
"""Weights of the arithmetic transformer (400 MB in float32): building the workflow instantiates the model."""
MAX_NEW_TOKENS = 4096
"""Longest response the demonstration transformer is built for: its position table has a row per token of the
longest sequence, so a huge ``grpo.max_new_tokens`` would ask for gigabytes before anything runs."""


@attrs.frozen(kw_only=True)
class ModelSizes:
    """Transformer sizes; the vocabulary and maximum length follow from the tokenizer and the task."""

    d_model: int = 128
    num_layers: int = 2
    num_heads: int = 4
    d_ff: int = 512

    def __attrs_post_init__(self) -> None:
        for name in ("d_model", "num_layers", "num_heads", "d_ff"):
            positive(f"model.{name}", getattr(self, name))
        require(
            self.d_model % self.num_heads == 0,
            "model.num_heads",
            self.num_heads,
            f"must divide d_model={self.d_model}",
            "pick num_heads that divides d_model",
        )
        weights = self.num_layers * (4 * self.d_model**2 + 2 * self.d_model * self.d_ff)
        require(
            weights <= MAX_PARAMETERS,
            "model.d_model",
            self.d_model,
            f"with num_layers={self.num_layers} and d_ff={self.d_ff} makes {weights:,} weights, more than this "
            f"small demonstration transformer allows ({MAX_PARAMETERS:,})",
            "use smaller sizes (the workload instantiates the model to size its state), or a Hugging Face workload",
        )


@attrs.frozen(kw_only=True)
class WarmStartConfig:
    """Supervised steps on generated worked solutions before GRPO."""

    num_steps: int = 300
    batch_size: int = 64
    lr: float = 1e-3
    teacher_error_rate: float = 0.0
    """Probability that a worked solution comes from a sloppy teacher who forgets carries."""

    def __attrs_post_init__(self) -> None:
        non_negative("warm_start.num_steps", self.num_steps)
        require(
            0.0 <= self.teacher_error_rate <= 1.0,
            "warm_start.teacher_error_rate",
            self.teacher_error_rate,
            "must be in [0, 1]",
            "use a probability",
        )
        positive("warm_start.batch_size", self.batch_size)
        positive("warm_start.lr", self.lr)


@attrs.frozen(kw_only=True)
class RlConfig:
    """The GRPO loop."""

    num_iterations: int = 100
    prompts_per_iteration: int = 32
    group_size: int = 8
    max_new_tokens: int = 6
    temperature: float = 1.0
    lr: float = 3e-4
    optimizer_steps_per_iteration: int = 1
    """The iteration's batch is split into this many mini-batches, one optimizer step each (PPO-style); from
    the second step on the policy differs from the old policy and the ratio clipping acts."""
    micro_batch_size: int = 64
    """Sequences per micro-batch; an optimizer step accumulates gradients over its micro-batches."""
    clip_eps: float = 0.2
    kl_coef: float = 0.0
    max_grad_norm: float = 1.0
    warmup_steps: int = 10
    """Linear learning-rate warm-up of the GRPO optimizer."""
    long_tail_fraction: float = 0.0
    """Fraction of each iteration's prompts whose responses may not end before ``max_new_tokens`` (EOS is
    suppressed, as vLLM's ``min_tokens`` does): a controlled long tail of response lengths for pipelining
    benchmarks. 0 for training."""

    def __attrs_post_init__(self) -> None:
        require(
            0.0 <= self.long_tail_fraction <= 1.0,
            "grpo.long_tail_fraction",
            self.long_tail_fraction,
            "must be in [0, 1]",
            "use a fraction of the prompts",
        )
        for name in (
            "num_iterations",
            "prompts_per_iteration",
            "max_new_tokens",
            "lr",
            "micro_batch_size",
            "optimizer_steps_per_iteration",
        ):
            positive(f"grpo.{name}", getattr(self, name))
        integer(
            "grpo.max_new_tokens",
            self.max_new_tokens,
            minimum=1,
            maximum=MAX_NEW_TOKENS,
            fix=f"use at most {MAX_NEW_TOKENS:,} (answers here are a few tokens; grpo.long_tail_fraction forces "
            "responses to run to max_new_tokens)",
        )
        require(
            self.group_size >= 2,
            "grpo.group_size",
            self.group_size,
            "must be >= 2 (advantages are relative within a group)",
            "use groups of 2 or more responses",
        )
        positive("grpo.temperature", self.temperature)
        for name in ("clip_eps", "kl_coef", "max_grad_norm", "warmup_steps"):
            non_negative(f"grpo.{name}", getattr(self, name))
        bound = limits.current().max_batch_size
        if self.prompts_per_iteration * self.group_size > bound:
            raise limits.exceeded(
                "grpo.prompts_per_iteration",
                self.prompts_per_iteration,
                "samples (prompts x group_size)",
                "max_batch_size",
                bound,
            )

    def grpo(self) -> GrpoConfig:
        return GrpoConfig(clip_eps=self.clip_eps, kl_coef=self.kl_coef)


@attrs.frozen(kw_only=True)
class EvalConfig:
    """Held-out accuracy: greedy decoding on a fixed problem set."""

    num_problems: int = 500
    seed: int = 12345
    every_iterations: int = 10

    def __attrs_post_init__(self) -> None:
        positive("eval.num_problems", self.num_problems)
        positive("eval.every_iterations", self.every_iterations)
        integer("eval.seed", self.seed, minimum=0, maximum=MAX_SEED)


MODES = ("collocated", "disaggregated", "hybrid")


@attrs.frozen(kw_only=True)
class ExecutionConfig:
    """How ``rlinf train`` runs the workload with real workers (ignored by the single-process learn script)."""

    mode: str = "collocated"
    """Placement when neither ``--mode`` nor ``--plan`` is given."""
    granularity: int = 4
    """Micro-batches per stream edge (rollout -> reward -> inference -> actor); 1 hands over the whole batch."""
    offload: tuple[str, ...] = ()
    """Components that offload their state when they yield a shared device."""
    checkpoint_every: int = 50
    """Iterations between checkpoints (the last iteration is always saved)."""
    warm_start_cache: str = "runs/warm_start_cache"
    """Directory of warm-started weights, keyed by a hash of the settings that determine them."""
    heldout_eval: bool = True
    """Evaluate held-out accuracy in the actor every ``eval.every_iterations`` iterations and at the end."""

    def __attrs_post_init__(self) -> None:
        require(self.mode in MODES, "execution.mode", self.mode, "unknown mode", f"use one of {list(MODES)}")
        integer(
            "execution.granularity",
            self.granularity,
            minimum=1,
            maximum=limits.current().max_micro_batches,
            fix="give the micro-batches per stream edge",
        )
        positive("execution.checkpoint_every", self.checkpoint_every)
        known = ("rollout", "reward", "inference", "actor")
        for name in self.offload:
            require(
                name in known, "execution.offload", name, "unknown component", f"use some of {list(known)}"
            )
        require(
            bool(self.warm_start_cache),
            "execution.warm_start_cache",
            self.warm_start_cache,
            "must not be empty",
            "name a directory",
        )


@attrs.frozen(kw_only=True)
class BackendNames:
    rollout: str = "torch"
    train: str = "torch"


@attrs.frozen(kw_only=True)
class ArithGrpoConfig:
    """The whole run."""

    seed: int = 0
    num_threads: int = 2
    """torch intra-op threads of the learning script."""
    model: ModelSizes = ModelSizes()
    task: TaskConfig = TaskConfig()
    warm_start: WarmStartConfig = WarmStartConfig()
    grpo: RlConfig = RlConfig()
    eval: EvalConfig = EvalConfig()
    backends: BackendNames = BackendNames()
    execution: ExecutionConfig = ExecutionConfig()

    def __attrs_post_init__(self) -> None:
        positive("num_threads", self.num_threads)
        integer("seed", self.seed, minimum=0, maximum=MAX_SEED)


def config_from_mapping(values: Mapping[str, Any], source: str = "config") -> ArithGrpoConfig:
    """Build the config from nested mappings (missing keys keep their defaults; types checked and unknown keys
    refused by :func:`rlinf.structure_config`)."""
    return structure_config(ArithGrpoConfig, values, source)


WORKLOAD = "grpo_arith"
"""The ``workload:`` key of a config file that ``rlinf train`` reads (:mod:`rlinf.app.jobs`)."""


def load_config(path: str | Path) -> ArithGrpoConfig:
    """Read a YAML config; unknown keys and invalid values raise :class:`ConfigError`.

    A top-level ``workload: grpo_arith`` (the key ``rlinf train`` dispatches on) is accepted and dropped."""
    values = load_yaml(path, "config", what="grpo_arith YAML config") or {}
    if isinstance(values, dict) and "workload" in values:
        workload = values.pop("workload")
        require(
            workload == WORKLOAD,
            "workload",
            workload,
            f"this file is not a {WORKLOAD} config",
            f"use workload: {WORKLOAD}",
        )
    return config_from_mapping(values)
