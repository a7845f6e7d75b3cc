"""Spread-loop candidates: plans the planner's contiguous groups cannot express, derived from the ones it found.

The space places each group of collocated components on its own block of devices, so it has no plan in which the
env <-> policy loop runs on every device while another component (the actor) keeps a few of them. Such a plan is
what a pinned loop needs (:func:`rlinf.core.lowering.loop_pinned`: as many env as policy replicas and a stage count that
is a multiple of them; each device then steps its own stages, with no cross-device hand-off inside the loop), and
it is the fastest layout measured on 2 CPU cores (``docs/executor.md``). :func:`spread_loop_plans` derives, from
each judged plan, its variants with env and policy on every device that plan uses, at each stage count of the
space that pins the loop; :func:`planner.search` simulates them with the rest.
"""

from __future__ import annotations

from rlinf.core.lowering import loop_pinned
from rlinf.core.plan import Placement, Plan
from rlinf.core.workflow import Workflow

SPREAD_SOURCE = "spread loop"
"""How :func:`planner.search` names a spread-loop candidate: ``"spread loop of <the source of the plan it spread>"``."""


def spread_loop_plans(workflow: Workflow, plan: Plan, loop_ladder: tuple[int, ...]) -> list[Plan]:
    """``plan`` with the loop's env and policy on every device it uses (the other components keep theirs), at every
    stage count of ``loop_ladder`` that pins the loop. Empty without a loop, or for a plan on one device."""
    placements = spread_placements(workflow, plan)
    if placements is None:
        return []
    devices = len(_spread_devices(plan))
    return [
        Plan(
            placements=placements,
            granularity={**plan.granularity, "loop": stages},
            offload=plan.offload,
            max_staleness=plan.max_staleness,
            buffer_before=plan.buffer_before,
        )
        for stages in loop_ladder
        if loop_pinned(devices, devices, stages)
    ]


def spread_placements(workflow: Workflow, plan: Plan) -> tuple[Placement, ...] | None:
    """``plan``'s placements with the loop's env and policy on every device the plan uses (the other components
    keep theirs), in the plan's order; ``None`` without a loop or on one device."""
    loop = workflow.loop
    if loop is None or any(p.pool != "device" for p in plan.placements):
        return None  # no loop, or one on the cores beside GPUs: the spread covers devices only
    pair = (loop.env, loop.policy)
    devices = _spread_devices(plan)
    if len(devices) < 2:
        return None
    return tuple(
        Placement(component=p.component, devices=devices if p.component in pair else p.devices)
        for p in plan.placements
    )


def _spread_devices(plan: Plan) -> tuple[int, ...]:
    """Every device ``plan`` uses, sorted."""
    return tuple(sorted({d for p in plan.placements for d in p.devices}))
