"""Validation of the simulator against reality (``rlinf validate``): K plans run for real and in simulation from
one profiled trace.

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

import json
import math
import statistics
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from executor import StallError
from rlinf.app.jobs import C, Job
from rlinf.app.profiling import same_compute
from rlinf.core.cluster import Machine
from rlinf.core.errors import ConfigError, RlinfError, RlinfWarning
from rlinf.core.files import write_text_atomic
from rlinf.core.plan import Plan

MEASURE_TURNS = 4
"""Turns per measured plan, each with fresh worker processes (at most one per measured iteration)."""


@attrs.frozen(kw_only=True)
class Validation:
    """What :func:`validate` found: each plan's row, the summaries and the JSON written to ``validate.json``."""

    rows: tuple[Any, ...]
    """:class:`rlinf.core.fidelity.PlanFidelity` per measured plan, by predicted time."""
    on_cores: Any
    """:class:`rlinf.core.fidelity.FidelityReport` of the plans that do not share cores."""
    every: Any
    """The same over every measured plan."""
    result: dict[str, Any]


def validate(
    job: Job[C],
    config: C,
    out: Path,
    *,
    num_devices: int,
    machine: Machine,
    backends: Callable[[int], Any],
    num_plans: int,
    iterations: int,
    warmup: int,
    trace_path: str | None = None,
    profile_budget_s: float = 120.0,
    profile_iterations: int = 6,
    progress: bool = True,
    command: str = "rlinf validate",
) -> Validation:
    """Profile (or load ``trace_path``), choose ``num_plans`` plans, predict each out of sample, measure them in
    interleaved turns and compare; writes ``OUT/trace.json``, ``OUT/validate.json`` and ``OUT/timeline_pair.png``."""
    from rlinf.app.auto import plan_from_trace
    from rlinf.app.profiling import (
        ProfileSettings,
        measure_plans,
        other_processor,
        profile,
        samples_by_plan,
        split_iterations,
    )
    from rlinf.core import fidelity
    from rlinf.core.export import write_timeline_pair_png
    from rlinf.core.lowering import lower
    from rlinf.core.trace import load_trace

    out.mkdir(parents=True, exist_ok=True)
    if trace_path:
        trace = load_trace(trace_path, "--trace")
        by_plan: tuple = samples_by_plan(trace, "--trace")
        if mismatch := other_processor(trace):
            warnings.warn(RlinfWarning(f"--trace {trace_path}: {mismatch}"), stacklevel=2)
    else:
        # as `rlinf train --mode auto` profiles
        settings = ProfileSettings(budget_s=profile_budget_s, iterations_per_plan=profile_iterations)
        profiled = profile(
            job,
            config,
            num_devices,
            settings=settings,
            progress=progress,
            backends=backends,
            command=command,
            machine=machine,
            state_dir=out,
        )
        trace, by_plan = profiled.trace, profiled.samples_by_plan
    trace.save(out / "trace.json")
    auto = plan_from_trace(job, config, trace, num_devices, seed=job.settings.seed, machine=machine)
    chosen = choose_plans(auto.candidates, num_plans, num_devices)
    # Predictions come from the profile, taken before any plan's measurement window, without the samples of
    # the plan itself or of a plan with the same compute ops (an offload variant): out of sample, as in real use.
    predicted, sources, programs = [], [], []
    for c in chosen:
        plan_trace, feeding = out_of_sample(trace, by_plan, c.plan, even_speeds=True)
        sources.append(feeding if by_plan else [f"--trace {trace_path}"])
        cluster = machine.cluster(c.num_devices)
        programs.append(lower(job.workflow(config), c.plan, cluster))
        try:
            if by_plan and not feeding:
                raise RlinfError("no probe with other compute ops is left to predict it from")
            predicted.append(simulated(programs[-1], plan_trace, cluster))
        except RlinfError as error:
            raise too_few_probes(error, c.plan, by_plan, trace_path, profile_budget_s) from None
    generations = min(MEASURE_TURNS, iterations)
    try:
        measured = measure_plans(
            job,
            config,
            [(c.plan, c.num_devices) for c in chosen],
            iterations=iterations,
            warmup_iterations=warmup,
            generations=generations,
            backends=backends,
            progress=progress,
            machine=machine,
        )
    except StallError as error:
        from rlinf.app.run_dir import keep_stall

        raise StallError(attrs.evolve(error.report, where=str(keep_stall(out, error)))) from None
    # The same simulation with each plan's own measured op durations: what the ops explain of its error, the rest
    # is time between ops (benchmarks/bias_breakdown.py does this for a training run).
    replayed = [
        simulated(program, attrs.evolve(trace, samples=m.samples), machine.cluster(c.num_devices)).iteration_s
        for c, m, program in zip(chosen, measured, programs, strict=True)
    ]
    probes = [(plan, num_devices) for plan, _ in by_plan]
    turn_sizes = tuple(split_iterations(iterations, generations))
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
    rows, chosen, measured, predicted, sources, replayed = (
        [rows[i] for i in order],
        [chosen[i] for i in order],
        [measured[i] for i in order],
        [predicted[i] for i in order],
        [sources[i] for i in order],
        [replayed[i] for i in order],
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
        "iterations": iterations,
        "warmup_iterations": warmup,
        "trace": str(out / "trace.json"),
        "prediction": "out of sample: each plan from profile samples taken before the measurements, excluding "
        "the plan's own and those of plans with the same compute ops, the other probes' speeds evened out"
        if by_plan
        else f"from every sample of --trace {trace_path} (it does not record which plans measured them)",
        "predicted_from": {row.name: feeding for row, feeding in zip(rows, sources, strict=True)},
        "breakdown": {
            row.name: {
                "replayed_s": again,
                "ops_explain": again / row.predicted_s - 1,
                "between_ops": row.measured_s / again - 1,
            }
            for row, again in zip(rows, replayed, strict=True)
        },
        "breakdown_note": "replayed_s: the plan simulated with its own measured op durations; ops_explain = "
        "replayed / predicted - 1 (the ops ran slower or faster than in the profile), between_ops = measured / "
        "replayed - 1 (time the simulator does not model)",
        "measurement": f"one plan at a time, in {generations} turns per plan, each with fresh worker processes: "
        f"{warmup} warm-up iteration(s), then its share of the measured ones back to back; the turns of all "
        "plans interleaved, in orders that alternate direction",
        "timeline_pair_png": str(png),
        "timeline_pair_plan": rows[best].name,
    }
    write_text_atomic(out / "validate.json", json.dumps(result, indent=1, default=json_number) + "\n")
    return Validation(rows=tuple(rows), on_cores=on_cores, every=every, result=result)


def too_few_probes(
    error: Exception,
    plan: Plan,
    by_plan: Sequence[tuple[Plan, Sequence[Any]]],
    trace_path: str | None,
    budget_s: float,
) -> ConfigError:
    """The error of a plan that cannot be predicted out of sample: which probes the profile measured, and what to
    change (two probe plans with different compute ops must be measured)."""
    measured = (
        ", ".join(f"{probe.describe()} ({len(samples)} samples)" for probe, samples in by_plan) or "none"
    )
    value: str | float
    if trace_path:
        field, value, where = "--trace", trace_path, f"--trace {trace_path}"
        fix = "profile again (drop --trace) with a larger --profile-budget or a lower --profile-iterations"
    else:
        field, value, where = "--profile-budget", budget_s, "the profile"
        fix = "raise --profile-budget or lower --profile-iterations"
    return ConfigError(
        field,
        value,
        f"{plan.describe()} cannot be predicted out of sample ({error}): {where} measured only the probe plan "
        f"{measured}, and a plan is predicted without the samples of the probes with its own compute ops",
        f"{fix}, so that two probe plans with different compute ops are measured",
    )


def simulated(program: Any, trace: Any, cluster: Any) -> Any:
    """The simulation of ``program`` with the cost model fitted to ``trace``'s samples as predictions fit it
    (:data:`rlinf.app.profiling.COST_STATISTIC`, no noise): from a profile, the prediction; from a run's own
    samples, the time its ops' actual durations explain."""
    from rlinf.app.profiling import COST_STATISTIC
    from rlinf.core.costs import fit
    from simulator import simulate

    return simulate(program, fit(trace, cluster, statistic=COST_STATISTIC))


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


def choose_plans(candidates: tuple, count: int, num_devices: int) -> list:
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


def json_number(value: Any) -> Any:
    """JSON for what ``json`` cannot write: ``NaN`` as null, anything else as its string."""
    return None if isinstance(value, float) and math.isnan(value) else str(value)
