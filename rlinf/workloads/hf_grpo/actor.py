"""The actor component: GRPO training of the causal LM on micro-batches as they stream in.

An iteration's share of sequences is cut into ``grpo.optimizer_steps_per_iteration`` mini-batches (one AdamW
step each; from the second on, the policy differs from the old one and the ratio clipping acts). Streamed
micro-batches accumulate into the current mini-batch's gradient in length-sorted chunks of
``grpo.micro_batch_size`` sequences, each weighted by its share, so the gradient equals the whole mini-batch's.
Data-parallel replicas combine their gradients with one all-reduce of a flat buffer (weighted by their
sequence counts, exact for uneven shares). With ``grpo.skip_zero_advantages`` the responses of groups whose
rewards are all equal are not run at all (they would add zero gradient). The loss is :func:`rlinf.algorithms.grpo.grpo_loss`. On CUDA devices
the forward pass runs in bfloat16 autocast over float32 weights. The model is the ``backends.actor`` backend
(:mod:`~rlinf.workloads.hf_grpo.backends`: ``transformers`` or megatron-core); its weights leave it under Hugging
Face names; the executor stamps them with their policy version (the iterations trained so far).

The ratio is taken against ``old_logprobs``, the behaviour policy's: the inference component scores each response
with the weights version that sampled it, which under a staleness bound ``k`` is up to ``k`` training steps behind
this actor. Each iteration reports how far behind (``policy_lag_max``, ``policy_lag_mean``: the lag of the stamp the
executor put on each response's payload, :func:`rlinf.api.stamp_of`) and ``behaviour_kl``, the mean ``log pi_behaviour - log pi_current`` over the response
tokens of the first mini-batch before its optimizer step (an estimate of KL(behaviour || current); 0 when
synchronous).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from rlinf.algorithms.grpo import grpo_loss
from rlinf.api import WorkerContext, concat_payloads, stamp_of
from rlinf.workloads.hf_grpo.backend_registry import policy_backend
from rlinf.workloads.hf_grpo.backends import host_copy
from rlinf.workloads.hf_grpo.checkpoints import compute_dtype, load_tokenizer, weights_payload
from rlinf.workloads.hf_grpo.config import HfGrpoConfig
from rlinf.workloads.hf_grpo.evaluation import heldout_accuracies
from rlinf.workloads.hf_grpo.payloads import (
    Payload,
    flat_sequences,
    length_sorted_chunks,
    response_mask,
    right_padded,
)
from rlinf.workloads.hf_grpo.warm_start import warm_start_checkpoint

TERMS = ("loss", "policy_loss", "kl", "clip_fraction")


def mini_batch_ends(num_sequences: int, num_steps: int) -> list[int]:
    """Where each of ``num_steps`` mini-batches of ``num_sequences`` ends (as even as integers allow)."""
    steps = max(1, min(num_steps, num_sequences))
    return [(k + 1) * num_sequences // steps for k in range(steps)]


def accuracy_metrics(
    accuracies: Mapping[str, float], sets: Sequence[str], *, prefix: str
) -> dict[str, float]:
    """``<prefix><set>_accuracy`` for each of ``sets`` and ``<prefix>accuracy`` (``heldout_accuracy`` without a
    prefix) for the first: the set the run reports."""
    first = f"{prefix}accuracy" if prefix else "heldout_accuracy"
    return {first: accuracies[sets[0]], **{f"{prefix}{name}_accuracy": accuracies[name] for name in sets}}


class ActorWorker:
    """GRPO training on micro-batches as they arrive; data-parallel over the component's replicas."""

    def setup(self, config: HfGrpoConfig, context: WorkerContext) -> None:
        self.config, self.rank, self.world = config, context.rank, context.world
        self.device = torch.device(context.device.torch_device)
        warm = warm_start_checkpoint(config, self.device)
        self.warm_start_accuracies = warm.accuracies
        self.heldout = config.heldout_sets()
        self.tokenizer = load_tokenizer(warm.directory)
        self.backend = policy_backend(
            "actor",
            config.backends.actor,
            warm.directory,
            device=self.device,
            dtype=torch.float32,
            seed=config.seed,
        )
        self.backend.train(True)
        rl = config.grpo
        self.optimizer = torch.optim.AdamW(self.backend.parameters(), lr=rl.lr, weight_decay=0.0)
        groups = sum(hi - lo for lo, hi in map(context.my_groups, range(context.num_micro_batches)))
        self.ends = mini_batch_ends(groups * rl.group_size, rl.optimizer_steps_per_iteration)
        self.iteration, self.updates = 1, 0
        self.seen, self.mini_batch = 0, 0
        self.terms: dict[str, float] = {}
        self.staleness = _Staleness()
        self._payload: Payload | None = None
        """The last weight-sync payload (:meth:`weights`); dropped whenever the weights change."""

    def compute(
        self, op_name: str, micro_batch: int, step: int, inputs: Sequence[Payload]
    ) -> tuple[Payload, dict[str, Any]]:
        """Accumulate the micro-batch into the current mini-batch; step the optimizer at each mini-batch end."""
        assert op_name == "train", f"actor workers run train, not {op_name}"
        payload = concat_payloads(inputs)
        info: dict[str, Any] = {}
        if (
            self.iteration == 1
            and self.seen == 0
            and self.rank == 0
            and self.warm_start_accuracies is not None
        ):
            info.update(
                accuracy_metrics(self.warm_start_accuracies, self.config.eval.sets, prefix="warm_start_")
            )
        steps: list[dict[str, float]] = []
        num = int(payload["response_len"].size) if payload else 0
        expected = self.ends[-1]
        # An iteration ends only by completing (a failed run stops every worker; restore starts afresh), so a count
        # off the share is a routing bug: fail here rather than carry a half mini-batch into the next iteration.
        assert micro_batch > 0 or self.seen == 0, (
            f"actor[{self.rank}] starts an iteration with {self.seen} of the last one's {expected} sequences"
        )
        assert self.seen + num <= expected, (
            f"actor[{self.rank}] received {num} sequences in micro-batch {micro_batch} after {self.seen}: more than "
            f"its {expected} per iteration (rlinf admits only plans that route each replica its share)"
        )
        for part in inputs:  # how far behind this actor each part's sampler was: the executor's stamp
            if part:
                self.staleness.add_lag(stamp_of(part).lag, int(part["response_len"].size))
        offset = 0
        while offset < num:
            start = self.ends[self.mini_batch - 1] if self.mini_batch else 0
            end = self.ends[self.mini_batch]
            take = min(num - offset, end - self.seen)
            if self.seen == start:
                self.optimizer.zero_grad(set_to_none=False)
                self.terms = dict.fromkeys(TERMS, 0.0)
            self._accumulate(payload, np.arange(offset, offset + take), end - start)
            self.seen += take
            offset += take
            if self.seen == end:
                steps.append({**self.terms, "grad_norm": self._step(end - start)})
                self.mini_batch += 1
        if steps:
            info.update({key: float(np.mean([s[key] for s in steps])) for key in steps[0]})
            if self.rank == 0:
                info["optimizer_steps"] = len(steps)
        if self.seen == self.ends[-1]:
            info.update(self._end_iteration())
        return {}, info

    def _accumulate(self, payload: Payload, rows: np.ndarray, mini_batch_size: int) -> None:
        """Backpropagate the GRPO loss of ``rows`` (of the flattened payload), weighted by their share."""
        sequences = flat_sequences(payload)
        groups, size, _ = payload["response_ids"].shape
        flat = {
            k: np.asarray(payload[k]).reshape(groups * size, -1)
            for k in ("old_logprobs", "ref_logprobs")
            if k in payload
        }
        advantages = np.asarray(payload["advantages"], dtype=np.float32).reshape(-1)
        if self.config.grpo.skips_zero_advantages:
            rows = rows[advantages[rows] != 0.0]  # no gradient; the share below still counts them
        total = sequences["prompt_len"][rows] + sequences["response_len"][rows]
        device = self.device
        for chunk in length_sorted_chunks(total, self.config.grpo.micro_batch_size):
            picked = rows[chunk]
            tokens, mask = right_padded(sequences, picked, self.tokenizer.pad_token_id)
            width = int(sequences["response_len"][picked].max())
            prompt_len = torch.as_tensor(sequences["prompt_len"][picked]).to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                logp = self.backend.response_logprobs(
                    tokens.to(device), mask.to(device), prompt_len, width, self.config.grpo.temperature
                )

            def column(key: str, picked: np.ndarray = picked, width: int = width) -> torch.Tensor | None:
                return torch.as_tensor(flat[key][picked, :width]).to(device) if key in flat else None

            old = column("old_logprobs")
            assert old is not None, "the actor needs old_logprobs from the inference component"
            mask = response_mask(sequences["response_len"][picked], width).to(device)
            if self.mini_batch == 0:  # no optimizer step yet this iteration: the weights the lag is against
                self.staleness.add_log_ratios(float(((old - logp.detach()) * mask).sum()), float(mask.sum()))
            terms = grpo_loss(
                logp,
                old,
                column("ref_logprobs"),
                torch.as_tensor(advantages[picked]).to(device),
                mask,
                self.config.grpo.grpo(),
            )
            share = len(picked) / mini_batch_size
            (terms.loss * share).backward()
            self.terms["loss"] += float(terms.loss.detach()) * share
            for key in ("policy_loss", "kl", "clip_fraction"):
                self.terms[key] += getattr(terms, key) * share

    def _step(self, num_sequences: int) -> float:
        """Average gradients over replicas, clip, step AdamW (with linear warm-up); the gradient norm."""
        params = self.backend.parameters()
        for param in params:  # every response skipped since setup: step on zeros, as without skipping
            if param.grad is None:
                param.grad = torch.zeros_like(param)
        if self.world > 1:
            average_gradients(params, num_sequences)
        rl = self.config.grpo
        norm = float(
            torch.nn.utils.clip_grad_norm_(params, rl.max_grad_norm if rl.max_grad_norm > 0 else float("inf"))
        )
        scale = min(1.0, (self.updates + 1) / rl.warmup_steps) if rl.warmup_steps else 1.0
        for group in self.optimizer.param_groups:
            group["lr"] = rl.lr * scale
        self.optimizer.step()
        self._payload = None
        self.updates += 1
        return norm

    def _end_iteration(self) -> dict[str, Any]:
        config = self.config
        iteration, self.iteration = self.iteration, self.iteration + 1
        self.seen, self.mini_batch = 0, 0
        info: dict[str, Any] = self.staleness.stats()
        self.staleness = _Staleness()
        due = iteration % config.eval.every_iterations == 0 or iteration == config.grpo.num_iterations
        if not (config.eval.enabled and due and self.rank == 0):
            return info
        started = time.perf_counter()
        accuracies = heldout_accuracies(
            self.backend.generation_model(),
            self.tokenizer,
            self.heldout,
            config.eval.sets,
            task=config.task,
            max_new_tokens=config.grpo.max_new_tokens,
            batch_size=config.eval.batch_size,
        )
        metrics = accuracy_metrics(accuracies, config.eval.sets, prefix="")
        return {**info, **metrics, "eval_s": time.perf_counter() - started}

    def state_tensors(self) -> list[Any]:
        tensors = self.backend.state_tensors()
        for state in self.optimizer.state.values():
            tensors.extend(v for v in state.values() if torch.is_tensor(v))
        return tensors

    def weights(self) -> Payload:
        """The policy's ``state_dict``, for the rollout and inference components: in the dtype they compute in on
        this device (:func:`compute_dtype`: bfloat16 on a GPU, float32 elsewhere), made once per optimizer step
        (every destination of an iteration's sync gets the same arrays)."""
        if self._payload is None:
            self._payload = weights_payload(self.backend.weights(), compute_dtype(self.device))
        return self._payload

    def checkpoint(self) -> dict[str, Any]:
        """Weights, optimizer state, the completed iterations and optimizer steps (between iterations)."""
        return {
            "model": host_copy(self.backend.weights()),
            "optimizer": self.optimizer.state_dict(),
            "iteration": self.iteration - 1,
            "updates": self.updates,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`checkpoint` of the same replica."""
        self.backend.load_weights(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.iteration, self.updates = int(state["iteration"]) + 1, int(state["updates"])
        self.seen, self.mini_batch = 0, 0
        self._payload = None


class _Staleness:
    """How far behind the actor one iteration's responses were sampled, accumulated over its micro-batches."""

    def __init__(self) -> None:
        self.lag_sum, self.lag_max, self.responses = 0, 0, 0
        self.log_ratio_sum, self.tokens = 0.0, 0.0

    def add_lag(self, lag: int, num_responses: int) -> None:
        """``num_responses`` responses sampled ``lag`` versions behind the actor (one stamp per payload: a group,
        never split between payloads, comes from one version)."""
        assert lag >= 0, f"responses sampled by a policy newer than the actor's (lag {lag})"
        self.lag_sum += lag * num_responses
        self.lag_max = max(self.lag_max, lag)
        self.responses += num_responses

    def add_log_ratios(self, total: float, num_tokens: float) -> None:
        """``sum(log pi_behaviour - log pi_current)`` over ``num_tokens`` response tokens, before any update."""
        self.log_ratio_sum += total
        self.tokens += num_tokens

    def stats(self) -> dict[str, float]:
        """``policy_lag_max``, ``policy_lag_mean`` and ``behaviour_kl`` (none when nothing was trained)."""
        if not self.responses:
            return {}
        return {
            "policy_lag_max": float(self.lag_max),
            "policy_lag_mean": self.lag_sum / self.responses,
            "behaviour_kl": self.log_ratio_sum / max(self.tokens, 1.0),
        }


def average_gradients(params: list[torch.nn.Parameter], num_sequences: int) -> None:
    """Replace each replica's mean gradient by the mean over all replicas' sequences: one all-reduce of a flat
    buffer holding ``num_sequences * grad`` and ``num_sequences``."""
    import torch.distributed as dist

    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1).float() for g in grads] + [grads[0].new_ones(1).float()])
    flat *= num_sequences
    dist.all_reduce(flat)
    flat = flat[:-1] / flat[-1]
    offset = 0
    for param, grad in zip(params, grads, strict=True):
        param.grad = flat[offset : offset + grad.numel()].view_as(grad).to(grad.dtype)
        offset += grad.numel()
