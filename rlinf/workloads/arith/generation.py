"""Batched autoregressive generation with a KV cache, streaming finished prompt groups.

Each prompt is repeated ``group_size`` times; the repeats form a *group*. Prompts are left-padded so that every
row's next token sits in the last column. A response ends when the policy emits EOS or reaches
``max_new_tokens``. As soon as every response of a group has ended, :func:`stream_groups` yields that group and
drops its rows from the batch (and from the KV cache), so a consumer (the reward, then inference) can start on
it while the other groups are still being generated: the stream edge of the macro flow.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs
import torch

from rlinf.core.errors import non_negative, positive, require
from rlinf.workloads.arith.model import DecoderTransformer


@attrs.frozen(kw_only=True)
class SamplingParams:
    """How responses are sampled."""

    max_new_tokens: int
    """Longest response, EOS included."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy (argmax)."""

    def __attrs_post_init__(self) -> None:
        positive("max_new_tokens", self.max_new_tokens)
        non_negative("temperature", self.temperature)


@attrs.frozen(kw_only=True)
class GroupRollout:
    """The finished responses of one prompt group."""

    group_index: int
    """Position of the prompt in the list given to the generator."""
    prompt_ids: tuple[int, ...]
    response_ids: tuple[tuple[int, ...], ...]
    """One response per group member; it ends with EOS unless it was cut at ``max_new_tokens``."""
    response_logprobs: tuple[tuple[float, ...], ...]
    """log pi(token) of each response token under the sampling model at temperature 1."""
    ended_at_eos: tuple[bool, ...]

    @property
    def group_size(self) -> int:
        return len(self.response_ids)


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens [B, P], key_mask [B, P])`` with each prompt right-aligned."""
    width = max(len(p) for p in prompts)
    tokens = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        require(
            len(prompt) > 0, "prompts", list(prompt), "a prompt must not be empty", "start prompts with BOS"
        )
        tokens[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        mask[row, width - len(prompt) :] = True
    return tokens, mask


def _sample(
    logits: torch.Tensor,
    temperature: float,
    generator: torch.Generator,
    banned: torch.Tensor | None = None,
    banned_id: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    if banned is not None and bool(banned.any()):
        logits = logits.float().clone()
        logits[banned, banned_id] = float("-inf")
    logp = torch.log_softmax(logits.float(), dim=-1)
    if temperature == 0.0:
        tokens = logits.argmax(dim=-1)
    else:
        probs = torch.softmax(logits.float() / temperature, dim=-1)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


@torch.no_grad()
def stream_groups(
    model: DecoderTransformer,
    prompts: Sequence[Sequence[int]],
    *,
    group_size: int,
    params: SamplingParams,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
    use_cache: bool = True,
    min_new_tokens: Sequence[int] | None = None,
) -> Iterator[GroupRollout]:
    """Generate ``group_size`` responses per prompt; yield each group once, as soon as all its responses ended.

    ``use_cache=False`` recomputes the whole sequence each step (the reference the cache is tested against).
    ``min_new_tokens`` (one per prompt, like vLLM's ``min_tokens``) forbids EOS before that many tokens; a
    prompt with ``min_new_tokens >= params.max_new_tokens`` runs to the maximum length (a long-tail response).
    """
    positive("group_size", group_size)
    if not prompts:
        return
    require(
        min_new_tokens is None or len(min_new_tokens) == len(prompts),
        "min_new_tokens",
        None if min_new_tokens is None else len(min_new_tokens),
        f"must give one value per prompt ({len(prompts)})",
        "pass one minimum length per prompt",
    )
    row_minimum = torch.tensor(
        [
            0 if min_new_tokens is None else int(min_new_tokens[p])
            for p in range(len(prompts))
            for _ in range(group_size)
        ],
        dtype=torch.long,
    )
    row_prompts = [tuple(p) for p in prompts for _ in range(group_size)]
    tokens, key_mask = left_pad(row_prompts, pad_id)
    positions = (key_mask.long().cumsum(dim=1) - 1).clamp(min=0)
    rows = torch.arange(len(row_prompts))  # global row index of each batch row
    responses: list[list[int]] = [[] for _ in row_prompts]
    logprobs: list[list[float]] = [[] for _ in row_prompts]
    done = torch.zeros(len(row_prompts), dtype=torch.bool)
    yielded: set[int] = set()
    model_was_training = model.training
    model.eval()
    try:
        logits, cache = model(tokens, positions, key_mask=key_mask, return_cache=use_cache)
        next_position = positions[:, -1] + 1
        while True:
            lengths = torch.tensor([len(responses[int(r)]) for r in rows.tolist()], dtype=torch.long)
            banned = lengths < row_minimum[rows] if min_new_tokens is not None else None
            step_tokens, step_logp = _sample(logits[:, -1], params.temperature, generator, banned, eos_id)
            was_done = done[rows]
            for j in torch.nonzero(~was_done).flatten().tolist():
                row = int(rows[j])
                token = int(step_tokens[j])
                responses[row].append(token)
                logprobs[row].append(float(step_logp[j]))
                if token == eos_id or len(responses[row]) >= params.max_new_tokens:
                    done[row] = True
            finished = sorted({int(r) // group_size for r in rows.tolist()} - yielded)
            finished = [g for g in finished if bool(done[g * group_size : (g + 1) * group_size].all())]
            for g in finished:
                yielded.add(g)
                members = range(g * group_size, (g + 1) * group_size)
                yield GroupRollout(
                    group_index=g,
                    prompt_ids=row_prompts[g * group_size],
                    response_ids=tuple(tuple(responses[r]) for r in members),
                    response_logprobs=tuple(tuple(logprobs[r]) for r in members),
                    ended_at_eos=tuple(bool(responses[r]) and responses[r][-1] == eos_id for r in members),
                )
            keep = torch.tensor(
                [int(r) // group_size not in yielded for r in rows.tolist()], dtype=torch.bool
            )
            if not bool(keep.any()):
                return
            keep_index = torch.nonzero(keep).flatten()
            rows = rows[keep_index]
            live = ~done[rows]
            feed = torch.where(live, step_tokens[keep_index], torch.full_like(rows, pad_id))
            step_positions = next_position[keep_index]
            next_position = step_positions + live.long()
            if use_cache:
                logits, cache = model(
                    feed[:, None],
                    step_positions[:, None],
                    key_mask=live[:, None],
                    cache=cache.select(keep_index),
                    return_cache=True,
                )
            else:
                tokens = torch.cat([tokens[keep_index], feed[:, None]], dim=1)
                positions = torch.cat([positions[keep_index], step_positions[:, None]], dim=1)
                key_mask = torch.cat([key_mask[keep_index], live[:, None]], dim=1)
                logits, _ = model(tokens, positions, key_mask=key_mask)
    finally:
        model.train(model_was_training)


def generate(
    model: DecoderTransformer,
    prompts: Sequence[Sequence[int]],
    *,
    group_size: int,
    params: SamplingParams,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
    use_cache: bool = True,
    min_new_tokens: Sequence[int] | None = None,
) -> list[GroupRollout]:
    """All groups of :func:`stream_groups`, ordered by prompt."""
    groups = stream_groups(
        model,
        prompts,
        group_size=group_size,
        params=params,
        eos_id=eos_id,
        pad_id=pad_id,
        generator=generator,
        use_cache=use_cache,
        min_new_tokens=min_new_tokens,
    )
    return sorted(groups, key=lambda g: g.group_index)
