"""``rlinf trace import``: a veRL or RLinf per-step timing log (console output, JSONL or CSV) as a trace of
measured samples.

The model flags (as for ``rlinf trace synth``) describe the run: model, device, number of devices, prompts and
group size per step, parallel sizes. They give the workflow its state sizes and weight-sync bytes; the samples'
seconds come from the log. The log also sets --prompt-tokens and --response-median (its mean lengths) and
--response-max (the limit its config, launch command or clipped responses state) when those flags are left out,
and --actor-sharding (the actor strategy its printed config or launch command names; veRL's default, FSDP, when it
names none). docs/trace_import.md lists the metric names read.

Example:
  rlinf trace import --format verl run.log --model 7b --device H100 --num-devices 8 --prompts 1024 \\
      --group-size 5 --rollout-mp 2 --actor-mp 1 --inference-mp 1 --out run_trace.json --plan-out run_plan.yaml
  rlinf simulate --trace run_trace.json --plan run_plan.yaml            # replay the run
  rlinf trace calibrate --measured run_trace.json --out calibrated.json   # then what-if at other scales
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from rlinf.analytic.llm_workload import LLMWorkload
from rlinf.analytic.logged_settings import LoggedLimit, actor_sharding, response_limit, rollout_engine
from rlinf.analytic.step_log import FORMATS, StepLog, format_of, read_step_log
from rlinf.analytic.synthesis import synthesize
from rlinf.analytic.trace_import import imported_samples, mean_lengths, switch_samples
from rlinf.analytic.trace_import_names import SYSTEMS, MetricNames, metric_names
from rlinf.commands import values
from rlinf.commands.decode_args import DEFAULT_ENGINE
from rlinf.commands.llm_args import (
    MAX_TOKENS,
    add_workload_arguments,
    flags_named,
    recipe_of,
    today,
    workload_flags,
    workload_from_args,
)
from rlinf.commands.trace_import_record import ASSUMPTIONS, imported_from, replay_plan, report
from rlinf.core.cluster import Cluster
from rlinf.core.errors import ConfigError, require
from rlinf.core.inputs import decode_console_text, read_bytes, read_text
from rlinf.core.outputs import check_output_file, writing
from rlinf.core.workflow import Workflow

SHARDING = ("fsdp", "optimizer", "none")
DEFAULT_SHARDING = {
    "verl": ("fsdp", "assumed: veRL's default actor strategy, FSDP (the log names none)"),
    "rlinf": ("none", "assumed: RLinf's math runs train with Megatron, states whole per replica"),
}
"""The sharding a log that names no strategy gets, and why."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``rlinf trace import``."""
    parser.add_argument(
        "path", help="the run's log: console output (.log), JSONL (one object per step) or CSV"
    )
    parser.add_argument("--format", required=True, help=f"the system that wrote it: {', '.join(SYSTEMS)}")
    parser.add_argument(
        "--input-format", default=None, help=f"{', '.join(FORMATS)} (default: from the file name)"
    )
    parser.add_argument(
        "--skip-steps", type=values.count(0), default=0, help="leave out the first N logged steps (warm-up)"
    )
    parser.add_argument(
        "--component-devices",
        default=None,
        help="devices per component where not all, e.g. rollout=16,reward=16,inference=8,actor=8",
    )
    parser.add_argument(
        "--actor-sharding",
        default=None,
        help="fsdp: the actor's (and critic's) weights, gradients and optimizer state are sharded over its "
        "data-parallel ranks; optimizer: only the optimizer state is (Megatron's distributed optimizer); none: "
        "every replica holds them whole (default: the strategy the log's config or command names, else fsdp "
        "for veRL, none for RLinf)",
    )
    add_workload_arguments(parser, published_efficiency=False)
    parser.add_argument(
        "--seed", type=values.seed, default=0, help="seed of the response-length draw (default 0)"
    )
    parser.add_argument("--date", default=None, help="date recorded in provenance (default: today, UTC)")
    parser.add_argument("--out", required=True, help="trace JSON file to write (atomically)")
    parser.add_argument(
        "--plan-out", default=None, help="also write the plan the run used (collocated), for rlinf simulate"
    )


def run(args: argparse.Namespace) -> int:
    """Read the log, build the trace, print a summary, write the trace (and the plan)."""
    names = metric_names(args.format)
    check_output_file(args.out, "--out")
    if args.plan_out is not None:
        check_output_file(args.plan_out, "--plan-out")
    _check_sharding_flag(args.actor_sharding)
    path = Path(args.path)
    file_format = args.input_format or format_of(str(path))
    if file_format == "console":  # as published: stray zero bytes, cut characters
        raw = read_bytes(path, "path", what="run's log (console, JSONL or CSV)")
        text, cleaning = decode_console_text(raw, "path", str(path))
    else:
        text, cleaning = read_text(path, "path", what="run's log (console, JSONL or CSV)"), {}
    sharding, sharding_source = _sharding(args, text)
    log, old_prefixes = _read_log(text, path, file_format, names)
    _check_lengths(log, names, path)
    prompt_mean, response_mean = mean_lengths(log, names)
    limit = None if args.response_max is not None else response_limit(text, log, names)
    engine_source = _engine(args, text)
    workload, cluster, median_source = _workload(args, prompt_mean, response_mean, limit)
    devices = _component_devices(args.component_devices, _parallel_sizes(workload), cluster.num_devices)
    workload = _sharded(workload, sharding, devices)
    with _sharding_hint(sharding), flags_named():
        description = synthesize(workload, cluster, seed=args.seed, date="unused")
    workflow = _workflow(description.workflow, names)
    samples, summary = imported_samples(
        log,
        names,
        workflow,
        devices=devices,
        weight_bytes=int(description.provenance["derived"]["weight_bytes"]),
        tokens_per_sample=float(description.provenance["derived"]["tokens_per_sample"]),
        skip_steps=args.skip_steps,
    )
    if names.switches_inside_phases:
        synced = any(key.endswith(".sync_weights") for key in summary.metrics)
        samples = (*samples, *switch_samples(workflow, devices, sync_logged=synced))
    plan = replay_plan(workflow, devices, cluster.num_devices)
    command = shlex.join(
        ["rlinf", "trace", "import", "--format", args.format, str(path), "--input-format", file_format]
        + ["--skip-steps", str(args.skip_steps), "--actor-sharding", sharding]
        + (["--component-devices", args.component_devices] if args.component_devices else [])
        + [*workload_flags(args, workload, cluster), "--seed", str(args.seed), "--out", args.out]
        + (["--plan-out", args.plan_out] if args.plan_out else [])
    )
    limit_record = _limit_record(args, limit, workload)
    provenance = {
        "kind": "profiled",
        "source": f"imported from a {args.format} per-step timing log",
        "imported_from": imported_from(
            names,
            path=path,
            file_format=file_format,
            summary=summary,
            lengths=(prompt_mean, response_mean),
            response_limit=limit_record,
            response_median={"tokens": workload.response.median_tokens, "source": median_source},
            old_prefixes=old_prefixes,
            actor_sharding=_sharding_record(sharding, sharding_source, workload, devices),
            engine={
                "decode_step_overhead_s": workload.decode_step_overhead_s,
                "decode_step_overhead_per_sequence_s": workload.decode_step_overhead_per_sequence_s,
                "source": engine_source,
            },
            plan=plan,
        ),
        "date": args.date or today(),
        "seed": args.seed,
        "cluster": cluster.spec(),
        "component_devices": dict(devices),
        "workload": attrs.asdict(workload),
        "assumptions": ASSUMPTIONS,
        "command": command,
    }
    if any(cleaning.values()):
        provenance["imported_from"]["text_cleaning"] = cleaning
    trace = attrs.evolve(description, workflow=workflow, provenance=provenance, samples=samples)
    print(report(trace, summary, path, limit_record))
    if any(cleaning.values()):
        print(
            f"read {path.name} as published: dropped {cleaning['zero_bytes_dropped']} zero byte(s), replaced "
            f"{cleaning['invalid_utf8_replaced']} byte sequence(s) that are not UTF-8"
        )
    with writing(args.out, "--out"):
        trace.save(args.out)
    print(f"wrote {args.out}: {len(samples)} samples, {workflow.name} on {cluster.spec()}")
    if args.plan_out is not None:
        with writing(args.plan_out, "--plan-out"):
            Path(args.plan_out).write_text(plan.to_yaml())
        print(
            f"wrote {args.plan_out}: {plan.describe()} (replay: rlinf simulate --trace {args.out} --plan {args.plan_out})"
        )
    return 0


def _read_log(text: str, path: Path, file_format: str, names: MetricNames) -> tuple[StepLog, list[str]]:
    """The step log of ``text`` and the older timer prefixes it used; a line the JSON or CSV parser cannot take
    (nested too deeply, a number of thousands of digits, a CSV field over the parser's limit) is one line naming
    the file."""
    seen: set[str] = set()

    def rename(metric: str) -> str:
        prefix = names.old_prefix_of(metric)
        if prefix is not None:
            seen.add(prefix)
        return names.canonical(metric)

    try:
        log = read_step_log(text, source=path.name, file_format=file_format, keep=names.keep, rename=rename)
        return log, sorted(seen)
    except ConfigError:
        raise
    except (ValueError, RecursionError, ArithmeticError, csv.Error) as error:
        problem = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            "path",
            str(path),
            f"cannot be parsed as {file_format} ({problem})",
            "export the metrics as console output, JSONL or CSV",
        ) from None


def _check_lengths(log: StepLog, names: MetricNames, path: Path) -> None:
    """Logged prompt and response lengths are token counts: >= 0 and below the analytic model's limit."""
    for step, metrics in sorted(log.values.items()):
        for metric in (names.prompt_length, names.response_length, names.response_max):
            value = metrics.get(metric) if metric else None
            require(
                value is None or 0 <= value <= MAX_TOKENS,
                f"{path.name} step {step} {metric}",
                value,
                f"must be a token count in 0-{MAX_TOKENS:,}",
                "export the run's lengths in tokens",
            )


def _engine(args: argparse.Namespace, text: str) -> str:
    """Where the decode steps' engine cost comes from; sets ``args.engine`` to the one a veRL log names when no
    flag prices the step (``--engine``, ``--decode-step-overhead-s``)."""
    flags = ("engine", "decode_step_overhead_s", "decode_step_overhead_per_sequence_s")
    if any(getattr(args, flag, None) is not None for flag in flags):
        return "from the flags"
    logged = rollout_engine(text) if args.format == "verl" else None
    if logged is None:
        return f"assumed: the least published engine cost ({DEFAULT_ENGINE}); the log names no engine, pass --engine"
    args.engine = logged.cost_key
    return logged.source


def _check_sharding_flag(sharding: str | None) -> None:
    require(
        sharding is None or sharding in SHARDING,
        "--actor-sharding",
        sharding,
        "unknown sharding",
        f"use one of {list(SHARDING)}",
    )


def _sharding(args: argparse.Namespace, text: str) -> tuple[str, str]:
    """The actor's sharding and where it comes from: the flag, else the strategy the (veRL) log names, else the
    system's default."""
    if args.actor_sharding is not None:
        return args.actor_sharding, "from --actor-sharding"
    logged = actor_sharding(text) if args.format == "verl" else None
    if logged is not None:
        return logged.mode, logged.source
    return DEFAULT_SHARDING[args.format]


@contextlib.contextmanager
def _sharding_hint(sharding: str) -> Iterator[None]:
    """A training state that does not fit because it is held whole (or only its optimizer state sharded) may be
    an FSDP run described as another: say so in the fix."""
    try:
        yield
    except ConfigError as error:
        if error.field != "--actor-mp" or sharding == "fsdp":
            raise
        fix = f"{error.fix}, or pass --actor-sharding fsdp if the run's actor strategy was FSDP"
        raise ConfigError(error.field, error.value, error.problem, fix) from None


def _workload(
    args: argparse.Namespace,
    prompt_mean: float | None,
    response_mean: float | None,
    limit: LoggedLimit | None,
) -> tuple[LLMWorkload, Cluster, str]:
    """The flags' workload, and where its median response length comes from. The log fills --prompt-tokens and
    --response-median (logged means) and --response-max (the logged limit) where they are left out; a log without
    lengths gets the preset's median scaled to the response limit, so that a limit alone never conflicts with the
    preset's median."""
    defaults: dict[str, Any] = {}
    if prompt_mean is not None:
        defaults["prompt_tokens"] = max(1, int(round(prompt_mean)))
    if limit is not None:
        defaults["response_max"] = max(1, limit.tokens)
    given = args.response_median is not None or getattr(args, "response_mean", None) is not None
    if response_mean is None:
        if given:
            return (*workload_from_args(args, defaults), "from --response-median / --response-mean")
        return _workload_without_lengths(args, defaults)
    # A provisional median of one token gives the response sigma (flag or recipe) without tripping the limit.
    probe, _ = workload_from_args(args, {**defaults, "response_median": 1.0})
    limit_tokens = probe.response.max_tokens
    require(
        response_mean <= limit_tokens,
        "--response-max",
        limit_tokens,
        f"is below the mean response length the log records ({response_mean:.1f} tokens)",
        "pass the run's generation limit (veRL: data.max_response_length)",
    )
    if given:
        return (*workload_from_args(args, defaults), "from --response-median / --response-mean")
    # A lognormal's mean is its median times exp(sigma^2 / 2).
    sigma = probe.response.sigma
    defaults["response_median"] = max(1.0, response_mean / math.exp(sigma**2 / 2))
    workload, cluster = workload_from_args(args, defaults)
    source = f"from the logged mean response ({response_mean:.1f} tokens) / exp(sigma^2 / 2), sigma {sigma:g}"
    return workload, cluster, source


def _workload_without_lengths(
    args: argparse.Namespace, defaults: dict[str, Any]
) -> tuple[LLMWorkload, Cluster, str]:
    """A log without response lengths: the preset's median, scaled by the response limit over the preset's limit
    when the flag or the log sets a limit."""
    recipe = recipe_of(args)
    limit_tokens = args.response_max if args.response_max is not None else defaults.get("response_max")
    if limit_tokens is None or limit_tokens == recipe.response_max:
        workload, cluster = workload_from_args(args, defaults)
        return (
            workload,
            cluster,
            "assumed: the model preset's recipe default; the log has no response lengths",
        )
    median = max(1.0, recipe.response_median * limit_tokens / recipe.response_max)
    workload, cluster = workload_from_args(args, {**defaults, "response_median": median})
    source = (
        f"assumed: the model preset's median {recipe.response_median:g} scaled by the response limit "
        f"{limit_tokens} / {recipe.response_max}; the log has no response lengths, pass --response-median"
    )
    return workload, cluster, source


def _parallel_sizes(workload: LLMWorkload) -> dict[str, int]:
    """Model-parallel size of each component of the workload's workflow."""
    sizes = {
        "rollout": workload.rollout_model_parallel,
        "reward": 1,
        "inference": workload.inference_model_parallel,
        "actor": workload.actor_model_parallel,
    }
    if workload.algorithm == "ppo":
        sizes["critic"] = workload.actor_model_parallel
    return sizes


def _component_devices(spec: str | None, parallel: Mapping[str, int], num_devices: int) -> dict[str, int]:
    devices = dict.fromkeys(parallel, num_devices)
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
            and 1 <= int(count) <= num_devices,
            f"--component-devices.{name}",
            count,
            f"must be a device count in 1-{num_devices}",
            "write name=count",
        )
        require(
            int(count) % parallel[name] == 0,
            f"--component-devices.{name}",
            int(count),
            f"is not a multiple of its model-parallel size {parallel[name]}",
            "give a multiple of the --*-mp flag",
        )
        devices[name] = int(count)
    for name, held in devices.items():
        require(
            held % parallel[name] == 0,
            f"--{'actor' if name == 'critic' else name}-mp",
            parallel[name],
            f"does not divide the {held} devices of {name}",
            "give a model-parallel size that divides its devices (or set --component-devices)",
        )
    return devices


def _sharded(workload: LLMWorkload, sharding: str, devices: Mapping[str, int]) -> LLMWorkload:
    """The analytic model holds ``optimizer_state_bytes_per_param / optimizer_shards`` of the sharded part of the
    training state per replica. FSDP (veRL's default strategy) shards the whole state (weights, gradients, Adam
    state) over the actor's data-parallel ranks, so all of it becomes that part; Megatron's distributed
    optimizer shards the optimizer state (fp32 master weights and Adam moments) only, the model's default part."""
    shards = devices["actor"] // workload.actor_model_parallel
    if sharding == "none" or shards == 1:
        return workload
    sharded_bytes = workload.optimizer_state_bytes_per_param
    if sharding == "fsdp":
        sharded_bytes = workload.train_state_bytes_per_param
    return attrs.evolve(workload, optimizer_shards=shards, optimizer_state_bytes_per_param=sharded_bytes)


def _sharding_record(
    sharding: str, source: str, workload: LLMWorkload, devices: Mapping[str, int]
) -> dict[str, Any]:
    per_device = workload.model.num_params * workload.train_state_bytes_per_replica_param
    return {
        "mode": sharding,
        "source": source,
        "shards": workload.optimizer_shards,
        "actor_devices": devices["actor"],
        "train_state_bytes_per_device": int(per_device / workload.actor_model_parallel),
    }


def _workflow(workflow: Workflow, names: MetricNames) -> Workflow:
    """The synthesized workflow with only the weight syncs the system performs (veRL computes old log-probs and
    values with the trained models themselves, so only the rollout receives weights)."""
    if names.weight_syncs is None:
        return workflow
    keep = [sync for sync in workflow.weight_sync if (sync.src, sync.dst) in names.weight_syncs]
    return attrs.evolve(workflow, weight_sync=keep)


def _limit_record(
    args: argparse.Namespace, limit: LoggedLimit | None, workload: LLMWorkload
) -> dict[str, Any]:
    """The response limit used and where it came from."""
    tokens = workload.response.max_tokens
    if args.response_max is not None:
        return {"tokens": tokens, "source": "from --response-max", "exact": True}
    if limit is not None:
        return {"tokens": tokens, "source": limit.source, "exact": limit.exact}
    return {
        "tokens": tokens,
        "source": "assumed: the model preset's recipe default; the log states no limit, pass --response-max",
        "exact": False,
    }


def summary_line(imported_from: Mapping[str, Any]) -> str:
    """One line about an imported trace, for ``rlinf trace show``."""
    steps = imported_from.get("steps")
    steps = steps if isinstance(steps, Mapping) else {}
    return (
        f"imported from {imported_from.get('system')} log {imported_from.get('file')}: "
        f"{steps.get('count')} steps ({steps.get('first')}-{steps.get('last')})"
    )
