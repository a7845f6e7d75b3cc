"""Capacity planning: sweep cluster sizes and write an HTML/Markdown report of throughput, scaling, cost and plans."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlinf.capacity.config import SweepOptions, Target, parse_device_counts
from rlinf.capacity.document import number
from rlinf.capacity.planning import STRATEGIES, check_strategies
from rlinf.capacity.report import write_report
from rlinf.capacity.result import BASELINE, CapacityResult
from rlinf.capacity.sweep import default_jobs, sweep
from rlinf.capacity.whatif import KNOBS, PREFIX, parse_whatif
from rlinf.commands import values
from rlinf.core.outputs import check_output_dir, writing
from rlinf.core.trace import load_trace

MAX_JOBS = 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``rlinf capacity``."""
    parser.add_argument("--trace", required=True, help="trace JSON file (see traces/)")
    parser.add_argument(
        "--devices", required=True, help="cluster sizes: 8,16,32 or a progression such as 8,16,...,1024"
    )
    parser.add_argument("--out", required=True, help="folder for report.html, report.md, PNGs, capacity.json")
    positive = values.real(0.0, exclusive_minimum=True)
    parser.add_argument(
        "--price-per-device-hour",
        type=positive,
        default=None,
        help="currency per device-hour (default: none)",
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument(
        "--target-throughput",
        type=positive,
        default=None,
        help="units (samples or env steps) per second to reach",
    )
    target.add_argument("--deadline-s", type=positive, default=None, help="iteration seconds not to exceed")
    parser.add_argument(
        "--set",
        dest="whatifs",
        action="append",
        default=[],
        metavar=f"{PREFIX}KEY=VALUE[,...]",
        help="a what-if series (repeatable); knobs: "
        + "; ".join(f"{PREFIX}{k}: {v.help}" for k, v in KNOBS.items()),
    )
    parser.add_argument(
        "--modes",
        default=",".join(STRATEGIES),
        help=f"strategies to sweep, comma-separated (default: {','.join(STRATEGIES)})",
    )
    parser.add_argument(
        "--search-time-s",
        type=values.positive_seconds,
        default=5.0,
        help="CP-SAT time limit of the best-plan search, per size (default 5)",
    )
    parser.add_argument(
        "--jobs",
        type=values.count(1, MAX_JOBS),
        default=None,
        help=f"worker processes (default: CPU count, {default_jobs()} here)",
    )
    parser.add_argument("--seed", type=values.seed, default=0, help="planner and simulator seed (default 0)")
    parser.add_argument(
        "--max-staleness",
        type=values.count(0, 64),
        default=0,
        help="how many iterations the best plan's rollout may run ahead of training (default 0: synchronous)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    """Sweep, write the report, print a summary. An unmet target is reported, not an error (exit 0)."""
    out = check_output_dir(args.out, "--out")
    trace = load_trace(args.trace)
    target = None
    if args.target_throughput is not None:
        target = Target(kind="throughput", value=args.target_throughput)
    elif args.deadline_s is not None:
        target = Target(kind="deadline", value=args.deadline_s)
    modes = tuple(m.strip() for m in str(args.modes).split(",") if m.strip())
    options = SweepOptions(
        device_counts=parse_device_counts(args.devices),
        strategies=check_strategies(modes),
        price_per_device_hour=args.price_per_device_hour,
        target=target,
        search_time_s=args.search_time_s,
        seed=args.seed,
        max_staleness=args.max_staleness,
    )
    whatifs = [parse_whatif(text) for text in args.whatifs]
    result = sweep(
        trace,
        options,
        whatifs=whatifs,
        trace_name=Path(args.trace).name,
        jobs=args.jobs,
        progress=not args.quiet,
    )
    with writing(out, "--out"):
        files = write_report(result, trace, out)
    outputs = [str(files.html), str(files.markdown), str(files.json), *map(str, files.images)]
    if args.json:
        json.dump({**result.to_dict(), "outputs": outputs}, sys.stdout)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_summary(result))
        sys.stdout.write(f"wrote {files.html}\n      {files.markdown} (PNGs beside it)\n      {files.json}\n")
    return 0


def format_summary(result: CapacityResult) -> str:
    """The headline strategy per size, then the answer to the target."""
    strategy = result.headline_strategy
    lines = [f"{'devices':>8}  {'mode':<13} {'iteration s':>11} {result.unit + '/s':>12}  bottleneck"]
    for row in result.rows_of(BASELINE, strategy):
        if row.plan is None:
            lines.append(f"{row.num_devices:>8}  no plan: {row.problem}")
            continue
        lines.append(
            f"{row.num_devices:>8}  {row.mode:<13} {number(row.iteration_s):>11} {number(row.units_per_s):>12}  "
            f"{row.bottleneck}"
        )
    target = result.options.target
    if target is not None:
        met = result.target_row()
        wanted = target.describe(result.unit)
        if met is None:
            lines.append(f"target {wanted}: NOT MET by any swept size")
        else:
            lines.append(
                f"target {wanted}: met with {met.num_devices} devices ({met.mode}, iteration {number(met.iteration_s)} s)"
            )
    return "\n".join(lines) + "\n"
