"""The planner against its baselines on the shipped traces, as a Markdown table.

    python -m planner.compare --out docs/planner_table.md              # 8 ... 1024 devices
    python -m planner.compare --brute-force --sizes 8 16 --out docs/planner_bruteforce.md

Every number is a simulated iteration time (the simulator judges every plan); speedup = baseline / chosen.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

from planner.baselines import brute_force, closed_form, fixed_collocated, fixed_disaggregated
from planner.search import prepare, search
from planner.space import DEFAULT_MAX_GRANULARITY, DEFAULT_MAX_LOOP_STAGES
from rlinf.costs import fit
from rlinf.errors import ExtrapolationWarning
from rlinf.files import write_text_atomic
from rlinf.trace import load_trace

TRACES = ("traces/grpo_1.5b_h100.json", "traces/grpo_7b_h100.json", "traces/grpo_32b_h200.json")
SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)


def _seconds(evaluation) -> float:  # noqa: ANN001
    return evaluation.iteration_s if evaluation is not None and evaluation.fits else math.inf


def compare(traces: tuple[str, ...], sizes: tuple[int, ...], *, seed: int, with_brute_force: bool) -> str:
    """The Markdown report."""
    rows: list[str] = []
    ratios: dict[str, list[float]] = {"collocated": [], "disaggregated": [], "closed-form": []}
    gaps = []
    for path in traces:
        trace = load_trace(path)
        for num_devices in sizes:
            cluster = trace.cluster.with_num_devices(num_devices)
            costs = fit(trace, cluster)
            result = search(trace.workflow, cluster, costs, seed=seed)
            _, tables = prepare(
                trace.workflow,
                cluster,
                costs,
                max_granularity=DEFAULT_MAX_GRANULARITY,
                max_loop_stages=DEFAULT_MAX_LOOP_STAGES,
            )
            chosen = result.best.iteration_s
            baselines = {
                "collocated": _seconds(fixed_collocated(trace.workflow, cluster, costs, tables)),
                "disaggregated": _seconds(fixed_disaggregated(trace.workflow, cluster, costs, tables)),
                "closed-form": _seconds(closed_form(trace.workflow, cluster, costs, tables)),
            }
            cells = []
            for name, seconds in baselines.items():
                if math.isfinite(seconds):
                    ratios[name].append(seconds / chosen)
                    cells.append(f"{seconds:.1f} ({seconds / chosen:.2f}x)")
                else:
                    cells.append("no fit")
            row = f"| {Path(path).stem} | {num_devices} | {result.plan.mode} | {chosen:.1f} | " + " | ".join(
                cells
            )
            row += f" | {result.search_s:.2f} | {result.plan.describe().split(': ', 1)[1]} |"
            if with_brute_force:
                space, _ = prepare(
                    trace.workflow,
                    cluster,
                    costs,
                    max_granularity=DEFAULT_MAX_GRANULARITY,
                    max_loop_stages=DEFAULT_MAX_LOOP_STAGES,
                )
                started = time.perf_counter()
                exhaustive = brute_force(trace.workflow, cluster, costs, space)
                gap = chosen / exhaustive.best.iteration_s - 1
                gaps.append(gap)
                row += f" {exhaustive.best.iteration_s:.2f} | {100 * gap:.3f}% | {exhaustive.num_points} | {time.perf_counter() - started:.0f} |"
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
    header = "| trace | devices | chosen mode | chosen s | collocated s (speedup) | disaggregated s (speedup) | closed-form s (speedup) | search s | chosen plan |"
    rule = "|---|---|---|---|---|---|---|---|---|"
    if with_brute_force:
        header += " brute-force s | gap | plans | brute-force wall s |"
        rule += "---|---|---|---|"
    means = [
        f"- geometric-mean speedup over {name}: {math.exp(sum(math.log(r) for r in values) / len(values)):.3f}x "
        f"over {len(values)} cases (min {min(values):.3f}x)"
        for name, values in ratios.items()
        if values
    ]
    if gaps:
        means.append(f"- largest gap to brute force: {100 * max(gaps):.3f}%")
    return "\n".join([header, rule, *rows, "", *means]) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m planner.compare", description=__doc__.splitlines()[0])
    parser.add_argument("--traces", nargs="+", default=list(TRACES))
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--brute-force", action="store_true", help="also simulate the whole plan space (slow)"
    )
    parser.add_argument("--out", default=None, help="Markdown file to write (default: stdout)")
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        text = compare(
            tuple(args.traces), tuple(args.sizes), seed=args.seed, with_brute_force=args.brute_force
        )
    if args.out:
        write_text_atomic(Path(args.out), text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
