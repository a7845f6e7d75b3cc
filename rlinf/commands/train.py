"""Train a workload with real workers under a plan (collocated, disaggregated, hybrid or a plan file)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlinf.errors import ConfigError, require
from rlinf.plan import plan_from_yaml


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``rlinf train``."""
    parser.add_argument("config", help="YAML config naming its workload, e.g. examples/hopper_ppo.yaml")
    parser.add_argument(
        "--mode",
        choices=("collocated", "disaggregated", "hybrid"),
        help="placement (default: the config's mode)",
    )
    parser.add_argument("--plan", help="plan YAML (placement, granularity, offload); overrides --mode")
    parser.add_argument("--iterations", type=int, help="training iterations (default: the config's)")
    parser.add_argument(
        "--devices", type=int, help="devices (CPU cores) to use (default: every core this process may use)"
    )
    parser.add_argument("--seed", type=int, help="random seed (default: the config's)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key (repeatable)"
    )
    parser.add_argument("--out", default="runs/train", help="run directory (default: runs/train)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    """Validate the inputs, then train."""
    from executor.devices import available_cores, cpu_devices, is_oversubscribed
    from rlinf.jobs import load_job_config
    from rlinf.runner import train

    job, config = load_job_config(args.config, args.set)
    if args.iterations is not None:
        require(
            args.iterations >= 1,
            "--iterations",
            args.iterations,
            "must be >= 1",
            "train at least one iteration",
        )
    config = job.with_options(config, iterations=args.iterations, seed=args.seed)
    job.workflow(config)  # validates what needs the outside world (e.g. the env id) before any worker starts
    cores = available_cores()
    num_devices = len(cores) if args.devices is None else args.devices
    require(num_devices >= 1, "--devices", num_devices, "must be >= 1", "use at least one device")
    require(
        num_devices <= len(cores),
        "--devices",
        num_devices,
        f"this machine lets rlinf use {len(cores)} CPU cores",
        f"use --devices {len(cores)} or fewer",
    )
    if args.plan:
        path = Path(args.plan)
        require(path.is_file(), "--plan", str(path), "file does not exist", "pass a plan YAML file")
        plan = plan_from_yaml(path.read_text(), max(num_devices, 64), source=path.name)
        logical = max(plan.devices_used) + 1
        if args.mode is not None and args.mode != plan.mode:
            raise ConfigError(
                "--mode",
                args.mode,
                f"conflicts with --plan, whose placement is {plan.mode}",
                "drop --mode or change the plan",
            )
    else:
        plan, logical = job.plan_for_mode(args.mode or job.options(config).mode, num_devices, config)
    job.check_plan(plan, config)
    devices = cpu_devices(logical, cores[:num_devices])
    if is_oversubscribed(devices):
        print(
            f"rlinf: warning: {logical} logical devices share {num_devices} CPU core(s); devices are oversubscribed",
            file=sys.stderr,
        )
    result = train(job, config, plan, logical, args.out, devices=devices, progress=not args.no_progress)
    iterations = job.options(config).iterations
    print(
        f"{plan.describe()}: {iterations} iterations, {job.summary(result.metrics[-1])}; wrote {result.run_dir}"
    )
    return 0
