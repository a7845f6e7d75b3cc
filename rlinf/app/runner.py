"""The training loop of any job (:mod:`rlinf.app.jobs`): lower its workflow under a plan, execute the program once per
iteration with real workers, and write metrics, TensorBoard scalars, the measured trace and timeline, and checkpoints.

Everything this writes lives under the run directory: ``plan.yaml``, ``metrics.jsonl``, ``tensorboard/``,
``trace.json`` (every op of every iteration but the first (warm-up, when there are more) as a dispatch-inclusive
cost sample, see :mod:`rlinf.app.profiling`; merge it into the next profile with ``--merge-trace``), ``timeline.json``
(Chrome trace of the last iteration), ``gantt.png`` and ``checkpoints/`` (:mod:`rlinf.app.checkpoint`: atomic,
checksummed, the last 3 kept). Given the predicted timeline of the plan (``--mode auto``), each iteration's metrics hold ``predicted_iteration_s`` too,
and the run directory also gets ``timeline_predicted.json``, ``gantt_predicted.png`` and ``timeline_pair.png``
(predicted above measured). The planning step of ``--mode auto`` is :mod:`rlinf.app.auto`.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

import executor
from rlinf.app.checkpoint import (
    LoadedCheckpoint,
    check_resumable,
    driver_rng_state,
    load_latest,
    read_manifest,
    restore_driver_rng,
    resume_workers,
    save_checkpoint,
)
from rlinf.app.console import Console, Progress, iteration_figures, iteration_line
from rlinf.app.jobs import C, Job
from rlinf.app.run_dir import (
    append_metrics,
    keep_stall,
    metrics_until,
    remove_temporaries,
    require_fresh,
)
from rlinf.core.cluster import CPU_MACHINE, Cluster, Machine
from rlinf.core.export import write_chrome_trace, write_gantt_png, write_timeline_pair_png
from rlinf.core.files import write_text_atomic
from rlinf.core.phases import mark as mark_phase
from rlinf.core.plan import Plan
from rlinf.core.program import Program
from rlinf.core.timeline import Timeline
from rlinf.core.trace import Trace


@attrs.frozen(kw_only=True)
class TrainResult:
    """What a training run produced."""

    run_dir: Path
    metrics: tuple[dict[str, Any], ...]
    program: Program
    complete_before: bool = False
    """``--resume`` of a run that had already trained every iteration: only missing final files were written."""
    written: tuple[str, ...] = ()
    """Final files written (with ``complete_before``: the ones that were missing)."""


def train(
    job: Job[C],
    config: C,
    plan: Plan,
    num_devices: int,
    run_dir: str | Path,
    *,
    devices: tuple[executor.Device, ...] | None = None,
    progress: Progress = True,
    on_iteration: Callable[[dict[str, Any]], None] | None = None,
    predicted: Timeline | None = None,
    prediction_facts: dict[str, Any] | None = None,
    backend: str = "local",
    address: str | None = None,
    nodes: Sequence[int] | None = None,
    resume: LoadedCheckpoint | None = None,
    max_restarts: int = 0,
    machine: Machine = CPU_MACHINE,
) -> TrainResult:
    """Train ``job`` for its configured iterations under ``plan`` on ``num_devices`` (logical) devices;
    ``predicted`` is the simulated timeline of the same program, reported next to each measured iteration;
    ``prediction_facts`` (:meth:`rlinf.app.held_out.Prediction.to_dict`: where it came from, its interval) go into
    ``prediction.json`` beside how it held. ``progress``: a bar in a terminal, else a line every few iterations
    (:mod:`rlinf.app.console`).
    ``backend`` is ``local`` or ``ray`` (``address``: a Ray cluster; ``nodes``: plan node per device); ``resume``
    continues from a checkpoint of ``run_dir`` (:func:`rlinf.app.checkpoint.load_latest`) as if never stopped. When a
    worker fails (dies, raises, stalls), up to ``max_restarts`` times the workers are restarted from the newest
    checkpoint (or from scratch before the first) and training goes on, as a ``--resume`` would; the failure is
    reported on stderr. A failure costs the iterations since the last checkpoint (``checkpoint_every``)."""
    options = job.settings
    workflow = job.workflow(config)
    cluster = machine.cluster(num_devices)
    program = job.lower(plan, config, num_devices, machine=machine)
    run_dir = Path(run_dir)
    if resume is None:
        require_fresh(run_dir)
    else:
        check_resumable(resume.state, workload=job.name, config=job.recorded(config), plan=plan.to_dict())
        remove_temporaries(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run_dir / "plan.yaml", plan.to_yaml())
    devices = devices or executor.cpu_devices(cluster.num_ids)
    metrics_path = run_dir / "metrics.jsonl"
    history: list[dict[str, Any]] = metrics_until(metrics_path, resume.iteration if resume else 0)
    measured = [] if resume is None else _measured_from(resume.state, program)
    if resume is not None and resume.iteration >= options.iterations:
        written = _write_outputs(
            job, plan, options.iterations, workflow, cluster, devices, measured, predicted, run_dir,
            only_missing=True, prediction_facts=prediction_facts,
        )  # fmt: skip
        return TrainResult(
            run_dir=run_dir, metrics=tuple(history), program=program, complete_before=True, written=written
        )
    measured = _train_loop(
        job, config, plan, program, run_dir, history, measured,
        devices=devices, progress=progress, on_iteration=on_iteration, predicted=predicted,
        backend=backend, address=address, nodes=nodes, resume=resume, max_restarts=max_restarts,
    )  # fmt: skip
    written = _write_outputs(
        job, plan, options.iterations, workflow, cluster, devices, measured, predicted, run_dir,
        prediction_facts=prediction_facts,
    )  # fmt: skip
    return TrainResult(run_dir=run_dir, metrics=tuple(history), program=program, written=written)


@attrs.frozen(kw_only=True)
class MeasuredIteration:
    """An iteration's measured timeline, and whether its ops count as cost samples (not a warm-up)."""

    iteration: int
    timeline: Timeline
    counted: bool


def _train_loop(
    job: Job[C],
    config: C,
    plan: Plan,
    program: Program,
    run_dir: Path,
    history: list[dict[str, Any]],
    measured: list[MeasuredIteration],
    *,
    devices: tuple[executor.Device, ...],
    progress: Progress,
    on_iteration: Callable[[dict[str, Any]], None] | None,
    predicted: Timeline | None,
    backend: str,
    address: str | None,
    nodes: Sequence[int] | None,
    resume: LoadedCheckpoint | None,
    max_restarts: int,
) -> list[MeasuredIteration]:
    """Run the iterations left, appending to ``history`` (the metrics) and ``measured``; returns ``measured``."""
    from torch.utils.tensorboard import SummaryWriter

    options = job.settings
    specs = job.worker_specs(config, plan, program)
    lag = program.max_staleness
    # Under a staleness bound k the run takes k more steps: k that fill the buffer (the rollout side alone), then
    # steps that train on the batch produced k steps before, the last k of them on the training side alone: every
    # batch produced is trained on once (rlinf.core.schedule).
    schedule = program.schedule(options.iterations)
    steps = schedule.num_steps
    metrics_path = run_dir / "metrics.jsonl"
    writer = SummaryWriter(str(run_dir / "tensorboard"))
    started = time.perf_counter()
    initial_rng = driver_rng_state()
    restarts_left = max_restarts
    try:
        mark_phase("workers_starting")
        watchdog = executor.Watchdog(floor_s=options.watchdog_s)
        with executor.open_backend(
            backend, devices, address=address, nodes=nodes, watchdog=watchdog
        ) as workers:
            first = 1 if resume is None else resume_workers(workers, program, specs, resume)
            mark_phase("workers_started")
            console = Console.open(
                total=steps, initial=first - 1, desc=f"train {plan.mode}", progress=progress
            )
            iteration = first
            while iteration <= steps:
                due = iteration % options.checkpoint_every == 0 or iteration == steps
                step = schedule.step(iteration)
                try:
                    driver_cpu = time.process_time()
                    last = executor.run(program, specs, backend=workers, step=step, expected=predicted)
                    driver_cpu = time.process_time() - driver_cpu
                    snapshot = workers.snapshot() if due else None
                    buffered = workers.buffered() if due and lag else None
                except executor.StallError as error:  # a deadlock would stall again: stop
                    kept = keep_stall(run_dir, error)
                    raise executor.StallError(attrs.evolve(error.report, where=str(kept))) from None
                except executor.WorkerError as error:
                    kept = _keep_failure(run_dir, error)
                    if restarts_left == 0:
                        raise executor.WorkerError(
                            f"{error}; traceback: {kept}", error.remote_traceback
                        ) from None
                    restarts_left -= 1
                    restarted = _restart(workers, program, specs, run_dir / "checkpoints", initial_rng)
                    first = iteration = 1 if restarted is None else restarted.iteration + 1
                    measured[:] = [] if restarted is None else _measured_from(restarted.state, program)
                    history[:] = metrics_until(metrics_path, iteration - 1)
                    console.note(
                        f"rlinf: {error}; restarted the workers at iteration {iteration} "
                        f"({restarts_left} restarts left)",
                        at=iteration - 1,
                    )
                    continue
                # The workload counts what was produced so far (a drain step produces nothing new).
                metrics = job.iteration_metrics(last, config, step.produced_iterations)
                metrics["iteration"] = iteration
                if lag:
                    metrics["phase"] = step.phase.value
                    metrics["trained_iterations"] = step.trained_iterations
                metrics["wall_s"] = time.perf_counter() - started
                if last.op_overhead_s:
                    metrics["executor_overhead_s"] = statistics.median(last.op_overhead_s)
                metrics["driver_cpu_s"] = driver_cpu
                if predicted is not None:
                    metrics["predicted_iteration_s"] = predicted.iteration_s
                # Fill and drain steps leave one side idle: their ops are not costs of the plan's steady state.
                counted = step.measures_plan and (iteration > first or steps == first)
                measured.append(
                    MeasuredIteration(iteration=iteration, timeline=last.timeline, counted=counted)
                )
                history.append(metrics)
                append_metrics(metrics_path, metrics)
                mark_phase("iteration_done", iteration=iteration)
                for key, value in metrics.items():
                    if isinstance(value, (int, float)) and key != "iteration":
                        writer.add_scalar(key, value, iteration)
                writer.flush()
                fields = job.progress(metrics)
                console.iteration(
                    iteration,
                    iteration_figures(metrics, fields),
                    iteration_line(metrics, fields),
                    phase=step.phase,
                )
                if on_iteration is not None:
                    on_iteration(metrics)
                if snapshot is not None:
                    state = {
                        "iteration": iteration,
                        "workload": job.name,
                        "config": job.recorded(config),
                        "plan": plan.to_dict(),
                        "workers": snapshot,
                        "driver_rng": driver_rng_state(),
                        "measured": _measured_state(measured),
                    }
                    if buffered is not None:
                        state["buffered"] = [batch.to_checkpoint() for batch in buffered]
                    save_checkpoint(run_dir / "checkpoints", iteration, state)
                iteration += 1
            console.close()
    finally:
        writer.close()
    return measured


def _keep_failure(run_dir: Path, error: executor.WorkerError) -> Path:
    """Write the failed worker's error and its full traceback to ``RUN_DIR/failure.txt`` (the newest failure; the
    command line shows one line)."""
    path = run_dir / "failure.txt"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    body = error.remote_traceback or "(the worker left no traceback: its process ended without one)\n"
    write_text_atomic(path, f"{stamp} {error}\n\n{body}")
    return path


def _measured_state(measured: Sequence[MeasuredIteration]) -> dict[str, Any]:
    """What a checkpoint keeps of the measured iterations: the counted ones and the last (tensors)."""
    import torch

    kept = [m for m in measured if m.counted]
    if measured and not measured[-1].counted:
        kept.append(measured[-1])
    return {
        "iteration": [m.iteration for m in kept],
        "counted": [m.counted for m in kept],
        "start_s": torch.tensor([m.timeline.start_s for m in kept], dtype=torch.float64),
        "end_s": torch.tensor([m.timeline.end_s for m in kept], dtype=torch.float64),
        "peak_memory_bytes": [list(m.timeline.peak_memory_bytes) for m in kept],
    }


def _measured_from(state: dict[str, Any], program: Program) -> list[MeasuredIteration]:
    """The measured iterations a checkpoint kept (none for a checkpoint without them)."""
    from rlinf.core.errors import ConfigError

    kept: Any = state.get("measured")
    try:
        return [
            MeasuredIteration(
                iteration=int(iteration),
                counted=bool(counted),
                timeline=Timeline(
                    program=program,
                    start_s=[float(x) for x in start],
                    end_s=[float(x) for x in end],
                    peak_memory_bytes=[int(x) for x in peak],
                    source="measured",
                ),
            )
            for iteration, counted, start, end, peak in zip(
                kept["iteration"],
                kept["counted"],
                kept["start_s"].tolist(),
                kept["end_s"].tolist(),
                kept["peak_memory_bytes"],
                strict=True,
            )
        ]
    except (KeyError, TypeError, ValueError, AttributeError, AssertionError) as error:
        raise ConfigError(
            "checkpoint measured timelines",
            type(error).__name__,
            "do not match the program",
            "resume with the plan and config the run was started with",
        ) from None


def _write_outputs(
    job: Job[Any],
    plan: Plan,
    num_iterations: int,
    workflow: Any,
    cluster: Cluster,
    devices: Sequence[executor.Device],
    measured: Sequence[MeasuredIteration],
    predicted: Timeline | None,
    run_dir: Path,
    *,
    only_missing: bool = False,
    prediction_facts: dict[str, Any] | None = None,
) -> tuple[str, ...]:
    """The run's final files: the measured trace (every counted iteration's ops as cost samples), the last
    iteration's timeline and Gantt chart, and with a prediction its timeline and the pair chart. Returns the
    names written (with ``only_missing``, just those that did not exist)."""
    import torch

    from rlinf.app.profiling import dispatch_inclusive_samples

    assert measured, "a run measures at least one iteration"
    last = measured[-1].timeline

    def trace(path: Path) -> None:
        samples = [s for m in measured if m.counted for s in dispatch_inclusive_samples(m.timeline)]
        provenance = {
            "kind": "profiled",
            "machine": platform.node(),
            "processor": executor.devices.processor_name(),
            "devices": [f"{d.kind}:{d.core}" for d in devices],
            "torch": torch.__version__,
            "source": f"rlinf train ({job.name}, {plan.describe()}, {num_iterations} iterations)",
        }
        Trace(workflow=workflow, cluster=cluster, provenance=provenance, samples=samples).save(path)

    outputs: dict[str, Callable[[Path], None]] = {
        "trace.json": trace,
        "timeline.json": lambda path: write_chrome_trace(last, path),
        "gantt.png": lambda path: write_gantt_png(last, path),
    }
    if predicted is not None:
        facts = prediction_facts or {}
        interval = facts.get("interval_s")
        accuracy = prediction_accuracy(
            predicted.iteration_s, measured, None if interval is None else (interval[0], interval[1])
        )
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


def _restart(
    workers: Any, program: Program, specs: Any, checkpoints: Path, initial_rng: dict[str, Any]
) -> LoadedCheckpoint | None:
    """Restart the workers after a failure: from the newest valid checkpoint (returned; loaded as ``--resume``
    loads one), else from scratch (``None``)."""
    if checkpoints.is_dir() and read_manifest(checkpoints):
        loaded = load_latest(checkpoints)
        resume_workers(workers, program, specs, loaded)
        return loaded
    workers.start(program, specs)  # fresh workers are in their iteration-1 state
    restore_driver_rng(initial_rng)
    return None
