"""Baselines, judged by the same simulator as the planner.

* **fixed collocated**: every component on the same (largest) device block, one uniform granularity, offload
  off or on for every component with state; the best of these by simulation.
* **fixed disaggregated**: every component on its own block of a power-of-two multiple of its model-parallel
  size (the sizes fixed-mode plans are written with); the best split and uniform granularity (the 16 best by
  the surrogate are simulated). Under a staleness bound (a space built with ``max_staleness`` >= 1) each split
  is also tried at each staleness and buffer position: the one-step-off layout other systems run (generation on
  its own GPUs one step ahead of training).
* **closed form**: the recursive search described for RLinf's auto-placement: a run of components costs the sum
  of its parts when collocated, and warm-up + max stage x (micro-batches - 1) when cut in two (each side placed
  recursively on its share of the devices); the minimum over cuts, device splits (power-of-two multiples of
  the model-parallel sizes) and micro-batch counts.

Brute force over the whole plan space, the reference for all of them, is :mod:`planner.brute_force`.
"""

from __future__ import annotations

import itertools
import math

from planner.judge import Evaluation, judge, rank
from planner.space import PlanPoint, PlanSpace
from planner.surrogate import cut_kind, estimate, group_peak_bytes
from planner.tables import CostTables
from rlinf.core.cluster import Cluster
from rlinf.core.costs import CostModel
from rlinf.core.workflow import Loop, Workflow

NUM_SIMULATED_SPLITS = 16


def _uniform_granularities(space: PlanSpace) -> list[tuple[tuple[str, int], ...]]:
    loops = space.loop_ladder or (None,)
    out = []
    for value, stages in itertools.product(space.ladder, loops):
        pairs = [(key, value) for key in space.stream_keys] + (
            [(Loop.key, stages)] if stages is not None else []
        )
        out.append(tuple(sorted(pairs)))
    return out


def coarse_sizes(space: PlanSpace, group: tuple[str, ...]) -> tuple[int, ...]:
    """The sizes of ``group`` that are a power-of-two multiple of its smallest size (a fixed mode's sizes)."""
    allowed = space.sizes(group)
    if not allowed:
        return ()
    return tuple(allowed.step * 2**i for i in range((allowed[-1] // allowed.step).bit_length()))


def collocated_points(tables: CostTables) -> list[tuple[PlanPoint, float]]:
    """Fixed-collocated plans with the surrogate's estimate: those it thinks fit, or all when none does."""
    space = tables.space
    group = space.order
    sizes = space.sizes(group)
    if group not in space.groups or not sizes:
        return []
    offloads = [frozenset(), frozenset(space.offloadable(group))]
    points = [
        PlanPoint(groups=(group,), sizes=(sizes[-1],), granularity=granularity, offload=offload)
        for granularity in _uniform_granularities(space)
        for offload in dict.fromkeys(offloads)
    ]
    scored = [(p, estimate(tables, p)) for p in points]
    fitting = [(p, e.iteration_s) for p, e in scored if e.fits()]
    return fitting or [(p, e.iteration_s) for p, e in scored]


def disaggregated_points(
    tables: CostTables, limit: int = NUM_SIMULATED_SPLITS
) -> list[tuple[PlanPoint, float]]:
    """The ``limit`` best fixed-disaggregated plans by the surrogate (every component on its own block, using
    every device it can: see :func:`_maximal`), at every staleness and buffer position of the space."""
    space = tables.space
    groups = tuple((name,) for name in space.order)
    options = [coarse_sizes(space, group) for group in groups]
    if len(space.order) < 2 or not space.has_device_partition(groups) or not all(options):
        return []
    scored = []
    for sizes in itertools.product(*options):
        if not _maximal(sizes, options, space.num_devices):
            continue
        for granularity, (staleness, cut) in itertools.product(
            _uniform_granularities(space), space.staleness_modes
        ):
            point = PlanPoint(
                groups=groups, sizes=sizes, granularity=granularity, staleness=staleness, buffer_before=cut
            )
            result = estimate(tables, point)
            if result.fits():
                scored.append((result.iteration_s, sizes, granularity, staleness, cut, point))
    scored.sort(key=lambda item: item[:5])
    return [(point, seconds) for seconds, *_, point in scored[:limit]]


def _maximal(sizes: tuple[int, ...], options: list[tuple[int, ...]], num_devices: int) -> bool:
    """Whether ``sizes`` fits and no component could take its next larger size within ``num_devices``: a
    disaggregated split that leaves devices idle that a component could use is never its best (more devices
    never make a component slower), so the baseline considers only maximal splits."""
    total = sum(sizes)
    if total > num_devices:
        return False
    for size, allowed in zip(sizes, options, strict=True):
        larger = [a for a in allowed if a > size]
        if larger and total - size + min(larger) <= num_devices:
            return False
    return True


def closed_form_point(tables: CostTables) -> PlanPoint | None:
    """The plan of RLinf's closed-form recursive placement search, or None when nothing fits."""
    space = tables.space
    workflow = space.workflow
    groups = set(space.groups)
    sizes = {group: coarse_sizes(space, group) for group in groups}
    grid = sorted({d for options in sizes.values() for d in options})
    memo: dict[tuple[int, int, int], tuple | None] = {}

    def leaf(a: int, b: int, n: int) -> tuple | None:
        names = space.order[a:b]
        if names not in groups or n not in sizes[names]:
            return None
        for granularity in _uniform_granularities(space):
            for offload in dict.fromkeys((frozenset(), frozenset(space.offloadable(names)))):
                counts = tables.counts(granularity)
                if group_peak_bytes(tables, names, n, counts, offload) > tables.capacity_bytes:
                    continue
                seconds = sum(
                    tables.profile(c, n, counts[c]).busy_s + (tables.switch_s[c] if c in offload else 0.0)
                    for c in names
                )
                inner = {k: v for k, v in granularity if _inside(space, k, names)}
                return (seconds, ((names, n, offload),), inner)
        return None

    def best(a: int, b: int, budget: int) -> tuple | None:
        key = (a, b, budget)
        if key not in memo:
            found = [o for o in (exact(a, b, n) for n in grid if n <= budget) if o is not None]
            memo[key] = min(found, key=lambda o: o[0]) if found else None
        return memo[key]

    exact_memo: dict[tuple[int, int, int], tuple | None] = {}
    cuts = {
        cut: (kind, _cut_key(workflow, space.order[cut - 1], space.order[cut], kind))
        for cut in range(1, len(space.order))
        for kind in [cut_kind(workflow, space.order[cut - 1], space.order[cut])]
    }

    def exact(a: int, b: int, n: int) -> tuple | None:
        """The fastest placement of components ``a:b`` on exactly ``n`` devices (memoized: :func:`best` asks
        for it under every budget >= ``n``). Among equal times the first found wins: the leaf, then cuts, left
        sizes and stage counts in increasing order."""
        key = (a, b, n)
        if key in exact_memo:
            return exact_memo[key]
        found = leaf(a, b, n)
        for cut in range(a + 1, b):
            kind, edge = cuts[cut]
            counts = space.loop_ladder if kind == "loop" else space.ladder if kind == "stream" else (1,)
            for n_left in grid:
                if n_left >= n:
                    break
                left, right = best(a, cut, n_left), best(cut, b, n - n_left)
                if left is None or right is None:
                    continue
                total, slowest = left[0] + right[0], max(left[0], right[0])
                for m in counts:
                    seconds = total / m + slowest / m * (m - 1)
                    if found is None or seconds < found[0]:
                        inner = {**left[2], **right[2], **({edge: m} if edge else {})}
                        found = (seconds, left[1] + right[1], inner)
        exact_memo[key] = found
        return found

    found = best(0, len(space.order), space.num_devices)
    if found is None:
        return None
    _, leaves, inner = found
    granularity = {key: 1 for key in space.stream_keys} | ({Loop.key: 1} if space.loop_ladder else {}) | inner
    return PlanPoint(
        groups=tuple(names for names, _, _ in leaves),
        sizes=tuple(n for _, n, _ in leaves),
        granularity=tuple(sorted(granularity.items())),
        offload=frozenset().union(*(off for _, _, off in leaves)),
    )


def _inside(space: PlanSpace, key: str, names: tuple[str, ...]) -> bool:
    if key == Loop.key:
        loop = space.workflow.loop
        return loop is not None and loop.env in names and loop.policy in names
    src, dst = key.split("->")
    return src in names and dst in names


def _cut_key(workflow: Workflow, before: str, after: str, kind: str) -> str | None:
    if kind == "loop":
        return Loop.key
    for edge in workflow.incoming(after):
        if edge.src == before and edge.kind == "stream":
            return edge.key
    return None


def _best(
    workflow: Workflow, cluster: Cluster, costs: CostModel, scored: list[tuple[PlanPoint, float]], source: str
) -> Evaluation | None:
    evaluations = [
        judge(workflow, cluster, costs, point.to_plan(), source, seconds) for point, seconds in scored
    ]
    return rank(evaluations)[0] if evaluations else None


def fixed_collocated(
    workflow: Workflow, cluster: Cluster, costs: CostModel, tables: CostTables
) -> Evaluation | None:
    """The best fixed-collocated plan by simulation (None when no collocated group is allowed)."""
    return _best(workflow, cluster, costs, collocated_points(tables), "collocated")


def fixed_disaggregated(
    workflow: Workflow, cluster: Cluster, costs: CostModel, tables: CostTables
) -> Evaluation | None:
    """The best fixed-disaggregated plan by simulation (None when the components cannot each get devices)."""
    return _best(workflow, cluster, costs, disaggregated_points(tables), "disaggregated")


def closed_form(
    workflow: Workflow, cluster: Cluster, costs: CostModel, tables: CostTables
) -> Evaluation | None:
    """The closed-form recursive baseline's plan, simulated (None when it finds nothing that fits)."""
    point = closed_form_point(tables)
    return None if point is None else _best(workflow, cluster, costs, [(point, math.nan)], "closed-form")
