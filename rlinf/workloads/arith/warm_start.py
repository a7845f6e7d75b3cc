"""The supervised warm start, as a function and as a file cache shared by the workers of a run.

:func:`warm_start` trains a fresh policy on worked solutions (the single-process learn script calls it with
its own RNG). :func:`cached_warm_start` is what the executor's workers call in ``setup``: the first worker to
take the cache's lock trains and writes ``<cache>/<key>.pt``; the others wait on the lock and read it. The key
is a hash of everything the result depends on (seed, model, task, warm-start and evaluation settings), so a
changed setting trains anew and repeated runs start at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import attrs
import torch
from tqdm import tqdm

from rlinf.workloads.arith.backends import OptimConfig, TorchRolloutBackend
from rlinf.workloads.arith.components import ActorWorker, supervised_batch
from rlinf.workloads.arith.config import ArithGrpoConfig
from rlinf.workloads.arith.model import DecoderTransformer, TransformerConfig
from rlinf.workloads.arith.task import ArithProblem, heldout_problems, sample_problems
from rlinf.workloads.arith.tokenizer import ArithTokenizer


@attrs.frozen(kw_only=True)
class WarmStart:
    """Warm-started weights and how good they are."""

    weights: dict[str, torch.Tensor]
    heldout_accuracy: float
    seconds: float
    """Time it took to train (and evaluate) them, when they were trained."""


def warm_start(
    config: ArithGrpoConfig,
    sizes: TransformerConfig,
    rng: random.Random,
    heldout: Collection[ArithProblem],
    *,
    progress: bool = False,
) -> dict[str, torch.Tensor]:
    """``warm_start.num_steps`` supervised steps on worked solutions of problems drawn from ``rng``."""
    from rlinf.workloads.arith.backend_registry import train_backend_class

    train_class = train_backend_class(config.backends.train)
    actor = ActorWorker(
        train_class(sizes, optim=OptimConfig(lr=config.warm_start.lr), seed=config.seed),
        grpo=config.grpo.grpo(),
    )
    tokenizer = ArithTokenizer()
    for _ in tqdm(range(config.warm_start.num_steps), desc="warm start", disable=not progress):
        problems = sample_problems(config.warm_start.batch_size, config.task, rng, exclude=heldout)
        batch = supervised_batch(
            problems,
            tokenizer,
            answer_format=config.task.answer_format,
            teacher_error_rate=config.warm_start.teacher_error_rate,
            rng=rng,
        )
        actor.warm_start_step([batch])
    return {k: v.detach().clone() for k, v in actor.weights().items()}


def cache_key(config: ArithGrpoConfig, sizes: TransformerConfig) -> str:
    """A short hash of the settings the warm-started weights depend on."""
    relevant = {
        "seed": config.seed,
        "sizes": attrs.asdict(sizes),
        "task": attrs.asdict(config.task),
        "warm_start": attrs.asdict(config.warm_start),
        "eval": attrs.asdict(config.eval),
        "train_backend": config.backends.train,
        "torch": torch.__version__,
    }
    text = json.dumps(relevant, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_warm_start(config: ArithGrpoConfig, sizes: TransformerConfig) -> WarmStart:
    """The warm start of ``config``, trained once per key (one thread) and shared through a file cache."""
    from rlinf.workloads.arith.evaluation import evaluate

    directory = Path(config.execution.warm_start_cache)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{cache_key(config, sizes)}.pt"
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if path.is_file():
                stored: dict[str, Any] = torch.load(path, weights_only=True)
                return WarmStart(
                    weights=stored["weights"],
                    heldout_accuracy=float(stored["heldout_accuracy"]),
                    seconds=float(stored["seconds"]),
                )
            started = time.perf_counter()
            heldout = heldout_problems(config.eval.num_problems, config.task, config.eval.seed)
            weights = warm_start(config, sizes, random.Random(config.seed), heldout)
            tokenizer = ArithTokenizer()
            rollout = TorchRolloutBackend(sizes, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id, seed=0)
            rollout.load_weights(weights)
            accuracy = evaluate(rollout, heldout, tokenizer, config)
            result = WarmStart(
                weights=weights, heldout_accuracy=accuracy, seconds=time.perf_counter() - started
            )
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            torch.save(
                {"weights": weights, "heldout_accuracy": accuracy, "seconds": result.seconds}, temporary
            )
            os.replace(temporary, path)
            return result
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def policy_from(sizes: TransformerConfig, weights: dict[str, torch.Tensor]) -> DecoderTransformer:
    """A frozen policy with ``weights``."""
    model = DecoderTransformer(sizes, seed=0).eval().requires_grad_(False)
    model.load_state_dict(weights)
    return model
