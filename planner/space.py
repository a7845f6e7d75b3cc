"""The plan space the planner searches, defined once so that CP-SAT and brute force search the same set.

A point of the space (:class:`PlanPoint`) is:

* a partition of the workflow's components, in topological order, into **collocated groups** of consecutive
  components (the "cuts of the workflow"); the loop's env and policy are consecutive in that order;
* a **device count** per group, from the sizes allowed for every component of the group (a multiple of the
  model-parallel size whose replica count divides the batch); group ``i`` gets the contiguous block that follows
  group ``i-1``'s, starting at device 0; the counts add up to at most the cluster's devices;
* a **granularity** per stream edge from :attr:`PlanSpace.ladder` (powers of two up to the number of prompt
  groups, capped), and for the loop a number of pipeline stages from :attr:`PlanSpace.loop_ladder` (divisors of
  the environment count, capped);
* an **offload** flag per component that shares its group with another component and has state to move.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import attrs

from rlinf.errors import ConfigError, require
from rlinf.plan import Placement, Plan
from rlinf.workflow import Loop, Workflow

DEFAULT_MAX_GRANULARITY = 32
DEFAULT_MAX_LOOP_STAGES = 16


@attrs.frozen(kw_only=True)
class PlanPoint:
    """One plan of the space, in the planner's coordinates."""

    groups: tuple[tuple[str, ...], ...]
    """Collocated groups, in topological order; each is a run of consecutive components."""
    sizes: tuple[int, ...]
    """Devices of each group."""
    granularity: tuple[tuple[str, int], ...]
    """(key, value) for every stream edge and the loop, sorted by key."""
    offload: frozenset[str] = frozenset()

    def __attrs_post_init__(self) -> None:
        assert len(self.groups) == len(self.sizes), (self.groups, self.sizes)

    def to_plan(self) -> Plan:
        """The plan: group ``i`` on the contiguous device block after group ``i-1``'s."""
        placements = []
        start = 0
        for group, size in zip(self.groups, self.sizes, strict=True):
            for name in group:
                placements.append(Placement(component=name, devices=range(start, start + size)))
            start += size
        return Plan(placements=placements, granularity=dict(self.granularity), offload=self.offload)


@attrs.frozen(kw_only=True)
class PlanSpace:
    """Every plan the planner considers for one workflow on ``num_devices`` devices."""

    workflow: Workflow
    num_devices: int
    order: tuple[str, ...]
    """Components in topological order."""
    segments: tuple[tuple[int, int], ...]
    """Usable groups as ``[start, end)`` ranges of :attr:`order` (those with at least one allowed size)."""
    sizes: tuple[tuple[int, ...], ...]
    """Allowed device counts of each segment."""
    partitions: tuple[tuple[int, ...], ...]
    """Each partition of :attr:`order` into consecutive groups, as segment indices."""
    stream_keys: tuple[str, ...]
    """Stream edges, each given a granularity from :attr:`ladder`."""
    ladder: tuple[int, ...]
    loop_ladder: tuple[int, ...]
    """Pipeline stages of the loop (empty without a loop)."""

    @property
    def granularity_keys(self) -> tuple[str, ...]:
        """Stream edge keys, then ``loop`` if the workflow has one."""
        return self.stream_keys + ((Loop.key,) if self.loop_ladder else ())

    def group_names(self, segment: int) -> tuple[str, ...]:
        """Component names of a segment."""
        start, end = self.segments[segment]
        return self.order[start:end]

    def offloadable(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """Components of a group that may offload: only in shared groups, only with state to move."""
        if len(names) < 2:
            return ()
        return tuple(n for n in names if self.workflow.component(n).state_bytes > 0)

    def granularity_choices(self) -> Iterator[tuple[tuple[str, int], ...]]:
        """Every granularity assignment, each as sorted (key, value) pairs."""
        options = [self.ladder] * len(self.stream_keys) + ([self.loop_ladder] if self.loop_ladder else [])
        for values in itertools.product(*options):
            yield tuple(sorted(zip(self.granularity_keys, values, strict=True)))

    def points(self) -> Iterator[PlanPoint]:
        """Every point of the space (brute force), in a fixed order."""
        granularities = list(self.granularity_choices())
        for partition in self.partitions:
            groups = tuple(self.group_names(s) for s in partition)
            offload_sets = list(_subsets(tuple(n for g in groups for n in self.offloadable(g))))
            for sizes in itertools.product(*(self.sizes[s] for s in partition)):
                if sum(sizes) > self.num_devices:
                    continue
                for granularity in granularities:
                    for offload in offload_sets:
                        yield PlanPoint(groups=groups, sizes=sizes, granularity=granularity, offload=offload)

    def count(self) -> int:
        """Number of points (without enumerating them)."""
        num_granularities = len(self.ladder) ** len(self.stream_keys) * max(1, len(self.loop_ladder))
        total = 0
        for partition in self.partitions:
            num_offload = 2 ** sum(len(self.offloadable(self.group_names(s))) for s in partition)
            num_sizes = sum(
                1
                for sizes in itertools.product(*(self.sizes[s] for s in partition))
                if sum(sizes) <= self.num_devices
            )
            total += num_sizes * num_offload
        return total * num_granularities


def allowed_sizes(workflow: Workflow, name: str, num_devices: int) -> tuple[int, ...]:
    """Device counts for a component: multiples of its model-parallel size whose replica count divides the batch."""
    model_parallel = workflow.component(name).model_parallel_size
    return tuple(
        d
        for d in range(model_parallel, num_devices + 1, model_parallel)
        if workflow.batch_size % (d // model_parallel) == 0
    )


def build_space(
    workflow: Workflow,
    num_devices: int,
    *,
    max_granularity: int = DEFAULT_MAX_GRANULARITY,
    max_loop_stages: int = DEFAULT_MAX_LOOP_STAGES,
) -> PlanSpace:
    """The plan space of ``workflow`` on ``num_devices`` devices.

    Raises :class:`ConfigError` for bad caps and when the loop's env and policy are not consecutive in the
    topological order (they could then never share a group)."""
    require(
        isinstance(num_devices, int) and num_devices >= 1,
        "num_devices",
        num_devices,
        "must be an integer >= 1",
        "give the cluster's device count",
    )
    require(max_granularity >= 1, "max_granularity", max_granularity, "must be >= 1", "use e.g. 32")
    require(max_loop_stages >= 1, "max_loop_stages", max_loop_stages, "must be >= 1", "use e.g. 16")
    order = workflow.topological_order()
    loop = workflow.loop
    if loop is not None:
        positions = sorted((order.index(loop.env), order.index(loop.policy)))
        if positions[1] != positions[0] + 1:
            raise ConfigError(
                "loop",
                f"{loop.env}<->{loop.policy}",
                "env and policy are not consecutive in topological order",
                "declare the loop's env and policy next to each other",
            )
    per_component = {name: set(allowed_sizes(workflow, name, num_devices)) for name in order}
    segments, sizes = [], []
    for start in range(len(order)):
        for end in range(start + 1, len(order) + 1):
            common = set.intersection(*(per_component[n] for n in order[start:end]))
            if common:
                segments.append((start, end))
                sizes.append(tuple(sorted(common)))
    index = {segment: i for i, segment in enumerate(segments)}
    partitions = []
    for cuts in itertools.product((False, True), repeat=len(order) - 1):
        bounds = [0] + [i + 1 for i, cut in enumerate(cuts) if cut] + [len(order)]
        parts = list(itertools.pairwise(bounds))
        if all(p in index for p in parts):
            partitions.append(tuple(index[p] for p in parts))
    partitions.sort(key=lambda p: (len(p), p))
    num_groups = workflow.batch_size // workflow.group_size
    ladder = tuple(2**i for i in range(int(math.log2(max(1, min(num_groups, max_granularity)))) + 1))
    loop_ladder: tuple[int, ...] = ()
    if loop is not None:
        loop_ladder = tuple(
            s for s in range(1, min(workflow.batch_size, max_loop_stages) + 1) if workflow.batch_size % s == 0
        )
    return PlanSpace(
        workflow=workflow,
        num_devices=num_devices,
        order=order,
        segments=tuple(segments),
        sizes=tuple(sizes),
        partitions=tuple(partitions),
        stream_keys=tuple(e.key for e in workflow.edges if e.kind == "stream"),
        ladder=ladder,
        loop_ladder=loop_ladder,
    )


def _subsets(items: tuple[str, ...]) -> Iterator[frozenset[str]]:
    for count in range(len(items) + 1):
        for chosen in itertools.combinations(items, count):
            yield frozenset(chosen)


def micro_batch_counts(workflow: Workflow, granularity: dict[str, int]) -> dict[str, int]:
    """Micro-batches of each component under a granularity, by the lowering's rule: the loop's env and policy
    split into ``granularity['loop']`` stages; every other component into the largest granularity of its
    stream edges (1 without any)."""
    loop = workflow.loop
    loop_names = (loop.env, loop.policy) if loop is not None else ()
    counts = {}
    for name in workflow.component_names:
        if name in loop_names:
            counts[name] = granularity.get(Loop.key, 1)
            continue
        keys = [e.key for e in workflow.incoming(name) + workflow.outgoing(name) if e.kind == "stream"]
        counts[name] = max((granularity.get(k, 1) for k in keys), default=1)
    return counts
