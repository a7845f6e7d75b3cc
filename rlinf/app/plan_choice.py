"""The plan a run trains under, and why: :func:`choose_plan` of a request returns one :class:`PlanChoice` whatever
the way it was chosen.

* a plan given (``--plan FILE``, or the resumed run's ``plan.yaml``): that plan;
* a fixed mode: the job's plan of that mode, with the request's staleness bound;
* ``auto``: profile the job's probe plans (or read ``--trace``), merge earlier runs' samples, choose the plan with one
  half of the profile and predict it from the other (:func:`rlinf.app.held_out.choose_and_predict`), with the
  interval of the profile's own spread.

Every plan is checked against the machine's devices (memory) and placed on them (:func:`rlinf.app.placement.place`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import attrs

from executor.devices import Device
from rlinf.app.auto import AutoPlan, Candidate
from rlinf.app.held_out import Prediction
from rlinf.app.placement import oversubscribed, place
from rlinf.app.request import RunRequest
from rlinf.core.errors import RlinfWarning
from rlinf.core.plan import Plan

Report = Callable[[str], None]
"""Where :func:`choose_plan` says what it did, a line at a time, as it goes."""


@attrs.frozen(kw_only=True)
class PlanChoice:
    """The plan a run trains under, where it runs, what is predicted for it and where it came from."""

    plan: Plan
    num_logical: int
    """Logical devices of the plan (the devices of its program's cluster)."""
    devices: tuple[Device, ...]
    """Per global device id of the program, the device (core or GPU) it runs on."""
    nodes: tuple[int, ...] | None = None
    """Ray node per device; ``None``: every device on node 0."""
    provenance: str
    """Where the plan came from: ``--plan FILE``, ``fixed <mode> mode`` or ``auto (<source>)``."""
    prediction: Prediction | None = None
    """Auto mode: the chosen plan's out-of-sample prediction and its interval."""
    auto: AutoPlan | None = None
    """Auto mode: every candidate simulated, fastest first."""

    @classmethod
    def given(cls, plan: Plan, num_logical: int, devices: tuple[Device, ...] | None = None) -> PlanChoice:
        """A plan a script gives, on ``devices`` (default: ``num_logical`` CPU devices round-robin over this
        process's cores), predicting nothing."""
        from executor.devices import cpu_devices

        return cls(
            plan=plan,
            num_logical=num_logical,
            devices=devices or cpu_devices(num_logical),
            provenance="given",
        )

    @property
    def oversubscribed(self) -> bool:
        """Whether two logical devices of a node share one core or GPU."""
        return oversubscribed(self.devices, self.nodes)


def choose_plan(request: RunRequest, *, report: Report = lambda line: None) -> PlanChoice:
    """The plan ``request`` trains under (see the module), checked against the machine and placed on its devices;
    ``report`` gets a line for each step of auto mode (what was profiled, what was chosen, its prediction)."""
    job, config = request.job, request.config
    prediction, auto = None, None
    if request.plan is not None:
        plan, logical, provenance = request.plan, max(1, request.plan.num_logical[0]), request.plan_source
    elif request.mode == "auto":
        auto, prediction = _auto(request, report)
        plan, logical = auto.chosen.plan, auto.chosen.num_devices
        provenance = f"auto ({auto.chosen.source})"
    else:
        plan, logical = job.fixed_plan(request.mode, request.num_devices, config)
        if request.settings.max_staleness:
            plan = attrs.evolve(plan, max_staleness=request.settings.max_staleness)
        provenance = f"fixed {request.mode} mode"
    job.check_plan(plan, config, machine=request.machine)  # memory against the machine's own devices
    devices, nodes = place(request, logical)
    return PlanChoice(
        plan=plan,
        num_logical=logical,
        devices=devices,
        nodes=nodes,
        provenance=provenance,
        prediction=prediction,
        auto=auto,
    )


def _auto(request: RunRequest, report: Report) -> tuple[AutoPlan, Prediction]:
    """Profile (or load the trace), merge earlier runs' samples, write the profile into the run directory, then
    choose the plan from one half and predict it from the other."""
    from rlinf.app.held_out import choose_and_predict
    from rlinf.app.placement import backends
    from rlinf.app.profiling import merge_traces, other_processor, profile
    from rlinf.core.trace import load_trace

    if request.trace is not None:
        trace = load_trace(request.trace)
        report(f"auto: planning from {request.trace} ({len(trace.samples)} samples; profiling skipped)")
        if mismatch := other_processor(trace):
            warnings.warn(RlinfWarning(f"--trace {request.trace}: {mismatch}"), stacklevel=2)
    else:
        profiled = profile(
            request.job,
            request.config,
            request.num_devices,
            settings=request.profile,
            progress=request.progress is True,
            command=request.command_line,
            backends=backends(request),
            machine=request.machine,
            state_dir=request.out,
        )
        trace = profiled.trace
        report(
            f"auto: profiled {len(profiled.plans)} probe plans, {profiled.iterations} iterations in "
            f"{profiled.elapsed_s:.0f} s (budget {request.profile.budget_s:.0f} s)"
            + (f"; {len(profiled.left_out)} left out, never chosen" if profiled.left_out else "")
        )
    trace = merge_traces(trace, *(load_trace(path) for path in request.merge_traces))
    request.out.mkdir(parents=True, exist_ok=True)
    trace.save(request.out / "profile_trace.json")
    auto, prediction = choose_and_predict(
        request.job,
        request.config,
        trace,
        request.num_devices,
        seed=request.settings.seed,
        machine=request.machine,
        max_staleness=request.settings.max_staleness,
    )
    for line in _chosen(auto, prediction):
        report(line)
    return auto, prediction


def _chosen(auto: AutoPlan, prediction: Prediction) -> list[str]:
    """What auto mode chose and predicts, in words."""
    best = auto.chosen
    lines = [
        f"auto: chose {best.plan.describe()} (from {best.source}); {len(auto.candidates)} plans simulated in "
        f"{auto.search_s:.1f} s",
        f"auto: predicted {prediction.iteration_s:.4f} s/iteration, {prediction.note}"
        + (f" (the choosing half: {prediction.choosing_s:.4f} s)" if prediction.held_out else ""),
    ]
    if prediction.interval_s is not None and prediction.coverage is not None:
        low, high = prediction.interval_s
        lines.append(
            f"auto: interval {low:.4f} to {high:.4f} s: where {len(prediction.ratios)} probe plans measured against "
            f"their own out-of-sample prediction (x{min(prediction.ratios):.2f} to x{max(prediction.ratios):.2f}); "
            f"a run like a probe lands inside with probability {prediction.coverage:.0%}"
        )
    for other in runner_ups(auto):
        lines.append(
            f"auto:   runner-up {other.plan.describe()} ({other.source}): "
            f"+{100 * (other.predicted_s / best.predicted_s - 1):.1f}% by the choosing half"
        )
    return lines


def runner_ups(auto: AutoPlan, count: int = 3) -> tuple[Candidate, ...]:
    """The next ``count`` candidates that differ from the chosen plan and from each other in more than offload."""

    def shape(plan: Plan) -> tuple:
        return plan.placements, tuple(sorted(plan.granularity.items()))

    shapes, found = {shape(auto.chosen.plan)}, list[Candidate]()
    for other in auto.candidates[1:]:
        if shape(other.plan) not in shapes and len(found) < count:
            shapes.add(shape(other.plan))
            found.append(other)
    return tuple(found)
