"""A tiny GRPO-on-HF setup for the tests: a 2-layer, 64-wide Qwen2 with the task's BPE, one-step problems with
small numbers, a short warm start (cached by settings, so the test files share it), 4 prompts x 4 responses."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from rlinf import WorkerContext
from rlinf.app.jobs import load_job_config

CONFIG = "examples/grpo_hf.yaml"
CPU = SimpleNamespace(torch_device="cpu")


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
    return {
        "task.max_steps": 1,
        "task.max_number": 9,
        "task.max_value": 30,
        "warm_start.num_steps": 200,
        "warm_start.lr": 0.005,
        "warm_start.teacher_error_rate": 0.0,
        "grpo.prompts_per_iteration": 4,
        "grpo.group_size": 4,
        "grpo.max_new_tokens": 48,
        "grpo.max_prompt_tokens": 64,
        "grpo.micro_batch_size": 8,
        "eval.num_problems": 32,
        "eval.every_iterations": 2,
        "execution.granularity": 2,
        "execution.checkpoint_every": 2,
        "execution.cache_dir": str(cache),
    }


def tiny_sets(cache: Path, **extra: Any) -> list[str]:
    """``--set`` arguments for a quick run."""
    values = {**tiny_overrides(cache), **extra}
    return [item for key, value in values.items() for item in ("--set", f"{key}={value}")]


def tiny_config(cache: Path, **extra: Any) -> Any:
    values = {**tiny_overrides(cache), **extra}
    _, config = load_job_config(CONFIG, [f"{key}={value}" for key, value in values.items()])
    return config


def context(component: str, *, groups: int = 4, micro_batches: int = 2, rank: int = 0, world: int = 1) -> Any:
    """What a replica gets at setup when ``groups`` groups of 4 are cut into ``micro_batches`` micro-batches."""
    bounds = [groups * j // micro_batches for j in range(micro_batches + 1)]
    return WorkerContext(
        component=component,
        rank=rank,
        world=world,
        device=CPU,
        num_micro_batches=micro_batches,
        micro_batch_groups=tuple(zip(bounds[:-1], bounds[1:], strict=True)),
        group_size=4,
        loop_stages=1,
        offload=False,
        seed=0,
    )
