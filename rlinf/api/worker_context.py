"""What one replica of a component learns of the plan at setup: its :class:`WorkerContext`, the component's facts
read from the lowered program (:class:`rlinf.core.component_facts.ComponentFacts`, built by the framework) plus the
replica's rank, world size and device, which the executor adds."""

from __future__ import annotations

from typing import Any

import attrs

from rlinf.core.component_facts import ComponentFacts


@attrs.frozen(kw_only=True)
class WorkerContext(ComponentFacts):
    """Everything one replica of a component learns of the plan at setup (``Worker.setup(config, context)``): the
    component's facts (``component``, ``num_micro_batches``, ``micro_batch_groups``, ``group_size``,
    ``loop_stages``, ``offload``, ``seed``, ``micro_batch_ranks``) and the three fields below."""

    rank: int
    """This replica's index among the component's data-parallel replicas."""
    world: int
    """The component's number of data-parallel replicas."""
    device: Any
    """Where this replica runs (``device.torch_device`` is a ``torch.device`` string such as ``cpu``; ``None`` when
    a plan is only checked, :meth:`rlinf.api.Workload.check_replica`)."""

    @classmethod
    def for_replica(cls, facts: ComponentFacts, *, rank: int, world: int, device: Any) -> WorkerContext:
        """A replica's context: the component's ``facts`` plus what the executor knows of the replica."""
        return cls(**attrs.asdict(facts, recurse=False), rank=rank, world=world, device=device)

    def my_groups(self, micro_batch: int) -> tuple[int, int]:
        """This replica's share ``[lo, hi)`` of a micro-batch's groups: the executor splits every micro-batch
        contiguously, replica ``r`` of ``w`` taking ``[lo + r*n//w, lo + (r+1)*n//w)`` of its ``n`` groups; a
        micro-batch that only some replicas run is split among them alone (``[lo, lo)`` for the others)."""
        lo, hi = self.micro_batch_groups[micro_batch]
        count = hi - lo
        position = self.my_position(micro_batch)
        if position is None:
            return lo, lo
        rank, world = position
        return lo + rank * count // world, lo + (rank + 1) * count // world

    def my_position(self, micro_batch: int) -> tuple[int, int] | None:
        """``(rank, world)`` of this replica among the replicas that run ``micro_batch`` (its own rank and world
        unless the micro-batch is a pinned loop stage), or ``None`` when it does not run it."""
        if not self.micro_batch_ranks:
            return self.rank, self.world
        runners = self.micro_batch_ranks[micro_batch]
        if self.rank not in runners:
            return None
        return runners.index(self.rank), len(runners)

    def my_batch(self) -> tuple[int, int]:
        """This replica's share of the whole iteration as one range ``[first, end)`` of ``end - first`` groups:
        as many as its shares of all micro-batches hold (replicas' shares may differ by one group per
        micro-batch), the ranges of all replicas disjoint and covering the batch, in rank order."""
        first = sum(
            self.my_groups(j)[0] - self.micro_batch_groups[j][0] for j in range(self.num_micro_batches)
        )
        count = sum(hi - lo for lo, hi in map(self.my_groups, range(self.num_micro_batches)))
        return first, first + count

    def my_samples(self, micro_batch: int) -> tuple[int, int]:
        """This replica's share of a micro-batch in samples (groups times ``group_size``)."""
        lo, hi = self.my_groups(micro_batch)
        return lo * self.group_size, hi * self.group_size
