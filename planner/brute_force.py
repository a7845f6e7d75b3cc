"""Brute force: the best point of a whole plan space by simulation, the reference the planner is measured against.

Points whose granularities give every component the same micro-batch counts lower to the same program, so each
distinct program (partition, device counts, micro-batch counts, offload set) is judged once. With ``prune``
(the default) programs are simulated in the order of a lower bound on their simulated time and the search stops
once the bound reaches the best time found, which is exact: a device runs its ops one at a time, and the first
device of each group runs every compute op of every member of the group (a compute op spans all of its
component's devices and lasts as long as its busiest replica) plus the onload and offload of each member that
offloads, so no program finishes before

    ``max over groups g of sum over members c of (busy_c + switch_c [c offloads])``

with ``busy_c`` and ``switch_c`` the cost tables' profile and switch seconds (:mod:`planner.tables`). Every
program simulated checks that bound (an assertion), and ``tests/test_planner_optimality.py`` checks that pruned
and unpruned brute force agree and that the bound never exceeds the busiest device's op seconds in the lowered
program.
"""

from __future__ import annotations

import functools
import itertools

import attrs
import numpy as np

from planner.judge import Evaluation, judge, quiet_copy
from planner.space import Group, PlanPoint, PlanSpace, micro_batch_counts, subsets
from planner.tables import CostTables, build_tables
from rlinf.cluster import Cluster
from rlinf.costs import CostModel
from rlinf.workflow import Workflow

RELATIVE_TOLERANCE = 1e-9
"""Rounding allowed between the bound and a simulated time before the bound counts as broken."""


@attrs.frozen(kw_only=True)
class BruteForceResult:
    """The best point of the whole space by simulation."""

    best: Evaluation
    num_points: int
    """Points in the space (:meth:`PlanSpace.count`)."""
    num_programs: int
    """Distinct programs among them (edge granularities that give the same micro-batch counts share one)."""
    num_simulated: int
    """Programs lowered and simulated: all of them without pruning, those whose bound was below the best time
    found with it."""


@attrs.frozen
class _Block:
    """Programs of one partition, offload set and tuple of device counts: one per micro-batch-count vector."""

    groups: tuple[Group, ...]
    sizes: tuple[int, ...]
    offload: frozenset[str]


@attrs.frozen(kw_only=True)
class Programs:
    """Every distinct program of a space, each with its lower bound: program ``i`` is block
    ``i // len(granularities)`` with granularity ``i % len(granularities)``."""

    blocks: tuple[_Block, ...]
    granularities: tuple[tuple[tuple[str, int], ...], ...]
    """The first granularity (in the space's order) of each distinct vector of micro-batch counts."""
    bounds_s: np.ndarray
    """Per program, seconds no simulation of it can beat (see the module docstring)."""

    def point(self, index: int) -> PlanPoint:
        """Program ``index`` as a point of the space."""
        block = self.blocks[index // len(self.granularities)]
        granularity = self.granularities[index % len(self.granularities)]
        return PlanPoint(
            groups=block.groups, sizes=block.sizes, granularity=granularity, offload=block.offload
        )


def brute_force(
    workflow: Workflow, cluster: Cluster, costs: CostModel, space: PlanSpace, *, prune: bool = True
) -> BruteForceResult:
    """Simulate the programs of ``space`` (every one without ``prune``; see the module docstring); the fastest
    that fits wins, ties going to the first in the order of the bound, then of the space's enumeration."""
    quiet = quiet_copy(costs)
    programs = distinct_programs(build_tables(space, cluster, quiet))
    bounds = programs.bounds_s
    best: Evaluation | None = None
    num_simulated = 0
    for index in np.argsort(bounds, kind="stable") if prune else range(len(bounds)):
        bound = float(bounds[index])
        if prune and best is not None and best.fits and bound >= best.iteration_s:
            break
        point = programs.point(int(index))
        evaluation = judge(workflow, cluster, quiet, point.to_plan(), "brute-force")
        num_simulated += 1
        assert not evaluation.fits or evaluation.iteration_s >= bound * (1 - RELATIVE_TOLERANCE), (
            f"simulated {evaluation.iteration_s} s is below the bound {bound} s for {point}"
        )
        if best is None or (evaluation.fits, -evaluation.iteration_s) > (best.fits, -best.iteration_s):
            best = evaluation
    assert best is not None, "the space holds at least the collocated point"
    return BruteForceResult(
        best=best, num_points=space.count(), num_programs=len(bounds), num_simulated=num_simulated
    )


def distinct_programs(tables: CostTables) -> Programs:
    """Every distinct program of the tables' space with its bound."""
    space = tables.space
    found: dict[tuple[int, ...], tuple[tuple[str, int], ...]] = {}
    for granularity in space.granularity_choices():
        per_component = micro_batch_counts(space.workflow, dict(granularity))
        found.setdefault(tuple(per_component[n] for n in space.order), granularity)
    counts = np.array(list(found), dtype=int).reshape(len(found), len(space.order))
    position = {name: i for i, name in enumerate(space.order)}

    @functools.cache
    def group_seconds(group: Group, size: int, offload: frozenset[str]) -> np.ndarray:
        """Busy plus switch seconds of a group's first device under every count vector."""
        total = np.zeros(len(counts))
        for name in group:
            column = counts[:, position[name]].tolist()
            busy = {c: tables.profile(name, size, c).busy_s for c in set(column)}
            total += np.array([busy[c] for c in column])
            total += tables.switch_s[name] if name in offload else 0.0
        return total

    blocks: list[_Block] = []
    rows: list[np.ndarray] = []
    for groups in space.partitions:
        movable = tuple(n for g in groups for n in space.offloadable(g))
        for offload in subsets(movable):
            for sizes in itertools.product(*(space.sizes(g) for g in groups)):
                if sum(sizes) > space.num_devices:
                    continue
                blocks.append(_Block(groups=groups, sizes=sizes, offload=offload))
                seconds = [
                    group_seconds(g, d, offload & frozenset(g)) for g, d in zip(groups, sizes, strict=True)
                ]
                rows.append(np.max(seconds, axis=0))
    return Programs(
        blocks=tuple(blocks),
        granularities=tuple(found.values()),
        bounds_s=np.concatenate(rows) if rows else np.zeros(0),
    )
