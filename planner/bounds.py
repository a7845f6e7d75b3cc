"""Every distinct program of a plan space, each with a lower bound on its simulated time: what brute force
(:mod:`planner.brute_force`) simulates, in the order of the bound, and what certifies an optimum it does not reach.

The programs are :mod:`planner.space`'s points and, for a workflow with an env <-> policy loop, each point's
*spread-loop* twin: the loop's env and policy on every device the point uses, the other components on their own
blocks (:func:`planner.spread.spread_placements`; a layout the contiguous groups cannot express, which
:func:`planner.search` reaches by spreading the plans it judges), at every stage count. Points whose
granularities give every component the same micro-batch counts lower to the same program, so each distinct
program (partition, device counts, micro-batch counts, offload set, spread or not; twins of several points that
spread to one layout count once) is counted once.

**The bound.** A device runs its ops one at a time, and the first device of each group runs every compute op of
every member of the group (a compute op spans all of its component's devices and lasts as long as its busiest
replica), the onload and offload of each member that offloads, and each weight sync into or out of the group
(a sync spans its source's and its destination's devices). So no program finishes before the largest, over
groups ``g``, of

    ``body_g + syncs_g``  and  ``body_g - offload_last + tail_last``, and, with ``onloads_g`` left out,
    ``head_g + body_g - onloads_g + syncs_g``  and  ``head_g + body_g - onloads_g - offload_last + tail_last``

with ``body_g = sum over members c of (busy_c + switch_c [c offloads])`` from the cost tables' profiles and the
onload and offload seconds of each state (:mod:`planner.tables`; ``switch_c`` is their sum, priced apart as the
lowering's ops are), ``onloads_g`` the onloads of its members that offload, and ``syncs_g`` the syncs' seconds
over the link the lowering gives them. Without heads and tails that is the busiest device's work. They follow the
dependencies (synchronous plans of a workflow without a loop; elsewhere there is only the busiest device's work):

* ``head_g``, the earliest any op of the group but an onload (which waits for nothing) can start: the least over
  its members of ``head_c = max over edges p -> c of head_p + (first_p`` for a stream edge, ``busy_p`` for a
  barrier one``)``, and over the syncs on its devices of their source's ``head + busy``: a consumer's first
  micro-batch needs a producer's, and the producer's micro-batches run in index order on its devices (their batch
  fractions never decrease with the index);
* ``tail_last``, after the last micro-batch of the group's last member in topological order (``last``): every
  other op of a member on the device comes before it in the device order (its batch fraction is 1, the largest,
  and the other members rank lower), save that member's own offload (``offload_last``), and after it at least
  ``tail_c = max(max over edges c -> k of last_k + tail_k`` (``busy_k`` for a barrier edge)``, the sum of the
  weight syncs out of c)`` must run: the consumers' last micro-batches, and the syncs, which wait for the
  source's last micro-batch and run one after the other on its devices.

Transfers (on links, not devices) are left out, as is every wait the device order adds: the bound stays a bound.
For the loop's env and policy, steps are priced as the lowering prices them (as steps whose env and policy share
devices when both are in one group; a profile may price those lower than the others), pinned or not as the
lowering decides from both components' device counts. A spread-loop program's groups hold only their other
members, and each of their devices also steps its share of the loop (``stages / devices`` whole stages when
pinned, else its part of every stage's ops), which is added to each group's sum. Every program brute force
simulates checks its bound (an assertion), and ``tests/test_planner_optimality.py`` checks that pruned and
unpruned brute force agree and that the bound never exceeds the simulated time of programs sampled from random
small workflows and from the shipped traces' spaces.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable

import attrs
import numpy as np

from planner.space import Group, PlanPoint, subsets
from planner.spread import spread_placements
from planner.tables import CostTables, loop_busy
from rlinf.core.errors import ExtrapolationWarning
from rlinf.core.lowering import micro_batch_counts
from rlinf.core.plan import Plan
from rlinf.core.workflow import WeightSync

NON_LOCAL_LINKS = ("intra_node", "inter_node", "host")


@attrs.frozen
class _Block:
    """Programs of one partition, offload set and tuple of device counts: one per micro-batch-count vector."""

    groups: tuple[Group, ...]
    sizes: tuple[int, ...]
    offload: frozenset[str]
    pools: tuple[str, ...] = ()
    staleness: int = 0
    buffer_before: tuple[str, ...] = ()
    spread: tuple | None = None
    """The placements with the loop spread over every device (:func:`spread_placements`), for a spread-loop
    block; ``None`` for a point of the space."""


@attrs.frozen(kw_only=True)
class Programs:
    """Distinct programs of a space with their lower bounds. Program ``i`` is block ``i // len(granularities)``
    with granularity ``i % len(granularities)``; :attr:`ids` says which programs :attr:`bounds_s` holds."""

    blocks: tuple[_Block, ...]
    granularities: tuple[tuple[tuple[str, int], ...], ...]
    """The first granularity (in the space's order) of each distinct vector of micro-batch counts."""
    bounds_s: np.ndarray
    """Per program held, seconds no simulation of it can beat (see the module docstring)."""
    ids: np.ndarray
    """The program index of each entry of :attr:`bounds_s`, ascending (all programs unless a cutoff dropped
    some: ``arange(num_programs)``)."""
    num_programs: int
    """Distinct programs in the space, those dropped by a cutoff included."""
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
            buffer_before=block.buffer_before,
        )

    def plan(self, index: int) -> Plan:
        """Program ``index``'s plan."""
        plan = self.point(index).to_plan()
        spread = self.blocks[index // len(self.granularities)].spread
        return plan if spread is None else attrs.evolve(plan, placements=spread)


def distinct_programs(tables: CostTables, *, below_s: float = math.inf) -> Programs:
    """Every distinct program of the tables' space with its bound; with ``below_s``, only those whose bound is
    below it are held (the others cannot beat a plan of that time), and no more memory than theirs is kept."""
    space = tables.space
    workflow = space.workflow
    found: dict[tuple[int, ...], tuple[tuple[str, int], ...]] = {}
    for granularity in space.granularity_choices():
        per_component = micro_batch_counts(workflow, dict(granularity))
        found.setdefault(tuple(per_component[n] for n in space.order), granularity)
    counts = np.array(list(found), dtype=int).reshape(len(found), len(space.order))
    position = {name: i for i, name in enumerate(space.order)}

    loop = workflow.loop
    pair: tuple[str, ...] = (loop.env, loop.policy) if loop is not None else ()
    stages = counts[:, position[loop.env]] if loop is not None else np.zeros(0, dtype=int)

    @functools.cache
    def seconds_of(name: str, size: int, pool: str, continuous: bool = False) -> np.ndarray:
        """``name``'s busy, first and last micro-batch seconds on ``size`` devices under every count vector (3
        rows)."""
        column = counts[:, position[name]].tolist()
        profiles = {c: tables.profile(name, size, c, pool, continuous) for c in set(column)}
        return np.array([[p.busy_s, p.first_s, p.last_s] for p in (profiles[c] for c in column)]).T

    @functools.cache
    def group_seconds(
        group: Group, size: int, offload: frozenset[str], pool: str = "device", continuous: bool = False
    ) -> np.ndarray:
        """Busy seconds of a group's first device under every count vector, from its members outside the loop,
        plus the switch seconds of its members that offload (``continuous``: a staleness-2 plan's generation)."""
        total = np.zeros(len(counts))
        for name in group:
            if name not in pair:
                total += seconds_of(name, size, pool, continuous)[0]
            total += _switch_s(tables, name) if name in offload else 0.0
        return total

    @functools.cache
    def loop_seconds(
        name: str, env_devices: int, policy_devices: int, shared: bool, pool: str = "device"
    ) -> np.ndarray:
        """Loop component ``name``'s busy seconds on each of its devices under every count vector."""
        return _loop_seconds(tables, name, env_devices, policy_devices, shared, stages, pool)

    def block_seconds(block: _Block) -> np.ndarray:
        if loop is None and block.staleness == 0:
            bodies = [
                group_seconds(g, d, block.offload & frozenset(g), p)
                for g, d, p in zip(block.groups, block.sizes, block.pools, strict=True)
            ]
            rough = np.max(
                bodies, axis=0
            )  # at most the bound: when no program is held by it, none is by the bound
            if rough.min() >= below_s:
                return rough
            return _chain_bound(tables, block, seconds_of, bodies)
        devices = dict(zip(block.groups, block.sizes, strict=True))
        of = {name: devices[g] for g in block.groups for name in g}
        seconds = []
        for group, size, pool in zip(block.groups, block.sizes, block.pools, strict=True):
            total = group_seconds(group, size, block.offload & frozenset(group), pool, block.staleness >= 2)
            for name in pair:
                if name in group:
                    shared = all(n in group for n in pair)  # the lowering's Op.shared: a local hand-off
                    total = total + loop_seconds(name, of[pair[0]], of[pair[1]], shared, pool)
            seconds.append(total)
        return np.max(seconds, axis=0)

    blocks: list[_Block] = []
    kept_bounds: list[np.ndarray] = []
    kept_ids: list[np.ndarray] = []

    def add(block: _Block, row: np.ndarray) -> None:
        first = len(blocks) * len(found)
        blocks.append(block)
        keep = np.flatnonzero(row < below_s) if below_s < math.inf else np.arange(len(row))
        kept_bounds.append(row[keep])
        kept_ids.append(first + keep)

    for groups, pools in zip(space.partitions, space.pools, strict=True):
        movable = tuple(n for g in groups for n in space.offloadable(g))
        for offload in subsets(movable):
            for sizes in space.fitting_sizes(groups, pools):
                for staleness, cut in space.staleness_modes:  # each device runs the same ops either way
                    block = _Block(
                        groups=groups,
                        sizes=sizes,
                        offload=offload,
                        pools=pools,
                        staleness=staleness,
                        buffer_before=cut,
                    )
                    add(block, block_seconds(block))
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
            buffer_before=block.buffer_before,
        ).to_plan()
        spread = spread_placements(workflow, plan)
        devices = sum(block.sizes)
        if spread is None or all(len(p.devices) == devices for p in spread):
            continue  # no loop to spread, or a collocated point already in the space
        if (spread, block.offload, block.staleness, block.buffer_before) in seen:
            continue
        seen.add((spread, block.offload, block.staleness, block.buffer_before))
        # Every group's first device runs its other members' ops and, the loop being on every device, its
        # share of the loop's steps (a switch of a loop member is left out: the bound stays a bound).
        others = [tuple(n for n in g if n not in pair) for g in block.groups]
        rest = block.offload - frozenset(pair)
        seconds = [group_seconds(g, d, rest & frozenset(g)) for g, d in zip(others, block.sizes, strict=True)]
        loop_part = sum(loop_seconds(name, devices, devices, True) for name in pair)
        add(attrs.evolve(block, spread=spread), np.max(seconds, axis=0) + loop_part)
    return Programs(
        blocks=tuple(blocks),
        granularities=tuple(found.values()),
        bounds_s=np.concatenate(kept_bounds) if kept_bounds else np.zeros(0),
        ids=np.concatenate(kept_ids) if kept_ids else np.zeros(0, dtype=int),
        num_programs=len(blocks) * len(found),
        num_spread=(len(blocks) - num_regular) * len(found),
    )


def _chain_bound(
    tables: CostTables, block: _Block, seconds_of: Callable[..., np.ndarray], bodies: list[np.ndarray]
) -> np.ndarray:
    """The bound of a synchronous block of a workflow without a loop, with heads and tails (module docstring),
    under every count vector, from each group's ``bodies`` (busy and switch seconds)."""
    workflow = tables.space.workflow
    order = tables.space.order
    home = {name: i for i, group in enumerate(block.groups) for name in group}
    busy, first, last = {}, {}, {}
    for name in order:
        busy[name], first[name], last[name] = seconds_of(
            name, block.sizes[home[name]], block.pools[home[name]]
        )
    syncs = [(sync, _sync_s(tables, block, sync)) for sync in workflow.weight_sync]
    head: dict[str, np.ndarray | float] = {}
    for name in order:
        head[name] = functools.reduce(
            np.maximum,
            (head[e.src] + (first if e.kind == "stream" else busy)[e.src] for e in workflow.incoming(name)),
            0.0,
        )
    tail: dict[str, np.ndarray | float] = {}
    for name in reversed(order):
        tail[name] = functools.reduce(
            np.maximum,
            (tail[e.dst] + (last if e.kind == "stream" else busy)[e.dst] for e in workflow.outgoing(name)),
            sum(seconds for sync, seconds in syncs if sync.src == name),
        )
    out: np.ndarray | float = 0.0
    for group, body in zip(block.groups, bodies, strict=True):
        offload = block.offload & frozenset(group)
        touching = [(sync, s) for sync, s in syncs if sync.src in group or sync.dst in group]
        on_device = sum(s for _, s in touching)
        start = functools.reduce(
            np.minimum, [head[n] for n in group] + [head[sync.src] + busy[sync.src] for sync, _ in touching]
        )
        final = group[-1]  # groups list their members in topological order
        offload_s = tables.offload_s[final] if final in offload else 0.0  # after its last micro-batch
        # The onloads may start at once; every other op waits for its head.
        waiting = body - sum(tables.onload_s[n] for n in offload)
        out = functools.reduce(
            np.maximum,
            (
                out,
                np.maximum(body + on_device, body - offload_s + tail[final]),
                start + np.maximum(waiting + on_device, waiting - offload_s + tail[final]),
            ),
        )
    return np.asarray(out)


def _switch_s(tables: CostTables, name: str) -> float:
    """Seconds of ``name``'s onload plus its offload, each priced as the lowering's op is."""
    return tables.onload_s[name] + tables.offload_s[name]


def _sync_s(tables: CostTables, block: _Block, sync: WeightSync) -> float:
    """Seconds of ``sync`` in ``block``, over the link the lowering gives it (``local`` between the same devices;
    the cheapest other link when a core pool makes the lowering's choice harder to follow)."""
    home = {name: i for i, group in enumerate(block.groups) for name in group}
    a, b = home[sync.src], home[sync.dst]
    links: tuple[str, ...] = NON_LOCAL_LINKS
    if a == b:
        links = ("local",)
    elif block.pools[a] == block.pools[b] == "device":
        start = np.cumsum((0,) + block.sizes)
        per_node = tables.costs.cluster.devices_per_node
        nodes = {d // per_node for i in (a, b) for d in (int(start[i]), int(start[i]) + block.sizes[i] - 1)}
        links = ("inter_node",) if len(nodes) > 1 else ("intra_node",)
    return min(tables.sync_seconds(sync.src, sync.dst, sync.num_bytes, link) for link in links)


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
