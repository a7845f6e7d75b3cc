"""The rollout component: samples ``group_size`` responses per prompt with the KV cache and streams each finished
group downstream, micro-batch by micro-batch (elastic pipelining).

At micro-batch 0 of an iteration the worker starts generating every prompt of its share (the groups of
``context.my_groups(j)`` over all micro-batches ``j``); ``compute`` for micro-batch ``j`` returns the next
``my_groups(j)`` count of groups *in the order they finish*, so short responses flow to the reward and inference
components while the long tail is still being sampled. Its weights are the actor's, synced after every iteration
(between two iterations, never during one: every response of an iteration, hence of a group, comes from the one
policy version the executor stamps on its payloads; under a staleness bound it may be up to ``max_staleness``
behind the actor).
The sampling engine is the ``backends.rollout`` backend (:mod:`~rlinf.workloads.hf_grpo.backends`); when the plan
offloads the rollout, an engine that owns its memory (vLLM) also sleeps between iterations.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from rlinf.api import ConfigError, WorkerContext
from rlinf.workloads.hf_grpo.backend_registry import rollout_backend
from rlinf.workloads.hf_grpo.checkpoints import compute_dtype, load_tokenizer, payload_tensors
from rlinf.workloads.hf_grpo.config import HfGrpoConfig
from rlinf.workloads.hf_grpo.generation import GroupRollout, SamplingParams
from rlinf.workloads.hf_grpo.payloads import Payload
from rlinf.workloads.hf_grpo.task import sample_problems
from rlinf.workloads.hf_grpo.warm_start import warm_start_checkpoint


def iteration_problems(config: HfGrpoConfig, iteration: int, exclude: frozenset[str]) -> list[Any]:
    """The problems of ``iteration`` (1-based), the same for every replica and plan; none of them in ``exclude``
    (the held-out prompts of both sets)."""
    rng = random.Random(config.seed * 1_000_003 + iteration)
    return sample_problems(config.grpo.prompts_per_iteration, config.task, rng, exclude=exclude)


def pack_groups(
    groups: Sequence[GroupRollout],
    answers: Sequence[int],
    config: HfGrpoConfig,
    pad_id: int,
) -> dict[str, np.ndarray]:
    """Finished groups as a rollout payload (one row per group; see :mod:`~rlinf.workloads.hf_grpo.payloads`)."""
    n, size = len(groups), config.grpo.group_size
    width, responses = config.grpo.max_prompt_tokens, config.grpo.max_new_tokens
    prompt_ids = np.full((n, width), pad_id, dtype=np.int64)
    response_ids = np.full((n, size, responses), pad_id, dtype=np.int64)
    response_len = np.zeros((n, size), dtype=np.int64)
    for row, group in enumerate(groups):
        prompt_ids[row, : len(group.prompt_ids)] = group.prompt_ids
        for member, ids in enumerate(group.response_ids):
            response_ids[row, member, : len(ids)] = ids
            response_len[row, member] = len(ids)
    return {
        "group_index": np.array([g.group_index for g in groups], dtype=np.int64),
        "answer": np.array(answers, dtype=np.int64),
        "prompt_ids": prompt_ids,
        "prompt_len": np.array([len(g.prompt_ids) for g in groups], dtype=np.int64),
        "response_ids": response_ids,
        "response_len": response_len,
        "ended_at_eos": np.array([g.ended_at_eos for g in groups], dtype=bool).reshape(n, size),
    }


class RolloutWorker:
    """Generates this replica's share of the prompt groups, streaming finished groups op by op."""

    collective = False
    """Calls no collective: its replicas need no group (:attr:`executor.WorkerSpec.collective`)."""

    def setup(self, config: HfGrpoConfig, context: WorkerContext) -> None:
        self.config = config
        self.device = torch.device(context.device.torch_device)
        warm = warm_start_checkpoint(config, self.device)
        self.tokenizer = load_tokenizer(warm.directory)
        self.backend = rollout_backend(
            config.backends.rollout,
            warm.directory,
            device=self.device,
            dtype=compute_dtype(self.device),
            eos_id=self.tokenizer.eos_token_id,
            pad_id=self.tokenizer.pad_token_id,
            seed=config.seed,
        )
        self.rank = context.rank
        self.offload = context.offload
        self.params = SamplingParams(
            max_new_tokens=config.grpo.max_new_tokens, temperature=config.grpo.temperature
        )
        ranges = [context.my_groups(j) for j in range(context.num_micro_batches)]
        self.quotas = [hi - lo for lo, hi in ranges]
        self.prompt_indices = [i for lo, hi in ranges for i in range(lo, hi)]
        self.heldout = config.heldout_sets().prompts
        self.iteration = 0
        self.sampling = False
        """Whether an iteration is being sampled (from its micro-batch 0 to its last): weights may not change then."""
        self.stream: Iterator[GroupRollout] = iter(())
        self.finished: list[GroupRollout] = []
        self.answers: list[int] = []

    def _start_iteration(self) -> None:
        self.iteration += 1
        problems = iteration_problems(self.config, self.iteration, self.heldout)
        mine = [problems[i] for i in self.prompt_indices]
        prompts = [self.tokenizer.encode(p.prompt) for p in mine]
        longest = max((len(p) for p in prompts), default=0)
        if longest > self.config.grpo.max_prompt_tokens:
            raise ConfigError(
                "grpo.max_prompt_tokens",
                self.config.grpo.max_prompt_tokens,
                f"is shorter than a prompt of {longest} tokens",
                f"set grpo.max_prompt_tokens >= {longest}",
            )
        self.answers = [p.answer for p in mine]
        self.sampling = True
        seed = self.config.seed * 1_000_003 + self.iteration * 101 + self.rank
        self.stream = self.backend.stream_groups(
            prompts, group_size=self.config.grpo.group_size, params=self.params, seed=seed
        )

    def compute(
        self, op_name: str, micro_batch: int, step: int, inputs: Sequence[Payload]
    ) -> tuple[Payload, dict[str, Any]]:
        """The next ``my_groups(micro_batch)`` count of finished groups (starting the iteration at 0)."""
        assert op_name == "generate", f"rollout workers run generate, not {op_name}"
        if micro_batch == 0:
            self._start_iteration()
        quota = self.quotas[micro_batch]
        while len(self.finished) < quota:
            self.finished.append(next(self.stream))
        emitted, self.finished = self.finished[:quota], self.finished[quota:]
        assert self.sampling, "the rollout emitted groups of an iteration it never started"
        if micro_batch == len(self.quotas) - 1:
            assert next(self.stream, None) is None, "the rollout finished an iteration with groups left over"
            self.sampling = False
            if self.offload:
                self.backend.offload()
        renumbered = [_renumber(g, self.prompt_indices[g.group_index]) for g in emitted]
        answers = [self.answers[g.group_index] for g in emitted]
        payload = pack_groups(renumbered, answers, self.config, self.tokenizer.pad_token_id)
        lengths = payload["response_len"].reshape(-1)
        info = {
            "groups": len(emitted),
            "response_tokens": int(lengths.sum()),
            "response_lengths": [int(n) for n in lengths],
            "truncated": int((~payload["ended_at_eos"]).sum()),
        }
        return payload, info

    def state_tensors(self) -> list[Any]:
        return self.backend.state_tensors()

    def load_weights(self, payload: Payload) -> None:
        """The actor's weights after a training step (the next iteration samples with them)."""
        assert not self.sampling, (
            f"the rollout received weights in the middle of iteration {self.iteration}, whose groups would mix "
            "two policy versions (the program syncs weights between a component's iterations)"
        )
        self.backend.load_weights(payload_tensors(payload))

    def checkpoint(self) -> dict[str, Any]:
        """The iteration count (prompts and sampling seeds follow from it) and the synced weights (None when the
        engine keeps them: the actor's checkpoint holds the same weights)."""
        return {"iteration": self.iteration, "model": self.backend.weights()}

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`checkpoint` of the same replica."""
        self.iteration = int(state["iteration"])
        if state["model"] is not None:
            self.backend.load_weights(state["model"])


def _renumber(group: GroupRollout, index: int) -> GroupRollout:
    """The group with its index in the iteration's prompt list (not in this replica's share)."""
    return GroupRollout(
        group_index=index,
        prompt_ids=group.prompt_ids,
        response_ids=group.response_ids,
        ended_at_eos=group.ended_at_eos,
    )
