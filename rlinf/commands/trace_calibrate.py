"""``rlinf trace calibrate``: fit the analytic model to a measured trace and write a calibrated synthetic trace.

The prior (the analytic model's assumptions) comes from --analytic TRACE (a trace made by ``rlinf trace synth``
or ``rlinf trace import``), or from the model flags (--model or --params ..., as for ``rlinf trace synth``), or,
when neither is given, from the measured trace's own provenance.workload (an imported trace records one).

Example (the profile of the former GRPO arithmetic workload, described as the 102,016-parameter model it trained):
  rlinf trace calibrate --measured docs/data/grpo_arith_former_cpu2_trace.json --params 102016 --layers 2 \\
      --hidden-size 64 --heads 4 --kv-heads 4 --device CPU --num-devices 2 --prompts 32 --group-size 8 --prompt-tokens 9 \\
      --response-median 5 --response-sigma 0.1 --response-max 6 --rollout-mp 1 --inference-mp 1 \\
      --actor-mp 1 --weight-bytes-per-param 4 --kv-cache-fraction 0.00001 --out calibrated.json
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Mapping
from typing import Any

import attrs

from rlinf.analytic.calibration import Calibration, calibrate, calibrated_trace
from rlinf.analytic.llm_workload import LLMWorkload
from rlinf.commands import values
from rlinf.commands.llm_args import (
    add_workload_arguments,
    describes_workload,
    flags_named,
    today,
    workload_flags,
    workload_from_args,
)
from rlinf.core.cluster import Cluster
from rlinf.core.config_structure import structure_config
from rlinf.core.errors import ConfigError, is_number
from rlinf.core.outputs import check_output_file, writing
from rlinf.core.trace import Trace, load_trace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``rlinf trace calibrate``."""
    parser.add_argument("--measured", required=True, help="measured trace (profiled or imported) to fit")
    parser.add_argument(
        "--analytic",
        default=None,
        help="trace whose provenance.workload is the prior (instead of model flags)",
    )
    add_workload_arguments(parser, published_efficiency=False)
    parser.add_argument(
        "--seed", type=values.seed, default=None, help="seed of the response-length draw (default 0)"
    )
    parser.add_argument(
        "--split-seed", type=values.seed, default=0, help="seed of the held-out split (default 0)"
    )
    parser.add_argument(
        "--holdout",
        dest="holdout_fraction",
        type=values.real(),
        default=0.25,
        help="share of the samples held out of the fit, 0 to 0.9 (default 0.25)",
    )
    parser.add_argument("--date", default=None, help="date recorded in provenance (default: today, UTC)")
    parser.add_argument("--out", required=True, help="calibrated trace JSON file to write (atomically)")


def run(args: argparse.Namespace) -> int:
    """Fit, print the report, write the calibrated trace."""
    check_output_file(args.out, "--out")
    measured = load_trace(args.measured, field="--measured")
    prior, cluster, seed, prior_flags = _prior(args, measured)
    with flags_named():
        result = calibrate(
            prior,
            cluster,
            measured,
            seed=seed,
            split_seed=args.split_seed,
            holdout_fraction=args.holdout_fraction,
        )
    trace = calibrated_trace(
        result, cluster, measured, seed=seed, date=args.date or today(), measured_source=args.measured
    )
    command = shlex.join(
        ["rlinf", "trace", "calibrate", "--measured", args.measured, *prior_flags]
        + [
            "--seed",
            str(seed),
            "--split-seed",
            str(args.split_seed),
            "--holdout",
            f"{args.holdout_fraction:g}",
        ]
        + ["--out", args.out]
    )
    trace = attrs.evolve(trace, provenance={**trace.provenance, "command": command})
    sys.stdout.write(format_report(result, measured_source=args.measured, measured=measured, cluster=cluster))
    with writing(args.out, "--out"):
        trace.save(args.out)
    print(f"wrote {args.out}: {len(trace.samples)} samples, {trace.workflow.name} on {cluster.spec()}")
    return 0


def _prior(args: argparse.Namespace, measured: Trace) -> tuple[LLMWorkload, Cluster, int, list[str]]:
    """(prior workload, cluster, seed, the flags that name the prior in provenance.command)."""
    if args.analytic is not None and describes_workload(args):
        raise ConfigError(
            "--analytic", args.analytic, "is given together with model flags", "give one of the two"
        )
    if describes_workload(args):
        workload, cluster = workload_from_args(args)
        return workload, cluster, args.seed or 0, workload_flags(args, workload, cluster)
    if args.analytic is not None:
        source = load_trace(args.analytic, field="--analytic")
        flags = ["--analytic", args.analytic]
        where = "--analytic"
    else:
        source, flags, where = measured, [], "--measured"
    if "workload" not in source.provenance:
        raise ConfigError(
            where,
            args.analytic or args.measured,
            "records no provenance.workload to start from",
            "give --analytic TRACE (made by rlinf trace synth) or describe the model with --model / --params",
        )
    workload = structure_config(
        LLMWorkload, source.provenance["workload"], where, f"{where}.provenance.workload."
    )
    recorded = source.provenance.get("seed", 0)
    if args.seed is None and not (isinstance(recorded, int) and 0 <= recorded <= values.MAX_SEED):
        raise ConfigError(
            f"{where}.provenance.seed", recorded, f"must be an integer in 0-{values.MAX_SEED}", "give --seed"
        )
    seed = args.seed if args.seed is not None else recorded
    return workload, source.cluster, seed, flags


def format_report(result: Calibration, *, measured_source: str, measured: Trace, cluster: Cluster) -> str:
    """Parameters with their errors, then the median relative error per op before and after the fit."""
    lines = [
        f"calibrated {result.prior.model.name} {result.prior.algorithm} on {cluster.spec()} against "
        f"{measured_source} ({measured.provenance.get('kind')}, {measured.workflow.name})",
        f"samples    {result.num_fit} fitted, {result.num_heldout} held out "
        f"(split seed {result.split_seed}, {result.holdout_fraction:g} of each op)",
    ]
    for reason, count in result.excluded.items():
        lines.append(f"excluded   {count:5d}  {reason}")
    lines.append(f"{'parameter':<28} {'prior':>11} {'fitted':>11} {'+-':>6}  status")
    for p in result.parameters:
        error = f"{p.relative_std_error:.0%}" if p.relative_std_error is not None else "-"
        lines.append(f"{p.name:<28} {p.prior:>11.4g} {p.fitted:>11.4g} {error:>6}  {p.status}")
    lines.append(
        "median |predicted - measured| / measured (before -> after the fit; lookup = per-configuration"
    )
    lines.append("median of the fitted samples, the noise floor)")
    lines.extend(_error_lines("fitted", result.fit_errors))
    lines.extend(_error_lines("held out", result.heldout_errors))
    lines.append(f"rms log residual of the fitted samples: {result.rms_log_residual:.3f}")
    return "\n".join(lines) + "\n"


def _error_lines(label: str, rows: tuple[Any, ...]) -> list[str]:
    out = []
    for row in rows:
        lookup = f"{row.median_lookup:.1%}" if row.median_lookup is not None else "-"
        out.append(
            f"{label:<9} {row.op:<14} n={row.num_samples:<5d} {row.median_before:>9.1%} -> "
            f"{row.median_after:>7.1%}   lookup {lookup}"
        )
    return out


def summary_line(calibration: Mapping[str, Any]) -> str:
    """One line about a calibrated trace's fit, for ``rlinf trace show`` (parts a hand-edited trace lacks or
    mistypes are left out)."""
    heldout = _get(calibration, "residuals", "median_relative_error_heldout", "all")
    source = _get(calibration, "measured", "file")
    numbers = [_get(heldout, key) for key in ("median_before", "median_after", "num_samples")]
    if not all(is_number(value) for value in numbers):
        return f"calibrated against {source}"
    assert isinstance(heldout, Mapping)
    return (
        f"calibrated against {source}: held-out median error {heldout['median_before']:.1%} -> "
        f"{heldout['median_after']:.1%} ({heldout['num_samples']} samples)"
    )


def _get(data: Any, *keys: str) -> Any:
    """``data[k1][k2]...``, or ``None`` where a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data
