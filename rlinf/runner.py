"""The plan-then-run loop of embodied PPO: lower the workflow under a plan, execute it once per iteration with
real workers, and write metrics, TensorBoard scalars, the measured trace and timeline, and checkpoints.

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
import numpy as np

import executor
from executor.local import RunResult
from rlinf.cluster import DEVICE_PRESETS, Cluster
from rlinf.export import write_chrome_trace, write_gantt_png
from rlinf.lowering import lower
from rlinf.plan import Plan
from rlinf.program import Program
from rlinf.trace import Trace
from rlinf.workloads.embodied.actor_worker import ActorWorker
from rlinf.workloads.embodied.config import EmbodiedConfig, check_env_id
from rlinf.workloads.embodied.env_worker import EnvWorker
from rlinf.workloads.embodied.rollout_worker import RolloutWorker
from rlinf.workloads.embodied.workflow import check_plan_fits, embodied_workflow


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


def worker_specs(config: EmbodiedConfig) -> dict[str, executor.WorkerSpec]:
    """The embodied components' workers."""
    return {
        "env": executor.WorkerSpec(factory=EnvWorker, config=config),
        "rollout": executor.WorkerSpec(factory=RolloutWorker, config=config),
        "actor": executor.WorkerSpec(factory=ActorWorker, config=config),
    }


def iteration_metrics(
    result: RunResult, config: EmbodiedConfig, iteration: int, total_steps: int
) -> dict[str, Any]:
    """Per-iteration metrics from a measured run: returns of finished episodes, throughput, losses."""
    timeline = result.timeline
    env_steps = config.num_envs * config.num_steps
    loop_spans = [s for s in timeline.spans if s.name in ("act", "env_step")]
    loop_s = max(s.end_s for s in loop_spans) - min(s.start_s for s in loop_spans)
    returns = [r for info in result.infos for r in info.info.get("episode_returns", [])]
    losses: dict[str, list[float]] = {}
    for info in result.infos:
        if info.op_name == "train":
            for key, value in info.info.items():
                losses.setdefault(key, []).append(float(value))
    metrics: dict[str, Any] = {
        "iteration": iteration,
        "env_steps": total_steps,
        "iteration_s": timeline.iteration_s,
        "env_steps_per_s": env_steps / timeline.iteration_s,
        "rollout_env_steps_per_s": env_steps / loop_s if loop_s > 0 else 0.0,
        "episodes": len(returns),
        "episodic_return": float(np.mean(returns)) if returns else None,
    }
    metrics.update({key: float(np.mean(values)) for key, values in sorted(losses.items())})
    return metrics


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
    config: EmbodiedConfig,
    plan: Plan,
    num_devices: int,
    run_dir: str | Path,
    *,
    devices: tuple[executor.Device, ...] | None = None,
    progress: bool = True,
    on_iteration: Callable[[dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Train for ``config.iterations`` iterations under ``plan`` on ``num_devices`` (logical) devices."""
    import torch

    obs_dim, act_dim = check_env_id(config.env_id)
    check_plan_fits(plan, config)
    workflow = embodied_workflow(config, obs_dim, act_dim)
    cluster = cpu_cluster(num_devices)
    program = lower(workflow, plan, cluster)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "plan.yaml").write_text(plan.to_yaml())
    devices = devices or executor.cpu_devices(num_devices)
    specs = worker_specs(config)
    metrics_path = run_dir / "metrics.jsonl"
    metrics_path.write_text("")
    from torch.utils.tensorboard import SummaryWriter
    from tqdm import tqdm

    writer = SummaryWriter(str(run_dir / "tensorboard"))
    samples: list = []
    history: list[dict[str, Any]] = []
    total_steps = 0
    last: RunResult | None = None
    started = time.perf_counter()
    try:
        with executor.LocalBackend(devices) as backend:
            bar = tqdm(
                range(1, config.iterations + 1), desc=f"train {plan.mode}", unit="it", disable=not progress
            )
            for iteration in bar:
                last = executor.run(program, specs, backend=backend)
                total_steps += config.num_envs * config.num_steps
                metrics = iteration_metrics(last, config, iteration, total_steps)
                metrics["wall_s"] = time.perf_counter() - started
                samples.extend(last.samples)
                history.append(metrics)
                with metrics_path.open("a") as stream:
                    stream.write(json.dumps(metrics) + "\n")
                for key, value in metrics.items():
                    if isinstance(value, (int, float)) and key != "iteration":
                        writer.add_scalar(key, value, total_steps)
                writer.flush()
                shown = metrics["episodic_return"]
                bar.set_postfix(
                    ret="-" if shown is None else f"{shown:.0f}", sps=f"{metrics['env_steps_per_s']:.0f}"
                )
                if on_iteration is not None:
                    on_iteration(metrics)
                if iteration % config.checkpoint_every == 0 or iteration == config.iterations:
                    state = {
                        "iteration": iteration,
                        "env_steps": total_steps,
                        "config": attrs.asdict(config),
                        "actor": backend.call("actor", "checkpoint"),
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
        "source": f"rlinf train ({config.env_id}, {plan.describe()}, {config.iterations} iterations)",
    }
    Trace(workflow=workflow, cluster=cluster, provenance=provenance, samples=samples).save(
        run_dir / "trace.json"
    )
    write_chrome_trace(last.timeline, run_dir / "timeline.json")
    write_gantt_png(last.timeline, run_dir / "gantt.png")
    return TrainResult(run_dir=run_dir, metrics=tuple(history), program=program)
