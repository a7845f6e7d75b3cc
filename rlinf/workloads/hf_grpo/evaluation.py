"""Held-out accuracy: greedy decoding of fixed problem sets (validation, test), scored by the task's verifier."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlinf.workloads.hf_grpo.generation import SamplingParams, stream_groups
from rlinf.workloads.hf_grpo.task import HeldoutSets, Problem, TaskConfig


def heldout_accuracy(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    *,
    task: TaskConfig,
    max_new_tokens: int,
    batch_size: int,
) -> float:
    """Fraction of ``problems`` whose greedy response (at most ``max_new_tokens``) the ``task``'s verifier accepts."""
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)
    correct = 0.0
    for start in range(0, len(problems), batch_size):
        batch = problems[start : start + batch_size]
        prompts = [tokenizer.encode(p.prompt) for p in batch]
        for group in stream_groups(
            model,
            prompts,
            group_size=1,
            params=params,
            eos_id=tokenizer.eos_token_id,
            pad_id=tokenizer.pad_token_id,
            generator=torch.Generator(),
        ):
            text = tokenizer.decode(group.response_ids[0], skip_special_tokens=True)
            correct += task.reward(batch[group.group_index].answer, text)
    return correct / len(problems)


def heldout_accuracies(
    model: Any,
    tokenizer: Any,
    sets: HeldoutSets,
    names: Sequence[str],
    *,
    task: TaskConfig,
    max_new_tokens: int,
    batch_size: int,
) -> dict[str, float]:
    """:func:`heldout_accuracy` on each held-out set of ``names`` (``validation``, ``test``), by name."""
    return {
        name: heldout_accuracy(
            model,
            tokenizer,
            sets.problems(name),
            task=task,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
        )
        for name in names
    }
