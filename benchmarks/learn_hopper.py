"""Learning benchmark (not run in CI): embodied PPO on Hopper-v5 with the real executor, until 300k env steps.

    python benchmarks/learn_hopper.py --out docs/hopper_learning.png

Target: mean episodic return >= 1000 within 300k env steps. Writes the curve (PNG), the run directory (metrics,
trace, timeline, checkpoints) under ``runs/learn_hopper`` and a JSON artifact next to the PNG (provenance, summary
and every iteration's env steps, mean episodic return and wall time). The docs report the mean of the last three
iterations' returns (``benchmarks/measured_docs.py``), never the best window.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import suite

from executor.devices import available_cores, cpu_devices
from rlinf.app.jobs import Job, get_job
from rlinf.app.plan_choice import PlanChoice
from rlinf.app.request import RunRequest
from rlinf.app.run_dir import default_out
from rlinf.app.runner import run
from rlinf.core.run_settings import RunSettings
from rlinf.workloads.embodied.config import EmbodiedConfig

TARGET_RETURN = 1000.0
BUDGET_STEPS = 300_000


def learning_config(seed: int) -> tuple[Job[EmbodiedConfig], EmbodiedConfig]:
    """CleanRL-like PPO hyperparameters for MuJoCo: 2048 transitions per iteration, 10 epochs, 32 minibatches."""
    settings = RunSettings(iterations=math.ceil(BUDGET_STEPS / (8 * 256)), seed=seed, checkpoint_every=25)
    return get_job("embodied_ppo", settings=settings), EmbodiedConfig(
        env_id="Hopper-v5",
        num_envs=8,
        num_steps=256,
        hidden_sizes=(64, 64),
        learning_rate=3e-4,
        num_epochs=10,
        num_minibatches=16,  # per actor replica; 2 replicas -> 32 minibatches of 64 per epoch
        seed=seed,
    )


def plot(history: list[dict], path: Path) -> None:
    """Episodic return against env steps."""
    points = [(m["env_steps"], m["episodic_return"]) for m in history if m["episodic_return"] is not None]
    with suite.figure(path, (7, 4), dpi=120) as axes:
        axes.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            label="mean episodic return (episodes finished per iteration)",
        )
        axes.axhline(TARGET_RETURN, color="gray", linestyle="--", label=f"target {TARGET_RETURN:.0f}")
        axes.set_xlabel("env steps")
        axes.set_ylabel("episodic return")
        axes.set_title("Hopper-v5, embodied PPO on the rlinf executor (collocated, 2 CPU cores)")
        axes.legend(loc="lower right")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/hopper_learning.png")
    parser.add_argument("--run-dir", help="run directory (default: a new runs/learn_hopper-<time>)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--devices", type=int, default=min(2, len(available_cores())))
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/learn_hopper.py", argv)
    job, config = learning_config(args.seed)
    plan, logical = job.fixed_plan("collocated", args.devices, config)
    history: list[dict] = []
    out = Path(args.out)

    def progress(metrics: dict) -> None:
        history.append(metrics)
        if len(history) % 5 == 0:
            plot(history, out)

    request = RunRequest(job=job, config=config, out=Path(args.run_dir or default_out("learn_hopper")))
    result = run(request, PlanChoice.given(plan, logical, cpu_devices(logical)), on_iteration=progress)
    plot(list(result.metrics), out)
    returns = [m["episodic_return"] for m in result.metrics if m["episodic_return"] is not None]
    first_hit = next(
        (m["env_steps"] for m in result.metrics if (m["episodic_return"] or 0) >= TARGET_RETURN), None
    )
    summary = {
        "env_steps": result.metrics[-1]["env_steps"],
        "final_return": returns[-1] if returns else None,
        "last_3_iteration_mean_return": sum(returns[-3:]) / 3 if len(returns) >= 3 else None,
        "first_iteration_at_or_above_target_env_steps": first_hit,
        "target": TARGET_RETURN,
        "wall_s": result.metrics[-1]["wall_s"],
        "config": job.recorded(config),
        "iterations": [
            {key: m[key] for key in ("iteration", "env_steps", "episodic_return", "wall_s")}
            for m in result.metrics
        ],
    }
    suite.write_artifact(out.with_suffix(".json"), summary, started)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("config", "iterations")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
