"""Brute force: the best point of a whole plan space by simulation, the reference the planner is measured against.

The space is :mod:`planner.space`'s points and, for a workflow with an env <-> policy loop, each point's
*spread-loop* twin: the loop's env and policy on every device the point uses, the other components on their own
blocks (:func:`planner.spread.spread_placements`; a layout the contiguous groups cannot express, which
:func:`planner.search` reaches by spreading the plans it judges), at every stage count. Points whose
granularities give every component the same micro-batch counts lower to the same program, so each distinct
program (partition, device counts, micro-batch counts, offload set, spread or not; twins of several points that
spread to one layout count once) is judged once.

With ``prune`` (the default) programs are simulated in the order of a lower bound on their simulated time and the
search stops once the bound reaches the best time found, which is exact: a device runs its ops one at a time, and
the first device of each group runs every compute op of every member of the group (a compute op spans all of its
component's devices and lasts as long as its busiest replica) plus the onload and offload of each member that
offloads, so no program finishes before

    ``max over groups g of sum over members c of (busy_c + switch_c [c offloads])``

with ``busy_c`` and ``switch_c`` the cost tables' profile and switch seconds (:mod:`planner.tables`), except for
the loop's env and policy: their steps are priced as the lowering prices them (as steps whose env and policy share
devices when both are in one group; a profile may price those lower than the others), pinned or not as the
lowering decides from both components' device counts. A spread-loop program's groups hold only their other
members, and each of their devices also steps its share of the loop (``stages / devices`` whole stages when
pinned, else its part of every stage's ops), which is added to each group's sum. Every program simulated checks
that bound (an assertion), and ``tests/test_planner_optimality.py`` checks that pruned and unpruned brute force
agree and that the bound never exceeds the busiest device's op seconds in the lowered program.
"""

from __future__ import annotations

import functools
import itertools
import warnings

import attrs
import numpy as np

from planner.judge import Evaluation, judge, quiet_copy
from planner.space import Group, PlanPoint, PlanSpace, micro_batch_counts, subsets
from planner.spread import spread_placements
from planner.tables import CostTables, build_tables, loop_busy
from rlinf.core.cluster import Cluster
from rlinf.core.costs import CostModel
from rlinf.core.errors import ExtrapolationWarning
from rlinf.core.plan import Plan
from rlinf.core.workflow import Workflow

RELATIVE_TOLERANCE = 1e-9
"""Rounding allowed between the bound and a simulated time before the bound counts as broken."""


@attrs.frozen(kw_only=True)
class BruteForceResult:
    """The best point of the whole space by simulation."""

    best: Evaluation
    num_points: int
    """Points in the space (:meth:`PlanSpace.count`), spread-loop twins not counted."""
    num_programs: int
    """Distinct programs among them (edge granularities that give the same micro-batch counts share one), with
    the spread-loop programs."""
    num_spread_programs: int = 0
    """Of :attr:`num_programs`, those with the loop spread over every device (none without a loop)."""
    num_simulated: int
    """Programs lowered and simulated: all of them without pruning, those whose bound was below the best time
    found with it."""


@attrs.frozen
class _Block:
    """Programs of one partition, offload set and tuple of device counts: one per micro-batch-count vector."""

    groups: tuple[Group, ...]
    sizes: tuple[int, ...]
    offload: frozenset[str]
    pools: tuple[str, ...] = ()
    staleness: int = 0
    spread: tuple | None = None
    """The placements with the loop spread over every device (:func:`spread_placements`), for a spread-loop
    block; ``None`` for a point of the space."""


@attrs.frozen(kw_only=True)
class Programs:
    """Every distinct program of a space, each with its lower bound: program ``i`` is block
    ``i // len(granularities)`` with granularity ``i % len(granularities)``."""

    blocks: tuple[_Block, ...]
    granularities: tuple[tuple[tuple[str, int], ...], ...]
    """The first granularity (in the space's order) of each distinct vector of micro-batch counts."""
    bounds_s: np.ndarray
    """Per program, seconds no simulation of it can beat (see the module docstring)."""

    num_spread: int = 0
    """Programs of spread-loop blocks (the last ones)."""

    def point(self, index: int) -> PlanPoint:
        """Program ``index`` as a point of the space; for a spread-loop program, the point it spreads."""
        block = self.blocks[index // len(self.granularities)]
        granularity = self.granularities[index % len(self.granularities)]
        return PlanPoint(
            groups=block.groups,
            sizes=block.sizes,
            granularity=granularity,
            offload=block.offload,
            pools=block.pools,
            staleness=block.staleness,
        )

    def plan(self, index: int) -> Plan:
        """Program ``index``'s plan."""
        plan = self.point(index).to_plan()
        spread = self.blocks[index // len(self.granularities)].spread
        return plan if spread is None else attrs.evolve(plan, placements=spread)


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
        plan = programs.plan(int(index))
        evaluation = judge(workflow, cluster, quiet, plan, "brute-force")
        num_simulated += 1
        assert not evaluation.fits or evaluation.iteration_s >= bound * (1 - RELATIVE_TOLERANCE), (
            f"simulated {evaluation.iteration_s} s is below the bound {bound} s for {plan.describe()}"
        )
        if best is None or (evaluation.fits, -evaluation.iteration_s) > (best.fits, -best.iteration_s):
            best = evaluation
    assert best is not None, "the space holds at least the collocated point"
    return BruteForceResult(
        best=best,
        num_points=space.count(),
        num_programs=len(bounds),
        num_spread_programs=programs.num_spread,
        num_simulated=num_simulated,
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

    loop = space.workflow.loop
    pair: tuple[str, ...] = (loop.env, loop.policy) if loop is not None else ()
    stages = counts[:, position[loop.env]] if loop is not None else np.zeros(0, dtype=int)

    @functools.cache
    def group_seconds(
        group: Group, size: int, offload: frozenset[str], pool: str = "device", continuous: bool = False
    ) -> np.ndarray:
        """Busy seconds of a group's first device under every count vector, from its members outside the loop,
        plus the switch seconds of its members that offload (``continuous``: a staleness-2 plan's generation)."""
        total = np.zeros(len(counts))
        for name in group:
            if name not in pair:
                column = counts[:, position[name]].tolist()
                busy = {c: tables.profile(name, size, c, pool, continuous).busy_s for c in set(column)}
                total += np.array([busy[c] for c in column])
            total += tables.switch_s[name] if name in offload else 0.0
        return total

    @functools.cache
    def loop_seconds(
        name: str, env_devices: int, policy_devices: int, shared: bool, pool: str = "device"
    ) -> np.ndarray:
        """Loop component ``name``'s busy seconds on each of its devices under every count vector."""
        return _loop_seconds(tables, name, env_devices, policy_devices, shared, stages, pool)

    def block_seconds(
        groups: tuple[Group, ...],
        sizes: tuple[int, ...],
        offload: frozenset[str],
        pools: tuple[str, ...],
        continuous: bool = False,
    ) -> np.ndarray:
        devices = dict(zip(groups, sizes, strict=True))
        of = {name: devices[g] for g in groups for name in g}
        seconds = []
        for group, size, pool in zip(groups, sizes, pools, strict=True):
            total = group_seconds(group, size, offload & frozenset(group), pool, continuous)
            for name in pair:
                if name in group:
                    shared = all(n in group for n in pair)  # the lowering's Op.shared: a local hand-off
                    total = total + loop_seconds(name, of[pair[0]], of[pair[1]], shared, pool)
            seconds.append(total)
        return np.max(seconds, axis=0)

    blocks: list[_Block] = []
    rows: list[np.ndarray] = []
    for groups, pools in zip(space.partitions, space.pools, strict=True):
        movable = tuple(n for g in groups for n in space.offloadable(g))
        for offload in subsets(movable):
            options = (space.sizes(g, p) for g, p in zip(groups, pools, strict=True))
            for sizes in itertools.product(*options):
                if not space.fits_budgets(sizes, pools):
                    continue
                for staleness in space.staleness_ladder:  # each device runs the same ops either way
                    blocks.append(
                        _Block(groups=groups, sizes=sizes, offload=offload, pools=pools, staleness=staleness)
                    )
                    rows.append(block_seconds(groups, sizes, offload, pools, staleness >= 2))
    num_regular = len(blocks)
    seen: set[tuple] = set()
    for block in blocks[:num_regular] if loop is not None else ():
        if "cpu" in block.pools:
            continue  # the loop spreads over the devices of a device-only plan
        plan = PlanPoint(
            groups=block.groups,
            sizes=block.sizes,
            granularity=(),
            offload=block.offload,
            staleness=block.staleness,
        ).to_plan()
        spread = spread_placements(space.workflow, plan)
        devices = sum(block.sizes)
        if spread is None or all(len(p.devices) == devices for p in spread):
            continue  # no loop to spread, or a collocated point already in the space
        if (spread, block.offload, block.staleness) in seen:
            continue
        seen.add((spread, block.offload, block.staleness))
        blocks.append(attrs.evolve(block, spread=spread))
        # Every group's first device runs its other members' ops and, the loop being on every device, its
        # share of the loop's steps (a switch of a loop member is left out: the bound stays a bound).
        others = [tuple(n for n in g if n not in pair) for g in block.groups]
        rest = block.offload - frozenset(pair)
        seconds = [group_seconds(g, d, rest & frozenset(g)) for g, d in zip(others, block.sizes, strict=True)]
        loop_part = sum(loop_seconds(name, devices, devices, True) for name in pair)
        rows.append(np.max(seconds, axis=0) + loop_part)
    return Programs(
        blocks=tuple(blocks),
        granularities=tuple(found.values()),
        bounds_s=np.concatenate(rows) if rows else np.zeros(0),
        num_spread=(len(blocks) - num_regular) * len(found),
    )


def _loop_seconds(
    tables: CostTables,
    name: str,
    env_devices: int,
    policy_devices: int,
    shared: bool,
    stages: np.ndarray,
    pool: str = "device",
) -> np.ndarray:
    """Per stage count in ``stages``: the seconds loop component ``name`` keeps each of its devices busy
    (:func:`planner.tables.loop_busy`)."""
    workflow = tables.space.workflow
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        return np.array(
            [
                loop_busy(workflow, tables.costs, name, env_devices, policy_devices, count, shared, pool)[0]
                for count in stages.tolist()
            ]
        )
