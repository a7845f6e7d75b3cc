"""Ray backend vs local backend on the Hopper PPO config: time per training iteration, same program, same seed.

    python benchmarks/bench_ray.py [--iterations 20] [--warmup 2] [--devices 2] [--modes collocated ...] [--json OUT]

For each mode in turn (default: collocated, hybrid, disaggregated), both backends run the program that ``rlinf
train examples/hopper_ppo.yaml --mode <mode> --devices <devices>`` runs, in the same process: the local backend
(worker processes and pipes) and the Ray backend (a private single-node Ray bound to 127.0.0.1, one actor per
replica). Both are started first, then their iterations
alternate (local, Ray, local, Ray, ...), so that both see the same machine load; the idle backend's workers
block on their connections. Per iteration it measures the driver's wall time around ``executor.run``
(dispatch, transport and compute; worker start-up excluded by the ``--warmup`` iterations, which are dropped).
Reported: the median and mean per backend and the ratio ray / local (target <= 1.10), plus a check that both
backends computed the same losses and returns. ``--json`` writes an artifact with provenance and every measured
iteration's seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from typing import Any

import suite

import executor
from executor.devices import available_cores
from rlinf.app.jobs import load_job_config

KINDS = ("local", "ray")


def measure(program: Any, specs: dict, devices: tuple, iterations: int, warmup: int) -> dict[str, dict]:
    """Seconds per iteration (after ``warmup``) and what each iteration computed, per backend, alternating."""
    seconds: dict[str, list[float]] = {kind: [] for kind in KINDS}
    outcomes: dict[str, list] = {kind: [] for kind in KINDS}
    with contextlib.ExitStack() as stack:
        backends = {kind: stack.enter_context(executor.open_backend(kind, devices)) for kind in KINDS}
        for index in range(warmup + iterations):
            for kind, backend in backends.items():
                started = time.perf_counter()
                result = executor.run(program, specs, backend=backend)
                elapsed = time.perf_counter() - started
                outcomes[kind].append(sorted(json.dumps(dict(i.info), sort_keys=True) for i in result.infos))
                if index >= warmup:
                    seconds[kind].append(elapsed)
    return {
        kind: {
            "seconds": seconds[kind],
            "median_s": statistics.median(seconds[kind]),
            "mean_s": statistics.mean(seconds[kind]),
            "outcomes": outcomes[kind],
        }
        for kind in KINDS
    }


MODES = ("collocated", "hybrid", "disaggregated")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="examples/hopper_ppo.yaml")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--devices", type=int, default=min(2, len(available_cores())))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--json", help="write the summary here, with provenance")
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/bench_ray.py", argv)
    job, config = load_job_config(args.config)
    summary = {mode: compare(job, config, mode, args) for mode in args.modes}
    if args.json:
        suite.write_artifact(
            args.json, {"iterations": args.iterations, "warmup": args.warmup, "modes": summary}, started
        )


def compare(job: Any, config: Any, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """Local and Ray backends on one fixed plan, iterations alternating; printed and returned."""
    plan, logical = job.fixed_plan(mode, args.devices, config)
    program = job.lower(plan, config, logical)
    specs = job.worker_specs(config, plan, program)
    devices = executor.cpu_devices(logical, available_cores()[: args.devices])
    measured = measure(program, specs, devices, args.iterations, args.warmup)
    local, ray = measured["local"], measured["ray"]
    ratio = ray["median_s"] / local["median_s"]
    same = ray.pop("outcomes") == local.pop("outcomes")
    print(
        f"{plan.describe()}: {program.num_ops} ops per iteration, {args.iterations} iterations after {args.warmup} warm-up"
    )
    for name, result in (("local", local), ("ray", ray)):
        print(
            f"  {name:5s}: median {result['median_s'] * 1000:.1f} ms, mean {result['mean_s'] * 1000:.1f} ms per iteration"
        )
    print(f"  ratio ray / local (median): {ratio:.3f} (target <= 1.10); same losses and returns: {same}")
    return {
        "plan": plan.describe(),
        "num_ops": program.num_ops,
        "local": local,
        "ray": ray,
        "ratio": ratio,
        "same_outcomes": same,
    }


if __name__ == "__main__":
    main()
