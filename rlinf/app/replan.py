"""Re-planning while a run trains: the plan in force's prediction tracked from the run's own iterations
(:class:`Tracker`), and the rules that end a segment at an iteration boundary and start the next under another
plan from the live state (:class:`SwitchAt` for scripts and tests, :class:`Replanner` for ``--replan auto``).

A switch keeps every worker's state as it is, so only plans with the same replicas and granularity per component are
switch candidates (:func:`switchable`): another replica count or pipeline split would need the environments' and
optimizers' state re-sharded, which rlinf does not do yet.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs

from rlinf.app.online import TrackingPrediction
from rlinf.app.plan_choice import PlanChoice
from rlinf.core.plan import Plan
from rlinf.core.timeline import Timeline

REPLAN_MODES = ("off", "auto")
"""Values of ``--replan``."""
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
