"""The plan shapes the planner hands the application: the fixed modes and the staleness modes of a search.

Fixed modes on ``n`` devices (shapes the planner's plan space holds, with one granularity everywhere):

* **collocated**: every component on every device;
* **disaggregated**: every component on its own contiguous block, in topological order, the blocks as equal as
  ``n`` allows (the extra devices go to the components with the most state); with fewer devices than components
  each gets one logical device and the caller maps them onto the physical ones (oversubscribed);
* **hybrid**: with an env <-> policy loop, env on the first half, policy on the second and every other component
  on all devices; otherwise the components in topological order cut in two, the first half (rounded up) on the
  first half of the devices, the rest on the second.

Staleness modes (:func:`staleness_modes`): the ``(max_staleness, buffer_before)`` pairs a search under a bound
``K`` considers, for the planner's own space and for every plan the application proposes beside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from rlinf.core.errors import ConfigError, require
from rlinf.core.plan import MODES, Placement, Plan
from rlinf.core.workflow import Workflow

__all__ = ["MAX_SEARCHED_STALENESS", "MODES", "StalenessMode", "fixed_plan", "staleness_modes"]

MAX_SEARCHED_STALENESS = 2
"""The largest staleness a search considers: at 1 the rollout side of iteration ``i + 1`` runs while iteration
``i`` trains, at 2 the rollout also generates continuously; a larger bound lowers to the same steady-state step with
more samples buffered, so it is never faster."""

StalenessMode = tuple[int, tuple[str, ...]]
"""A plan's ``(max_staleness, buffer_before)``."""

Layout = dict[str, tuple[int, ...]]
"""Device ids of each component; :func:`on_cores` ids place it on the core pool instead."""
CORE = -1


def staleness_modes(workflow: Workflow, max_staleness: int) -> tuple[StalenessMode, ...]:
    """Every ``(staleness, buffer_before)`` a search under the bound ``max_staleness`` considers: ``(0, ())``,
    then each staleness from 1 to ``min(max_staleness, MAX_SEARCHED_STALENESS)`` with each buffer position of the
    workflow (``Workflow.buffer_cuts``); only ``(0, ())`` when the workflow has no edge into its training side."""
    if not workflow.buffered_edges:
        return ((0, ()),)
    cuts = workflow.buffer_cuts  # starts with (): the buffer feeds the trainers
    bounds = range(1, min(max_staleness, MAX_SEARCHED_STALENESS) + 1)
    return ((0, ()), *((k, cut) for k in bounds for cut in cuts))


def on_cores(count: int) -> tuple[int, ...]:
    """A layout entry for cores 0..count-1 of the core pool (the CPU cores beside GPUs)."""
    return (CORE,) * count


def fixed_plan(
    workflow: Workflow,
    mode: str,
    num_devices: int,
    *,
    granularity: int = 1,
    offload: Iterable[str] = (),
    max_staleness: int = 0,
    buffer_before: Iterable[str] = (),
) -> tuple[Plan, int]:
    """The ``mode`` plan on ``num_devices`` devices and its number of logical devices, with ``max_staleness``
    and ``buffer_before`` (one of :func:`staleness_modes`; by default synchronous)."""
    require(num_devices >= 1, "--devices", num_devices, "must be >= 1", "use at least one device")
    order = workflow.topological_order()
    devices = tuple(range(num_devices))
    logical = num_devices
    if mode == "collocated":
        layout = dict.fromkeys(order, devices)
    elif mode == "disaggregated":
        logical = max(num_devices, len(order))
        layout = _blocks(workflow, order, logical)
    elif mode == "hybrid":
        require(
            num_devices >= 2, "--devices", num_devices, "hybrid needs at least 2 devices (two groups apart)",
            "use --devices 2 or more, or --mode collocated",
        )  # fmt: skip
        layout = halves(workflow, order, num_devices)
    else:
        raise ConfigError("mode", mode, "unknown mode", f"use one of {list(MODES)}")
    plan = layout_plan(workflow, layout, granularity, frozenset(offload))
    if max_staleness or buffer_before:
        plan = Plan(
            placements=plan.placements,
            granularity=plan.granularity,
            offload=plan.offload,
            max_staleness=max_staleness,
            buffer_before=tuple(buffer_before),
        )
    return plan, logical


def _blocks(workflow: Workflow, order: tuple[str, ...], num_devices: int) -> Layout:
    base, extra = divmod(num_devices, len(order))
    heaviest = sorted(order, key=lambda n: (-workflow.component(n).state_bytes, order.index(n)))[:extra]
    layout, start = {}, 0
    for name in order:
        size = base + (name in heaviest)
        layout[name] = tuple(range(start, start + size))
        start += size
    return layout


def halves(workflow: Workflow, order: tuple[str, ...], num_devices: int) -> Layout:
    """The hybrid layout: the loop's env and policy on either half (the rest on every device), or without a loop
    the components in topological order cut in two halves."""
    half = num_devices // 2
    first, second, every = tuple(range(half)), tuple(range(half, num_devices)), tuple(range(num_devices))
    loop = workflow.loop
    if loop is not None:
        return {n: first if n == loop.env else second if n == loop.policy else every for n in order}
    cut = math.ceil(len(order) / 2)
    return {n: first if i < cut else second for i, n in enumerate(order)}


def layout_plan(workflow: Workflow, layout: Layout, granularity: int, offload: frozenset[str]) -> Plan:
    """The plan of ``layout`` at one ``granularity`` everywhere (an :func:`on_cores` entry places its component
    on cores)."""
    placements = []
    for name, ids in layout.items():
        if ids and ids[0] == CORE:
            placements.append(Placement(component=name, devices=range(len(ids)), pool="cpu"))
        else:
            placements.append(Placement(component=name, devices=ids))
    return Plan(
        placements=placements,
        granularity=dict.fromkeys(workflow.granularity_keys, granularity),
        offload=offload,
    )
