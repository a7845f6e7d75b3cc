"""Learning benchmark of the GRPO workload's addition task through the executor: ``rlinf train`` from scratch (the
model, its BPE and the warm start built into a fresh cache), then the held-out accuracy curve from the run's
metrics.

    python benchmarks/learn_grpo_arith.py [--mode collocated] [--out runs/grpo_learning]

It runs ``rlinf train examples/grpo_arith.yaml --mode <mode> --out <out> --set cache_dir=<out>/cache``
(150 GRPO iterations, held-out accuracy every 10) and writes the curve to ``docs/grpo_arith_learning.png`` and its
JSON artifact next to it (provenance, wall time, the warm start's ``teacher_error_rate``, warm-start and final
accuracy, curve, every iteration's reward and time). (``docs/grpo_executor_learning.{png,json}`` are the same
benchmark's run on the former arithmetic workload.)
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import provenance

from rlinf.app.jobs import load_job_config
from rlinf.cli import main as rlinf_main


def plot(curve: list[tuple[int, float]], warm: float, path: Path, title: str) -> None:
    """Held-out accuracy per iteration, with the warm start as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(figsize=(6, 4))
    axes.plot([0] + [i for i, _ in curve], [100 * warm] + [100 * a for _, a in curve], marker="o")
    axes.axhline(100 * warm, color="gray", linestyle="--", label="warm start")
    axes.set(xlabel="GRPO iteration", ylabel="held-out accuracy (%, greedy)", title=title)
    axes.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


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
        *(item for pair in args.set for item in ("--set", pair)),
    ]
    measurement = provenance.begin("python benchmarks/learn_grpo_arith.py", argv)
    job, config = load_job_config(args.config, args.set)
    started = time.perf_counter()
    code = rlinf_main(command)
    wall_s = time.perf_counter() - started
    if code != 0:
        return code
    metrics = [json.loads(line) for line in (args.out / "metrics.jsonl").read_text().splitlines()]
    warm = float(metrics[0]["warm_start_accuracy"])
    curve = [(m["iteration"], float(m["heldout_accuracy"])) for m in metrics if "heldout_accuracy" in m]
    final = curve[-1][1]
    title = f"rlinf train, {args.mode}: {100 * warm:.1f}% -> {100 * final:.1f}% in {wall_s / 60:.1f} min"
    plot(curve, warm, args.png, title)
    document = {
        "rlinf_command": "rlinf " + " ".join(command),
        "wall_s": wall_s,
        "first_iteration_wall_s": metrics[0]["wall_s"],
        "teacher_error_rate": config.warm_start.teacher_error_rate,
        "granularity": job.settings.granularity,
        "warm_start_accuracy": warm,
        "final_accuracy": final,
        "gain_points": 100 * (final - warm),
        "curve": [{"iteration": i, "heldout_accuracy": a} for i, a in curve],
        "mean_reward": [m["mean_reward"] for m in metrics],
        "iteration_s": [m["iteration_s"] for m in metrics],
    }
    provenance.write_artifact(args.png.with_suffix(".json"), document, measurement)
    print(
        f"held-out accuracy: warm start {100 * warm:.1f}% -> {100 * final:.1f}% ({100 * (final - warm):+.1f} "
        f"points) in {wall_s / 60:.1f} min wall (warm start included); wrote {args.png}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
