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
* consecutive groups pipeline when the next group's first component has only stream inputs (or the cut splits
  the loop); a *phase* is a maximal pipelined run taking ``max_g(S_g + sum_{h != g} f_h)`` (the flow-shop
  bound: the bottleneck group's whole batch plus the others' fill; for ``m`` equal stages of ``t`` it is RLinf's
  warm-up + max stage x (m - 1)) and at least ``loop cycle + sum(f_h)``, where the loop cycle is ``num_steps``
  x (one act + one env step + the transfers) when env and policy sit in different groups;
* ``Z = sum(phases) + weight syncs`` (local bandwidth within a group, the cluster's link otherwise).

Memory per device of group ``g``: ``sum(state_c, c not in O) + max_c(state_c [c in O] + activation_c)``; when
the loop's env and policy share a group and both offload, their states are onloaded together.
"""

from __future__ import annotations

import warnings
from typing import Any

import attrs
import numpy as np

from planner.space import PlanPoint, PlanSpace, micro_batch_counts
from rlinf.cluster import Cluster
from rlinf.costs import CostModel
from rlinf.errors import ExtrapolationWarning
from rlinf.lowering import micro_batch_ranges
from rlinf.program import Op
from rlinf.workflow import Workflow

COMPUTE_OP = {
    "env": "env_step",
    "rollout": "generate",
    "reward": "reward",
    "inference": "infer",
    "actor": "train",
    "critic": "train",
}
"""Op name of each role's compute outside the loop (the lowering's names)."""


@attrs.frozen
class Profile:
    """A component's costs at one device count and micro-batch count."""

    busy_s: float
    first_s: float
    activation_bytes: int


@attrs.frozen(kw_only=True)
class CostTables:
    """Profiles of every component at every size and micro-batch count of a space, plus movement costs."""

    space: PlanSpace
    profiles: dict[tuple[str, int, int], Profile]
    """(component, devices, micro-batches) -> profile."""
    switch_s: dict[str, float]
    """Onload + offload seconds of each component's state."""
    state_bytes: dict[str, int]
    """Resident bytes per device of each component."""
    sync_s: tuple[tuple[str, str, float, float], ...]
    """Per weight sync: (src, dst, seconds within one group, seconds across groups)."""
    loop_transfer_s: dict[int, float]
    """Per loop stage count: obs + action transfer seconds of one stage and step across groups."""
    capacity_bytes: int
    _memo: dict[tuple, Any] = attrs.field(factory=dict, eq=False, repr=False, alias="_memo")
    """Answers already computed (micro-batch counts per granularity, group peaks): the same questions recur
    across the thousands of points a search estimates."""

    def profile(self, name: str, devices: int, micro_batches: int) -> Profile:
        """The profile; computed tables cover every size and micro-batch count of the space."""
        return self.profiles[(name, devices, micro_batches)]

    def counts(self, granularity: tuple[tuple[str, int], ...]) -> dict[str, int]:
        """Micro-batches of each component under ``granularity`` (memoized; do not mutate the result)."""
        key = ("counts", granularity)
        if key not in self._memo:
            self._memo[key] = micro_batch_counts(self.space.workflow, dict(granularity))
        return self._memo[key]


def micro_batch_options(space: PlanSpace, name: str) -> tuple[int, ...]:
    """Micro-batch counts a component can have in the space."""
    workflow = space.workflow
    if workflow.loop is not None and name in (workflow.loop.env, workflow.loop.policy):
        return space.loop_ladder
    if any(e.kind == "stream" for e in workflow.incoming(name) + workflow.outgoing(name)):
        return space.ladder
    return (1,)


def sizes_of(space: PlanSpace, name: str) -> tuple[int, ...]:
    """Every device count the component can get in the space."""
    position = space.order.index(name)
    return tuple(
        sorted(
            {
                d
                for (start, end), sizes in zip(space.segments, space.sizes, strict=True)
                if start <= position < end
                for d in sizes
            }
        )
    )


def build_tables(space: PlanSpace, cluster: Cluster, costs: CostModel) -> CostTables:
    """Profile every component at every size and micro-batch count of ``space``.

    Probing sizes far from the trace's makes the cost model extrapolate; those warnings are not shown here (a
    private copy of the model is probed) and appear when the chosen plan is simulated with ``costs``."""
    quiet = attrs.evolve(costs, _warned=set())
    workflow = space.workflow
    profiles = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        for name in space.order:
            for devices in sizes_of(space, name):
                for count in micro_batch_options(space, name):
                    profiles[(name, devices, count)] = _profile(workflow, quiet, name, devices, count)
    state = {c.name: c.state_bytes_per_device() for c in workflow.components}
    switch = {}
    for name, per_device in state.items():
        move = Op(index=0, kind="onload", component=name, name="onload", num_bytes=per_device, link="host")
        switch[name] = 2 * costs.movement_seconds(move)
    cross_link = "inter_node" if space.num_devices > cluster.devices_per_node else "intra_node"
    syncs = []
    for sync in workflow.weight_sync:
        local, cross = (
            costs.movement_seconds(
                Op(
                    index=0,
                    kind="sync_weights",
                    component=sync.src,
                    name="sync_weights",
                    num_bytes=sync.num_bytes,
                    link=link,
                )
            )
            for link in ("local", cross_link)
        )
        syncs.append((sync.src, sync.dst, local, cross))
    loop_transfer = {}
    if workflow.loop is not None:
        loop = workflow.loop
        for stages in space.loop_ladder:
            envs = workflow.batch_size // stages
            loop_transfer[stages] = sum(
                costs.movement_seconds(
                    Op(
                        index=0,
                        kind="transfer",
                        component=loop.env,
                        name="transfer",
                        num_bytes=envs * per_env,
                        link=cross_link,
                    )
                )
                for per_env in (loop.obs_bytes_per_env, loop.action_bytes_per_env)
            )
    return CostTables(
        space=space,
        profiles=profiles,
        switch_s=switch,
        state_bytes=state,
        sync_s=tuple(syncs),
        loop_transfer_s=loop_transfer,
        capacity_bytes=cluster.device.memory_bytes,
    )


def _profile(workflow: Workflow, costs: CostModel, name: str, devices: int, count: int) -> Profile:
    component = workflow.component(name)
    loop = workflow.loop
    placed = tuple(range(devices))
    if loop is not None and name in (loop.env, loop.policy):
        envs = workflow.batch_size // count
        op_name = "env_step" if name == loop.env else "act"
        step_s = costs.compute_seconds(name, op_name, devices, envs)
        op = Op(index=0, kind="compute", component=name, name=op_name, devices=placed, samples=envs)
        return Profile(
            busy_s=loop.num_steps * count * step_s,
            first_s=step_s,
            activation_bytes=costs.activation_bytes(op),
        )
    op_name = COMPUTE_OP[component.role]
    num_groups = workflow.batch_size // workflow.group_size
    sizes = [(hi - lo) * workflow.group_size for lo, hi in micro_batch_ranges(num_groups, count)]
    activation = max(
        costs.activation_bytes(
            Op(index=0, kind="compute", component=name, name=op_name, devices=placed, samples=s)
        )
        for s in set(sizes)
    )
    if op_name == "generate":
        whole = costs.compute_seconds(name, "generate", devices, workflow.batch_size)
        fractions = costs.generation_fractions(count)
        return Profile(
            busy_s=float(whole * fractions[-1]),
            first_s=float(whole * fractions[0]),
            activation_bytes=activation,
        )
    seconds = {s: costs.compute_seconds(name, op_name, devices, s) for s in set(sizes)}
    return Profile(
        busy_s=float(sum(seconds[s] for s in sizes)),
        first_s=float(seconds[sizes[0]]),
        activation_bytes=activation,
    )


@attrs.frozen
class Estimate:
    """The surrogate's view of one point."""

    iteration_s: float
    peak_bytes: tuple[int, ...]
    """Per group, the memory one of its devices needs at peak."""

    def fits(self, capacity_bytes: int) -> bool:
        """Whether every group fits in a device."""
        return all(peak <= capacity_bytes for peak in self.peak_bytes)


def cut_kind(workflow: Workflow, before: str, after: str) -> str:
    """How consecutive groups meet: ``loop`` (the cut splits env and policy), ``stream`` (the next group's first
    component takes only stream inputs, or none) or ``barrier``."""
    loop = workflow.loop
    if loop is not None and {before, after} == {loop.env, loop.policy}:
        return "loop"
    incoming = workflow.incoming(after)
    return "barrier" if any(e.kind == "barrier" for e in incoming) else "stream"


def group_peak_bytes(
    tables: CostTables, group: tuple[str, ...], size: int, counts: dict[str, int], offload: frozenset[str]
) -> int:
    """Memory one device of a group needs at peak: resident states, then the largest onloaded state plus
    activations (both loop components' states when they share the group and both offload)."""
    key = ("peak", group, size, tuple(counts[n] for n in group), offload & frozenset(group))
    if key not in tables._memo:
        tables._memo[key] = _group_peak_bytes(tables, group, size, counts, offload)
    return tables._memo[key]


def _group_peak_bytes(
    tables: CostTables, group: tuple[str, ...], size: int, counts: dict[str, int], offload: frozenset[str]
) -> int:
    loop = tables.space.workflow.loop
    activation = {n: tables.profile(n, size, counts[n]).activation_bytes for n in group}
    resident = sum(tables.state_bytes[n] for n in group if n not in offload)
    extra = [tables.state_bytes[n] * (n in offload) + activation[n] for n in group]
    in_loop = [n for n in group if loop is not None and n in (loop.env, loop.policy)]
    if len(in_loop) == 2 and all(n in offload for n in in_loop):
        extra.append(sum(tables.state_bytes[n] for n in in_loop) + max(activation[n] for n in in_loop))
    return resident + max(extra)


def estimate(tables: CostTables, point: PlanPoint) -> Estimate:
    """The surrogate iteration time and per-group peak memory of ``point`` (see the module docstring)."""
    space = tables.space
    workflow = space.workflow
    counts = tables.counts(point.granularity)
    loop = workflow.loop
    loop_names = (loop.env, loop.policy) if loop is not None else ()
    phased = False  # a component of this group or an earlier one offloads
    busy, fill, peaks = [], [], []
    first = {}
    for group, size in zip(point.groups, point.sizes, strict=True):
        phased = phased or any(n in point.offload for n in group)
        profiles = {n: tables.profile(n, size, counts[n]) for n in group}
        first.update({n: profiles[n].first_s for n in group})
        switch = {n: tables.switch_s[n] if n in point.offload else 0.0 for n in group}
        total = sum(profiles[n].busy_s + switch[n] for n in group)
        in_loop = [n for n in group if n in loop_names]
        if len(in_loop) == 2:
            group_fill = total
        elif in_loop:
            group_fill = total - profiles[in_loop[0]].busy_s - switch[in_loop[0]]
        elif phased:
            last = group[-1]
            group_fill = total - profiles[last].busy_s - switch[last] + profiles[last].first_s
        else:
            group_fill = sum(profiles[n].first_s for n in group)
        busy.append(total)
        fill.append(group_fill)
        peaks.append(group_peak_bytes(tables, group, size, counts, point.offload))
    total_s = 0.0
    phase: list[int] = [0]
    cycle = 0.0
    for i in range(1, len(point.groups) + 1):
        kind = (
            "end"
            if i == len(point.groups)
            else cut_kind(workflow, point.groups[i - 1][-1], point.groups[i][0])
        )
        if kind == "loop":
            assert loop is not None
            cycle = loop.num_steps * (
                first[loop.env] + first[loop.policy] + tables.loop_transfer_s[counts[loop.env]]
            )
        if kind in ("loop", "stream"):
            phase.append(i)
            continue
        fills = sum(fill[g] for g in phase)
        total_s += max(max(busy[g] + fills - fill[g] for g in phase), cycle + fills if cycle else 0.0)
        phase, cycle = [i], 0.0
    group_of = {n: i for i, group in enumerate(point.groups) for n in group}
    for src, dst, local_s, cross_s in tables.sync_s:
        total_s += local_s if group_of[src] == group_of[dst] else cross_s
    return Estimate(iteration_s=total_s, peak_bytes=tuple(peaks))


def tick_for(tables: CostTables, resolution: float = 1e7) -> float:
    """A tick so that the largest busy time is about ``resolution`` ticks."""
    largest = max([p.busy_s for p in tables.profiles.values()] + [1e-9])
    return float(np.float64(largest) / resolution)
