"""Re-planning while a run trains: the plan in force's prediction tracked from the run's own iterations
(:class:`Tracker`), and the rules that end a segment at an iteration boundary and start the next under another
plan from the live state (:class:`SwitchAt` for scripts and tests, :class:`Replanner` for ``--replan auto``).

A switch keeps every worker's state as it is, so only plans with the same replicas and granularity per component are
switch candidates (:func:`switchable`): another replica count or pipeline split would need the environments' and
optimizers' state re-sharded, which rlinf does not do yet.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs

from rlinf.app.online import TrackingPrediction, ratio_summary
from rlinf.app.plan_choice import PlanChoice
from rlinf.core.plan import Plan
from rlinf.core.timeline import Timeline

OVERHEAD_SHARE = 0.02
"""The share of an iteration the tracking prediction may cost the driver; beyond it, it refits less often."""
DEFAULT_BAND = 0.15
"""Without a prediction interval, the band around the prediction a measured iteration may stay in."""


class Tracker:
    """The tracking prediction of the plan in force (:class:`rlinf.app.online.TrackingPrediction`), refit after
    every ``refit_every`` observed iterations, where ``refit_every`` keeps the refit's cost under
    :data:`OVERHEAD_SHARE` of an iteration (measured on the first refit)."""

    def __init__(self, predicted: Timeline) -> None:
        self.online = TrackingPrediction(predicted)
        self.current_s = predicted.iteration_s
        self.refit_every = 1
        self.refit_cost_s = 0.0
        self._since_refit = 0

    def observe(self, measured: Timeline) -> bool:
        """Take a counted steady iteration (another program's is ignored: False); refit when due."""
        if not self.online.observe(measured):
            return False
        self._since_refit += 1
        if self._since_refit >= self.refit_every:
            started = time.perf_counter()
            self.current_s = self.online.predict()
            self.refit_cost_s = time.perf_counter() - started
            self._since_refit = 0
            budget_s = OVERHEAD_SHARE * max(measured.iteration_s, 1e-9)
            self.refit_every = max(1, math.ceil(self.refit_cost_s / budget_s))
        return True


@attrs.frozen(kw_only=True)
class Switch:
    """A decision to go on under another plan (or the same one) after an iteration."""

    choice: PlanChoice
    why: str
    predicted_gain_s: float = 0.0
    """Predicted seconds saved per iteration."""
    fresh_workers: bool = False
    """Stop the workers and start new ones, whose state then comes entirely from the live snapshot (by default a
    worker the new plan runs unchanged is kept and restored in place)."""


@attrs.frozen(kw_only=True)
class Boundary:
    """What a switch rule sees after an iteration."""

    iteration: int
    last_step: int
    """The run's last step."""
    segment_first: int
    """The first iteration of the segment in force."""
    measured_s: float
    counted: bool
    """Whether the iteration is a counted steady one (not a warm-up, fill or drain step)."""
    choice: PlanChoice
    tracker: Tracker | None


class SwitchRule(Protocol):
    """Decides after each iteration whether the run goes on under another plan."""

    def after(self, boundary: Boundary) -> Switch | None:
        """The switch to make after ``boundary``'s iteration, or ``None``."""

    def switched(self, boundary: Boundary, switch: Switch, seconds: float) -> None:
        """The switch was made; the new segment's workers were ready ``seconds`` after the iteration ended."""


def replicas(plan: Plan) -> dict[str, int]:
    """Workers per component."""
    return {p.component: p.data_parallel_size or len(p.devices) for p in plan.placements}


def switchable(current: Plan, other: Plan) -> bool:
    """Whether a run may switch from ``current`` to ``other`` carrying its live state: the same components with the
    same replicas (each worker's state maps one to one), the same granularity (a worker's state may be split by
    it: the embodied env worker keeps its environments per pipeline stage), the same staleness bound and buffer
    position (the same schedule and buffered batches). What may differ: the devices and the offload."""
    return (
        replicas(current) == replicas(other)
        and dict(current.granularity) == dict(other.granularity)
        and (current.max_staleness, current.buffer_before) == (other.max_staleness, other.buffer_before)
    )


@attrs.define
class SwitchAt:
    """Switch to given plans after given iterations (scripts, tests); keeps what each switch cost."""

    at: Mapping[int, PlanChoice]
    fresh_workers: bool = False
    """See :attr:`Switch.fresh_workers`."""
    seconds: list[float] = attrs.Factory(list)

    def after(self, boundary: Boundary) -> Switch | None:
        choice = self.at.get(boundary.iteration)
        if choice is None:
            return None
        assert switchable(boundary.choice.plan, choice.plan), "a switch keeps the replicas and the bound"
        why = f"asked for after iteration {boundary.iteration}"
        return Switch(choice=choice, why=why, fresh_workers=self.fresh_workers)

    def switched(self, boundary: Boundary, switch: Switch, seconds: float) -> None:
        self.seconds.append(seconds)


def state_digest(workers: Any) -> str:
    """SHA-256 of the workers' state as a checkpoint encodes it (:mod:`rlinf.app.state_codec`)."""
    from rlinf.app import state_codec

    return hashlib.sha256(state_codec.encode({"workers": workers})).hexdigest()


def record_switch(run_dir: Path, entry: Mapping[str, Any]) -> None:
    """Append one switch to ``RUN_DIR/switches.jsonl``."""
    with (run_dir / "switches.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(dict(entry)) + "\n")


DEFAULT_SWITCH_S = 1.5
"""What a switch costs before the run has measured one: a switch to another placement of the small Hopper job on this
project's 2-core machine, which starts new worker processes, measured 1.4 s (``tests/test_replan.py``); a switch
to the same plan, whose workers are kept, 0.14-0.2 s."""


@attrs.define
class Replanner:
    """``--replan auto``: when the measured iteration stays outside the prediction's band (its interval, else
    +-:data:`DEFAULT_BAND`) for ``consecutive`` counted iterations, at least ``min_iterations`` into the segment and
    after the last switch, choose again on the profile's costs scaled by the run's drift
    (:meth:`rlinf.app.online.TrackingPrediction.scaled_trace`, :func:`rlinf.app.auto.plan_from_trace`) among the
    switch candidates (:func:`switchable`), and switch when the predicted gain per iteration times the iterations
    left exceeds twice the switch's cost (the last switch's measured cost, else :data:`DEFAULT_SWITCH_S`). Each
    re-plan, switched or not, is a line of ``switches.jsonl``; ``min_iterations`` after a switch, its measured
    gain follows."""

    request: Any
    """The run's :class:`rlinf.app.request.RunRequest`."""
    trace: Any
    """The profile the plan was chosen from (:class:`rlinf.core.trace.Trace`)."""
    consecutive: int = 5
    min_iterations: int = 10
    switch_s: float = DEFAULT_SWITCH_S
    outside: int = 0
    last_switch: int = 0
    """The iteration after which the run last re-planned (switched or not)."""
    scale: float = 1.0
    """The band's scale: after a re-plan that kept the plan, the tracking over the original prediction (the band
    follows the costs the re-plan saw)."""
    recent: list[float] = attrs.Factory(list)
    """Measured seconds of the counted iterations since the last switch."""
    before_s: float | None = None
    """The median measured iteration before the last switch."""

    def after(self, boundary: Boundary) -> Switch | None:
        """See the class."""
        self._measure_gain(boundary)
        tracker, prediction = boundary.tracker, boundary.choice.prediction
        if tracker is None or prediction is None or not boundary.counted:
            return None
        self.recent.append(boundary.measured_s)
        low, high = prediction.interval_s or (
            prediction.iteration_s * (1 - DEFAULT_BAND),
            prediction.iteration_s * (1 + DEFAULT_BAND),
        )
        low, high = low * self.scale, high * self.scale
        self.outside = self.outside + 1 if not low <= boundary.measured_s <= high else 0
        since = boundary.iteration - max(boundary.segment_first - 1, self.last_switch)
        if self.outside < self.consecutive or since < self.min_iterations:
            return None
        self.outside, self.last_switch = 0, boundary.iteration
        why = (
            f"measured {boundary.measured_s:.4f} s outside {low:.4f}-{high:.4f} s for {self.consecutive} "
            f"iterations (drift: {ratio_summary(tracker.online.ratios())})"
        )
        return self._choose(boundary, tracker, why)

    def _choose(self, boundary: Boundary, tracker: Tracker, why: str) -> Switch | None:
        from rlinf.app.auto import plan_from_trace

        request, current = self.request, boundary.choice
        drifted = tracker.online.scaled_trace(self.trace)
        started = time.perf_counter()
        search = functools.partial(plan_from_trace, seed=request.settings.seed, machine=request.machine)
        auto = search(
            request.job,
            request.config,
            drifted,
            request.num_devices,
            max_staleness=current.plan.max_staleness,
        )
        search_s = time.perf_counter() - started
        candidates = [
            c
            for c in auto.candidates
            if c.num_devices == current.num_logical
            and c.plan != current.plan
            and switchable(current.plan, c.plan)
        ]
        left = boundary.last_step - boundary.iteration
        entry: dict[str, Any] = {
            "iteration": boundary.iteration,
            "from": current.plan.to_dict(),
            "why": why,
            "tracking_s": tracker.current_s,
            "search_s": search_s,
            "iterations_left": left,
            "switch_cost_s": self.switch_s,
        }
        if not candidates:
            self.scale = tracker.current_s / tracker.online.predicted_s
            record_switch(self.request.out, {**entry, "to": None, "decision": "no switch candidate"})
            return None
        best = candidates[0]
        gain_s = tracker.current_s - best.predicted_s
        entry.update(to_predicted_s=best.predicted_s, predicted_gain_s=gain_s)
        if gain_s * left <= 2 * self.switch_s:
            self.scale = tracker.current_s / tracker.online.predicted_s
            decision = f"kept: {best.plan.describe()} gains {gain_s:.4f} s x {left} iterations left"
            record_switch(self.request.out, {**entry, "to": None, "decision": decision})
            return None
        choice = attrs.evolve(
            current,
            plan=best.plan,
            provenance=f"re-planned ({best.source}) after iteration {boundary.iteration}",
            prediction=predict_from(request, best.plan, current.num_logical, drifted),
            auto=auto,
        )
        why += (
            f"; {best.plan.describe()} predicted {best.predicted_s:.4f} s against {tracker.current_s:.4f} s"
        )
        return Switch(choice=choice, why=why, predicted_gain_s=gain_s)

    def switched(self, boundary: Boundary, switch: Switch, seconds: float) -> None:
        """Keep the switch's measured cost for the next decision, and the iterations before it for its gain."""
        self.switch_s, self.scale = seconds, 1.0
        self.before_s = statistics.median(self.recent[-self.consecutive :]) if self.recent else None
        self.recent = []

    def _measure_gain(self, boundary: Boundary) -> None:
        if self.before_s is not None and len(self.recent) >= self.min_iterations:
            after_s = statistics.median(self.recent)
            record_switch(
                self.request.out,
                {
                    "iteration": boundary.iteration,
                    "switched_after": self.last_switch,
                    "measured_before_s": self.before_s,
                    "measured_after_s": after_s,
                    "measured_gain_s": self.before_s - after_s,
                },
            )
            self.before_s = None


def predict_from(request: Any, plan: Plan, num_logical: int, trace: Any) -> Any:
    """``plan``'s :class:`rlinf.app.held_out.Prediction` from ``trace``'s costs (a re-plan's drifted profile: from the
    samples that chose the plan, with no interval)."""
    from rlinf.app.held_out import Prediction
    from rlinf.app.profiling import COST_STATISTIC, evened
    from rlinf.core.costs import fit
    from simulator import simulate

    program = request.job.lower(plan, request.config, num_logical, machine=request.machine)
    cluster = request.machine.cluster(num_logical)
    timeline = simulate(program, fit(evened(trace), cluster, statistic=COST_STATISTIC))
    return Prediction(
        timeline=timeline,
        held_out=False,
        choosing_s=timeline.iteration_s,
        interval_s=None,
        ratios=(),
        note="re-planned on the run's drifted costs",
    )


def replanner_for(request: Any, choice: PlanChoice) -> Replanner | None:
    """The re-planning rule of ``request`` (``--replan auto`` with a prediction and the profile it came from)."""
    profile = request.out / "profile_trace.json"
    if request.replan != "auto" or choice.prediction is None or not profile.is_file():
        return None
    from rlinf.core.trace import load_trace

    return Replanner(request=request, trace=load_trace(profile))
