"""Trace import: per-step timings of a veRL or RLinf run as cost samples of an rlinf workflow.

Each system logs, per training step, the seconds of its phases under documented metric names
(:mod:`rlinf.analytic.trace_import_names`). :func:`imported_samples` turns every logged step into one sample per phase:
``generate`` (rollout), ``reward`` (veRL: reward and advantage computation on the driver), ``infer`` (the inference
component: old-policy and reference log-probs, and values for PPO, summed), ``train`` (actor; critic for PPO) and
``sync_weights`` (actor -> rollout). A sample spans the whole batch on the devices its component ran on, so the
trace replays the run (``rlinf simulate``) and a calibration (:mod:`rlinf.analytic.calibration`) can fit the analytic
model to it for what-if questions elsewhere.

Where the logged phases already contain the run's context switches (veRL), the trace says so with onload,
offload and weight-sync samples of zero seconds (:func:`switch_samples`): a replay on the collocated plan the
run used then adds nothing on top of the logged phases.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np

from rlinf.analytic.step_log import StepLog
from rlinf.analytic.trace_import_names import SYSTEMS, MetricNames, OpMetrics, metric_names
from rlinf.core.errors import ConfigError, require
from rlinf.core.trace import CostSample
from rlinf.core.workflow import Workflow

__all__ = ["SYSTEMS", "ImportSummary", "MetricNames", "OpMetrics", "imported_samples", "metric_names"]


@attrs.frozen(kw_only=True)
class ImportSummary:
    """What the import read, for provenance."""

    steps: tuple[int, ...]
    """Steps imported (after skipping)."""
    num_skipped: int
    metrics: Mapping[str, tuple[str, ...]]
    """``component.op`` -> the metrics found and summed for it."""
    step_seconds_by_step: Mapping[int, float]
    """Each imported step's whole-step seconds as logged (the step timer, else the sum of its timers)."""
    step_seconds_source: str
    """The step timer's name, or a sentence saying the seconds are the sum of the step's timers."""
    validation_steps: tuple[int, ...]
    """Imported steps that also ran a validation (their step time includes it)."""
    checkpoint_steps: tuple[int, ...]
    """Imported steps that also saved a checkpoint."""
    step_seconds: Mapping[str, float]
    """Statistics (``median``, ``mean``, ``min``, ``max``, ``count``) of the step seconds of the training steps:
    imported steps that neither validate nor save a checkpoint."""
    not_imported: Mapping[str, float]
    """Timing metrics no op maps (e.g. checkpoints, validation) -> their median seconds."""

    @property
    def training_steps(self) -> tuple[int, ...]:
        """Imported steps without validation or checkpoint."""
        other = set(self.validation_steps) | set(self.checkpoint_steps)
        return tuple(step for step in self.steps if step not in other)


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
    by_step, source = _step_seconds(log, names, steps)
    validation = _steps_with(log, steps, names.validation_timers)
    checkpoint = _steps_with(log, steps, names.checkpoint_timers)
    training = [s for s in steps if s not in set(validation) | set(checkpoint)]
    return tuple(samples), ImportSummary(
        steps=tuple(steps),
        num_skipped=skip_steps,
        metrics={key: tuple(sorted(value)) for key, value in sorted(found.items())},
        step_seconds_by_step=by_step,
        step_seconds_source=source,
        validation_steps=validation,
        checkpoint_steps=checkpoint,
        step_seconds=_statistics([by_step[s] for s in training]),
        not_imported=_unmapped(log, names, steps),
    )


def switch_samples(workflow: Workflow, devices: Mapping[str, int], *, sync_logged: bool) -> list[CostSample]:
    """Zero-second onload and offload samples of every component with a state, and of the actor's weight sync
    unless the log times it: the logged phases already contain them. Each comes at two sizes, nothing and the
    component's state per device (weights for the sync), so that :func:`rlinf.core.costs.fit` prices that movement
    of the component at zero seconds by its per-size curve instead of from the cluster's links."""
    out = []
    for component in workflow.components:
        per_device = component.state_bytes_per_device()
        if per_device == 0:
            continue
        for op in ("onload", "offload"):
            for num_bytes in (0, per_device):
                out.append(
                    CostSample(
                        component=component.name,
                        op=op,
                        devices=component.model_parallel_size,
                        samples=0,
                        seconds=0.0,
                        num_bytes=num_bytes,
                    )
                )
    for sync in () if sync_logged else workflow.weight_sync:
        span = max(devices[sync.src], devices[sync.dst])
        for num_bytes in (0, sync.num_bytes):
            out.append(
                CostSample(
                    component=sync.src,
                    op="sync_weights",
                    devices=span,
                    samples=0,
                    seconds=0.0,
                    num_bytes=num_bytes,
                )
            )
    return out


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


def _step_seconds(log: StepLog, names: MetricNames, steps: list[int]) -> tuple[dict[int, float], str]:
    """Each step's logged whole-step seconds; a log without the step timer (veRL before 2025-01-17) gives the sum
    of every timer of the step instead, and says so."""
    if all(names.step_seconds in log.values[s] for s in steps):
        return {s: log.values[s][names.step_seconds] for s in steps}, names.step_seconds
    require(
        not any(names.step_seconds in log.values[s] for s in steps),
        log.source,
        names.step_seconds,
        "is logged at some imported steps only",
        "export every step's timings (or --skip-steps the steps without it)",
    )
    sums = {
        s: float(sum(v for m, v in log.values[s].items() if m.startswith(names.timing_prefix))) for s in steps
    }
    return sums, f"sum of each step's {names.timing_prefix}* timers (the log has no {names.step_seconds})"


def _steps_with(log: StepLog, steps: list[int], timers: tuple[str, ...]) -> tuple[int, ...]:
    return tuple(s for s in steps if any(t in log.values[s] for t in timers))


def _statistics(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    array = np.asarray(values)
    return {
        "median": float(np.median(array)),
        "mean": float(array.mean()),
        "min": float(array.min()),
        "max": float(array.max()),
        "count": float(array.size),
    }


def _unmapped(log: StepLog, names: MetricNames, steps: list[int]) -> dict[str, float]:
    skip = names.mapped() | {names.step_seconds}
    values: dict[str, list[float]] = {}
    for step in steps:
        for metric, value in log.values[step].items():
            if metric.startswith(names.timing_prefix) and metric not in skip:
                values.setdefault(metric, []).append(value)
    return {metric: float(np.median(v)) for metric, v in sorted(values.items())}
