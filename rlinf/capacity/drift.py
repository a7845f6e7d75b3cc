"""What-if over a whole run whose costs drift: the static plan against re-planning, from a drift schedule.

A drift schedule (YAML, :func:`load_schedule`) gives the run's length and, from given iterations on, what changed:
the what-if knobs of :mod:`rlinf.capacity.whatif` (``response_median_tokens``, ``response_length_scale``, ...) and
per-component cost multipliers (``cost_scale: {rollout: 1.5}``). Between two points the costs are constant.

:func:`plan_over_run` re-synthesizes (or rescales) the trace at every point, asks the planner for that point's best
plan, and prices three ways of running the whole schedule:

- **static**: the plan the planner chose for the first point (what a run that plans once keeps); where it no
  longer fits in device memory the run stops there;
- **best static in hindsight**: the one fixed plan, among every point's top candidates, with the least total time
  over the whole schedule (a baseline only an oracle that knew the drift could pick);
- **re-planning**: starts like static; at each point it sees the new costs after ``detect_iterations`` iterations
  (the online cost model needs several iterations to leave its band) and switches to that point's best plan when the
  predicted gain over the iterations left pays at least ``payback`` times the switch's cost; a plan that no longer
  fits forces a switch at the point itself (the memory check is predictive: it reads the lengths the run sees).

A switch costs a fixed overhead (restarting engines and workers), the state of every component whose devices change
moved once over the cluster's slowest link, and, for an asynchronous new plan, one extra iteration to refill its
pipeline. These are assumptions, stated in the report; the iteration times are the simulator's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from planner.judge import judge
from planner.search import search
from rlinf.capacity.whatif import ANALYTIC_GENERATOR, KNOBS, WhatIf, apply_whatif, is_synthesized, workload_of
from rlinf.core.cluster import Cluster
from rlinf.core.config_structure import structure_config
from rlinf.core.costs import CostModel, fit
from rlinf.core.errors import ConfigError, require
from rlinf.core.inputs import parse_yaml, read_text
from rlinf.core.plan import Plan
from rlinf.core.trace import Trace

MAX_RUN_ITERATIONS = 10_000_000
MAX_POINTS = 256
CANDIDATES_PER_POINT = 4
"""Each point's fastest fitting plans that join the candidates every point is priced on."""
DEFAULT_SWITCH_OVERHEAD_S = 5.0
"""Restarting workers and engines at a switch: DynaRL (OSDI'26) reports 0.5-5 s per reallocation; the upper end."""
DEFAULT_DETECT_ITERATIONS = 3
DEFAULT_PAYBACK = 2.0
SCHEDULE_KNOBS = ("response_median_tokens", "response_length_scale", "batch_scale", "group_size")


@attrs.frozen(kw_only=True)
class DriftPoint:
    """From iteration ``at`` on (until the next point), the run's costs are the trace's with these settings."""

    at: int
    response_median_tokens: float | None = None
    response_length_scale: float | None = None
    batch_scale: float | None = None
    group_size: int | None = None
    cost_scale: Mapping[str, float] = attrs.field(factory=dict)
    """Multiplier on every cost sample of a component (any trace, profiled or synthesized)."""

    def __attrs_post_init__(self) -> None:
        require(
            0 <= self.at < MAX_RUN_ITERATIONS,
            "at",
            self.at,
            f"must be in 0-{MAX_RUN_ITERATIONS - 1:,}",
            "fix it",
        )
        for name, factor in self.cost_scale.items():
            require(
                math.isfinite(factor) and 0 < factor <= 1e6,
                f"cost_scale.{name}",
                factor,
                "must be > 0 and <= 1e6",
                "write e.g. cost_scale: {rollout: 1.5}",
            )

    def whatif(self) -> WhatIf | None:
        """The what-if knobs this point sets (None when it sets none)."""
        settings = []
        for key in SCHEDULE_KNOBS:
            value = getattr(self, key)
            if value is not None:
                settings.append((key, KNOBS[key].parse(key, str(value))))
        if not settings:
            return None
        return WhatIf(label=", ".join(f"{k}={v:g}" for k, v in settings), settings=tuple(settings))

    def label(self) -> str:
        """``response_median_tokens=1600, cost_scale.rollout=1.5`` (``base`` when it changes nothing)."""
        whatif = self.whatif()
        parts = [whatif.label] if whatif is not None else []
        parts += [f"cost_scale.{name}={factor:g}" for name, factor in self.cost_scale.items()]
        return ", ".join(parts) or "base"


@attrs.frozen(kw_only=True)
class DriftSchedule:
    """A run of ``iterations`` iterations whose costs change at each point's iteration."""

    iterations: int
    points: tuple[DriftPoint, ...]
    source: str = ""
    """Where the schedule comes from (a citation), carried into the report."""

    def __attrs_post_init__(self) -> None:
        require(
            1 <= self.iterations <= MAX_RUN_ITERATIONS,
            "iterations",
            self.iterations,
            f"must be in 1-{MAX_RUN_ITERATIONS:,}",
            "give the run's length in iterations",
        )
        require(
            1 <= len(self.points) <= MAX_POINTS,
            "points",
            len(self.points),
            f"must list 1-{MAX_POINTS} points",
            "write points: [{at: 0, ...}, {at: 100, ...}]",
        )
        require(
            self.points[0].at == 0, "points[0].at", self.points[0].at, "must be 0", "start the schedule at 0"
        )
        for i, (before, after) in enumerate(zip(self.points, self.points[1:], strict=False)):
            require(
                after.at > before.at,
                f"points[{i + 1}].at",
                after.at,
                f"must be after points[{i}].at ({before.at})",
                "list the points in increasing order of at",
            )
        require(
            self.points[-1].at < self.iterations,
            f"points[{len(self.points) - 1}].at",
            self.points[-1].at,
            f"must be before the run's end (iterations: {self.iterations})",
            "drop the point or lengthen the run",
        )

    def lengths(self) -> tuple[int, ...]:
        """Iterations each point is in force."""
        ends = [p.at for p in self.points[1:]] + [self.iterations]
        return tuple(end - p.at for p, end in zip(self.points, ends, strict=True))


def load_schedule(path: str | Path, field: str = "--drift") -> DriftSchedule:
    """Read a drift schedule YAML file; any problem is one :class:`ConfigError` naming the key."""
    name = Path(path).name
    data = parse_yaml(read_text(path, field, what="drift schedule YAML file"), field, name)
    return structure_config(DriftSchedule, data, name, "")


def apply_point(trace: Trace, point: DriftPoint) -> Trace:
    """The trace with the point's knobs applied (re-synthesized if synthesized) and its cost multipliers."""
    whatif = point.whatif()
    result = apply_whatif(trace, whatif) if whatif is not None else trace
    if not point.cost_scale:
        return result
    samples = [
        attrs.evolve(s, seconds=s.seconds * point.cost_scale[s.component])
        if s.component in point.cost_scale
        else s
        for s in result.samples
    ]
    return attrs.evolve(result, samples=samples)


@attrs.frozen(kw_only=True)
class Switch:
    """One change of plan by the re-planning run."""

    iteration: int
    """The first iteration under the new plan."""
    from_plan: str
    to_plan: str
    reason: str
    gain_per_iteration_s: float
    """Predicted seconds saved per iteration at the costs in force (infinite when the old plan no longer fits)."""
    switch_s: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "iteration": self.iteration,
            "from": self.from_plan,
            "to": self.to_plan,
            "reason": self.reason,
            "gain_per_iteration_s": None
            if math.isinf(self.gain_per_iteration_s)
            else self.gain_per_iteration_s,
            "switch_s": self.switch_s,
        }


@attrs.frozen(kw_only=True)
class Strategy:
    """How one way of running the schedule fares: the plan in force and the iteration time, iteration by
    iteration (piecewise), and its total."""

    name: str
    total_s: float
    """Whole-run seconds, switches included (infinite when the run cannot finish)."""
    pieces: tuple[tuple[int, int, int, float], ...]
    """(first iteration, end iteration, candidate index, iteration seconds) in order."""
    switches: tuple[Switch, ...] = ()
    failed_at: int | None = None
    """The iteration where the plan stopped fitting in device memory (the run ends there)."""

    def to_dict(self, plans: Sequence[Plan], num_devices: int) -> dict[str, Any]:
        """JSON-ready form with device-hours."""
        finite = math.isfinite(self.total_s)
        return {
            "name": self.name,
            "total_s": self.total_s if finite else None,
            "device_hours": self.total_s * num_devices / 3600 if finite else None,
            "failed_at_iteration": self.failed_at,
            "pieces": [
                {"from": a, "to": b, "plan": plans[c].describe(), "iteration_s": s}
                for a, b, c, s in self.pieces
            ],
            "switches": [s.to_dict() for s in self.switches],
        }


@attrs.frozen(kw_only=True)
class DriftReport:
    """Every point's planner answer, every candidate priced at every point, and the three strategies."""

    schedule: DriftSchedule
    cluster: Cluster
    plans: tuple[Plan, ...]
    """The candidates (each point's fastest fitting plans)."""
    seconds: tuple[tuple[float, ...], ...]
    """``seconds[c][i]``: candidate ``c``'s simulated iteration at point ``i`` (infinite: it does not fit)."""
    chosen: tuple[int, ...]
    """The planner's plan at each point (a candidate index)."""
    static: Strategy
    hindsight: Strategy
    replanning: Strategy
    search_s: tuple[float, ...]
    """The planner's wall seconds at each point."""
    assumptions: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        n = self.cluster.num_devices
        return {
            "cluster": self.cluster.spec(),
            "iterations": self.schedule.iterations,
            "source": self.schedule.source,
            "points": [
                {
                    "at": point.at,
                    "settings": point.label(),
                    "planner_choice": self.plans[self.chosen[i]].describe(),
                    "planner_choice_iteration_s": self.seconds[self.chosen[i]][i],
                    "search_s": self.search_s[i],
                }
                for i, point in enumerate(self.schedule.points)
            ],
            "strategies": [s.to_dict(self.plans, n) for s in (self.static, self.hindsight, self.replanning)],
            "replanning_speedup_over_static": _ratio(self.static.total_s, self.replanning.total_s),
            "replanning_speedup_over_hindsight": _ratio(self.hindsight.total_s, self.replanning.total_s),
            "assumptions": dict(self.assumptions),
        }


def _ratio(a: float, b: float) -> float | None:
    return a / b if math.isfinite(a) and math.isfinite(b) and b > 0 else None


def switch_seconds(
    trace: Trace, cluster: Cluster, old: Plan, new: Plan, new_iteration_s: float, overhead_s: float
) -> float:
    """The assumed cost of switching from ``old`` to ``new`` (see the module's docstring)."""
    if old == new:
        return 0.0
    link = (
        cluster.links.inter_node_bytes_per_s
        if cluster.num_nodes > 1
        else cluster.links.intra_node_bytes_per_s
    )
    moved = sum(
        c.state_bytes for c in trace.workflow.components if old.devices_of(c.name) != new.devices_of(c.name)
    )
    refill = new_iteration_s if new.max_staleness else 0.0
    return overhead_s + moved / link + refill


def plan_over_run(
    trace: Trace,
    cluster: Cluster,
    schedule: DriftSchedule,
    *,
    start_plan: Plan | None = None,
    max_staleness: int = 0,
    switch_overhead_s: float = DEFAULT_SWITCH_OVERHEAD_S,
    detect_iterations: int = DEFAULT_DETECT_ITERATIONS,
    payback: float = DEFAULT_PAYBACK,
    seed: int = 0,
    progress: Any = None,
) -> DriftReport:
    """Price the static plan, the best static plan in hindsight and re-planning over ``schedule``.

    ``start_plan``: the static plan (default: the planner's choice at the first point). ``progress``: called with
    a line per point (the planner takes seconds per point)."""
    traces: list[Trace] = []
    costs: list[CostModel] = []
    plans: list[Plan] = []
    chosen: list[int] = []
    search_s: list[float] = []
    points = schedule.points
    for i, point in enumerate(points):
        if progress is not None:
            progress(f"point {i + 1}/{len(points)} (iteration {point.at}: {point.label()}): planning")
        shifted = apply_point(trace, point)
        model = fit(shifted, cluster)
        result = search(shifted.workflow, cluster, model, seed=seed, max_staleness=max_staleness)
        traces.append(shifted)
        costs.append(model)
        search_s.append(result.search_s)
        fitting = [e.plan for e in result.ranking if e.fits][:CANDIDATES_PER_POINT]
        for plan in fitting:
            if plan not in plans:
                plans.append(plan)
        chosen.append(_index(plans, result.plan))
    start = chosen[0] if start_plan is None else _index(plans, start_plan)
    seconds = tuple(
        tuple(
            judge(traces[i].workflow, cluster, costs[i], plan, "drift").iteration_s
            for i in range(len(points))
        )
        for plan in plans
    )
    lengths = schedule.lengths()
    static = _fixed("static", start, seconds, points, lengths)
    totals = [sum(n * row[i] for i, n in enumerate(lengths)) for row in seconds]
    best = min(range(len(plans)), key=lambda c: totals[c])
    hindsight = _fixed("best static in hindsight", best, seconds, points, lengths)
    replanning = _replan(
        static_start=start,
        seconds=seconds,
        chosen=chosen,
        schedule=schedule,
        trace=trace,
        cluster=cluster,
        plans=plans,
        overhead_s=switch_overhead_s,
        detect=detect_iterations,
        payback=payback,
    )
    assumptions = {
        "switch_overhead_s": switch_overhead_s,
        "state_moved_over": "inter-node link" if cluster.num_nodes > 1 else "intra-node link",
        "refill_after_switch": "one iteration of the new plan when it is asynchronous",
        "detect_iterations": detect_iterations,
        "payback": payback,
        "max_staleness": max_staleness,
        "candidates_per_point": CANDIDATES_PER_POINT,
    }
    return DriftReport(
        schedule=schedule,
        cluster=cluster,
        plans=tuple(plans),
        seconds=seconds,
        chosen=tuple(chosen),
        static=static,
        hindsight=hindsight,
        replanning=replanning,
        search_s=tuple(search_s),
        assumptions=assumptions,
    )


def _index(plans: list[Plan], plan: Plan) -> int:
    """``plan``'s position among the candidates, added at the end when new."""
    if plan not in plans:
        plans.append(plan)
    return plans.index(plan)


def _fixed(
    name: str,
    candidate: int,
    seconds: tuple[tuple[float, ...], ...],
    points: tuple[DriftPoint, ...],
    lengths: tuple[int, ...],
) -> Strategy:
    pieces: list[tuple[int, int, int, float]] = []
    total = 0.0
    for i, (point, n) in enumerate(zip(points, lengths, strict=True)):
        s = seconds[candidate][i]
        if math.isinf(s):
            return Strategy(name=name, total_s=math.inf, pieces=tuple(pieces), failed_at=point.at)
        pieces.append((point.at, point.at + n, candidate, s))
        total += n * s
    return Strategy(name=name, total_s=total, pieces=tuple(pieces))


def _replan(
    *,
    static_start: int,
    seconds: tuple[tuple[float, ...], ...],
    chosen: list[int],
    schedule: DriftSchedule,
    trace: Trace,
    cluster: Cluster,
    plans: list[Plan],
    overhead_s: float,
    detect: int,
    payback: float,
) -> Strategy:
    current = static_start
    pieces: list[tuple[int, int, int, float]] = []
    switches: list[Switch] = []
    total = 0.0
    for i, (point, n) in enumerate(zip(schedule.points, schedule.lengths(), strict=True)):
        end = point.at + n
        best = chosen[i]
        now, then = seconds[current][i], seconds[best][i]
        cost = switch_seconds(trace, cluster, plans[current], plans[best], then, overhead_s)
        if math.isinf(then):
            return Strategy(
                name="re-planning",
                total_s=math.inf,
                pieces=tuple(pieces),
                switches=tuple(switches),
                failed_at=point.at,
            )
        if current != best and math.isinf(now):
            reason = "the plan in force no longer fits in device memory at these costs"
            switch_at = point.at
        elif current != best:
            switch_at = min(point.at + detect, end)
            left = schedule.iterations - switch_at
            gain = now - then
            fits_after = switch_at < end and gain * left > payback * cost
            if not fits_after:
                switch_at = -1
            reason = (
                f"predicted gain {gain:.4g} s x {left} iterations left > {payback:g} x switch {cost:.4g} s"
                if fits_after
                else ""
            )
        else:
            switch_at = -1
            reason = ""
        if switch_at < 0:
            pieces.append((point.at, end, current, now))
            total += n * now
            continue
        if switch_at > point.at:
            pieces.append((point.at, switch_at, current, now))
            total += (switch_at - point.at) * now
        switches.append(
            Switch(
                iteration=switch_at,
                from_plan=plans[current].describe(),
                to_plan=plans[best].describe(),
                reason=reason,
                gain_per_iteration_s=now - then,
                switch_s=cost,
            )
        )
        total += cost + (end - switch_at) * then
        pieces.append((switch_at, end, best, then))
        current = best
    return Strategy(name="re-planning", total_s=total, pieces=tuple(pieces), switches=tuple(switches))


def drift_png(report: DriftReport) -> bytes:
    """Iteration time over the run for the three strategies (top) and the plan each has in force (bottom)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from rlinf.capacity.plots import _png
    from rlinf.core.export import PALETTE

    figure = Figure(figsize=(9.0, 5.6), layout="constrained")
    FigureCanvasAgg(figure)
    top, bottom = figure.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1.1]})
    strategies = (report.static, report.hindsight, report.replanning)
    styles = (("#e67e22", "--"), ("#27ae60", ":"), ("#1f3a93", "-"))
    for strategy, (color, style) in zip(strategies, styles, strict=True):
        xs: list[float] = []
        ys: list[float] = []
        for a, b, _, s in strategy.pieces:
            xs += [a, b]
            ys += [s, s]
        label = strategy.name + (
            f" (out of memory at iteration {strategy.failed_at})" if strategy.failed_at is not None else ""
        )
        top.plot(xs, ys, style, color=color, linewidth=2.2 if style != "-" else 1.4, label=label)
    for switch in report.replanning.switches:
        top.axvline(switch.iteration, color="#1f3a93", linewidth=0.6, alpha=0.5)
    top.set_ylabel("seconds per iteration\n(simulated)")
    top.set_ylim(bottom=0)
    top.grid(True, linestyle=":", linewidth=0.6, alpha=0.8)
    top.legend(fontsize=8, loc="upper left")
    top.set_title(
        f"{report.cluster.spec()}: a run whose costs drift, {report.schedule.iterations:,} iterations",
        fontsize=9,
    )
    used = sorted({c for strategy in strategies for _, _, c, _ in strategy.pieces})
    colors = {c: PALETTE[k % len(PALETTE)] for k, c in enumerate(used)}
    letters = {c: chr(ord("A") + k) if k < 26 else str(k) for k, c in enumerate(used)}
    for row, strategy in enumerate(strategies):
        for a, b, c, _ in strategy.pieces:
            bottom.broken_barh([(a, b - a)], (row - 0.35, 0.7), color=colors[c])
            if b - a > report.schedule.iterations / 40:
                bottom.text((a + b) / 2, row, letters[c], ha="center", va="center", fontsize=7, color="white")
        if strategy.failed_at is not None:
            bottom.text(strategy.failed_at, row, "  out of memory", va="center", fontsize=7, color="#b03a2e")
    bottom.set_yticks(range(len(strategies)))
    bottom.set_yticklabels([s.name for s in strategies], fontsize=7)
    bottom.invert_yaxis()
    bottom.set_xlabel("iteration")
    bottom.set_xlim(0, report.schedule.iterations)
    handles = [
        Patch(color=colors[c], label=f"{letters[c]}: {_short(report.plans[c].describe())}") for c in used
    ]
    figure.legend(handles=handles, loc="outside lower center", fontsize=6, ncols=1, frameon=False)
    return _png(figure)


def _short(text: str, limit: int = 150) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_drift(report: DriftReport) -> str:
    """The human-readable summary."""
    n = report.cluster.num_devices
    lines = [
        f"drift over {report.schedule.iterations:,} iterations on {report.cluster.spec()}"
        + (f" ({report.schedule.source})" if report.schedule.source else ""),
        "point  from      settings -> the planner's plan (simulated iteration)",
    ]
    for i, point in enumerate(report.schedule.points):
        c = report.chosen[i]
        lines.append(
            f"{i + 1:>5}  {point.at:<8,}  {point.label()} -> {report.plans[c].describe()} "
            f"({report.seconds[c][i]:.4g} s)"
        )
    for strategy in (report.static, report.hindsight, report.replanning):
        if math.isfinite(strategy.total_s):
            figure = f"{strategy.total_s / 3600:.4g} h, {strategy.total_s * n / 3600:,.0f} device-hours"
        else:
            figure = f"cannot finish: out of device memory at iteration {strategy.failed_at}"
        lines.append(f"{strategy.name:<26} {figure}")
    for switch in report.replanning.switches:
        lines.append(
            f"  switch at iteration {switch.iteration:,} ({switch.switch_s:.3g} s): {switch.to_plan}; {switch.reason}"
        )
    for other in (report.static, report.hindsight):
        ratio = _ratio(other.total_s, report.replanning.total_s)
        if ratio is not None:
            lines.append(f"re-planning against {other.name}: {ratio:.3f}x")
    return "\n".join(lines) + "\n"


def check_schedule(trace: Trace, schedule: DriftSchedule) -> None:
    """Refuse, before any planning, a schedule naming a component the trace lacks or a knob its trace cannot take."""
    names = {c.name for c in trace.workflow.components}
    synthesized = is_synthesized(trace)
    for i, point in enumerate(schedule.points):
        for name in point.cost_scale:
            require(
                name in names,
                f"points[{i}].cost_scale.{name}",
                name,
                "is not a component of the trace's workflow",
                f"use one of {sorted(names)}",
            )
        for key in SCHEDULE_KNOBS:
            require(
                getattr(point, key) is None or synthesized or KNOBS[key].on_profiled is not None,
                f"points[{i}].{key}",
                getattr(point, key),
                f"needs a trace synthesized by {ANALYTIC_GENERATOR} (this one is {trace.provenance.get('kind')!r})",
                "use a synthesized trace (rlinf trace synth), batch_scale or cost_scale",
            )
        whatif = point.whatif()
        if whatif is not None and synthesized:  # the knobs' own checks, without synthesizing
            workload = workload_of(trace)
            for key, value in whatif.settings:
                try:
                    KNOBS[key].on_workload(workload, trace.cluster, value)
                except ConfigError as error:
                    raise ConfigError(f"points[{i}].{key}", value, error.problem, error.fix) from None
