"""GRPO on verifiable arithmetic as a job: rollout, reward, inference and actor workers pipelined by the plan.

The rollout streams finished prompt groups; the plan's granularity on the stream edges
``rollout -> reward -> inference -> actor`` sets how many micro-batches an iteration is cut into (1 = whole-batch
hand-off). The actor syncs its weights to the rollout and the inference component after training. Every worker
starts from the warm-started policy, trained once per config and cached (``execution.warm_start_cache``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

import executor
from rlinf.errors import ConfigError
from rlinf.jobs import RunOptions
from rlinf.plan import Placement, Plan
from rlinf.workflow import Workflow
from rlinf.workloads.arith.config import ArithGrpoConfig, config_from_mapping
from rlinf.workloads.arith.workers import ActorWorker, InferenceWorker, RewardWorker, RolloutWorker
from rlinf.workloads.arith.workflow import (
    COMPONENTS,
    STREAM_EDGES,
    check_plan_fits,
    component_micro_batches,
    grpo_workflow,
    plan_for_mode,
)

LOSS_KEYS = ("loss", "policy_loss", "kl", "clip_fraction", "grad_norm")


@attrs.frozen
class GrpoArithJob:
    """The :class:`rlinf.jobs.Job` of GRPO on arithmetic."""

    name: str = "grpo_arith"

    def config_from_mapping(self, data: Mapping[str, Any], source: str) -> ArithGrpoConfig:
        """Validate the config; unknown keys are errors."""
        return config_from_mapping(dict(data))

    def options(self, config: ArithGrpoConfig) -> RunOptions:
        """Iterations (``grpo.num_iterations``), seed, mode and checkpoint interval."""
        return RunOptions(
            iterations=config.grpo.num_iterations,
            seed=config.seed,
            mode=config.execution.mode,
            checkpoint_every=config.execution.checkpoint_every,
        )

    def with_options(
        self, config: ArithGrpoConfig, *, iterations: int | None, seed: int | None
    ) -> ArithGrpoConfig:
        """Apply --iterations / --seed."""
        if iterations is not None:
            config = attrs.evolve(config, grpo=attrs.evolve(config.grpo, num_iterations=iterations))
        if seed is not None:
            config = attrs.evolve(config, seed=seed)
        return config

    def with_plan(self, config: ArithGrpoConfig, plan: Plan) -> ArithGrpoConfig:
        """The config with the rollout's granularity (the rollout workers read it there) and the offload set
        taken from ``plan``."""
        execution = attrs.evolve(
            config.execution,
            granularity=component_micro_batches(plan, "rollout"),
            offload=tuple(sorted(plan.offload)),
        )
        return attrs.evolve(config, execution=execution)

    def probe_plans(self, num_devices: int, config: ArithGrpoConfig) -> list[tuple[Plan, int]]:
        """Plans for the profiling phase (see :func:`probe_plans`)."""
        return probe_plans(num_devices, config)

    def workflow(self, config: ArithGrpoConfig) -> Workflow:
        """rollout -> reward -> inference -> actor (stream edges), weight sync back to rollout and inference."""
        return grpo_workflow(config)

    def plan_for_mode(self, mode: str, num_devices: int, config: ArithGrpoConfig) -> tuple[Plan, int]:
        """Fixed-mode plans (see :func:`rlinf.workloads.arith.workflow.plan_for_mode`)."""
        return plan_for_mode(mode, num_devices, config)

    def check_plan(self, plan: Plan, config: ArithGrpoConfig) -> None:
        """Micro-batches must hold whole groups on every replica; the granularity must match the config's."""
        check_plan_fits(plan, config)

    def worker_specs(self, config: ArithGrpoConfig) -> dict[str, executor.WorkerSpec]:
        """The rollout, reward, inference and actor workers."""
        return {
            "rollout": executor.WorkerSpec(factory=RolloutWorker, config=config),
            "reward": executor.WorkerSpec(factory=RewardWorker, config=config),
            "inference": executor.WorkerSpec(factory=InferenceWorker, config=config),
            "actor": executor.WorkerSpec(factory=ActorWorker, config=config),
        }

    def iteration_metrics(
        self, result: executor.RunResult, config: ArithGrpoConfig, iteration: int
    ) -> dict[str, Any]:
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

    def progress(self, metrics: Mapping[str, Any]) -> dict[str, str]:
        """Mean reward, held-out accuracy when known, tokens/s."""
        shown = {"reward": f"{metrics['mean_reward']:.2f}", "tok/s": f"{metrics['tokens_per_s']:.0f}"}
        if "heldout_accuracy" in metrics:
            shown["heldout"] = f"{metrics['heldout_accuracy']:.3f}"
        return shown

    def summary(self, metrics: Mapping[str, Any]) -> str:
        """Samples, throughput, reward and held-out accuracy of the last iteration."""
        text = (
            f"{metrics['samples']} samples, {metrics['tokens_per_s']:.0f} generated tokens/s (last iteration), "
            f"mean reward {metrics['mean_reward']:.3f}"
        )
        if "heldout_accuracy" in metrics:
            text += f", held-out accuracy {metrics['heldout_accuracy']:.3f}"
        return text


def probe_plans(num_devices: int, config: ArithGrpoConfig) -> list[tuple[Plan, int]]:
    """Probe plans for the profiling phase, most informative first; each uses ``num_devices`` logical devices.

    Every component is measured on all ``n`` devices and on half of them, at the coarsest and the finest
    granularity its replicas allow (the most and the fewest groups per op), every stream edge is measured as a
    transfer, and onload/offload are measured once. With ``h = n // 2``: everything collocated with the fewest
    and with the most micro-batches; rollout + reward on ``h``, inference + actor on the rest (middle
    granularity); rollout alone on ``h``, the others on the rest (most); rollout, reward and inference on ``h``,
    the actor on the rest (fewest); collocated with rollout, inference and actor offloaded (middle). Granularities
    are divisors of the prompt groups; plans the config cannot run (uneven splits) are skipped."""
    every = tuple(range(num_devices))
    half = num_devices // 2
    first, rest = tuple(range(half)), tuple(range(half, num_devices))
    collocated = dict.fromkeys(COMPONENTS, every)
    layouts: list[tuple[dict[str, tuple[int, ...]], str, frozenset[str]]] = [
        (collocated, "fewest", frozenset()),
        (collocated, "most", frozenset()),
    ]
    if half >= 1:
        layouts += [
            ({"rollout": first, "reward": first, "inference": rest, "actor": rest}, "middle", frozenset()),
            ({"rollout": first, "reward": rest, "inference": rest, "actor": rest}, "most", frozenset()),
            ({"rollout": first, "reward": first, "inference": first, "actor": rest}, "fewest", frozenset()),
        ]
    layouts.append((collocated, "middle", frozenset({"rollout", "inference", "actor"})))
    out: list[tuple[Plan, int]] = []
    for placement, which, offload in layouts:
        fitting = []
        groups = config.grpo.prompts_per_iteration
        for granularity in (g for g in range(1, groups + 1) if groups % g == 0):
            plan = _plan(placement, granularity, offload)
            try:
                check_plan_fits(plan, JOB.with_plan(config, plan))
            except ConfigError:
                continue
            fitting.append(plan)
        if not fitting:
            continue
        chosen = {"fewest": fitting[0], "most": fitting[-1], "middle": fitting[len(fitting) // 2]}[which]
        if all(chosen != known for known, _ in out):
            out.append((chosen, num_devices))
    return out


def _plan(placement: Mapping[str, tuple[int, ...]], granularity: int, offload: frozenset[str]) -> Plan:
    return Plan(
        placements=[Placement(component=name, devices=ids) for name, ids in placement.items()],
        granularity=dict.fromkeys(STREAM_EDGES, granularity),
        offload=offload,
    )


JOB = GrpoArithJob()
