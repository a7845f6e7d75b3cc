"""The chosen plan's prediction from samples not used to choose it, with an interval from the profile's own spread.

The auto mode chooses the fastest of dozens of plans, each predicted from one noisy profile; predicted from the
samples that chose it, the winner's time is the lowest of many noisy estimates, biased low (the winner's curse). So
the profile is split in two halves of whole probe iterations (:func:`halves`: each probe's measured iterations dealt
out alternately, so that both halves see every probe plan at the same moments of the machine): the *choosing* half
picks the plan (:func:`rlinf.app.auto.plan_from_trace`), the *predicting* half, which played no part in the choice,
predicts it (:func:`choose_and_predict`).

How sure that prediction is comes from the profile itself: every probe plan with recorded iteration times is
predicted from the predicting half without its own samples and those of probe plans with the same compute ops (as
``rlinf validate`` predicts a plan out of sample) and set against its measured median iteration. Those ratios hold the
machine's speed from probe to probe and the model's error from plan to plan; the chosen plan's prediction times their
lowest and highest is the interval. If a run's ratio is drawn like a probe's, it falls inside the range of ``n`` probes'
ratios with probability ``(n - 1) / (n + 1)`` (:attr:`Prediction.coverage`).
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Sequence
from typing import Any

import attrs

from rlinf.app.auto import AutoPlan, plan_from_trace
from rlinf.app.jobs import C, Job
from rlinf.app.profiling import ProbeRecord, probe_records
from rlinf.core.cluster import CPU_MACHINE, Machine
from rlinf.core.errors import ExtrapolationWarning, RlinfError
from rlinf.core.lowering import lower
from rlinf.core.timeline import Timeline
from rlinf.core.trace import CostSample, Trace

MIN_PROBES_FOR_INTERVAL = 3
"""Probe ratios needed before an interval is given (with 3 it holds a new ratio with probability 1/2)."""


@attrs.frozen(kw_only=True)
class Prediction:
    """What rlinf predicts for the plan it chose, and how it came to it."""

    timeline: Timeline
    """The chosen plan's simulated iteration."""
    held_out: bool
    """Whether :attr:`timeline` comes from samples that played no part in choosing the plan."""
    choosing_s: float
    """The chosen plan's iteration time as the samples that chose it predict it (with :attr:`held_out` false,
    :attr:`timeline`'s own)."""
    interval_s: tuple[float, float] | None
    """The lowest and highest iteration time the profile's own spread allows (:func:`probe_ratios`); ``None``
    when fewer than :data:`MIN_PROBES_FOR_INTERVAL` probes recorded their iteration times."""
    ratios: tuple[float, ...]
    """Measured over out-of-sample predicted median iteration, one per probe plan behind the interval."""
    note: str
    """Where the prediction comes from, in words."""

    @property
    def iteration_s(self) -> float:
        """The predicted iteration time."""
        return self.timeline.iteration_s

    @property
    def coverage(self) -> float | None:
        """How often a run drawn like the probes lands inside :attr:`interval_s`: ``(n - 1) / (n + 1)``."""
        n = len(self.ratios)
        return None if self.interval_s is None else (n - 1) / (n + 1)

    def to_dict(self) -> dict[str, Any]:
        """The fields ``prediction.json`` records."""
        return {
            "predicted_iteration_s": self.iteration_s,
            "held_out": self.held_out,
            "choosing_half_s": self.choosing_s,
            "interval_s": None if self.interval_s is None else list(self.interval_s),
            "interval_coverage": self.coverage,
            "probe_ratios": list(self.ratios),
            "prediction_note": self.note,
        }


def iterations_of(trace: Trace, record: ProbeRecord) -> tuple[tuple[CostSample, ...], ...] | None:
    """A probe's samples cut into its measured iterations (one sample per op of its program, in program order);
    ``None`` when they do not divide into whole iterations of the plan (a trace edited by hand)."""
    program = lower(trace.workflow, record.plan, trace.cluster.with_num_devices(record.num_devices))
    size = program.num_ops
    if size == 0 or len(record.samples) % size:
        return None
    return tuple(record.samples[i : i + size] for i in range(0, len(record.samples), size))


def halves(trace: Trace) -> tuple[Trace, Trace] | None:
    """The profile ``trace`` split into a choosing and a predicting half: each probe's measured iterations dealt
    out alternately (the first, third, ... to the choosing half), its recorded iteration times with them; samples
    merged in after the probes' (earlier runs) dealt out alternately per op and size. ``None`` when the trace does
    not record its probes, or a probe measured fewer than two iterations (a short ``--profile-budget``)."""
    records = probe_records(trace)
    if not records:
        return None
    cut = [iterations_of(trace, record) for record in records]
    if any(iterations is None or len(iterations) < 2 for iterations in cut):
        return None
    sides: tuple[list[CostSample], list[CostSample]] = ([], [])
    entries: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
    for record, iterations in zip(records, cut, strict=True):
        assert iterations is not None
        timed = len(record.iteration_s) == len(iterations)
        for side in (0, 1):
            taken = iterations[side::2]
            sides[side].extend(sample for iteration in taken for sample in iteration)
            entry = {
                "plan": record.plan.to_dict(),
                "devices": record.num_devices,
                "samples": sum(len(iteration) for iteration in taken),
            }
            if timed:
                entry["iteration_s"] = list(record.iteration_s[side::2])
            entries[side].append(entry)
    seen: dict[tuple, int] = {}
    for sample in trace.samples[sum(len(record.samples) for record in records) :]:
        key = (sample.component, sample.op, sample.devices, sample.samples, sample.tokens, sample.shared)
        seen[key] = seen.get(key, -1) + 1
        sides[seen[key] % 2].append(sample)
    return tuple(  # type: ignore[return-value]
        attrs.evolve(
            trace,
            samples=tuple(sides[side]),
            provenance={**trace.provenance, "probe_plan_samples": entries[side], "half": name},
        )
        for side, name in ((0, "choosing"), (1, "predicting"))
    )


def probe_ratios(
    trace: Trace, timed: Sequence[ProbeRecord], *, machine: Machine = CPU_MACHINE
) -> tuple[float, ...]:
    """For each probe of ``timed`` (probes of the whole profile, with their iteration times) on no more devices
    than the profile's cluster: its measured median iteration over its prediction from ``trace`` (the predicting
    half) without the samples of the probe and of probe plans with the same compute ops, the other probes' speeds
    evened out (:func:`rlinf.app.validation.out_of_sample`). A probe whose prediction would extrapolate (an op or
    size only it measured, or it is the only probe) is left out: the cost model would answer for it what no sample
    says."""
    from rlinf.app.profiling import samples_by_plan
    from rlinf.app.validation import out_of_sample, simulated

    by_plan = samples_by_plan(trace)
    ratios = []
    for record in timed:
        if not record.iteration_s or record.num_devices > trace.cluster.num_devices:
            continue
        kept, _ = out_of_sample(trace, by_plan, record.plan, even_speeds=True)
        cluster = machine.cluster(record.num_devices)
        program = lower(trace.workflow, record.plan, cluster)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ExtrapolationWarning)
            try:
                predicted = simulated(program, kept, cluster).iteration_s
            except (ExtrapolationWarning, RlinfError):  # an op only it measured, or no other probe at all
                continue
        ratios.append(statistics.median(record.iteration_s) / predicted)
    return tuple(ratios)


def choose_and_predict(
    job: Job[C],
    config: C,
    trace: Trace,
    num_devices: int,
    *,
    seed: int = 0,
    machine: Machine = CPU_MACHINE,
    max_staleness: int = 0,
) -> tuple[AutoPlan, Prediction]:
    """Choose the plan from one half of the profile ``trace`` and predict it from the other (:func:`halves`), with
    the interval of :func:`probe_ratios`. A trace that cannot be split (no probe records, a probe with a single
    iteration) chooses and predicts from all its samples, and says so in :attr:`Prediction.note`."""
    from rlinf.app.profiling import COST_STATISTIC, evened
    from rlinf.core.costs import fit
    from simulator import simulate

    split = halves(trace)
    choosing = trace if split is None else split[0]
    auto = plan_from_trace(
        job, config, choosing, num_devices, seed=seed, machine=machine, max_staleness=max_staleness
    )
    if split is None:
        return auto, Prediction(
            timeline=auto.predicted,
            held_out=False,
            choosing_s=auto.chosen.predicted_s,
            interval_s=None,
            ratios=(),
            note="from the samples that chose the plan (the trace records no probe split into two or more "
            "iterations each): it may be biased low",
        )
    predicting = split[1]
    cluster = machine.cluster(auto.chosen.num_devices)
    program = lower(job.workflow(config), auto.chosen.plan, cluster)
    timeline = simulate(program, fit(evened(predicting), cluster, statistic=COST_STATISTIC))
    timed = [record for record in probe_records(trace) if record.iteration_s]
    ratios = probe_ratios(predicting, timed, machine=machine)
    interval = None
    if len(ratios) >= MIN_PROBES_FOR_INTERVAL:
        interval = (timeline.iteration_s * min(ratios), timeline.iteration_s * max(ratios))
    return auto, Prediction(
        timeline=timeline,
        held_out=True,
        choosing_s=auto.chosen.predicted_s,
        interval_s=interval,
        ratios=ratios,
        note="from the half of the profile's probe iterations that did not choose the plan",
    )
