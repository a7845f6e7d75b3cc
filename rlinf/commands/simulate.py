"""Predict one training iteration of a plan from a trace (metrics, Chrome trace and Gantt chart), or, with
``--drift``, a whole run whose costs drift: the static plan against re-planning (:mod:`rlinf.capacity.drift`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rlinf.analytic.straggler import straggler_report, tail_intervals
from rlinf.capacity.drift import (
    DEFAULT_DETECT_ITERATIONS,
    DEFAULT_SWITCH_OVERHEAD_S,
    check_schedule,
    drift_png,
    format_drift,
    load_schedule,
    plan_over_run,
)
from rlinf.commands import values
from rlinf.commands.trace_args import add_trace_arguments, trace_and_cluster
from rlinf.core import cycle_collection
from rlinf.core.cluster import GIB, Cluster
from rlinf.core.costs import fit
from rlinf.core.errors import ConfigError
from rlinf.core.export import device_groups, write_chrome_trace, write_gantt_png
from rlinf.core.files import write_bytes_atomic, write_text_atomic
from rlinf.core.lowering import lower
from rlinf.core.outputs import check_output_dir, writing
from rlinf.core.plan import Plan, load_plan
from rlinf.core.timeline import Timeline
from rlinf.core.trace import Trace
from simulator import simulate

CRITICAL_PATH_SHOWN = 6
LARGE_PLAN_MICRO_BATCHES = 30_000
"""Plans with this many micro-batches (summed over their edges) or more are announced with an estimate up front."""
MICRO_BATCHES_PER_S = 5_000
"""Micro-batches (summed over a plan's edges) lowered, simulated and reported per second (measured: a synthesized
1.5B trace's plan of 100,000 micro-batches on each of its 3 edges, 700,002 ops, in 57 s on a shared 2-core
machine)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``rlinf simulate``."""
    add_trace_arguments(parser)
    parser.add_argument(
        "--plan",
        default=None,
        help="plan YAML file (see examples/plans/); required without --drift, where it is the static plan "
        "(default there: the planner's choice at the schedule's start)",
    )
    parser.add_argument(
        "--drift",
        default=None,
        metavar="SCHEDULE",
        help="a drift schedule YAML file (see examples/drift/): price the whole run, static plan against "
        "re-planning, with a plot (--out)",
    )
    parser.add_argument(
        "--max-staleness",
        type=values.count(0, 64),
        default=0,
        help="with --drift: the planner's staleness bound at every point (default 0: synchronous plans)",
    )
    parser.add_argument(
        "--switch-overhead",
        type=values.real(0.0),
        default=DEFAULT_SWITCH_OVERHEAD_S,
        help=f"with --drift: fixed seconds a switch of plan costs besides moving state (default "
        f"{DEFAULT_SWITCH_OVERHEAD_S:g})",
    )
    parser.add_argument(
        "--detect-iterations",
        type=values.count(0, 1000),
        default=DEFAULT_DETECT_ITERATIONS,
        help=f"with --drift: iterations re-planning runs at new costs before it can switch (default "
        f"{DEFAULT_DETECT_ITERATIONS})",
    )
    parser.add_argument(
        "--seed", type=values.seed, default=0, help="random seed for --stochastic (default 0)"
    )
    parser.add_argument(
        "--stochastic",
        action="store_true",
        help="draw response lengths from the trace instead of expected values",
    )
    parser.add_argument(
        "--out", default=None, help="folder for timeline.json (Perfetto), gantt.png, summary.json"
    )


def run(args: argparse.Namespace) -> int:
    """Load, lower, fit, simulate; print the summary and write the exports."""
    out = check_output_dir(args.out, "--out") if args.out is not None else None
    if args.drift is None and args.plan is None:
        raise ConfigError("--plan", None, "is missing", "pass --plan PLAN.yaml (or --drift SCHEDULE.yaml)")
    trace, cluster = trace_and_cluster(args)
    if args.drift is not None:
        return _drift(args, trace, cluster, out)
    plan_path = Path(args.plan)
    plan = load_plan(plan_path, cluster.num_devices)
    with (
        cycle_collection.paused()
    ):  # millions of ops and spans: the collector's passes cost more than the work
        _say_size(plan)
        program = lower(trace.workflow, plan, cluster)
        costs = fit(trace, cluster)
        timeline = simulate(program, costs, seed=args.seed, stochastic=args.stochastic)
        report = build_report(timeline, cluster, trace_path=str(args.trace), plan_path=str(plan_path))
    report.update(seed=args.seed, stochastic=bool(args.stochastic))
    report.update(straggler_report(trace, timeline))
    tails = tail_intervals(report)
    if out is not None:
        with writing(out, "--out"):
            write_chrome_trace(timeline, out / "timeline.json", tails)
            title = f"{plan_path.name}: {_title(timeline)}"
            write_gantt_png(timeline, out / "gantt.png", title=title, tails=tails)
            write_text_atomic(out / "summary.json", json.dumps(report, indent=1) + "\n")
        report["outputs"] = [str(out / name) for name in ("timeline.json", "gantt.png", "summary.json")]
    if args.json:
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_report(report))
    return 0


def _drift(args: argparse.Namespace, trace: Trace, cluster: Cluster, out: Path | None) -> int:
    schedule = load_schedule(args.drift)
    check_schedule(trace, schedule)
    start = load_plan(Path(args.plan), cluster.num_devices) if args.plan is not None else None
    sys.stderr.write(
        f"rlinf simulate: {len(schedule.points)} point(s) in the schedule, each re-synthesized and planned "
        "(seconds each)\n"
    )
    report = plan_over_run(
        trace,
        cluster,
        schedule,
        start_plan=start,
        max_staleness=args.max_staleness,
        switch_overhead_s=args.switch_overhead,
        detect_iterations=args.detect_iterations,
        seed=args.seed,
        progress=lambda line: sys.stderr.write(f"  {line}\n"),
    )
    data = report.to_dict()
    data.update(trace=str(args.trace), schedule=str(args.drift))
    if out is not None:
        with writing(out, "--out"):
            out.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(out / "drift.png", drift_png(report))
            write_text_atomic(out / "drift.json", json.dumps(data, indent=1) + "\n")
        data["outputs"] = [str(out / name) for name in ("drift.png", "drift.json")]
    if args.json:
        json.dump(data, sys.stdout)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_drift(report))
        for output in data.get("outputs", []):
            sys.stdout.write(f"wrote {output}\n")
    return 0


def _say_size(plan: Plan) -> None:
    """Up front, on stderr, for a plan large enough to take a while: its micro-batches and about how long lowering,
    simulating and reporting them take."""
    micro_batches = sum(plan.granularity.values())
    if micro_batches >= LARGE_PLAN_MICRO_BATCHES:
        print(
            f"rlinf simulate: {micro_batches:,} micro-batches over the plan's edges, about "
            f"{micro_batches / MICRO_BATCHES_PER_S:,.0f} s to simulate at {MICRO_BATCHES_PER_S:,} a second",
            file=sys.stderr,
            flush=True,
        )


def _title(timeline: Timeline) -> str:
    lag = timeline.program.max_staleness
    if lag:  # one simulated iteration is the asynchronous pipeline's steady state
        return f"{timeline.mode}, staleness {lag}, steady-state iteration {timeline.iteration_s:.3g} s"
    return f"{timeline.mode}, iteration {timeline.iteration_s:.3g} s"


def build_report(timeline: Timeline, cluster: Cluster, *, trace_path: str, plan_path: str) -> dict[str, Any]:
    """Timeline metrics plus where they came from and peak memory per device group."""
    report = timeline.summary()
    busy = report["device_busy_fraction"]
    used = [f for f in busy if f > 0] or [0.0]
    capacity = cluster.device.memory_bytes
    report.update(
        trace=trace_path,
        plan_file=plan_path,
        cluster=cluster.spec(),
        busy_fraction_stats={"min": min(used), "mean": sum(used) / len(used), "max": max(used)},
        memory_capacity_bytes=capacity,
        device_groups=_memory_by_group(timeline, capacity),
    )
    return report


def _memory_by_group(timeline: Timeline, capacity_bytes: int) -> list[dict[str, Any]]:
    """Peak memory of each group of devices that ran the same ops (idle devices left out)."""
    peaks = timeline.peak_memory_bytes or (0,) * timeline.num_devices
    out = []
    for group in device_groups(timeline):
        if group.span_indices:
            peak = max(peaks[d] for d in group.devices)
            out.append(
                {
                    "devices": group.label.removeprefix("dev "),
                    "peak_memory_bytes": peak,
                    "over_capacity": peak > capacity_bytes,
                }
            )
    return out


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def format_report(report: dict[str, Any]) -> str:
    """The human-readable summary table."""
    rows: list[tuple[str, str]] = [
        ("mode", report["mode"]),
        ("plan", report["plan"]),
        ("cluster", report["cluster"]),
        ("iteration", f"{report['iteration_s']:.4g} s"),
    ]
    for i, (key, value) in enumerate(report["throughput"].items()):
        rows.append(("throughput" if i == 0 else "", f"{_number(value)} {key.replace('_per_s', '/s')}"))
    busy = report["busy_fraction_stats"]
    rows.append(("bubble fraction", f"{report['bubble_fraction']:.1%}"))
    rows.append(
        (
            "busy fraction",
            f"min {busy['min']:.1%}  mean {busy['mean']:.1%}  max {busy['max']:.1%}  (devices in use)",
        )
    )
    capacity_gib = report["memory_capacity_bytes"] / GIB
    for i, group in enumerate(report["device_groups"]):
        peak_gib = group["peak_memory_bytes"] / GIB
        over = "  EXCEEDS CAPACITY (activations)" if group["over_capacity"] else ""
        rows.append(
            (
                "peak memory" if i == 0 else "",
                f"dev {group['devices']}: {peak_gib:.1f} / {capacity_gib:.1f} GiB{over}",
            )
        )
    straggler = report.get("straggler") or {}
    if straggler.get("available") and straggler["components"]:
        tail = max(straggler["components"], key=lambda c: c["seconds"])
        rows.append(
            (
                "straggler tail",
                f"{tail['seconds']:.4g} s ({report['straggler_fraction']:.1%} of the iteration): "
                f"{tail['component']} generation runs its last {tail['tail_steps']:,} of {tail['decode_steps']:,} "
                f"decode steps with {tail['tail_batch']} of {tail['peak_batch']} sequences or fewer",
            )
        )
    path = report["critical_path"]
    shown = " -> ".join(path[:CRITICAL_PATH_SHOWN]) + (
        f" -> ... ({len(path)} ops)" if len(path) > CRITICAL_PATH_SHOWN else ""
    )
    rows.append(("critical path", f"{report['critical_path_s']:.4g} s: {shown}"))
    for i, (name, seconds) in enumerate(
        sorted(report["component_seconds"].items(), key=lambda item: -item[1])
    ):
        rows.append(("seconds by component" if i == 0 else "", f"{name:<16} {seconds:.4g} s"))
    for i, output in enumerate(report.get("outputs", [])):
        rows.append(("wrote" if i == 0 else "", output))
    width = max(len(label) for label, _ in rows)
    return "".join(f"{label:<{width}}  {value}\n" for label, value in rows)
