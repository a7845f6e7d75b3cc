"""Every generated figure of the README and docs, regenerated or checked by one command.

Usage::

    python benchmarks/doc_figures.py           # print every simulated table
    python benchmarks/doc_figures.py --check   # exit 1 when a doc differs from what the code and artifacts give
    python benchmarks/doc_figures.py --write   # rewrite every generated block and picture of the docs

``--check`` and ``--write`` cover the three kinds of generated block: the simulated figures computed here (kind
``figures``), the measured figures rendered from the committed artifacts (kind ``measured``,
``benchmarks/measurements.py``) and the analytic model against published runs (``benchmarks/analytic_validation.py``);
each of those two also runs alone. Each table sits in its file between ``<!-- figures:NAME -->`` and
``<!-- /figures:NAME -->``; ``tests/test_doc_figures.py`` fails when one drifts from this script's output (a hand
edit included). The simulated ones: the 7B trace under the example plans (README) and the planner's plan by
cluster size (docs/planner.md); the planner's own candidates against the baselines on every shipped trace at
8-1024 devices (docs/planner_table.md, summaries in README and docs/planner.md); against brute force over the
whole plan space at 8 and 16 devices, and on the Hopper profile's own 2 cores (docs/planner_bruteforce.md,
summaries likewise); the capacity example (docs/capacity.md, its answer also in the README; with ``--write`` also
its two charts). Every one of them is a simulation; none is a measured time."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import re
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import analytic_validation
import measurements
import suite
from compare_planner import (
    TRACES,
    Case,
    brute_force_table,
    compare_case,
    comparison_table,
    gap_summary,
    speedup_summary,
)
from suite import Block, indented

from rlinf.capacity import CapacityResult, SweepOptions, Target, parse_whatif, sweep, write_report
from rlinf.capacity.document import number
from rlinf.capacity.sections import build_document
from rlinf.cli import main as rlinf
from rlinf.core.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
TRACE = "traces/grpo_7b_h100.json"
PLANS = {
    "collocated (offload all, 8 micro-batches)": "examples/plans/collocated.yaml",
    "disaggregated (32 micro-batches)": "examples/plans/disaggregated.yaml",
    "hybrid (reward on the rollout devices)": "examples/plans/hybrid.yaml",
}
SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)
BRUTE_FORCE_SIZES = (8, 16)
LOOP_BRUTE_FORCE_CASE = ("traces/hopper_ppo_cpu2.json", 2)
"""The env <-> policy loop against brute force: the Hopper profile on its own 2 CPU cores, where the best plan
spreads the loop over both cores (outside the space's contiguous groups, in brute force's spread-loop programs)."""
CAPACITY_STRATEGIES = ("best", "collocated", "disaggregated", "closed-form")
CAPACITY_WHATIFS = ("trace.response_length_scale=1.5", "trace.device=H200", "trace.batch_scale=2")
CAPACITY_WHATIF_SIZES = (8, 64, 256, 1024)
CAPACITY_DEADLINE_S = 150.0
CAPACITY_CHARTS = {
    "throughput.png": "docs/capacity_throughput.png",
    "breakdown.png": "docs/capacity_breakdown.png",
}


# ------------------------------------------------------------------------------------------ computations
@functools.cache
def case(path: str, num_devices: int, with_brute_force: bool = False) -> Case:
    """The planner against its baselines (and brute force) on one trace and size, computed once per process."""
    return compare_case(str(ROOT / path), num_devices, with_brute_force=with_brute_force)


def cases() -> list[Case]:
    return [case(path, n) for path in TRACES for n in SIZES]


def brute_force_cases() -> list[Case]:
    return [case(path, n, True) for path in TRACES for n in BRUTE_FORCE_SIZES] + [
        case(*LOOP_BRUTE_FORCE_CASE, True)
    ]


@functools.cache
def capacity(whatifs: bool) -> CapacityResult:
    """The capacity sweep of the 7B trace: every strategy at 8-1024 devices, or (``whatifs``) the planner's best
    plan at a few sizes for the baseline and each what-if series."""
    options = SweepOptions(
        device_counts=CAPACITY_WHATIF_SIZES if whatifs else SIZES,
        strategies=("best",) if whatifs else CAPACITY_STRATEGIES,
        price_per_device_hour=2.5,
        target=Target(kind="deadline", value=CAPACITY_DEADLINE_S),
    )
    series = [parse_whatif(text) for text in CAPACITY_WHATIFS] if whatifs else []
    return sweep(load_trace(ROOT / TRACE), options, whatifs=series, trace_name=Path(TRACE).name, jobs=1)


# ------------------------------------------------------------------------------------------------ tables
def simulate_table() -> str:
    """The 7B trace on its cluster under each example plan."""
    lines = ["| plan | iteration | samples/s | tokens/s | bubble |", "| --- | --- | --- | --- | --- |"]
    for name, plan in PLANS.items():
        result = suite.rlinf_json(
            ["simulate", "--trace", str(ROOT / TRACE), "--plan", str(ROOT / plan), "--json"]
        )
        speed = result["throughput"]
        lines.append(
            f"| {name} | {result['iteration_s']:.1f} s | {speed['samples_per_s']:.2f} | "
            f"{speed['tokens_per_s']:,.0f} | {100 * result['bubble_fraction']:.1f}% |"
        )
    return "\n".join(lines)


def size_table() -> str:
    """The mode and simulated seconds per iteration of the plan ``rlinf plan`` picks for the 7B trace at each
    cluster size (:func:`planner.search`: its own candidates and the baselines' plans, ranked)."""
    chosen = [case(TRACE, n).chosen for n in SIZES]
    return "\n".join(
        [
            "| devices | " + " | ".join(str(n) for n in SIZES) + " |",
            "|" + "---|" * (len(SIZES) + 1),
            "| mode | " + " | ".join(c.plan.mode for c in chosen) + " |",
            "| s/iteration | " + " | ".join(f"{c.best.iteration_s:.1f}" for c in chosen) + " |",
        ]
    )


ASYNC_SIZES = (16, 32, 64, 128)
ASYNC_GANTT = "docs/async_7b_gantt.png"
"""The steady state of the planner's staleness-1 plan for the 7B trace on its own 32 GPUs (``--write``)."""


@functools.cache
def fitted_7b(num_devices: int) -> tuple[Any, Any, Any]:
    """The 7B trace, its cluster at ``num_devices`` and the cost model fitted for it (once per size)."""
    from rlinf.core.costs import fit

    trace = load_trace(ROOT / TRACE)
    cluster = trace.cluster.with_num_devices(num_devices)
    return trace, cluster, fit(trace, cluster)


@functools.cache
def async_search(num_devices: int, max_staleness: int) -> Any:
    """:func:`planner.search` on the 7B trace at ``num_devices`` with the bound ``max_staleness``."""
    from planner import search

    trace, cluster, costs = fitted_7b(num_devices)
    return search(trace.workflow, cluster, costs, max_staleness=max_staleness)


def async_table() -> str:
    """Simulated seconds per iteration of the 7B trace: the fixed collocated plan, the best synchronous plan, and
    the best plans with a staleness bound of at most 1 and 2 (each with its speedup over the two synchronous ones)."""
    lines = [
        "| devices | collocated (sync) | best synchronous | staleness <= 1 | staleness <= 2 |",
        "| --- | --- | --- | --- | --- |",
    ]
    for n in ASYNC_SIZES:
        one, two = async_search(n, 1), async_search(n, 2)
        collocated = next(e for e in one.ranking if e.source == "collocated")
        synchronous = one.best_synchronous
        assert synchronous is not None

        cells = [
            f"{r.best.iteration_s:.1f} s, k={r.best.plan.max_staleness}: "
            f"{collocated.iteration_s / r.best.iteration_s:.2f}x / "
            f"{synchronous.iteration_s / r.best.iteration_s:.2f}x"
            for r in (one, two)
        ]
        lines.append(
            f"| {n} | {collocated.iteration_s:.1f} s | {synchronous.iteration_s:.1f} s | {cells[0]} | {cells[1]} |"
        )
    return "\n".join(lines)


def staleness_one_bound(num_devices: int) -> tuple[float, str]:
    """The fastest a staleness-1 steady state of the 7B trace could be on ``num_devices`` under the cost model's
    whole-batch prices, and the split that reaches it: with k = 1 the rollout side and the training side each run
    alone, so an iteration lasts at least the longest of generating one batch on the rollout's devices, scoring it
    on the inference's (its own devices, or sharing the rollout's or the actor's, then added to theirs) and
    training on the actor's (a multiple of its model-parallel size), minimized over every split; the reward, the
    transfers, the weight sync and the pipeline's fill and drain are left out."""
    trace, _, costs = fitted_7b(num_devices)
    batch, mp = trace.workflow.batch_size, trace.workflow.component("actor").model_parallel_size

    @functools.cache
    def seconds(component: str, op: str, devices: int) -> float:
        return costs.compute_seconds(component, op, devices, batch)

    splits = []
    for rollout in range(1, num_devices):
        gen = seconds("rollout", "generate", rollout)
        for actor in range(mp, num_devices - rollout + 1, mp):
            train, inference = seconds("actor", "train", actor), num_devices - rollout - actor
            if inference:
                score = seconds("inference", "infer", inference)
                splits.append(
                    (max(gen, score, train), f"rollout {rollout}, inference {inference}, actor {actor}")
                )
            else:
                shared_rollout = max(gen + seconds("inference", "infer", rollout), train)
                shared_actor = max(gen, seconds("inference", "infer", actor) + train)
                splits.append((shared_rollout, f"rollout and inference {rollout}, actor {actor}"))
                splits.append((shared_actor, f"rollout {rollout}, inference and actor {actor}"))
    return min(splits)


def async_bound_table() -> str:
    """The best synchronous and staleness-1 plans of the 7B trace against :func:`staleness_one_bound`."""
    lines = [
        "| devices | best synchronous | best staleness-1 plan | staleness-1 bound (its split) | bound's speedup |",
        "| --- | --- | --- | --- | --- |",
    ]
    for n in ASYNC_SIZES:
        one = async_search(n, 1)
        synchronous = one.best_synchronous
        assert synchronous is not None
        best_one = min(e.iteration_s for e in one.ranking if e.fits and e.plan.max_staleness == 1)
        bound, split = staleness_one_bound(n)
        assert best_one >= bound, f"a staleness-1 plan at {n} devices beats the bound: {best_one} < {bound}"
        lines.append(
            f"| {n} | {synchronous.iteration_s:.1f} s | {best_one:.1f} s | {bound:.1f} s ({split}) | "
            f"{synchronous.iteration_s / bound:.2f}x |"
        )
    return "\n".join([*lines, "", textwrap.fill(BOUND_SPLIT_PLAN_NOTE.format(**bound_split_plan()), 115)])


BOUND_SPLIT_PLAN = """placement: {rollout: 0-13, reward: 0-13, inference: 14-19, actor: 20-31}
granularity: {rollout->reward: 64, reward->inference: 64, inference->actor: 64}
max_staleness: 1
"""
"""The staleness-1 plan at the 32-GPU bound's split (the reward beside the rollout, 64 micro-batches)."""
BOUND_SPLIT_PLAN_NOTE = (
    "At 32 GPUs the plan at the bound's split (`rollout 0-13` with the reward, `inference 14-19`, `actor 20-31`, "
    "64 micro-batches, k = 1) simulates {iteration:.1f} s with the buffer before the actor: generation busy "
    "{generate:.1f} s, inference from {inference_start:.1f} s to {inference_end:.1f} s, training busy {train:.1f} "
    "s; with the buffer before the inference (`buffer_before: [inference]`) it simulates {behind_iteration:.1f} s, "
    "inference from {behind_inference_start:.1f} s to {behind_inference_end:.1f} s."
)


def bound_split_plan() -> dict[str, float]:
    """The simulated iteration of :data:`BOUND_SPLIT_PLAN` on the 7B trace's 32 GPUs, with when each side works."""
    from rlinf.core.lowering import lower
    from rlinf.core.plan import plan_from_yaml
    from simulator import simulate

    trace, cluster, costs = fitted_7b(32)
    out: dict[str, float] = {}
    for prefix, behind in (("", ""), ("behind_", "buffer_before: [inference]\n")):
        program = lower(trace.workflow, plan_from_yaml(BOUND_SPLIT_PLAN + behind, 32), cluster)
        timeline = simulate(program, costs)
        spans = {
            name: [
                (timeline.start_s[op.index], timeline.end_s[op.index])
                for op in program.ops
                if op.component == name and op.kind == "compute"
            ]
            for name in ("rollout", "inference", "actor")
        }
        out |= {
            f"{prefix}iteration": timeline.iteration_s,
            f"{prefix}generate": sum(e - s for s, e in spans["rollout"]),
            f"{prefix}inference_start": min(s for s, _ in spans["inference"]),
            f"{prefix}inference_end": max(e for _, e in spans["inference"]),
            f"{prefix}train": sum(e - s for s, e in spans["actor"]),
        }
    return out


def write_async_gantt() -> None:
    """The Gantt chart of the staleness-1 plan at the trace's own size, as ``rlinf simulate --out`` draws it."""
    trace = load_trace(ROOT / TRACE)
    with tempfile.TemporaryDirectory() as out:
        plan = Path(out) / "plan.yaml"
        plan.write_text(async_search(trace.cluster.num_devices, 1).plan.to_yaml())
        with contextlib.redirect_stdout(io.StringIO()):
            rlinf(["simulate", "--trace", str(ROOT / TRACE), "--plan", str(plan), "--out", out])
        (ROOT / ASYNC_GANTT).write_bytes((Path(out) / "gantt.png").read_bytes())


def capacity_answer() -> str:
    """The report's answer to the deadline, as it prints it."""
    document = build_document(capacity(False), has_gantt=False)
    answer = next(s for s in document.sections if s.id == "target")
    return f"> {answer.blocks[0]}"


def capacity_table() -> str:
    """Iteration time and throughput per strategy at each size (columns of the report's throughput table)."""
    result = capacity(False)
    lines = [
        "| devices | best iteration (s) | "
        + " | ".join(f"{s} samples/s" for s in CAPACITY_STRATEGIES)
        + " | best scaling efficiency |",
        "| ---: | ---: | " + "---: | " * len(CAPACITY_STRATEGIES) + "---: |",
    ]
    for n in SIZES:
        best = result.row("baseline", "best", n)
        cells = [str(n), number(best.iteration_s) if best.has_plan else "no plan"]
        for strategy in CAPACITY_STRATEGIES:
            row = result.row("baseline", strategy, n)
            cells.append(number(row.units_per_s) if row.has_plan else "no plan")
        cells.append(number(result.scaling_efficiency(best), 3) if best.has_plan else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def capacity_whatif_table() -> str:
    """The best plan's samples/s per what-if series (and its ratio to the baseline) at a few sizes."""
    result = capacity(True)
    labels = result.series[1:]
    lines = [
        "| devices | baseline samples/s | " + " | ".join(f"{label} samples/s" for label in labels) + " |",
        "| ---: | ---: |" + " ---: |" * len(labels),
    ]
    for n in CAPACITY_WHATIF_SIZES:
        base = result.row("baseline", "best", n)
        cells = [str(n), number(base.units_per_s) if base.has_plan else "no plan"]
        for label in labels:
            row = result.row(label, "best", n)
            if not row.has_plan:
                cells.append("no plan")
                continue
            ratio = f" (x{row.units_per_s / base.units_per_s:.2f})" if base.has_plan else ""
            cells.append(number(row.units_per_s) + ratio)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


FIGURES = (
    Block("README.md", "simulate-7b", simulate_table),
    Block("README.md", "planner-vs-baselines", indented(lambda: speedup_summary(cases()), "  ")),
    Block("README.md", "planner-vs-brute-force", indented(lambda: gap_summary(brute_force_cases()), "  ")),
    Block("README.md", "capacity-answer-7b", capacity_answer),
    Block("docs/planner.md", "planner-vs-baselines", lambda: speedup_summary(cases())),
    Block("docs/planner.md", "plan-by-size-7b", size_table),
    Block("docs/planner.md", "planner-vs-brute-force", lambda: gap_summary(brute_force_cases())),
    Block("docs/planner.md", "async-7b", async_table),
    Block("docs/planner.md", "async-7b-bound", async_bound_table),
    Block("docs/planner_table.md", "planner-table", lambda: comparison_table(cases())),
    Block("docs/planner_table.md", "planner-vs-baselines", lambda: speedup_summary(cases())),
    Block("docs/planner_bruteforce.md", "brute-force-table", lambda: brute_force_table(brute_force_cases())),
    Block("docs/planner_bruteforce.md", "planner-vs-brute-force", lambda: gap_summary(brute_force_cases())),
    Block("docs/capacity.md", "capacity-answer-7b", capacity_answer),
    Block("docs/capacity.md", "capacity-7b", capacity_table),
    Block("docs/capacity.md", "capacity-whatif-7b", capacity_whatif_table),
    Block("docs/replanning.md", "drift-7b", lambda: drift_table()),
)


DRIFT_SCHEDULE = "examples/drift/r1_zero_lengths.yaml"
DRIFT_OUT = "docs/data/drift_7b"


def drift_table() -> str:
    """The 7B trace under the example response-length drift: the three strategies' whole runs."""
    data = suite.rlinf_json(
        ["simulate", "--trace", str(ROOT / TRACE), "--drift", str(ROOT / DRIFT_SCHEDULE), "--json"]
    )
    replanning = data["strategies"][-1]["total_s"]
    lines = [
        "| strategy | whole run | device-hours | plans | against re-planning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for strategy in data["strategies"]:
        total = strategy["total_s"]
        plans = len({piece["plan"] for piece in strategy["pieces"]})
        if total is None:
            lines.append(
                f"| {strategy['name']} | out of device memory at iteration {strategy['failed_at_iteration']} | - | "
                f"{plans} | - |"
            )
            continue
        lines.append(
            f"| {strategy['name']} | {total / 3600:.2f} h | {strategy['device_hours']:,.0f} | {plans} | "
            f"{total / replanning:.3f}x |"
        )
    switches = [
        f"- switch at iteration {s['iteration']} ({s['switch_s']:.1f} s): {s['reason']}"
        for s in data["strategies"][-1]["switches"]
    ]
    return "\n".join(lines) + ("\n\n" + "\n".join(switches) if switches else "")


def write_drift_figure() -> None:
    """docs/data/drift_7b/drift.png and drift.json, as ``rlinf simulate --drift --out`` writes them."""
    code = rlinf(["simulate", "--trace", TRACE, "--drift", DRIFT_SCHEDULE, "--out", DRIFT_OUT])
    if code != 0:
        raise RuntimeError(f"rlinf simulate --drift exited {code}")


# ------------------------------------------------------------------------------------------------ files
KIND = "figures"


def block(name: str) -> re.Pattern[str]:
    """A figure's block in a file: the opening marker, the table, the closing marker (maybe indented)."""
    return suite.pattern(KIND, name)


def differences(texts: dict[str, str], tables: dict[tuple[str, str], str]) -> list[str]:
    """``path:name`` of each table whose block in ``texts[path]`` differs from ``tables`` (or is missing)."""
    return suite.differences(KIND, texts, tables)


def compute(figures: tuple[Block, ...] = FIGURES) -> dict[tuple[str, str], str]:
    """Every table, by (file, marker name)."""
    return suite.compute(figures)


def read_docs(figures: tuple[Block, ...] = FIGURES) -> dict[str, str]:
    """The text of every file that holds a figure."""
    return suite.read(figures)


def write_capacity_charts() -> None:
    """The capacity charts of docs/capacity.md: the report of the full sweep (every strategy and what-if series
    at 8-1024 devices), as ``rlinf capacity`` draws it."""
    options = SweepOptions(
        device_counts=SIZES,
        strategies=CAPACITY_STRATEGIES,
        price_per_device_hour=2.5,
        target=Target(kind="deadline", value=CAPACITY_DEADLINE_S),
    )
    trace = load_trace(ROOT / TRACE)
    result = sweep(
        trace, options, whatifs=[parse_whatif(t) for t in CAPACITY_WHATIFS], trace_name=Path(TRACE).name
    )
    with tempfile.TemporaryDirectory() as out:
        write_report(result, trace, out)
        for name, path in CAPACITY_CHARTS.items():
            (ROOT / path).write_bytes((Path(out) / name).read_bytes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    suite.check_write_arguments(parser, "rewrite every generated block and picture")
    args = parser.parse_args(argv)
    code = suite.check_or_write(KIND, FIGURES, args, "figures differ from the code")
    if args.write:
        write_capacity_charts()
        write_async_gantt()
        write_drift_figure()
    if not (args.write or args.check):
        return code
    action = ["--write" if args.write else "--check"]
    return max(code, measurements.main(action), analytic_validation.main(action))


if __name__ == "__main__":
    sys.exit(main())
