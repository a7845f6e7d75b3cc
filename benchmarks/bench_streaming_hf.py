"""GRPO on a Hugging Face causal LM: the planner's streaming granularity against whole-batch hand-off.

With the real executor, on the workload's natural response lengths (no knob forces a long tail).

    python benchmarks/bench_streaming_hf.py [--profile-budget 120] [--iterations 30] [--cache DIR]

First what ``rlinf train examples/grpo_hf.yaml --mode auto --devices 2`` does before it trains: profile the job's
probe plans within ``--profile-budget`` seconds (:func:`rlinf.app.profiling.profile`; the trace records every measured
response's length) and let the planner choose a plan from that trace (:func:`rlinf.app.auto.plan_from_trace`).
Then, in this one process, the chosen plan and the same plan with granularity 1 on every stream edge (whole-batch
hand-off) train side by side (:func:`rlinf.app.profiling.measure_plans`: both plans' workers alive, iterations
alternating in orders balanced for carry-over) from the same warm start with the same seeds, so that
iteration k of either plan samples the same prompts. When the planner chooses granularity 1 itself, the same
placement at ``--fallback-granularities`` is measured instead, and the best of them is reported against it;
``--also-granularities`` adds more variants of the placement to the same rounds, and ``--trace`` plans from a
saved profile (``--save-trace``) instead of profiling.

Reported (and written atomically to ``--json``): the planner's plan, granularity and predicted times, every
measured iteration's time and generated tokens per plan, the medians (warm-up iterations dropped) and their
ratio, the median ratio of the two iterations of each round, the command, commit, date, cores and load averages
before and after.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import suite

from executor.devices import available_cores
from rlinf.app.auto import plan_from_trace
from rlinf.app.jobs import Job, load_job_config
from rlinf.app.profiling import (
    COST_STATISTIC,
    MeasuredPlan,
    ProfileResult,
    ProfileSettings,
    measure_plans,
    profile,
)
from rlinf.core.cluster import cpu_cluster
from rlinf.core.costs import fit
from rlinf.core.files import write_text_atomic
from rlinf.core.outputs import check_output_file, writing
from rlinf.core.plan import Plan
from rlinf.core.trace import Trace, load_trace
from simulator import simulate

NUM_DEVICES = 2
SPEEDUPS = (
    "speedup_over_whole_batch",
    "paired_speedup_over_whole_batch",
    "predicted_speedup_over_whole_batch",
)
"""Per measured plan: whole-batch time over its time, as medians, as the median of paired rounds, as predicted."""


def with_granularity(job: Job, config: Any, plan: Plan, granularity: int) -> Plan:
    """``plan`` with ``granularity`` micro-batches on every stream edge (1: the whole batch at once)."""
    keys = job.workflow(config).granularity_keys
    return attrs.evolve(plan, granularity=dict.fromkeys(keys, granularity))


def is_whole_batch(plan: Plan) -> bool:
    """Whether every stream edge of ``plan`` hands the whole batch over at once."""
    return all(value == 1 for value in plan.granularity.values())


def predicted_s(job: Job, config: Any, trace: Trace, plan: Plan, num_devices: int) -> float:
    """The simulated iteration time of ``plan`` from ``trace``, as the planner predicts it."""
    costs = fit(trace, cpu_cluster(num_devices), statistic=COST_STATISTIC)
    return simulate(job.lower(plan, config, num_devices), costs).iteration_s


def run_record(measured: MeasuredPlan, warmup: int) -> dict[str, Any]:
    """One measured plan: every iteration's time and generated tokens, and the median time."""
    return {
        "plan": measured.plan.describe(),
        "granularity": dict(measured.plan.granularity),
        "iteration_s": list(measured.iteration_s),
        "generated_tokens": [sum(lengths) for lengths in measured.response_lengths],
        "median_iteration_s": statistics.median(measured.iteration_s),
        "warmup_iterations_dropped": warmup,
    }


def length_summary(lengths: tuple[float, ...]) -> dict[str, float]:
    """Median, p90, p99 and longest of the profiled response lengths."""
    if not lengths:
        return {"count": 0}
    p50, p90, p99 = np.percentile(lengths, [50, 90, 99]).tolist()
    return {"count": len(lengths), "p50": p50, "p90": p90, "p99": p99, "max": max(lengths)}


def paired_speedup(whole_s: list[float], streaming_s: list[float]) -> float:
    """Median over measured rounds of whole-batch time / streaming time: the two iterations of a round ran back
    to back, so the ratio cancels most of the load that other processes put on the cores meanwhile."""
    return statistics.median(w / s for w, s in zip(whole_s, streaming_s, strict=True))


def profile_summary(profiled: ProfileResult, budget_s: float) -> dict[str, Any]:
    """What the profiling phase measured."""
    return {
        "budget_s": budget_s,
        "elapsed_s": profiled.elapsed_s,
        "probe_plans": list(profiled.plans),
        "iterations": profiled.iterations,
    }


def commit() -> str:
    """The checkout's short commit, with ``+dirty`` when tracked files differ from it."""
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], check=False).returncode != 0
    return suite.commit() + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="examples/grpo_hf.yaml")
    parser.add_argument(
        "--profile-budget", type=float, default=120.0, help="profiling seconds (auto's default)"
    )
    parser.add_argument("--iterations", type=int, default=30, help="measured iterations per plan")
    parser.add_argument(
        "--warmup", type=int, default=2, help="iterations per plan run first and not measured"
    )
    parser.add_argument(
        "--fallback-granularities",
        type=int,
        nargs="+",
        default=[4, 16],
        help="measured instead when the planner chooses granularity 1",
    )
    parser.add_argument(
        "--also-granularities",
        type=int,
        nargs="*",
        default=[],
        help="also measure the planner's placement at these granularities, in the same rounds",
    )
    parser.add_argument("--trace", type=Path, help="plan from this profiled trace instead of profiling")
    parser.add_argument("--cache", type=Path, default=Path("runs/hf_grpo_cache"), help="warm-start cache")
    parser.add_argument("--json", type=Path, default=Path("docs/grpo_hf_streaming.json"))
    parser.add_argument("--save-trace", type=Path, help="also write the profiled trace here")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    args = parser.parse_args(argv)
    check_output_file(args.json, "--json")
    if args.save_trace is not None:
        check_output_file(args.save_trace, "--save-trace")
    if len(available_cores()) < NUM_DEVICES:
        print(f"bench_streaming_hf needs {NUM_DEVICES} CPU cores", file=sys.stderr)
        return 2
    command = "python benchmarks/bench_streaming_hf.py " + " ".join(sys.argv[1:] if argv is None else argv)
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = os.getloadavg()
    overrides = [
        "eval.enabled=false",
        "execution.checkpoint_every=100000",
        f"cache_dir={args.cache}",
        *args.set,
    ]
    job, config = load_job_config(args.config, overrides)
    if args.trace is None:
        profiled = profile(
            job, config, NUM_DEVICES, settings=ProfileSettings(budget_s=args.profile_budget), command=command
        )
        trace, profile_record = profiled.trace, profile_summary(profiled, args.profile_budget)
    else:
        trace = load_trace(args.trace)
        profile_record = {"trace": str(args.trace), "provenance": dict(trace.provenance)}
    profile_record["response_lengths"] = length_summary(trace.response_lengths)
    load_after_profile = os.getloadavg()
    if args.save_trace is not None:
        trace.save(args.save_trace)
    auto = plan_from_trace(job, config, trace, NUM_DEVICES, seed=job.settings.seed)
    chosen = auto.chosen.plan
    logical = auto.chosen.num_devices
    whole = with_granularity(job, config, chosen, 1)
    streaming = (
        [with_granularity(job, config, chosen, g) for g in args.fallback_granularities]
        if is_whole_batch(chosen)
        else [chosen]
    )
    streaming += [
        variant
        for variant in (with_granularity(job, config, chosen, g) for g in args.also_granularities)
        if variant not in (*streaming, whole)
    ]
    print(f"planner: {chosen.describe()} ({auto.chosen.source}), predicted {auto.chosen.predicted_s:.3f} s")
    measured = measure_plans(
        job,
        config,
        [(plan, logical) for plan in [*streaming, whole]],
        iterations=args.iterations,
        warmup_iterations=args.warmup,
        num_cores=NUM_DEVICES,
    )
    load_after = os.getloadavg()
    by_plan = {m.plan: run_record(m, args.warmup) for m in measured}
    whole_s = by_plan[whole]["median_iteration_s"]
    best = min(streaming, key=lambda plan: by_plan[plan]["median_iteration_s"])
    for plan, record in by_plan.items():
        record["speedup_over_whole_batch"] = whole_s / record["median_iteration_s"]
        record["paired_speedup_over_whole_batch"] = paired_speedup(
            by_plan[whole]["iteration_s"], record["iteration_s"]
        )
        record["predicted_iteration_s"] = predicted_s(job, config, trace, plan, logical)
        record["predicted_speedup_over_whole_batch"] = (
            predicted_s(job, config, trace, whole, logical) / record["predicted_iteration_s"]
        )
    document = {
        "command": command,
        "commit": commit(),
        "date_start": started.isoformat(timespec="seconds"),
        "date_end": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cores": {"used": NUM_DEVICES, "available": len(available_cores()), "machine": os.cpu_count()},
        "load_average": {
            "before": list(load_before),
            "after_profile": list(load_after_profile),
            "after": list(load_after),
        },
        "config": {"file": args.config, "set": overrides},
        "profile": profile_record,
        "planner": {
            "plan": chosen.describe(),
            "plan_yaml": chosen.to_dict(),
            "granularity": dict(chosen.granularity),
            "source": auto.chosen.source,
            "chose_whole_batch": is_whole_batch(chosen),
            "predicted_iteration_s": auto.chosen.predicted_s,
        },
        "measurement": "both plans' workers alive, iterations alternating (rlinf.app.profiling.measure_plans), "
        "same warm start and seeds; medians over the measured iterations",
        "iterations_per_plan": args.iterations,
        "plans": [by_plan[plan] for plan in [*streaming, whole]],
        "whole_batch_plan": whole.describe(),
        "planner_speedup_over_whole_batch": None
        if is_whole_batch(chosen)
        else {key: by_plan[chosen][key] for key in SPEEDUPS},
        "best_streaming_plan": best.describe(),
        "best_speedup_over_whole_batch": by_plan[best]["speedup_over_whole_batch"],
    }
    with writing(args.json, "--json"):
        write_text_atomic(args.json, json.dumps(document, indent=1) + "\n")
    for plan in [*streaming, whole]:
        record = by_plan[plan]
        print(
            f"{record['plan']}: median {record['median_iteration_s']:.3f} s/iteration, "
            f"{record['speedup_over_whole_batch']:.3f}x whole batch (medians), "
            f"{record['paired_speedup_over_whole_batch']:.3f}x (median of paired rounds), "
            f"predicted {record['predicted_speedup_over_whole_batch']:.3f}x"
        )
    print(f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
