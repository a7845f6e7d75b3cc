"""Make and inspect traces: ``synth`` writes an analytic (roofline) LLM trace, ``show`` summarizes a trace file."""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from rlinf.analytic import synthesize
from rlinf.cluster import DEVICE_PRESETS, GIB, Cluster, DeviceSpec
from rlinf.errors import ConfigError, require
from rlinf.llm_workload import MODEL_PRESETS, LLMWorkload, ModelSpec, ResponseLengths, model_preset
from rlinf.trace import Trace, load_trace

DEVICES_PER_NODE = 8


@attrs.frozen(kw_only=True)
class Recipe:
    """Defaults of ``rlinf trace synth`` for one model preset (every one can be overridden by a flag)."""

    device: str
    num_devices: int
    num_prompts: int
    group_size: int
    response_median: float
    response_sigma: float
    response_max: int
    rollout_mp: int
    inference_mp: int
    actor_mp: int


# Math-reasoning GRPO setups in the range of the RLinf paper (arXiv 2509.15965): long chain-of-thought responses.
RECIPES: dict[str, Recipe] = {
    "1.5b": Recipe(
        device="H100", num_devices=16, num_prompts=512, group_size=16, response_median=3000,
        response_sigma=0.6, response_max=16384, rollout_mp=1, inference_mp=1, actor_mp=1,
    ),
    "7b": Recipe(
        device="H100", num_devices=32, num_prompts=512, group_size=8, response_median=3000,
        response_sigma=0.6, response_max=16384, rollout_mp=1, inference_mp=1, actor_mp=2,
    ),
    "32b": Recipe(
        device="H200", num_devices=64, num_prompts=512, group_size=8, response_median=4000,
        response_sigma=0.6, response_max=20480, rollout_mp=4, inference_mp=4, actor_mp=8,
    ),
}  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Subcommands ``synth`` and ``show``."""
    sub = parser.add_subparsers(dest="trace_command", metavar="SUBCOMMAND", required=True)
    synth = sub.add_parser("synth", help="synthesize an analytic LLM trace (roofline model)")
    synth.add_argument("--model", default=None, help=f"model preset: {', '.join(MODEL_PRESETS)}")
    synth.add_argument("--params", type=float, default=None, help="parameter count (overrides the preset's)")
    synth.add_argument(
        "--layers", type=int, default=None, help="layers (required with --params and no --model)"
    )
    synth.add_argument(
        "--hidden-size", type=int, default=None, help="hidden size (with --params and no --model)"
    )
    synth.add_argument("--heads", type=int, default=None, help="attention heads (default hidden/128)")
    synth.add_argument("--kv-heads", type=int, default=None, help="KV heads (default heads/8, at least 1)")
    synth.add_argument(
        "--device", default=None, help=f"device type: {', '.join(d for d in DEVICE_PRESETS if d != 'CPU')}"
    )
    synth.add_argument(
        "--num-devices", type=int, default=None, help="devices of the trace's cluster (8 per node)"
    )
    synth.add_argument("--prompts", type=int, default=None, help="prompts per iteration")
    synth.add_argument("--group-size", type=int, default=None, help="responses per prompt")
    synth.add_argument("--prompt-tokens", type=int, default=512, help="tokens per prompt (default 512)")
    synth.add_argument("--response-median", type=float, default=None, help="median response tokens")
    synth.add_argument("--response-sigma", type=float, default=None, help="sigma of the log response length")
    synth.add_argument(
        "--response-max", type=int, default=None, help="max response tokens (generation limit)"
    )
    synth.add_argument("--algorithm", default="grpo", help="grpo or ppo (default grpo)")
    synth.add_argument("--rollout-mp", type=int, default=None, help="rollout model-parallel size")
    synth.add_argument("--inference-mp", type=int, default=None, help="inference model-parallel size")
    synth.add_argument("--actor-mp", type=int, default=None, help="actor (and critic) model-parallel size")
    synth.add_argument("--seed", type=int, default=0, help="seed of the response-length draw (default 0)")
    synth.add_argument("--date", default=None, help="date recorded in provenance (default: today, UTC)")
    synth.add_argument("--out", required=True, help="trace JSON file to write (atomically)")
    show = sub.add_parser("show", help="print a short summary of a trace file")
    show.add_argument("path", help="trace JSON file")


def run(args: argparse.Namespace) -> int:
    """Dispatch to ``synth`` or ``show``."""
    if args.trace_command == "synth":
        return _synth(args)
    sys.stdout.write(describe_trace(load_trace(args.path)))
    return 0


def _synth(args: argparse.Namespace) -> int:
    model, recipe = _model_and_recipe(args)
    device_name = (args.device or recipe.device).upper()
    require(
        device_name in DEVICE_PRESETS and device_name != "CPU",
        "--device",
        args.device,
        "unknown device type",
        f"use one of {[d for d in DEVICE_PRESETS if d != 'CPU']}",
    )
    workload = LLMWorkload(
        model=model,
        num_prompts=_pick(args.prompts, recipe.num_prompts),
        group_size=_pick(args.group_size, recipe.group_size),
        prompt_tokens=args.prompt_tokens,
        response=ResponseLengths(
            median_tokens=_pick(args.response_median, recipe.response_median),
            sigma=_pick(args.response_sigma, recipe.response_sigma),
            max_tokens=_pick(args.response_max, recipe.response_max),
        ),
        algorithm=args.algorithm,
        rollout_model_parallel=_pick(args.rollout_mp, recipe.rollout_mp),
        inference_model_parallel=_pick(args.inference_mp, recipe.inference_mp),
        actor_model_parallel=_pick(args.actor_mp, recipe.actor_mp),
    )
    cluster = _cluster(DEVICE_PRESETS[device_name], _pick(args.num_devices, recipe.num_devices))
    date = args.date or datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    trace = synthesize(workload, cluster, seed=args.seed, date=date)
    command = _command(args, workload, device_name, cluster.num_devices)
    trace = attrs.evolve(trace, provenance={**trace.provenance, "command": command})
    trace.save(args.out)
    print(f"wrote {args.out}: {len(trace.samples)} samples, {trace.workflow.name} on {cluster.spec()}")
    return 0


def _pick(value: Any, default: Any) -> Any:
    return default if value is None else value


def _model_and_recipe(args: argparse.Namespace) -> tuple[ModelSpec, Recipe]:
    if args.model is not None:
        model = model_preset(args.model)
        if args.params is not None:
            model = attrs.evolve(model, name=f"{model.name}-{args.params:g}", num_params=args.params)
        return model, RECIPES[str(args.model).lower()]
    if args.params is None:
        raise ConfigError(
            "--model", None, "is missing", f"give --model ({', '.join(MODEL_PRESETS)}) or --params"
        )
    require(
        args.layers is not None,
        "--layers",
        None,
        "is missing",
        "give --layers with --params (or use --model)",
    )
    require(
        args.hidden_size is not None, "--hidden-size", None, "is missing", "give --hidden-size with --params"
    )
    heads = args.heads or max(1, args.hidden_size // 128)
    model = ModelSpec(
        name=f"{args.params / 1e9:g}b",
        num_params=args.params,
        num_layers=args.layers,
        hidden_size=args.hidden_size,
        num_attention_heads=heads,
        num_kv_heads=args.kv_heads or max(1, heads // 8),
    )
    nearest = min(MODEL_PRESETS.values(), key=lambda m: abs(np.log(m.num_params / max(args.params, 1.0))))
    return model, RECIPES[nearest.name]


def _cluster(preset: tuple[DeviceSpec, Any], num_devices: int) -> Cluster:
    device, links = preset
    require(
        isinstance(num_devices, int) and num_devices >= 1,
        "--num-devices",
        num_devices,
        "must be an integer >= 1",
        "give e.g. 32",
    )
    per_node = min(DEVICES_PER_NODE, num_devices)
    require(
        num_devices % per_node == 0,
        "--num-devices",
        num_devices,
        f"is not a whole number of {DEVICES_PER_NODE}-device nodes",
        f"use a multiple of {DEVICES_PER_NODE}",
    )
    return Cluster(num_nodes=num_devices // per_node, devices_per_node=per_node, device=device, links=links)


def _command(args: argparse.Namespace, workload: LLMWorkload, device_name: str, num_devices: int) -> str:
    """The fully explicit invocation that regenerates this trace."""
    model = workload.model
    parts = ["rlinf", "trace", "synth"]
    if args.model is not None:
        parts += ["--model", str(args.model).lower()]
    if args.model is None or args.params is not None:
        parts += ["--params", f"{model.num_params:g}"]
    if args.model is None:
        parts += ["--layers", str(model.num_layers), "--hidden-size", str(model.hidden_size)]
        parts += ["--heads", str(model.num_attention_heads), "--kv-heads", str(model.num_kv_heads)]
    parts += ["--device", device_name, "--num-devices", str(num_devices)]
    parts += ["--prompts", str(workload.num_prompts), "--group-size", str(workload.group_size)]
    parts += ["--prompt-tokens", str(workload.prompt_tokens)]
    response = workload.response
    parts += ["--response-median", f"{response.median_tokens:g}", "--response-sigma", f"{response.sigma:g}"]
    parts += ["--response-max", str(response.max_tokens), "--algorithm", workload.algorithm]
    parts += ["--rollout-mp", str(workload.rollout_model_parallel)]
    parts += ["--inference-mp", str(workload.inference_model_parallel)]
    parts += ["--actor-mp", str(workload.actor_model_parallel), "--seed", str(args.seed), "--out", args.out]
    return shlex.join(parts)


def describe_trace(trace: Trace) -> str:
    """A few lines: workflow, cluster, components, samples, response lengths, provenance."""
    workflow = trace.workflow
    lines = [
        f"workflow   {workflow.name}: batch {workflow.batch_size} = {workflow.batch_size // workflow.group_size} "
        f"prompts x {workflow.group_size}, {workflow.tokens_per_sample:.0f} tokens/sample",
        f"cluster    {trace.cluster.spec()} ({trace.cluster.num_devices} devices)",
    ]
    for component in workflow.components:
        mine = [s for s in trace.samples if s.component == component.name]
        devices = sorted({s.devices for s in mine})
        ops = ",".join(sorted({s.op for s in mine})) or "-"
        span = f"{devices[0]}-{devices[-1]} devices" if devices else "no samples"
        lines.append(
            f"component  {component.name:<10} role={component.role:<9} mp={component.model_parallel_size:<3} "
            f"state={component.state_bytes / GIB:7.1f} GiB  {len(mine):4d} samples of {ops} on {span}"
        )
    lengths = np.asarray(trace.response_lengths)
    if lengths.size:
        lines.append(
            f"responses  {lengths.size} lengths: mean {lengths.mean():.0f}, p50 {np.median(lengths):.0f}, "
            f"p99 {np.quantile(lengths, 0.99):.0f}, max {lengths.max():.0f} tokens"
        )
    lines.append(f"samples    {len(trace.samples)} in all")
    lines.extend(_provenance_lines(trace.provenance))
    return "\n".join(lines) + "\n"


def _provenance_lines(provenance: Mapping[str, Any]) -> list[str]:
    lines = []
    for key in ("kind", "generator", "date", "seed", "source", "machine", "command"):
        if key in provenance:
            lines.append(f"provenance {key}: {provenance[key]}")
    assumptions = provenance.get("assumptions") or []
    if assumptions:
        lines.append(f"provenance assumptions: {len(assumptions)} (see the trace file)")
    return lines
