"""A/A test of plan measurement: one plan entered twice, to measure the protocol's own bias and noise.

    python benchmarks/bench_order_bias.py [--repeats 4] [--iterations 30] [--json docs/data/order_bias.json]

Until commit cc49de9 :func:`rlinf.app.profiling.measure_plans` ran several plans with their workers alive and
iterations alternating between them, and ``rlinf validate`` ranked plans by it; it now measures one plan at a time
in turns with fresh workers, and this benchmark measures that protocol. ``docs/data/order_bias.json`` is of it (its
version of commit 7f3695c, in git history, is of the side-by-side one). Both entries are the same plan (the README
main job's choice on 2 cores until commit 5994a0b, ``hybrid: actor@0 env@0 rollout@1, loop=2``, ``examples/hopper_ppo.yaml``), so each
run's ratio of medians (entry 0 over entry 1) should be 1 up to noise. Two settings, alternating run by run:

* ``one generation``: one turn per entry, entry 0 first;
* ``two generations``: two turns per entry, the second in the reverse order
  (:func:`rlinf.app.profiling.generation_orders`; validate uses 4).

Prints one JSON object: per protocol the ratio of each run, their mean and how many runs had entry 0 slower; with
``--json`` also writes it with provenance (``benchmarks/suite.py``) and every iteration's time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import suite

from rlinf.app.jobs import load_job_config
from rlinf.app.profiling import local_backends, measure_plans
from rlinf.core.plan import plan_from_dict

PLAN = {"placement": {"actor": "0", "env": "0", "rollout": "1"}, "granularity": {"loop": 2}}
PROTOCOLS = {"one generation": 1, "two generations": 2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=4, help="runs per protocol (default 4)")
    parser.add_argument(
        "--iterations", type=int, default=30, help="measured iterations per entry (default 30)"
    )
    parser.add_argument("--warmup", type=int, default=2, help="warm-up rounds per generation (default 2)")
    parser.add_argument("--json", type=Path, help="write the result, with provenance, to this file")
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/bench_order_bias.py", sys.argv[1:] if argv is None else argv)
    job, config = load_job_config("examples/hopper_ppo.yaml", [])
    plan = plan_from_dict(PLAN, 2)
    runs: dict[str, list[dict]] = {name: [] for name in PROTOCOLS}
    for repeat in range(args.repeats):
        for name, generations in PROTOCOLS.items():
            measured = measure_plans(
                job,
                config,
                [(plan, 2), (plan, 2)],
                iterations=args.iterations,
                warmup_iterations=args.warmup,
                generations=generations,
                backends=local_backends(2),
                progress=False,
            )
            first, second = (list(m.iteration_s) for m in measured)
            ratio = statistics.median(first) / statistics.median(second)
            runs[name].append({"ratio": ratio, "entry0_s": first, "entry1_s": second})
            print(
                f"repeat {repeat + 1}/{args.repeats} {name}: entry 0 / entry 1 = {ratio:.4f}", file=sys.stderr
            )
    summary = {
        name: {
            "ratios": [round(run["ratio"], 4) for run in done],
            "mean_ratio": round(statistics.fmean(run["ratio"] for run in done), 4),
            "entry0_slower": sum(run["ratio"] > 1.0 for run in done),
            "runs": len(done),
        }
        for name, done in runs.items()
    }
    report = {
        "plan": plan.describe(),
        "config": "examples/hopper_ppo.yaml",
        "iterations": args.iterations,
        "warmup_iterations": args.warmup,
        "protocols": summary,
    }
    print(json.dumps(report, indent=1))
    if args.json:
        suite.write_artifact(args.json, {**report, "runs": runs}, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
