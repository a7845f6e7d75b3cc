"""``rlinf validate``: check the simulator against reality on this machine (:mod:`rlinf.app.validation` does
the work: profile, choose plans, predict out of sample, measure in interleaved turns, compare); this module reads
the flags, checks them before any work and prints the report: per plan the predicted and measured time and the
error, then the bias (signed median of measured / predicted - 1), the spread and the verdict.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rlinf.commands.machine_args import add_machine_arguments, add_profiling_arguments, resolve_machine
from rlinf.core.errors import require
from rlinf.core.fidelity import MAX_BIAS, MIN_WITHIN_TURNS
from rlinf.core.outputs import check_output_dir

DEFAULT_PLANS = 6
DEFAULT_ITERATIONS = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``rlinf validate``."""
    parser.add_argument("config", help="YAML config naming its workload, e.g. examples/hopper_ppo.yaml")
    parser.add_argument(
        "--plans", type=int, default=DEFAULT_PLANS, help=f"plans on the cores (default {DEFAULT_PLANS})"
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"measured iterations per plan, after warm-up (default {DEFAULT_ITERATIONS})",
    )
    parser.add_argument(
        "--warmup", type=int, default=2, help="warm-up iterations per turn of a plan (default 2)"
    )
    parser.add_argument(
        "--devices", type=int, help="devices (CPU cores or GPUs) to use (default: all usable cores or GPUs)"
    )
    add_machine_arguments(parser)
    parser.add_argument("--trace", help="reuse a profiled trace instead of profiling")
    add_profiling_arguments(parser, budget_help="profiling seconds (default 120)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key (repeatable)"
    )
    parser.add_argument("--out", default="runs/validate", help="directory for the PNG, trace and report")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def run(args: argparse.Namespace) -> int:
    """Check the flags, validate (:func:`rlinf.app.validation.validate`), print the report."""
    from executor import Watchdog
    from executor.devices import physical_units
    from rlinf.app.jobs import load_job_config
    from rlinf.app.profiling import local_backends
    from rlinf.app.validation import json_number, validate

    require(args.plans >= 2, "--plans", args.plans, "must be >= 2", "compare at least two plans")
    require(args.iterations >= 1, "--iterations", args.iterations, "must be >= 1", "measure an iteration")
    require(args.warmup >= 0, "--warmup", args.warmup, "must be >= 0", "use 0 or more")
    check_output_dir(args.out, "--out")
    job, config = load_job_config(args.config, args.set)
    job.check(config)  # what needs the outside world, before any worker starts
    machine = resolve_machine(args)
    accelerator, core_pool = args.accelerator, args.cpu_devices
    cores = physical_units(accelerator)
    num_devices = len(cores) if args.devices is None else args.devices
    require(
        1 <= num_devices <= len(cores),
        "--devices",
        num_devices,
        f"this machine lets rlinf use {len(cores)} {'CPU cores' if accelerator == 'cpu' else 'GPUs'}",
        f"use 1 to {len(cores)} devices",
    )
    done = validate(
        job,
        config,
        Path(args.out),
        num_devices=num_devices,
        machine=machine,
        backends=local_backends(
            num_devices, accelerator, core_pool, watchdog=Watchdog(floor_s=job.settings.watchdog_s)
        ),
        num_plans=args.plans,
        iterations=args.iterations,
        warmup=args.warmup,
        trace_path=args.trace,
        profile_budget_s=args.profile_budget,
        profile_iterations=args.profile_iterations,
        progress=not args.no_progress and not args.json,
        command=getattr(args, "command_line", "rlinf validate"),
    )
    if args.json:
        print(json.dumps(done.result, default=json_number))
    else:
        _print(list(done.rows), done.on_cores, done.every, done.result)
    return 0


def _miss(report: Any) -> str:
    """A top-1 miss: the regret and whether it is more than noise."""
    text = f"no (regret {100 * report.top1_regret:.1f}%"
    if report.top1_p_value is not None:
        verdict = "a real miss" if report.top1_p_value < 0.05 else "within noise"
        text += f", p = {report.top1_p_value:.2f}: {verdict}"
    return text + ")"


def _turn_range(row: Any) -> str:
    """The plan's turn medians as ``min-max`` milliseconds, ``!`` when the prediction lies outside them."""
    medians = row.turn_medians_s
    if len(medians) < 2:
        return ""
    outside = "" if row.within_turn_range else " !"
    return f"{1e3 * min(medians):.1f}-{1e3 * max(medians):.1f}{outside}"


def _print(rows: list, on_cores: Any, every: Any, result: dict[str, Any]) -> None:
    print(f"{'plan':<64} {'source':<15} {'predicted':>9} {'measured':>9} {'m/p - 1':>7}  turns (ms)")
    for row in rows:
        mark = (" *" if row.oversubscribed else "") + (" p" if row.in_profile else "")
        print(
            f"{row.name + mark:<64} {row.source:<15} {row.predicted_s:>8.4f}s {row.measured_s:>8.4f}s "
            f"{100 * (row.measured_s / row.predicted_s - 1):>+6.1f}%  {_turn_range(row)}"
        )
    print(
        f"plans on {result['num_devices']} cores: bias {100 * on_cores.bias:+.1f}% (median of measured / predicted "
        f"- 1; + means predicted too fast), median |error| {100 * on_cores.median_error:.1f}%, "
        f"max {100 * on_cores.max_error:.1f}%, simulator's best is measured best: "
        f"{'yes' if on_cores.top1_match else _miss(on_cores)}, "
        f"Kendall's tau {on_cores.kendall_tau:.2f}"
    )
    if any(r.oversubscribed for r in rows):
        print(
            f"* more logical devices than cores (not in the summary); with them: median error "
            f"{100 * every.median_error:.1f}%, max {100 * every.max_error:.1f}%, tau {every.kendall_tau:.2f}"
        )
    if on_cores.within_turn_range:
        inside, of = on_cores.within_turn_range
        turns = len(rows[0].turn_medians_s)
        print(
            f"{inside} of {of} predictions on the cores lie within the range of their plan's {turns} turn medians "
            f"(ms; ! outside), a range that holds a plan's typical turn time with probability "
            f"{100 * (1 - 2 / 2**turns):.1f}%"
        )
    print(
        f"verdict: {on_cores.verdict} (trustworthy: |bias| <= {100 * MAX_BIAS:.0f}% and at least "
        f"{100 * MIN_WITHIN_TURNS:.0f}% of the predictions within their plan's turn range)"
    )
    print("p: also a probe plan of the profile (its own samples were left out of its prediction)")
    print(f"wrote {result['timeline_pair_png']} ({result['timeline_pair_plan']})")
