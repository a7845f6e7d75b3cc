"""What the arithmetic workload measures and sizes from its config: the transformer's shape and greedy held-out
accuracy (shared by the in-process experiment, the warm start and the workers)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from rlinf.workloads.arith.backends import RolloutBackend
from rlinf.workloads.arith.config import ArithGrpoConfig
from rlinf.workloads.arith.generation import SamplingParams
from rlinf.workloads.arith.model import TransformerConfig
from rlinf.workloads.arith.task import ArithProblem, verify
from rlinf.workloads.arith.tokenizer import ArithTokenizer


def model_config(config: ArithGrpoConfig, tokenizer: ArithTokenizer) -> TransformerConfig:
    """Transformer sizes from the config; vocabulary and length from the tokenizer and the task."""
    longest = (
        1 + config.task.max_prompt_chars + max(config.grpo.max_new_tokens, config.task.max_answer_chars + 1)
    )
    return TransformerConfig(
        vocab_size=tokenizer.vocab_size, max_seq_len=longest, **attrs.asdict(config.model)
    )


def evaluate(
    rollout: RolloutBackend,
    problems: Sequence[ArithProblem],
    tokenizer: ArithTokenizer,
    config: ArithGrpoConfig,
) -> float:
    """Fraction of ``problems`` answered exactly by greedy decoding."""
    prompts = [tokenizer.encode_prompt(p.prompt) for p in problems]
    params = SamplingParams(max_new_tokens=config.task.max_answer_chars + 1, temperature=0.0)
    correct = 0.0
    for group in rollout.stream_groups(prompts, group_size=1, params=params, seed=0):
        correct += verify(
            problems[group.group_index], tokenizer.decode(group.response_ids[0]), config.task.answer_format
        )
    return correct / len(problems)
