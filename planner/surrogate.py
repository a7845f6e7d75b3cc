"""The planner's surrogate: a closed-form estimate of a plan's iteration time and memory, from cost tables.

The CP-SAT model (:mod:`planner.cpsat`) encodes exactly :func:`estimate` in integer ticks; the simulator, not the
surrogate, has the last word (:mod:`planner.search`). For a point with groups ``g`` on ``d_g`` devices, component
micro-batch counts ``m_c`` and offload set ``O``:

* ``busy_c``, ``first_c``: the component's compute seconds over the whole batch and for its first micro-batch
  (for the loop's env and policy: all steps of all stages, and one step of one stage);
* group time ``S_g = sum(busy_c + switch_c [c in O])`` (switch = onload + offload of the state);
* group fill ``f_g``: time to the group's first output micro-batch: ``sum(first_c)`` when the group is
  interleaved; when a component of the group or of an earlier group offloads, the group is *phased*: the
  lowering runs a switched component's ops together once its whole input is there, and everything downstream
  of it inherits that (its ops need the whole batch too), so the group's components before its last run whole:
  ``S_g - busy_last - switch_last + first_last``; groups that hold the loop emit at its end: ``S_g`` minus the
  loop components' busy time when the loop is cut;
* a *phase* is a maximal pipelined run of components in topological order: it ends before a component with a
  barrier input placed on another group than the component before it. Within a phase, ``S_g`` and ``f_g`` count
  the phase's components on group ``g`` (a light component that joins a distant group adds its work there); the
  phase takes ``max_g(S_g + sum_{h != g} f_h)`` (the flow-shop bound: the bottleneck group's whole batch plus
  the others' fill; for ``m`` equal stages of ``t`` it is RLinf's warm-up + max stage x (m - 1)), at least
  the whole work of a *chain* (a run of components that leaves a group and comes back to it, e.g. a reward on
  the actor's devices with inference elsewhere: that group's device order sends every micro-batch round the
  chain before the next enters it) plus the others' first micro-batches, and at least ``loop cycle + sum(f_h)``, where the loop cycle is ``num_steps`` x (one act + one env step + the transfers)
  when env and policy sit in different groups;
* with a staleness bound (``staleness`` 1 or 2) the rollout side's phases and the training side's (each taken as if the
  other were absent) run at the same time: ``Z = max(P, T) + weight syncs``, or ``P + T + weight syncs`` when a
  group holds components of both sides (they time-share its devices); at staleness 2 a rollout whose trace
  measured continuous generation (``generate_continuous``) is priced so, its groups completing at an even rate;
* ``Z = sum(phases) + weight syncs`` (local bandwidth within a group, the cluster's link otherwise, the host link
  between a device group and a core group).

A group on the core pool (CPU cores beside GPUs) reads its members' profiles measured there and is held to a
core's memory; moving the loop's hand-offs between a device group and a core group costs the host link.

Profiles and movement costs come from :mod:`planner.tables`.

Memory per device of group ``g``: ``sum(state_c, c not in O) + max_c(state_c [c in O] + activation_c)``; when
the loop's env and policy share a group and both offload, their states are onloaded together.
"""

from __future__ import annotations

import itertools

import attrs

from planner.space import Group, PlanPoint
from planner.tables import CostTables
from rlinf.core.workflow import Workflow


@attrs.frozen
class Estimate:
    """The surrogate's view of one point."""

    iteration_s: float
    peak_bytes: tuple[int, ...]
    """Per group, the memory one of its devices needs at peak."""
    capacity_bytes: tuple[int, ...] = ()
    """Per group, the memory one device of its pool has."""

    def fits(self) -> bool:
        """Whether every group fits in a device of its pool."""
        return all(
            peak <= capacity for peak, capacity in zip(self.peak_bytes, self.capacity_bytes, strict=True)
        )


def cut_kind(workflow: Workflow, before: str, after: str) -> str:
    """How consecutive groups meet: ``loop`` (the cut splits env and policy), ``stream`` (the next group's first
    component takes only stream inputs, or none) or ``barrier``."""
    loop = workflow.loop
    if loop is not None and {before, after} == {loop.env, loop.policy}:
        return "loop"
    incoming = workflow.incoming(after)
    return "barrier" if any(e.kind == "barrier" for e in incoming) else "stream"


def group_peak_bytes(
    tables: CostTables,
    group: tuple[str, ...],
    size: int,
    counts: dict[str, int],
    offload: frozenset[str],
    pool: str = "device",
) -> int:
    """Memory one device of a group needs at peak: resident states, then the largest onloaded state plus
    activations (both loop components' states when they share the group and both offload)."""
    key = ("peak", group, size, tuple(counts[n] for n in group), offload & frozenset(group), pool)
    if key not in tables._memo:
        tables._memo[key] = _group_peak_bytes(tables, group, size, counts, offload, pool)
    return tables._memo[key]


def _group_peak_bytes(
    tables: CostTables,
    group: tuple[str, ...],
    size: int,
    counts: dict[str, int],
    offload: frozenset[str],
    pool: str,
) -> int:
    loop = tables.space.workflow.loop
    activation = {n: tables.profile(n, size, counts[n], pool).activation_bytes for n in group}
    resident = sum(tables.state_bytes[n] for n in group if n not in offload)
    extra = [tables.state_bytes[n] * (n in offload) + activation[n] for n in group]
    in_loop = [n for n in group if loop is not None and n in (loop.env, loop.policy)]
    if len(in_loop) == 2 and all(n in offload for n in in_loop):
        extra.append(sum(tables.state_bytes[n] for n in in_loop) + max(activation[n] for n in in_loop))
    return resident + max(extra)


@attrs.frozen
class Phase:
    """A maximal pipelined run of components (see the module docstring)."""

    members: tuple[tuple[int, Group], ...]
    """Each group's index and its components in the phase."""
    chains: tuple[Group, ...]
    """Runs of the phase's components that start and end on one group with another group's component between:
    the group's device order makes each micro-batch go round the whole run before the next starts there."""
    loop_cut: bool
    """Whether the phase holds the loop's env and policy on different groups (the loop cycle bounds it)."""

    @property
    def names(self) -> tuple[str, ...]:
        """The phase's components."""
        return tuple(n for _, members in self.members for n in members)


def phases_of(workflow: Workflow, order: tuple[str, ...], groups: tuple[Group, ...]) -> tuple[Phase, ...]:
    """The phases of a partition: components in topological order, cut before a component with a barrier input
    on another group than the component before it."""
    group_of = {n: i for i, group in enumerate(groups) for n in group}
    runs: list[list[str]] = [[order[0]]]
    for before, after in itertools.pairwise(order):
        if group_of[before] != group_of[after] and cut_kind(workflow, before, after) == "barrier":
            runs.append([])
        runs[-1].append(after)
    out = []
    for run in runs:
        members: dict[int, list[str]] = {}
        for name in run:
            members.setdefault(group_of[name], []).append(name)
        chains = []
        for names in members.values():
            first, last = run.index(names[0]), run.index(names[-1])
            if last - first + 1 > len(names):
                chains.append(tuple(run[first : last + 1]))
        loop = workflow.loop
        loop_cut = (
            loop is not None
            and loop.env in run
            and loop.policy in run
            and group_of[loop.env] != group_of[loop.policy]
        )
        out.append(
            Phase(
                members=tuple((g, tuple(names)) for g, names in sorted(members.items())),
                chains=tuple(chains),
                loop_cut=loop_cut,
            )
        )
    return tuple(out)


def phases(tables: CostTables, groups: tuple[Group, ...]) -> tuple[Phase, ...]:
    """The phases of a partition (memoized in ``tables``, see :func:`phases_of`)."""
    key = ("phases", groups)
    if key not in tables._memo:
        tables._memo[key] = phases_of(tables.space.workflow, tables.space.order, groups)
    return tables._memo[key]


def estimate(tables: CostTables, point: PlanPoint) -> Estimate:
    """The surrogate iteration time and per-group peak memory of ``point`` (see the module docstring)."""
    workflow = tables.space.workflow
    counts = tables.counts(point.granularity)
    group_of = {n: i for i, group in enumerate(point.groups) for n in group}
    pool_of = {n: point.pools[i] for n, i in group_of.items()}
    if point.staleness:
        producer, trainer = staleness_sides(tables, point.groups, point.buffer_before)
        produce_s = _phases_seconds(tables, point, producer, counts, group_of, pool_of)
        train_s = _phases_seconds(tables, point, trainer, counts, group_of, pool_of)
        shared = sides_share_devices(workflow, point.groups, point.buffer_before)
        total_s = produce_s + train_s if shared else max(produce_s, train_s)
    else:
        total_s = _phases_seconds(tables, point, phases(tables, point.groups), counts, group_of, pool_of)
    for sync_s in sync_terms(tables, group_of, pool_of):
        total_s += sync_s
    peaks = tuple(
        group_peak_bytes(tables, group, size, counts, point.offload, pool)
        for group, size, pool in zip(point.groups, point.sizes, point.pools, strict=True)
    )
    capacities = tuple(tables.capacity(pool) for pool in point.pools)
    return Estimate(iteration_s=total_s, peak_bytes=peaks, capacity_bytes=capacities)


def staleness_sides(
    tables: CostTables, groups: tuple[Group, ...], behind_buffer: tuple[str, ...] = ()
) -> tuple[tuple[Phase, ...], tuple[Phase, ...]]:
    """The phases of the rollout side and of the training side of a partition, each as if alone (memoized): with
    a staleness bound they run at the same time, the training side (the trainers and ``behind_buffer``) on
    buffered samples."""
    key = ("sides", groups, behind_buffer)
    if key not in tables._memo:
        workflow = tables.space.workflow
        trainers = set(workflow.training_side(behind_buffer))
        out = []
        for keep in (lambda n: n not in trainers, lambda n: n in trainers):
            order = tuple(n for n in tables.space.order if keep(n))
            kept = tuple(tuple(n for n in g if keep(n)) for g in groups)  # group indices stay
            out.append(phases_of(workflow, order, kept) if order else ())
        tables._memo[key] = (out[0], out[1])
    return tables._memo[key]


def sides_share_devices(
    workflow: Workflow, groups: tuple[Group, ...], behind_buffer: tuple[str, ...] = ()
) -> bool:
    """Whether a group holds components of both sides (they then time-share its devices)."""
    trainers = set(workflow.training_side(behind_buffer))
    return any(not trainers.isdisjoint(g) and not trainers.issuperset(g) for g in groups)


def _phases_seconds(
    tables: CostTables,
    point: PlanPoint,
    of: tuple[Phase, ...],
    counts: dict[str, int],
    group_of: dict[str, int],
    pool_of: dict[str, str],
) -> float:
    """The seconds of ``of`` (phases of the point's partition, or of one side of it) run one after the other."""
    loop = tables.space.workflow.loop
    position = tables.position
    first_switch = min((position[n] for n in point.offload), default=len(position))
    total_s = 0.0
    for phase in of:
        busy, fill = [], []
        for g, members in phase.members:
            key = (
                "group",
                members,
                point.sizes[g],
                tuple(counts[n] for n in members),
                point.offload.intersection(members),
                first_switch <= position[members[-1]],
                point.pools[g],
                point.staleness >= 2,
            )
            if key not in tables._memo:
                tables._memo[key] = _group_time(tables, *key[1:])
            total, group_fill = tables._memo[key]
            busy.append(total)
            fill.append(group_fill)
        fills = sum(fill)
        seconds = max(b + fills - f for b, f in zip(busy, fill, strict=True))
        if phase.chains or phase.loop_cut:
            profiles = {
                n: tables.profile(n, point.sizes[group_of[n]], counts[n], pool_of[n], point.staleness >= 2)
                for n in phase.names
            }
            for chain in phase.chains:
                around = sum(
                    profiles[n].busy_s + (tables.switch_s[n] if n in point.offload else 0.0) for n in chain
                )
                seconds = max(
                    seconds, around + sum(profiles[n].first_s for n in phase.names if n not in chain)
                )
            if loop is not None and phase.loop_cut:
                across = pool_of[loop.env] != pool_of[loop.policy]
                moved = (tables.loop_host_transfer_s if across else tables.loop_transfer_s)[counts[loop.env]]
                cycle = loop.num_steps * (profiles[loop.env].first_s + profiles[loop.policy].first_s + moved)
                seconds = max(seconds, cycle + fills)
        total_s += seconds
    return total_s


def sync_terms(tables: CostTables, group_of: dict[str, int], pool_of: dict[str, str]) -> list[float]:
    """Seconds of each weight sync: local within a group, over the host link between pools, else across."""
    terms = []
    for src, dst, local_s, cross_s, host_s in tables.sync_s:
        if group_of[src] == group_of[dst]:
            terms.append(local_s)
        else:
            terms.append(host_s if pool_of[src] != pool_of[dst] else cross_s)
    return terms


def _group_time(
    tables: CostTables,
    members: Group,
    size: int,
    counts: tuple[int, ...],
    offload: frozenset[str],
    phased: bool,
    pool: str = "device",
    continuous: bool = False,
) -> tuple[float, float]:
    """Busy seconds and fill of a group's members in one phase (see the module docstring)."""
    loop = tables.space.workflow.loop
    loop_names = (loop.env, loop.policy) if loop is not None else ()
    profiles = {
        n: tables.profile(n, size, count, pool, continuous) for n, count in zip(members, counts, strict=True)
    }
    switch = {n: tables.switch_s[n] if n in offload else 0.0 for n in members}
    total = sum(profiles[n].busy_s + switch[n] for n in members)
    in_loop = [n for n in members if n in loop_names]
    if len(in_loop) == 2:
        return total, total
    if in_loop:
        return total, total - profiles[in_loop[0]].busy_s - switch[in_loop[0]]
    if phased:  # this or an earlier component offloads
        last = members[-1]
        return total, total - profiles[last].busy_s - switch[last] + profiles[last].first_s
    return total, sum(profiles[n].first_s for n in members)
