"""Search the plan space of a trace's workflow: CP-SAT candidates ranked by simulation; writes the chosen plan."""

from __future__ import annotations

import argparse
import json
import sys

from planner import search
from planner.search import DEFAULT_K, DEFAULT_TIME_LIMIT_S, SearchResult
from planner.space import DEFAULT_MAX_GRANULARITY
from rlinf.commands import values
from rlinf.commands.trace_args import add_trace_arguments, trace_and_cluster
from rlinf.core.cluster import GIB
from rlinf.core.costs import fit
from rlinf.core.files import write_text_atomic
from rlinf.core.outputs import check_output_file, writing

MAX_TOP = 10_000
"""More CP-SAT candidates than this cannot all be simulated in any useful time."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``rlinf plan``."""
    add_trace_arguments(parser)
    parser.add_argument(
        "--top",
        type=values.count(1, MAX_TOP),
        default=DEFAULT_K,
        help=f"CP-SAT candidates to simulate (default {DEFAULT_K})",
    )
    parser.add_argument(
        "--time-limit",
        type=values.positive_seconds,
        default=DEFAULT_TIME_LIMIT_S,
        help="CP-SAT seconds in all (default 10)",
    )
    parser.add_argument("--seed", type=values.seed, default=0, help="CP-SAT random seed (default 0)")
    parser.add_argument(
        "--max-granularity",
        type=values.count(1, limit="max_micro_batches"),
        default=DEFAULT_MAX_GRANULARITY,
        help="largest micro-batch count tried (default 32)",
    )
    parser.add_argument(
        "--max-staleness",
        type=values.count(0, 64),
        default=0,
        help="how many iterations the rollout side may run ahead of training (default 0: synchronous plans only)",
    )
    parser.add_argument(
        "--out", default=None, help="write the chosen plan here as YAML (for rlinf simulate --plan)"
    )


def run(args: argparse.Namespace) -> int:
    """Fit, search, print the ranking and write the chosen plan."""
    out = check_output_file(args.out, "--out") if args.out is not None else None
    trace, cluster = trace_and_cluster(args)
    costs = fit(trace, cluster)
    result = search(
        trace.workflow,
        cluster,
        costs,
        k=args.top,
        time_limit_s=args.time_limit,
        seed=args.seed,
        max_granularity=args.max_granularity,
        max_staleness=args.max_staleness,
    )
    report = result.to_dict()
    report.update(
        trace=str(args.trace), cluster=cluster.spec(), seed=args.seed, max_staleness=args.max_staleness
    )
    if out is not None:
        with writing(out, "--out"):
            write_text_atomic(
                out,
                f"# rlinf plan --trace {args.trace} --cluster {cluster.spec()} --seed {args.seed}"
                + (f" --max-staleness {args.max_staleness}" if args.max_staleness else "")
                + "\n"
                + result.plan.to_yaml(),
            )
        report["out"] = str(out)
    if args.json:
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_table(result, cluster.spec()))
        if out is not None:
            sys.stdout.write(f"plan written to {args.out}\n")
    return 0


def format_table(result: SearchResult, cluster_spec: str) -> str:
    """The ranking as a text table, chosen plan first."""
    lines = [
        f"{len(result.ranking)} plans simulated on {cluster_spec} (space of {result.space_size} plans) in {result.search_s:.2f} s",
        f"{'#':>3}  {'source':<12} {'mode':<13} {'iteration_s':>12} {'throughput':>16} {'peak_GiB':>9}  placement | granularity | offload",
    ]
    for i, evaluation in enumerate(result.ranking, 1):
        unit, rate = next(iter(evaluation.throughput.items()), ("", 0.0))
        seconds = f"{evaluation.iteration_s:.4g}" if evaluation.fits else "no fit"
        describe = evaluation.plan.describe().split(": ", 1)[1]
        lines.append(
            f"{i:>3}  {evaluation.source:<12} {evaluation.plan.mode:<13} {seconds:>12} "
            f"{rate:>10.4g} {unit.replace('_per_s', '/s'):<5} {evaluation.peak_memory_bytes / GIB:>9.1f}  {describe}"
        )
    lines.append(f"chosen: {result.plan.describe()} ({result.best.iteration_s:.4g} s per iteration)")
    synchronous = result.best_synchronous
    if result.plan.max_staleness and synchronous is not None:
        lines.append(
            f"the best synchronous plan takes {synchronous.iteration_s:.4g} s: the chosen plan is "
            f"{synchronous.iteration_s / result.best.iteration_s:.2f}x faster ({synchronous.plan.describe()})"
        )
    return "\n".join(lines) + "\n"
