"""Learning benchmark of GRPO on a Hugging Face causal LM through the executor, from scratch.

``rlinf train`` from scratch (model
built, BPE trained and warm start trained into a fresh cache), then the held-out accuracy and reward curves and
the response-length histogram from the run's metrics. The gain it reports is the mean of the last three
evaluations on the **test** set (never used to choose settings) minus the warm start's test accuracy; the
validation set's curve (the set the settings were tuned on) is recorded beside it.

    python benchmarks/learn_grpo_hf.py [--mode collocated] [--out runs/grpo_hf_learning] [--set KEY=VALUE ...]

It runs ``rlinf train examples/grpo_hf.yaml --mode <mode> --out <out> --set cache_dir=<out>/cache`` with
the benchmark's GRPO settings (:data:`SETTINGS`: 128 prompts x 8 responses per iteration, sampling temperature
0.7 with the policy scored at the same temperature, learning rate 2e-4, 375 iterations, both held-out sets
evaluated every 25 with the test set reported; all-equal-reward groups left out of scoring and training by
``grpo.skip_zero_advantages``; later ``--set`` values win) and writes ``docs/grpo_hf_learning.png`` (test and
validation accuracy and mean reward per iteration), its JSON (commands, wall time, load, both sets' warm-start
accuracy and curves, the last three test evaluations, their mean and the gain, rewards, tokens/s) and
``docs/grpo_hf_lengths.png`` (lengths of every sampled response of the run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np
import suite

from rlinf.cli import main as rlinf_main

SETTINGS = (
    "grpo.prompts_per_iteration=128",
    "grpo.temperature=0.7",
    "grpo.lr=0.0002",
    "execution.iterations=375",
    "grpo.skip_zero_advantages=true",
    "eval.every_iterations=25",
    "eval.sets=[test, validation]",
)
"""The GRPO settings of the measured run (docs/grpo_hf.md, "Learning"), applied over the example config. The warm
start, the task and the held-out sets are the example's; the test set is reported (``heldout_accuracy``)."""
NUM_LAST = 3
"""Evaluations averaged into the reported accuracy: the last three, not the best nor the last alone."""


def learning_gain(warm: float, accuracies: list[float]) -> tuple[float, float]:
    """``(mean of the last NUM_LAST accuracies, gain in points over warm)``."""
    if len(accuracies) < NUM_LAST:
        raise ValueError(f"{len(accuracies)} evaluations, fewer than the {NUM_LAST} the gain averages")
    mean = float(np.mean(accuracies[-NUM_LAST:]))
    return mean, 100 * (mean - warm)


def plot_learning(metrics: list[dict], path: Path, title: str) -> None:
    """Test and validation accuracy (iteration 0: the warm start) and mean training reward per iteration."""
    with suite.figure(path, (6.5, 4), dpi=120) as axes:
        for name in ("test", "validation"):
            curve = [
                (m["iteration"], 100 * m[f"{name}_accuracy"]) for m in metrics if f"{name}_accuracy" in m
            ]
            warm = 100 * metrics[0][f"warm_start_{name}_accuracy"]
            style = {"marker": "o"} if name == "test" else {"marker": ".", "alpha": 0.6}
            axes.plot(
                [0] + [i for i, _ in curve], [warm] + [a for _, a in curve], label=f"{name} set", **style
            )
        rewards = [100 * m["mean_reward"] for m in metrics]
        axes.plot([m["iteration"] for m in metrics], rewards, alpha=0.5, label="train reward (sampled)")
        axes.axhline(
            100 * metrics[0]["warm_start_test_accuracy"],
            color="gray",
            linestyle="--",
            label="warm start (test)",
        )
        axes.set(xlabel="GRPO iteration", ylabel="accuracy / reward (%)")
        axes.set_title(title, fontsize=10)
        axes.legend()


def plot_lengths(lengths: list[int], max_new_tokens: int, path: Path) -> None:
    """Histogram of the run's sampled response lengths."""
    with suite.figure(path, (6.5, 3.5), dpi=120) as axes:
        axes.hist(lengths, bins=range(0, max_new_tokens + 5, 4))
        median, p90, p99 = np.percentile(lengths, [50, 90, 99])
        axes.set(
            xlabel="response length (tokens, EOS included)",
            ylabel="responses",
            title=f"{len(lengths)} responses: median {median:.0f}, p90 {p90:.0f}, p99 {p99:.0f}, max {max(lengths)}",
        )


class LoadSampler:
    """The machine's 1-minute load average every ``period_s`` seconds while the run lasts (the machine is
    shared, so wall-clock times depend on what else runs)."""

    def __init__(self, period_s: float = 30.0) -> None:
        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(period_s,), daemon=True)

    def _sample(self, period_s: float) -> None:
        while not self._stop.wait(period_s):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])

    def summary(self) -> dict[str, float]:
        return {
            "before": self.samples[0],
            "after": self.samples[-1],
            "mean_during": float(np.mean(self.samples)),
            "max_during": max(self.samples),
            "num_samples": len(self.samples),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="examples/grpo_hf.yaml")
    parser.add_argument("--mode", default="collocated")
    parser.add_argument("--devices", default="2")
    parser.add_argument("--out", type=Path, default=Path("runs/grpo_hf_learning"))
    parser.add_argument("--png", type=Path, default=Path("docs/grpo_hf_learning.png"))
    parser.add_argument("--lengths-png", type=Path, default=Path("docs/grpo_hf_lengths.png"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    args = parser.parse_args(argv)
    shutil.rmtree(args.out, ignore_errors=True)
    command = [
        "train", args.config, "--mode", args.mode, "--devices", args.devices, "--out", str(args.out),
        "--no-progress", "--set", f"cache_dir={args.out / 'cache'}",
        *(item for pair in (*SETTINGS, *args.set) for item in ("--set", pair)),
    ]  # fmt: skip
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    started = time.perf_counter()
    with LoadSampler() as load:
        code = rlinf_main(command)
    wall_s = time.perf_counter() - started
    if code != 0:
        return code
    metrics = suite.metrics_of(args.out)
    evaluated = [m for m in metrics if "test_accuracy" in m]
    warm = float(metrics[0]["warm_start_test_accuracy"])
    last_mean, gain = learning_gain(warm, [m["test_accuracy"] for m in evaluated])
    title = (
        f"rlinf train, {args.mode}: test set {100 * warm:.1f}% -> {100 * last_mean:.1f}%\n(mean of the last "
        f"{NUM_LAST} evaluations) in {wall_s / 60:.1f} min"
    )
    plot_learning(metrics, args.png, title)
    lengths = [n for m in metrics for n in m["response_lengths"]]
    plot_lengths(lengths, max(lengths), args.lengths_png)
    first, last = metrics[: len(metrics) // 5 or 1], metrics[-(len(metrics) // 5 or 1) :]
    document = {
        "command": "python benchmarks/learn_grpo_hf.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "rlinf_command": "rlinf " + " ".join(command),
        "wall_s": wall_s,
        "first_iteration_wall_s": metrics[0]["wall_s"],
        "load_average_1min": load.summary(),
        "cpu_count": os.cpu_count(),
        "cores": len(os.sched_getaffinity(0)),
        "commit": suite.commit(),
        "date": date,
        "reported_set": "test",
        "num_last_evaluations": NUM_LAST,
        "warm_start_accuracy": warm,
        "warm_start_validation_accuracy": float(metrics[0]["warm_start_validation_accuracy"]),
        "last_test_accuracies": [m["test_accuracy"] for m in evaluated[-NUM_LAST:]],
        "last_mean_accuracy": last_mean,
        "gain_points": gain,
        "mean_reward_first_fifth": float(np.mean([m["mean_reward"] for m in first])),
        "mean_reward_last_fifth": float(np.mean([m["mean_reward"] for m in last])),
        "median_tokens_per_s": float(np.median([m["tokens_per_s"] for m in metrics])),
        "median_iteration_s": float(np.median([m["iteration_s"] for m in metrics])),
        "median_eval_s": float(np.median([m["eval_s"] for m in evaluated])),
        "response_length_percentiles": dict(zip(("p50", "p90", "p99"), np.percentile(lengths, [50, 90, 99]).tolist(), strict=True)),
        "response_length_max": max(lengths),
        "curve": [{"iteration": m["iteration"], "test_accuracy": m["test_accuracy"], "validation_accuracy": m["validation_accuracy"]} for m in evaluated],
        "mean_reward": [m["mean_reward"] for m in metrics],
    }  # fmt: skip
    args.png.with_suffix(".json").write_text(json.dumps(document, indent=2))
    print(
        f"test-set accuracy: warm start {100 * warm:.1f}% -> {100 * last_mean:.1f}% (mean of the last {NUM_LAST} "
        f"evaluations; {gain:+.1f} points); train reward {document['mean_reward_first_fifth']:.3f} -> "
        f"{document['mean_reward_last_fifth']:.3f}; {document['median_tokens_per_s']:.0f} generated tokens/s; "
        f"{wall_s / 60:.1f} min wall (warm start included); wrote {args.png} and {args.lengths_png}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
