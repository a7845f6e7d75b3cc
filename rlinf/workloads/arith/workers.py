"""The GRPO components as workers the executor drives (plain classes; they import nothing from the executor).

Each follows the worker protocol (``setup``, ``compute -> (payload, info)``, ``state_tensors``, ``weights``,
``load_weights``, ``checkpoint``) and wraps the components of :mod:`~rlinf.workloads.arith.components`:

* :class:`RolloutWorker` runs ``generate`` op ``k`` of ``m`` as a segment of one streamed generation: op 0
  draws the iteration's prompts and starts :func:`stream_groups`; op ``k`` continues it until its quota of
  groups has finished and returns exactly those, in completion order (elastic pipelining: a consumer starts
  on the first groups while the long tail is still generating);
* :class:`RewardWorker` verifies each group and computes its advantages (a group needs nothing else);
* :class:`InferenceWorker` adds old-policy and reference log-probabilities;
* :class:`ActorWorker` accumulates gradients micro-batch by micro-batch as they arrive and steps the
  optimizer whenever a mini-batch is complete, averaging gradients over its data-parallel replicas.

Every worker starts from the warm-started policy (:func:`~rlinf.workloads.arith.warm_start.cached_warm_start`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Collection, Sequence
from typing import Any

import attrs
import numpy as np
import torch

from rlinf.api import WorkerContext
from rlinf.core.errors import ConfigError
from rlinf.core.lowering import micro_batch_ranges
from rlinf.workloads.arith import components
from rlinf.workloads.arith.backend_registry import rollout_backend_class
from rlinf.workloads.arith.backends import (
    OptimConfig,
    TorchRolloutBackend,
    TorchTrainBackend,
)
from rlinf.workloads.arith.config import ArithGrpoConfig
from rlinf.workloads.arith.evaluation import evaluate, model_config
from rlinf.workloads.arith.generation import SamplingParams
from rlinf.workloads.arith.model import token_logprobs
from rlinf.workloads.arith.objectives import GrpoObjective
from rlinf.workloads.arith.payloads import (
    Payload,
    concat_rows,
    length_sorted_chunks,
    pack_groups,
    pack_training,
    scored_batch,
    to_numpy,
    to_tensors,
    unpack_groups,
    unpack_training,
)
from rlinf.workloads.arith.task import ArithProblem, heldout_problems, sample_problems
from rlinf.workloads.arith.tokenizer import ArithTokenizer
from rlinf.workloads.arith.warm_start import cached_warm_start, policy_from


def iteration_problems(config: ArithGrpoConfig, iteration: int, heldout: Collection[ArithProblem]) -> list:
    """The prompts of ``iteration``, none of them held out (all replicas draw the same list and take their
    slice)."""
    rng = random.Random(config.seed * 1_000_003 + iteration)
    return sample_problems(config.grpo.prompts_per_iteration, config.task, rng, exclude=heldout)


def long_tail_prompts(config: ArithGrpoConfig, iteration: int) -> frozenset[int]:
    """Indices of the prompts of ``iteration`` whose responses run to ``max_new_tokens``."""
    count = round(config.grpo.long_tail_fraction * config.grpo.prompts_per_iteration)
    rng = random.Random(config.seed * 7_919 + iteration)
    return frozenset(rng.sample(range(config.grpo.prompts_per_iteration), count))


class RolloutWorker:
    """Generates this replica's share of the prompt groups, streaming finished groups op by op."""

    collective = False
    """Calls no collective: its replicas need no group (:attr:`executor.WorkerSpec.collective`)."""

    def setup(self, config: ArithGrpoConfig, context: WorkerContext) -> None:
        rank, world, device = context.rank, context.world, context.device
        self.config, self.rank, self.world = config, rank, world
        self.tokenizer = ArithTokenizer()
        self.sizes = model_config(config, self.tokenizer)
        backend_class = rollout_backend_class(config.backends.rollout)
        self.backend = backend_class(
            self.sizes,
            eos_id=self.tokenizer.eos_id,
            pad_id=self.tokenizer.pad_id,
            seed=config.seed,
            device=device.torch_device,
        )
        self.backend.load_weights(cached_warm_start(config, self.sizes).weights)
        self.params = SamplingParams(
            max_new_tokens=config.grpo.max_new_tokens, temperature=config.grpo.temperature
        )
        self.heldout = frozenset(heldout_problems(config.eval.num_problems, config.task, config.eval.seed))
        self.iteration = 0
        self.stream: Any = None
        self.finished: list[components.ProblemGroup] = []
        self.quotas = [hi - lo for lo, hi in map(context.my_groups, range(context.num_micro_batches))]
        self.first_prompt, self.end_prompt = context.my_batch()

    def _start_iteration(self) -> None:
        self.iteration += 1
        config = self.config
        first, share = self.first_prompt, self.end_prompt - self.first_prompt
        problems = iteration_problems(config, self.iteration, self.heldout)[first : first + share]
        tail = long_tail_prompts(config, self.iteration)
        minimum = [config.grpo.max_new_tokens if first + i in tail else 0 for i in range(share)]
        rollout = components.RolloutWorker(
            self.backend, self.tokenizer, group_size=config.grpo.group_size, params=self.params
        )
        seed = config.seed * 1_000_003 + self.iteration * 101 + self.rank
        self.stream = rollout.stream(problems, seed=seed, min_new_tokens=minimum if tail else None)
        self.first_index = first

    def compute(
        self, op_name: str, micro_batch: int, step: int, inputs: Sequence[Payload]
    ) -> tuple[Payload, dict[str, Any]]:
        assert op_name == "generate", f"rollout workers run generate, not {op_name}"
        if micro_batch == 0:
            self._start_iteration()
        quota = self.quotas[micro_batch]
        while len(self.finished) < quota:
            self.finished.append(next(self.stream))
        emitted, self.finished = self.finished[:quota], self.finished[quota:]
        if micro_batch == len(self.quotas) - 1:
            assert next(self.stream, None) is None, "the rollout finished an iteration with groups left over"
        groups = [
            components.ProblemGroup(
                problem=g.problem, rollout=_renumber(g.rollout, self.first_index + g.rollout.group_index)
            )
            for g in emitted
        ]
        payload = pack_groups(
            groups,
            prompt_width=self.sizes.max_seq_len,
            response_width=self.config.grpo.max_new_tokens,
            pad_id=self.tokenizer.pad_id,
        )
        lengths = payload["response_len"].reshape(-1)
        info = {
            "groups": len(groups),
            "response_tokens": int(lengths.sum()),
            "response_lengths": [int(n) for n in lengths],
        }
        return payload, info

    def state_tensors(self) -> list:
        model = getattr(self.backend, "model", None)
        return [] if model is None else list(model.parameters()) + list(model.buffers())

    def weights(self) -> dict[str, np.ndarray]:
        raise AssertionError("rollout workers do not send weights")

    def load_weights(self, payload: Payload) -> None:
        self.backend.load_weights(to_tensors(payload))

    def checkpoint(self) -> dict[str, Any]:
        """The iteration count (prompts and sampling seeds follow from it) and the synced weights."""
        return {"iteration": self.iteration, "weights": _copy_weights(getattr(self.backend, "model", None))}

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`checkpoint` of the same replica."""
        self.iteration = int(state["iteration"])
        if state["weights"] is not None:
            self.backend.load_weights(state["weights"])


def _renumber(rollout: Any, index: int) -> Any:
    return attrs.evolve(rollout, group_index=index)


def _copy_weights(model: torch.nn.Module | None) -> dict[str, torch.Tensor] | None:
    """A host copy of ``model``'s state (``None`` for a backend without a torch model, e.g. vLLM)."""
    if model is None:
        return None
    return {name: tensor.detach().cpu().clone() for name, tensor in model.state_dict().items()}


class RewardWorker:
    """The verifier and the group-relative advantages of every group it receives."""

    collective = False
    """Calls no collective: its replicas need no group (:attr:`executor.WorkerSpec.collective`)."""

    def setup(self, config: ArithGrpoConfig, context: WorkerContext) -> None:
        self.tokenizer = ArithTokenizer()
        self.reward = components.RewardWorker(
            self.tokenizer, answer_format=config.task.answer_format, grpo=config.grpo.grpo()
        )

    def compute(
        self, op_name: str, micro_batch: int, step: int, inputs: Sequence[Payload]
    ) -> tuple[Payload, dict[str, Any]]:
        assert op_name == "reward", f"reward workers run reward, not {op_name}"
        payload = concat_rows(inputs)
        scored = [self.reward.score(group) for group in unpack_groups(payload)]
        rewards = np.array([s.rewards for s in scored], dtype=np.float32)
        advantages = np.array([s.advantages for s in scored], dtype=np.float32)
        out = {**payload, "rewards": rewards, "advantages": advantages}
        return out, {"reward_sum": float(rewards.sum()), "responses": int(rewards.size)}

    def state_tensors(self) -> list:
        return []

    def weights(self) -> dict[str, np.ndarray]:
        return {}

    def load_weights(self, payload: Payload) -> None:
        raise AssertionError("reward workers receive no weights")

    def checkpoint(self) -> dict[str, Any]:
        """Nothing: the verifier is stateless."""
        return {}

    def restore(self, state: dict[str, Any]) -> None:
        """Nothing to restore."""


class InferenceWorker:
    """Old-policy (synced from the actor every iteration) and reference (warm start) log-probabilities."""

    collective = False
    """Calls no collective: its replicas need no group (:attr:`executor.WorkerSpec.collective`)."""

    def setup(self, config: ArithGrpoConfig, context: WorkerContext) -> None:
        device = context.device
        self.tokenizer = ArithTokenizer()
        self.sizes = model_config(config, self.tokenizer)
        self.device = torch.device(device.torch_device)
        warm = cached_warm_start(config, self.sizes).weights
        self.policy = policy_from(self.sizes, warm).to(self.device)
        self.reference = policy_from(self.sizes, warm).to(self.device) if config.grpo.kl_coef > 0 else None
        self.chunk_size = config.grpo.micro_batch_size

    def compute(
        self, op_name: str, micro_batch: int, step: int, inputs: Sequence[Payload]
    ) -> tuple[Payload, dict[str, Any]]:
        assert op_name == "infer", f"inference workers run infer, not {op_name}"
        payload = concat_rows(inputs)
        batch = scored_batch(payload, self.tokenizer.pad_id)
        old = torch.zeros(batch.response_mask.shape)
        ref = None if self.reference is None else torch.zeros(batch.response_mask.shape)
        with torch.no_grad():
            for rows, chunk in length_sorted_chunks(batch, self.chunk_size):
                tokens = chunk.tokens.to(self.device)
                width = tokens.shape[1] - 1
                old[rows, :width] = token_logprobs(self.policy, tokens).cpu()
                if ref is not None and self.reference is not None:
                    ref[rows, :width] = token_logprobs(self.reference, tokens).cpu()
        batch = attrs.evolve(batch, old_logprobs=old, ref_logprobs=ref)
        out = pack_training(
            batch,
            num_groups=len(payload["group_index"]),
            seq_width=self.sizes.max_seq_len,
            pad_id=self.tokenizer.pad_id,
        )
        return out, {}

    def state_tensors(self) -> list:
        models = [self.policy] + ([self.reference] if self.reference is not None else [])
        return [t for m in models for t in list(m.parameters()) + list(m.buffers())]

    def weights(self) -> dict[str, np.ndarray]:
        raise AssertionError("inference workers do not send weights")

    def load_weights(self, payload: Payload) -> None:
        self.policy.load_state_dict(to_tensors(payload))

    def checkpoint(self) -> dict[str, Any]:
        """The synced old policy (the reference is the warm start, rebuilt by ``setup``)."""
        return {"policy": _copy_weights(self.policy)}

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`checkpoint` of the same replica."""
        self.policy.load_state_dict({k: v.to(self.device) for k, v in state["policy"].items()})


class ActorWorker:
    """GRPO training on micro-batches as they arrive; data-parallel over the component's replicas."""

    def setup(self, config: ArithGrpoConfig, context: WorkerContext) -> None:
        rank, world, device = context.rank, context.world, context.device
        if config.backends.train != "torch":
            raise ConfigError(
                "backends.train",
                config.backends.train,
                "rlinf train streams micro-batches into the torch train backend only",
                "use backends.train: torch",
            )
        self.config, self.rank, self.world = config, rank, world
        self.tokenizer = ArithTokenizer()
        self.sizes = model_config(config, self.tokenizer)
        rl = config.grpo
        optim = OptimConfig(lr=rl.lr, max_grad_norm=rl.max_grad_norm, warmup_steps=rl.warmup_steps)
        self.backend = TorchTrainBackend(
            self.sizes, optim=optim, seed=config.seed, device=device.torch_device
        )
        warm = cached_warm_start(config, self.sizes)
        self.backend.load_weights(warm.weights)
        self.warm_start_accuracy = warm.heldout_accuracy
        self.objective = GrpoObjective(rl.grpo())
        first, end = context.my_batch()  # replicas may hold a group more or less than one another
        sequences = (end - first) * rl.group_size
        self.boundaries = [
            hi for _, hi in micro_batch_ranges(sequences, min(rl.optimizer_steps_per_iteration, sequences))
        ]
        self.iteration, self.seen, self.mini_batch = 1, 0, 0

    def compute(
        self, op_name: str, micro_batch: int, step: int, inputs: Sequence[Payload]
    ) -> tuple[Payload, dict[str, Any]]:
        assert op_name == "train", f"actor workers run train, not {op_name}"
        batch = unpack_training(concat_rows(inputs))
        expected = self.boundaries[-1]
        # An iteration ends only by completing (a failed run stops every worker; restore starts afresh), so a
        # count off its share is a routing bug: fail here rather than carry a half mini-batch into the next one.
        assert micro_batch > 0 or self.seen == 0, (
            f"actor[{self.rank}] starts an iteration with {self.seen} of the last one's {expected} sequences"
        )
        assert self.seen + batch.num_sequences <= expected, (
            f"actor[{self.rank}] received {batch.num_sequences} sequences in micro-batch {micro_batch} after "
            f"{self.seen}: more than its {expected} per iteration (rlinf.app.jobs.plans.check_plan admits only plans "
            f"that route each replica its share)"
        )
        info: dict[str, Any] = {}
        if self.iteration == 1 and self.seen == 0 and self.rank == 0 and self.config.execution.heldout_eval:
            info["warm_start_accuracy"] = self.warm_start_accuracy
        steps: list[dict[str, float]] = []
        offset = 0
        while offset < batch.num_sequences:
            end = self.boundaries[self.mini_batch]
            start = self.boundaries[self.mini_batch - 1] if self.mini_batch else 0
            take = min(batch.num_sequences - offset, end - self.seen)
            part = batch.select(slice(offset, offset + take))
            if self.seen == start:  # a new mini-batch: its gradient starts from zero (kept after its step)
                self.terms: dict[str, float] = {}
                self.backend.zero_grad()
            for _, mb in length_sorted_chunks(part, self.config.grpo.micro_batch_size):
                share = mb.num_sequences / (end - start)
                for key, value in self.backend.accumulate(mb, self.objective, share).items():
                    self.terms[key] = self.terms.get(key, 0.0) + value * share
            self.seen += take
            offset += take
            if self.seen == end:
                reduce = self._average if self.world > 1 else None
                steps.append({**self.terms, "grad_norm": self.backend.apply_step(reduce)})
                self.mini_batch += 1
        if steps:
            info.update({key: float(np.mean([s[key] for s in steps])) for key in steps[0]})
            if self.rank == 0:
                info["optimizer_steps"] = len(steps)
        if self.seen == self.boundaries[-1]:
            info.update(self._end_iteration())
        return {}, info

    def _end_iteration(self) -> dict[str, Any]:
        config = self.config
        iteration, self.iteration = self.iteration, self.iteration + 1
        self.seen, self.mini_batch = 0, 0
        due = iteration % config.eval.every_iterations == 0 or iteration == config.grpo.num_iterations
        if not (config.execution.heldout_eval and due and self.rank == 0):
            return {}
        started = time.perf_counter()
        rollout = TorchRolloutBackend(
            self.sizes,
            eos_id=self.tokenizer.eos_id,
            pad_id=self.tokenizer.pad_id,
            seed=0,
            device=str(self.backend.device),
        )
        rollout.load_weights(self.backend.weights())
        heldout = heldout_problems(config.eval.num_problems, config.task, config.eval.seed)
        accuracy = evaluate(rollout, heldout, self.tokenizer, config)
        return {"heldout_accuracy": accuracy, "eval_s": time.perf_counter() - started}

    def _average(self, grads: list[torch.Tensor]) -> None:
        import torch.distributed as dist

        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()

    def state_tensors(self) -> list:
        tensors = list(self.backend.model.parameters()) + list(self.backend.model.buffers())
        for state in self.backend.optimizer.state.values():
            tensors.extend(v for v in state.values() if torch.is_tensor(v))
        return tensors

    def weights(self) -> dict[str, np.ndarray]:
        return to_numpy(self.backend.weights())

    def load_weights(self, payload: Payload) -> None:
        raise AssertionError("the actor is the source of weights")

    def checkpoint(self) -> dict[str, Any]:
        """Weights, optimizer state and step count, the completed iterations and torch's RNG (taken between
        iterations, when no mini-batch is half accumulated)."""
        return {
            "actor": self.backend.state_dict(),
            "iteration": self.iteration - 1,
            "torch_rng": torch.get_rng_state(),
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`checkpoint` of the same replica."""
        self.backend.load_state_dict(state["actor"])
        self.iteration, self.seen, self.mini_batch = int(state["iteration"]) + 1, 0, 0
        torch.set_rng_state(state["torch_rng"])
