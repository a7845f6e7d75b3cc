"""GRPO data as executor payloads, and the log-probabilities of responses under a causal LM.

A payload maps names to NumPy arrays whose first axis is the prompt group, so a micro-batch splits between
replicas without cutting a group. Widths are fixed (``max_prompt_tokens``, ``max_new_tokens``), so payloads of
several producers concatenate (:func:`rlinf.api.concat_payloads`). Stages:

* rollout -> reward: ``group_index``, ``answer`` ``[n]``; ``prompt_ids [n, P]`` with ``prompt_len [n]``;
  ``response_ids [n, G, R]`` with ``response_len [n, G]`` and ``ended_at_eos [n, G]`` (the weights that sampled
  them are the executor's stamp on the payload, :func:`rlinf.api.stamp_of`: one version per iteration);
* reward -> inference: the same plus ``rewards`` and ``advantages`` ``[n, G]``;
* inference -> actor: the same plus ``old_logprobs`` (and ``ref_logprobs`` with a KL penalty) ``[n, G, R]``,
  the log-probability of each response token (0 past the response's end) under the policy that sampled it (the
  inference component holds the same weights version as the rollout: the behaviour policy).

A weight-sync payload is the actor's ``state_dict`` under Hugging Face names; the executor stamps it with the
version of those weights.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from rlinf.api import Payload


def flat_sequences(payload: Payload) -> dict[str, np.ndarray]:
    """Every response of a payload as one row (group-major): prompt and response ids with their lengths."""
    groups, size = payload["response_len"].shape
    return {
        "prompt_ids": np.repeat(payload["prompt_ids"], size, axis=0),
        "prompt_len": np.repeat(payload["prompt_len"], size),
        "response_ids": payload["response_ids"].reshape(groups * size, -1),
        "response_len": payload["response_len"].reshape(-1),
    }


def length_sorted_chunks(total_len: np.ndarray, size: int) -> list[np.ndarray]:
    """Row indices in chunks of at most ``size``, sorted by length: each chunk pads only to its own longest row,
    so scoring a long-tailed batch in micro-batches wastes little on padding."""
    order = np.argsort(total_len, kind="stable")
    return [order[start : start + size] for start in range(0, len(order), size)]


def right_padded(
    sequences: Mapping[str, np.ndarray], rows: np.ndarray, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids [b, T], attention_mask [b, T])``: prompt then response of each row, right-padded to the
    longest (positions count from 0 at each row's first token, as in generation)."""
    prompt_len, response_len = sequences["prompt_len"][rows], sequences["response_len"][rows]
    width = int((prompt_len + response_len).max())
    tokens = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        p, r = int(prompt_len[i]), int(response_len[i])
        tokens[i, :p] = sequences["prompt_ids"][row, :p]
        tokens[i, p : p + r] = sequences["response_ids"][row, :r]
        mask[i, : p + r] = 1
    return torch.as_tensor(tokens), torch.as_tensor(mask)


def response_logprobs(
    model: Any,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    prompt_len: torch.Tensor,
    width: int,
    temperature: float = 1.0,
) -> torch.Tensor:
    """``[b, width]`` float32: log pi_T(response token t | everything before it) for ``t < width`` (a row's
    columns past its response hold the log-probability of padding; mask them), where pi_T is
    ``softmax(logits / temperature)``: the distribution the rollout samples from. Differentiable when grad is on."""
    return logits_to_response_logprobs(
        model_logits(model, tokens, mask), tokens, prompt_len, width, temperature
    )


def model_logits(model: Any, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The logits of a ``transformers`` causal LM over ``tokens`` (``mask``: its attention mask), without a cache."""
    return model(input_ids=tokens, attention_mask=mask, use_cache=False).logits


def logits_to_response_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, prompt_len: torch.Tensor, width: int, temperature: float = 1.0
) -> torch.Tensor:
    """The ``[b, width]`` response-token log-probabilities of :func:`response_logprobs` from a causal LM's
    ``[b, T, vocab]`` logits over right-padded ``tokens`` (any backend's forward pass)."""
    logp = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
    targets = tokens[:, 1:]
    columns = (prompt_len[:, None] - 1 + torch.arange(width, device=tokens.device)[None, :]).clamp(
        max=targets.shape[1] - 1
    )
    per_token = logp.gather(-1, targets[:, :, None]).squeeze(-1)
    return per_token.gather(1, columns)


def response_mask(response_len: np.ndarray, width: int) -> torch.Tensor:
    """``[b, width]`` float: 1.0 on each row's response tokens (EOS included)."""
    return torch.as_tensor((np.arange(width)[None, :] < response_len[:, None]).astype(np.float32))


def sequence_arrays(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]
) -> dict[str, np.ndarray]:
    """Token lists as the row arrays :func:`right_padded` reads (the warm start's worked solutions)."""
    prompt_ids = np.zeros((len(prompts), max(len(p) for p in prompts)), dtype=np.int64)
    response_ids = np.zeros((len(responses), max(len(r) for r in responses)), dtype=np.int64)
    for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        prompt_ids[row, : len(prompt)] = prompt
        response_ids[row, : len(response)] = response
    return {
        "prompt_ids": prompt_ids,
        "prompt_len": np.array([len(p) for p in prompts], dtype=np.int64),
        "response_ids": response_ids,
        "response_len": np.array([len(r) for r in responses], dtype=np.int64),
    }
