"""The training loop of any job (:mod:`rlinf.app.jobs`): a run is a sequence of **segments**, each one plan started
from a state (fresh, a checkpoint, or the live state of the segment before), whose program runs once per iteration
with real workers; it writes metrics, TensorBoard scalars, the measured trace and timeline, and checkpoints.

:func:`run` takes a request (:class:`rlinf.app.request.RunRequest`) and the plan chosen for it
(:class:`rlinf.app.plan_choice.PlanChoice`). Its first segment starts fresh, or from the newest checkpoint with
``resume``; when a worker fails (dies, raises, stalls), up to ``max_restarts`` times the next segment starts from
the newest checkpoint (or fresh before the first) on restarted workers. Re-planning at an iteration boundary is
the same operation: a segment under another plan, started from the live state (:meth:`Segment.live`), when a switch
rule (:mod:`rlinf.app.replan`: ``--replan auto``, or one a script gives) answers after an iteration.

Everything this writes lives under the run directory: ``plan.yaml``, ``metrics.jsonl``, ``tensorboard/``,
``trace.json`` (every op of every counted iteration (not a segment's first, a warm-up, when there are more) as a
dispatch-inclusive cost sample, see :mod:`rlinf.app.profiling`; merge it into the next profile with
``--merge-trace``), ``timeline.json`` (Chrome trace of the last iteration), ``gantt.png`` and ``checkpoints/``
(:mod:`rlinf.app.checkpoint`: atomic, checksummed, the last 3 kept; :mod:`rlinf.app.run_checkpoint`: what one
holds). With a prediction (auto mode), each iteration's metrics hold ``predicted_iteration_s`` and
``tracking_predicted_iteration_s`` (refit from the run's recent iterations, :class:`rlinf.app.replan.Tracker`) too,
each switch of plan is a line of ``switches.jsonl``, and the run directory also gets ``prediction.json``, ``timeline_predicted.json``, ``gantt_predicted.png`` and
``timeline_pair.png`` (predicted above measured).
"""

from __future__ import annotations

import enum
import json
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

import executor
from rlinf.app.checkpoint import read_manifest, save_checkpoint
from rlinf.app.console import Console, iteration_figures, iteration_line
from rlinf.app.placement import open_workers
from rlinf.app.plan_choice import PlanChoice
from rlinf.app.replan import Boundary, Switch, SwitchRule, Tracker, record_switch, replanner_for, state_digest
from rlinf.app.request import RunRequest
from rlinf.app.run_checkpoint import (
    DriverRng,
    RunCheckpoint,
    kept_iterations,
    load_run_checkpoint,
    resume_workers,
)
from rlinf.app.run_dir import (
    append_metrics,
    begin_segment,
    keep_stall,
    metrics_until,
    remove_temporaries,
    require_fresh,
)
from rlinf.core.errors import ConfigError
from rlinf.core.export import write_chrome_trace, write_gantt_png, write_timeline_pair_png
from rlinf.core.files import write_text_atomic
from rlinf.core.phases import mark as mark_phase
from rlinf.core.plan import Plan
from rlinf.core.program import Program
from rlinf.core.schedule import Step
from rlinf.core.timeline import Timeline
from rlinf.core.trace import Trace

OnIteration = Callable[[dict[str, Any]], None]
"""Called with each iteration's metrics, after they are written."""


@attrs.frozen(kw_only=True)
class TrainResult:
    """What a training run produced."""

    run_dir: Path
    metrics: tuple[dict[str, Any], ...]
    program: Program
    complete_before: bool = False
    """A resumed run that had already trained every iteration: only missing final files were written."""
    written: tuple[str, ...] = ()
    """Final files written (with ``complete_before``: the ones that were missing)."""


class Start(enum.Enum):
    """Where a segment's state comes from."""

    FRESH = "fresh"
    """Workers as they start, the driver's random states as the run began."""
    CHECKPOINT = "checkpoint"
    """The newest valid checkpoint of the run directory (``--resume``, a restart after a worker failure)."""
    LIVE = "live"
    """The state the segment before ended in, taken from its running workers (a new plan at an iteration
    boundary)."""


@attrs.frozen(kw_only=True)
class Segment:
    """One plan run from one start state; a run is a sequence of them."""

    choice: PlanChoice
    """The plan, its devices and its prediction."""
    start: Start
    state: RunCheckpoint | None = None
    """The state it starts from (``None`` for a fresh start)."""

    @classmethod
    def fresh(cls, choice: PlanChoice) -> Segment:
        """The chosen plan from iteration 1."""
        return cls(choice=choice, start=Start.FRESH)

    @classmethod
    def from_checkpoint(cls, choice: PlanChoice, checkpoint: RunCheckpoint) -> Segment:
        """The chosen plan from a checkpoint read from the run directory."""
        return cls(choice=choice, start=Start.CHECKPOINT, state=checkpoint)

    @classmethod
    def live(cls, choice: PlanChoice, state: RunCheckpoint) -> Segment:
        """The chosen plan from the state the segment before ended in (not read from disk)."""
        return cls(choice=choice, start=Start.LIVE, state=state)

    @property
    def plan(self) -> Plan:
        """The segment's plan."""
        return self.choice.plan

    @property
    def first_iteration(self) -> int:
        """The first iteration (step) it runs."""
        return 1 if self.state is None else self.state.iteration + 1


@attrs.frozen(kw_only=True)
class MeasuredIteration:
    """An iteration's measured timeline, and whether its ops count as cost samples (not a warm-up)."""

    iteration: int
    timeline: Timeline
    counted: bool


def run(
    request: RunRequest,
    choice: PlanChoice,
    *,
    on_iteration: OnIteration | None = None,
    switches: SwitchRule | None = None,
) -> TrainResult:
    """Train the request's job under ``choice`` for its configured iterations (see the module): the first segment,
    then a next one each time a segment ends early (a worker failure: restarted from the newest checkpoint, up to
    ``request.max_restarts`` times, the failure reported on stderr and kept in ``failure.txt``; it costs the
    iterations since the last checkpoint, ``checkpoint_every``). ``on_iteration`` gets each iteration's metrics;
    ``switches`` may end a segment after an iteration and go on under another plan from the live state (each switch
    printed and kept in ``switches.jsonl``)."""
    segment = first_segment(request, choice)
    log = _Log(request=request, switches=switches or replanner_for(request, choice))
    program = log.program(segment)
    if segment.state is not None and segment.state.iteration >= request.settings.iterations:
        log.rewind(segment)
        log.history = metrics_until(request.out / "metrics.jsonl", segment.state.iteration)
        written = _write_outputs(request, choice, log.measured, only_missing=True)
        return TrainResult(
            run_dir=request.out,
            metrics=tuple(log.history),
            program=program,
            complete_before=True,
            written=written,
        )
    try:
        _run_segments(request, segment, log, on_iteration)
    finally:
        log.close()
    written = _write_outputs(request, choice, log.measured)
    return TrainResult(run_dir=request.out, metrics=tuple(log.history), program=program, written=written)


def first_segment(request: RunRequest, choice: PlanChoice) -> Segment:
    """The run's first segment: fresh, in a run directory without a run, or with ``request.resume`` from the run's
    newest valid checkpoint (refused unless it was written by the same workload, config and plan)."""
    run_dir, job = request.out, request.job
    if not request.resume:
        require_fresh(run_dir)
        return Segment.fresh(choice)
    checkpoint = load_run_checkpoint(run_dir / "checkpoints")
    checkpoint.check_resumable(
        workload=job.name,
        config=job.recorded(request.config),
        plan=choice.plan.to_dict(),
        iterations=request.settings.iterations,
    )
    remove_temporaries(run_dir)
    return Segment.from_checkpoint(choice, checkpoint)


def _run_segments(request: RunRequest, segment: Segment, log: _Log, on_iteration: OnIteration | None) -> None:
    """Run ``segment`` and every segment after it on one set of workers (the first segment's devices)."""
    initial_rng = DriverRng.capture()
    restarts_left = request.max_restarts
    mark_phase("workers_starting")
    with open_workers(request, segment.choice.devices, segment.choice.nodes) as workers:
        following: Segment | None = segment
        while following is not None:
            current = following
            try:
                following = _run_segment(request, current, workers, log, initial_rng, on_iteration)
            except executor.StallError as error:  # a deadlock would stall again: stop
                kept = keep_stall(request.out, error)
                raise executor.StallError(attrs.evolve(error.report, where=str(kept))) from None
            except executor.WorkerError as error:
                kept = _keep_failure(request.out, error)
                if restarts_left == 0:
                    raise executor.WorkerError(
                        f"{error}; traceback: {kept}", error.remote_traceback
                    ) from None
                restarts_left -= 1
                following = restart_segment(request, current.choice)
                log.say(
                    f"rlinf: {error}; restarted the workers at iteration {following.first_iteration} "
                    f"({restarts_left} restarts left)",
                    at=following.first_iteration - 1,
                )


def restart_segment(request: RunRequest, choice: PlanChoice) -> Segment:
    """The segment a run goes on with after a worker failure: from the newest valid checkpoint (loaded as
    ``--resume`` loads one), else fresh."""
    checkpoints = request.out / "checkpoints"
    if checkpoints.is_dir() and read_manifest(checkpoints):
        return Segment.from_checkpoint(choice, load_run_checkpoint(checkpoints))
    return Segment.fresh(choice)


def _run_segment(
    request: RunRequest,
    segment: Segment,
    workers: Any,
    log: _Log,
    initial_rng: DriverRng,
    on_iteration: OnIteration | None,
) -> Segment | None:
    """Start ``segment`` on ``workers`` and run its steps to the run's last; returns the segment that follows
    (``None``: the run is done)."""
    job, config, settings = request.job, request.config, request.settings
    program = log.program(segment)
    specs = job.worker_specs(config, segment.plan, program)
    first = segment.first_iteration
    log.begin(segment, first)
    if segment.state is None:
        workers.start(program, specs)  # fresh workers are in their iteration-1 state
        initial_rng.restore()
    else:
        if log.pending is not None and log.pending[1].fresh_workers:
            workers.close()  # the next start starts new processes
        resume_workers(workers, program, specs, segment.state)
    log.switch_done(segment, workers)
    mark_phase("workers_started")
    lag = program.max_staleness
    # Under a staleness bound k the run takes k more steps: k that fill the buffer (the rollout side alone), then
    # steps that train on the batch produced k steps before, the last k of them on the training side alone: every
    # batch produced is trained on once (rlinf.core.schedule).
    schedule = program.schedule(settings.iterations)
    steps = schedule.num_steps
    recorded, plan_dict = job.recorded(config), segment.plan.to_dict()
    for iteration in range(first, steps + 1):
        due = iteration % settings.checkpoint_every == 0 or iteration == steps
        step = schedule.step(iteration)
        driver_cpu = time.process_time()
        last = executor.run(program, specs, backend=workers, step=step, expected=log.predicted)
        driver_cpu = time.process_time() - driver_cpu
        snapshot = workers.snapshot() if due else None
        buffered = workers.buffered() if due and lag else None
        # The workload counts what was produced so far (a drain step produces nothing new).
        metrics = job.iteration_metrics(last, config, step.produced_iterations)
        metrics["iteration"] = iteration
        if lag:
            metrics["phase"] = step.phase.value
            metrics["trained_iterations"] = step.trained_iterations
        metrics["wall_s"] = time.perf_counter() - log.started
        if last.op_overhead_s:
            metrics["executor_overhead_s"] = statistics.median(last.op_overhead_s)
        metrics["driver_cpu_s"] = driver_cpu
        # Fill and drain steps leave one side idle: their ops are not costs of the plan's steady state.
        counted = step.measures_plan and (iteration > first or steps == first)
        log.record(
            metrics, MeasuredIteration(iteration=iteration, timeline=last.timeline, counted=counted), step
        )
        if on_iteration is not None:
            on_iteration(metrics)
        if snapshot is not None:
            checkpoint = RunCheckpoint(
                iteration=iteration,
                workload=job.name,
                config=recorded,
                plan=plan_dict,
                workers=snapshot,
                driver_rng=DriverRng.capture(),
                measured=kept_iterations(log.measured),
                buffered=None if buffered is None else [batch.to_checkpoint() for batch in buffered],
            )
            save_checkpoint(request.out / "checkpoints", iteration, checkpoint.to_state())
        if log.switches is not None and iteration < steps:
            boundary = Boundary(
                iteration=iteration,
                last_step=steps,
                segment_first=first,
                measured_s=last.timeline.iteration_s,
                counted=counted,
                choice=segment.choice,
                tracker=log.tracker,
            )
            switch = log.switches.after(boundary)
            if switch is not None:
                log.pending = (boundary, switch, time.perf_counter())
                state = RunCheckpoint(
                    iteration=iteration,
                    workload=job.name,
                    config=recorded,
                    plan=plan_dict,
                    workers=workers.snapshot() if snapshot is None else snapshot,
                    driver_rng=DriverRng.capture(),
                    measured=(),
                    buffered=[b.to_checkpoint() for b in buffered or workers.buffered()] if lag else None,
                )
                return Segment.live(switch.choice, state)
    return None


@attrs.define
class _Log:
    """What a run accumulates over its segments: the metrics (``metrics.jsonl``, TensorBoard), the measured
    iterations and the progress bar."""

    request: RunRequest
    switches: SwitchRule | None = None
    predicted: Timeline | None = None
    """The plan's predicted iteration, reported beside each measured one (set by :meth:`begin`)."""
    tracker: Tracker | None = None
    """The predicted iteration tracked from the segment's measured ones (with a prediction)."""
    pending: tuple[Boundary, Switch, float] | None = None
    """A switch made and not yet reported: where, what, and when the iteration before it ended."""
    history: list[dict[str, Any]] = attrs.Factory(list)
    measured: list[MeasuredIteration] = attrs.Factory(list)
    started: float = attrs.Factory(time.perf_counter)
    programs: dict[Plan, Program] = attrs.Factory(dict)
    writer: Any = None
    console: Console | None = None

    def program(self, segment: Segment) -> Program:
        """The checked program of the segment's plan (lowered once per plan: the executor keeps what it learnt of a
        program, e.g. its longest op, across the segments that run it)."""
        plan = segment.plan
        if plan not in self.programs:
            request = self.request
            self.programs[plan] = request.job.lower(
                plan, request.config, segment.choice.num_logical, machine=request.machine
            )
        return self.programs[plan]

    def rewind(self, segment: Segment) -> None:
        """Go back to the measured iterations where ``segment`` starts (its checkpoint's; a live start keeps them)."""
        if segment.start is not Start.LIVE:
            self.measured = (
                [] if segment.state is None else _measured_from(segment.state, self.program(segment))
            )

    def begin(self, segment: Segment, first: int) -> None:
        """:meth:`rewind` to ``segment``, whose first iteration is ``first``, record its plan and cut the metrics
        back to its start (:func:`rlinf.app.run_dir.begin_segment`), and show it on the progress bar."""
        from torch.utils.tensorboard import SummaryWriter

        self.rewind(segment)
        prediction = segment.choice.prediction
        self.predicted = None if prediction is None else prediction.timeline
        if self.predicted is None:
            self.tracker = None
        elif self.tracker is None or self.tracker.online.program is not self.predicted.program:
            self.tracker = Tracker(self.predicted)
        if self.writer is None:
            self.writer = SummaryWriter(str(self.request.out / "tensorboard"))
        if self.console is None:
            steps = self.program(segment).schedule(self.request.settings.iterations).num_steps
            self.console = Console.open(
                total=steps,
                initial=first - 1,
                desc=f"train {segment.plan.mode}",
                progress=self.request.progress,
            )
        self.history = begin_segment(self.request.out, segment.plan.to_yaml(), first - 1)

    def record(self, metrics: dict[str, Any], measured: MeasuredIteration, step: Step) -> None:
        """Append one iteration: its metrics to the file, TensorBoard and the console, its timeline to the
        measured."""
        if self.predicted is not None:
            metrics["predicted_iteration_s"] = self.predicted.iteration_s
        if self.tracker is not None:
            started = time.process_time()
            if measured.counted:
                self.tracker.observe(measured.timeline)
            metrics["tracking_predicted_iteration_s"] = self.tracker.current_s
            metrics["tracking_cpu_s"] = time.process_time() - started
        self.measured.append(measured)
        self.history.append(metrics)
        append_metrics(self.request.out / "metrics.jsonl", metrics)
        mark_phase("iteration_done", iteration=metrics["iteration"])
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and key != "iteration":
                self.writer.add_scalar(key, value, metrics["iteration"])
        self.writer.flush()
        fields = self.request.job.progress(metrics)
        assert self.console is not None, "begin() opens the console"
        figures, line = iteration_figures(metrics, fields), iteration_line(metrics, fields)
        self.console.iteration(metrics["iteration"], figures, line, phase=step.phase)

    def switch_done(self, segment: Segment, workers: Any) -> None:
        """Report the switch that started ``segment`` (if one did): a line on stderr and one in
        ``switches.jsonl``, with the checksums of the workers' state carried and of the state they hold now."""
        if self.pending is None:
            return
        boundary, switch, ended = self.pending
        self.pending = None
        seconds = time.perf_counter() - ended
        assert segment.state is not None, "a switch starts from the live state"
        carried, restored = state_digest(segment.state.workers), state_digest(workers.snapshot())
        assert self.switches is not None, "a switch comes from a rule"
        self.switches.switched(boundary, switch, seconds)
        before, after = boundary.choice.plan, segment.plan
        record_switch(
            self.request.out,
            {
                "iteration": boundary.iteration,
                "from": before.to_dict(),
                "to": after.to_dict(),
                "why": switch.why,
                "predicted_gain_s": switch.predicted_gain_s,
                "switch_s": seconds,
                "state_sha256_carried": carried,
                "state_sha256_restored": restored,
            },
        )
        target = "the same plan" if after == before else after.describe()
        self.say(
            f"rlinf: switched to {target} after iteration {boundary.iteration} ({switch.why}; {seconds:.2f} s)",
            at=boundary.iteration,
        )

    def say(self, line: str, *, at: int) -> None:
        """A line on stderr that does not wait (a restart); ``at``: the iteration the run goes back to."""
        assert self.console is not None, "begin() opens the console"
        self.console.note(line, at=at)

    def close(self) -> None:
        """Close the bar and the TensorBoard writer."""
        if self.console is not None:
            self.console.close()
        if self.writer is not None:
            self.writer.close()


def _keep_failure(run_dir: Path, error: executor.WorkerError) -> Path:
    """Write the failed worker's error and its full traceback to ``RUN_DIR/failure.txt`` (the newest failure; the
    command line shows one line)."""
    path = run_dir / "failure.txt"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    body = error.remote_traceback or "(the worker left no traceback: its process ended without one)\n"
    write_text_atomic(path, f"{stamp} {error}\n\n{body}")
    return path


def _measured_from(state: RunCheckpoint, program: Program) -> list[MeasuredIteration]:
    """The measured iterations a checkpoint kept, as timelines of ``program``."""
    try:
        return [
            MeasuredIteration(
                iteration=kept.iteration,
                counted=kept.counted,
                timeline=Timeline(
                    program=program,
                    start_s=list(kept.start_s),
                    end_s=list(kept.end_s),
                    peak_memory_bytes=list(kept.peak_memory_bytes),
                    source="measured",
                ),
            )
            for kept in state.measured
        ]
    except (TypeError, ValueError, AssertionError) as error:
        raise ConfigError(
            "checkpoint measured timelines",
            type(error).__name__,
            "do not match the program",
            "resume with the plan and config the run was started with",
        ) from None


def _write_outputs(
    request: RunRequest,
    choice: PlanChoice,
    measured: Sequence[MeasuredIteration],
    *,
    only_missing: bool = False,
) -> tuple[str, ...]:
    """The run's final files: the measured trace (every counted iteration's ops as cost samples), the last
    iteration's timeline and Gantt chart, and with a prediction its timeline, how it held and the pair chart.
    Returns the names written (with ``only_missing``, just those that did not exist)."""
    import torch

    from rlinf.app.profiling import dispatch_inclusive_samples

    assert measured, "a run measures at least one iteration"
    job, plan, run_dir = request.job, choice.plan, request.out
    last = measured[-1].timeline

    def trace(path: Path) -> None:
        samples = [s for m in measured if m.counted for s in dispatch_inclusive_samples(m.timeline)]
        provenance = {
            "kind": "profiled",
            "machine": platform.node(),
            "processor": executor.devices.processor_name(),
            "devices": [f"{d.kind}:{d.core}" for d in choice.devices],
            "torch": torch.__version__,
            "source": f"rlinf train ({job.name}, {plan.describe()}, {request.settings.iterations} iterations)",
        }
        workflow, cluster = job.workflow(request.config), request.machine.cluster(choice.num_logical)
        Trace(workflow=workflow, cluster=cluster, provenance=provenance, samples=samples).save(path)

    outputs: dict[str, Callable[[Path], None]] = {
        "trace.json": trace,
        "timeline.json": lambda path: write_chrome_trace(last, path),
        "gantt.png": lambda path: write_gantt_png(last, path),
    }
    if choice.prediction is not None:
        predicted, facts = choice.prediction.timeline, choice.prediction.to_dict()
        interval = choice.prediction.interval_s
        accuracy = prediction_accuracy(predicted.iteration_s, measured, interval)
        if accuracy is not None:
            accuracy = {**accuracy, **{k: v for k, v in facts.items() if k != "predicted_iteration_s"}}
            outputs["prediction.json"] = lambda path: write_text_atomic(
                path, json.dumps(accuracy, indent=1) + "\n"
            )
        outputs["timeline_predicted.json"] = lambda path: write_chrome_trace(predicted, path)
        outputs["gantt_predicted.png"] = lambda path: write_gantt_png(predicted, path)
        outputs["timeline_pair.png"] = lambda path: write_timeline_pair_png(predicted, last, path)
    written = []
    for name, write in outputs.items():
        if not (only_missing and (run_dir / name).exists()):
            write(run_dir / name)
            written.append(name)
    return tuple(written)


def prediction_accuracy(
    predicted_s: float,
    measured: Sequence[MeasuredIteration],
    interval_s: tuple[float, float] | None = None,
) -> dict[str, Any] | None:
    """How the prediction held over a run's counted iterations (warm-up, fill and drain steps aside), in rlinf's one
    error measure, ``measured / predicted - 1`` (positive: the run was slower than predicted): ``bias``, that of
    the median measured iteration (the run's figure, the median of its iterations' errors); the median, 90th
    percentile and largest absolute error of single iterations; with ``interval_s`` whether the median measured
    iteration fell inside it. ``None`` without counted iterations."""
    import numpy as np

    times = [m.timeline.iteration_s for m in measured if m.counted]
    if not times:
        return None
    median = float(np.median(times))
    errors = np.abs(np.asarray(times) / predicted_s - 1.0)
    out = {
        "predicted_iteration_s": predicted_s,
        "measured_median_s": median,
        "iterations": len(times),
        "bias": median / predicted_s - 1.0,
        "median_error": float(np.median(errors)),
        "p90_error": float(np.percentile(errors, 90)),
        "max_error": float(errors.max()),
    }
    if interval_s is not None:
        out["inside_interval"] = bool(interval_s[0] <= median <= interval_s[1])
    return out
