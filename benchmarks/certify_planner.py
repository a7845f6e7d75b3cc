"""The planner against the certified optimum of its whole plan space, where plain brute force would take too long.

    python benchmarks/certify_planner.py                                          # 32 and 64 devices, print
    python benchmarks/certify_planner.py --artifact docs/data/planner_optimality.json   # and store the results

For each shipped GRPO trace and size, ``planner.search`` (what ``rlinf plan`` runs) chooses a plan; then brute force
(:func:`planner.brute_force.brute_force`) takes that plan as its incumbent, holds only the programs of the space
whose proven lower bound (:mod:`planner.bounds`) is below its simulated time, and simulates those in the order of
the bound until the bound reaches the best time found. Every other program has a bound at least that time, so the
best time is the optimum of the space (exact, not sampled); gap = planner / optimum - 1. With ``--max-simulated``
brute force may stop early and then certifies only a lower bound (the gap shown is then an upper bound).

The space is the planner's default one (``planner.space.build_space``: contiguous collocated groups, any multiple
of the model-parallel size per group, granularities 1, 2, 4, ..., 64, offload on or off, synchronous). Minutes of
CPU and a CP-SAT search with a time limit, so the results go to a JSON artifact with their provenance, and
``benchmarks/measurements.py`` renders the table of ``docs/planner_bruteforce.md`` from it
(``tests/test_measurements.py`` checks the two agree).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import suite

from planner.brute_force import brute_force
from planner.judge import Evaluation
from planner.search import prepare, search
from planner.space import DEFAULT_MAX_GRANULARITY, DEFAULT_MAX_LOOP_STAGES
from rlinf.core.costs import fit
from rlinf.core.errors import ExtrapolationWarning
from rlinf.core.trace import load_trace

TRACES = ("traces/grpo_1.5b_h100.json", "traces/grpo_7b_h100.json", "traces/grpo_32b_h200.json")
SIZES = (32, 64)
ARTIFACT = "docs/data/planner_optimality.json"


@attrs.frozen(kw_only=True)
class Certificate:
    """The planner's chosen plan against the optimum of the whole plan space on one trace and size."""

    trace: str
    """The trace file's stem."""
    num_devices: int
    planner_s: float
    """Simulated seconds of the plan ``planner.search`` chose (the incumbent)."""
    planner_plan: str
    planner_source: str
    """Who proposed the chosen plan (``cp-sat#1``, ``collocated``, ...)."""
    best_s: float
    """The fastest simulated time found in the space (the planner's, unless brute force beat it)."""
    best_plan: str
    lower_bound_s: float
    """No program of the space simulates faster: :attr:`best_s` when :attr:`complete`."""
    least_bound_s: float
    """The least bound of any program (capped at the planner's time): what the bound alone certifies."""
    complete: bool
    """Whether every program that could beat the best was simulated (the optimum is then exact)."""
    num_points: int
    """Points of the space."""
    num_programs: int
    """Distinct programs they lower to."""
    num_held: int
    """Programs whose bound is below the planner's time: the only ones that could beat it."""
    num_simulated: int
    search_s: float
    """Wall seconds of ``planner.search``."""
    certify_s: float
    """Wall seconds of the bounds and the brute force."""

    @property
    def gap(self) -> float:
        """planner / optimum - 1 (exact when :attr:`complete`, else an upper bound)."""
        return self.planner_s / self.lower_bound_s - 1

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Certificate:
        """A certificate as :func:`attrs.asdict` wrote it."""
        return cls(**data)


def _describe(evaluation: Evaluation) -> str:
    return evaluation.plan.describe()


def certify_case(
    path: str, num_devices: int, *, seed: int = 0, max_simulated: int | None = None
) -> Certificate:
    """``planner.search``'s plan on one trace and size, and brute force over the whole space from it."""
    trace = load_trace(path)
    cluster = trace.cluster.with_num_devices(num_devices)
    costs = fit(trace, cluster)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        started = time.perf_counter()
        chosen = search(trace.workflow, cluster, costs, seed=seed).best
        search_s = time.perf_counter() - started
        started = time.perf_counter()
        space, _ = prepare(
            trace.workflow,
            cluster,
            costs,
            max_granularity=DEFAULT_MAX_GRANULARITY,
            max_loop_stages=DEFAULT_MAX_LOOP_STAGES,
        )
        brute = brute_force(
            trace.workflow, cluster, costs, space, incumbent=chosen, max_simulated=max_simulated
        )
        certify_s = time.perf_counter() - started
    return Certificate(
        trace=Path(path).stem,
        num_devices=num_devices,
        planner_s=chosen.iteration_s,
        planner_plan=_describe(chosen),
        planner_source=chosen.source,
        best_s=brute.best.iteration_s,
        best_plan=_describe(brute.best),
        lower_bound_s=brute.lower_bound_s,
        least_bound_s=brute.least_bound_s,
        complete=brute.complete,
        num_points=brute.num_points,
        num_programs=brute.num_programs,
        num_held=brute.num_held,
        num_simulated=brute.num_simulated,
        search_s=round(search_s, 1),
        certify_s=round(certify_s, 1),
    )


def _s(seconds: float) -> str:
    return f"{seconds:.2f}"


def certificate_table(certificates: Sequence[Certificate]) -> str:
    """One row per trace and size: the planner's plan against the certified optimum (or lower bound)."""
    lines = [
        "| trace | devices | planner s | optimum s | gap | distinct programs | bound below the planner's | "
        "simulated | planner search s | certification s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in certificates:
        optimum, gap = _s(c.lower_bound_s), f"{100 * c.gap:.3f}%"
        if not c.complete:
            optimum, gap = f">= {optimum}", f"<= {gap}"
        lines.append(
            f"| {c.trace} | {c.num_devices} | {_s(c.planner_s)} | {optimum} | {gap} | {c.num_programs:,} | "
            f"{c.num_held:,} | {c.num_simulated:,} | {c.search_s:.0f} | {c.certify_s:.0f} |"
        )
    return "\n".join(lines)


def certificate_summary(certificates: Sequence[Certificate], *, plans: bool = True) -> str:
    """The largest gap in one sentence, whether every optimum is exact, and (``plans``) the plans of the largest
    gap."""
    sizes = sorted({c.num_devices for c in certificates})
    exact = sum(c.complete for c in certificates)
    kind = (
        "every optimum exact"
        if exact == len(certificates)
        else f"{exact} optima exact, the others lower bounds"
    )
    worst = max(certificates, key=lambda c: c.gap)
    text = (
        f"At {' and '.join(str(n) for n in sizes)} devices: largest gap **{100 * worst.gap:.3f}%** over "
        f"{len(certificates)} cases, {kind}."
    )
    if plans and worst.best_plan != worst.planner_plan:
        text += (
            f" Largest on {worst.trace} at {worst.num_devices} devices: the planner chose `{worst.planner_plan}`, "
            f"the optimum is `{worst.best_plan}`."
        )
    return text


def certificates_of(artifact: dict[str, Any]) -> list[Certificate]:
    """The certificates of an artifact written by ``--artifact`` (its JSON, read)."""
    return [Certificate.from_dict(c) for c in artifact["certificates"]]


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: the table on stdout, the artifact where ``--artifact`` says."""
    parser = argparse.ArgumentParser(
        prog="python benchmarks/certify_planner.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--traces", nargs="+", default=list(TRACES))
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-simulated", type=int, help="simulations per case at most")
    parser.add_argument("--artifact", help=f"write the results here (e.g. {ARTIFACT})")
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/certify_planner.py", argv)
    certificates = []
    for path in args.traces:
        for num_devices in args.sizes:
            certificate = certify_case(path, num_devices, seed=args.seed, max_simulated=args.max_simulated)
            certificates.append(certificate)
            print(
                f"{certificate.trace} on {num_devices} devices: gap {100 * certificate.gap:.3f}%",
                file=sys.stderr,
                flush=True,
            )
    if args.artifact:
        body = {
            "max_simulated": args.max_simulated,
            "certificates": [attrs.asdict(c) for c in certificates],
        }
        suite.write_artifact(args.artifact, body, started)
    sys.stdout.write(f"{certificate_table(certificates)}\n\n{certificate_summary(certificates)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
