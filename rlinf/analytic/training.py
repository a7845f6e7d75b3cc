"""Training and log-prob forwards in the analytic model: one replica's FLOPs, its tensor-parallel all-reduces, its
pipeline schedule and its framework's fixed cost per optimizer step.

:class:`Training` is the part of :class:`rlinf.analytic.physics.Physics` that prices the ``train`` and ``infer`` ops
of a replica that holds ``tokens`` tokens. How the time depends on the work per device:

* the FLOPs split over the replica's devices (:func:`rlinf.analytic.roofline.train_seconds`);
* each optimizer step pays the framework's fixed cost, ``train_fixed_tokens_per_step`` tokens' worth of training
  per device (:mod:`rlinf.analytic.training_costs`): fewer tokens per device per step, lower efficiency;
* with pipeline stages (``count_pipeline_bubbles``), each step's micro-batches fill and drain the pipeline
  (:mod:`rlinf.analytic.pipeline`): fewer micro-batches per step, a larger share of bubble, and every slot carries
  a micro-batch's activations (and gradients) across each stage boundary.
"""

from __future__ import annotations

import numpy as np

from rlinf.analytic import roofline
from rlinf.analytic.generation import ACTIVATION_BYTES_PER_ELEMENT
from rlinf.analytic.llm_workload import LLMWorkload
from rlinf.analytic.pipeline import PipelineSchedule, schedule_of
from rlinf.core.cluster import Cluster
from rlinf.core.costs import LINK_LATENCY_S


class Training:
    """Mixin of :class:`rlinf.analytic.physics.Physics`: training and forward passes (its fields are Physics')."""

    workload: LLMWorkload
    cluster: Cluster
    attention_flops_per_token: float

    def tensor_parallel_seconds(
        self, num_tokens: float, *, num_passes: int, model_parallel: int, pipeline: int = 1
    ) -> float:
        raise NotImplementedError

    def forward_time(self, tokens: float) -> roofline.OpTime:
        """The inference component's forwards (old policy, reference, values) over ``tokens`` tokens on one
        replica: FLOPs at peak, all-reduces, and (with pipeline stages) one sweep's bubble and transfers."""
        w = self.workload
        one = roofline.forward_seconds(
            tokens,
            num_params=w.model.num_params,
            num_devices=w.inference_model_parallel,
            peak_flops=self.cluster.device.peak_flops,
            mfu=1.0,
            attention_flops_per_token=self.attention_flops_per_token,
        )
        comm = self.tensor_parallel_seconds(
            tokens, num_passes=1, model_parallel=w.inference_model_parallel, pipeline=w.pipeline_parallel
        )
        schedule = self.pipeline_schedule(tokens, w.inference_model_parallel, steps=1)
        transfers = self.stage_transfer_seconds(schedule, tokens, w.inference_model_parallel, passes=1)
        forwards = w.num_reference_forwards
        compute = forwards * one * schedule.bubble_factor
        fixed = forwards * (comm * schedule.bubble_factor + transfers)
        if w.forwards_at_train_mfu:
            return roofline.OpTime(train_s=compute, fixed_s=fixed)
        return roofline.OpTime(forward_s=compute, fixed_s=fixed)

    def train_time(self, tokens: float) -> roofline.OpTime:
        """Forward and backward over ``tokens`` tokens on one actor (or critic) replica, in ``optimizer_steps``
        steps: FLOPs at peak scaled by the pipeline's bubble plus each step's fixed cost, all-reduces, transfers."""
        w = self.workload
        mp = w.actor_model_parallel
        compute = roofline.train_seconds(
            tokens,
            num_params=w.model.num_params,
            num_devices=mp,
            peak_flops=self.cluster.device.peak_flops,
            mfu=1.0,
            attention_flops_per_token=self.attention_flops_per_token,
            recompute=w.activation_recompute,
        )
        # Forward and backward pass exchange activations (the backward its input gradients); recomputation
        # repeats the forward's exchanges.
        comm_passes = 3 if w.activation_recompute else 2
        comm = self.tensor_parallel_seconds(
            tokens, num_passes=comm_passes, model_parallel=mp, pipeline=w.pipeline_parallel
        )
        schedule = self.pipeline_schedule(tokens, mp, steps=w.optimizer_steps)
        transfers = w.optimizer_steps * self.stage_transfer_seconds(
            schedule, tokens / w.optimizer_steps, mp, passes=2
        )
        tokens_per_device_per_step = tokens / (w.optimizer_steps * mp)
        fixed_share = w.train_fixed_tokens_per_step / tokens_per_device_per_step if tokens > 0 else 0.0
        return roofline.OpTime(
            train_s=compute * (schedule.bubble_factor + fixed_share),
            fixed_s=comm * schedule.bubble_factor + transfers,
        )

    def pipeline_schedule(self, tokens: float, model_parallel: int, *, steps: int) -> PipelineSchedule:
        """The schedule of each of ``steps`` steps over ``tokens`` tokens on one replica; one stage (no bubble)
        unless ``count_pipeline_bubbles``."""
        w = self.workload
        stages = w.pipeline_parallel if w.count_pipeline_bubbles else 1
        return schedule_of(tokens / steps, stages=stages, micro_batch_tokens=w.train_micro_batch_tokens)

    def stage_transfer_seconds(
        self, schedule: PipelineSchedule, step_tokens: float, model_parallel: int, *, passes: int
    ) -> float:
        """One step's stage-to-stage transfers: each slot sends one micro-batch's activations (``hidden_size``
        bf16 values per token) across the slowest stage boundary, per pass. The boundary is on the inter-node link
        when the replica's stages span nodes (one boundary then crosses), else on the intra-node one; every
        tensor-parallel rank sends its own copy over its own link, at the same time."""
        if schedule.stages == 1:
            return 0.0
        links = self.cluster.links
        within_node = model_parallel <= self.cluster.devices_per_node
        link = links.intra_node_bytes_per_s if within_node else links.inter_node_bytes_per_s
        latency = LINK_LATENCY_S["intra_node" if within_node else "inter_node"]
        micro_batch_tokens = step_tokens / schedule.micro_batches
        num_bytes = micro_batch_tokens * self.workload.model.hidden_size * ACTIVATION_BYTES_PER_ELEMENT
        hop = latency + float(np.asarray(num_bytes)) / link
        return schedule.transfer_seconds(hop, passes=passes)
