"""The GRPO workers as plain classes: rollout, reward, inference, actor, and the actor -> rollout weight sync.

Here they are ordinary objects called in order by :mod:`~rlinf.workloads.arith.learn`;
:mod:`~rlinf.workloads.arith.workers` wraps them for the executor (``rlinf train``). Data between them is
typed: the rollout streams :class:`ProblemGroup`, the reward turns each into a :class:`ScoredGroup` (rewards
and group-normalized advantages, computable per group, so no barrier is needed before the reward),
:func:`training_batch` packs scored groups into a :class:`TrainBatch`, the inference worker adds old-policy
and reference log-probabilities, and the actor trains on micro-batches of it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import torch

from rlinf.algorithms.grpo import GrpoConfig, group_advantages
from rlinf.core.errors import ConfigError, require
from rlinf.workloads.arith.backends import RolloutBackend, TrainBackend, TrainMetrics
from rlinf.workloads.arith.batches import TrainBatch, sequences
from rlinf.workloads.arith.generation import GroupRollout, SamplingParams
from rlinf.workloads.arith.model import DecoderTransformer, TransformerConfig, token_logprobs
from rlinf.workloads.arith.objectives import GrpoObjective, SupervisedObjective
from rlinf.workloads.arith.task import ArithProblem, carry_free_solution_text, solution_text, verify
from rlinf.workloads.arith.tokenizer import ArithTokenizer


@attrs.frozen(kw_only=True)
class ProblemGroup:
    """A finished rollout group together with the problem it answers."""

    problem: ArithProblem
    rollout: GroupRollout


@attrs.frozen(kw_only=True)
class ScoredGroup:
    """A group with one reward and one advantage per response."""

    problem: ArithProblem
    rollout: GroupRollout
    rewards: tuple[float, ...]
    advantages: tuple[float, ...]


class RolloutWorker:
    """Turns problems into groups of sampled responses, streaming each group as soon as it is complete."""

    def __init__(
        self, backend: RolloutBackend, tokenizer: ArithTokenizer, *, group_size: int, params: SamplingParams
    ) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.group_size = group_size
        self.params = params

    def stream(
        self, problems: Sequence[ArithProblem], *, seed: int, min_new_tokens: Sequence[int] | None = None
    ) -> Iterator[ProblemGroup]:
        """Groups in the order they finish; ``min_new_tokens`` (one per problem) forbids early EOS."""
        prompts = [self.tokenizer.encode_prompt(p.prompt) for p in problems]
        for rollout in self.backend.stream_groups(
            prompts, group_size=self.group_size, params=self.params, seed=seed, min_new_tokens=min_new_tokens
        ):
            yield ProblemGroup(problem=problems[rollout.group_index], rollout=rollout)


class RewardWorker:
    """The verifier: reward 1 for an exact answer, then GRPO advantages within the group."""

    def __init__(self, tokenizer: ArithTokenizer, *, answer_format: str, grpo: GrpoConfig) -> None:
        self.tokenizer = tokenizer
        self.answer_format = answer_format
        self.grpo = grpo

    def score(self, group: ProblemGroup) -> ScoredGroup:
        rewards = [
            verify(group.problem, self.tokenizer.decode(ids), self.answer_format) if ended else 0.0
            for ids, ended in zip(group.rollout.response_ids, group.rollout.ended_at_eos, strict=True)
        ]
        advantages = group_advantages(
            torch.tensor([rewards]), scale_by_std=self.grpo.scale_by_std, std_eps=self.grpo.std_eps
        )
        return ScoredGroup(
            problem=group.problem,
            rollout=group.rollout,
            rewards=tuple(rewards),
            advantages=tuple(advantages[0].tolist()),
        )


def training_batch(groups: Sequence[ScoredGroup], pad_id: int) -> TrainBatch:
    """All responses of ``groups`` as one right-padded batch with per-sequence advantages."""
    prompts = [g.rollout.prompt_ids for g in groups for _ in g.rollout.response_ids]
    responses = [ids for g in groups for ids in g.rollout.response_ids]
    batch = sequences(prompts, responses, pad_id)
    advantages = torch.tensor([a for g in groups for a in g.advantages], dtype=torch.float32)
    return attrs.evolve(batch, advantages=advantages)


def supervised_batch(
    problems: Sequence[ArithProblem],
    tokenizer: ArithTokenizer,
    *,
    answer_format: str,
    teacher_error_rate: float = 0.0,
    rng: random.Random | None = None,
) -> TrainBatch:
    """Prompts followed by worked solutions for the warm start.

    With ``teacher_error_rate > 0`` each solution is, with that probability (drawn from ``rng``), the one of a
    sloppy teacher who forgets carries (:func:`~rlinf.workloads.arith.task.carry_free_solution_text`).
    """
    require(
        0.0 <= teacher_error_rate <= 1.0,
        "warm_start.teacher_error_rate",
        teacher_error_rate,
        "must be in [0, 1]",
        "use a probability",
    )
    if teacher_error_rate > 0.0 and rng is None:
        raise ConfigError("rng", rng, "a sloppy teacher needs an RNG", "pass rng=random.Random(seed)")
    prompts = [tokenizer.encode_prompt(p.prompt) for p in problems]
    texts = []
    for problem in problems:
        sloppy = rng is not None and teacher_error_rate > 0.0 and rng.random() < teacher_error_rate
        texts.append(
            carry_free_solution_text(problem, answer_format)
            if sloppy
            else solution_text(problem, answer_format)
        )
    responses = [tokenizer.encode_response(text) for text in texts]
    return sequences(prompts, responses, tokenizer.pad_id)


class InferenceWorker:
    """Scores batches under the old policy (a synced copy of the actor) and the frozen reference policy."""

    def __init__(self, model_config: TransformerConfig, *, seed: int, with_reference: bool) -> None:
        self.policy = DecoderTransformer(model_config, seed=seed).eval().requires_grad_(False)
        self.reference = (
            DecoderTransformer(model_config, seed=seed).eval().requires_grad_(False)
            if with_reference
            else None
        )

    def load_policy_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        self.policy.load_state_dict(weights)

    def load_reference_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        if self.reference is not None:
            self.reference.load_state_dict(weights)

    def score(self, batch: TrainBatch) -> TrainBatch:
        """``batch`` with ``old_logprobs`` (and ``ref_logprobs`` when a reference is kept) filled in."""
        with torch.no_grad():
            old = token_logprobs(self.policy, batch.tokens)
            ref = None if self.reference is None else token_logprobs(self.reference, batch.tokens)
        return attrs.evolve(batch, old_logprobs=old, ref_logprobs=ref)


class ActorWorker:
    """The trained policy: supervised warm-start steps and GRPO steps over micro-batches."""

    def __init__(self, backend: TrainBackend, *, grpo: GrpoConfig) -> None:
        self.backend = backend
        self.grpo_objective = GrpoObjective(grpo)
        self.supervised_objective = SupervisedObjective()

    def train_step(self, micro_batches: Sequence[TrainBatch]) -> TrainMetrics:
        """One GRPO optimizer step, gradients accumulated over ``micro_batches``."""
        return self.backend.train_step(micro_batches, self.grpo_objective)

    def warm_start_step(self, micro_batches: Sequence[TrainBatch]) -> TrainMetrics:
        """One supervised optimizer step on worked solutions."""
        return self.backend.train_step(micro_batches, self.supervised_objective)

    def weights(self) -> dict[str, torch.Tensor]:
        return self.backend.weights()

    def state_dict(self) -> dict[str, Any]:
        return self.backend.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.backend.load_state_dict(state)


def sync_weights(actor: ActorWorker, rollout: RolloutBackend) -> None:
    """Copy the actor's current weights into the rollout's model in place."""
    rollout.load_weights(actor.weights())
