"""The analytic LLM model: synthesize a trace for a dense LLM's GRPO/PPO iteration where nothing can be profiled.

:class:`LLMWorkload` states every assumption (model shape, batch, response-length distribution, parallel sizes,
efficiency factors, bytes per parameter). :func:`synthesize` turns it into a :class:`~rlinf.trace.Trace` whose
cost samples follow the roofline formulas of :mod:`rlinf.roofline` at every power-of-two multiple of each
component's model-parallel size and at several batch sizes per device count, so that :func:`rlinf.costs.fit`
interpolates (never extrapolates) the workload's batch on 8 to 1024 devices. The trace's ``provenance`` records
every formula, constant, the device, the seed and the date.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np

from rlinf import roofline
from rlinf.cluster import Cluster
from rlinf.errors import require
from rlinf.llm_workload import MODEL_PRESETS, LLMWorkload, ModelSpec, ResponseLengths, model_preset
from rlinf.trace import CostSample, Trace
from rlinf.workflow import Component, Edge, WeightSync, Workflow

__all__ = [
    "MODEL_PRESETS",
    "OP_OF_ROLE",
    "LLMWorkload",
    "ModelSpec",
    "Physics",
    "ResponseLengths",
    "model_preset",
    "synthesize",
]

TOKEN_ID_BYTES = 4
"""int32 token ids; log-probs, values and advantages are fp32 (4 bytes) per token."""


def synthesize(
    workload: LLMWorkload, cluster: Cluster, *, seed: int, date: str = "unspecified", max_devices: int = 2048
) -> Trace:
    """A trace of ``workload`` on ``cluster``'s device type, with samples on ``model_parallel * 2**k`` devices
    up to ``max_devices`` (at least 1024). Deterministic for a given ``seed`` (which draws the response lengths)."""
    require(
        max_devices >= 1024,
        "max_devices",
        max_devices,
        "must be >= 1024",
        "sample at least up to 1024 devices",
    )
    physics = Physics.of(workload, cluster, seed)
    workflow = _workflow(workload, physics)
    samples: list[CostSample] = []
    for component in workflow.components:
        op = OP_OF_ROLE[component.role]
        for devices in _device_counts(component.model_parallel_size, max_devices):
            replicas = devices // component.model_parallel_size
            for batch in _batch_sizes(replicas, workload.batch_size, workload.group_size):
                seconds = workload.overhead_s(op) + physics.seconds(component.role, batch, replicas)
                tokens = int(round(batch * (workload.prompt_tokens + physics.mean_response_tokens)))
                samples.append(
                    CostSample(
                        component=component.name,
                        op=op,
                        devices=devices,
                        samples=batch,
                        tokens=tokens,
                        seconds=seconds,
                    )
                )
    return Trace(
        workflow=workflow,
        cluster=cluster,
        provenance=_provenance(workload, cluster, physics, seed=seed, date=date, max_devices=max_devices),
        samples=samples,
        response_lengths=tuple(float(x) for x in physics.lengths),
        activation_bytes_per_sample=physics.activation_bytes_per_sample(workflow),
    )


OP_OF_ROLE = {
    "rollout": "generate",
    "reward": "reward",
    "inference": "infer",
    "actor": "train",
    "critic": "train",
}
"""The op the analytic model costs for each component role."""


@attrs.frozen(kw_only=True)
class Physics:
    """Derived quantities of one workload on one device type, and the seconds of each role's op.

    Built by :meth:`of`, which checks that each component's state fits its devices."""

    workload: LLMWorkload
    cluster: Cluster
    lengths: np.ndarray = attrs.field(eq=False)
    weight_bytes: float
    kv_bytes_per_token: float
    kv_pool_bytes_per_replica: float
    max_concurrent: int
    attention_flops_per_token: float = 0.0
    """Causal attention FLOPs per token of a forward pass over prompt + response (0 unless
    ``workload.count_attention_flops``)."""
    prompt_attention_flops_per_token: float = 0.0
    """The same over the prompt alone: what prefill adds."""
    _batch_lengths: dict[int, np.ndarray] = attrs.field(
        factory=dict, eq=False, repr=False, alias="_batch_lengths"
    )
    """Memo of :func:`roofline.quantile_lengths` per batch size: synthesis asks for the same few batch sizes on
    every device count, and the quantiles of 4,096 lengths dominate its run time otherwise."""

    @classmethod
    def of(cls, workload: LLMWorkload, cluster: Cluster, seed: int) -> Physics:
        model, device = workload.model, cluster.device
        lengths = workload.response.draw(workload.num_stored_lengths, np.random.default_rng(seed))
        weight_bytes = model.num_params * workload.weight_bytes_per_param
        kv_per_token = roofline.kv_bytes_per_token(
            num_layers=model.num_layers,
            hidden_size=model.hidden_size,
            num_attention_heads=model.num_attention_heads,
            num_kv_heads=model.num_kv_heads,
            bytes_per_element=workload.kv_bytes_per_element,
            head_dim=model.attention_head_dim,
        )
        mp = workload.rollout_model_parallel
        kv_pool = workload.kv_cache_fraction * device.memory_bytes * mp
        _check_fits(
            "rollout_model_parallel", mp, (weight_bytes + kv_pool) / mp, device.memory_bytes, device.name
        )
        _check_fits(
            "inference_model_parallel",
            workload.inference_model_parallel,
            workload.num_reference_forwards * weight_bytes / workload.inference_model_parallel,
            device.memory_bytes,
            device.name,
        )
        _check_fits(
            "actor_model_parallel",
            workload.actor_model_parallel,
            model.num_params * workload.train_state_bytes_per_param / workload.actor_model_parallel,
            device.memory_bytes,
            device.name,
        )
        concurrent = roofline.max_concurrent_sequences(
            kv_pool_bytes=kv_pool,
            kv_bytes_per_token=kv_per_token,
            tokens_per_sequence=workload.prompt_tokens + float(lengths.mean()),
            cap=workload.max_concurrent_sequences,
        )
        attention, prompt_attention = 0.0, 0.0
        if workload.count_attention_flops:
            attention = roofline.attention_flops_per_token(
                num_layers=model.num_layers,
                attention_dim=model.attention_dim,
                sequence_tokens=workload.prompt_tokens + lengths,
            )
            prompt_attention = roofline.attention_flops_per_token(
                num_layers=model.num_layers,
                attention_dim=model.attention_dim,
                sequence_tokens=np.array([workload.prompt_tokens]),
            )
        return cls(
            workload=workload,
            cluster=cluster,
            lengths=lengths,
            weight_bytes=weight_bytes,
            kv_bytes_per_token=kv_per_token,
            kv_pool_bytes_per_replica=kv_pool,
            max_concurrent=concurrent,
            attention_flops_per_token=attention,
            prompt_attention_flops_per_token=prompt_attention,
        )

    @property
    def mean_response_tokens(self) -> float:
        """Mean of the stored response lengths."""
        return float(self.lengths.mean())

    @property
    def tokens_per_sample(self) -> float:
        """Prompt plus mean response tokens: what forward and training passes process per sample."""
        return self.workload.prompt_tokens + self.mean_response_tokens

    def seconds(self, role: str, samples: int, replicas: int) -> float:
        """Seconds of ``role``'s op for ``samples`` spread over ``replicas`` (overhead excluded): the time of the
        busiest replica, which holds ``ceil(samples / replicas)`` samples."""
        w = self.workload
        return self.op_time(role, samples, replicas).seconds(
            prefill_mfu=w.prefill_mfu,
            train_mfu=w.train_mfu,
            decode_mbu=w.decode_mbu,
            reward_seconds_per_sample=w.reward_seconds_per_sample,
        )

    def op_time(self, role: str, samples: int, replicas: int) -> roofline.OpTime:
        """:meth:`seconds` split by the efficiency each part scales with (see :class:`roofline.OpTime`)."""
        w, device = self.workload, self.cluster.device
        per_replica = math.ceil(samples / replicas)
        tokens = per_replica * self.tokens_per_sample
        n = w.model.num_params
        if role == "rollout":
            return self.generate_time(samples, replicas)
        if role == "reward":
            return roofline.OpTime(reward_samples=per_replica)
        if role == "inference":
            one = roofline.forward_seconds(
                tokens,
                num_params=n,
                num_devices=w.inference_model_parallel,
                peak_flops=device.peak_flops,
                mfu=1.0,
                attention_flops_per_token=self.attention_flops_per_token,
            )
            return roofline.OpTime(forward_s=w.num_reference_forwards * one)
        return roofline.OpTime(
            train_s=roofline.train_seconds(
                tokens,
                num_params=n,
                num_devices=w.actor_model_parallel,
                peak_flops=device.peak_flops,
                mfu=1.0,
                attention_flops_per_token=self.attention_flops_per_token,
                recompute=w.activation_recompute,
            )
        )

    def batch_lengths(self, samples: int) -> np.ndarray:
        """The mid-quantile response lengths of a batch of ``samples`` (:func:`roofline.quantile_lengths`)."""
        if samples not in self._batch_lengths:
            lengths = roofline.quantile_lengths(self.lengths, samples)
            lengths.setflags(write=False)
            self._batch_lengths[samples] = lengths
        return self._batch_lengths[samples]

    def generate_time(self, samples: int, replicas: int) -> roofline.OpTime:
        """Generation of ``samples`` responses on ``replicas`` replicas: the time of the slowest replica.

        The batch gets the distribution's mid-quantile lengths, dealt round-robin from the longest down, so the
        slowest replica holds the batch's longest response and every ``replicas``-th one below it. It prefills
        its prompts, then decodes its responses under continuous batching."""
        w, device = self.workload, self.cluster.device
        mp = w.rollout_model_parallel
        batch_lengths = self.batch_lengths(samples)[::-1]
        mine = batch_lengths[::replicas]
        per_replica = mine.size
        lengths = np.sort(mine)[roofline.admission_order(per_replica)]
        prefill = roofline.forward_seconds(
            per_replica * w.prompt_tokens,
            num_params=w.model.num_params,
            num_devices=mp,
            peak_flops=device.peak_flops,
            mfu=1.0,
            attention_flops_per_token=self.prompt_attention_flops_per_token,
        )
        memory_s, compute_s = roofline.decode_step_seconds(
            lengths,
            prompt_tokens=w.prompt_tokens,
            max_concurrent=self.max_concurrent,
            weight_bytes=self.weight_bytes,
            kv_bytes_per_token=self.kv_bytes_per_token,
            num_params=w.model.num_params,
            num_devices=mp,
            memory_bandwidth_bytes_per_s=device.memory_bandwidth_bytes_per_s,
            peak_flops=device.peak_flops,
        )
        return roofline.OpTime(forward_s=prefill, decode_memory_s=memory_s, decode_compute_s=compute_s)

    def state_bytes(self, role: str) -> int:
        """Resident state of one replica."""
        w = self.workload
        if role == "rollout":
            return int(self.weight_bytes + self.kv_pool_bytes_per_replica)
        if role == "inference":
            return int(w.num_reference_forwards * self.weight_bytes)
        if role in ("actor", "critic"):
            return int(w.model.num_params * w.train_state_bytes_per_param)
        return 0

    def activation_bytes_per_sample(self, workflow: Workflow) -> dict[str, float]:
        """Transient memory per sample: training keeps every layer's input (full recomputation) plus one layer's
        activations (34 * hidden bytes per token); a forward pass keeps one layer's activations."""
        model = self.workload.model
        per_token_train = (2.0 * model.num_layers + 34.0) * model.hidden_size
        per_token_forward = 34.0 * model.hidden_size
        out = {}
        for component in workflow.components:
            if component.role in ("actor", "critic"):
                out[component.name] = per_token_train * self.tokens_per_sample
            elif component.role == "inference":
                out[component.name] = per_token_forward * self.tokens_per_sample
        return out


def _check_fits(field: str, value: int, bytes_per_device: float, capacity: int, device_name: str) -> None:
    require(
        bytes_per_device <= capacity,
        field,
        value,
        f"needs {bytes_per_device / 2**30:.1f} GiB per {device_name} device, more than its "
        f"{capacity / 2**30:.0f} GiB",
        f"raise {field}",
    )


def _workflow(workload: LLMWorkload, physics: Physics) -> Workflow:
    tokens = physics.tokens_per_sample
    ids = int(round(tokens * TOKEN_ID_BYTES))
    ppo = workload.algorithm == "ppo"
    components = [
        Component(
            name="rollout",
            role="rollout",
            state_bytes=physics.state_bytes("rollout"),
            model_parallel_size=workload.rollout_model_parallel,
        ),
        Component(name="reward", role="reward"),
        Component(
            name="inference",
            role="inference",
            state_bytes=physics.state_bytes("inference"),
            model_parallel_size=workload.inference_model_parallel,
        ),
        Component(
            name="actor",
            role="actor",
            state_bytes=physics.state_bytes("actor"),
            model_parallel_size=workload.actor_model_parallel,
        ),
    ]
    # inference -> actor carries ids, reference and old-policy log-probs (+ values for PPO) and advantages.
    per_token_floats = workload.num_reference_forwards + 1
    edges = [
        Edge(src="rollout", dst="reward", bytes_per_sample=ids),
        Edge(src="reward", dst="inference", bytes_per_sample=ids + 4),
        Edge(src="inference", dst="actor", bytes_per_sample=ids + int(round(tokens * 4 * per_token_floats))),
    ]
    weights = int(physics.weight_bytes)
    sync = [
        WeightSync(src="actor", dst="rollout", num_bytes=weights),
        WeightSync(src="actor", dst="inference", num_bytes=weights),
    ]
    if ppo:
        components.append(
            Component(
                name="critic",
                role="critic",
                state_bytes=physics.state_bytes("critic"),
                model_parallel_size=workload.actor_model_parallel,
            )
        )
        edges.append(Edge(src="inference", dst="critic", bytes_per_sample=ids + int(round(tokens * 8))))
        sync.append(WeightSync(src="critic", dst="inference", num_bytes=weights))
    return Workflow(
        name=f"{workload.algorithm}-{workload.model.name}",
        components=components,
        edges=edges,
        weight_sync=sync,
        batch_size=workload.batch_size,
        group_size=workload.group_size,
        tokens_per_sample=physics.mean_response_tokens,
    )


def _device_counts(model_parallel: int, max_devices: int) -> list[int]:
    counts, devices = [], model_parallel
    while devices <= max_devices:
        counts.append(devices)
        devices *= 2
    return counts


def _batch_sizes(replicas: int, batch_size: int, group_size: int) -> list[int]:
    """One sample, one group, a doubling ladder of one sample per replica upwards, the batch and twice it."""
    sizes = {1, group_size, batch_size, 2 * batch_size}
    size = replicas
    while size <= 2 * batch_size:
        sizes.add(size)
        size *= 2
    return sorted(sizes)


def _provenance(
    workload: LLMWorkload, cluster: Cluster, physics: Physics, *, seed: int, date: str, max_devices: int
) -> dict[str, Any]:
    lengths = physics.lengths
    return {
        "kind": "synthesized",
        "generator": "rlinf.analytic.synthesize (roofline model, rlinf/roofline.py)",
        "date": date,
        "seed": seed,
        "device": attrs.asdict(cluster.device),
        "links": attrs.asdict(cluster.links),
        "cluster": cluster.spec(),
        "workload": attrs.asdict(workload),
        "batch": {
            "num_prompts": workload.num_prompts,
            "group_size": workload.group_size,
            "batch_size": workload.batch_size,
        },
        "response_lengths": {
            "distribution": f"lognormal(median={workload.response.median_tokens:g}, sigma={workload.response.sigma:g}) clipped to [1, {workload.response.max_tokens}], rounded",
            "num_stored": int(lengths.size),
            "mean": float(lengths.mean()),
            "p50": float(np.quantile(lengths, 0.5)),
            "p90": float(np.quantile(lengths, 0.9)),
            "p99": float(np.quantile(lengths, 0.99)),
            "max": float(lengths.max()),
            "share_truncated": float(np.mean(lengths >= workload.response.max_tokens)),
        },
        "derived": {
            "weight_bytes": physics.weight_bytes,
            "kv_bytes_per_token": physics.kv_bytes_per_token,
            "kv_pool_bytes_per_replica": physics.kv_pool_bytes_per_replica,
            "max_concurrent_sequences_per_replica": physics.max_concurrent,
            "tokens_per_sample": physics.tokens_per_sample,
            "state_bytes_per_replica": {
                role: physics.state_bytes(role) for role in ("rollout", "inference", "actor")
            },
        },
        "sampling": {
            "device_counts": "model_parallel_size * 2**k up to max_devices",
            "max_devices": max_devices,
            "batch_sizes": "1, group_size, replicas * 2**k up to 2 * batch, batch, 2 * batch",
            "seconds": "overhead of the op (op_overheads_s, else op_overhead_s) + formula(ceil(samples / replicas)); "
            "replicas = devices // model_parallel_size",
        },
        "formulas": FORMULAS,
        "assumptions": ASSUMPTIONS,
    }


FORMULAS = {
    "generate": (
        "prefill: (2*N + A_prompt)*prompt_tokens*samples / (mp*peak_flops*prefill_mfu); decode: sum over steps t of "
        "max((weight_bytes + kv_bytes_per_token*context(t)) / (mp*bandwidth*decode_mbu), "
        "2*N*active(t) / (mp*peak_flops*prefill_mfu)); active(t) and context(t) from continuous batching of the "
        "samples' mid-quantile response lengths with at most max_concurrent_sequences_per_replica in flight"
    ),
    "reward": "samples * reward_seconds_per_sample",
    "infer": "num_reference_forwards * (2*N + A)*(prompt+response tokens) / (mp*peak_flops*prefill_mfu)",
    "train": "passes * (2*N + A)*(prompt+response tokens) / (mp*peak_flops*train_mfu); passes = 3 (forward + "
    "backward, i.e. 6*N per token), 4 with activation_recompute",
    "attention": "A = 2 * num_layers * num_heads * head_dim * E[L^2]/E[L] over the batch's sequence lengths L "
    "(A_prompt: L = prompt) when count_attention_flops, else A = A_prompt = 0",
    "kv_bytes_per_token": "2 * num_layers * num_kv_heads * head_dim * kv_bytes_per_element; head_dim defaults to "
    "hidden_size / num_attention_heads",
    "max_concurrent_sequences_per_replica": "min(max_concurrent_sequences, kv_pool // (kv_bytes_per_token * (prompt + mean response)))",
    "state_bytes": "rollout: weights + kv_cache_fraction*memory*mp; inference: num_reference_forwards*weights; actor/critic: N*train_state_bytes_per_param",
    "activation_bytes_per_sample": "actor/critic: (2*num_layers + 34)*hidden*tokens; inference: 34*hidden*tokens",
    "movement": "not sampled: onload/offload/sync/transfer are costed from the cluster links by rlinf.costs",
}

ASSUMPTIONS = [
    "dense decoder-only transformer; attention FLOPs ignored next to 2*N per token unless count_attention_flops",
    "prefill, inference forwards and training are compute-bound at the stated MFU",
    "decode is memory-bound: every step reads the replica's weights and its active KV cache",
    "replicas get equal shares of the batch with the same length distribution (no straggler replica)",
    "KV pool admits sequences up to its size at prompt + mean response tokens each (no preemption modelled)",
    "GRPO inference holds reference and old-policy weights and runs both forwards; PPO adds the critic's value forward",
    "weights are synced to rollout and inference (old policy) after training, in bf16",
    "prefix sharing within a group is not exploited (each response prefills its prompt)",
    "activation memory per sample assumes all of an op's samples are live at once (an upper bound for training, "
    "which accumulates gradients over smaller micro-batches)",
]
