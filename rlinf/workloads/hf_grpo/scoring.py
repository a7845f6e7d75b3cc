"""The reward and inference components.

The reward worker decodes each response with the checkpoint's tokenizer and scores it with the task's verifier
(:mod:`~rlinf.workloads.hf_grpo.task`: 1.0 for the exact answer); GRPO's group-normalized advantages (:func:`rlinf.algorithms.grpo.group_advantages`)
are computable per group, so it streams like the rollout. The inference worker adds the log-probabilities of
every response token under the old policy (the actor's weights as synced after the last training step: the
behaviour policy, the version that sampled, which under a staleness bound may be behind the actor) and, with a KL penalty, under the frozen reference (the warm start), both at the sampling
temperature: the policy GRPO optimizes is ``softmax(logits / grpo.temperature)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlinf.algorithms.grpo import group_advantages
from rlinf.api import WorkerContext, concat_payloads, stamp_of
from rlinf.workloads.hf_grpo.backend_registry import policy_backend
from rlinf.workloads.hf_grpo.backends import PolicyBackend, host_copy
from rlinf.workloads.hf_grpo.checkpoints import (
    base_checkpoint,
    cache_lock,
    compute_dtype,
    load_tokenizer,
    payload_tensors,
)
from rlinf.workloads.hf_grpo.config import HfGrpoConfig
from rlinf.workloads.hf_grpo.payloads import (
    Payload,
    flat_sequences,
    length_sorted_chunks,
    right_padded,
)
from rlinf.workloads.hf_grpo.warm_start import warm_start_checkpoint


class RewardWorker:
    """The task's verifier on every response, then advantages within each group."""

    collective = False
    """Calls no collective: its replicas need no group (:attr:`executor.WorkerSpec.collective`)."""

    def setup(self, config: HfGrpoConfig, context: WorkerContext) -> None:
        with cache_lock(Path(config.cache_dir)):
            self.tokenizer = load_tokenizer(base_checkpoint(config))
        self.grpo = config.grpo.grpo()
        self.task = config.task

    def score(self, payload: Payload) -> tuple[np.ndarray, np.ndarray]:
        """``(rewards, advantages)``, each ``[groups, group_size]``."""
        groups, size = payload["response_len"].shape
        rewards = np.zeros((groups, size), dtype=np.float32)
        for row in range(groups):
            for member in range(size):
                ids = payload["response_ids"][row, member, : payload["response_len"][row, member]]
                text = self.tokenizer.decode(ids.tolist(), skip_special_tokens=True)
                rewards[row, member] = self.task.reward(int(payload["answer"][row]), text)
        advantages = group_advantages(
            torch.as_tensor(rewards), scale_by_std=self.grpo.scale_by_std, std_eps=self.grpo.std_eps
        )
        return rewards, advantages.numpy().astype(np.float32)

    def compute(
        self, op_name: str, micro_batch: int, step: int, inputs: Sequence[Payload]
    ) -> tuple[Payload, dict[str, Any]]:
        assert op_name == "reward", f"reward workers run reward, not {op_name}"
        payload = concat_payloads(inputs)
        rewards, advantages = self.score(payload)
        out = {**payload, "rewards": rewards, "advantages": advantages}
        return out, {"reward_sum": float(rewards.sum()), "responses": int(rewards.size)}

    def checkpoint(self) -> dict[str, Any]:
        """Nothing: the verifier is stateless."""
        return {}

    def restore(self, state: dict[str, Any]) -> None:
        """Nothing to restore."""


def sequence_logprobs(
    policy: PolicyBackend,
    payload: Payload,
    *,
    pad_id: int,
    chunk_size: int,
    device: torch.device,
    temperature: float = 1.0,
    scored: np.ndarray | None = None,
) -> np.ndarray:
    """``[groups, group_size, max_new_tokens]`` float32 log-probabilities of the payload's response tokens under
    ``softmax(logits / temperature)`` (0 past each response), scored in length-sorted chunks of ``chunk_size``
    sequences; only the responses where ``scored`` (bool ``[groups, group_size]``) is true when it is given
    (the others stay 0)."""
    sequences = flat_sequences(payload)
    groups, size, width = payload["response_ids"].shape
    out = np.zeros((groups * size, width), dtype=np.float32)
    picked = np.arange(groups * size) if scored is None else np.flatnonzero(scored)
    total = sequences["prompt_len"][picked] + sequences["response_len"][picked]
    with torch.no_grad():
        for chunk in length_sorted_chunks(total, chunk_size):
            rows = picked[chunk]
            tokens, mask = right_padded(sequences, rows, pad_id)
            used = int(sequences["response_len"][rows].max())
            prompt_len = torch.as_tensor(sequences["prompt_len"][rows]).to(device)
            logp = (
                policy.response_logprobs(tokens.to(device), mask.to(device), prompt_len, used, temperature)
                .float()
                .cpu()
                .numpy()
            )
            valid = np.arange(used)[None, :] < sequences["response_len"][rows][:, None]
            out[rows, :used] = np.where(valid, logp, 0.0)
    return out.reshape(groups, size, width)


class InferenceWorker:
    """Behaviour-policy (synced from the actor with the rollout's) and reference (warm start) log-probabilities."""

    collective = False
    """Calls no collective: its replicas need no group (:attr:`executor.WorkerSpec.collective`)."""

    def setup(self, config: HfGrpoConfig, context: WorkerContext) -> None:
        self.device = torch.device(context.device.torch_device)
        warm = warm_start_checkpoint(config, self.device)
        dtype = compute_dtype(self.device)
        self.tokenizer = load_tokenizer(warm.directory)
        name = config.backends.inference

        def frozen() -> PolicyBackend:
            backend = policy_backend(
                "inference", name, warm.directory, device=self.device, dtype=dtype, seed=config.seed
            )
            backend.train(False)
            for param in backend.parameters():
                param.requires_grad_(False)
            return backend

        self.policy = frozen()
        self.version: int | None = 0
        """The version of :attr:`policy`, as the executor stamped its weight sync (0: the warm start); the rollout
        sampled with the same version. None: unknown until the next sync (restored from a checkpoint written
        before this was recorded)."""
        self.synced: dict[int, dict[str, Any]] = {}
        """Versions synced and not loaded yet, by stamp (host arrays). A batch is scored with the version that
        sampled it, loaded when its first micro-batch comes: right after the sync in a synchronous run; a
        staleness bound later behind the buffer (``Plan.buffer_before``), when the actor has moved on by then."""
        self.reference = frozen() if config.grpo.kl_coef > 0 else None
        self.chunk_size = config.grpo.micro_batch_size
        self.temperature = config.grpo.temperature
        self.skip_zero_advantages = config.grpo.skips_zero_advantages

    def compute(
        self, op_name: str, micro_batch: int, step: int, inputs: Sequence[Payload]
    ) -> tuple[Payload, dict[str, Any]]:
        assert op_name == "infer", f"inference workers run infer, not {op_name}"
        payload = concat_payloads(inputs)
        sampled_by = sorted({stamp_of(p).policy_version for p in inputs})
        if len(sampled_by) == 1:
            self._take(sampled_by[0])
        assert self.version is None or sampled_by == [self.version], (
            f"inference holds policy version {self.version} but scores responses sampled by "
            f"{sampled_by}: its old log-probabilities would not be the behaviour policy's"
        )
        score = {
            "pad_id": self.tokenizer.pad_token_id,
            "chunk_size": self.chunk_size,
            "device": self.device,
            "temperature": self.temperature,
        }
        if self.skip_zero_advantages:
            score["scored"] = np.asarray(payload["advantages"]) != 0.0  # the actor skips the others
        out = {**payload, "old_logprobs": sequence_logprobs(self.policy, payload, **score)}
        if self.reference is not None:
            out["ref_logprobs"] = sequence_logprobs(self.reference, payload, **score)
        return out, {}

    def state_tensors(self) -> list[Any]:
        models = [self.policy] + ([self.reference] if self.reference is not None else [])
        return [t for m in models for t in m.state_tensors()]

    def load_weights(self, payload: Payload) -> None:
        """The actor's weights, stamped with their version: the old policy of the batch that version samples, kept
        until that batch comes (:attr:`synced`)."""
        version = stamp_of(payload).policy_version
        self.synced[version] = {name: np.array(array, copy=True) for name, array in payload.items()}

    def _take(self, version: int) -> None:
        """Score with ``version`` from here on: load it if it was synced since, and forget the synced versions up to
        it (a later batch never comes from an older policy)."""
        if version in self.synced:  # a later sync of the version held replaces it too
            self.policy.load_weights(payload_tensors(self.synced[version]))
            self.version = version
        self.synced = {v: w for v, w in self.synced.items() if v > version}

    def checkpoint(self) -> dict[str, Any]:
        """The loaded old policy and its version, and the versions synced since (the reference is the warm
        start, rebuilt by ``setup``)."""
        return {
            "policy": host_copy(self.policy.weights()),
            "version": self.version,
            "synced": {version: dict(weights) for version, weights in self.synced.items()},
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`checkpoint` of the same replica."""
        self.policy.load_weights(state["policy"])
        version = state.get("version")  # absent from older checkpoints: unknown until the next sync
        self.version = None if version is None else int(version)
        synced = state.get("synced") or {}  # absent from checkpoints written before versions were kept
        self.synced = {int(v): {n: np.asarray(a) for n, a in w.items()} for v, w in synced.items()}
