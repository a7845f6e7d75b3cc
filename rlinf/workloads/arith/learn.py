"""Warm start, then GRPO, in one process; held-out accuracy before and after; a learning-curve PNG and JSON.

Usage::

    python -m rlinf.workloads.arith.learn --config examples/grpo_arith.yaml --out docs/grpo_learning.png

The JSON of the curve is written next to the PNG (same name, ``.json``). No executor is involved: the
components of :mod:`~rlinf.workloads.arith.components` are called in order on this process's CPU threads.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs
import torch
from tqdm import tqdm

from rlinf.core.errors import RlinfError
from rlinf.workloads.arith.backend_registry import rollout_backend_class, train_backend_class
from rlinf.workloads.arith.backends import (
    OptimConfig,
)
from rlinf.workloads.arith.components import (
    ActorWorker,
    InferenceWorker,
    RewardWorker,
    RolloutWorker,
    sync_weights,
    training_batch,
)
from rlinf.workloads.arith.config import ArithGrpoConfig, load_config
from rlinf.workloads.arith.evaluation import evaluate, model_config
from rlinf.workloads.arith.generation import SamplingParams
from rlinf.workloads.arith.task import heldout_problems, sample_problems
from rlinf.workloads.arith.tokenizer import ArithTokenizer
from rlinf.workloads.arith.warm_start import warm_start


@attrs.frozen(kw_only=True)
class CurvePoint:
    iteration: int
    seconds: float
    heldout_accuracy: float


@attrs.frozen(kw_only=True)
class LearningResult:
    warm_start_accuracy: float
    final_accuracy: float
    warm_start_seconds: float
    grpo_seconds: float
    curve: tuple[CurvePoint, ...]
    train_rewards: tuple[float, ...]


def run(config: ArithGrpoConfig, *, progress: bool = True) -> LearningResult:
    """The whole experiment; deterministic for a given config (and thread count)."""
    tokenizer = ArithTokenizer()
    sizes = model_config(config, tokenizer)
    heldout = heldout_problems(config.eval.num_problems, config.task, config.eval.seed)
    rng = random.Random(config.seed)
    rollout = rollout_backend_class(config.backends.rollout)(
        sizes, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id, seed=config.seed
    )
    train_class = train_backend_class(config.backends.train)

    start = time.perf_counter()
    warm_weights = warm_start(config, sizes, rng, heldout, progress=progress)
    rollout.load_weights(warm_weights)
    warm_accuracy = evaluate(rollout, heldout, tokenizer, config)
    warm_seconds = time.perf_counter() - start
    print(
        f"warm start: {config.warm_start.num_steps} steps, held-out accuracy {warm_accuracy:.3f} ({warm_seconds:.0f} s)",
        flush=True,
    )

    rl = config.grpo
    optim = OptimConfig(lr=rl.lr, max_grad_norm=rl.max_grad_norm, warmup_steps=rl.warmup_steps)
    actor = ActorWorker(train_class(sizes, optim=optim, seed=config.seed), grpo=rl.grpo())
    actor.backend.load_weights(warm_weights)
    inference = InferenceWorker(sizes, seed=config.seed, with_reference=rl.kl_coef > 0)
    inference.load_policy_weights(warm_weights)
    inference.load_reference_weights(warm_weights)
    worker = RolloutWorker(
        rollout,
        tokenizer,
        group_size=rl.group_size,
        params=SamplingParams(max_new_tokens=rl.max_new_tokens, temperature=rl.temperature),
    )
    reward = RewardWorker(tokenizer, answer_format=config.task.answer_format, grpo=rl.grpo())

    start = time.perf_counter()
    curve = [CurvePoint(iteration=0, seconds=0.0, heldout_accuracy=warm_accuracy)]
    train_rewards = []
    bar = tqdm(range(1, rl.num_iterations + 1), desc="grpo", disable=not progress)
    for iteration in bar:
        problems = sample_problems(rl.prompts_per_iteration, config.task, rng, exclude=heldout)
        scored = [
            reward.score(group) for group in worker.stream(problems, seed=config.seed * 1_000_003 + iteration)
        ]
        batch = inference.score(training_batch(scored, tokenizer.pad_id))
        mini_size = -(-batch.num_sequences // rl.optimizer_steps_per_iteration)
        for mini_batch in batch.micro_batches(mini_size):
            metrics = actor.train_step(mini_batch.micro_batches(rl.micro_batch_size))
        sync_weights(actor, rollout)
        inference.load_policy_weights(actor.weights())
        mean_reward = sum(sum(g.rewards) for g in scored) / (len(scored) * rl.group_size)
        train_rewards.append(mean_reward)
        line = (
            f"iter {iteration} reward {mean_reward:.3f} loss {metrics.loss:+.4f} kl {metrics.kl:.4f} "
            f"clip {metrics.clip_fraction:.3f} grad {metrics.grad_norm:.3f}"
        )
        if iteration % config.eval.every_iterations == 0 or iteration == rl.num_iterations:
            accuracy = evaluate(rollout, heldout, tokenizer, config)
            curve.append(
                CurvePoint(
                    iteration=iteration, seconds=time.perf_counter() - start, heldout_accuracy=accuracy
                )
            )
            line += f" heldout {accuracy:.3f}"
        tqdm.write(line) if progress else print(line, flush=True)
    return LearningResult(
        warm_start_accuracy=warm_accuracy,
        final_accuracy=curve[-1].heldout_accuracy,
        warm_start_seconds=warm_seconds,
        grpo_seconds=time.perf_counter() - start,
        curve=tuple(curve),
        train_rewards=tuple(train_rewards),
    )


def write_outputs(result: LearningResult, config: ArithGrpoConfig, png_path: Path, command: str) -> Path:
    """Write the curve PNG and its JSON (same stem); returns the JSON path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig, (ax_acc, ax_rew) = plt.subplots(1, 2, figsize=(11, 4))
    ax_acc.plot(
        [p.iteration for p in result.curve], [100 * p.heldout_accuracy for p in result.curve], marker="o"
    )
    ax_acc.axhline(100 * result.warm_start_accuracy, color="gray", linestyle="--", label="warm start")
    ax_acc.set(
        xlabel="GRPO iteration",
        ylabel="held-out accuracy (%, greedy)",
        title=f"{config.eval.num_problems} held-out problems",
    )
    ax_acc.legend()
    ax_rew.plot(range(1, len(result.train_rewards) + 1), result.train_rewards)
    ax_rew.set(xlabel="GRPO iteration", ylabel="mean reward of sampled responses", title="training reward")
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    json_path = png_path.with_suffix(".json")
    document = {
        "command": command,
        "config": attrs.asdict(config),
        "warm_start_accuracy": result.warm_start_accuracy,
        "final_accuracy": result.final_accuracy,
        "warm_start_seconds": result.warm_start_seconds,
        "grpo_seconds": result.grpo_seconds,
        "curve": [attrs.asdict(p) for p in result.curve],
        "train_rewards": list(result.train_rewards),
    }
    json_path.write_text(json.dumps(document, indent=2))
    return json_path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument(
        "--out", required=True, type=Path, help="PNG of the learning curve (JSON written alongside)"
    )
    parser.add_argument("--no-progress", action="store_true", help="plain lines instead of tqdm bars")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except (RlinfError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    torch.set_num_threads(config.num_threads)
    result = run(config, progress=not args.no_progress)
    command = "python -m rlinf.workloads.arith.learn " + " ".join(sys.argv[1:] if argv is None else argv)
    json_path = write_outputs(result, config, args.out, command)
    gain = 100 * (result.final_accuracy - result.warm_start_accuracy)
    minutes = (result.warm_start_seconds + result.grpo_seconds) / 60
    print(
        f"held-out accuracy: warm start {100 * result.warm_start_accuracy:.1f}% -> after GRPO {100 * result.final_accuracy:.1f}% "
        f"({gain:+.1f} points) in {minutes:.1f} min; wrote {args.out} and {json_path}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
