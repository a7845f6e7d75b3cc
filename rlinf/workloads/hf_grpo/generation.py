"""Batched sampling from a Hugging Face causal LM with its KV cache, streaming each finished prompt group.

Every prompt is repeated ``group_size`` times (a *group*). Prompts are left-padded, with position ids counted
from each prompt's first real token, so a row's tokens sit at the same positions as in the right-padded
sequences the inference and actor components score. The first forward pass fills the model's cache
(``past_key_values``); each later step feeds one token per row. A response ends at EOS or at ``max_new_tokens``.
As soon as every response of a group has ended, :func:`stream_groups` yields the group and drops its rows from
the batch and from the cache (``Cache.batch_select_indices``), so the reward and inference components can start
on it while the long tail is still being generated (the stream edges of the macro flow).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Any

import attrs
import torch

from rlinf.api import positive, require


@attrs.frozen(kw_only=True)
class SamplingParams:
    """How responses are sampled."""

    max_new_tokens: int
    """Longest response, EOS included."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy (argmax)."""

    def __attrs_post_init__(self) -> None:
        positive("max_new_tokens", self.max_new_tokens)
        require(self.temperature >= 0, "temperature", self.temperature, "must be >= 0", "use 1.0 or 0")


@attrs.frozen(kw_only=True)
class GroupRollout:
    """The finished responses of one prompt group."""

    group_index: int
    """Position of the prompt in the list given to :func:`stream_groups`."""
    prompt_ids: tuple[int, ...]
    response_ids: tuple[tuple[int, ...], ...]
    """One response per member; it ends with EOS unless it was cut at ``max_new_tokens``."""
    ended_at_eos: tuple[bool, ...]


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids [B, P], attention_mask [B, P])`` with each prompt right-aligned."""
    width = max(len(p) for p in prompts)
    tokens = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        require(
            len(prompt) > 0, "prompts", list(prompt), "a prompt must not be empty", "give every prompt text"
        )
        tokens[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return tokens, mask


def _sample(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> torch.Tensor:
    """One token per row: argmax at temperature 0, else a draw from ``softmax(logits / temperature)`` with
    ``generator`` on the logits' device."""
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def device_generator(generator: torch.Generator, device: torch.device) -> torch.Generator:
    """The generator draws are made with on ``device``: ``generator`` itself on the CPU; on a GPU a generator
    of that device seeded from it (moving ``batch x vocabulary`` probabilities to the host at every decode step
    would cost more than the step: 150 MB for 256 rows of a 152k-token vocabulary)."""
    if device.type == "cpu":
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator).item())
    return torch.Generator(device=device).manual_seed(seed)


def _forward(
    model: Any, tokens: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any, use_cache: bool
) -> Any:
    """One forward pass computing only the last position's logits (``logits_to_keep=1``: a prefill over a
    150k-token vocabulary would otherwise materialize ``batch x prompt x vocab`` floats), with the attention
    kernels of :func:`decode_attention`."""
    with decode_attention(tokens.device):
        return model(
            input_ids=tokens,
            attention_mask=mask,
            position_ids=positions,
            use_cache=use_cache,
            logits_to_keep=1,
            **{_cache_keyword(model.__class__): cache},
        )


def decode_attention(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """On a GPU, scaled-dot-product attention by any kernel but cuDNN's during generation; elsewhere no change.

    Measured on an H200 (torch 2.11, transformers 5.17, the Qwen2.5-0.5B shape, batch 64; docs/gpu.md): a decode
    step took about 60 ms of which the GPU was busy under 10%; torch's profiler put half the host time in
    ``aten::_cudnn_attention_forward``, about 1 ms of host time per call (24 calls a step), and ``generate`` with
    a static cache (whose shapes do not change from step to step) ran the same steps 2.2-2.8x faster. With a
    dynamic cache the keys grow by one position every step, a shape cuDNN's attention has not seen, and it builds
    its execution plan again each time. The memory-efficient and flash kernels take any length at no such cost."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


@functools.cache
def _cache_keyword(model_class: Hashable) -> str:
    """The keyword a model class's ``forward`` takes its KV cache by: ``cache`` in recent transformers releases
    (which warn on the older name), ``past_key_values`` before. Read once per class, not per decode step."""
    forward = getattr(model_class, "forward")  # noqa: B009 - any model class, typed Hashable for the cache
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def _returned_cache(output: Any) -> Any:
    """The KV cache a forward pass returned, under either name (a model output is a mapping of its set fields)."""
    return output["cache"] if "cache" in output else output["past_key_values"]


@torch.no_grad()
def stream_groups(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    group_size: int,
    params: SamplingParams,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
    use_cache: bool = True,
) -> Iterator[GroupRollout]:
    """Sample ``group_size`` responses per prompt; yield each group once, as soon as all its responses ended.

    ``generator`` is a CPU generator; on a GPU the draws are made there by a generator seeded from it
    (:func:`device_generator`), so a seed gives the same responses on one kind of device. ``use_cache=False``
    recomputes the whole sequence every step: the reference the cache is tested against."""
    positive("group_size", group_size)
    if not prompts:
        return
    device = next(model.parameters()).device
    generator = device_generator(generator, device)
    row_prompts = [tuple(p) for p in prompts for _ in range(group_size)]
    tokens, mask = left_pad(row_prompts, pad_id)
    tokens, mask = tokens.to(device), mask.to(device)
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    rows = list(range(len(row_prompts)))  # the global row of each batch row
    responses: list[list[int]] = [[] for _ in row_prompts]
    done = [False] * len(row_prompts)
    was_training = model.training
    model.eval()
    try:
        cache: Any = _new_cache(model) if use_cache else None
        output = _forward(model, tokens, mask, positions, cache, use_cache)
        cache = _returned_cache(output) if use_cache else None
        logits = output.logits[:, -1]
        next_position = positions[:, -1] + 1
        while True:
            step_tokens = _sample(logits, params.temperature, generator).tolist()
            for j, row in enumerate(rows):
                if not done[row]:
                    responses[row].append(step_tokens[j])
                    done[row] = step_tokens[j] == eos_id or len(responses[row]) >= params.max_new_tokens
            live_groups = sorted({row // group_size for row in rows})
            for g in live_groups:
                members = range(g * group_size, (g + 1) * group_size)
                if all(done[r] for r in members):
                    yield GroupRollout(
                        group_index=g,
                        prompt_ids=row_prompts[g * group_size],
                        response_ids=tuple(tuple(responses[r]) for r in members),
                        ended_at_eos=tuple(responses[r][-1] == eos_id for r in members),
                    )
            keep = [j for j, row in enumerate(rows) if not all(done[r] for r in _members(row, group_size))]
            if not keep:
                return
            index = torch.tensor(keep, device=device)
            rows = [rows[j] for j in keep]
            live = torch.tensor([not done[row] for row in rows], dtype=torch.long, device=device)
            feed = torch.where(
                live.bool(), torch.tensor([step_tokens[j] for j in keep], device=device), pad_id
            )
            step_positions = next_position[index]
            next_position = step_positions + live
            mask = torch.cat([mask[index], live[:, None]], dim=1)
            if use_cache:
                if len(keep) < len(step_tokens):
                    cache.batch_select_indices(index)
                output = _forward(model, feed[:, None], mask, step_positions[:, None], cache, True)
                cache = _returned_cache(output)
            else:
                tokens = torch.cat([tokens[index], feed[:, None]], dim=1)
                positions = torch.cat([positions[index], step_positions[:, None]], dim=1)
                output = _forward(model, tokens, mask, positions, None, False)
            logits = output.logits[:, -1]
    finally:
        model.train(was_training)


def _members(row: int, group_size: int) -> range:
    first = row // group_size * group_size
    return range(first, first + group_size)


def _new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # transformers before 4.56 builds it without the config
        return DynamicCache()


@torch.no_grad()
def generate_all(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    group_size: int,
    params: SamplingParams,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
) -> Iterator[GroupRollout]:
    """The same sampling as :func:`stream_groups` by ``transformers``' own ``generate`` with a static KV cache
    (the whole batch to the longest response, no group streamed before the end; the full softmax at
    ``temperature``: no top-k or top-p; no ``torch.compile``, which ``generate`` would otherwise run for every new
    batch shape), then every group in prompt order. The draws follow ``generator``'s seed through the
    device's global generator."""
    positive("group_size", group_size)
    if not prompts:
        return
    device = next(model.parameters()).device
    row_prompts = [tuple(p) for p in prompts for _ in range(group_size)]
    tokens, mask = left_pad(row_prompts, pad_id)
    torch.manual_seed(generator.initial_seed())
    sampling = params.temperature > 0
    was_training = model.training
    model.eval()
    try:
        out = model.generate(
            input_ids=tokens.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=params.max_new_tokens,
            do_sample=sampling,
            temperature=params.temperature if sampling else None,
            top_k=0 if sampling else None,
            top_p=1.0 if sampling else None,
            eos_token_id=eos_id,
            pad_token_id=pad_id,
            cache_implementation="static",
            disable_compile=True,  # a static cache would compile the forward for each batch shape (minutes)
        )
    finally:
        model.train(was_training)
    generated = out[:, tokens.shape[1] :].tolist()
    responses = []
    for row in generated:
        ended = eos_id in row
        responses.append(tuple(row[: row.index(eos_id) + 1] if ended else row))
    for g in range(len(prompts)):
        members = responses[g * group_size : (g + 1) * group_size]
        yield GroupRollout(
            group_index=g,
            prompt_ids=row_prompts[g * group_size],
            response_ids=tuple(members),
            ended_at_eos=tuple(r[-1] == eos_id for r in members),
        )


def in_prompt_order(groups: Iterable[GroupRollout]) -> list[GroupRollout]:
    """All ``groups`` (of :func:`stream_groups`, which yields them as they end), ordered by prompt."""
    return sorted(groups, key=lambda g: g.group_index)
