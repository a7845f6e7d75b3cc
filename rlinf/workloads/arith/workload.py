"""GRPO on verifiable arithmetic as a workload (:class:`rlinf.Workload`): rollout, reward, inference and actor
pipelined by the plan's granularity on the stream edges ``rollout -> reward -> inference -> actor``; the actor
syncs its weights to the rollout and the inference component after training. Every worker starts from the
warm-started policy, trained once per config and cached (``execution.warm_start_cache``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from rlinf.api import ConfigKeys, Workflow, reported_response_lengths
from rlinf.workloads.arith.config import ArithGrpoConfig, config_from_mapping
from rlinf.workloads.arith.workers import ActorWorker, InferenceWorker, RewardWorker, RolloutWorker
from rlinf.workloads.arith.workflow import grpo_workflow

LOSS_KEYS = ("loss", "policy_loss", "kl", "clip_fraction", "grad_norm")
KEYS = ConfigKeys(
    iterations="grpo.num_iterations",
    seed="seed",
    mode="execution.mode",
    checkpoint_every="execution.checkpoint_every",
    granularity="execution.granularity",
    offload="execution.offload",
)


@attrs.frozen
class GrpoArithWorkload:
    """GRPO on a small decoder-only transformer for verifiable multi-digit addition."""

    name: str = "grpo_arith"
    config_keys: ConfigKeys = KEYS
    headline: Mapping[str, str] = attrs.field(
        factory=lambda: {"mean_reward": "reward", "tokens_per_s": "tok/s", "heldout_accuracy": "heldout"}
    )

    def load_config(self, data: Mapping[str, Any], source: str) -> ArithGrpoConfig:
        """Validate the config; unknown keys are errors."""
        return config_from_mapping(dict(data))

    def workflow(self, config: ArithGrpoConfig) -> Workflow:
        """rollout -> reward -> inference -> actor (stream edges), weight sync back to rollout and inference."""
        return grpo_workflow(config)

    def workers(self, config: ArithGrpoConfig) -> dict[str, type]:
        """The rollout, reward, inference and actor workers."""
        return {
            "rollout": RolloutWorker,
            "reward": RewardWorker,
            "inference": InferenceWorker,
            "actor": ActorWorker,
        }

    def metrics(self, result: Any, config: ArithGrpoConfig, iteration: int) -> dict[str, Any]:
        """Generated tokens/s, samples/s, mean reward, losses, held-out accuracy when evaluated."""
        timeline = result.timeline
        samples = config.grpo.prompts_per_iteration * config.grpo.group_size
        generate = [s for s in timeline.spans if s.name == "generate"]
        rollout_s = max(s.end_s for s in generate) - min(s.start_s for s in generate)
        sums: dict[str, float] = {}
        losses: dict[str, list[float]] = {}
        metrics: dict[str, Any] = {}
        for info in result.infos:
            for key, value in info.info.items():
                if key == "response_lengths":
                    continue
                if key in LOSS_KEYS:
                    losses.setdefault(key, []).append(float(value))
                elif key in ("heldout_accuracy", "warm_start_accuracy", "eval_s"):
                    metrics[key] = float(value)
                else:
                    sums[key] = sums.get(key, 0.0) + float(value)
        tokens = int(sums.get("response_tokens", 0))
        metrics.update(
            {
                "iteration": iteration,
                "samples": iteration * samples,
                "iteration_s": timeline.iteration_s,
                "tokens": tokens,
                "tokens_per_s": tokens / timeline.iteration_s,
                "samples_per_s": samples / timeline.iteration_s,
                "rollout_s": rollout_s,
                "mean_reward": sums.get("reward_sum", 0.0) / max(sums.get("responses", 0.0), 1.0),
                "optimizer_steps": int(sums.get("optimizer_steps", 0)),
            }
        )
        metrics.update({key: float(np.mean(values)) for key, values in sorted(losses.items())})
        for name in ("rollout", "reward", "inference", "actor"):
            busy = sum(s.seconds for s in timeline.spans if s.kind == "compute" and s.component == name)
            metrics[f"{name}_busy_s"] = busy
        return metrics

    def response_lengths(self, result: Any, config: ArithGrpoConfig) -> list[int]:
        """Generated tokens (EOS included) of every response of one iteration: the profiler records them as the
        trace's response-length distribution, from which the cost model splits a streamed generation into its
        micro-batches' segments (all groups here end within a few steps of each other, so the first segment
        carries most of the generation)."""
        return reported_response_lengths(result)

    def summary(self, metrics: Mapping[str, Any]) -> str:
        """Samples, throughput, reward and held-out accuracy of the last iteration."""
        text = (
            f"{metrics['samples']} samples, {metrics['tokens_per_s']:.0f} generated tokens/s (last iteration), "
            f"mean reward {metrics['mean_reward']:.3f}"
        )
        if "heldout_accuracy" in metrics:
            text += f", held-out accuracy {metrics['heldout_accuracy']:.3f}"
        return text


WORKLOAD = GrpoArithWorkload()
