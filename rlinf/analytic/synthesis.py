"""The analytic LLM model: synthesize a trace for a dense LLM's GRPO/PPO iteration where nothing can be profiled.

:class:`LLMWorkload` states every assumption (model shape, batch, response-length distribution, parallel sizes,
efficiency factors, bytes per parameter). :func:`synthesize` turns it into a :class:`~rlinf.core.trace.Trace` whose
cost samples follow the roofline formulas of :mod:`rlinf.analytic.roofline` at every power-of-two multiple of each
component's model-parallel size and at several batch sizes per device count, so that :func:`rlinf.core.costs.fit`
interpolates (never extrapolates) the workload's batch on 8 to 1024 devices. The trace's ``provenance`` records
every formula, constant, the device, the seed and the date.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from rlinf.analytic.llm_workload import MODEL_PRESETS, LLMWorkload, ModelSpec, ResponseLengths, model_preset
from rlinf.analytic.physics import OP_OF_ROLE, Physics
from rlinf.core.cluster import Cluster
from rlinf.core.errors import require
from rlinf.core.trace import CostSample, Trace
from rlinf.core.workflow import Component, Edge, WeightSync, Workflow

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
    workload: LLMWorkload,
    cluster: Cluster,
    *,
    seed: int,
    date: str = "unspecified",
    max_devices: int = 2048,
    device_counts: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Trace:
    """A trace of ``workload`` on ``cluster``'s device type, with samples on ``model_parallel * 2**k`` devices
    up to ``max_devices`` (at least 1024). Deterministic for a given ``seed`` (which draws the response lengths).

    ``device_counts`` samples only those device counts instead (each component at the ones its model-parallel
    size divides): a trace for one known placement, quicker to make, that prices other counts by extrapolation.

    ``progress(done, total)`` is called before the first sample and after each with the work done so far, in
    responses the rollout's slowest replica decodes (what takes the time: a million prompts take minutes)."""
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
    steps = [
        (component, devices)
        for component in workflow.components
        for devices in _counts(component, max_devices, device_counts)
    ]
    total = sum(
        _work(component, batch, devices // component.model_parallel_size)
        for component, devices in steps
        for batch in _batch_sizes(
            devices // component.model_parallel_size, workload.batch_size, workload.group_size
        )
    )
    done = 0
    if progress is not None:
        progress(done, total)
    for component, devices in steps:
        op = OP_OF_ROLE[component.role]
        replicas = devices // component.model_parallel_size
        for batch in _batch_sizes(replicas, workload.batch_size, workload.group_size):
            seconds = workload.overhead_s(op) + physics.seconds(component.role, batch, replicas)
            tokens = int(round(batch * (workload.prompt_tokens + physics.mean_response_tokens)))
            sample = functools.partial(
                CostSample, component=component.name, devices=devices, samples=batch, tokens=tokens
            )
            samples.append(sample(op=op, seconds=seconds))
            if component.role == "rollout":  # the same batch in a continuous stream (asynchronous plans)
                continuous = physics.continuous_generate_seconds(batch, replicas)
                samples.append(sample(op="generate_continuous", seconds=workload.overhead_s(op) + continuous))
            done += _work(component, batch, replicas)
            if progress is not None:
                progress(done, total)
    samples.extend(physics.movement_samples())
    return Trace(
        workflow=workflow,
        cluster=cluster,
        provenance=_provenance(
            workload,
            cluster,
            physics,
            seed=seed,
            date=date,
            max_devices=max_devices,
            device_counts=device_counts,
        ),
        samples=samples,
        response_lengths=tuple(float(x) for x in physics.lengths),
        activation_bytes_per_sample=physics.activation_bytes_per_sample(workflow),
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
            keeps_versions=True,  # a what-if: the system may score a buffered batch with the version that sampled
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
        WeightSync(src="actor", dst="rollout", num_bytes=weights, reshard_s=physics.reshard_seconds),
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


def _counts(component: Component, max_devices: int, device_counts: Sequence[int] | None) -> list[int]:
    """The device counts ``component`` is sampled at."""
    mp = component.model_parallel_size
    counts = (
        _device_counts(mp, max_devices)
        if device_counts is None
        else sorted({d for d in device_counts if d % mp == 0})
    )
    require(
        bool(counts),
        "device_counts",
        device_counts,
        f"has no multiple of {component.name}'s model-parallel size {mp}",
        "include the devices each component runs on",
    )
    return counts


def _work(component: Component, batch: int, replicas: int) -> int:
    """Responses the slowest replica decodes for ``component``'s sample of ``batch`` on ``replicas`` (1 for a
    component that decodes nothing): the batch once, and twice in a continuous stream."""
    return 3 * -(-batch // replicas) if component.role == "rollout" else 1


def _batch_sizes(replicas: int, batch_size: int, group_size: int) -> list[int]:
    """One sample, one group, a doubling ladder of one sample per replica upwards, the batch and twice it."""
    sizes = {1, group_size, batch_size, 2 * batch_size}
    size = replicas
    while size <= 2 * batch_size:
        sizes.add(size)
        size *= 2
    return sorted(sizes)


def _provenance(
    workload: LLMWorkload,
    cluster: Cluster,
    physics: Physics,
    *,
    seed: int,
    date: str,
    max_devices: int,
    device_counts: Sequence[int] | None = None,
) -> dict[str, Any]:
    lengths = physics.lengths
    return {
        "kind": "synthesized",
        "generator": "rlinf.analytic.synthesis.synthesize (roofline model, rlinf/analytic/roofline.py)",
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
            "device_counts": "model_parallel_size * 2**k up to max_devices"
            if device_counts is None
            else sorted(set(device_counts)),
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
        "samples' mid-quantile response lengths with at most max_concurrent_sequences_per_replica in flight; "
        "+ 2*layers*(AR(prompt_tokens*samples*hidden*2 B) + sum over t of AR(active(t)*hidden*2 B)) "
        "+ sum over t of (decode_step_overhead_s + decode_step_overhead_per_sequence_s*active(t)); with "
        "kv_preemption, active(t) and context(t) come from rlinf.analytic.decode.schedule_decode (admission while the KV pool "
        "holds each sequence's tokens, at most max_concurrent_sequences, recompute preemption when it fills; the "
        "recomputed tokens are prefilled again) on each replica's share of the batch's mid-quantile lengths dealt in "
        "a seeded random order, and the slowest of the replicas with the most KV work (and the one with the longest "
        "response) sets the time"
    ),
    "reward": "samples * reward_seconds_per_sample",
    "infer": "num_reference_forwards * ((2*N + A)*(prompt+response tokens) / (mp*peak_flops*prefill_mfu) "
    "+ 2*(layers/pipeline_parallel)*AR(tokens*hidden*2 B))",
    "train": "passes * (2*N + A)*(prompt+response tokens) / (mp*peak_flops*train_mfu) * (bubble + t0/t) "
    "+ comm_passes*2*(layers/pipeline_parallel)*AR(tokens*hidden*2 B) * bubble + transfers; passes = 3 (forward + "
    "backward, i.e. 6*N per token), 4 with activation_recompute; comm_passes = 2, 3 with activation_recompute; "
    "t = tokens / (optimizer_steps*mp) per device per optimizer step, t0 = train_fixed_tokens_per_step; with "
    "count_pipeline_bubbles, bubble = (m + p - 1)/m for m = ceil(tokens per step / train_micro_batch_tokens) "
    "micro-batches through p = pipeline_parallel stages, and transfers = optimizer_steps * (m + p - 1) * 2 hops of "
    "a micro-batch's activations (hidden*2 B per token) over the slowest stage boundary; else bubble = 1, no "
    "transfers",
    "infer_at_train_mfu": "with forwards_at_train_mfu, the infer op's forwards are divided by train_mfu (the "
    "training framework's) instead of prefill_mfu, with the pipeline's bubble and one hop per slot",
    "reshard": "with reshard_bytes_per_device_per_s, the actor->rollout WeightSync carries reshard_s = weight_bytes "
    "/ rollout_model_parallel / rate, which rlinf.core.costs adds to a sync between components on the same devices",
    "allreduce": "AR(bytes) among t = model_parallel/pipeline_parallel tensor-parallel ranks = latency + 2*(t-1)/t * "
    "bytes / link: the intra-node link (on a mesh, min of it and (t-1)*mesh_link_bytes_per_s) and "
    "rlinf.core.costs.LINK_LATENCY_S['intra_node'] when t <= devices per node, else the inter-node ones; 0 when t = 1 "
    "or count_tensor_parallel_comm is off",
    "attention": "A = 2 * num_layers * num_heads * head_dim * E[L^2]/E[L] over the batch's sequence lengths L "
    "(A_prompt: L = prompt) when count_attention_flops, else A = A_prompt = 0",
    "kv_bytes_per_token": "2 * num_layers * num_kv_heads * head_dim * kv_bytes_per_element; head_dim defaults to "
    "hidden_size / num_attention_heads",
    "max_concurrent_sequences_per_replica": "min(max_concurrent_sequences, kv_pool // (kv_bytes_per_token * (prompt + mean response)))",
    "state_bytes": "rollout: weights + kv_cache_fraction*memory*mp; inference: num_reference_forwards*weights; "
    "actor/critic: N*(train_state_bytes_per_param - optimizer_state_bytes_per_param "
    "+ optimizer_state_bytes_per_param/optimizer_shards)",
    "activation_bytes_per_sample": "actor/critic: (2*num_layers + 34)*hidden*tokens; inference: 34*hidden*tokens",
    "movement": "onload/offload/sync/transfer are costed from the cluster links by rlinf.core.costs; with "
    "free_kv_cache_on_offload the trace samples the rollout's onload and offload at its weights' seconds over the "
    "host link (the KV pool is freed and reallocated, not copied)",
}

ASSUMPTIONS = [
    "dense decoder-only transformer; attention FLOPs ignored next to 2*N per token unless count_attention_flops",
    "tensor-parallel all-reduces ignored unless count_tensor_parallel_comm; they are then not overlapped with "
    "compute, and one prefill or one training pass is one message per all-reduce (no micro-batch latencies)",
    "pipeline bubbles and stage-to-stage transfers priced only with count_pipeline_bubbles; data-parallel gradient "
    "exchange, the optimizer step and data loading only as the training framework's published fixed cost per "
    "optimizer step (train_fixed_tokens_per_step), 0 by default",
    "prefill, inference forwards and training are compute-bound at the stated MFU",
    "decode is memory-bound: every step reads the replica's weights and its active KV cache",
    "replicas get equal shares of the batch with the same length distribution (no straggler replica), unless "
    "kv_preemption: then the batch is dealt in a random order and the slowest replica sets the time",
    "KV pool admits sequences up to its size at prompt + mean response tokens each (no preemption modelled), "
    "unless kv_preemption (admission and recompute preemption as vLLM and SGLang do)",
    "response lengths are independent draws: the responses of one prompt are not correlated",
    "GRPO inference holds reference and old-policy weights and runs both forwards; PPO adds the critic's value forward",
    "weights are synced to rollout and inference (old policy) after training, in bf16",
    "prefix sharing within a group is not exploited (each response prefills its prompt)",
    "activation memory per sample assumes all of an op's samples are live at once (an upper bound for training, "
    "which accumulates gradients over smaller micro-batches)",
]
