"""Profiling: measure a job's iterations under a few probe plans with real workers, and turn them into a trace.

What the simulator must predict is what the executor really costs, so a profiled sample is an op's
*dispatch-inclusive* duration: from the moment the op became ready (its dependencies and the ops before it on its
devices had ended) to its end. That includes the driver round trip that dispatches the op and any wait for a core
shared with another process; replayed by the simulator, the samples of one iteration reproduce that iteration's
measured timeline exactly (:func:`dispatch_inclusive_samples`). Transfers are samples too, so the cost model
measures their latency and bandwidth.

The profiling phase (:func:`profile`) is bounded by a budget in seconds: it runs the job's probe plans one after
the other (worker start-up, warm-up iterations, measured iterations), each under a deadline, its share of the
budget (half of what is left until two probes with different compute ops are measured; the first probe to measure
anything runs to its first measured iteration whatever its share: a trace needs samples), and starts no plan or
iteration it does not expect to finish within its share; a probe stopped at its deadline (or by the watchdog)
without a measured iteration is left out and never chosen by auto-planning. :func:`measure_plans` measures several plans one at a time, in turns
with fresh workers that interleave the plans, so that load from other processes on a shared machine affects all
plans alike. :func:`merge_traces` feeds the samples of earlier runs into the next plan. A workload that reports
its responses' lengths (:meth:`rlinf.api.Workload.response_lengths`) has those of every measured iteration recorded
as the trace's response-length distribution.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import attrs

import executor
from executor.devices import physical_units, processor_name, run_devices
from rlinf.app.jobs import C, Job
from rlinf.core.cluster import CPU_MACHINE, Machine
from rlinf.core.errors import ConfigError, require
from rlinf.core.phases import mark as mark_phase
from rlinf.core.plan import Plan, plan_from_dict
from rlinf.core.program import Program
from rlinf.core.timeline import Timeline
from rlinf.core.trace import MOVEMENT_OPS, CostSample, Trace

DEFAULT_BUDGET_S = 120.0
COST_STATISTIC = "mean"
"""How :func:`rlinf.core.costs.fit` summarises repeated profiled samples of one op. On a machine shared with other
processes, preemption makes op times right-skewed; an iteration is a sum of many ops, so it adds up their means
(the median of each op underestimates it: two validate runs recomputed here gave median errors of 4.1% and 6.7%
with medians, 2.7% and 2.9% with means; docs/plan_then_run.md)."""
VERSIONED_PACKAGES = ("torch", "numpy", "mujoco", "gymnasium")


@attrs.frozen(kw_only=True)
class ProfileSettings:
    """How much the profiling phase may measure."""

    budget_s: float = DEFAULT_BUDGET_S
    """Wall seconds for the whole phase, worker start-up included."""
    iterations_per_plan: int = 6
    """Measured iterations per probe plan (after the warm-up ones)."""
    warmup_iterations: int = 2
    """Iterations run first under each plan and not recorded (first resets, lazy initialisation)."""

    def __attrs_post_init__(self) -> None:
        require(self.budget_s > 0, "--profile-budget", self.budget_s, "must be > 0", "give seconds, e.g. 90")
        require(
            self.iterations_per_plan >= 1,
            "--profile-iterations",
            self.iterations_per_plan,
            "must be >= 1",
            "measure at least one iteration per probe plan",
        )
        require(
            self.warmup_iterations >= 0,
            "warmup_iterations",
            self.warmup_iterations,
            "must be >= 0",
            "use 0-2",
        )


@attrs.frozen(kw_only=True)
class ProfileResult:
    """The profiled trace and what the phase did."""

    trace: Trace
    plans: tuple[str, ...]
    """Probe plans that contributed measured iterations, as ``Plan.describe()``."""
    iterations: int
    """Measured iterations over all probe plans."""
    elapsed_s: float
    longest_step_s: float
    """The longest single step (a plan's first iteration, worker start-up included, or one iteration)."""
    samples_by_plan: tuple[tuple[Plan, tuple[CostSample, ...]], ...] = ()
    """The trace's samples, per probe plan that measured them (validation predicts a plan from the others')."""
    left_out: tuple[LeftOutProbe, ...] = ()
    """Probe plans stopped without a measured iteration (their share ran out, or they stalled)."""


@attrs.frozen(kw_only=True)
class MeasuredPlan:
    """Measured iterations of one plan (warm-up excluded)."""

    plan: Plan
    num_devices: int
    """Logical devices of the plan."""
    iteration_s: tuple[float, ...]
    last: Timeline
    """The last measured iteration."""
    samples: tuple[CostSample, ...]
    """Dispatch-inclusive samples of every measured iteration."""
    response_lengths: tuple[tuple[int, ...], ...] = ()
    """Generated tokens of every response, per measured iteration (:meth:`rlinf.app.jobs.Job.response_lengths`;
    empty tuples for a workload that does not report them)."""


def dispatch_inclusive_samples(timeline: Timeline) -> tuple[CostSample, ...]:
    """One sample per op of a measured timeline: seconds from the op becoming ready to its end.

    An op is ready when its dependencies have ended and so has the op before it on each of its lanes (the
    executor's and the simulator's rule); the earliest op of the iteration is ready at time 0."""
    program = timeline.program
    previous: dict[int, list[int]] = {}
    for lane in program.lanes:
        for before, after in zip(lane.ops, lane.ops[1:], strict=False):
            previous.setdefault(after, []).append(before)
    out = []
    for op in program.ops:
        waits = [timeline.end_s[d] for d in op.deps] + [timeline.end_s[p] for p in previous.get(op.index, [])]
        ready = min(max(waits, default=0.0), timeline.start_s[op.index])
        out.append(CostSample.of_op(op, timeline.end_s[op.index] - ready, op.num_bytes))
    return tuple(out)


def provenance(command: str, **extra: Any) -> dict[str, Any]:
    """Where and when a profile was measured: machine, processor, Python and package versions, date, command."""
    versions = {}
    for name in VERSIONED_PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return {
        "kind": "profiled",
        "machine": platform.node(),
        "processor": processor_name(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": versions,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        **extra,
    }


ARCHITECTURES = frozenset({"x86_64", "AMD64", "aarch64", "arm64", "i386", "i686", "ppc64le", "s390x"})
"""What profiles written before rlinf recorded the processor model hold in ``processor``: no model to compare."""


def other_processor(trace: Trace) -> str | None:
    """A one-line warning when ``trace`` is a profile taken on another processor model than this machine's (its
    op costs then need not predict this machine's); ``None`` when the models match or the trace names none (a
    synthesized or imported trace, or a profile that records only the architecture)."""
    recorded = trace.provenance.get("processor")
    if (
        trace.provenance.get("kind") != "profiled"
        or not isinstance(recorded, str)
        or recorded in ARCHITECTURES
    ):
        return None
    here = processor_name()
    if recorded == here:
        return None
    return (
        f"the trace was profiled on {recorded!r}, this machine is {here!r}: its op costs may not predict this "
        "machine (profile here for predictions that hold: leave out --trace)"
    )


def merge_traces(base: Trace, *others: Trace) -> Trace:
    """``base`` with the samples and response lengths of ``others`` (e.g. the traces of earlier runs) appended.

    The traces must describe the same workflow on the same device type; the merged provenance lists what was
    merged in."""
    merged = list(base.samples)
    lengths = list(base.response_lengths)
    sources = []
    for other in others:
        require(
            other.workflow.same_flow(base.workflow),
            "trace",
            other.provenance.get("source", other.provenance.get("command", "?")),
            f"describes another workflow than {base.workflow.name} as configured",
            "merge traces of the same config (same envs, steps and policy size)",
        )
        require(
            other.cluster.device.name == base.cluster.device.name,
            "trace",
            other.cluster.device.name,
            f"was measured on other devices than {base.cluster.device.name}",
            "merge traces from the same kind of device",
        )
        merged.extend(other.samples)
        lengths.extend(other.response_lengths)
        sources.append(
            {
                "source": other.provenance.get("source", other.provenance.get("command", "")),
                "samples": len(other.samples),
            }
        )
    info = dict(base.provenance)
    if sources:
        info["merged"] = [*info.get("merged", []), *sources]
    return attrs.evolve(base, samples=tuple(merged), response_lengths=tuple(lengths), provenance=info)


def _devices(
    num_logical: int, num_cores: int | None, accelerator: str = "cpu", core_pool: int = 0
) -> tuple[executor.Device, ...]:
    units = physical_units(accelerator)
    return run_devices(accelerator, num_logical, units[: num_cores or len(units)], core_pool)


BackendFactory = Callable[[int], Any]
"""Opens a backend (a context manager) for a plan on the given number of logical devices."""


def local_backends(
    num_cores: int | None = None,
    accelerator: str = "cpu",
    core_pool: int = 0,
    *,
    watchdog: executor.Watchdog | None = None,
) -> BackendFactory:
    """Local backends over this process's first ``num_cores`` cores, or GPUs with ``accelerator="cuda"`` (all
    by default), and ``core_pool`` CPU cores beside the GPUs, under ``watchdog`` (the default one if ``None``)."""
    return lambda logical: executor.LocalBackend(
        _devices(logical, num_cores, accelerator, core_pool), watchdog=watchdog
    )


def _program(
    job: Job[C], config: C, plan: Plan, num_devices: int, machine: Machine = CPU_MACHINE
) -> tuple[Program, Any]:
    """The checked program of ``plan`` and its workers' specs."""
    program = job.lower(plan, config, num_devices, machine=machine)
    return program, job.worker_specs(config, plan, program)


def same_compute(a: Plan, b: Plan) -> bool:
    """Whether two plans run the same compute ops (the same placement and granularity; offload aside)."""
    return a.placements == b.placements and a.granularity == b.granularity


def probe_share_s(left_s: float, probes_left: int, distinct_measured: int) -> float:
    """The most the next probe plan may take of the ``left_s`` seconds left of the budget: half of them while fewer
    than :data:`MIN_DISTINCT_PROBES` probes with different compute ops have been measured (``distinct_measured``)
    and another probe remains, so that a probe which overruns leaves as much to the next; all of them after."""
    if distinct_measured < MIN_DISTINCT_PROBES and probes_left > 1:
        return left_s / 2
    return left_s


MIN_DISTINCT_PROBES = 2
"""Probe plans with different compute ops that the budget's shares make room for: an out-of-sample prediction
(``rlinf validate``) of a plan needs a probe with other compute ops than its own."""


@attrs.frozen(kw_only=True)
class LeftOutProbe:
    """A probe plan that was started and stopped without a measured iteration."""

    plan: Plan
    num_devices: int
    seconds: float
    """How long it ran before it was stopped."""
    reason: str
    """``did not finish in N s`` (its share ran out) or the watchdog's line (it stalled)."""

    def line(self) -> str:
        """What the user reads."""
        return f"probe {self.plan.describe()} {self.reason}: left out"

    def to_dict(self) -> dict[str, Any]:
        """The trace provenance's entry (:func:`left_out_plans` reads it back)."""
        return {"plan": self.plan.to_dict(), "devices": self.num_devices, "seconds": round(self.seconds, 3),
                "reason": self.reason}  # fmt: skip


def profile(
    job: Job[C],
    config: C,
    num_devices: int,
    *,
    settings: ProfileSettings = ProfileSettings(),
    num_cores: int | None = None,
    backends: BackendFactory | None = None,
    progress: bool = True,
    command: str = "rlinf.app.profiling.profile",
    clock: Callable[[], float] = time.monotonic,
    machine: Machine = CPU_MACHINE,
    state_dir: Path | None = None,
) -> ProfileResult:
    """Measure the job's probe plans on ``num_devices`` devices within ``settings.budget_s`` seconds; the trace
    holds every measured iteration's ops as samples and, when the workload reports them, its response lengths.

    Each probe plan gets a share of what is left of the budget (:func:`probe_share_s`: half of it until two probes
    with different compute ops are measured, so that a probe that overruns leaves the next as much) and, once some
    probe has measured an iteration, runs under that deadline, its workers' start-up included: a probe that has not
    measured an iteration when its share runs out, or that stalls (the executor's watchdog), is stopped and left
    out (reported, and recorded in the trace's provenance so that auto-planning never chooses its plan, which
    nothing measured). A plan is started only when the estimated cost of its start-up, warm-up and one measured
    iteration (from the plans measured so far) fits in its share, and another iteration only when the last one's
    duration does. The first probe to measure anything (a trace needs samples) runs to its first measured iteration
    whatever its share, stopped only by the watchdog, and no further than its share after it. So the phase ends
    within its budget, or the first measured iteration, plus the time to stop one probe's workers. ``state_dir``:
    where a stalled probe's state is kept (``stall_probe<N>.json``)."""
    from tqdm import tqdm

    entries = job.probes(num_devices, config, machine=machine)
    require(bool(entries), "probe_plans", [], "the job proposes no probe plan", "check the config")
    started = clock()
    samples: list[CostSample] = []
    lengths: list[int] = []
    by_plan: list[tuple[Plan, tuple[CostSample, ...]]] = []
    recorded: list[dict[str, Any]] = []  # the provenance's probe_plan_samples (see samples_by_plan)
    used: list[str] = []
    left_out: list[LeftOutProbe] = []
    iterations = 0
    first_s, iteration_s, longest_s = 0.0, 0.0, 0.0
    settings_total = round(settings.budget_s)
    watchdog = executor.Watchdog(floor_s=job.settings.watchdog_s)
    bar = tqdm(total=settings_total, desc="profile", unit="s", disable=not progress)
    for position, (plan, logical) in enumerate(entries):
        program, specs = _program(job, config, plan, logical, machine)
        probe_started = clock()
        distinct = sum(
            not any(same_compute(p, q) for q, _ in by_plan[:i]) for i, (p, _) in enumerate(by_plan)
        )
        share_s = probe_share_s(
            settings.budget_s - (probe_started - started), len(entries) - position, distinct
        )
        # The first iteration of a plan includes starting its workers.
        # Expected: the last probe's first iteration (its workers' start-up included) and the slowest iteration
        # seen since, for the warm-up and one measured iteration. Plans of one workload differ in iteration time
        # by small factors (a time per op, scaled by the op count, took a loop cut into 4 stages for 4 times as
        # slow and skipped it); a probe that is slower is stopped at its share and left out.
        expected = first_s + (settings.warmup_iterations + 1) * iteration_s
        if used and (share_s <= 0 or expected > share_s):
            continue
        # Until a probe has measured an iteration (a trace needs samples) the probe runs to its first measured
        # iteration whatever its share, stopped only by the watchdog; after that every probe stops at its share.
        deadline = time.monotonic() + share_s if used else None  # the executor's clock
        bar.set_description(f"profile {plan.describe()}")
        mark_phase("probe_started", probe=plan.describe())
        count, first_sample, times = 0, len(samples), []
        try:
            with (backends or local_backends(num_cores, watchdog=watchdog))(logical) as backend:
                for index in range(settings.warmup_iterations + settings.iterations_per_plan):
                    tick = clock()
                    result = executor.run(program, specs, backend=backend, deadline=deadline)
                    took = clock() - tick
                    longest_s = max(longest_s, took)
                    if index == 0:
                        first_s = took
                    else:
                        iteration_s = max(iteration_s, took)
                    mark_phase("probe_iteration_done", iteration=index + 1)
                    if index >= settings.warmup_iterations:
                        samples.extend(dispatch_inclusive_samples(result.timeline))
                        lengths.extend(job.response_lengths(result, config))
                        times.append(result.timeline.iteration_s)
                        count += 1
                    bar.update(max(0, min(round(clock() - started), settings_total) - bar.n))
                    # Stop when the next iteration would not fit in the probe's share.
                    if count and share_s - (clock() - probe_started) < took:
                        break
        except (executor.OutOfTime, executor.StallError) as error:
            ran_s = clock() - probe_started
            if isinstance(error, executor.StallError) and state_dir is not None:
                from rlinf.app.run_dir import keep_stall

                kept = keep_stall(state_dir, error, f"stall_probe{position}.json")
                error = executor.StallError(attrs.evolve(error.report, where=str(kept)))
            if not count:
                reason = (
                    f"did not finish in {ran_s:.0f} s"
                    if isinstance(error, executor.OutOfTime)
                    else f"stalled ({error})"
                )
                left_out.append(LeftOutProbe(plan=plan, num_devices=logical, seconds=ran_s, reason=reason))
                tqdm.write(f"profile: {left_out[-1].line()}", file=sys.stderr)
        if count:
            used.append(plan.describe())
            by_plan.append((plan, tuple(samples[first_sample:])))
            recorded.append(
                {
                    "plan": plan.to_dict(),
                    "devices": logical,
                    "samples": len(samples) - first_sample,
                    "iteration_s": times,
                }
            )
            iterations += count
    bar.close()
    mark_phase("profiling_done", iterations=iterations)
    if iterations == 0:
        stopped = "; ".join(probe.line() for probe in left_out) or "no probe plan fitted in it"
        raise ConfigError(
            "--profile-budget",
            settings.budget_s,
            f"no probe plan measured an iteration within its share ({stopped})",
            "raise --profile-budget: it must hold two probe plans' start-up, warm-up and one iteration",
        )
    workflow = job.workflow(config)
    elapsed_s = clock() - started
    trace = Trace(
        workflow=workflow,
        cluster=machine.cluster(num_devices),
        provenance=provenance(
            command,
            source=f"profiling ({job.name}, {len(used)} probe plans, {iterations} iterations)",
            probe_plans=used,
            probe_plan_samples=recorded,
            probe_plans_left_out=[probe.to_dict() for probe in left_out],
            elapsed_s=round(elapsed_s, 3),
            budget_s=settings.budget_s,
            sample_kind="dispatch-inclusive (op ready -> op end)",
        ),
        samples=tuple(samples),
        response_lengths=tuple(float(n) for n in lengths),
    )
    return ProfileResult(
        trace=trace,
        plans=tuple(used),
        iterations=iterations,
        elapsed_s=elapsed_s,
        longest_step_s=longest_s,
        samples_by_plan=tuple(by_plan),
        left_out=tuple(left_out),
    )


RECORD_KEYS = frozenset({"plan", "devices", "samples", "iteration_s"})
"""The keys of one entry of a profile's ``probe_plan_samples`` (``iteration_s`` is optional)."""


@attrs.frozen(kw_only=True)
class ProbeRecord:
    """One probe plan of a profile, as its provenance records it (:func:`probe_records`)."""

    plan: Plan
    num_devices: int
    """Logical devices the probe ran on."""
    samples: tuple[CostSample, ...]
    """Its measured iterations' samples, one iteration after the other."""
    iteration_s: tuple[float, ...]
    """Its measured iterations' times (empty for a profile written before rlinf recorded them)."""


def samples_by_plan(trace: Trace, field: str = "trace") -> tuple[tuple[Plan, tuple[CostSample, ...]], ...]:
    """The samples of a profiled trace per probe plan that measured them, in order, from its provenance's
    ``probe_plan_samples`` (written by :func:`profile`: the probes' samples come first, samples merged in later
    follow); empty for a trace that does not record them (an imported or synthesized one, or an older profile)."""
    return tuple((record.plan, record.samples) for record in probe_records(trace, field))


def probe_records(trace: Trace, field: str = "trace") -> tuple[ProbeRecord, ...]:
    """:func:`samples_by_plan` with each probe's logical devices and measured iteration times."""
    entries = trace.provenance.get("probe_plan_samples")
    if entries is None:
        return ()
    where = f"{field}.provenance.probe_plan_samples"
    fix = "profile again, or delete probe_plan_samples from the trace's provenance"
    require(isinstance(entries, list), where, entries, "must be a list", fix)
    out, start = [], 0
    for i, entry in enumerate(entries):
        require(
            isinstance(entry, dict) and {"plan", "devices", "samples"} <= set(entry) <= RECORD_KEYS,
            f"{where}[{i}]", entry, "must be an object with plan, devices, samples and optionally iteration_s",
            fix,
        )  # fmt: skip
        devices, count = entry["devices"], entry["samples"]
        for key, value in (("devices", devices), ("samples", count)):
            require(
                type(value) is int and value >= 1,
                f"{where}[{i}].{key}",
                value,
                "must be an integer >= 1",
                fix,
            )
        times = entry.get("iteration_s", [])
        require(
            isinstance(times, list)
            and all(type(t) in (int, float) and math.isfinite(t) and t > 0 for t in times),
            f"{where}[{i}].iteration_s", times, "must be a list of positive seconds", fix,
        )  # fmt: skip
        out.append(
            ProbeRecord(
                plan=plan_from_dict(entry["plan"], devices, source=f"{where}[{i}].plan"),
                num_devices=devices,
                samples=tuple(trace.samples[start : start + count]),
                iteration_s=tuple(float(t) for t in times),
            )
        )
        start += count
    require(
        start <= len(trace.samples),
        where,
        f"{start} samples",
        f"the probe plans' samples add up to {start}, but the trace holds only {len(trace.samples)}",
        fix,
    )
    return tuple(out)


def left_out_plans(trace: Trace, field: str = "trace") -> tuple[Plan, ...]:
    """The probe plans a profile stopped without a measurement (its provenance's ``probe_plans_left_out``, written
    by :func:`profile`); empty for a trace that records none."""
    entries = trace.provenance.get("probe_plans_left_out", [])
    where = f"{field}.provenance.probe_plans_left_out"
    fix = "profile again, or delete probe_plans_left_out from the trace's provenance"
    require(isinstance(entries, list), where, entries, "must be a list", fix)
    plans = []
    for i, entry in enumerate(entries):
        require(
            isinstance(entry, dict) and {"plan", "devices"} <= set(entry) and type(entry["devices"]) is int
            and entry["devices"] >= 1,
            f"{where}[{i}]", entry, "must be an object with a plan and its devices (an integer >= 1)", fix,
        )  # fmt: skip
        plans.append(plan_from_dict(entry["plan"], entry["devices"], source=f"{where}[{i}].plan"))
    return tuple(plans)


SPEED_REFERENCE_MIN_PROBES = 3
"""Probes that must have measured the reference op (:func:`probe_speed_factors`) before probe speeds are evened."""


def probe_speed_factors(groups: Sequence[tuple[Plan, Sequence[CostSample]]]) -> tuple[float, ...]:
    """How fast the machine ran each probe plan of a profile, relative to the typical probe (1.0 = typical, 1.1 =
    10% slower): the mean of the probe's samples of a *reference op* over the median of that mean across the probes
    that measured it; 1.0 for a probe that did not, and for every probe when fewer than
    :data:`SPEED_REFERENCE_MIN_PROBES` did.

    The reference op is the compute op at one size (component, op, devices, samples, shared flag) that the most
    probes measured, the longest on a tie: on an on-policy workload, the actor's training step on the whole batch,
    which nearly every probe runs alike. Probes run one after the other for a minute or two, and a shared machine's
    speed drifts meanwhile (in one Hopper profile every op of one probe measured 13-20% slower than the same ops in
    the probes around it); a plan whose loop-step size only that probe also measured was then predicted 12.6% slow
    (docs/data/validate_hopper.json, run quiet_run3)."""
    timed: list[dict[tuple, list[float]]] = []  # per probe: its compute samples' seconds by op and size
    for _, samples in groups:
        by_key: dict[tuple, list[float]] = {}
        for sample in samples:
            if sample.op not in MOVEMENT_OPS:
                by_key.setdefault(_compute_key(sample), []).append(sample.seconds)
        timed.append(by_key)
    probes_with: dict[tuple, int] = {}
    seconds_of: dict[tuple, float] = {}
    for by_key in timed:
        for key, times in by_key.items():
            probes_with[key] = probes_with.get(key, 0) + 1
            seconds_of[key] = seconds_of.get(key, 0.0) + sum(times)
    if not probes_with or max(probes_with.values()) < SPEED_REFERENCE_MIN_PROBES:
        return (1.0,) * len(groups)
    reference = max(probes_with, key=lambda k: (probes_with[k], seconds_of[k]))
    means = [statistics.fmean(by_key[reference]) if reference in by_key else None for by_key in timed]
    typical = statistics.median(m for m in means if m is not None)
    return tuple(m / typical if m is not None and typical > 0 else 1.0 for m in means)


def even_probe_speeds(groups: Sequence[tuple[Plan, Sequence[CostSample]]]) -> tuple[CostSample, ...]:
    """The probes' samples, in order, each compute sample divided by its probe's :func:`probe_speed_factors`: the
    profile as if every probe had run at the typical probe's speed. Movement samples (transfers, switches, weight
    syncs) are kept as measured."""
    factors = probe_speed_factors(groups)
    return tuple(
        sample
        if sample.op in MOVEMENT_OPS or factor == 1.0
        else attrs.evolve(sample, seconds=sample.seconds / factor)
        for factor, (_, samples) in zip(factors, groups, strict=True)
        for sample in samples
    )


def evened(trace: Trace) -> Trace:
    """``trace`` with its probes' speeds evened out (:func:`even_probe_speeds`) when it records which probe plan
    measured which samples (:func:`samples_by_plan`; samples merged in after them are kept as they are); else
    ``trace`` itself. What the auto mode and ``rlinf validate`` fit the cost model to."""
    by_plan = samples_by_plan(trace)
    if not by_plan:
        return trace
    rest = trace.samples[sum(len(samples) for _, samples in by_plan) :]
    return attrs.evolve(trace, samples=even_probe_speeds(by_plan) + tuple(rest))


def _compute_key(sample: CostSample) -> tuple[str, str, int, int, bool]:
    return (sample.component, sample.op, sample.devices, sample.samples, sample.shared)


def generation_orders(num_plans: int, generations: int) -> list[tuple[int, ...]]:
    """The order in which each generation of worker processes starts the plans: as given, reversed, as given, ...

    On this project's machine the workers started first measured 1-2.5% slower for their whole life than the
    same plan's workers started later (an A/A test: one plan entered twice; ``benchmarks/bench_order_bias.py``),
    a difference that followed the start order, not the plan, through every iteration order we tried. Reversing
    the start order in the next generation gives every plan the same mean start position."""
    require(generations >= 1, "generations", generations, "must be >= 1", "use at least one generation")
    forward = tuple(range(num_plans))
    return [forward if generation % 2 == 0 else forward[::-1] for generation in range(generations)]


def split_iterations(iterations: int, generations: int) -> list[int]:
    """Measured iterations per generation: as even as possible, the earlier generations taking the remainder."""
    return [
        iterations // generations + (1 if g < iterations % generations else 0) for g in range(generations)
    ]


def measure_plans(
    job: Job[C],
    config: C,
    entries: Sequence[tuple[Plan, int]],
    *,
    iterations: int,
    warmup_iterations: int = 2,
    generations: int = 4,
    num_cores: int | None = None,
    backends: BackendFactory | None = None,
    progress: bool = True,
    machine: Machine = CPU_MACHINE,
) -> list[MeasuredPlan]:
    """Run each (plan, logical devices) for ``iterations`` measured iterations, one plan at a time, in
    ``generations`` turns per plan (at most one per measured iteration), each turn with fresh worker processes.

    A turn starts the plan's workers, runs ``warmup_iterations`` unmeasured iterations and then its share of the
    measured ones back to back (:func:`split_iterations`), as training runs them, and stops the workers; no other
    plan's workers are alive meanwhile. Each generation gives every plan one turn, in the order of
    :func:`generation_orders` (as listed, reversed, ...), so that load from other processes over time falls on all
    plans alike and no plan always comes first.

    Why this protocol: on this project's 2-core machine each worker process runs at its own speed for its whole
    life (the same plan measured up to ~7% apart in two sets of processes; those started first ran 1-2.5% slower,
    ``benchmarks/bench_order_bias.py``), so every plan is measured over several sets; and every plan's workers
    alive at once, iterations alternating between plans (this function until then), made GRPO plans on both cores
    measure up to ~15% slower than they ran alone, which no profile of one plan sees and training never meets."""
    from tqdm import tqdm

    require(iterations >= 1, "--iterations", iterations, "must be >= 1", "measure at least one iteration")
    generations = max(1, min(generations, iterations))
    prepared = [(plan, logical, *_program(job, config, plan, logical, machine)) for plan, logical in entries]
    times: list[list[float]] = [[] for _ in prepared]
    samples: list[list[CostSample]] = [[] for _ in prepared]
    lengths: list[list[tuple[int, ...]]] = [[] for _ in prepared]
    last: list[Timeline | None] = [None] * len(prepared)
    shares = split_iterations(iterations, generations)
    total = len(prepared) * (iterations + generations * warmup_iterations)
    open_backend = backends or local_backends(num_cores)
    with tqdm(total=total, desc="measure", unit="it", disable=not progress) as bar:
        for order, share in zip(generation_orders(len(prepared), generations), shares, strict=True):
            for position in order:
                plan, logical, program, specs = prepared[position]
                bar.set_description(f"measure {plan.describe()}")
                mark_phase("measure_started", probe=plan.describe())
                with open_backend(logical) as backend:
                    for run in range(warmup_iterations + share):
                        result = executor.run(program, specs, backend=backend)
                        mark_phase("measure_iteration_done", iteration=run + 1)
                        if run >= warmup_iterations:
                            times[position].append(result.timeline.iteration_s)
                            samples[position].extend(dispatch_inclusive_samples(result.timeline))
                            lengths[position].append(job.response_lengths(result, config))
                            last[position] = result.timeline
                        bar.update(1)
    out = []
    for position, (plan, logical, _, _) in enumerate(prepared):
        timeline = last[position]
        if timeline is None:
            raise ConfigError("iterations", iterations, "no iteration was measured", "measure at least one")
        out.append(
            MeasuredPlan(
                plan=plan,
                num_devices=logical,
                iteration_s=tuple(times[position]),
                last=timeline,
                samples=tuple(samples[position]),
                response_lengths=tuple(lengths[position]),
            )
        )
    return out
