"""Learning benchmark of the GRPO workload's addition task through the executor, from scratch.

``rlinf train`` from scratch (the
model, its BPE and the warm start built into a fresh cache), then the held-out accuracy curves from the run's
metrics.

    python benchmarks/learn_grpo_arith.py [--mode collocated] [--out runs/grpo_learning]

It runs ``rlinf train examples/grpo_arith.yaml --mode <mode> --out <out> --set cache_dir=<out>/cache --set
eval.sets=[test, validation]`` (150 GRPO iterations, both held-out sets every 10) and writes the curve to
``docs/grpo_arith_learning.png`` and its JSON artifact next to it (provenance, wall time, the warm start's
``teacher_error_rate``, both sets' curves, every iteration's reward and time). The headline is the **test** set's
(500 problems no setting was chosen on; the example's warm start was tuned on the validation set), as the mean of the
last :data:`NUM_LAST` evaluations. (``docs/grpo_executor_learning.{png,json}`` are the same benchmark's run on the
former arithmetic workload, whose only held-out set was the one its settings were tuned on.)
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import suite

from rlinf.app.jobs import load_job_config
from rlinf.cli import main as rlinf_main

NUM_LAST = 3
"""Evaluations whose mean accuracy is the run's figure (every learning claim of the docs: the mean of the last 3)."""
SETS = "eval.sets=[test, validation]"
"""Both held-out sets, the test set first (the one ``heldout_accuracy`` reports)."""


def plot(curve: list[tuple[int, float]], warm: float, path: Path, title: str) -> None:
    """Held-out accuracy per iteration, with the warm start as a dashed line."""
    with suite.figure(path, (6, 4), dpi=120) as axes:
        axes.plot([0] + [i for i, _ in curve], [100 * warm] + [100 * a for _, a in curve], marker="o")
        axes.axhline(100 * warm, color="gray", linestyle="--", label="warm start")
        axes.set(xlabel="GRPO iteration", ylabel="test-set accuracy (%, greedy)", title=title)
        axes.legend()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="examples/grpo_arith.yaml")
    parser.add_argument("--mode", default="collocated")
    parser.add_argument("--out", type=Path, default=Path("runs/grpo_learning"))
    parser.add_argument("--png", type=Path, default=Path("docs/grpo_arith_learning.png"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    args = parser.parse_args(argv)
    shutil.rmtree(args.out, ignore_errors=True)
    command = [
        "train",
        args.config,
        "--mode",
        args.mode,
        "--out",
        str(args.out),
        "--no-progress",
        "--set",
        f"cache_dir={args.out / 'cache'}",
        "--set",
        SETS,
        *(item for pair in args.set for item in ("--set", pair)),
    ]
    measurement = suite.begin("python benchmarks/learn_grpo_arith.py", argv)
    job, config = load_job_config(args.config, [SETS, *args.set])
    started = time.perf_counter()
    code = rlinf_main(command)
    wall_s = time.perf_counter() - started
    if code != 0:
        return code
    metrics = suite.metrics_of(args.out)
    warm = float(metrics[0]["warm_start_accuracy"])
    evaluated = [m for m in metrics if "heldout_accuracy" in m]
    curve = [(m["iteration"], float(m["heldout_accuracy"])) for m in evaluated]
    final = curve[-1][1]
    last_mean = sum(a for _, a in curve[-NUM_LAST:]) / NUM_LAST
    title = (
        f"rlinf train, {args.mode}: test set {100 * warm:.1f}% -> {100 * last_mean:.1f}%\n(mean of the last "
        f"{NUM_LAST} evaluations) in {wall_s / 60:.1f} min"
    )
    plot(curve, warm, args.png, title)
    document = {
        "rlinf_command": "rlinf " + " ".join(command),
        "wall_s": wall_s,
        "first_iteration_wall_s": metrics[0]["wall_s"],
        "teacher_error_rate": config.warm_start.teacher_error_rate,
        "granularity": job.settings.granularity,
        "reported_set": "test",
        "warm_start_accuracy": warm,
        "warm_start_validation_accuracy": float(metrics[0]["warm_start_validation_accuracy"]),
        "final_accuracy": final,
        "num_last_evaluations": NUM_LAST,
        "last_mean_accuracy": last_mean,
        "gain_points": 100 * (last_mean - warm),
        "curve": [
            {
                "iteration": m["iteration"],
                "heldout_accuracy": float(m["heldout_accuracy"]),
                "validation_accuracy": float(m["validation_accuracy"]),
            }
            for m in evaluated
        ],
        "mean_reward": [m["mean_reward"] for m in metrics],
        "iteration_s": [m["iteration_s"] for m in metrics],
    }
    suite.write_artifact(args.png.with_suffix(".json"), document, measurement)
    print(
        f"test-set accuracy: warm start {100 * warm:.1f}% -> {100 * last_mean:.1f}% (mean of the last {NUM_LAST} "
        f"evaluations; {100 * (last_mean - warm):+.1f} points) in {wall_s / 60:.1f} min wall (warm start included); "
        f"wrote {args.png}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
