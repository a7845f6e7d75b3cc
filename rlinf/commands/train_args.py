"""The flags of ``rlinf train`` and the request they make (:func:`rlinf.app.request.build_request`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rlinf.commands import values
from rlinf.commands.machine_args import add_machine_arguments, add_profiling_arguments

DEFAULT_MAX_RESTARTS = 3
"""Worker failures a run survives by restarting from its newest checkpoint."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``rlinf train``."""
    parser.add_argument("config", help="YAML config naming its workload, e.g. examples/hopper_ppo.yaml")
    parser.add_argument(
        "--mode",
        choices=("auto", "collocated", "disaggregated", "hybrid"),
        help="placement; auto = profile, plan, run (default: the config's execution.mode)",
    )
    parser.add_argument("--trace", help="auto mode: plan from this profiled trace instead of profiling")
    parser.add_argument(
        "--merge-trace",
        action="append",
        default=[],
        metavar="TRACE",
        help="auto mode: merge the samples of an earlier run's trace.json into the trace (repeatable)",
    )
    add_profiling_arguments(parser, budget_help="auto mode: profiling seconds (default 120)")
    parser.add_argument("--plan", help="plan YAML (placement, granularity, offload); overrides --mode")
    parser.add_argument(
        "--iterations", type=int, help="training iterations (default: the config's execution.iterations)"
    )
    parser.add_argument(
        "--max-staleness",
        type=values.count(0, 64),
        metavar="K",
        help="asynchronous RL: the rollout side may run up to K iterations ahead of training (auto: the planner "
        "chooses a bound <= K; a fixed mode runs with K; default: the config's execution.max_staleness, 0: "
        "synchronous)",
    )
    parser.add_argument(
        "--devices",
        type=int,
        help="devices (CPU cores or GPUs) to use, over all --nodes (default: every core or GPU this process may "
        "use); more than there are time-share them",
    )
    add_machine_arguments(parser)
    parser.add_argument("--seed", type=values.seed, help="random seed (default: the config's execution.seed)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key (repeatable)"
    )
    parser.add_argument(
        "--out",
        help="run directory, new or without a run in it (default: a new runs/<workload>-<YYYYmmdd-HHMMSS>)",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar: a line every 10 iterations or 60 s (RLINF_LOG_EVERY=N or Ns), as in a log",
    )
    parser.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="workers as local processes or Ray actors",
    )
    parser.add_argument(
        "--address", help="ray: address of a running Ray cluster (default: start a private one on 127.0.0.1)"
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="ray: spread the plan's devices over this many Ray nodes (default 1)",
    )
    parser.add_argument(
        "--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest valid checkpoint"
    )
    parser.add_argument(
        "--replan",
        metavar="off|auto",
        help="auto: when the measured iterations stay outside the prediction's band, re-plan on the drifted costs "
        "and switch plans at an iteration boundary where it pays (docs/replanning.md); default: auto with "
        "--mode auto, else off",
    )
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=DEFAULT_MAX_RESTARTS,
        help="when a worker fails, restart the workers from the newest checkpoint and go on, up to this many "
        f"times (default {DEFAULT_MAX_RESTARTS}; 0: stop at the first failure)",
    )


def run_flags(args: argparse.Namespace) -> Any:
    """The parsed flags of ``rlinf train`` as :class:`rlinf.app.request.RunFlags`."""
    from rlinf.app.profiling import ProfileSettings
    from rlinf.app.request import RunFlags

    def path(text: str | None) -> Path | None:
        return None if text is None else Path(text)

    return RunFlags(
        config=Path(args.config),
        overrides=tuple(args.set),
        mode=args.mode,
        plan=path(args.plan),
        trace=path(args.trace),
        merge_traces=tuple(Path(p) for p in args.merge_trace),
        profile=ProfileSettings(budget_s=args.profile_budget, iterations_per_plan=args.profile_iterations),
        iterations=args.iterations,
        seed=args.seed,
        max_staleness=args.max_staleness,
        num_devices=args.devices,
        accelerator=args.accelerator,
        num_cpu_devices=args.cpu_devices,
        nodes=args.nodes,
        backend=args.backend,
        address=args.address,
        out=path(args.out),
        resume=path(args.resume),
        max_restarts=args.max_restarts,
        replan=args.replan,
        progress="lines" if args.no_progress else True,
        command_line=getattr(args, "command_line", "rlinf train"),
    )
