"""The physics of the analytic LLM model: derived quantities of a workload on a device type, and the seconds of
each role's op from the roofline formulas of :mod:`rlinf.analytic.roofline`.

:class:`Physics` is what :func:`rlinf.analytic.synthesis.synthesize` samples at many device counts and batch sizes, and what
:mod:`rlinf.analytic.calibration` re-prices at other efficiencies (:meth:`Physics.op_time`).
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from rlinf.analytic import roofline
from rlinf.analytic.decode import DecodeSchedule
from rlinf.analytic.generation import ACTIVATION_BYTES_PER_ELEMENT, ALLREDUCES_PER_LAYER, Generation
from rlinf.analytic.llm_workload import LLMWorkload
from rlinf.analytic.training import Training
from rlinf.core.cluster import Cluster
from rlinf.core.costs import LINK_LATENCY_S
from rlinf.core.errors import require
from rlinf.core.trace import CostSample
from rlinf.core.workflow import Workflow

OP_OF_ROLE = {
    "rollout": "generate",
    "reward": "reward",
    "inference": "infer",
    "actor": "train",
    "critic": "train",
}
"""The op the analytic model costs for each component role."""


@attrs.frozen(kw_only=True)
class Physics(Generation, Training):
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
    seed: int = 0
    """The seed of the lengths' draw; also deals a batch to replicas (with ``kv_preemption``)."""
    _batch_lengths: dict[int, np.ndarray] = attrs.field(
        factory=dict, eq=False, repr=False, alias="_batch_lengths"
    )
    _schedules: dict[tuple[int, int], tuple[int, DecodeSchedule]] = attrs.field(
        factory=dict, eq=False, repr=False, alias="_schedules"
    )
    """Memo of :meth:`decode_schedule` per (samples, replicas): pricing and the straggler tail ask twice."""
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
            model.num_params * workload.train_state_bytes_per_replica_param / workload.actor_model_parallel,
            device.memory_bytes,
            device.name,
        )
        if workload.kv_preemption:
            longest = workload.prompt_tokens + workload.response.max_tokens
            require(
                kv_pool >= longest * kv_per_token,
                "kv_cache_fraction",
                workload.kv_cache_fraction,
                f"leaves a KV-cache pool of {kv_pool / kv_per_token:.0f} tokens per rollout replica, less than one "
                f"sequence of {longest} tokens (prompt + generation limit)",
                "raise kv_cache_fraction or rollout_model_parallel, or lower the generation limit",
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
            seed=seed,
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
        per_replica = math.ceil(samples / replicas)
        tokens = per_replica * self.tokens_per_sample
        if role == "rollout":
            return self.generate_time(samples, replicas)
        if role == "reward":
            return roofline.OpTime(reward_samples=per_replica)
        if role == "inference":
            return self.forward_time(tokens)
        return self.train_time(tokens)

    def allreduce_seconds(self, num_bytes: float | np.ndarray, tensor_parallel: int) -> np.ndarray:
        """One all-reduce among ``tensor_parallel`` ranks (zero unless ``count_tensor_parallel_comm``): over the
        intra-node link when the ranks fit in a node (``t - 1`` peer links of a mesh, see ``mesh_link_bytes_per_s``),
        else the inter-node one, after that link's latency."""
        if not self.workload.count_tensor_parallel_comm:
            return np.zeros_like(np.asarray(num_bytes, dtype=float))
        links, mesh = self.cluster.links, self.workload.mesh_link_bytes_per_s
        within_node = tensor_parallel <= self.cluster.devices_per_node
        link = links.intra_node_bytes_per_s if within_node else links.inter_node_bytes_per_s
        if within_node and mesh is not None:
            link = min(link, (tensor_parallel - 1) * mesh)
        return roofline.allreduce_seconds(
            num_bytes,
            num_ranks=tensor_parallel,
            link_bytes_per_s=link,
            latency_s=LINK_LATENCY_S["intra_node" if within_node else "inter_node"],
        )

    def tensor_parallel_seconds(
        self, num_tokens: float, *, num_passes: int, model_parallel: int, pipeline: int = 1
    ) -> float:
        """Tensor-parallel all-reduces of ``num_passes`` passes over ``num_tokens`` tokens on one replica: each of
        a pipeline stage's ``num_layers / pipeline`` layers exchanges the tokens' activations
        :data:`ALLREDUCES_PER_LAYER` times per pass (the stages run side by side), as one message per all-reduce."""
        model = self.workload.model
        tensor_parallel = model_parallel // pipeline
        size = num_tokens * model.hidden_size * ACTIVATION_BYTES_PER_ELEMENT
        per_pass = (
            ALLREDUCES_PER_LAYER
            * (model.num_layers / pipeline)
            * self.allreduce_seconds(size, tensor_parallel)
        )
        return float(num_passes * per_pass)

    def batch_lengths(self, samples: int) -> np.ndarray:
        """The mid-quantile response lengths of a batch of ``samples`` (:func:`roofline.quantile_lengths`)."""
        if samples not in self._batch_lengths:
            lengths = roofline.quantile_lengths(self.lengths, samples)
            lengths.setflags(write=False)
            self._batch_lengths[samples] = lengths
        return self._batch_lengths[samples]

    def state_bytes(self, role: str) -> int:
        """Resident state of one replica."""
        w = self.workload
        if role == "rollout":
            return int(self.weight_bytes + self.kv_pool_bytes_per_replica)
        if role == "inference":
            return int(w.num_reference_forwards * self.weight_bytes)
        if role in ("actor", "critic"):
            return int(w.model.num_params * w.train_state_bytes_per_replica_param)
        return 0

    @property
    def reshard_seconds(self) -> float:
        """The actor's sync to a rollout on its own devices: the weights resharded into the engine in place at
        ``reshard_bytes_per_device_per_s`` per rollout device (0 without a rate)."""
        rate = self.workload.reshard_bytes_per_device_per_s
        if rate is None:
            return 0.0
        return self.weight_bytes / self.workload.rollout_model_parallel / rate

    def movement_samples(self) -> list[CostSample]:
        """With ``free_kv_cache_on_offload``, one onload and one offload sample of the rollout on one replica:
        its whole resident state (weights and KV pool) per device, moved in the seconds of its weights alone over
        the host link, so that the cost model prices every rollout onload/offload by the weights. Else none."""
        w = self.workload
        if not w.free_kv_cache_on_offload:
            return []
        mp = w.rollout_model_parallel
        state_per_device = self.state_bytes("rollout") // mp
        # The cost model adds the host link's latency to the seconds these bytes take at the sampled rate.
        seconds = self.weight_bytes / mp / self.cluster.links.host_device_bytes_per_s
        return [
            CostSample(
                component="rollout", op=op, devices=mp, samples=0, seconds=seconds, num_bytes=state_per_device
            )
            for op in ("onload", "offload")
        ]

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
