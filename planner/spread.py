"""Spread-loop candidates: plans the planner's contiguous groups cannot express, derived from the ones it found.

The space places each group of collocated components on its own block of devices, so it has no plan in which the
env <-> policy loop runs on every device while another component (the actor) keeps a few of them. Such a plan is
what a pinned loop needs (:func:`rlinf.lowering.loop_pinned`: as many env as policy replicas and a stage count that
is a multiple of them; each device then steps its own stages, with no cross-device hand-off inside the loop), and
it is the fastest layout measured on 2 CPU cores (``docs/executor.md``). :func:`spread_loop_plans` derives, from
each judged plan, its variants with env and policy on every device that plan uses, at each stage count of the
space that pins the loop; :func:`planner.search` simulates them with the rest.
"""

from __future__ import annotations

from collections.abc import Iterable

from rlinf.lowering import loop_pinned
from rlinf.plan import Placement, Plan
from rlinf.workflow import Workflow


def spread_loop_plans(workflow: Workflow, plans: Iterable[Plan], loop_ladder: tuple[int, ...]) -> list[Plan]:
    """Each of ``plans`` with the loop's env and policy on every device the plan uses (the other components keep
    theirs), at every stage count of ``loop_ladder`` that pins the loop; distinct, in the order found, none of
    ``plans`` itself. Empty without a loop, or for plans on one device."""
    loop = workflow.loop
    if loop is None:
        return []
    pair = (loop.env, loop.policy)
    given = list(plans)
    seen = set(given)
    out = []
    for plan in given:
        devices = tuple(sorted({d for p in plan.placements for d in p.devices}))
        if len(devices) < 2:
            continue
        placements = [
            Placement(component=p.component, devices=devices if p.component in pair else p.devices)
            for p in plan.placements
        ]
        for stages in loop_ladder:
            if not loop_pinned(len(devices), len(devices), stages):
                continue
            variant = Plan(
                placements=placements,
                granularity={**plan.granularity, "loop": stages},
                offload=plan.offload,
            )
            if variant not in seen:
                seen.add(variant)
                out.append(variant)
    return out
