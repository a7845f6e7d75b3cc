"""What ``rlinf trace import`` records and prints: provenance of the import, the replay plan, the summary."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlinf.analytic.trace_import import ImportSummary
from rlinf.analytic.trace_import_names import MetricNames
from rlinf.core.plan import Plan, plan_from_dict
from rlinf.core.trace import Trace
from rlinf.core.workflow import Workflow

ASSUMPTIONS = [
    "each sample is one logged step's phase over the whole batch (prompts x group size) on its component's "
    "devices (all devices unless --component-devices says otherwise, as in a collocated run)",
    "infer sums the inference phases of the step (veRL: old_log_prob + ref + values; RLinf: actor and critic "
    "inference); veRL's reward sums reward and adv (the reward ran inside adv before 2025-04-23)",
    "component state bytes, weight-sync bytes and the response-length distribution come from the model flags "
    "and the logged lengths, not from measured memory",
    "veRL: the logged phases contain every onload, offload and weight sync of the collocated run (the rollout "
    "engine sleeps and wakes inside gen, FSDP moves parameters inside the phase that uses them), recorded as "
    "zero-second samples; only the actor -> rollout weight sync exists",
    "phases that overlap in a pipelined run (RLinf) are recorded with their own durations; rlinf simulate "
    "decides the overlap from the plan",
]


def replay_plan(workflow: Workflow, devices: Mapping[str, int], num_devices: int) -> Plan:
    """The plan of a synchronous collocated run: each component on the first ``devices[name]`` devices, whole
    batches on every edge, every component with a state offloaded when another one runs."""
    data = {
        "placement": {
            name: "all" if count == num_devices else f"0-{count - 1}" for name, count in devices.items()
        },
        "granularity": dict.fromkeys(workflow.granularity_keys, 1),
        "offload": sorted(c.name for c in workflow.components if c.state_bytes > 0),
    }
    return plan_from_dict(data, num_devices, "replay plan").validate_for(workflow, num_devices)


def imported_from(
    names: MetricNames,
    *,
    path: Path,
    file_format: str,
    summary: ImportSummary,
    lengths: tuple[float | None, float | None],
    response_limit: Mapping[str, Any],
    response_median: Mapping[str, Any],
    old_prefixes: list[str],
    actor_sharding: Mapping[str, Any],
    engine: Mapping[str, Any],
    plan: Plan,
) -> dict[str, Any]:
    """``provenance.imported_from`` of an imported trace."""
    return {
        "system": names.system,
        "file": str(path),
        "format": file_format,
        "metric_names_from": names.reference,
        "timer_prefixes_read_as_current": {prefix: names.timing_prefix for prefix in old_prefixes},
        "steps": {"count": len(summary.steps), "first": summary.steps[0], "last": summary.steps[-1]},
        "skipped_steps": summary.num_skipped,
        "metrics": {key: list(value) for key, value in summary.metrics.items()},
        "step_seconds_source": summary.step_seconds_source,
        "step_seconds_by_step": {str(step): s for step, s in summary.step_seconds_by_step.items()},
        "validation_steps": list(summary.validation_steps),
        "checkpoint_steps": list(summary.checkpoint_steps),
        "step_seconds": dict(summary.step_seconds),
        "not_imported_median_s": dict(summary.not_imported),
        "logged_mean_tokens": {"prompt": lengths[0], "response": lengths[1]},
        "response_limit": dict(response_limit),
        "response_median": dict(response_median),
        "actor_sharding": dict(actor_sharding),
        "engine": dict(engine),
        "switches_inside_phases": names.switches_inside_phases,
        "replay_plan": plan.to_dict(),
    }


def report(trace: Trace, summary: ImportSummary, path: Path, response_limit: Mapping[str, Any]) -> str:
    """What was read, op by op, and what was assumed."""
    lines = [
        f"imported {len(summary.steps)} steps ({summary.steps[0]}-{summary.steps[-1]}) of {path}, "
        f"{summary.num_skipped} skipped"
    ]
    for key, metrics in summary.metrics.items():
        component, op = key.split(".")
        seconds = sorted(s.seconds for s in trace.samples if s.component == component and s.op == op)
        lines.append(f"  {key:<22} median {seconds[len(seconds) // 2]:9.3f} s  from {' + '.join(metrics)}")
    if summary.step_seconds:
        training = len(summary.training_steps)
        lines.append(
            f"  {'whole step':<22} median {summary.step_seconds['median']:9.3f} s  over {training} training "
            f"steps ({summary.step_seconds_source})"
        )
    left_out = [("validation", summary.validation_steps), ("checkpoint", summary.checkpoint_steps)]
    for what, steps in left_out:
        if steps:
            lines.append(f"  {what} steps left out of the step statistics: {', '.join(map(str, steps))}")
    for metric, median_s in summary.not_imported.items():
        lines.append(f"  not imported: {metric} (median {median_s:.3f} s)")
    for prefix, current in trace.provenance["imported_from"]["timer_prefixes_read_as_current"].items():
        lines.append(f"  timers logged as {prefix}... (an older veRL release) read as {current}...")
    lines.append(f"  response limit: {response_limit['tokens']} tokens ({response_limit['source']})")
    median = trace.provenance["imported_from"]["response_median"]
    lines.append(f"  response median: {median['tokens']:.1f} tokens ({median['source']})")
    sharding = trace.provenance["imported_from"]["actor_sharding"]
    lines.append(
        f"  actor sharding: {sharding['mode']} over {sharding['shards']} data-parallel ranks, "
        f"{sharding['train_state_bytes_per_device'] / 2**30:.1f} GiB of training state per device "
        f"({sharding['source']})"
    )
    engine = trace.provenance["imported_from"]["engine"]
    lines.append(
        f"  decode step's engine cost: {engine['decode_step_overhead_s'] * 1e3:.2f} ms and "
        f"{engine.get('decode_step_overhead_per_sequence_s', 0.0) * 1e6:.1f} us per sequence in flight "
        f"({engine['source']})"
    )
    return "\n".join(lines)
