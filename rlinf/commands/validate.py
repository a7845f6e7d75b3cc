"""Validate the simulator against reality: run K plans for real and in simulation from one profiled trace.

A profile taken as ``rlinf train --mode auto`` takes it (the same settings: 2 warm-up and 6 measured iterations per
probe plan, within ``--profile-budget``), or ``--trace``, lets the auto mode's planning propose candidates; K of
them are chosen, spread over their predicted times, every mode represented. Each is predicted *out of sample*, as in
real use: from the profile (written to ``OUT/trace.json``), taken before any plan is measured, leaving out the
samples of the plan itself and of every probe plan with the same compute ops (an offload variant), the remaining
probes' compute samples evened out to the typical probe's speed as the auto mode evens out its profile
(:func:`rlinf.app.profiling.even_probe_speeds`: the machine's speed drifts from probe to probe); ``validate.json``
records which probe plans fed each prediction. The chosen plans are then measured one at a time, each in 4 turns
with fresh worker processes (warm-up, then its iterations back to back, as training runs them), the turns of all
plans interleaved in orders that alternate direction (:func:`rlinf.app.profiling.measure_plans`: each worker process
keeps its own speed for life, and every plan's workers alive at once slowed some plans by more than the model's
error), and each plan's measured time is the median of its measured iterations; each prediction is also checked
against the range of its plan's turn medians (:attr:`rlinf.core.fidelity.PlanFidelity.within_turn_range`: outside it,
the error exceeds the measurement's own spread from one set of processes to the next). With ``--trace`` the predictions
come from that file: out of sample as well when it is a profile written by rlinf (its provenance records which
samples each probe plan measured), else from all of it (an imported or synthesized trace's plans are unknown). A
plan that needs more logical devices than there are cores (disaggregated env, rollout and actor on 2 cores) is run
and reported too, but kept out of the summary: the simulator does not model devices that share a core. Writes
``OUT/validate.json`` and ``OUT/timeline_pair.png`` (the simulator's best plan, predicted above measured).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlinf.commands import values
from rlinf.core.errors import RlinfWarning, require
from rlinf.core.files import write_text_atomic
from rlinf.core.outputs import check_output_dir
from rlinf.core.plan import Plan

DEFAULT_PLANS = 6
MEASURE_TURNS = 4
"""Turns per measured plan, each with fresh worker processes (at most one per measured iteration)."""
DEFAULT_ITERATIONS = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``rlinf validate``."""
    parser.add_argument("config", help="YAML config naming its workload, e.g. examples/hopper_ppo.yaml")
    parser.add_argument(
        "--plans", type=int, default=DEFAULT_PLANS, help=f"plans on the cores (default {DEFAULT_PLANS})"
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"measured iterations per plan, after warm-up (default {DEFAULT_ITERATIONS})",
    )
    parser.add_argument(
        "--warmup", type=int, default=2, help="warm-up iterations per turn of a plan (default 2)"
    )
    parser.add_argument(
        "--devices", type=int, help="devices (CPU cores or GPUs) to use (default: all usable cores or GPUs)"
    )
    parser.add_argument(
        "--accelerator",
        choices=("cpu", "cuda"),
        help="what a device is: a CPU core or a CUDA GPU (default: cuda when a GPU is visible, else cpu)",
    )
    parser.add_argument(
        "--cpu-devices",
        type=int,
        metavar="N",
        help="with GPUs: CPU cores beside them for components that need no GPU (default: the machine's cores "
        "less one per GPU)",
    )
    parser.add_argument("--trace", help="reuse a profiled trace instead of profiling")
    parser.add_argument(
        "--profile-budget",
        type=values.positive_seconds,
        default=120.0,
        help="profiling seconds (default 120)",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key (repeatable)"
    )
    parser.add_argument("--out", default="runs/validate", help="directory for the PNG, trace and report")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def run(args: argparse.Namespace) -> int:
    """Profile (or load), choose plans, measure and simulate them, report the errors."""

    from executor.devices import (
        core_pool_cores,
        default_cpu_devices,
        machine_for,
        physical_units,
        resolve_accelerator,
    )
    from planner.judge import quiet_copy
    from rlinf.app.auto import plan_from_trace
    from rlinf.app.jobs import load_job_config
    from rlinf.app.profiling import (
        COST_STATISTIC,
        ProfileSettings,
        local_backends,
        measure_plans,
        other_processor,
        profile,
        samples_by_plan,
        split_iterations,
    )
    from rlinf.core import fidelity
    from rlinf.core.costs import fit
    from rlinf.core.export import write_timeline_pair_png
    from rlinf.core.lowering import lower
    from rlinf.core.trace import load_trace
    from simulator import simulate

    require(args.plans >= 2, "--plans", args.plans, "must be >= 2", "compare at least two plans")
    require(args.iterations >= 1, "--iterations", args.iterations, "must be >= 1", "measure an iteration")
    require(args.warmup >= 0, "--warmup", args.warmup, "must be >= 0", "use 0 or more")
    check_output_dir(args.out, "--out")
    job, config = load_job_config(args.config, args.set)
    accelerator = resolve_accelerator(args.accelerator)
    core_pool = default_cpu_devices(accelerator) if args.cpu_devices is None else args.cpu_devices
    require(
        core_pool == 0 or accelerator == "cuda",
        "--cpu-devices",
        core_pool,
        "places components on CPU cores beside GPUs, and this run has none",
        "use --devices N, or --accelerator cuda on a GPU machine",
    )
    core_pool_cores(core_pool)
    machine = machine_for(accelerator, core_pool)
    cores = physical_units(accelerator)
    num_devices = len(cores) if args.devices is None else args.devices
    require(
        1 <= num_devices <= len(cores),
        "--devices",
        num_devices,
        f"this machine lets rlinf use {len(cores)} {'CPU cores' if accelerator == 'cpu' else 'GPUs'}",
        f"use 1 to {len(cores)} devices",
    )
    backends = local_backends(num_devices, accelerator, core_pool)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    progress = not args.no_progress and not args.json
    if args.trace:
        trace = load_trace(args.trace, "--trace")
        by_plan: tuple = samples_by_plan(trace, "--trace")
        if mismatch := other_processor(trace):
            warnings.warn(RlinfWarning(f"--trace {args.trace}: {mismatch}"), stacklevel=2)
    else:
        settings = ProfileSettings(budget_s=args.profile_budget)  # as `rlinf train --mode auto` profiles
        profiled = profile(
            job,
            config,
            num_devices,
            settings=settings,
            progress=progress,
            backends=backends,
            command=getattr(args, "command_line", "rlinf validate"),
            machine=machine,
        )
        trace, by_plan = profiled.trace, profiled.samples_by_plan
    trace.save(out / "trace.json")
    auto = plan_from_trace(job, config, trace, num_devices, seed=job.options(config).seed, machine=machine)
    chosen = _choose(auto.candidates, args.plans, num_devices)
    # Predictions come from the profile, taken before any plan's measurement window, without the samples of
    # the plan itself or of a plan with the same compute ops (an offload variant): out of sample, as in real use.
    predicted, sources = [], []
    for c in chosen:
        plan_trace, feeding = out_of_sample(trace, by_plan, c.plan, even_speeds=True)
        sources.append(feeding if by_plan else [f"--trace {args.trace}"])
        cluster = machine.cluster(c.num_devices)
        costs = quiet_copy(fit(plan_trace, cluster, statistic=COST_STATISTIC))
        predicted.append(simulate(lower(job.workflow(config), c.plan, cluster), costs))
    generations = min(MEASURE_TURNS, args.iterations)
    measured = measure_plans(
        job,
        config,
        [(c.plan, c.num_devices) for c in chosen],
        iterations=args.iterations,
        warmup_iterations=args.warmup,
        generations=generations,
        backends=backends,
        progress=progress,
        machine=machine,
    )
    probes = [(plan, num_devices) for plan, _ in by_plan]
    turn_sizes = tuple(split_iterations(args.iterations, generations))
    rows = [
        fidelity.PlanFidelity(
            name=c.plan.describe(),
            source=c.source,
            predicted_s=p.iteration_s,
            measured_s=statistics.median(m.iteration_s),
            measured_each_s=tuple(m.iteration_s),
            turn_sizes=turn_sizes,
            oversubscribed=c.num_devices > num_devices,
            in_profile=(c.plan, c.num_devices) in probes,
        )
        for c, p, m in zip(chosen, predicted, measured, strict=False)
    ]
    order = sorted(range(len(rows)), key=lambda i: rows[i].predicted_s)
    rows, chosen, measured, predicted, sources = (
        [rows[i] for i in order],
        [chosen[i] for i in order],
        [measured[i] for i in order],
        [predicted[i] for i in order],
        [sources[i] for i in order],
    )
    on_cores = fidelity.report([r for r in rows if not r.oversubscribed])
    every = fidelity.report(rows)
    best = min(range(len(chosen)), key=lambda i: (rows[i].oversubscribed, rows[i].predicted_s))
    png = out / "timeline_pair.png"
    write_timeline_pair_png(predicted[best], measured[best].last, png)
    result: dict[str, Any] = {
        **on_cores.to_dict(),
        "plans": every.to_dict()["plans"],
        "including_oversubscribed": {key: value for key, value in every.to_dict().items() if key != "plans"},
        "num_devices": num_devices,
        "iterations": args.iterations,
        "warmup_iterations": args.warmup,
        "trace": str(out / "trace.json"),
        "prediction": "out of sample: each plan from profile samples taken before the measurements, excluding "
        "the plan's own and those of plans with the same compute ops, the other probes' speeds evened out"
        if by_plan
        else f"from every sample of --trace {args.trace} (it does not record which plans measured them)",
        "predicted_from": {row.name: feeding for row, feeding in zip(rows, sources, strict=True)},
        "measurement": f"one plan at a time, in {generations} turns per plan, each with fresh worker processes: "
        f"{args.warmup} warm-up iteration(s), then its share of the measured ones back to back; the turns of all "
        "plans interleaved, in orders that alternate direction",
        "timeline_pair_png": str(png),
        "timeline_pair_plan": rows[best].name,
    }
    write_text_atomic(out / "validate.json", json.dumps(result, indent=1, default=_json_number) + "\n")
    if args.json:
        print(json.dumps(result, default=_json_number))
    else:
        _print(rows, on_cores, every, result)
    return 0


def same_compute(a: Plan, b: Plan) -> bool:
    """Whether two plans run the same compute ops (the same placement and granularity; offload aside)."""
    return a.placements == b.placements and a.granularity == b.granularity


def out_of_sample(
    trace: Any, by_plan: Sequence[tuple[Plan, Sequence[Any]]], plan: Plan, *, even_speeds: bool = False
) -> tuple[Any, list[str]]:
    """The profile ``trace`` without the samples of ``plan`` and of every probe plan with the same compute ops,
    and the probe plans whose samples it keeps (``by_plan`` empty: the trace as it is). ``by_plan`` holds the
    trace's first samples; any after them (merged in later) are no probe's and are kept. ``even_speeds``: the kept
    probes' compute samples evened out to the typical probe's speed, among themselves
    (:func:`rlinf.app.profiling.even_probe_speeds`)."""
    import attrs

    from rlinf.app.profiling import even_probe_speeds

    if not by_plan:
        return trace, []
    feeding = [(probe, samples) for probe, samples in by_plan if not same_compute(probe, plan)]
    rest = trace.samples[sum(len(samples) for _, samples in by_plan) :]
    if even_speeds:
        kept = even_probe_speeds(feeding) + tuple(rest)
    else:
        kept = tuple(sample for _, samples in feeding for sample in samples) + tuple(rest)
    return attrs.evolve(trace, samples=kept), [probe.describe() for probe, _ in feeding]


def layout(plan: Plan) -> tuple[tuple[str, ...], ...]:
    """Which components share a device, device by device, in sorted order: two plans with one layout differ only
    in which device is which (the actor on core 0 or on core 1 beside a loop spread over both), so the simulator
    predicts them alike and measuring both would only turn the top-1 check into a coin toss."""
    on: dict[int, list[str]] = {}
    for placement in plan.placements:
        for device in placement.devices:
            on.setdefault(device, []).append(placement.component)
    return tuple(sorted(tuple(sorted(names)) for names in on.values()))


def _choose(candidates: tuple, count: int, num_devices: int) -> list:
    """Up to ``count`` plans on the cores, spread over the candidates' predicted times: one plan per
    (layout, granularity) (offload variants of it, and its mirror images, only when those run out), the best of
    each mode and the chosen plan first, then evenly spaced through the rest; plans that need more logical devices
    than cores come on top (at most one per mode)."""
    fitting = [c for c in candidates if c.num_devices <= num_devices]
    shapes: dict[tuple, Any] = {}
    for candidate in fitting:
        shape = (layout(candidate.plan), tuple(sorted(candidate.plan.granularity.items())))
        shapes.setdefault(shape, candidate)
    distinct = list(shapes.values())
    pool = distinct + [c for c in fitting if c not in distinct]
    chosen = pool[:1]
    for mode in ("collocated", "hybrid", "disaggregated"):
        of_mode = [c for c in pool if c.plan.mode == mode and c not in chosen]
        if of_mode and mode not in {c.plan.mode for c in chosen}:
            chosen.append(of_mode[0])
    rest = [c for c in distinct if c not in chosen]
    wanted = max(0, count - len(chosen))
    if rest and wanted:
        step = max(1.0, len(rest) / wanted)
        chosen += [rest[int(i * step)] for i in range(min(wanted, len(rest)))]
    chosen += [c for c in pool if c not in chosen][: max(0, count - len(chosen))]
    modes = {c.plan.mode for c in chosen}
    for candidate in candidates:
        if candidate.num_devices > num_devices and candidate.plan.mode not in modes:
            chosen.append(candidate)
            modes.add(candidate.plan.mode)
    return sorted(chosen, key=lambda c: c.predicted_s)


def _json_number(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else str(value)


def _miss(report: Any) -> str:
    """A top-1 miss: the regret and whether it is more than noise."""
    text = f"no (regret {100 * report.top1_regret:.1f}%"
    if report.top1_p_value is not None:
        verdict = "a real miss" if report.top1_p_value < 0.05 else "within noise"
        text += f", p = {report.top1_p_value:.2f}: {verdict}"
    return text + ")"


def _turn_range(row: Any) -> str:
    """The plan's turn medians as ``min-max`` milliseconds, ``!`` when the prediction lies outside them."""
    medians = row.turn_medians_s
    if len(medians) < 2:
        return ""
    outside = "" if row.within_turn_range else " !"
    return f"{1e3 * min(medians):.1f}-{1e3 * max(medians):.1f}{outside}"


def _print(rows: list, on_cores: Any, every: Any, result: dict[str, Any]) -> None:
    print(f"{'plan':<64} {'source':<15} {'predicted':>9} {'measured':>9} {'error':>7}  turns (ms)")
    for row in rows:
        mark = (" *" if row.oversubscribed else "") + (" p" if row.in_profile else "")
        print(
            f"{row.name + mark:<64} {row.source:<15} {row.predicted_s:>8.4f}s {row.measured_s:>8.4f}s "
            f"{100 * row.error:>6.1f}%  {_turn_range(row)}"
        )
    print(
        f"plans on {result['num_devices']} cores: median error {100 * on_cores.median_error:.1f}%, "
        f"max {100 * on_cores.max_error:.1f}%, simulator's best is measured best: "
        f"{'yes' if on_cores.top1_match else _miss(on_cores)}, "
        f"Kendall's tau {on_cores.kendall_tau:.2f}"
    )
    if any(r.oversubscribed for r in rows):
        print(
            f"* more logical devices than cores (not in the summary); with them: median error "
            f"{100 * every.median_error:.1f}%, max {100 * every.max_error:.1f}%, tau {every.kendall_tau:.2f}"
        )
    if on_cores.within_turn_range:
        inside, of = on_cores.within_turn_range
        turns = len(rows[0].turn_medians_s)
        print(
            f"{inside} of {of} predictions on the cores lie within the range of their plan's {turns} turn medians "
            f"(ms; ! outside), a range that holds a plan's typical turn time with probability "
            f"{100 * (1 - 2 / 2**turns):.1f}%"
        )
    print("p: also a probe plan of the profile (its own samples were left out of its prediction)")
    print(f"wrote {result['timeline_pair_png']} ({result['timeline_pair_plan']})")
