"""Local refinement of CP-SAT's candidates over every device count of the space.

On a large cluster a group has hundreds of device counts at which its cost changes; CP-SAT chooses among a short
list of them (:meth:`planner.tables.CostTables.search_sizes`) to stay fast. Each candidate, and the best point
CP-SAT found for each partition, is then improved by steepest descent under the surrogate, taking the best move
while one helps (fitting first, then surrogate seconds): a group up by one or a few device counts, into spare
devices or taken from another group (which keeps the largest count that still fits), a granularity to another
value of its ladder, or one offload flag flipped. The descent keeps the point's partition: CP-SAT's choice of
what to collocate is what it refines.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from planner.cpsat import ScoredPoint
from planner.space import PlanPoint, canonical_granularity
from planner.surrogate import estimate
from planner.tables import CostTables

JUMPS = (1, 4)
"""How many device counts up a group may move at once (the next one, or a few further)."""
MAX_ROUNDS = 64
"""Moves taken at most per candidate (each round takes the best improving move)."""


def refined(
    tables: CostTables, points: list[ScoredPoint], starts: list[ScoredPoint], *, k: int
) -> list[ScoredPoint]:
    """``points`` and ``starts`` (each partition's best) refined (:func:`refine`), then ``points`` themselves,
    the ``k`` best by the surrogate first (ties keep that order); each point once."""
    scored: dict[PlanPoint, float] = {}
    descent = _Descent(tables)
    for item in dict.fromkeys(points + starts):
        point, seconds = descent.run(item.point)
        counts = tables.counts(point.granularity)
        plain = _point(point, granularity=canonical_granularity(tables.space.workflow, counts))
        scored.setdefault(plain, seconds)  # the same program, its granularity written as CP-SAT writes it
    for item in points:
        scored.setdefault(item.point, item.surrogate_s)
    ranked = sorted(scored.items(), key=lambda pair: pair[1])
    return [ScoredPoint(point=point, surrogate_s=seconds) for point, seconds in ranked[:k]]


def refine(tables: CostTables, point: PlanPoint) -> tuple[PlanPoint, float]:
    """The best point steepest descent reaches from ``point`` and its surrogate seconds."""
    return _Descent(tables).run(point)


class _Descent:
    """Steepest descents that share what they learnt: every point's score, and where a descent that stood on a
    point ended (the descent is deterministic, so another reaching that point would end there too)."""

    def __init__(self, tables: CostTables) -> None:
        self.tables = tables
        self.scores: dict[PlanPoint, tuple[bool, float]] = {}
        self.ends: dict[PlanPoint, PlanPoint] = {}

    def score(self, point: PlanPoint) -> tuple[bool, float]:
        if point not in self.scores:
            found = estimate(self.tables, point)
            self.scores[point] = (not found.fits(), found.iteration_s)
        return self.scores[point]

    def run(self, point: PlanPoint) -> tuple[PlanPoint, float]:
        path = [point]
        for _ in range(MAX_ROUNDS):
            if point in self.ends:
                point = self.ends[point]
                break
            step = min(
                ((self.score(p), p) for p in _moves(self.tables, point)), key=lambda x: x[0], default=None
            )
            if step is None or step[0] >= self.score(point):
                break
            point = step[1]
            path.append(point)
        for visited in path:
            self.ends[visited] = point
        return point, self.score(point)[1]


def _moves(tables: CostTables, point: PlanPoint) -> Iterator[PlanPoint]:
    space = tables.space
    sizes, pools = point.sizes, point.pools
    options = [tables.group_sizes[(g, pool)] for g, pool in zip(point.groups, pools, strict=True)]
    spare = {
        pool: space.budget(pool) - sum(d for d, p in zip(sizes, pools, strict=True) if p == pool)
        for pool in dict.fromkeys(pools)
    }
    for g, (size, allowed) in enumerate(zip(sizes, options, strict=True)):
        position = bisect.bisect_right(allowed, size)
        left = spare[pools[g]]
        for jump in JUMPS:
            if position + jump - 1 >= len(allowed):
                break
            larger = allowed[position + jump - 1]
            if larger - size <= left:
                yield _point(point, sizes=_with(sizes, g, larger))
            for h, (other, others) in enumerate(zip(sizes, options, strict=True)):
                if pools[h] != pools[g]:
                    continue  # devices move between groups of one pool only
                room = left - (larger - size) + other  # what group h may keep
                below = bisect.bisect_right(others, min(room, other - 1)) - 1
                if h != g and below >= 0:
                    yield _point(point, sizes=_with(_with(sizes, g, larger), h, others[below]))
    granularity = dict(point.granularity)
    for key, value in point.granularity:
        for other in space.loop_ladder if key == "loop" else space.ladder:
            if other != value:
                yield _point(point, granularity=tuple(sorted({**granularity, key: other}.items())))
    for group in point.groups:
        for name in space.offloadable(group):
            yield _point(point, offload=point.offload ^ {name})
    for staleness, cut in space.staleness_modes:
        if (staleness, cut) != (point.staleness, point.buffer_before):
            yield _point(point, staleness=staleness, buffer_before=cut)


def _point(point: PlanPoint, **changes: object) -> PlanPoint:
    """``attrs.evolve`` without its generic overhead (a descent builds thousands of points)."""
    fields = {
        "groups": point.groups,
        "sizes": point.sizes,
        "granularity": point.granularity,
        "offload": point.offload,
        "pools": point.pools,
        "staleness": point.staleness,
        "buffer_before": point.buffer_before,
    }
    return PlanPoint(**{**fields, **changes})  # type: ignore[arg-type]


def _with(sizes: Sequence[int], index: int, value: int) -> tuple[int, ...]:
    return (*sizes[:index], value, *sizes[index + 1 :])
