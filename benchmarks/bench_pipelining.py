"""Pipelining benchmark: env steps/s with the env <-> rollout loop in 2 pipeline stages against 1.

Disaggregated env and rollout devices (one CPU core each), measured with the real executor.

    python benchmarks/bench_pipelining.py [--iterations 6] [--hidden 256 256] [--json OUT]

With one stage, the env core idles while the policy infers and vice versa; with two stages one stage's env
steps while the other's policy infers. Reported: the median over iterations (the first is dropped as warm-up)
of rollout env steps/s (env steps over the loop's span) and of whole-iteration env steps/s, and their ratios;
``--json`` writes them as an artifact with provenance and every iteration's values.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import suite

from executor.devices import available_cores, cpu_devices, is_oversubscribed
from rlinf.app.jobs import get_job
from rlinf.app.plan_choice import PlanChoice
from rlinf.app.request import RunRequest
from rlinf.app.runner import run
from rlinf.core.run_settings import RunSettings
from rlinf.workloads.embodied.config import EmbodiedConfig


def measure(config: EmbodiedConfig, stages: int, num_cores: int, iterations: int) -> dict:
    """Median throughputs of a disaggregated run with ``stages`` pipeline stages."""
    settings = RunSettings(iterations=iterations, checkpoint_every=10_000, granularity=stages)
    job = get_job("embodied_ppo", settings=settings)
    plan, logical = job.fixed_plan("disaggregated", num_cores, config)
    devices = cpu_devices(logical, available_cores()[:num_cores])
    with tempfile.TemporaryDirectory() as run_dir:
        request = RunRequest(job=job, config=config, out=Path(run_dir), progress=False)
        result = run(request, PlanChoice.given(plan, logical, devices))
    kept = result.metrics[1:]
    return {
        "rollout_env_steps_per_s": statistics.median(m["rollout_env_steps_per_s"] for m in kept),
        "env_steps_per_s": statistics.median(m["env_steps_per_s"] for m in kept),
        "rollout_env_steps_per_s_each": [m["rollout_env_steps_per_s"] for m in kept],
        "env_steps_per_s_each": [m["env_steps_per_s"] for m in kept],
        "oversubscribed": is_oversubscribed(devices),
        "plan": plan.describe(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--cores", type=int, default=min(2, len(available_cores())))
    parser.add_argument("--json", type=Path, help="write the report here, with provenance")
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/bench_pipelining.py", argv)
    config = EmbodiedConfig(
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        hidden_sizes=tuple(args.hidden),
        num_epochs=1,
        num_minibatches=4,
    )
    one = measure(config, 1, args.cores, args.iterations)
    two = measure(config, 2, args.cores, args.iterations)
    report = {
        "config": {
            "num_envs": args.num_envs,
            "num_steps": args.num_steps,
            "hidden_sizes": args.hidden,
            "cores": args.cores,
        },
        "stages_1": one,
        "stages_2": two,
        "rollout_ratio_2_over_1": two["rollout_env_steps_per_s"] / one["rollout_env_steps_per_s"],
        "iteration_ratio_2_over_1": two["env_steps_per_s"] / one["env_steps_per_s"],
    }
    print(json.dumps(report, indent=1))
    if args.json is not None:
        suite.write_artifact(args.json, report, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
