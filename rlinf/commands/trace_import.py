"""``rlinf trace import``: a veRL or RLinf per-step timing log (JSONL or CSV) as a trace of measured samples.

The model flags (as for ``rlinf trace synth``) describe the run: model, device, number of devices, prompts and
group size per step, parallel sizes. They give the workflow its state sizes and weight-sync bytes; the samples'
seconds come from the log. Mean prompt and response lengths logged by the run set --prompt-tokens and
--response-median when those flags are left out. docs/trace_import.md lists the metric names read.

Example:
  rlinf trace import --format verl run.jsonl --model 7b --device H100 --num-devices 8 --prompts 128 \\
      --group-size 8 --actor-mp 2 --out run_trace.json
  rlinf simulate --trace run_trace.json --plan my_plan.yaml       # replay
  rlinf trace calibrate --measured run_trace.json --out calibrated.json   # then what-if at other scales
"""

from __future__ import annotations

import argparse
import csv
import math
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from rlinf.analytic import synthesize
from rlinf.cluster import Cluster
from rlinf.commands import values
from rlinf.commands.llm_args import (
    MAX_TOKENS,
    add_workload_arguments,
    flags_named,
    today,
    workload_flags,
    workload_from_args,
)
from rlinf.errors import ConfigError, require
from rlinf.inputs import read_text
from rlinf.llm_workload import LLMWorkload
from rlinf.outputs import check_output_file, writing
from rlinf.step_log import FORMATS, format_of, read_step_log
from rlinf.trace import Trace
from rlinf.trace_import import SYSTEMS, ImportSummary, imported_samples, mean_lengths, metric_names
from rlinf.workflow import Workflow

ASSUMPTIONS = [
    "each sample is one logged step's phase over the whole batch (prompts x group size) on its component's "
    "devices (all devices unless --component-devices says otherwise, as in a collocated run)",
    "infer sums the inference phases of the step (veRL: old_log_prob + ref + values; RLinf: actor and critic "
    "inference)",
    "component state bytes, weight-sync bytes and the response-length distribution come from the model flags, "
    "not from the log",
    "phases that overlap in a pipelined run (RLinf) are recorded with their own durations; rlinf simulate "
    "decides the overlap from the plan",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``rlinf trace import``."""
    parser.add_argument("path", help="the run's metric log: JSONL (one object per step) or CSV")
    parser.add_argument("--format", required=True, help=f"the system that wrote it: {', '.join(SYSTEMS)}")
    parser.add_argument(
        "--input-format", default=None, help=f"{' or '.join(FORMATS)} (default: from the file name)"
    )
    parser.add_argument(
        "--skip-steps", type=values.count(0), default=0, help="leave out the first N logged steps (warm-up)"
    )
    parser.add_argument(
        "--component-devices",
        default=None,
        help="devices per component where not all, e.g. rollout=16,reward=16,inference=8,actor=8",
    )
    add_workload_arguments(parser)
    parser.add_argument(
        "--seed", type=values.seed, default=0, help="seed of the response-length draw (default 0)"
    )
    parser.add_argument("--date", default=None, help="date recorded in provenance (default: today, UTC)")
    parser.add_argument("--out", required=True, help="trace JSON file to write (atomically)")


def run(args: argparse.Namespace) -> int:
    """Read the log, build the trace, print a summary, write the trace."""
    names = metric_names(args.format)
    check_output_file(args.out, "--out")
    path = Path(args.path)
    file_format = args.input_format or format_of(str(path))
    text = read_text(path, "path", what="run's metric log (JSONL or CSV)")
    log = _read_log(text, path, file_format, names.keep)
    _check_lengths(log, names, path)
    prompt_mean, response_mean = mean_lengths(log, names)
    workload, cluster = _workload(args, prompt_mean, response_mean)
    with flags_named():
        description = synthesize(workload, cluster, seed=args.seed, date="unused")
    workflow = description.workflow
    devices = _component_devices(args.component_devices, workflow, cluster)
    samples, summary = imported_samples(
        log,
        names,
        workflow,
        devices=devices,
        weight_bytes=int(description.provenance["derived"]["weight_bytes"]),
        tokens_per_sample=float(description.provenance["derived"]["tokens_per_sample"]),
        skip_steps=args.skip_steps,
    )
    command = shlex.join(
        ["rlinf", "trace", "import", "--format", args.format, str(path), "--input-format", file_format]
        + ["--skip-steps", str(args.skip_steps)]
        + (["--component-devices", args.component_devices] if args.component_devices else [])
        + [*workload_flags(args, workload, cluster), "--seed", str(args.seed), "--out", args.out]
    )
    provenance = {
        "kind": "profiled",
        "source": f"imported from a {args.format} per-step timing log",
        "imported_from": _imported_from(args, path, file_format, summary, prompt_mean, response_mean),
        "date": args.date or today(),
        "seed": args.seed,
        "cluster": cluster.spec(),
        "component_devices": dict(devices),
        "workload": attrs.asdict(workload),
        "assumptions": ASSUMPTIONS,
        "command": command,
    }
    trace = attrs.evolve(description, provenance=provenance, samples=samples)
    print(_report(trace, summary, path))
    with writing(args.out, "--out"):
        trace.save(args.out)
    print(f"wrote {args.out}: {len(samples)} samples, {workflow.name} on {cluster.spec()}")
    return 0


def _read_log(text: str, path: Path, file_format: str, keep: Any) -> Any:
    """The step log of ``text``; a line the JSON or CSV parser cannot take (nested too deeply, a number of
    thousands of digits, a CSV field over the parser's limit) is one line naming the file."""
    try:
        return read_step_log(text, source=path.name, file_format=file_format, keep=keep)
    except ConfigError:
        raise
    except (ValueError, RecursionError, ArithmeticError, csv.Error) as error:
        problem = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            "path",
            str(path),
            f"cannot be parsed as {file_format} ({problem})",
            "export the metrics as JSONL or CSV",
        ) from None


def _check_lengths(log: Any, names: Any, path: Path) -> None:
    """Logged mean prompt and response lengths are token counts: >= 0 and below the analytic model's limit."""
    for step, metrics in sorted(log.values.items()):
        for metric in (names.prompt_length, names.response_length):
            value = metrics.get(metric)
            require(
                value is None or 0 <= value <= MAX_TOKENS,
                f"{path.name} step {step} {metric}",
                value,
                f"must be a token count in 0-{MAX_TOKENS:,}",
                "export the run's mean lengths in tokens",
            )


def _workload(
    args: argparse.Namespace, prompt_mean: float | None, response_mean: float | None
) -> tuple[LLMWorkload, Cluster]:
    """The flags' workload; logged mean lengths fill --prompt-tokens and --response-median when left out."""
    workload, cluster = workload_from_args(args)
    defaults: dict[str, Any] = {}
    if prompt_mean is not None:
        defaults["prompt_tokens"] = max(1, int(round(prompt_mean)))
    if response_mean is not None:
        # A lognormal's mean is its median times exp(sigma^2 / 2).
        defaults["response_median"] = max(1.0, response_mean / math.exp(workload.response.sigma**2 / 2))
    if not defaults:
        return workload, cluster
    return workload_from_args(args, defaults)


def _component_devices(spec: str | None, workflow: Workflow, cluster: Cluster) -> dict[str, int]:
    devices = {c.name: cluster.num_devices for c in workflow.components}
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        name, _, count = item.partition("=")
        name = name.strip()
        require(
            name in devices,
            "--component-devices",
            item,
            "unknown component",
            f"use components of {sorted(devices)} as name=count",
        )
        require(
            count.strip().isascii()
            and count.strip().isdigit()
            and len(count.strip()) <= 9
            and 1 <= int(count) <= cluster.num_devices,
            f"--component-devices.{name}",
            count,
            f"must be a device count in 1-{cluster.num_devices}",
            "write name=count",
        )
        mp = workflow.component(name).model_parallel_size
        require(
            int(count) % mp == 0,
            f"--component-devices.{name}",
            int(count),
            f"is not a multiple of its model-parallel size {mp}",
            "give a multiple of the --*-mp flag",
        )
        devices[name] = int(count)
    return devices


def _imported_from(
    args: argparse.Namespace,
    path: Path,
    file_format: str,
    summary: ImportSummary,
    prompt_mean: float | None,
    response_mean: float | None,
) -> dict[str, Any]:
    names = metric_names(args.format)
    return {
        "system": args.format,
        "file": str(path),
        "format": file_format,
        "metric_names_from": names.reference,
        "steps": {"count": len(summary.steps), "first": summary.steps[0], "last": summary.steps[-1]},
        "skipped_steps": summary.num_skipped,
        "metrics": {key: list(value) for key, value in summary.metrics.items()},
        "step_seconds": dict(summary.step_seconds),
        "not_imported_median_s": dict(summary.not_imported),
        "logged_mean_tokens": {"prompt": prompt_mean, "response": response_mean},
    }


def _report(trace: Trace, summary: ImportSummary, path: Path) -> str:
    lines = [
        f"imported {len(summary.steps)} steps ({summary.steps[0]}-{summary.steps[-1]}) of {path}, "
        f"{summary.num_skipped} skipped"
    ]
    for key, metrics in summary.metrics.items():
        component, op = key.split(".")
        seconds = sorted(s.seconds for s in trace.samples if s.component == component and s.op == op)
        lines.append(f"  {key:<22} median {seconds[len(seconds) // 2]:9.3f} s  from {' + '.join(metrics)}")
    if summary.step_seconds:
        lines.append(f"  {'whole step':<22} median {summary.step_seconds['median']:9.3f} s  (logged)")
    for metric, median_s in summary.not_imported.items():
        lines.append(f"  not imported: {metric} (median {median_s:.3f} s)")
    return "\n".join(lines)


def summary_line(imported_from: Mapping[str, Any]) -> str:
    """One line about an imported trace, for ``rlinf trace show``."""
    steps = imported_from.get("steps")
    steps = steps if isinstance(steps, Mapping) else {}
    return (
        f"imported from {imported_from.get('system')} log {imported_from.get('file')}: "
        f"{steps.get('count')} steps ({steps.get('first')}-{steps.get('last')})"
    )
