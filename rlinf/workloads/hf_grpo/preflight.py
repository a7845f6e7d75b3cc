"""The driver's check of a run against its model, once, before any worker starts (:meth:`GrpoHfWorkload.check`).

Every prompt the run will draw (the problems of iterations ``1..grpo.num_iterations`` and, when they are
evaluated, the held-out problems of both sets) is tokenized with the model's own tokenizer, as the rollout does, and must fit
``grpo.max_prompt_tokens`` (the payloads' fixed width); every token a worker will embed (the prompts', EOS, pad)
must have a row in the model's embedding; the longest prompt plus ``grpo.max_new_tokens`` must fit the model's
positions. A run that breaks one of these is one line and exit code 2 here, instead of a worker failing after the
model has loaded (and the run restarting it). The tokenizer is the checkpoint's (``model.path``) or, for a model
built from ``model.config``, the BPE built with it (loaded from the cache, or trained anew: the same one, it is
deterministic).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from rlinf.api import ConfigError, require
from rlinf.workloads.hf_grpo.checkpoints import built_base_folder, check_checkpoint, load_tokenizer
from rlinf.workloads.hf_grpo.config import HfGrpoConfig
from rlinf.workloads.hf_grpo.rollout import iteration_problems
from rlinf.workloads.hf_grpo.tokenizer import train_bpe


@attrs.frozen(kw_only=True)
class ModelLimits:
    """What a run's token sequences must fit: the model's embedding rows and positions."""

    vocab_size: int
    """Rows of the input embedding (``config.json``'s ``vocab_size``): every token id must be below it."""
    max_positions: int | None
    """``max_position_embeddings`` (None when the config names none)."""
    tokenizer_name: str
    """How a message names the tokenizer (``"DIR's tokenizer"``)."""


def run_prompts(config: HfGrpoConfig) -> tuple[list[str], list[str]]:
    """``(training, held_out)``: the distinct prompts of iterations ``1..grpo.num_iterations`` (what the rollout
    draws) and the held-out prompts (validation, then test) when anything evaluates them (the held-out eval, the
    warm start's accuracy)."""
    sets = config.heldout_sets()
    heldout = [p.prompt for p in (*sets.validation, *sets.test)]
    exclude = sets.prompts
    training = {
        problem.prompt
        for iteration in range(1, config.grpo.num_iterations + 1)
        for problem in iteration_problems(config, iteration, exclude)
    }
    evaluated = config.eval.enabled or config.trains_warm_start
    return sorted(training), heldout if evaluated else []


def check_prompt_lengths(
    config: HfGrpoConfig, tokenizer: Any, limits: ModelLimits, prompts: tuple[Sequence[str], Sequence[str]]
) -> None:
    """Raise :class:`ConfigError` (one line: the field, the value, the measured length, the fix) unless the
    ``(training, held_out)`` prompts tokenized by ``tokenizer`` fit ``config`` and the model's ``limits``."""
    training, heldout = prompts
    encoded = tokenizer([*training, *heldout], add_special_tokens=True)["input_ids"]
    lengths = [len(ids) for ids in encoded]
    special = {"EOS": tokenizer.eos_token_id, "pad": tokenizer.pad_token_id}
    for name, token in special.items():
        require(
            0 <= token < limits.vocab_size,
            "model.path",
            config.model.path,
            f"has {name} token id {token} in its tokenizer, beyond the model's {limits.vocab_size}-token embedding",
            "use the tokenizer the checkpoint was trained with",
        )
    highest = max((max(ids, default=0) for ids in encoded), default=0)
    require(
        highest < limits.vocab_size,
        "model.path",
        config.model.path,
        f"has a tokenizer that gives the prompts token id {highest}, beyond the model's {limits.vocab_size}-token "
        "embedding",
        "use the tokenizer the checkpoint was trained with",
    )
    longest = max(lengths[: len(training)], default=0)
    rl = config.grpo
    require(
        longest <= rl.max_prompt_tokens,
        "grpo.max_prompt_tokens",
        rl.max_prompt_tokens,
        f"is shorter than the longest prompt ({longest} tokens with {limits.tokenizer_name})",
        f"raise grpo.max_prompt_tokens to at least {longest}",
    )
    longest = max(lengths, default=0)
    if limits.max_positions is not None and longest + rl.max_new_tokens > limits.max_positions:
        raise ConfigError(
            "grpo.max_new_tokens", rl.max_new_tokens, f"after the longest prompt ({longest} tokens with "
            f"{limits.tokenizer_name}) makes sequences of {longest + rl.max_new_tokens} tokens, more than the "
            f"model's {limits.max_positions} positions",
            f"lower grpo.max_new_tokens to at most {max(limits.max_positions - longest, 0)}",
        )  # fmt: skip


def driver_tokenizer(config: HfGrpoConfig) -> tuple[Any, ModelLimits]:
    """The run's tokenizer, as its workers will load it, and the model's limits."""
    path = config.model.path
    if path is not None:
        model = check_checkpoint(path)
        positions = getattr(model, "max_position_embeddings", None) or getattr(model, "n_positions", None)
        limits = ModelLimits(
            vocab_size=int(model.vocab_size),
            max_positions=None if positions is None else int(positions),
            tokenizer_name=f"{path}'s tokenizer",
        )
        return load_tokenizer(path), limits
    sizes = config.model.config
    assert sizes is not None
    limits = ModelLimits(
        vocab_size=sizes.vocab_size,
        max_positions=sizes.max_position_embeddings,
        tokenizer_name="the BPE built for model.config",
    )
    folder = built_base_folder(config)
    if folder.is_dir():
        return load_tokenizer(folder), limits
    return train_bpe(config.task, vocab_size=sizes.vocab_size, seed=config.seed), limits


def check_run(config: HfGrpoConfig) -> None:
    """Check ``config`` (with ``--iterations`` and ``--seed`` applied) against its model's tokenizer and limits."""
    tokenizer, limits = driver_tokenizer(config)
    check_prompt_lengths(config, tokenizer, limits, run_prompts(config))
