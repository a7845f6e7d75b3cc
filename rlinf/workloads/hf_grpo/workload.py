"""GRPO on a Hugging Face causal LM as a workload (:class:`rlinf.api.Workload`), written against the public API: the
one GRPO workload of rlinf, on any of its verifiable tasks (``task.kind``: word problems or addition).

Components ``rollout -> reward -> inference -> actor`` joined by stream edges (the plan's granularity sets how
many micro-batches flow along them); after training the actor syncs its weights to the rollout and the
inference component through ``state_dict`` arrays. Every worker starts from the same weights: a user's checkpoint
(``model.path``) as it is, or the warm start of a model built from ``model.config``, trained once per settings and
cached (``cache_dir``); ``warm_start.enabled`` overrides either default.
"""

from __future__ import annotations

import random
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from rlinf.api import (
    Component,
    ConfigError,
    Edge,
    IterationResult,
    RlinfWarning,
    RunSettings,
    WeightSync,
    Workflow,
    reported_response_lengths,
    structure_config,
)
from rlinf.workloads.hf_grpo.actor import ActorWorker
from rlinf.workloads.hf_grpo.backends import check_backends, check_packages
from rlinf.workloads.hf_grpo.checkpoints import check_checkpoint, parameter_count
from rlinf.workloads.hf_grpo.config import HfGrpoConfig
from rlinf.workloads.hf_grpo.preflight import check_run
from rlinf.workloads.hf_grpo.rollout import RolloutWorker
from rlinf.workloads.hf_grpo.scoring import InferenceWorker, RewardWorker
from rlinf.workloads.hf_grpo.task import TaskConfig

LOSS_KEYS = ("loss", "policy_loss", "kl", "clip_fraction", "grad_norm")
STALENESS_KEYS = ("policy_lag_max", "policy_lag_mean", "behaviour_kl")
"""Reported by each actor replica at the end of an iteration: the largest lag is the largest of any replica, the
means are averaged over the replicas (equal shares)."""
_PIECES = re.compile(r" ?[A-Za-z]+| |\d|\n|[^\sA-Za-z\d]")


def mean_response_tokens(task: TaskConfig, max_new_tokens: int, *, num_problems: int = 500) -> float:
    """Expected tokens of a response: the worked solutions of ``num_problems`` problems (fixed seed), counted as a
    byte-level BPE with single-digit numbers splits them (a word, a digit, a space or a sign each), plus EOS."""
    rng = random.Random(0)
    lengths = [len(_PIECES.findall(task.solution(task.sample(rng)))) + 1 for _ in range(num_problems)]
    return float(np.mean(np.minimum(lengths, max_new_tokens)))


def grpo_workflow(config: HfGrpoConfig) -> Workflow:
    """The macro flow of one GRPO iteration (state sizes from the model's parameter count, float32)."""
    weights = 4 * parameter_count(config)
    rl = config.grpo
    sequence = 8 * (rl.max_prompt_tokens + rl.max_new_tokens)
    logprobs = 4 * rl.max_new_tokens * (2 if rl.kl_coef > 0 else 1)
    return Workflow(
        name="grpo-hf",
        components=[
            Component(name="rollout", role="rollout", state_bytes=weights),
            Component(name="reward", role="reward", cpu_ok=True),
            Component(
                name="inference",
                role="inference",
                state_bytes=weights * (2 if rl.kl_coef > 0 else 1),
                keeps_versions=True,  # InferenceWorker scores with the version that sampled
            ),
            Component(name="actor", role="actor", state_bytes=4 * weights),
        ],
        edges=[
            Edge(src="rollout", dst="reward", bytes_per_sample=sequence + 16),
            Edge(src="reward", dst="inference", bytes_per_sample=sequence + 24),
            Edge(src="inference", dst="actor", bytes_per_sample=sequence + 24 + logprobs),
        ],
        weight_sync=[
            WeightSync(src="actor", dst="rollout", num_bytes=weights),
            WeightSync(src="actor", dst="inference", num_bytes=weights),
        ],
        batch_size=rl.prompts_per_iteration * rl.group_size,
        group_size=rl.group_size,
        tokens_per_sample=mean_response_tokens(config.task, rl.max_new_tokens),
    )


def _named_as_written(error: ConfigError, data: Mapping[str, Any]) -> ConfigError:
    """``error`` about the sequence length, renamed to ``model.config`` when the config sets neither length (their
    defaults do not fit the model the config chose): an error names what the user wrote."""
    grpo = data.get("grpo")
    lengths = ("max_new_tokens", "max_prompt_tokens")
    written = isinstance(grpo, Mapping) and any(key in grpo for key in lengths)
    model = data.get("model")
    if (
        error.field != "grpo.max_new_tokens"
        or written
        or not isinstance(model, Mapping)
        or "config" not in model
    ):
        return error
    return ConfigError(
        "model.config",
        model["config"],
        f"is too short for the default response and prompt lengths: grpo.max_new_tokens={error.value} "
        + error.problem,
        "set grpo.max_new_tokens and grpo.max_prompt_tokens to fit the model, or give a model with more positions",
    )


def _sum_infos(result: IterationResult) -> tuple[dict[str, float], dict[str, list[float]], dict[str, Any]]:
    sums: dict[str, float] = {}
    losses: dict[str, list[float]] = {}
    latest: dict[str, Any] = {}
    for record in result.infos:
        for key, value in record.info.items():
            if key == "response_lengths":
                continue
            if key in LOSS_KEYS or key in STALENESS_KEYS:
                losses.setdefault(key, []).append(float(value))
            elif key.endswith("accuracy") or key == "eval_s":  # held-out accuracies, reported by one actor
                latest[key] = float(value)
            else:
                sums[key] = sums.get(key, 0.0) + float(value)
    return sums, losses, latest


@attrs.frozen
class GrpoHfWorkload:
    """GRPO on a Hugging Face causal LM (Qwen2, Llama, ...) for a verifiable task (word problems, addition)."""

    name: str = "grpo_hf"
    headline: Mapping[str, str] = attrs.field(
        factory=lambda: {"mean_reward": "reward", "tokens_per_s": "tok/s", "heldout_accuracy": "heldout"}
    )

    def load_config(self, data: Mapping[str, Any], source: str, settings: RunSettings) -> HfGrpoConfig:
        """The typed config with the run's seed and iterations; a bad ``model.path`` (missing, not a checkpoint,
        not a causal LM) or an optional backend without its package or a GPU fails here, before any worker
        starts."""
        check_packages()
        grpo = data.get("grpo")
        if isinstance(grpo, Mapping) and "num_iterations" in grpo:
            raise ConfigError(
                "grpo.num_iterations", grpo["num_iterations"], "is a run setting, which moved to the execution section",
                "write it as execution: {iterations: ...}",
            )  # fmt: skip
        try:
            config = structure_config(HfGrpoConfig, data, source)
        except ConfigError as error:
            raise _named_as_written(error, data) from None
        config = attrs.evolve(
            config, seed=settings.seed, grpo=attrs.evolve(config.grpo, num_iterations=settings.iterations)
        )
        check_backends(config.backends)
        if config.model.path is not None:
            if config.model.config is not None:
                warnings.warn(
                    "model.config has no effect when model.path is set (the checkpoint's own config is used)",
                    RlinfWarning,
                    stacklevel=2,
                )
            check_checkpoint(config.model.path)
        if config.warm_start.enabled and config.warm_start.num_steps == 0:
            warnings.warn(
                "warm_start.enabled has no effect when warm_start.num_steps is 0 (GRPO starts from the model as loaded)",
                RlinfWarning,
                stacklevel=2,
            )
        if config.grpo.skip_zero_advantages and config.grpo.kl_coef > 0:
            warnings.warn(
                "grpo.skip_zero_advantages has no effect when grpo.kl_coef > 0 (the KL term needs every response)",
                RlinfWarning,
                stacklevel=2,
            )
        return config

    def check(self, config: HfGrpoConfig) -> None:
        """On the driver, before any worker starts: every prompt of the run, tokenized by the model's own
        tokenizer, fits ``grpo.max_prompt_tokens``, the model's embedding and its positions
        (:func:`~rlinf.workloads.hf_grpo.preflight.check_run`)."""
        check_run(config)

    def workflow(self, config: HfGrpoConfig) -> Workflow:
        """rollout -> reward -> inference -> actor (stream edges), weight sync back to rollout and inference."""
        return grpo_workflow(config)

    def workers(self, config: HfGrpoConfig) -> dict[str, type]:
        """The rollout, reward, inference and actor workers."""
        return {
            "rollout": RolloutWorker,
            "reward": RewardWorker,
            "inference": InferenceWorker,
            "actor": ActorWorker,
        }

    def metrics(self, result: IterationResult, config: HfGrpoConfig, iteration: int) -> dict[str, Any]:
        """Generated tokens/s, samples/s, the rollout's span, mean reward, response lengths, losses, held-out accuracy
        when evaluated, and when the actor trained the lag of its responses' policy version (``STALENESS_KEYS``)."""
        timeline = result.timeline
        generate = [s for s in timeline.spans if s.kind == "compute" and s.component == "rollout"]
        samples = config.grpo.prompts_per_iteration * config.grpo.group_size
        sums, losses, metrics = _sum_infos(result)
        lengths = reported_response_lengths(result)
        tokens = int(sums.get("response_tokens", 0))
        metrics.update(
            {
                "iteration": iteration,
                "samples": iteration * samples,
                "iteration_s": timeline.iteration_s,
                "tokens": tokens,
                "tokens_per_s": tokens / timeline.iteration_s,
                "samples_per_s": samples / timeline.iteration_s,
                "rollout_s": max(s.end_s for s in generate) - min(s.start_s for s in generate),
                "mean_reward": sums.get("reward_sum", 0.0) / max(sums.get("responses", 0.0), 1.0),
                "truncated_fraction": sums.get("truncated", 0.0) / max(len(lengths), 1),
                "optimizer_steps": int(sums.get("optimizer_steps", 0)),
                "response_len_mean": float(np.mean(lengths)) if lengths else 0.0,
                "response_len_p90": float(np.percentile(lengths, 90)) if lengths else 0.0,
                "response_len_max": int(max(lengths, default=0)),
                "response_lengths": sorted(lengths),
            }
        )
        metrics.update({key: float(np.mean(values)) for key, values in sorted(losses.items())})
        if "policy_lag_max" in losses:
            metrics["policy_lag_max"] = max(losses["policy_lag_max"])
        for name in ("rollout", "reward", "inference", "actor"):
            busy = sum(s.seconds for s in timeline.spans if s.kind == "compute" and s.component == name)
            metrics[f"{name}_busy_s"] = busy
        return metrics

    def response_lengths(self, result: IterationResult, config: HfGrpoConfig) -> list[int]:
        """Generated tokens (EOS included) of every response of one iteration: what the profiler records as the
        trace's response-length distribution."""
        return reported_response_lengths(result)

    def summary(self, recent: Sequence[Mapping[str, Any]]) -> str:
        """Samples, throughput, reward, response lengths and held-out accuracy of the last iteration (and how far
        behind the actor its responses were sampled, when they were)."""
        metrics = recent[-1]
        text = (
            f"{metrics['samples']} samples, {metrics['tokens_per_s']:.0f} generated tokens/s (last iteration), "
            f"mean reward {metrics['mean_reward']:.3f}, response length mean {metrics['response_len_mean']:.0f} "
            f"max {metrics['response_len_max']}"
        )
        if "heldout_accuracy" in metrics:
            text += f", held-out accuracy {metrics['heldout_accuracy']:.3f}"
        if metrics.get("policy_lag_max", 0.0) > 0:  # under a staleness bound
            text += (
                f", policy lag {metrics['policy_lag_max']:.0f} (behaviour KL {metrics['behaviour_kl']:.2g})"
            )
        return text


WORKLOAD = GrpoHfWorkload()
