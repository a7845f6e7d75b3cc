"""Plans derived from a workflow, for any workload: the profiling phase's probe plans, and the check that a plan's
micro-batches split into whole groups over the replicas that handle them. The fixed modes are the planner's
(:mod:`planner.modes`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from planner.modes import Layout, halves, layout_plan, on_cores
from rlinf.core.component_facts import micro_batch_counts
from rlinf.core.errors import ConfigError, RlinfError, require
from rlinf.core.lowering import loop_pinned, micro_batch_ranges
from rlinf.core.plan import Plan
from rlinf.core.program import Program
from rlinf.core.workflow import Edge, Workflow


def check_plan(workflow: Workflow, plan: Plan, lowered: Callable[[Plan], Program]) -> Program:
    """The program of ``plan`` (``lowered``), after checking that every micro-batch of every component splits
    into whole groups over the component's data-parallel replicas and over each consumer's: contiguously, the
    shares differing by at most one group (:meth:`rlinf.api.worker_context.WorkerContext.my_groups`), so it only
    needs at least one group per replica; and that a producer whose micro-batches split unevenly hands them to
    one consumer replica or to as many as it has, and that each producer micro-batch feeds one consumer
    micro-batch as its replicas expect (:func:`_check_gathered`): what the executor's row routing supports.
    Raises :class:`ConfigError`."""
    try:
        program = lowered(plan)
    except ConfigError:
        raise
    except RlinfError as error:  # e.g. states that do not fit: a plan this workload cannot run
        problem, _, fix = str(error).partition("; fix: ")
        raise ConfigError("plan", plan.describe(), problem, fix or "choose another plan") from None
    counts = micro_batch_counts(program)
    num_groups = workflow.batch_size // workflow.group_size
    loop = workflow.loop

    def replicas(name: str) -> int:
        return len(plan.devices_of(name)) // workflow.component(name).model_parallel_size

    pair = (loop.env, loop.policy) if loop is not None else ()
    pinned = loop is not None and loop_pinned(
        len(plan.devices_of(loop.env)), len(plan.devices_of(loop.policy)), counts.get(loop.env, 1)
    )

    def runners(name: str) -> int:
        """Replicas that run each micro-batch of ``name``: one for a stage of a pinned loop."""
        return 1 if pinned and name in pair else replicas(name)

    for name in workflow.component_names:
        consumers = [e.dst for e in workflow.outgoing(name)]
        if loop is not None and name in (loop.env, loop.policy):
            consumers.append(loop.policy if name == loop.env else loop.env)
        widest = max([name, *consumers], key=runners)  # the component whose replicas share the micro-batch
        most = runners(widest)
        sizes = [hi - lo for lo, hi in micro_batch_ranges(num_groups, counts.get(name, 1))]
        fewer = f"fewer micro-batches (at most {num_groups // most}) or " if num_groups >= most else ""
        source = "" if widest == name else f" from {name}"
        require(
            min(sizes) >= most, f"{widest} replicas", most,
            f"a micro-batch of {min(sizes)} groups{source} leaves some of them without a whole group "
            f"(plan {plan.describe()})",
            f"use at most {min(sizes)} {widest} replicas, {fewer}a larger batch (at least {most} groups)",
        )  # fmt: skip
        producers = runners(name)
        if all(size % producers == 0 for size in sizes):
            continue
        for consumer in consumers:
            # The executor hands a producer replica's rows on as if every producer replica held as many
            # (executor/protocol.py share_slice): exact for one producer or consumer, or as many of each.
            require(
                runners(consumer) in (1, producers), f"{name}->{consumer} replicas", f"{producers}->{runners(consumer)}",
                f"{name}'s micro-batches of {sorted(set(sizes))} groups split unevenly over its {producers} replicas, "
                f"which the executor hands on only to one consumer replica or to as many as there are producers "
                f"(plan {plan.describe()})",
                f"give {consumer} 1 or {producers} replicas, or use a micro-batch count that splits "
                f"{num_groups} groups into multiples of {producers}",
            )  # fmt: skip
    for edge in workflow.edges:
        _check_gathered(edge, counts, num_groups, replicas(edge.dst), plan)
    return program


def _check_gathered(edge: Edge, counts: dict[str, int], num_groups: int, consumers: int, plan: Plan) -> None:
    """Raise unless, on a stream edge, every micro-batch of ``edge.src`` lies within one micro-batch of
    ``edge.dst`` and reaches each of the ``consumers`` replicas as its share of that micro-batch.

    The executor hands a consumer op the whole output (the replica's rows) of every producer op it depends on;
    the workers cannot tell which rows belong to which of their micro-batches. A producer micro-batch that
    overlaps several consumer micro-batches would reach each of them whole, and its groups would be processed
    more than once (a GRPO actor trained on duplicates and ran past its iteration: ``IndexError`` in
    ``ActorWorker.compute``). A consumer micro-batch that gathers several producer micro-batches reaches a
    consumer replica as its share of each (``executor.protocol.share_slice``): together its share of the whole
    (:meth:`~rlinf.api.worker_context.WorkerContext.my_groups`, what the worker expects) only when the consumer
    replicas split each producer micro-batch evenly."""
    if edge.kind != "stream":  # a barrier's consumer takes the whole batch
        return
    src, dst = edge.src, edge.dst
    produced, consumed = counts.get(src, 1), counts.get(dst, 1)
    ends = [hi for _, hi in micro_batch_ranges(num_groups, consumed)]
    ranges = micro_batch_ranges(num_groups, produced)
    sizes = [hi - lo for lo, hi in ranges]
    require(
        all(hi <= next(end for end in ends if end > lo) for lo, hi in ranges),
        f"{src}->{dst} micro-batches", f"{produced}->{consumed}",
        f"{dst} cuts its batch into {consumed} micro-batches, so a {src} micro-batch would feed several of them "
        f"and each would receive all of it: its groups would be processed more than once (plan {plan.describe()})",
        f"set granularity.{edge.key} to a multiple of {consumed} (as many {src} micro-batches as {dst} or more), "
        f"or lower the granularity that gives {dst} {consumed}",
    )  # fmt: skip
    require(
        produced == consumed or consumers == 1 or all(n % consumers == 0 for n in sizes),
        f"{src}->{dst} replicas", consumers,
        f"{dst}'s micro-batches gather {src} micro-batches of {sorted(set(sizes))} groups, which its {consumers} "
        f"replicas would receive in shares that do not add up to their shares of the gathered micro-batch "
        f"(plan {plan.describe()})",
        f"give {dst} 1 replica or a count that divides {sorted(set(sizes))}, or give {src} as many micro-batches "
        f"as {dst}",
    )  # fmt: skip


def derive_probes(
    workflow: Workflow, num_devices: int, runnable: Callable[[Plan], bool], *, num_cores: int = 0
) -> list[Plan]:
    """Plans whose iterations the profiling phase measures, most informative first, each on ``num_devices``
    devices and accepted by ``runnable``. They put every component on all devices and on each half (all of them
    together on the first half too, so plans on fewer devices are measured, not extrapolated), cut the
    pipeline at every point between two components (so every edge is measured as a transfer, at each replica
    count), and take the fewest, the most and intermediate micro-batch counts that split evenly (the cost of a
    pipelined op depends on how many micro-batches are in flight, so intermediate counts are measured, not
    interpolated), and measure onload/offload once (collocated, every component with state offloaded). For a
    loop, last, its stage counts again on other layouts, so that every per-device env/policy size is measured by
    two plans with different compute ops (validation predicts a plan without its own samples). With ``num_cores``
    CPU cores beside the devices (:mod:`rlinf.core.cluster`'s core pool), the components that need no GPU
    (``Component.cpu_ok``) are also measured there, early: on every core, on half of them and on one, the others
    collocated on every device, at the fewest, a middle and the most micro-batches."""
    order = workflow.topological_order()
    every = tuple(range(num_devices))
    half = num_devices // 2
    first, rest = tuple(range(half)), tuple(range(half, num_devices))
    collocated = dict.fromkeys(order, every)
    stateful = frozenset(n for n in order if workflow.component(n).state_bytes > 0)
    layouts: list[tuple[Layout, str, frozenset[str]]] = [
        (collocated, "fewest", frozenset()),
        (collocated, "most", frozenset()),
    ]
    if half >= 1:
        layouts.append((dict.fromkeys(order, first), "fewest", frozenset()))  # everything on half the devices
        if workflow.loop is not None:
            layouts.append((halves(workflow, order, num_devices), "fewest", frozenset()))
        for cut, which in zip(
            range(1, len(order)),
            ("most", "fewest", "middle", "third", "two-thirds") * len(order),
            strict=False,
        ):
            layouts.append(({n: first if i < cut else rest for i, n in enumerate(order)}, which, frozenset()))
        cut = 1 if workflow.loop is not None else math.ceil(len(order) / 2)
        for which in ("third", "two-thirds"):
            layouts.append(({n: first if i < cut else rest for i, n in enumerate(order)}, which, frozenset()))
    layouts.append((collocated, "middle", stateful))
    movable = [n for n in order if workflow.component(n).cpu_ok] if num_cores else []
    if movable:
        # Measured before the loop variants below (a tight budget cuts from the end): each pool's costs of a
        # component that may run on cores come from plans that put it there.
        core_layouts: list[tuple[Layout, str, frozenset[str]]] = []
        for cores, which in ((num_cores, "fewest"), (num_cores, "most"), (max(1, num_cores // 2), "middle"),
                             (1, "fewest")):  # fmt: skip
            layout = {n: on_cores(cores) if n in movable else every for n in order}
            core_layouts.append((layout, which, frozenset()))
        layouts[1:1] = core_layouts[:1]  # right after the first probe: a short budget measures both pools
        layouts[3:3] = core_layouts[1:]
    if workflow.loop is not None and half >= 1:
        # Last (a tight budget cuts these first): the loop's stage counts again with env and policy apart,
        # together, and together with the other components, on half the devices (and on all of them, below):
        # each per-device env/policy size, handed off between devices or on one (``Op.shared``), is then measured
        # by two plans with different compute ops, so a plan predicted without its own probe's samples
        # (validation) finds its sizes measured.
        loop = workflow.loop
        pair = (loop.env, loop.policy)
        apart = {n: rest if n == loop.policy else first for n in order}
        together = {n: first if n in pair else rest for n in order}
        for which in ("fewest", "third", "two-thirds", "most"):
            for layout in (apart, together, dict.fromkeys(order, first)):
                layouts.append((layout, which, frozenset()))
        spread = {n: every if n in pair else first for n in order}
        for which in ("fewest", "middle", "most"):
            layouts.append((spread, which, frozenset()))
    out: list[Plan] = []
    for layout, which, offload in layouts:
        fitting = [
            plan
            for plan in (layout_plan(workflow, layout, g, offload) for g in uniform_granularities(workflow))
            if runnable(plan)
        ]
        if not fitting:
            continue
        position = {"fewest": 0, "most": -1, "middle": len(fitting) // 2, "third": len(fitting) // 3,
                    "two-thirds": 2 * len(fitting) // 3}[which]  # fmt: skip
        chosen = fitting[position]
        if chosen not in out:
            out.append(chosen)
    return out


def uniform_granularities(workflow: Workflow) -> list[int]:
    """Uniform granularities for probes: the divisors of the groups of a batch (of the environments for a
    loop), so that every micro-batch of a probe holds as many groups."""
    num_groups = workflow.batch_size // workflow.group_size
    return [g for g in range(1, num_groups + 1) if num_groups % g == 0]
