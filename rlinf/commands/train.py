"""Train a workload with real workers under a plan (auto: profile, plan, run; a fixed mode; or a plan file).

``--mode auto`` profiles the job's probe plans within ``--profile-budget`` seconds (or reuses ``--trace``), merges
the samples of earlier runs (``--merge-trace RUN_DIR/trace.json``), lets the planner choose from the trace
(:func:`rlinf.app.auto.plan_from_trace`), prints the chosen plan and the runner-ups' predicted times, then trains,
reporting each iteration's measured and predicted time. The run directory also gets ``profile_trace.json``.
``--backend ray`` runs workers as Ray actors (one Ray session for profiling and training); a failing worker makes
the run restart its workers from the newest checkpoint, up to ``--max-restarts`` times; ``--resume RUN_DIR``
continues a stopped run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from rlinf.commands import values
from rlinf.commands.machine_args import add_machine_arguments, add_profiling_arguments, resolve_machine
from rlinf.core.errors import ConfigError, RlinfWarning, require
from rlinf.core.outputs import check_output_dir
from rlinf.core.phases import mark as mark_phase
from rlinf.core.plan import load_plan

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
        "--max-restarts",
        type=int,
        default=DEFAULT_MAX_RESTARTS,
        help="when a worker fails, restart the workers from the newest checkpoint and go on, up to this many "
        f"times (default {DEFAULT_MAX_RESTARTS}; 0: stop at the first failure)",
    )


RAY_CPUS_PER_CORE = 4
"""A private Ray gets this many CPUs per core: plans may use more logical devices than cores (each actor pins
itself to its core; Ray's CPU count only gates placement)."""


def run(args: argparse.Namespace) -> int:
    """Validate the inputs, then train."""
    from executor.devices import physical_units
    from rlinf.app.jobs import load_job_config

    if args.iterations is not None:
        require(
            args.iterations >= 1,
            "--iterations",
            args.iterations,
            "must be >= 1",
            "train at least one iteration",
        )
    job, config = load_job_config(args.config, args.set, iterations=args.iterations, seed=args.seed)
    require(
        args.max_restarts >= 0,
        "--max-restarts",
        args.max_restarts,
        "must be >= 0",
        "use 0 to stop at a failure",
    )
    job.check(config)  # what needs the outside world (an env id, a tokenizer), before any worker starts
    mark_phase("config_checked")
    args.machine = _machine(args)
    cores = physical_units(args.accelerator)
    unit = "CPU cores" if args.accelerator == "cpu" else "GPUs"
    num_devices = len(cores) if args.devices is None else args.devices
    require(num_devices >= 1, "--devices", num_devices, "must be >= 1", "use at least one device")
    _check_nodes(args, num_devices)
    per_node = -(-num_devices // args.nodes)
    require(
        per_node <= len(cores),
        "--devices",
        num_devices,
        f"this machine lets rlinf use {len(cores)} {unit}"
        + (f" and {args.nodes} nodes are assumed to have as many" if args.nodes > 1 else ""),
        f"use --devices {len(cores) * args.nodes} or fewer",
    )
    _choose_out(args, job.name)
    with _backend_session(args, num_devices):
        return _plan_and_train(job, config, args, cores, num_devices)


def _machine(args: argparse.Namespace) -> Any:
    """The machine the run trains on (:func:`rlinf.commands.machine_args.resolve_machine`), with ``--cpu-devices``
    cores beside its GPUs (the local backend only)."""
    machine = resolve_machine(args)
    if args.cpu_devices and args.backend == "ray":
        raise ConfigError(
            "--cpu-devices", args.cpu_devices, "CPU cores beside GPUs run with the local backend only",
            "use --backend local, or --cpu-devices 0",
        )  # fmt: skip
    return machine


def _choose_out(args: argparse.Namespace, workload: str) -> None:
    """Settle the run directory before any work: ``--resume``'s, a fresh ``--out`` (refused when it holds a
    run), or a new default one; say which."""
    from rlinf.app.run_dir import default_out, require_fresh, require_no_links

    if args.resume is not None:
        run_dir = Path(args.resume)
        require(
            run_dir.is_dir(), "--resume", str(run_dir), "is not a run directory", "pass the --out of a run"
        )
        require_no_links(run_dir)
        args.out = str(run_dir)
        return
    if args.out is None:
        args.out = str(default_out(workload))
    else:
        require_fresh(check_output_dir(args.out, "--out"))
    print(f"rlinf: writing the run to {args.out}")


@contextlib.contextmanager
def _backend_session(args: argparse.Namespace, num_devices: int) -> Iterator[None]:
    """With ``--backend ray``: one Ray session for profiling and training (started on 127.0.0.1 unless
    ``--address``); its CPU count leaves room for plans with more logical devices than cores."""
    if args.backend != "ray":
        yield
        return
    import executor

    executor.require_ray()
    from executor import ray_session
    from executor.devices import physical_units

    gpus = len(physical_units("cuda")) if args.accelerator == "cuda" else 0
    with ray_session.session(args.address, num_cpus=RAY_CPUS_PER_CORE * num_devices, num_gpus=gpus):
        where = (
            f"joined the Ray cluster at {args.address}"
            if args.address
            else "started a private Ray on 127.0.0.1"
        )
        print(f"ray: {where} ({ray_session.describe_cluster()})")
        yield


def _plan_and_train(
    job: Any, config: Any, args: argparse.Namespace, cores: tuple[int, ...], num_devices: int
) -> int:
    """Pick the plan (``--plan``, auto or a fixed mode), then train under it."""
    from rlinf.app.console import closing_summary, recent_metrics
    from rlinf.app.runner import train

    predicted, facts = None, None
    resume = _resume(args)
    if args.plan:
        path = Path(args.plan)
        require(path.is_file(), "--plan", str(path), "file does not exist", "pass a plan YAML file")
        plan = load_plan(path, max(num_devices, 64), field="--plan", num_cores=args.machine.num_cores)
        logical = max(1, plan.num_logical[0])
        if args.max_staleness is not None and args.max_staleness != plan.max_staleness:
            raise ConfigError(
                "--max-staleness", args.max_staleness, f"conflicts with --plan, whose max_staleness is "
                f"{plan.max_staleness}", "drop --max-staleness or change the plan's max_staleness",
            )  # fmt: skip
        if args.mode is not None and args.mode != plan.mode:
            raise ConfigError(
                "--mode",
                args.mode,
                f"conflicts with --plan, whose placement is {plan.mode}",
                "drop --mode or change the plan",
            )
    elif (args.mode or job.settings.mode) == "auto":
        plan, logical, prediction = _auto(job, config, num_devices, args)
        predicted, facts = prediction.timeline, prediction.to_dict()
    else:
        plan, logical = job.fixed_plan(args.mode or job.settings.mode, num_devices, config)
        if _max_staleness(job, args):
            plan = attrs.evolve(plan, max_staleness=_max_staleness(job, args))
    job.check_plan(plan, config, machine=args.machine)  # memory against the machine's own devices
    devices, nodes = _placement(args, logical, num_devices)
    if _oversubscribed(devices, nodes):
        print(
            f"rlinf: warning: {logical} logical devices share {num_devices} "
            f"{'CPU core' if args.accelerator == 'cpu' else 'GPU'}(s); devices are oversubscribed",
            file=sys.stderr,
        )
    result = train(
        job,
        config,
        plan,
        logical,
        args.out,
        devices=devices,
        progress="lines" if args.no_progress else True,
        predicted=predicted,
        prediction_facts=facts,
        backend=args.backend,
        address=args.address,
        nodes=nodes,
        resume=resume,
        max_restarts=args.max_restarts,
        machine=args.machine,
    )
    iterations = job.settings.iterations
    if result.complete_before:
        missing = ", ".join(result.written) or "nothing was missing"
        print(f"{result.run_dir}: the run is complete ({iterations} iterations); wrote {missing}")
        return 0
    accuracy = Path(result.run_dir) / "prediction.json"
    held = json.loads(accuracy.read_text()) if predicted is not None and accuracy.is_file() else None
    if held is not None:
        inside = held.get("inside_interval")
        print(
            f"prediction: measured median {held['measured_median_s']:.4f} s against {held['predicted_iteration_s']:.4f} s "
            f"predicted over {held['iterations']} iterations: {100 * held['bias']:+.1f}% (measured / predicted - 1)"
            + ("" if inside is None else f", {'inside' if inside else 'outside'} the interval")
            + f"; single iterations: median |error| {100 * held['median_error']:.1f}%, 90th percentile "
            f"{100 * held['p90_error']:.1f}%"
        )
    summary = job.summary(recent_metrics(result.metrics))
    print(
        closing_summary(
            plan=plan.describe(), iterations=iterations, workload_summary=summary, prediction=held,
            run_dir=str(result.run_dir),
        )
    )  # fmt: skip
    return 0


def _max_staleness(job: Any, args: argparse.Namespace) -> int:
    """The staleness bound of a fixed mode, or auto mode's largest: ``--max-staleness``, else the config's."""
    return int(job.settings.max_staleness if args.max_staleness is None else args.max_staleness)


def _oversubscribed(devices: tuple[Any, ...], nodes: list[int] | None) -> bool:
    """Whether two of a node's logical devices (devices and the cores beside them) share one core or GPU."""
    from executor.devices import is_oversubscribed

    node_of = nodes or [0] * len(devices)
    return any(
        is_oversubscribed(tuple(d for d, n in zip(devices, node_of, strict=True) if n == node))
        for node in set(node_of)
    )


def _resume(args: argparse.Namespace) -> Any:
    """For ``--resume RUN_DIR``: train into RUN_DIR under its plan (unless one is given) from its newest valid
    checkpoint (a corrupt newest one is skipped with a warning)."""
    if args.resume is None:
        return None
    from rlinf.app.checkpoint import load_latest

    run_dir = Path(args.resume)
    if args.plan is None and args.mode is None:
        args.plan = str(run_dir / "plan.yaml")
    return load_latest(run_dir / "checkpoints")


def _check_nodes(args: argparse.Namespace, num_devices: int) -> None:
    """``--nodes`` spans Ray nodes only, each with at least one device."""
    require(
        1 <= args.nodes <= num_devices,
        "--nodes",
        args.nodes,
        f"must be between 1 and the {num_devices} devices",
        "use fewer nodes or more --devices",
    )
    require(
        args.nodes == 1 or args.backend == "ray",
        "--nodes",
        args.nodes,
        "only the ray backend spans nodes",
        "add --backend ray",
    )


def _placement(
    args: argparse.Namespace, logical: int, num_devices: int
) -> tuple[tuple[Any, ...], list[int] | None]:
    """The devices of a plan on ``logical`` logical devices and the node of each. On one node they go round-robin
    over this process's first ``num_devices`` cores; over ``--nodes N`` the devices split into ``N`` contiguous
    blocks and each block takes cores 0, 1, ... of its node (the nodes are assumed to have this machine's core
    ids). The nodes are ``None`` when every device is on node 0 (as is a plan on fewer devices than nodes)."""
    from executor.devices import Device, physical_units, run_devices

    cores = physical_units(args.accelerator)
    if args.nodes == 1 or logical < args.nodes:
        return run_devices(args.accelerator, logical, cores[:num_devices], args.cpu_devices), None
    nodes = [d * args.nodes // logical for d in range(logical)]  # contiguous blocks
    devices, taken = [], dict.fromkeys(range(args.nodes), 0)
    for index, node in enumerate(nodes):
        devices.append(Device(index=index, kind=args.accelerator, core=cores[taken[node] % len(cores)]))
        taken[node] += 1
    return tuple(devices), nodes


def _backends(args: argparse.Namespace, num_devices: int, job_watchdog_s: float) -> Any:
    """Opens the ``--backend`` (with ``--address`` and ``--nodes``) for a plan on ``logical`` devices, under the
    config's watchdog (``execution.watchdog_s``)."""
    import executor

    watchdog = executor.Watchdog(floor_s=job_watchdog_s)

    def open_backend(logical: int) -> Any:
        devices, nodes = _placement(args, logical, num_devices)
        return executor.open_backend(
            args.backend, devices, address=args.address, nodes=nodes, watchdog=watchdog
        )

    return open_backend


def _auto(job: Any, config: Any, num_devices: int, args: argparse.Namespace) -> tuple[Any, int, Any]:
    """Profile (or load the trace), merge earlier runs' samples, choose the plan with one half of the profile and
    predict it from the other (:func:`rlinf.app.held_out.choose_and_predict`); print the choice, the prediction with
    its interval and the runner-ups."""
    from rlinf.app.auto import Candidate
    from rlinf.app.held_out import choose_and_predict
    from rlinf.app.profiling import ProfileSettings, merge_traces, other_processor, profile
    from rlinf.core.trace import load_trace

    if args.trace:
        trace = load_trace(args.trace)
        print(f"auto: planning from {args.trace} ({len(trace.samples)} samples; profiling skipped)")
        if mismatch := other_processor(trace):
            warnings.warn(RlinfWarning(f"--trace {args.trace}: {mismatch}"), stacklevel=2)
    else:
        settings = ProfileSettings(budget_s=args.profile_budget, iterations_per_plan=args.profile_iterations)
        profiled = profile(
            job,
            config,
            num_devices,
            settings=settings,
            progress=not args.no_progress,
            command=getattr(args, "command_line", "rlinf train"),
            backends=_backends(args, num_devices, job.settings.watchdog_s),
            machine=args.machine,
            state_dir=Path(args.out),
        )
        trace = profiled.trace
        print(
            f"auto: profiled {len(profiled.plans)} probe plans, {profiled.iterations} iterations in "
            f"{profiled.elapsed_s:.0f} s (budget {settings.budget_s:.0f} s)"
            + (f"; {len(profiled.left_out)} left out, never chosen" if profiled.left_out else "")
        )
    trace = merge_traces(trace, *(load_trace(path) for path in args.merge_trace))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace.save(out / "profile_trace.json")
    auto, prediction = choose_and_predict(
        job,
        config,
        trace,
        num_devices,
        seed=job.settings.seed,
        machine=args.machine,
        max_staleness=_max_staleness(job, args),
    )
    best = auto.chosen
    print(
        f"auto: chose {best.plan.describe()} (from {best.source}); {len(auto.candidates)} plans simulated in "
        f"{auto.search_s:.1f} s"
    )
    print(f"auto: predicted {prediction.iteration_s:.4f} s/iteration, {prediction.note}" + (
        f" (the choosing half: {prediction.choosing_s:.4f} s)" if prediction.held_out else ""
    ))  # fmt: skip
    if prediction.interval_s is not None and prediction.coverage is not None:
        low, high = prediction.interval_s
        print(
            f"auto: interval {low:.4f} to {high:.4f} s: where {len(prediction.ratios)} probe plans measured against "
            f"their own out-of-sample prediction (x{min(prediction.ratios):.2f} to x{max(prediction.ratios):.2f}); "
            f"a run like a probe lands inside with probability {prediction.coverage:.0%}"
        )

    def shape(plan: Any) -> tuple:
        return plan.placements, tuple(sorted(plan.granularity.items()))

    shapes = {shape(best.plan)}
    runner_ups: list[Candidate] = []
    for other in auto.candidates[1:]:  # the next plans that differ in more than offload
        if shape(other.plan) not in shapes and len(runner_ups) < 3:
            shapes.add(shape(other.plan))
            runner_ups.append(other)
    for other in runner_ups:
        print(
            f"auto:   runner-up {other.plan.describe()} ({other.source}): "
            f"+{100 * (other.predicted_s / best.predicted_s - 1):.1f}% by the choosing half"
        )
    return best.plan, best.num_devices, prediction
