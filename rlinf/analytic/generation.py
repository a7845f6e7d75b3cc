"""Generation in the analytic model: the decode schedule of the slowest rollout replica and its seconds.

:class:`Generation` is the part of :class:`rlinf.analytic.physics.Physics` that prices a rollout's ``generate``
op: it deals the batch's response lengths to the replicas, schedules each replica's decode steps
(:mod:`rlinf.analytic.decode`), and prices every step by the roofline (:mod:`rlinf.analytic.roofline`) plus the engine's fixed work;
:meth:`Generation.generation_tail` says how much of it is the straggler tail.
"""

from __future__ import annotations

import numpy as np

from rlinf.analytic import roofline
from rlinf.analytic.decode import DecodeSchedule, GenerationTail, schedule_decode, straggler_start
from rlinf.analytic.llm_workload import LLMWorkload
from rlinf.core.cluster import Cluster

ACTIVATION_BYTES_PER_ELEMENT = 2
"""bf16 activations: what a tensor-parallel all-reduce carries per hidden value."""
ALLREDUCES_PER_LAYER = 2
"""Tensor-parallel all-reduces per layer and forward pass: after the attention block and after the MLP
(Megatron-style column/row-parallel layers, as in vLLM and Megatron-LM)."""


SLOWEST_CANDIDATES = 4
"""Replicas whose decode is scheduled to find the slowest: the ones dealt the most KV-cache work (the sum of their
squared lengths), and the one dealt the longest response."""


class Generation:
    """Mixin of :class:`rlinf.analytic.physics.Physics`: the rollout's generation (its fields are Physics')."""

    workload: LLMWorkload
    cluster: Cluster
    seed: int
    weight_bytes: float
    kv_bytes_per_token: float
    kv_pool_bytes_per_replica: float
    max_concurrent: int
    prompt_attention_flops_per_token: float
    _schedules: dict[tuple[int, int], tuple[int, DecodeSchedule]]

    def batch_lengths(self, samples: int) -> np.ndarray:
        raise NotImplementedError

    def allreduce_seconds(self, num_bytes: float | np.ndarray, tensor_parallel: int) -> np.ndarray:
        raise NotImplementedError

    def tensor_parallel_seconds(
        self, num_tokens: float, *, num_passes: int, model_parallel: int, pipeline: int = 1
    ) -> float:
        raise NotImplementedError

    def decode_schedule(self, samples: int, replicas: int) -> tuple[int, DecodeSchedule]:
        """The slowest replica of a generation of ``samples`` responses on ``replicas`` replicas: its number of
        responses and its decode schedule.

        The batch gets the distribution's mid-quantile lengths. Without ``kv_preemption`` they are dealt
        round-robin from the longest down, so the slowest replica holds the longest response and every
        ``replicas``-th one below it, admitted in a well-mixed order (:func:`roofline.admission_order`), at most
        ``max_concurrent`` at once (the pool's size at prompt + mean response tokens each). With it, they are dealt
        in a random order (seeded), as a system that splits a shuffled batch into equal chunks does, so replicas
        differ in work; each engine admits and preempts as its KV-cache pool allows
        (:func:`rlinf.analytic.decode.schedule_decode`), and the slowest of the :data:`SLOWEST_CANDIDATES` replicas with the
        most work is the one returned."""
        key = (samples, replicas)
        if key not in self._schedules:
            self._schedules[key] = self._slowest(samples, replicas)
        return self._schedules[key]

    def _slowest(self, samples: int, replicas: int) -> tuple[int, DecodeSchedule]:
        w = self.workload
        if not w.kv_preemption:
            mine = self.batch_lengths(samples)[::-1][::replicas]
            lengths = np.sort(mine)[roofline.admission_order(mine.size)]
            active, context = roofline.decode_activity(
                lengths, prompt_tokens=w.prompt_tokens, max_concurrent=self.max_concurrent
            )
            return int(mine.size), DecodeSchedule(active=active, context_tokens=context)
        order = np.random.default_rng([self.seed, samples, replicas]).permutation(samples)
        shares = [
            share for share in np.array_split(self.batch_lengths(samples)[order], replicas) if share.size
        ]
        work = [float((share.astype(float) ** 2).sum()) for share in shares]
        longest = max(range(len(shares)), key=lambda r: (int(shares[r].max()), work[r]))
        candidates = sorted(range(len(shares)), key=lambda r: -work[r])[:SLOWEST_CANDIDATES]
        slowest: tuple[float, int, DecodeSchedule] | None = None
        for r in dict.fromkeys([longest, *candidates]):
            schedule = schedule_decode(
                shares[r],
                prompt_tokens=w.prompt_tokens,
                max_running=w.max_concurrent_sequences,
                kv_capacity_tokens=self.kv_pool_bytes_per_replica / self.kv_bytes_per_token,
            )
            seconds = float(self._step_seconds(schedule).sum())
            if slowest is None or seconds > slowest[0]:
                slowest = (seconds, int(shares[r].size), schedule)
        assert slowest is not None
        return slowest[1], slowest[2]

    def _step_seconds(self, schedule: DecodeSchedule) -> np.ndarray:
        """Per decode step of ``schedule``, its seconds at the workload's efficiencies."""
        w, device = self.workload, self.cluster.device
        memory_s, compute_s = roofline.decode_step_costs(
            schedule.active,
            schedule.context_tokens,
            weight_bytes=self.weight_bytes,
            kv_bytes_per_token=self.kv_bytes_per_token,
            num_params=w.model.num_params,
            num_devices=w.rollout_model_parallel,
            memory_bandwidth_bytes_per_s=device.memory_bandwidth_bytes_per_s,
            peak_flops=device.peak_flops,
        )
        steps = np.maximum(memory_s / w.decode_mbu, compute_s / w.prefill_mfu)
        return steps + self.decode_step_fixed_seconds(schedule.active)

    def generate_time(self, samples: int, replicas: int) -> roofline.OpTime:
        """Generation of ``samples`` responses on ``replicas`` replicas: the time of the slowest replica
        (:meth:`decode_schedule`). It prefills its prompts (and, after preemptions, the tokens it recomputes),
        then runs every decode step; each step reads the weights and the KV cache of its sequences, computes
        ``2 * N`` FLOPs per sequence, exchanges its activations among tensor-parallel ranks and waits
        ``decode_step_overhead_s`` on the engine."""
        per_replica, schedule = self.decode_schedule(samples, replicas)
        return self._schedule_time(per_replica, schedule)

    def continuous_generate_seconds(self, samples: int, replicas: int) -> float:
        """Seconds one batch takes in a stream of batches two at a time (an asynchronous rollout with a staleness
        bound of 2 or more admits the next iteration's prompts while the current one generates, so its engine
        fills the slots that ending responses free instead of idling through the straggler tail): half the time
        the slowest replica takes for its share of two batches admitted in turn, at the workload's efficiencies."""
        w = self.workload
        mine = self.batch_lengths(samples)[::-1][::replicas]
        order = np.sort(mine)[roofline.admission_order(mine.size)]
        if w.kv_preemption:
            twice = schedule_decode(
                np.concatenate([order, order]),
                prompt_tokens=w.prompt_tokens,
                max_running=w.max_concurrent_sequences,
                kv_capacity_tokens=self.kv_pool_bytes_per_replica / self.kv_bytes_per_token,
            )
        else:
            active, context = roofline.decode_activity(
                np.concatenate([order, order]),
                prompt_tokens=w.prompt_tokens,
                max_concurrent=self.max_concurrent,
            )
            twice = DecodeSchedule(active=active, context_tokens=context)
        two = self._schedule_time(2 * mine.size, twice).seconds(
            prefill_mfu=w.prefill_mfu,
            train_mfu=w.train_mfu,
            decode_mbu=w.decode_mbu,
            reward_seconds_per_sample=0.0,
        )
        return two / 2

    def _schedule_time(self, per_replica: int, schedule: DecodeSchedule) -> roofline.OpTime:
        """The time of one replica that generates ``per_replica`` responses by ``schedule``."""
        w, device = self.workload, self.cluster.device
        mp = w.rollout_model_parallel
        prefill_tokens = per_replica * w.prompt_tokens + schedule.recomputed_tokens
        prefill = roofline.forward_seconds(
            prefill_tokens,
            num_params=w.model.num_params,
            num_devices=mp,
            peak_flops=device.peak_flops,
            mfu=1.0,
            attention_flops_per_token=self.prompt_attention_flops_per_token,
        )
        memory_s, compute_s = roofline.decode_step_costs(
            schedule.active,
            schedule.context_tokens,
            weight_bytes=self.weight_bytes,
            kv_bytes_per_token=self.kv_bytes_per_token,
            num_params=w.model.num_params,
            num_devices=mp,
            memory_bandwidth_bytes_per_s=device.memory_bandwidth_bytes_per_s,
            peak_flops=device.peak_flops,
        )
        comm = self.tensor_parallel_seconds(prefill_tokens, num_passes=1, model_parallel=mp)
        comm += float(self.decode_step_fixed_seconds(schedule.active).sum())
        return roofline.OpTime(
            forward_s=prefill, decode_memory_s=memory_s, decode_compute_s=compute_s, fixed_s=comm
        )

    def decode_step_fixed_seconds(self, active: np.ndarray) -> np.ndarray:
        """Per decode step, the seconds no efficiency scales: the engine's ``decode_step_overhead_s`` (and
        ``decode_step_overhead_per_sequence_s`` per sequence in flight) and, with tensor parallelism, one token's
        activations all-reduced per layer and block for each sequence in flight."""
        w = self.workload
        seconds = w.decode_step_overhead_s + w.decode_step_overhead_per_sequence_s * np.asarray(
            active, dtype=float
        )
        mp = w.rollout_model_parallel
        if w.count_tensor_parallel_comm and mp > 1:
            size = np.asarray(active, dtype=float) * w.model.hidden_size * ACTIVATION_BYTES_PER_ELEMENT
            seconds += ALLREDUCES_PER_LAYER * w.model.num_layers * self.allreduce_seconds(size, mp)
        return seconds

    def generation_tail(self, samples: int, replicas: int) -> GenerationTail:
        """Where the slowest replica's generation spends its time, at the workload's efficiencies: the share of
        its seconds in the straggler tail (:func:`rlinf.analytic.decode.straggler_start`)."""
        w = self.workload
        per_replica, schedule = self.decode_schedule(samples, replicas)
        op = self.generate_time(samples, replicas)
        steps = self._step_seconds(schedule)
        start = straggler_start(schedule.active)
        total = op.seconds(
            prefill_mfu=w.prefill_mfu,
            train_mfu=w.train_mfu,
            decode_mbu=w.decode_mbu,
            reward_seconds_per_sample=0.0,
        )
        return GenerationTail(
            responses=per_replica,
            peak_batch=int(schedule.active.max()) if schedule.num_steps else 0,
            num_steps=schedule.num_steps,
            tail_steps=schedule.num_steps - start,
            tail_batch=int(schedule.active[start]) if start < schedule.num_steps else 0,
            tail_share=float(steps[start:].sum() / total) if total > 0 else 0.0,
            num_preemptions=schedule.num_preemptions,
        )
