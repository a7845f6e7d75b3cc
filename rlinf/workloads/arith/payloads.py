"""GRPO data as executor payloads: mappings of numpy arrays whose first axis is the prompt group.

One row per group keeps groups whole when the executor splits a micro-batch between replicas. Arrays have
fixed widths (the longest prompt, ``max_new_tokens``, the model's ``max_seq_len``), so payloads from several
producers concatenate. Three stages:

* rollout -> reward (:func:`pack_groups`): operands, prompt and response ids with lengths, EOS flags;
* reward -> inference: the same plus ``rewards`` and ``advantages`` ``[n, G]``;
* inference -> actor (:func:`pack_training`): ``tokens [n, G, T]``, ``response_mask``, ``old_logprobs`` (and
  ``ref_logprobs``) ``[n, G, T - 1]``, ``advantages [n, G]``; :func:`unpack_training` flattens them back into a
  :class:`TrainBatch` of ``n x G`` sequences.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from rlinf.workloads.arith.batches import TrainBatch, sequences
from rlinf.workloads.arith.components import ProblemGroup
from rlinf.workloads.arith.generation import GroupRollout
from rlinf.workloads.arith.task import ArithProblem

Payload = Mapping[str, np.ndarray]


def pack_groups(
    groups: Sequence[ProblemGroup], *, prompt_width: int, response_width: int, pad_id: int
) -> dict[str, np.ndarray]:
    """Finished groups as one payload (rows in the order given)."""
    n = len(groups)
    size = groups[0].rollout.group_size if groups else 1
    prompt_ids = np.full((n, prompt_width), pad_id, dtype=np.int64)
    response_ids = np.full((n, size, response_width), pad_id, dtype=np.int64)
    response_len = np.zeros((n, size), dtype=np.int64)
    for row, group in enumerate(groups):
        prompt = group.rollout.prompt_ids
        prompt_ids[row, : len(prompt)] = prompt
        for member, ids in enumerate(group.rollout.response_ids):
            response_ids[row, member, : len(ids)] = ids
            response_len[row, member] = len(ids)
    return {
        "group_index": np.array([g.rollout.group_index for g in groups], dtype=np.int64),
        "a": np.array([g.problem.a for g in groups], dtype=np.int64),
        "b": np.array([g.problem.b for g in groups], dtype=np.int64),
        "width": np.array([g.problem.width for g in groups], dtype=np.int64),
        "prompt_ids": prompt_ids,
        "prompt_len": np.array([len(g.rollout.prompt_ids) for g in groups], dtype=np.int64),
        "response_ids": response_ids,
        "response_len": response_len,
        "ended_at_eos": np.array([g.rollout.ended_at_eos for g in groups], dtype=bool).reshape(n, size),
    }


def unpack_groups(payload: Payload) -> list[ProblemGroup]:
    """The groups of a rollout payload (response log-probabilities are not carried)."""
    groups = []
    for row in range(len(payload["group_index"])):
        lengths = payload["response_len"][row]
        responses = tuple(
            tuple(int(t) for t in payload["response_ids"][row, member, : lengths[member]])
            for member in range(len(lengths))
        )
        rollout = GroupRollout(
            group_index=int(payload["group_index"][row]),
            prompt_ids=tuple(int(t) for t in payload["prompt_ids"][row, : payload["prompt_len"][row]]),
            response_ids=responses,
            response_logprobs=tuple(() for _ in responses),
            ended_at_eos=tuple(bool(x) for x in payload["ended_at_eos"][row]),
        )
        problem = ArithProblem(int(payload["a"][row]), int(payload["b"][row]), int(payload["width"][row]))
        groups.append(ProblemGroup(problem=problem, rollout=rollout))
    return groups


def scored_batch(payload: Payload, pad_id: int) -> TrainBatch:
    """Every response of a scored payload as one right-padded batch (group-major) with its advantages."""
    prompts, responses = [], []
    for group in unpack_groups(payload):
        for ids in group.rollout.response_ids:
            prompts.append(group.rollout.prompt_ids)
            responses.append(ids)
    batch = sequences(prompts, responses, pad_id)
    advantages = torch.as_tensor(np.asarray(payload["advantages"], dtype=np.float32).reshape(-1))
    return TrainBatch(tokens=batch.tokens, response_mask=batch.response_mask, advantages=advantages)


def _pad(array: np.ndarray, width: int, value: float | int) -> np.ndarray:
    out = np.full((array.shape[0], width), value, dtype=array.dtype)
    out[:, : array.shape[1]] = array
    return out


def pack_training(
    batch: TrainBatch, *, num_groups: int, seq_width: int, pad_id: int
) -> dict[str, np.ndarray]:
    """A scored batch of ``num_groups`` groups as a group-major payload padded to ``seq_width`` tokens."""
    assert batch.advantages is not None and batch.old_logprobs is not None
    shape = (num_groups, batch.num_sequences // max(num_groups, 1))
    out = {
        "tokens": _pad(batch.tokens.numpy(), seq_width, pad_id).reshape(*shape, seq_width),
        "response_mask": _pad(batch.response_mask.numpy(), seq_width - 1, 0.0).reshape(*shape, -1),
        "old_logprobs": _pad(batch.old_logprobs.numpy(), seq_width - 1, 0.0).reshape(*shape, -1),
        "advantages": batch.advantages.numpy().reshape(shape),
    }
    if batch.ref_logprobs is not None:
        out["ref_logprobs"] = _pad(batch.ref_logprobs.numpy(), seq_width - 1, 0.0).reshape(*shape, -1)
    return out


def unpack_training(payload: Payload) -> TrainBatch:
    """The sequences of a training payload, trimmed to the longest one (trailing padding changes nothing in a
    causal model whose loss masks it)."""
    tokens = np.asarray(payload["tokens"])
    rows = tokens.shape[0] * tokens.shape[1]
    mask = np.asarray(payload["response_mask"]).reshape(rows, -1)
    used = int(np.nonzero(mask.any(axis=0))[0].max()) + 2 if mask.any() else 2

    def flat(key: str, width: int | None) -> torch.Tensor:
        array = np.asarray(payload[key])
        array = array.reshape(rows, -1) if array.ndim == 3 else array.reshape(rows)
        return torch.as_tensor(np.ascontiguousarray(array[:, :width] if width is not None else array))

    return TrainBatch(
        tokens=flat("tokens", used),
        response_mask=flat("response_mask", used - 1),
        advantages=flat("advantages", None),
        old_logprobs=flat("old_logprobs", used - 1),
        ref_logprobs=flat("ref_logprobs", used - 1) if "ref_logprobs" in payload else None,
    )


def concat_rows(parts: Sequence[Payload]) -> dict[str, np.ndarray]:
    """Concatenate non-empty payloads along the group axis (their keys must agree)."""
    present = [p for p in parts if p]
    if not present:
        return {}
    keys = sorted(present[0])
    for part in present:
        assert sorted(part) == keys, f"payload keys differ: {sorted(part)} vs {keys}"
    return {key: np.concatenate([np.asarray(p[key]) for p in present]) for key in keys}


def to_numpy(weights: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Weights as a payload (copied to host memory)."""
    return {name: tensor.detach().cpu().numpy().copy() for name, tensor in weights.items()}


def to_tensors(payload: Payload) -> dict[str, torch.Tensor]:
    """A weight payload as tensors."""
    return {name: torch.as_tensor(np.asarray(array)) for name, array in payload.items()}


def sequence_lengths(batch: TrainBatch) -> torch.Tensor:
    """Tokens of each sequence up to its last response token (prompt + response)."""
    columns = torch.arange(1, batch.response_mask.shape[1] + 1)
    return (batch.response_mask > 0).long().mul(columns).max(dim=1).values + 1


def length_sorted_chunks(batch: TrainBatch, size: int) -> list[tuple[torch.Tensor, TrainBatch]]:
    """Chunks of at most ``size`` sequences, sorted by length and each trimmed to its longest sequence, with the
    rows of ``batch`` each chunk holds: whole-batch and micro-batch processing pay for the same padding."""
    lengths = sequence_lengths(batch)
    order = torch.argsort(lengths, stable=True)
    chunks = []
    for start in range(0, batch.num_sequences, size):
        rows = order[start : start + size]
        width = max(int(lengths[rows].max()), 2)

        def cut(value: torch.Tensor | None, columns: int, rows: torch.Tensor = rows) -> torch.Tensor | None:
            return None if value is None else value[rows][:, :columns] if value.ndim == 2 else value[rows]

        chunk = TrainBatch(
            tokens=batch.tokens[rows, :width],
            response_mask=batch.response_mask[rows, : width - 1],
            advantages=cut(batch.advantages, 0),
            old_logprobs=cut(batch.old_logprobs, width - 1),
            ref_logprobs=cut(batch.ref_logprobs, width - 1),
        )
        chunks.append((rows, chunk))
    return chunks
