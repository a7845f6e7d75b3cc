"""Auto mode against fixed modes: throughput of the plan ``--mode auto`` chooses, measured.

The plan ``rlinf train --mode auto`` chooses against the collocated,
hybrid and disaggregated plans of the same config, each fixed mode at its best measured granularity, with the real
executor (training included). Throughput is the iteration's work over its median time: env steps for Hopper,
the workflow's unit otherwise (GRPO: samples, prompts x group size).

    python benchmarks/bench_auto_mode.py [--set num_envs=32] [--set hidden_sizes=[1024,1024]] [--iterations 10]
    python benchmarks/bench_auto_mode.py --config examples/grpo_arith.yaml --set eval.enabled=false

The auto plan comes from a fresh profile (``--profile-budget``) or ``--trace``. Each fixed mode is measured at every
uniform granularity the workload allows (``rlinf.app.jobs.plans.uniform_granularities``: for Hopper's 8 envs, 1, 2, 4
and 8 loop stages; ``--config-granularity-only`` keeps the config's own), so a fixed mode is compared at its best
setting, not at whatever the example config sets. All plans train one at a time in turns with fresh workers
(:func:`rlinf.app.profiling.measure_plans`), so load from other processes on a shared machine affects all plans alike;
a plan's env steps/s is its env steps per iteration over the median iteration time after warm-up. One run; prints
a JSON report, with ``--json`` writes it as an artifact (provenance and every plan's measured iterations) and with
``--markdown`` writes a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import suite

from executor.devices import available_cores
from planner.modes import fixed_plan
from rlinf.app.auto import plan_from_trace
from rlinf.app.jobs import load_job_config
from rlinf.app.jobs.plans import uniform_granularities
from rlinf.app.profiling import ProfileSettings, measure_plans, profile
from rlinf.core.errors import ConfigError
from rlinf.core.files import write_text_atomic
from rlinf.core.trace import load_trace

FIXED = ("collocated", "hybrid", "disaggregated")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="examples/hopper_ppo.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--devices", type=int, default=min(2, len(available_cores())))
    parser.add_argument("--profile-budget", type=float, default=120.0)
    parser.add_argument("--trace", help="plan from this trace instead of profiling")
    parser.add_argument("--markdown", help="write the result table to this file")
    parser.add_argument("--save-trace", help="write the profiled trace to this file")
    parser.add_argument("--json", help="write the report here, with provenance")
    parser.add_argument(
        "--config-granularity-only",
        action="store_true",
        help="measure each fixed mode at the config's granularity only, not at every uniform one",
    )
    args = parser.parse_args(argv)
    measurement = suite.begin("python benchmarks/bench_auto_mode.py", argv)

    job, config = load_job_config(args.config, args.set)
    started = time.perf_counter()
    if args.trace:
        trace = load_trace(args.trace)
    else:
        trace = profile(
            job, config, args.devices, settings=ProfileSettings(budget_s=args.profile_budget)
        ).trace
    if args.save_trace:
        trace.save(args.save_trace)
    auto = plan_from_trace(job, config, trace, args.devices, seed=job.settings.seed)
    planning_s = time.perf_counter() - started
    entries = {"auto": (auto.chosen.plan, auto.chosen.num_devices)}
    workflow = job.workflow(config)
    for mode in FIXED:
        configured, logical = job.fixed_plan(mode, args.devices, config)
        entries[mode] = (configured, logical)
        if args.config_granularity_only:
            continue
        for granularity in uniform_granularities(workflow):
            plan, logical = fixed_plan(
                workflow, mode, args.devices, granularity=granularity, offload=configured.offload
            )
            try:
                job.check_plan(plan, config)
            except ConfigError:  # a granularity this workload cannot run in this mode
                continue
            entries.setdefault(f"{mode} @ {granularity}", (plan, logical))
    unique = list(dict.fromkeys(entries.values()))
    measured = measure_plans(
        job, config, unique, iterations=args.iterations, warmup_iterations=args.warmup, num_cores=args.devices
    )
    by_entry = {(m.plan, m.num_devices): m for m in measured}
    unit, work = work_per_iteration(config, workflow)
    rate = f"{unit}_per_s"
    rows = {}
    for name, entry in entries.items():
        run = by_entry[entry]
        median_s = statistics.median(run.iteration_s)
        rows[name] = {
            "plan": entry[0].describe(),
            "logical_devices": entry[1],
            "median_iteration_s": median_s,
            rate: work / median_s,
            "iteration_s": list(run.iteration_s),
        }
    predicted = {(c.plan, c.num_devices): c.predicted_s for c in auto.candidates}
    for name, entry in entries.items():
        rows[name]["predicted_iteration_s"] = predicted.get(entry)
    # Each fixed mode at its best measured setting: the config's granularity or any uniform one.
    best_of_mode = {
        mode: max(
            (name for name in rows if name == mode or name.startswith(f"{mode} @ ")),
            key=lambda name: rows[name][rate],
        )
        for mode in FIXED
    }
    best_fixed = max(FIXED, key=lambda m: rows[best_of_mode[m]][rate])
    report = {
        "config": {"file": args.config, "set": args.set, f"{unit}_per_iteration": work},
        "unit": unit,
        "devices": args.devices,
        "iterations": args.iterations,
        "profile_and_plan_s": planning_s,
        "plans": rows,
        "best_of_mode": best_of_mode,
        "auto_over_collocated": rows["auto"][rate] / rows[best_of_mode["collocated"]][rate],
        "auto_over_collocated_as_configured": rows["auto"][rate] / rows["collocated"][rate],
        "best_fixed_mode": best_fixed,
        "best_fixed_plan": rows[best_of_mode[best_fixed]]["plan"],
        "auto_over_best_fixed": rows["auto"][rate] / rows[best_of_mode[best_fixed]][rate],
    }
    report = suite.document(report, measurement)
    print(json.dumps(report, indent=1))
    if args.json:
        write_text_atomic(args.json, json.dumps(report, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(_table(report))
    return 0


def work_per_iteration(config: object, workflow: object) -> tuple[str, int]:
    """The work of one iteration, the same for every plan: env steps for the embodied workload (``num_envs x
    num_steps``: the program's units also count the observation carried over into each iteration), else the
    workflow's own unit (e.g. GRPO's samples: prompts x group size)."""
    if hasattr(config, "num_envs") and hasattr(config, "num_steps"):
        return "env_steps", int(config.num_envs * config.num_steps)
    return str(workflow.unit), int(workflow.units_per_iteration)  # type: ignore[attr-defined]


def table_rows(report: dict) -> list[str]:
    """The markdown table of ``report`` (docs/plan_then_run.md's; ``--markdown`` writes it): every measured plan
    (the fixed modes at the config's granularity appear under their ``MODE @ G`` name when swept)."""
    unit = report.get("unit", "env_steps")  # artifacts written before the unit was recorded are Hopper's
    lines = [
        f"| plan | | predicted | median iteration | {unit.replace('_', ' ')}/s |",
        "| --- | --- | --- | --- | --- |",
    ]
    swept = any(" @ " in name for name in report["plans"])
    for name, row in report["plans"].items():
        if swept and name in FIXED:
            continue
        extra = (
            f" ({row['logical_devices']} logical devices)"
            if row["logical_devices"] > report["devices"]
            else ""
        )
        best = " (best of its mode)" if name in report["best_of_mode"].values() else ""
        predicted = row["predicted_iteration_s"]
        lines.append(
            f"| {name}{best} | `{row['plan'].replace(' | ', ', ')}`{extra} | "
            f"{'-' if predicted is None else f'{predicted:.4f} s'} | {row['median_iteration_s']:.4f} s | "
            f"{row[f'{unit}_per_s']:.0f} |"
        )
    return lines


def _table(report: dict) -> str:
    summary = (
        f"auto / collocated at its best: **{report['auto_over_collocated']:.2f}x**; auto / best fixed plan "
        f"({report['best_fixed_plan']}): **{report['auto_over_best_fixed']:.2f}x**"
    )
    return "\n".join([*table_rows(report), "", summary]) + "\n"


if __name__ == "__main__":
    sys.exit(main())
