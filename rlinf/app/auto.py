"""Auto-planning (``--mode auto``): choose the plan a job trains under from a profiled trace.

The planner's ranked candidates (:func:`planner.search`), the job's fixed-mode plans and its probe plans (each also at
every granularity the planner considers) are simulated from the same trace and the fastest plan the job can run
wins (:func:`plan_from_trace`), except a plan with the compute ops of a probe that profiling stopped without a
measurement (it overran its share of the budget, or stalled): nothing measured says it runs at all.
"""

from __future__ import annotations

import time
from typing import Any

import attrs

from rlinf.app.jobs import C, Job
from rlinf.core.cluster import CPU_MACHINE, Machine
from rlinf.core.lowering import lower
from rlinf.core.plan import Plan
from rlinf.core.timeline import Timeline
from rlinf.core.trace import Trace


@attrs.frozen(kw_only=True)
class Candidate:
    """A plan the auto mode considered, with its simulated iteration time."""

    plan: Plan
    num_devices: int
    """Logical devices of the plan (more than the cluster's for a fixed disaggregated plan on few cores)."""
    predicted_s: float
    source: str
    """Who proposed it: the planner (``cp-sat#2``, ``collocated``, ...), the job's ``fixed <mode>`` plan or one
    of its ``probe`` plans."""


@attrs.frozen(kw_only=True)
class AutoPlan:
    """The plan ``--mode auto`` runs, why, and what the simulator predicts for it."""

    chosen: Candidate
    candidates: tuple[Candidate, ...]
    """Every runnable plan considered, fastest (by simulation) first, those that need more logical devices than
    the cluster has after the others; ``candidates[0] is chosen``."""
    predicted: Timeline
    """Simulated timeline of the chosen plan."""
    search_s: float


def plan_from_trace(
    job: Job[C],
    config: C,
    trace: Trace,
    num_devices: int,
    *,
    seed: int = 0,
    k: int = 16,
    time_limit_s: float = 10.0,
    machine: Machine = CPU_MACHINE,
    max_staleness: int = 0,
) -> AutoPlan:
    """Choose a plan from a profiled trace: the planner's ranked candidates (:func:`planner.search`) plus the
    job's fixed-mode plans and probe plans (both also at each granularity the planner considers), each simulated from
    the same trace (a profile's probes evened out to the typical probe's speed, :func:`rlinf.app.profiling.evened`);
    keep those the job can run (``check_plan``) and take the fastest. Extrapolation warnings are shown for the chosen plan only. Raises :class:`ConfigError` when the trace was
    profiled for another workflow or no candidate can run.

    ``max_staleness`` (the user's bound K) lets asynchronous plans compete: the planner searches staleness
    0..min(K, 2) and the fixed-mode and probe plans are tried at each of those bounds too (beyond 2 the simulated
    steady state gains nothing: the rollout side is decoupled at 1 and generates continuously from 2). On a tie the
    smaller bound wins."""
    import warnings

    import planner
    from planner.modes import staleness_modes
    from rlinf.app.profiling import COST_STATISTIC, evened, left_out_plans, same_compute, samples_by_plan
    from rlinf.core.costs import fit
    from rlinf.core.errors import ConfigError, ExtrapolationWarning
    from simulator import simulate

    started = time.perf_counter()
    workflow = job.workflow(config)
    if not trace.workflow.same_flow(workflow):
        raise ConfigError(
            "trace",
            trace.provenance.get("source", trace.provenance.get("command", trace.workflow.name)),
            "was profiled for another workflow than this config's (environments, steps, policy size)",
            "profile this config (drop --trace) or pass the config the trace was made with",
        )
    cluster = machine.cluster(num_devices)
    measured = [plan for plan, _ in samples_by_plan(trace)]
    unmeasured = [p for p in left_out_plans(trace) if not any(same_compute(p, m) for m in measured)]
    trace = evened(trace)  # each probe's samples at the typical probe's speed (the machine drifts meanwhile)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        result = planner.search(
            workflow,
            cluster,
            fit(trace, cluster, statistic=COST_STATISTIC),
            k=k,
            time_limit_s=time_limit_s,
            seed=seed,
            max_staleness=max_staleness,
        )
    planned = [(e.plan, num_devices, e.source) for e in result.ranking if e.fits]
    proposals: list[tuple[Plan, int, str]] = []
    granularities = _granularities(workflow, num_devices)
    for mode in ("collocated", "hybrid", "disaggregated"):  # the order a tie between equal plans keeps
        try:
            plan, logical = job.fixed_plan(mode, num_devices, config)
        except ConfigError:
            continue
        proposals.append((plan, logical, f"fixed {mode}"))
        # The fixed placement at every granularity the planner considers (e.g. env and rollout apart with the
        # actor on all devices, which the planner's contiguous groups cannot express, with a pipelined loop).
        for granularity in granularities:
            variant = attrs.evolve(plan, granularity=dict(granularity))
            proposals.append((variant, logical, f"{mode} placement"))
    probes = job.probes(num_devices, config, machine=machine)
    proposals += [(plan, logical, "probe") for plan, logical in probes]
    # The probes' placements at every granularity too: probes place components in ways the planner's groups
    # cannot (the loop spread over every device with the actor on one), at only some granularities.
    for plan, logical in probes:
        for granularity in granularities:
            proposals.append((attrs.evolve(plan, granularity=dict(granularity)), logical, "probe placement"))
    asynchronous = [mode for mode in staleness_modes(workflow, max_staleness) if mode[0]]
    proposals = (
        planned
        + proposals
        + [  # the job's own plans at each staleness mode the planner searched too
            (attrs.evolve(plan, max_staleness=k, buffer_before=cut), logical, source)
            for plan, logical, source in proposals
            for k, cut in asynchronous
        ]
    )
    costs_by_devices = {}
    seen: set[Plan] = set()
    candidates = []
    for plan, logical, source in proposals:
        if plan in seen or any(same_compute(plan, p) for p in unmeasured):
            continue
        seen.add(plan)
        try:
            job.check_plan(plan, config, machine=machine)
        except ConfigError:
            continue
        if logical not in costs_by_devices:
            costs_by_devices[logical] = fit(trace, machine.cluster(logical), statistic=COST_STATISTIC)
        program = lower(workflow, plan, machine.cluster(logical))
        timeline = simulate(program, costs_by_devices[logical])
        candidates.append(
            Candidate(plan=plan, num_devices=logical, predicted_s=timeline.iteration_s, source=source)
        )
    if not candidates:
        raise ConfigError(
            "plan", "auto", "no plan the planner proposed can run this config", "use --mode or --plan"
        )
    # Plans with more logical devices than the cluster has share cores, which the simulator does not model: they
    # are ranked after every plan that fits (and chosen only when nothing else can run).
    candidates.sort(
        key=lambda c: (c.num_devices > num_devices, c.predicted_s, c.plan.max_staleness, c.plan.describe())
    )
    chosen = candidates[0]
    program = lower(workflow, chosen.plan, machine.cluster(chosen.num_devices))
    predicted = simulate(program, costs_by_devices[chosen.num_devices])  # shows its extrapolation warnings
    return AutoPlan(
        chosen=chosen,
        candidates=tuple(candidates),
        predicted=predicted,
        search_s=time.perf_counter() - started,
    )


MAX_GRANULARITY_VARIANTS = 32


def _granularities(workflow: Any, num_devices: int) -> list[tuple[tuple[str, int], ...]]:
    """The planner's granularity choices; when there are more than :data:`MAX_GRANULARITY_VARIANTS`, only those
    that give every key the same value."""
    from planner.space import build_space

    space = build_space(workflow, num_devices)
    choices = list(space.granularity_choices())
    if len(choices) > MAX_GRANULARITY_VARIANTS:
        choices = [c for c in choices if len({value for _, value in c}) == 1]
    return choices
