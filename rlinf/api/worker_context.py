"""What a worker needs to know of the plan, read from the lowered program and handed to it at setup.

A worker never reads the plan or re-derives the lowering's arithmetic: :func:`component_facts` reads, per
component, how many micro-batches the program cuts its batch into (for the loop's env and policy: the pipeline
stages), which groups each micro-batch holds (:func:`rlinf.core.lowering.micro_batch_ranges`, the lowering's own
rule) and whether the component offloads its state; the executor adds the replica's rank, world size and device,
giving each worker its :class:`WorkerContext`.
"""

from __future__ import annotations

from typing import Any

import attrs

from rlinf.core.lowering import micro_batch_ranges
from rlinf.core.plan import Plan
from rlinf.core.program import Program
from rlinf.core.workflow import Workflow


@attrs.frozen(kw_only=True)
class ComponentFacts:
    """Per component, what the program says of its batch; the same for every replica."""

    component: str
    num_micro_batches: int
    """Micro-batches an iteration cuts this component's batch into (loop components: pipeline stages)."""
    micro_batch_groups: tuple[tuple[int, int], ...]
    """Group range ``[lo, hi)`` of each micro-batch, over the whole component (all replicas)."""
    group_size: int
    """Samples per group (responses per prompt; 1 for environments)."""
    loop_stages: int
    """Pipeline stages of the env <-> policy loop (1 when the workflow has no loop)."""
    offload: bool
    """Whether the plan offloads this component's state when it yields a shared device."""
    seed: int = 0
    """The run's seed."""
    micro_batch_ranks: tuple[tuple[int, ...], ...] = ()
    """Per micro-batch, the ranks of the replicas that run it, where not all of them do (a pinned loop stage runs
    on one replica: :func:`rlinf.core.lowering.loop_pinned`); empty when every replica runs every micro-batch."""


@attrs.frozen(kw_only=True)
class WorkerContext:
    """Everything one replica of a component learns of the plan at setup (``Worker.setup(config, context)``)."""

    component: str
    rank: int
    """This replica's index among the component's data-parallel replicas."""
    world: int
    """The component's number of data-parallel replicas."""
    device: Any
    """Where this replica runs (``device.torch_device`` is a ``torch.device`` string such as ``cpu``)."""
    num_micro_batches: int
    """Micro-batches per iteration: ``compute`` is called with ``micro_batch`` in ``range(num_micro_batches)``."""
    micro_batch_groups: tuple[tuple[int, int], ...]
    """Group range ``[lo, hi)`` of each micro-batch over all replicas."""
    group_size: int
    loop_stages: int
    offload: bool
    seed: int
    micro_batch_ranks: tuple[tuple[int, ...], ...] = ()
    """Per micro-batch, the ranks that run it where not all do (see :class:`ComponentFacts`)."""

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


def micro_batch_counts(program: Program) -> dict[str, int]:
    """Per component with compute ops, how many micro-batches ``program`` cuts its batch into."""
    counts: dict[str, int] = {}
    for op in program.ops:
        if op.kind == "compute":
            counts[op.component] = max(counts.get(op.component, 1), op.num_micro_batches)
    return counts


def component_facts(
    workflow: Workflow, plan: Plan, program: Program, *, seed: int = 0
) -> dict[str, ComponentFacts]:
    """Per component, the facts its workers get, read from ``program`` (lowered from ``workflow`` and ``plan``)."""
    counts = micro_batch_counts(program)
    num_groups = workflow.batch_size // workflow.group_size
    loop = workflow.loop
    stages = counts.get(loop.env, 1) if loop is not None else 1
    return {
        name: ComponentFacts(
            component=name,
            num_micro_batches=counts.get(name, 1),
            micro_batch_groups=micro_batch_ranges(num_groups, counts.get(name, 1)),
            group_size=workflow.group_size,
            loop_stages=stages,
            offload=name in plan.offload,
            seed=seed,
            micro_batch_ranks=_micro_batch_ranks(
                program, name, program.devices_of(name), counts.get(name, 1)
            ),
        )
        for name in workflow.component_names
    }


def _micro_batch_ranks(
    program: Program, name: str, devices: tuple[int, ...], count: int
) -> tuple[tuple[int, ...], ...]:
    """Per micro-batch of ``name``, the ranks (positions in its sorted ``devices``, as the executor ranks its
    replicas) of the devices its compute ops run on; empty when every op spans all of ``devices``."""
    ranks: dict[int, tuple[int, ...]] = {}
    for op in program.ops:
        if op.kind == "compute" and op.component == name and op.devices != devices:
            mine = tuple(devices.index(d) for d in op.devices)
            assert ranks.setdefault(op.micro_batch, mine) == mine, (
                f"{name}[{op.micro_batch}] moves between devices"
            )
    if not ranks:
        return ()
    every = tuple(range(len(devices)))
    return tuple(ranks.get(j, every) for j in range(count))


def context_for(facts: ComponentFacts, *, rank: int, world: int, device: Any) -> WorkerContext:
    """A replica's context: the component's facts plus what the executor knows of the replica."""
    return WorkerContext(
        component=facts.component,
        rank=rank,
        world=world,
        device=device,
        num_micro_batches=facts.num_micro_batches,
        micro_batch_groups=facts.micro_batch_groups,
        group_size=facts.group_size,
        loop_stages=facts.loop_stages,
        offload=facts.offload,
        seed=facts.seed,
        micro_batch_ranks=facts.micro_batch_ranks,
    )
