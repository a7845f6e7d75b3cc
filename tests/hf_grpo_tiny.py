"""The tests' GRPO run: the addition task of ``examples/grpo_arith.yaml`` cut to one-digit sums, 8 prompts x 4
responses, a 150-step warm start (cached by settings in the session's ``grpo_cache``, so every module shares it),
20 held-out problems. Fast (responses of at most 6 tokens) and deterministic for a seed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from rlinf.api import WorkerContext
from rlinf.app.jobs import load_job_config

CONFIG = "examples/grpo_arith.yaml"
CPU = SimpleNamespace(torch_device="cpu")
PROMPTS, GROUP_SIZE = 8, 4


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread, as in the workers (two threads on two loaded cores make the warm start crawl)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def tiny_overrides(cache: Path) -> dict[str, Any]:
    """What the tests change in the example (``tests/test_workload_port.py``'s baseline ran the same)."""
    return {
        "task.min_digits": 1,
        "task.max_digits": 1,
        "warm_start.num_steps": 150,
        "grpo.prompts_per_iteration": PROMPTS,
        "grpo.group_size": GROUP_SIZE,
        "eval.num_problems": 20,
        "eval.every_iterations": 2,
        "execution.granularity": 2,
        "execution.checkpoint_every": 2,
        "cache_dir": str(cache),
    }


def tiny_sets(cache: Path, **extra: Any) -> list[str]:
    """``--set`` arguments for a quick run."""
    values = {**tiny_overrides(cache), **extra}
    return [item for key, value in values.items() for item in ("--set", f"{key}={value}")]


def tiny_config(cache: Path, **extra: Any) -> Any:
    values = {**tiny_overrides(cache), **extra}
    _, config = load_job_config(CONFIG, [f"{key}={value}" for key, value in values.items()])
    return config


def context(
    component: str, *, groups: int = PROMPTS, micro_batches: int = 2, rank: int = 0, world: int = 1
) -> Any:
    """What a replica gets at setup when ``groups`` groups of 4 are cut into ``micro_batches`` micro-batches."""
    bounds = [groups * j // micro_batches for j in range(micro_batches + 1)]
    return WorkerContext(
        component=component,
        rank=rank,
        world=world,
        device=CPU,
        num_micro_batches=micro_batches,
        micro_batch_groups=tuple(zip(bounds[:-1], bounds[1:], strict=True)),
        group_size=GROUP_SIZE,
        loop_stages=1,
        offload=False,
        seed=0,
    )
