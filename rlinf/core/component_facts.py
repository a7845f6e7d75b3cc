"""What a worker needs to know of the plan, read from the lowered program: per component, the facts every replica
shares (:class:`ComponentFacts`).

A worker never reads the plan or re-derives the lowering's arithmetic: :func:`component_facts` reads, per
component, how many micro-batches the program cuts its batch into (for the loop's env and policy: the pipeline
stages), which groups each micro-batch holds (:func:`rlinf.core.lowering.micro_batch_ranges`, the lowering's own
rule) and whether the component offloads its state. The executor adds the replica's rank, world size and device,
giving each worker its :class:`rlinf.api.WorkerContext` (a :class:`ComponentFacts` with those three fields more).
"""

from __future__ import annotations

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
    """Micro-batches per iteration: ``compute`` is called with ``micro_batch`` in ``range(num_micro_batches)``
    (loop components: pipeline stages)."""
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
