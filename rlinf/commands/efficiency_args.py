"""The flags of the analytic model's efficiency by the work per device: parallel layout, training framework, weight
sync.

* ``--pp`` (pipeline stages of a training or log-prob replica), ``--actor-tp`` and ``--inference-tp`` (their
  tensor-parallel sizes: the replica is ``tp x pp`` devices, its data-parallel size the devices over that) instead
  of one model-parallel size, so that TP 4 x PP 4 prices four-way all-reduces within a stage, a pipeline bubble and
  stage-to-stage transfers, not sixteen-way tensor parallelism across nodes;
* ``--train-efficiency KEY`` (:mod:`rlinf.analytic.training_costs`): the training framework's published MFU for the
  model's size and its fixed cost per optimizer step, which also price the log-prob forwards (they run in the
  same framework: NeMo RL's ``get_logprobs``, veRL's ``compute_log_prob``); ``--optimizer-steps`` (per iteration) and
  ``--micro-batch-tokens`` (per micro-batch) say how the iteration's tokens are cut;
* ``--weight-sync KEY`` (:mod:`rlinf.analytic.weight_sync`): the published resharding time that prices a collocated
  weight sync.

Without them a command gets the validated model (docs/analytic_validation.md): :data:`DEFAULT_TRAIN_EFFICIENCY`
(unless ``--train-mfu`` is given) and :data:`DEFAULT_WEIGHT_SYNC`, on GPU presets; ``none`` turns either off. A provenance command
spells both out, so it re-synthesizes the same trace whatever the defaults become.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import attrs

from rlinf.analytic.llm_workload import LLMWorkload
from rlinf.analytic.training_costs import TRAINING_EFFICIENCIES, training_efficiency
from rlinf.analytic.weight_sync import RESHARD_MEASUREMENTS, reshard_measurement
from rlinf.commands import values
from rlinf.core.errors import ConfigError

NONE = "none"
DEFAULT_TRAIN_EFFICIENCY = max(
    TRAINING_EFFICIENCIES, key=lambda key: TRAINING_EFFICIENCIES[key].plateau_mfu(7e9)
)
"""The framework a command without ``--train-efficiency`` (or ``--train-mfu``) is priced by: the one whose published
MFU is highest, so that the default is the fastest published training, as the engine's default is the least
published per-step cost."""
DEFAULT_WEIGHT_SYNC = max(
    RESHARD_MEASUREMENTS, key=lambda key: RESHARD_MEASUREMENTS[key].bytes_per_device_per_s
)
"""The resharding a command without ``--weight-sync`` is priced by: the fastest published."""

FLAG_OF_FIELD = {
    "pipeline_parallel": "--pp",
    "train_efficiency": "--train-efficiency",
    "weight_sync": "--weight-sync",
    "optimizer_steps": "--optimizer-steps",
    "train_micro_batch_tokens": "--micro-batch-tokens",
}
"""Fields of this module's errors -> the flag that sets them."""


def add_efficiency_arguments(parser: argparse.ArgumentParser, *, published_defaults: bool = True) -> None:
    """``--pp``, ``--actor-tp``, ``--inference-tp``, ``--train-efficiency``, ``--optimizer-steps``,
    ``--micro-batch-tokens``, ``--weight-sync``; without ``published_defaults`` the last two default to
    :data:`NONE`."""
    default = None if published_defaults else NONE
    parallel = values.count(1, limit="max_devices")
    parser.add_argument(
        "--pp",
        type=parallel,
        default=None,
        help="pipeline stages of a training and log-prob replica (default 1); its model-parallel size is tp x pp",
    )
    parser.add_argument(
        "--actor-tp",
        type=parallel,
        default=None,
        help="actor tensor-parallel size (instead of --actor-mp: the actor's model-parallel size is tp x --pp)",
    )
    parser.add_argument(
        "--inference-tp",
        type=parallel,
        default=None,
        help="log-prob forwards' tensor-parallel size (instead of --inference-mp: tp x --pp)",
    )
    parser.add_argument(
        "--train-efficiency",
        default=default,
        help=f"training framework whose published MFU and fixed cost per optimizer step price training and the "
        f"log-prob forwards: {', '.join(TRAINING_EFFICIENCIES)}, or {NONE} (default "
        + (
            f"{DEFAULT_TRAIN_EFFICIENCY} on GPUs, unless --train-mfu is given)"
            if published_defaults
            else f"{NONE})"
        ),
    )
    parser.add_argument(
        "--optimizer-steps",
        type=values.count(1, 1_000_000),
        default=None,
        help="optimizer steps per iteration (the batch over the training global batch; default 1)",
    )
    parser.add_argument(
        "--micro-batch-tokens",
        type=values.count(1, 100_000_000),
        default=None,
        help="tokens per training micro-batch, which fill a pipeline (default 4096)",
    )
    parser.add_argument(
        "--weight-sync",
        default=default,
        help=f"published resharding time that prices a collocated weight sync: {', '.join(RESHARD_MEASUREMENTS)}, "
        f"or {NONE} (default " + (f"{DEFAULT_WEIGHT_SYNC} on GPUs)" if published_defaults else f"{NONE})"),
    )


def parallel_size(args: argparse.Namespace, role: str, pick: Callable[[str, Any], Any], default: int) -> int:
    """The model-parallel size of ``role`` (``actor`` or ``inference``): ``--ROLE-tp`` x ``--pp``, else
    ``--ROLE-mp`` (or the recipe's); raises when both are given."""
    tp = getattr(args, f"{role}_tp", None)
    if tp is None:
        return int(pick(f"{role}_mp", default))
    if getattr(args, f"{role}_mp", None) is not None:
        raise ConfigError(
            f"--{role}-tp",
            tp,
            f"and --{role}-mp both set the {role}'s model-parallel size",
            "give one of them",
        )
    return int(tp) * int(getattr(args, "pp", None) or 1)


def _on_cpu(args: argparse.Namespace) -> bool:
    return str(getattr(args, "device", None)).upper() == "CPU"


def train_efficiency_of(args: argparse.Namespace) -> str | None:
    """The framework the flags ask for: ``--train-efficiency``, else :data:`DEFAULT_TRAIN_EFFICIENCY` unless
    ``--train-mfu`` is given or the device is the CPU preset (then ``None``: that MFU, or the default one, prices
    training; the table holds GPU measurements); raises when both are given."""
    key = getattr(args, "train_efficiency", None)
    mfu = getattr(args, "train_mfu", None)
    if key is None:
        return None if mfu is not None or _on_cpu(args) else DEFAULT_TRAIN_EFFICIENCY
    if mfu is not None and key != NONE:
        raise ConfigError(
            "--train-efficiency", key, "and --train-mfu both set the training MFU", "give one of them"
        )
    return key


def weight_sync_of(args: argparse.Namespace) -> str:
    """The resharding the flags ask for: ``--weight-sync``, else :data:`DEFAULT_WEIGHT_SYNC` (:data:`NONE` on the
    CPU preset: the table holds GPU systems)."""
    key = getattr(args, "weight_sync", None)
    if key is None:
        return NONE if _on_cpu(args) else DEFAULT_WEIGHT_SYNC
    return key


def apply_efficiency_arguments(args: argparse.Namespace, workload: LLMWorkload) -> LLMWorkload:
    """``workload`` with the pipeline stages, training efficiency, step counts and resharding the flags give."""
    changes: dict[str, Any] = {}
    if getattr(args, "pp", None) is not None:
        changes["pipeline_parallel"] = args.pp
    key = train_efficiency_of(args)
    if key not in (None, NONE):
        efficiency = training_efficiency(key)
        changes["train_mfu"] = efficiency.plateau_mfu(workload.model.num_params)
        changes["train_fixed_tokens_per_step"] = efficiency.fixed_tokens_per_step
        changes["forwards_at_train_mfu"] = True  # the log-prob forwards run in the same framework
    if getattr(args, "optimizer_steps", None) is not None:
        changes["optimizer_steps"] = args.optimizer_steps
    if getattr(args, "micro_batch_tokens", None) is not None:
        changes["train_micro_batch_tokens"] = args.micro_batch_tokens
    sync = weight_sync_of(args)
    if sync != NONE:
        changes["reshard_bytes_per_device_per_s"] = reshard_measurement(sync).bytes_per_device_per_s
    return attrs.evolve(workload, **changes) if changes else workload


def efficiency_flags(args: argparse.Namespace, workload: LLMWorkload) -> list[str]:
    """This module's flags, resolved (for ``provenance.command``): the pipeline stages, the framework and the
    resharding always spelled out, the step counts when given."""
    parts = ["--pp", str(workload.pipeline_parallel)]
    parts += ["--train-efficiency", train_efficiency_of(args) or NONE]
    if getattr(args, "optimizer_steps", None) is not None:
        parts += ["--optimizer-steps", str(workload.optimizer_steps)]
    if getattr(args, "micro_batch_tokens", None) is not None:
        parts += ["--micro-batch-tokens", str(workload.train_micro_batch_tokens)]
    return parts + ["--weight-sync", weight_sync_of(args)]


def efficiency_provenance(args: argparse.Namespace) -> dict[str, Any]:
    """What the flags priced training and the weight sync by, with their sources, for a trace's provenance."""
    out: dict[str, Any] = {}
    key = train_efficiency_of(args)
    if key not in (None, NONE):
        efficiency = training_efficiency(key)
        out["train_efficiency"] = {
            "key": key,
            "framework": efficiency.framework,
            "fixed_tokens_per_step": efficiency.fixed_tokens_per_step,
            "source": efficiency.source,
        }
    sync = weight_sync_of(args)
    if sync != NONE:
        measurement = reshard_measurement(sync)
        out["weight_sync"] = {
            "key": sync,
            "system": measurement.system,
            "bytes_per_device_per_s": measurement.bytes_per_device_per_s,
            "source": measurement.source,
        }
    return out
