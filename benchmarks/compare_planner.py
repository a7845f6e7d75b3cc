"""The planner's own candidates against its baselines and against brute force on the shipped traces.

    python benchmarks/compare_planner.py                             # 8 ... 1024 devices, against the baselines
    python benchmarks/compare_planner.py --brute-force --sizes 8 16  # and against brute force over the whole space

Every number is a simulated iteration time (the simulator judges every plan); speedup = baseline / planner. The
planner's figure is the best of its own candidates (CP-SAT's, refined, and for a loop their variants with the
loop spread over every device, :func:`planner.search.is_own`): the baselines' plans that :func:`planner.search` also simulates
(and their spread variants) are left out of it, so a baseline that beats the planner shows as a
speedup below 1. The tables in ``docs/planner_table.md`` and ``docs/planner_bruteforce.md`` are these, written
by ``python benchmarks/doc_figures.py --write``.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import attrs

from planner.baselines import closed_form, fixed_collocated, fixed_disaggregated
from planner.brute_force import BruteForceResult, brute_force
from planner.judge import Evaluation
from planner.search import SearchResult, is_own, prepare, search
from planner.space import DEFAULT_MAX_GRANULARITY, DEFAULT_MAX_LOOP_STAGES
from rlinf.core.costs import fit
from rlinf.core.errors import ExtrapolationWarning
from rlinf.core.trace import load_trace

TRACES = ("traces/grpo_1.5b_h100.json", "traces/grpo_7b_h100.json", "traces/grpo_32b_h200.json")
SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)
BASELINES = {"collocated": fixed_collocated, "disaggregated": fixed_disaggregated, "closed-form": closed_form}


@attrs.frozen(kw_only=True)
class Case:
    """One trace on one cluster size: the planner's own best plan, the search's choice, each baseline's."""

    trace: str
    """The trace file's stem."""
    num_devices: int
    own: Evaluation | None
    """The fastest of the planner's own candidates that fits (None when none does)."""
    chosen: SearchResult
    """What :func:`planner.search` returns (its own candidates and the baselines' plans, ranked)."""
    baselines_s: dict[str, float]
    """Each baseline's simulated seconds (infinite when it has no plan that fits)."""
    brute: BruteForceResult | None = None


def _seconds(evaluation: Evaluation | None) -> float:
    return evaluation.iteration_s if evaluation is not None and evaluation.fits else math.inf


def compare_case(path: str, num_devices: int, *, seed: int = 0, with_brute_force: bool = False) -> Case:
    """The planner, its baselines and (optionally) brute force on one trace and cluster size."""
    trace = load_trace(path)
    cluster = trace.cluster.with_num_devices(num_devices)
    costs = fit(trace, cluster)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        chosen = search(trace.workflow, cluster, costs, seed=seed)
        space, tables = prepare(
            trace.workflow,
            cluster,
            costs,
            max_granularity=DEFAULT_MAX_GRANULARITY,
            max_loop_stages=DEFAULT_MAX_LOOP_STAGES,
        )
        baselines = {
            name: _seconds(baseline(trace.workflow, cluster, costs, tables))
            for name, baseline in BASELINES.items()
        }
        brute = brute_force(trace.workflow, cluster, costs, space) if with_brute_force else None
    own = [e for e in chosen.ranking if is_own(e.source) and e.fits]
    return Case(
        trace=Path(path).stem,
        num_devices=num_devices,
        own=own[0] if own else None,
        chosen=chosen,
        baselines_s=baselines,
        brute=brute,
    )


def _describe(evaluation: Evaluation) -> str:
    return evaluation.plan.describe().split(": ", 1)[1]


def comparison_table(cases: Sequence[Case]) -> str:
    """The planner's own best plan against each baseline, one row per case."""
    lines = [
        "| trace | devices | planner mode | planner s | "
        + " | ".join(f"{name} s (speedup)" for name in BASELINES)
        + " | planner plan |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        own_s = _seconds(case.own)
        cells = [
            f"{seconds:.1f} ({seconds / own_s:.2f}x)" if math.isfinite(seconds) else "no fit"
            for seconds in case.baselines_s.values()
        ]
        mode, plan = ("no fit", "-") if case.own is None else (case.own.plan.mode, _describe(case.own))
        lines.append(
            f"| {case.trace} | {case.num_devices} | {mode} | {own_s:.1f} | "
            + " | ".join(cells)
            + f" | {plan} |"
        )
    return "\n".join(lines)


def speedup_summary(cases: Sequence[Case]) -> str:
    """Per baseline, the geometric-mean, smallest and largest speedup of the planner's own best plan."""
    lines = []
    for name in BASELINES:
        ratios = [
            case.baselines_s[name] / _seconds(case.own)
            for case in cases
            if math.isfinite(case.baselines_s[name]) and case.own is not None
        ]
        if ratios:
            mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            lines.append(
                f"- over {name}: geometric mean **{mean:.3f}x** over {len(ratios)} cases "
                f"(min {min(ratios):.3f}x, max {max(ratios):.3f}x)"
            )
    return "\n".join(lines)


def brute_force_row(case: Case) -> str:
    """One row of :func:`brute_force_table`."""
    assert case.brute is not None and case.own is not None, case
    brute = case.brute
    gap = _seconds(case.own) / brute.best.iteration_s - 1
    return (
        f"| {case.trace} | {case.num_devices} | {_s(case.own.iteration_s)} | {_s(brute.best.iteration_s)} | "
        f"{100 * gap:.3f}% | {brute.num_points:,} | {brute.num_programs:,} | {brute.num_simulated:,} | "
        f"{brute.best.plan.mode}: {_describe(brute.best)} |"
    )


def _s(seconds: float) -> str:
    """Seconds with two decimals, or four below one second (a CPU profile's iterations)."""
    return f"{seconds:.2f}" if seconds >= 1 else f"{seconds:.4f}"


def brute_force_table(cases: Sequence[Case]) -> str:
    """The planner's own best plan against the best plan of the whole space, one row per case."""
    return "\n".join(
        [
            "| trace | devices | planner s | brute-force s | gap | plans in the space | distinct programs | "
            "programs simulated | brute-force plan |",
            "|---|---|---|---|---|---|---|---|---|",
            *(brute_force_row(case) for case in cases),
        ]
    )


def gap_summary(cases: Sequence[Case]) -> str:
    """The largest gap of the planner's own best plan to brute force, and the space's sizes."""
    gaps = [
        _seconds(case.own) / case.brute.best.iteration_s - 1
        for case in cases
        if case.brute is not None and case.own is not None
    ]
    points = [case.brute.num_points for case in cases if case.brute is not None]
    return (
        f"Largest gap: **{100 * max(gaps):.3f}%** over {len(gaps)} cases "
        f"({min(points):,} to {max(points):,} plans in the space)."
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: the tables on stdout."""
    parser = argparse.ArgumentParser(
        prog="python benchmarks/compare_planner.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--traces", nargs="+", default=list(TRACES))
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--brute-force", action="store_true", help="also search the whole plan space")
    args = parser.parse_args(argv)
    cases = []
    for path in args.traces:
        for num_devices in args.sizes:
            cases.append(compare_case(path, num_devices, seed=args.seed, with_brute_force=args.brute_force))
            print(f"{Path(path).stem} on {num_devices} devices done", file=sys.stderr, flush=True)
    parts = [comparison_table(cases), speedup_summary(cases)]
    if args.brute_force:
        parts += [brute_force_table(cases), gap_summary(cases)]
    sys.stdout.write("\n\n".join(parts) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
