"""The training loop of any job (:mod:`rlinf.jobs`): lower its workflow under a plan, execute the program once per
iteration with real workers, and write metrics, TensorBoard scalars, the measured trace and timeline, and checkpoints.

Everything this writes lives under the run directory: ``plan.yaml``, ``metrics.jsonl``, ``tensorboard/``,
``trace.json`` (every op of every iteration as a cost sample), ``timeline.json`` (Chrome trace of the last
iteration), ``gantt.png`` and ``checkpoints/iter_NNNNNN.pt`` (written atomically).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

import executor
from executor.local import RunResult
from rlinf.cluster import DEVICE_PRESETS, Cluster
from rlinf.export import write_chrome_trace, write_gantt_png
from rlinf.jobs import Job
from rlinf.lowering import lower
from rlinf.plan import Plan
from rlinf.program import Program
from rlinf.trace import Trace


@attrs.frozen(kw_only=True)
class TrainResult:
    """What a training run produced."""

    run_dir: Path
    metrics: tuple[dict[str, Any], ...]
    program: Program


def cpu_cluster(num_devices: int) -> Cluster:
    """One node of ``num_devices`` CPU-core devices."""
    device, links = DEVICE_PRESETS["CPU"]
    return Cluster(num_nodes=1, devices_per_node=num_devices, device=device, links=links)


def _save(state: dict[str, Any], stream: Any) -> None:
    import torch

    torch.save(state, stream)


def write_atomic_bytes(path: Path, writer: Callable[[Any], None]) -> None:
    """Call ``writer(stream)`` on a temporary file next to ``path``, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            writer(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def train(
    job: Job,
    config: Any,
    plan: Plan,
    num_devices: int,
    run_dir: str | Path,
    *,
    devices: tuple[executor.Device, ...] | None = None,
    progress: bool = True,
    on_iteration: Callable[[dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Train ``job`` for its configured iterations under ``plan`` on ``num_devices`` (logical) devices."""
    import torch

    options = job.options(config)
    job.check_plan(plan, config)
    workflow = job.workflow(config)
    cluster = cpu_cluster(num_devices)
    program = lower(workflow, plan, cluster)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "plan.yaml").write_text(plan.to_yaml())
    devices = devices or executor.cpu_devices(num_devices)
    specs = job.worker_specs(config)
    metrics_path = run_dir / "metrics.jsonl"
    metrics_path.write_text("")
    from torch.utils.tensorboard import SummaryWriter
    from tqdm import tqdm

    writer = SummaryWriter(str(run_dir / "tensorboard"))
    samples: list = []
    history: list[dict[str, Any]] = []
    last: RunResult | None = None
    started = time.perf_counter()
    try:
        with executor.LocalBackend(devices) as backend:
            bar = tqdm(
                range(1, options.iterations + 1), desc=f"train {plan.mode}", unit="it", disable=not progress
            )
            for iteration in bar:
                last = executor.run(program, specs, backend=backend)
                metrics = job.iteration_metrics(last, config, iteration)
                metrics["wall_s"] = time.perf_counter() - started
                samples.extend(last.samples)
                history.append(metrics)
                with metrics_path.open("a") as stream:
                    stream.write(json.dumps(metrics) + "\n")
                for key, value in metrics.items():
                    if isinstance(value, (int, float)) and key != "iteration":
                        writer.add_scalar(key, value, iteration)
                writer.flush()
                bar.set_postfix(job.progress(metrics))
                if on_iteration is not None:
                    on_iteration(metrics)
                if iteration % options.checkpoint_every == 0 or iteration == options.iterations:
                    state = {
                        "iteration": iteration,
                        "workload": job.name,
                        "config": attrs.asdict(config),
                        "plan": plan.to_dict(),
                        **job.checkpoint(backend),
                    }
                    write_atomic_bytes(
                        run_dir / "checkpoints" / f"iter_{iteration:06d}.pt", functools.partial(_save, state)
                    )
    finally:
        writer.close()
    assert last is not None
    provenance = {
        "kind": "profiled",
        "machine": platform.node(),
        "processor": platform.processor() or platform.machine(),
        "devices": [f"{d.kind}:{d.core}" for d in devices],
        "torch": torch.__version__,
        "source": f"rlinf train ({job.name}, {plan.describe()}, {options.iterations} iterations)",
    }
    Trace(workflow=workflow, cluster=cluster, provenance=provenance, samples=samples).save(
        run_dir / "trace.json"
    )
    write_chrome_trace(last.timeline, run_dir / "timeline.json")
    write_gantt_png(last.timeline, run_dir / "gantt.png")
    return TrainResult(run_dir=run_dir, metrics=tuple(history), program=program)
