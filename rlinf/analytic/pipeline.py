"""Pipeline parallelism's schedule: the bubble and the stage-to-stage transfers of one replica.

A replica of ``p`` pipeline stages (Megatron's ``pipeline_model_parallel_size``) holds ``1/p`` of the layers on each
stage and runs a step's ``m`` micro-batches through the stages one after another (1F1B: each stage starts the next
micro-batch's forward as soon as it has passed the previous one on). Every stage works on ``m`` micro-batches in
``m + p - 1`` slots: the first ``p - 1`` fill the pipeline and the last ``p - 1`` drain it, so the replica takes
``(m + p - 1) / m`` times its share of the compute, the *bubble*. In every slot each stage boundary carries one
micro-batch's activations forward (and in training its gradients back), one message per pass: a transfer on the
critical path that Megatron's non-interleaved schedule does not overlap. A step with more micro-batches (more tokens
per device) wastes less of the pipeline: the efficiency depends on the work per device.

Pure functions of plain numbers; :class:`rlinf.analytic.physics.Physics` applies them to training and to the
log-prob forwards.
"""

from __future__ import annotations

import math

import attrs

from rlinf.core.errors import require


@attrs.frozen(kw_only=True)
class PipelineSchedule:
    """One optimizer step (or one forward sweep) of ``micro_batches`` micro-batches through ``stages`` stages."""

    stages: int
    micro_batches: int

    def __attrs_post_init__(self) -> None:
        for field in ("stages", "micro_batches"):
            value = getattr(self, field)
            require(
                isinstance(value, int) and value >= 1,
                field,
                value,
                "must be an integer >= 1",
                "use 1 or more",
            )

    @property
    def slots(self) -> int:
        """Slots of the schedule: every micro-batch, plus the fill and the drain."""
        return self.micro_batches + self.stages - 1

    @property
    def bubble_factor(self) -> float:
        """The replica's time over its split share of the compute: ``(m + p - 1) / m``."""
        return self.slots / self.micro_batches

    def transfer_seconds(self, hop_s: float, *, passes: int) -> float:
        """Seconds of stage-to-stage transfers on the critical path: one hop of ``hop_s`` per slot and pass (a
        forward pass sends activations, a backward pass their gradients); none on one stage."""
        if self.stages == 1:
            return 0.0
        return self.slots * passes * hop_s


def schedule_of(tokens: float, *, stages: int, micro_batch_tokens: int) -> PipelineSchedule:
    """The schedule of a step of ``tokens`` tokens on one replica, packed into micro-batches of at most
    ``micro_batch_tokens``."""
    micro_batches = max(1, math.ceil(tokens / micro_batch_tokens))
    return PipelineSchedule(stages=stages, micro_batches=micro_batches)
