"""The flags that describe an LLM workload and its cluster for the analytic model.

Shared by ``rlinf trace synth`` (what to synthesize), ``rlinf trace calibrate`` (the prior to fit) and
``rlinf trace import`` (the run a log comes from). A model preset fills in the cluster, batch, response lengths
and parallel sizes of its :class:`Recipe`; every flag overrides one value.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
from collections.abc import Iterator
from typing import Any

import attrs
import numpy as np

from rlinf.analytic.llm_workload import MODEL_PRESETS, LLMWorkload, ModelSpec, model_preset
from rlinf.commands import values
from rlinf.commands.decode_args import FLAG_OF_FIELD as DECODE_FLAG_OF_FIELD
from rlinf.commands.decode_args import (
    add_decode_arguments,
    apply_decode_arguments,
    decode_flags,
    response_from_args,
)
from rlinf.commands.efficiency_args import FLAG_OF_FIELD as EFFICIENCY_FLAG_OF_FIELD
from rlinf.commands.efficiency_args import (
    add_efficiency_arguments,
    apply_efficiency_arguments,
    efficiency_flags,
    parallel_size,
)
from rlinf.core import limits
from rlinf.core.cluster import DEVICE_PRESETS, Cluster, DeviceSpec
from rlinf.core.errors import ConfigError, require

DEVICES_PER_NODE = 8
DEFAULT_PROMPT_TOKENS = 512


@attrs.frozen(kw_only=True)
class Recipe:
    """Defaults for one model preset (every one can be overridden by a flag)."""

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

# Flag -> LLMWorkload field, for the efficiency and size assumptions that default to LLMWorkload's own defaults.
ASSUMPTION_FLAGS = {
    "prefill_mfu": "prefill MFU, also the decode compute ceiling",
    "decode_mbu": "decode memory-bandwidth utilization",
    "train_mfu": "training MFU",
    "op_overhead_s": "fixed seconds per op",
    "reward_seconds_per_sample": "reward seconds per response",
    "weight_bytes_per_param": "bytes per weight (2 for bf16, 4 for fp32)",
    "kv_cache_fraction": "share of rollout device memory reserved for the KV cache",
    "decode_step_overhead_s": "inference engine seconds per decode step on top of the roofline",
    "decode_step_overhead_per_sequence_s": "inference engine seconds per decode step per sequence in flight",
}


MAX_PARAMS = 1e15
MAX_MODEL_SIZE = 10_000_000
"""Layers, hidden size, heads, tokens: far beyond any model, small enough that no cost overflows."""
MAX_TOKENS = 10_000_000
MAX_SIGMA = 10.0

# LLMWorkload / ModelSpec / ResponseLengths field (and the analytic model's memory checks) -> the flag that sets it.
FLAG_OF_FIELD = {
    "model.num_params": "--params",
    "model.num_layers": "--layers",
    "model.hidden_size": "--hidden-size",
    "model.num_attention_heads": "--heads",
    "model.num_kv_heads": "--kv-heads",
    "num_prompts": "--prompts",
    "group_size": "--group-size",
    "prompt_tokens": "--prompt-tokens",
    "response.median_tokens": "--response-median",
    "response.sigma": "--response-sigma",
    "response.max_tokens": "--response-max",
    "algorithm": "--algorithm",
    "rollout_model_parallel": "--rollout-mp",
    "inference_model_parallel": "--inference-mp",
    "actor_model_parallel": "--actor-mp",
    "train_mfu": "--train-mfu",
}


def add_workload_arguments(parser: argparse.ArgumentParser, *, published_efficiency: bool = True) -> None:
    """Model, device, cluster, batch, response lengths, parallel sizes and efficiency assumptions.
    ``published_efficiency``: whether a command without ``--train-efficiency`` and ``--weight-sync`` gets the
    published defaults (``rlinf trace synth``) or none (``calibrate`` and ``import``, which fit the efficiencies
    to a measurement, so the prior keeps each op's own)."""
    size = values.count(1, MAX_MODEL_SIZE)
    tokens = values.count(1, MAX_TOKENS)
    batch = values.count(1, limit="max_batch_size")
    parallel = values.count(1, limit="max_devices")
    parser.add_argument("--model", default=None, help=f"model preset: {', '.join(MODEL_PRESETS)}")
    parser.add_argument(
        "--params",
        type=values.real(0.0, MAX_PARAMS, exclusive_minimum=True),
        default=None,
        help="parameter count (overrides the preset's)",
    )
    parser.add_argument(
        "--layers", type=size, default=None, help="layers (required with --params, no --model)"
    )
    parser.add_argument(
        "--hidden-size", type=size, default=None, help="hidden size (with --params, no --model)"
    )
    parser.add_argument("--heads", type=size, default=None, help="attention heads (default hidden/128)")
    parser.add_argument("--kv-heads", type=size, default=None, help="KV heads (default heads/8, at least 1)")
    parser.add_argument("--device", default=None, help=f"device type: {', '.join(DEVICE_PRESETS)}")
    parser.add_argument(
        "--num-devices",
        type=values.count(1, limit="max_devices"),
        default=None,
        help="devices of the cluster (8 per node)",
    )
    parser.add_argument("--prompts", type=batch, default=None, help="prompts per iteration")
    parser.add_argument("--group-size", type=batch, default=None, help="responses per prompt")
    parser.add_argument(
        "--prompt-tokens",
        type=tokens,
        default=None,
        help=f"tokens per prompt (default {DEFAULT_PROMPT_TOKENS})",
    )
    parser.add_argument(
        "--response-median",
        type=values.real(0.0, MAX_TOKENS, exclusive_minimum=True),
        default=None,
        help="median response tokens",
    )
    parser.add_argument(
        "--response-sigma",
        type=values.real(0.0, MAX_SIGMA),
        default=None,
        help="sigma of the log response length",
    )
    parser.add_argument(
        "--response-max", type=tokens, default=None, help="max response tokens (generation limit)"
    )
    parser.add_argument("--algorithm", default="grpo", help="grpo or ppo (default grpo)")
    parser.add_argument("--rollout-mp", type=parallel, default=None, help="rollout model-parallel size")
    parser.add_argument("--inference-mp", type=parallel, default=None, help="inference model-parallel size")
    parser.add_argument(
        "--actor-mp", type=parallel, default=None, help="actor (and critic) model-parallel size"
    )
    for field, meaning in ASSUMPTION_FLAGS.items():
        default = attrs.fields_dict(LLMWorkload)[field].default
        parser.add_argument(
            _flag(field), type=values.real(), default=None, help=f"{meaning} (default {default:g})"
        )
    add_decode_arguments(parser)
    add_efficiency_arguments(parser, published_defaults=published_efficiency)


@contextlib.contextmanager
def flags_named() -> Iterator[None]:
    """Re-raise the analytic model's errors about a workload field under the flag that sets it."""
    try:
        yield
    except ConfigError as error:
        flag = (
            FLAG_OF_FIELD.get(error.field)
            or DECODE_FLAG_OF_FIELD.get(error.field)
            or EFFICIENCY_FLAG_OF_FIELD.get(error.field)
        )
        if flag is None:
            raise
        raise ConfigError(flag, error.value, error.problem, error.fix.replace(error.field, flag)) from None


def describes_workload(args: argparse.Namespace) -> bool:
    """Whether the command line names a model (``--model`` or ``--params``)."""
    return args.model is not None or args.params is not None


def workload_from_args(
    args: argparse.Namespace, defaults: dict[str, Any] | None = None
) -> tuple[LLMWorkload, Cluster]:
    """The workload and cluster the flags describe. ``defaults`` (flag dest -> value) fill flags left out before
    the preset's recipe does (``rlinf trace import`` takes response lengths from the log)."""
    model, recipe = _model_and_recipe(args)
    fallback = defaults or {}

    def pick(dest: str, recipe_value: Any) -> Any:
        value = getattr(args, dest)
        if value is not None:
            return value
        return fallback.get(dest, recipe_value)

    device_name = str(pick("device", recipe.device)).upper()
    require(
        device_name in DEVICE_PRESETS,
        "--device",
        args.device,
        "unknown device type",
        f"use one of {list(DEVICE_PRESETS)}",
    )
    assumptions = {
        field: getattr(args, field) for field in ASSUMPTION_FLAGS if getattr(args, field) is not None
    }
    prompts, group_size = pick("prompts", recipe.num_prompts), pick("group_size", recipe.group_size)
    bound = limits.current().max_batch_size
    if prompts * group_size > bound:
        raise limits.exceeded(
            "--prompts", prompts, "samples (prompts x --group-size)", "max_batch_size", bound
        )
    with flags_named():
        workload = LLMWorkload(
            model=model,
            num_prompts=prompts,
            group_size=group_size,
            prompt_tokens=pick("prompt_tokens", DEFAULT_PROMPT_TOKENS),
            response=response_from_args(
                args,
                pick,
                recipe.response_median,
                recipe.response_sigma,
                pick("response_max", recipe.response_max),
            ),
            algorithm=args.algorithm,
            rollout_model_parallel=pick("rollout_mp", recipe.rollout_mp),
            inference_model_parallel=parallel_size(args, "inference", pick, recipe.inference_mp),
            actor_model_parallel=parallel_size(args, "actor", pick, recipe.actor_mp),
            pipeline_parallel=getattr(args, "pp", None) or 1,
            **assumptions,
        )
        workload = apply_efficiency_arguments(args, apply_decode_arguments(args, workload))
    return workload, cluster_of(DEVICE_PRESETS[device_name], pick("num_devices", recipe.num_devices))


def workload_flags(args: argparse.Namespace, workload: LLMWorkload, cluster: Cluster) -> list[str]:
    """The fully explicit flags that describe ``workload`` on ``cluster`` (for ``provenance.command``)."""
    model = workload.model
    parts = []
    if args.model is not None:
        parts += ["--model", str(args.model).lower()]
    if args.model is None or args.params is not None:
        parts += ["--params", f"{model.num_params:g}"]
    if args.model is None:
        parts += ["--layers", str(model.num_layers), "--hidden-size", str(model.hidden_size)]
        parts += ["--heads", str(model.num_attention_heads), "--kv-heads", str(model.num_kv_heads)]
    parts += ["--device", cluster.device.name, "--num-devices", str(cluster.num_devices)]
    parts += ["--prompts", str(workload.num_prompts), "--group-size", str(workload.group_size)]
    parts += ["--prompt-tokens", str(workload.prompt_tokens)]
    response = workload.response
    parts += ["--response-median", exact(response.median_tokens), "--response-sigma", exact(response.sigma)]
    parts += ["--response-max", str(response.max_tokens), "--algorithm", workload.algorithm]
    parts += ["--rollout-mp", str(workload.rollout_model_parallel)]
    parts += ["--inference-mp", str(workload.inference_model_parallel)]
    parts += ["--actor-mp", str(workload.actor_model_parallel)]
    for field in ASSUMPTION_FLAGS:
        if getattr(args, field) is not None:
            parts += [_flag(field), f"{getattr(workload, field):g}"]
    return parts + decode_flags(args, workload) + efficiency_flags(args, workload)


def exact(value: float) -> str:
    """``value`` as the shortest text that reads back as the same float (``3000`` for 3000.0): a provenance command
    must re-synthesize the same trace."""
    text = repr(float(value))
    return text.removesuffix(".0")


def cluster_of(preset: tuple[DeviceSpec, Any], num_devices: int) -> Cluster:
    """Nodes of up to 8 devices of the preset's type."""
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


def today() -> str:
    """Today's date, UTC: what provenance records unless --date is given."""
    return datetime.datetime.now(datetime.timezone.utc).date().isoformat()


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def recipe_of(args: argparse.Namespace) -> Recipe:
    """The recipe whose defaults fill the flags left out: the ``--model`` preset's, else the preset nearest in
    parameters to ``--params``."""
    return _model_and_recipe(args)[1]


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
    kv_heads = args.kv_heads or max(1, heads // 8)
    require(
        args.hidden_size % heads == 0,
        "--heads" if args.heads else "--hidden-size",
        heads if args.heads else args.hidden_size,
        f"does not divide the hidden size {args.hidden_size}"
        if args.heads
        else f"is not a multiple of {heads} heads",
        "give a head count that divides --hidden-size",
    )
    require(
        heads % kv_heads == 0,
        "--kv-heads" if args.kv_heads else "--heads",
        kv_heads if args.kv_heads else heads,
        f"KV heads ({kv_heads}) must divide the attention heads ({heads})",
        "give --kv-heads that divides --heads (grouped-query attention)",
    )
    with flags_named():
        model = ModelSpec(
            name=f"{args.params / 1e9:g}b",
            num_params=args.params,
            num_layers=args.layers,
            hidden_size=args.hidden_size,
            num_attention_heads=heads,
            num_kv_heads=kv_heads,
        )
    nearest = min(MODEL_PRESETS.values(), key=lambda m: abs(np.log(m.num_params / max(args.params, 1.0))))
    return model, RECIPES[nearest.name]
