"""Trace import: per-step timings of a veRL or RLinf run as cost samples of an rlinf workflow.

Each system logs, per training step, the seconds of its phases under documented metric names
(:data:`SYSTEMS`). :func:`imported_samples` turns every logged step into one sample per phase: ``generate``
(rollout), ``reward``, ``infer`` (the inference component: old-policy and reference log-probs, and values for
PPO, summed), ``train`` (actor; critic for PPO) and ``sync_weights`` (actor -> rollout). A sample spans the
whole batch on the devices its component ran on, so the trace replays the run (``rlinf simulate``) and a
calibration (:mod:`rlinf.calibration`) can fit the analytic model to it for what-if questions elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np

from rlinf.errors import ConfigError, require
from rlinf.step_log import StepLog
from rlinf.trace import CostSample
from rlinf.workflow import Workflow


@attrs.frozen(kw_only=True)
class OpMetrics:
    """The metrics whose sum is the seconds of one op of one component role."""

    role: str
    op: str
    metrics: tuple[str, ...]


@attrs.frozen(kw_only=True)
class MetricNames:
    """What one system calls its per-step timings and lengths."""

    system: str
    timing_prefix: str
    """Every timing metric starts with it; those no :class:`OpMetrics` maps are reported, not imported."""
    ops: tuple[OpMetrics, ...]
    step_seconds: str
    prompt_length: str
    response_length: str
    reference: str
    """The source files that define the names."""

    def mapped(self) -> frozenset[str]:
        """Every metric an op reads."""
        return frozenset(m for op in self.ops for m in op.metrics)

    def keep(self, metric: str) -> bool:
        """Whether a log reader should keep ``metric``."""
        return metric.startswith(self.timing_prefix) or metric in (self.prompt_length, self.response_length)


SYSTEMS: dict[str, MetricNames] = {
    "verl": MetricNames(
        system="verl",
        timing_prefix="timing_s/",
        ops=(
            OpMetrics(role="rollout", op="generate", metrics=("timing_s/gen",)),
            OpMetrics(role="reward", op="reward", metrics=("timing_s/reward",)),
            OpMetrics(
                role="inference",
                op="infer",
                metrics=("timing_s/old_log_prob", "timing_s/ref", "timing_s/values"),
            ),
            OpMetrics(role="actor", op="train", metrics=("timing_s/update_actor",)),
            OpMetrics(role="critic", op="train", metrics=("timing_s/update_critic",)),
            OpMetrics(role="actor", op="sync_weights", metrics=("timing_s/update_weights",)),
        ),
        step_seconds="timing_s/step",
        prompt_length="prompt_length/mean",
        response_length="response_length/mean",
        reference="volcengine/verl verl/trainer/ppo/ray_trainer.py (marked_timer names), "
        "verl/trainer/ppo/metric_utils.py (compute_timing_metrics, compute_data_metrics)",
    ),
    "rlinf": MetricNames(
        system="rlinf",
        timing_prefix="time/",
        ops=(
            OpMetrics(role="rollout", op="generate", metrics=("time/rollout",)),
            OpMetrics(role="reward", op="reward", metrics=("time/reward",)),
            OpMetrics(
                role="inference", op="infer", metrics=("time/actor/inference", "time/critic/inference")
            ),
            OpMetrics(role="actor", op="train", metrics=("time/actor/training",)),
            OpMetrics(role="critic", op="train", metrics=("time/critic/training",)),
            OpMetrics(role="actor", op="sync_weights", metrics=("time/sync_weights",)),
        ),
        step_seconds="time/step",
        prompt_length="rollout/prompt_length",
        response_length="rollout/response_length",
        reference="RLinf/RLinf rlinf/runners/reasoning_runner.py (time/ metrics), "
        "rlinf/utils/distributed.py (rollout/ length metrics)",
    ),
}


def metric_names(system: str) -> MetricNames:
    """The names of ``system``; raises listing the known systems."""
    if system not in SYSTEMS:
        raise ConfigError("--format", system, "unknown system", f"use one of {sorted(SYSTEMS)}")
    return SYSTEMS[system]


@attrs.frozen(kw_only=True)
class ImportSummary:
    """What the import read, for provenance."""

    steps: tuple[int, ...]
    """Steps imported (after skipping)."""
    num_skipped: int
    metrics: Mapping[str, tuple[str, ...]]
    """``component.op`` -> the metrics found and summed for it."""
    step_seconds: Mapping[str, float]
    """Statistics of the logged whole-step time (``median``, ``mean``, ``min``, ``max``); empty if not logged."""
    not_imported: Mapping[str, float]
    """Timing metrics no op maps (e.g. advantage computation, checkpoints) -> their median seconds."""


def mean_lengths(log: StepLog, names: MetricNames) -> tuple[float | None, float | None]:
    """Mean prompt and response tokens over the logged steps (``None`` where not logged)."""
    out = []
    for metric in (names.prompt_length, names.response_length):
        values = [metrics[metric] for metrics in log.values.values() if metric in metrics]
        out.append(float(np.mean(values)) if values else None)
    return out[0], out[1]


def imported_samples(
    log: StepLog,
    names: MetricNames,
    workflow: Workflow,
    *,
    devices: Mapping[str, int],
    weight_bytes: int,
    tokens_per_sample: float,
    skip_steps: int = 0,
) -> tuple[tuple[CostSample, ...], ImportSummary]:
    """One sample per op per step of ``log``, each over the whole batch on ``devices[component]`` devices.

    ``weight_bytes`` is what a weight sync moves. Tokens per sample (prompt + response) are the step's logged mean
    lengths, else ``tokens_per_sample``. The first ``skip_steps`` steps with timings (warm-up) are left out."""
    require(skip_steps >= 0, "--skip-steps", skip_steps, "must be >= 0", "skip 0 or more warm-up steps")
    components = {c.role: c.name for c in reversed(workflow.components)}
    timed = [step for step in sorted(log.values) if names.mapped() & set(log.values[step])]
    require(
        bool(timed),
        log.source,
        sorted({m for metrics in log.values.values() for m in metrics})[:6],
        f"has none of {names.system}'s timing metrics {sorted(names.mapped())}",
        "log the run's timings (see docs/trace_import.md) or pick the other --format",
    )
    require(
        skip_steps < len(timed),
        "--skip-steps",
        skip_steps,
        f"leaves none of the {len(timed)} logged steps",
        "skip fewer steps",
    )
    steps = timed[skip_steps:]
    samples: list[CostSample] = []
    found: dict[str, set[str]] = {}
    for step in steps:
        metrics = log.values[step]
        tokens = _tokens_per_sample(metrics, names, tokens_per_sample)
        for op in names.ops:
            present = [m for m in op.metrics if m in metrics]
            if not present:
                continue
            component = _component(components, op, present[0])
            seconds = sum(_seconds(metrics[m], f"{log.source} step {step} {m}") for m in present)
            sync = op.op == "sync_weights"
            samples.append(
                CostSample(
                    component=component,
                    op=op.op,
                    devices=_devices_of(devices, components, op),
                    samples=0 if sync else workflow.batch_size,
                    tokens=0 if sync else int(round(tokens * workflow.batch_size)),
                    seconds=seconds,
                    num_bytes=weight_bytes if sync else 0,
                )
            )
            found.setdefault(f"{component}.{op.op}", set()).update(present)
    return tuple(samples), ImportSummary(
        steps=tuple(steps),
        num_skipped=skip_steps,
        metrics={key: tuple(sorted(value)) for key, value in sorted(found.items())},
        step_seconds=_statistics(
            [log.values[s][names.step_seconds] for s in steps if names.step_seconds in log.values[s]]
        ),
        not_imported=_unmapped(log, names, steps),
    )


def _component(components: Mapping[str, str], op: OpMetrics, metric: str) -> str:
    if op.role not in components:
        raise ConfigError(
            "--algorithm",
            "grpo",
            f"has no {op.role} component but the log has {metric}",
            "pass --algorithm ppo for a run with a critic",
        )
    return components[op.role]


def _devices_of(devices: Mapping[str, int], components: Mapping[str, str], op: OpMetrics) -> int:
    """An op's device count: its component's; a weight sync spans the actor's and the rollout's devices."""
    if op.op == "sync_weights":
        return max(devices[components["actor"]], devices[components["rollout"]])
    return devices[components[op.role]]


def _seconds(value: float, where: str) -> float:
    require(value >= 0, where, value, "must be >= 0 seconds", "export the timing metrics unchanged")
    return value


def _tokens_per_sample(metrics: Mapping[str, float], names: MetricNames, default: float) -> float:
    if names.prompt_length in metrics and names.response_length in metrics:
        return metrics[names.prompt_length] + metrics[names.response_length]
    return default


def _statistics(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    array = np.asarray(values)
    return {
        "median": float(np.median(array)),
        "mean": float(array.mean()),
        "min": float(array.min()),
        "max": float(array.max()),
    }


def _unmapped(log: StepLog, names: MetricNames, steps: list[int]) -> dict[str, float]:
    skip = names.mapped() | {names.step_seconds}
    values: dict[str, list[float]] = {}
    for step in steps:
        for metric, value in log.values[step].items():
            if metric.startswith(names.timing_prefix) and metric not in skip:
                values.setdefault(metric, []).append(value)
    return {metric: float(np.median(v)) for metric, v in sorted(values.items())}
