"""Learning benchmark (not run in CI): what a staleness bound costs in learning, at equal samples.

    python benchmarks/learn_staleness.py hopper --out docs/staleness_hopper.png   # k = 0, 1, 2 x 3 seeds
    python benchmarks/learn_staleness.py grpo --out docs/staleness_grpo.png       # k = 0, 1, 2 x 2 seeds

Each run trains the same config with the same seed under the same placement, changing only ``max_staleness``:
with k >= 1 the rollout side runs k iterations ahead, so every batch is sampled by a policy k training steps
behind the one that learns from it (the runs record it: ``policy_lag_max``). Hopper: PPO on Hopper-v5 for 300k
env steps (the hyper-parameters of ``benchmarks/learn_hopper.py``), the curve is the episodic return against env
steps sampled, and the score is the mean return of the last three iterations. GRPO: ``examples/grpo_arith.yaml`` (the
addition task, its 150 iterations of 32 prompts x 8 responses, the seed changed), scored by the mean held-out accuracy
(greedy, the config's 500 validation problems) of the last three evaluations. Writes the curves (PNG) and a JSON
artifact beside it (provenance, per k and seed the score and every iteration's samples, score and observed policy lag).

    python benchmarks/learn_staleness.py grpo --rescore docs/staleness_grpo.json   # the scores again, from the runs

``--rescore`` recomputes an artifact's scores from the runs it holds under today's rule (and says so in it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import suite

from executor.devices import available_cores, cpu_devices
from rlinf.app.jobs import Job, load_job_config
from rlinf.app.plan_choice import PlanChoice
from rlinf.app.request import RunRequest
from rlinf.app.runner import run
from rlinf.core.files import write_text_atomic

BOUNDS = (0, 1, 2)
LAST = 3
"""Iterations (Hopper: their mean return) or evaluations (GRPO: their mean accuracy) that score a run: the mean of the
last three, as every learning claim of the docs."""


@attrs.frozen
class Setting:
    """One workload's learning comparison."""

    name: str
    """The workload, as the plot names it."""
    config: Callable[[int], tuple[Job[Any], Any]]
    """The job (with its run settings) and config of a seed."""
    seeds: tuple[int, ...]
    x_key: str
    """The metric on the curve's x axis (samples or env steps sampled)."""
    y_key: str
    """The metric on its y axis."""
    score: Callable[[list[dict]], float]
    """A run's score from its metrics."""
    score_name: str


def _hopper_config(seed: int) -> tuple[Job[Any], Any]:
    from learn_hopper import learning_config

    return learning_config(seed)


def _hopper_score(metrics: list[dict]) -> float:
    returns = [m["episodic_return"] for m in metrics if m.get("episodic_return") is not None]
    return statistics.fmean(returns[-LAST:])


def _grpo_config(seed: int) -> tuple[Job[Any], Any]:
    return load_job_config("examples/grpo_arith.yaml", seed=seed)


def _grpo_score(metrics: list[dict]) -> float:
    scored = [float(m["heldout_accuracy"]) for m in metrics if m.get("heldout_accuracy") is not None]
    return statistics.fmean(scored[-LAST:])


SETTINGS = {
    "hopper": Setting(
        name="embodied_ppo",
        config=_hopper_config,
        seeds=(0, 1, 2),
        x_key="env_steps",
        y_key="episodic_return",
        score=_hopper_score,
        score_name=f"mean episodic return of the last {LAST} iterations",
    ),
    "grpo": Setting(
        name="grpo_hf (addition)",
        config=_grpo_config,
        seeds=(0, 1),
        x_key="samples",
        y_key="heldout_accuracy",
        score=_grpo_score,
        score_name=f"mean held-out (validation) accuracy of the last {LAST} evaluations",
    ),
}


def run_one(setting: Setting, k: int, seed: int, devices: int, run_dir: Path) -> list[dict]:
    """Train one seed under the collocated plan with staleness bound ``k``; every step's metrics."""
    job, config = setting.config(seed)
    plan, logical = job.fixed_plan("collocated", devices, config)
    plan = attrs.evolve(plan, max_staleness=k)
    request = RunRequest(job=job, config=config, out=run_dir)
    result = run(request, PlanChoice.given(plan, logical, cpu_devices(logical)))
    return list(result.metrics)


def plot(setting: Setting, runs: dict[int, dict[int, list[dict]]], path: Path) -> None:
    """One curve per bound and seed (a colour per bound)."""
    with suite.figure(path, (7, 4), dpi=110) as axes:
        for color, (k, seeds) in zip(("C0", "C1", "C2"), runs.items(), strict=False):
            for i, metrics in enumerate(seeds.values()):
                points = [
                    (m[setting.x_key], m[setting.y_key]) for m in metrics if m.get(setting.y_key) is not None
                ]
                axes.plot(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    color=color,
                    alpha=0.8,
                    linewidth=1.2,
                    label=f"max_staleness {k}" if i == 0 else None,
                )
        axes.set_xlabel(setting.x_key.replace("_", " ") + ("" if setting.x_key == "samples" else " sampled"))
        axes.set_ylabel(setting.y_key.replace("_", " "))
        axes.set_title(
            f"{setting.name}: learning at equal samples by staleness bound ({len(runs[0])} seeds each)"
        )
        axes.grid(alpha=0.3)
        axes.legend()


def scored(setting: Setting, by_seed: dict[Any, list[dict]]) -> dict[str, Any]:
    """A bound's ``mean_score`` and per-seed ``scores`` from its runs' metrics."""
    scores = {str(seed): setting.score(metrics) for seed, metrics in by_seed.items()}
    return {"mean_score": statistics.fmean(scores.values()), "scores": scores}


def rescore(workload: str, path: Path, argv: list[str] | None) -> int:
    """Recompute the scores of the artifact at ``path`` from the runs it holds; record that it was rescored."""
    setting = SETTINGS[workload]
    started = suite.begin("python benchmarks/learn_staleness.py", argv)
    artifact = json.loads(path.read_text())
    for bound in artifact["bounds"].values():
        bound.update(scored(setting, bound["runs"]))
    artifact["score"] = setting.score_name
    done = suite.finish(started)
    artifact["rescored"] = {key: done[key] for key in ("command", "commit", "date")}
    write_text_atomic(path, json.dumps(artifact, indent=1) + "\n")
    print(json.dumps({k: b["scores"] for k, b in artifact["bounds"].items()}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(SETTINGS))
    parser.add_argument("--out", help="PNG path (default: docs/staleness_<workload>.png)")
    parser.add_argument("--devices", type=int, default=min(2, len(available_cores())))
    parser.add_argument("--seeds", type=int, help="first N of the setting's seeds")
    parser.add_argument(
        "--keep",
        default="runs/learn_staleness",
        help="where each finished run's metrics are kept, so that an interrupted benchmark resumes (delete to redo)",
    )
    parser.add_argument("--rescore", type=Path, metavar="ARTIFACT", help="recompute this artifact's scores")
    args = parser.parse_args(argv)
    if args.rescore:
        return rescore(args.workload, args.rescore, argv)
    started = suite.begin("python benchmarks/learn_staleness.py", argv)
    setting = SETTINGS[args.workload]
    seeds = setting.seeds[: args.seeds] if args.seeds else setting.seeds
    out = Path(args.out or f"docs/staleness_{args.workload}.png")
    runs: dict[int, dict[int, list[dict]]] = {}
    done = Path(args.keep) / args.workload
    done.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="learn_staleness-") as scratch:
        for k in BOUNDS:
            runs[k] = {}
            for seed in seeds:
                kept = done / f"k{k}-s{seed}.json"
                if kept.exists():  # a finished run of an interrupted benchmark (the runs are deterministic)
                    print(f"max_staleness {k}, seed {seed}: kept from {kept}", flush=True)
                    runs[k][seed] = json.loads(kept.read_text())
                    continue
                print(f"max_staleness {k}, seed {seed}", flush=True)
                runs[k][seed] = run_one(setting, k, seed, args.devices, Path(scratch) / f"k{k}-s{seed}")
                write_text_atomic(kept, json.dumps(runs[k][seed]))
    plot(setting, runs, out)
    summary: dict[str, Any] = {"workload": setting.name, "score": setting.score_name, "bounds": {}}
    for k, by_seed in runs.items():
        lags = [m["policy_lag_max"] for metrics in by_seed.values() for m in metrics if "policy_lag_max" in m]
        summary["bounds"][str(k)] = {
            **scored(setting, by_seed),
            "largest_policy_lag": max(lags, default=None),
            "runs": {
                str(seed): [
                    {key: m.get(key) for key in ("iteration", setting.x_key, setting.y_key, "policy_lag_max")}
                    for m in metrics
                ]
                for seed, metrics in by_seed.items()
            },
        }
    suite.write_artifact(out.with_suffix(".json"), summary, started)
    print(
        json.dumps(
            {k: {"mean": b["mean_score"], "scores": b["scores"]} for k, b in summary["bounds"].items()},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
