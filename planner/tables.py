"""Cost tables of a plan space: each component's profile (busy seconds, first micro-batch, activations) at any
device count and micro-batch count, plus the movement costs (state switches, weight syncs, loop transfers) that
:mod:`planner.surrogate` adds up.

Profiles depend on a group's device count only through each component's busiest replica share
``ceil(samples / replicas)`` and the cost curve it reads, so :func:`distinct_sizes` keeps, per component, the
device counts at which its profile may change, and :attr:`CostTables.group_sizes` per group the counts at which
some member's does; a count between two of them costs what the smaller costs (never faster, only larger).
Profiles are computed on first use.
"""

from __future__ import annotations

import bisect
import itertools
import math
import warnings
from typing import Any

import attrs
import numpy as np

from planner.space import Group, PlanSpace
from rlinf.core.cluster import Cluster
from rlinf.core.costs import CostModel
from rlinf.core.errors import ExtrapolationWarning
from rlinf.core.lowering import COMPUTE_NAMES, loop_pinned, micro_batch_counts, micro_batch_ranges
from rlinf.core.program import Op
from rlinf.core.workflow import Workflow

MAX_EXACT_SIZES = 8
"""Groups with at most this many distinct device counts give CP-SAT all of them (see
:meth:`CostTables.search_sizes`)."""


@attrs.frozen
class Profile:
    """A component's costs at one device count and micro-batch count."""

    busy_s: float
    first_s: float
    """Seconds of the first micro-batch (of one step, for the loop's env and policy)."""
    activation_bytes: int
    last_s: float = 0.0
    """Seconds of the last micro-batch (of one step, for the loop's env and policy)."""


@attrs.frozen(kw_only=True)
class CostTables:
    """Profiles of every component at every distinct device count and micro-batch count of a space, plus
    movement costs."""

    space: PlanSpace
    costs: CostModel
    """A private copy of the cost model (its extrapolation warnings are not shown), probed for profiles."""
    component_sizes: dict[str, tuple[int, ...]]
    """Per component, the device counts (ascending) at which its profile may change; between two of them it
    costs what the smaller costs."""
    group_sizes: dict[tuple[Group, str], tuple[int, ...]]
    """Per (group, pool) of the space, its device counts at which some member's profile may change (a count
    between two is never faster than the smaller, only larger): what CP-SAT and the baselines choose from."""
    switch_s: dict[str, float]
    """The surrogate's price of a context switch of each component's state: twice its onload seconds."""
    onload_s: dict[str, float] = attrs.field(factory=dict)
    """Onload seconds of each component's state."""
    offload_s: dict[str, float] = attrs.field(factory=dict)
    """Offload seconds of each component's state (a profile may price them apart from its onloads)."""
    state_bytes: dict[str, int]
    """Resident bytes per device of each component."""
    sync_s: tuple[tuple[str, str, float, float, float], ...]
    """Per weight sync: (src, dst, seconds within one group, across groups, between devices and cores)."""
    loop_transfer_s: dict[int, float]
    """Per loop stage count: obs + action transfer seconds of one stage and step across groups."""
    capacity_bytes: int
    """Memory of one device of the device pool."""
    core_sizes: dict[str, tuple[int, ...]] = attrs.field(factory=dict)
    """:attr:`component_sizes` on the core pool, for the components that may run there."""
    core_capacity_bytes: int = 0
    """Memory of one core of the core pool."""
    loop_host_transfer_s: dict[int, float] = attrs.field(factory=dict)
    """:attr:`loop_transfer_s` between a device group and a core group."""
    _memo: dict[tuple, Any] = attrs.field(factory=dict, eq=False, repr=False, alias="_memo")
    """Answers already computed (profiles, micro-batch counts per granularity, group peaks): the same questions
    recur across the thousands of points a search estimates."""

    def profile(
        self, name: str, devices: int, micro_batches: int, pool: str = "device", continuous: bool = False
    ) -> Profile:
        """The profile of ``name`` on ``devices`` devices of ``pool`` (any count of the space), computed on first
        use at the largest of its change points (:attr:`component_sizes`, :attr:`core_sizes`) up to ``devices``
        (which costs the same)."""
        sizes = self.core_sizes[name] if pool == "cpu" else self.component_sizes[name]
        continuous = continuous and self.costs.continuous_generation(name)  # only a rollout measured so
        key = (name, sizes[bisect.bisect_right(sizes, devices) - 1], micro_batches, pool, continuous)
        found = self._memo.get(key)
        if found is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExtrapolationWarning)
                found = self._memo[key] = _profile(self.space.workflow, self.costs, *key)
        return found

    def sync_seconds(self, src: str, dst: str, num_bytes: int, link: str) -> float:
        """Seconds of a weight sync of ``num_bytes`` from ``src`` to ``dst`` over ``link`` (memoized)."""
        key = ("sync", src, dst, num_bytes, link)
        if key not in self._memo:
            self._memo[key] = _sync_seconds(self.costs, src, dst, num_bytes, link)
        return self._memo[key]

    def capacity(self, pool: str) -> int:
        """Memory of one device of ``pool``."""
        return self.core_capacity_bytes if pool == "cpu" else self.capacity_bytes

    def search_sizes(self, group: Group, pool: str = "device") -> tuple[int, ...]:
        """The device counts CP-SAT chooses a group's size from: all of :attr:`group_sizes` when there are at
        most :data:`MAX_EXACT_SIZES`, else those equivalent to a power-of-two multiple of the group's smallest
        size or to the whole cluster (the local refinement of :mod:`planner.refine` then moves between all)."""
        sizes = self.group_sizes[(group, pool)]
        if len(sizes) <= MAX_EXACT_SIZES:
            return sizes
        step = sizes[0]
        wanted = [step * 2**i for i in range((sizes[-1] // step).bit_length())] + [self.space.budget(pool)]
        return tuple(sorted({sizes[bisect.bisect_right(sizes, d) - 1] for d in wanted}))

    def counts(self, granularity: tuple[tuple[str, int], ...]) -> dict[str, int]:
        """Micro-batches of each component under ``granularity`` (memoized; do not mutate the result)."""
        key = ("counts", granularity)
        if key not in self._memo:
            self._memo[key] = micro_batch_counts(self.space.workflow, dict(granularity))
        return self._memo[key]

    @property
    def position(self) -> dict[str, int]:
        """Each component's index in the topological order (do not mutate)."""
        if ("position",) not in self._memo:
            self._memo[("position",)] = {n: i for i, n in enumerate(self.space.order)}
        return self._memo[("position",)]


def micro_batch_options(space: PlanSpace, name: str) -> tuple[int, ...]:
    """Micro-batch counts a component can have in the space."""
    workflow = space.workflow
    if workflow.loop is not None and name in (workflow.loop.env, workflow.loop.policy):
        return space.loop_ladder
    if any(e.kind == "stream" for e in workflow.incoming(name) + workflow.outgoing(name)):
        return space.ladder
    return (1,)


def _op_name(workflow: Workflow, name: str) -> str:
    loop = workflow.loop
    if loop is not None and name in (loop.env, loop.policy):
        return "env_step" if name == loop.env else "act"
    return COMPUTE_NAMES[workflow.component(name).role]


def _split_samples(space: PlanSpace, name: str) -> set[int]:
    """Sample counts the ops of ``name`` split over its replicas, over every micro-batch count of the space."""
    workflow = space.workflow
    loop = workflow.loop
    if loop is not None and name in (loop.env, loop.policy):
        return {workflow.batch_size // stages for stages in space.loop_ladder}
    num_groups = workflow.batch_size // workflow.group_size
    out = {
        (hi - lo) * workflow.group_size
        for count in micro_batch_options(space, name)
        for lo, hi in micro_batch_ranges(num_groups, count)
    }
    if _op_name(workflow, name) == "generate":
        out.add(workflow.batch_size)
    return out


def distinct_sizes(space: PlanSpace, costs: CostModel, name: str, pool: str = "device") -> tuple[int, ...]:
    """Device counts (ascending) of ``pool`` at which the profile of ``name`` may change: where the busiest
    replica's share ``ceil(samples / replicas)`` of one of its ops drops, or where the cost model reads another
    curve. Between two of them the profile is that of the smaller (a superset of the exact change points is
    returned)."""
    workflow = space.workflow
    model_parallel = workflow.component(name).model_parallel_size
    most = min(space.budget(pool) // model_parallel, workflow.batch_size)
    replicas = {1}
    for samples in _split_samples(space, name):
        root = math.isqrt(samples) + 1
        replicas.update(range(1, min(root, most) + 1))  # below sqrt(samples) every count changes the share
        replicas.update(math.ceil(samples / share) for share in range(1, root + 1))  # the fewest per share
    loop = workflow.loop
    if loop is not None and name in (loop.env, loop.policy):
        # A loop whose stages are a multiple of the replicas is pinned (one stage per replica: the lowering's
        # ``loop_pinned``): at each divisor of a stage count, and at the count above it, the profile changes.
        for stages in space.loop_ladder:
            for divisor in range(2, stages + 1):
                if stages % divisor == 0:
                    replicas.update((divisor, divisor + 1))
    by_pool = costs.core_curves if pool == "cpu" else costs.curves
    curves = by_pool.get((name, _op_name(workflow, name))) or costs.curves.get(
        (name, _op_name(workflow, name)), ()
    )
    for low, high in itertools.pairwise(sorted(c.devices for c in curves)):
        middle = int(math.sqrt(low * high) / model_parallel)  # the nearest curve (log scale) switches here
        replicas.update(range(max(1, middle - 1), middle + 3))
    return tuple(model_parallel * r for r in sorted(replicas) if r <= most)


def _group_sizes(
    space: PlanSpace, component_sizes: dict[str, tuple[int, ...]], core_sizes: dict[str, tuple[int, ...]]
) -> dict[tuple[Group, str], tuple[int, ...]]:
    """Per (group, pool), the smallest allowed count at or above each member's change points."""
    out: dict[tuple[Group, str], tuple[int, ...]] = {}
    for group, pool in space.placed_groups:
        allowed = space.sizes(group, pool)
        if not allowed:
            out[(group, pool)] = ()
            continue
        step, most = allowed.step, allowed[-1]
        points = core_sizes if pool == "cpu" else component_sizes
        found = {-(-devices // step) * step for name in group for devices in points[name]}
        out[(group, pool)] = tuple(sorted(d for d in found if step <= d <= most))
    return out


def build_tables(space: PlanSpace, cluster: Cluster, costs: CostModel) -> CostTables:
    """The cost tables of ``space``: movement costs now, component profiles when first asked for.

    Probing sizes far from the trace's makes the cost model extrapolate; those warnings are not shown here (a
    private copy of the model is probed) and appear when the chosen plan is simulated with ``costs``."""
    workflow = space.workflow
    component_sizes = {name: distinct_sizes(space, costs, name) for name in space.order}
    on_cores = {name for group, pool in space.placed_groups if pool == "cpu" for name in group}
    core_sizes = {name: distinct_sizes(space, costs, name, "cpu") for name in sorted(on_cores)}
    state = {c.name: c.state_bytes_per_device() for c in workflow.components}
    onload, offload = (
        {
            name: costs.movement_seconds(
                Op(index=0, kind=kind, component=name, name=kind, num_bytes=per_device, link="host")
            )
            for name, per_device in state.items()
        }
        for kind in ("onload", "offload")
    )
    switch = {name: 2 * seconds for name, seconds in onload.items()}
    cross_link = "inter_node" if space.num_devices > cluster.devices_per_node else "intra_node"
    syncs = []
    for sync in workflow.weight_sync:
        local, cross, host = (
            _sync_seconds(costs, sync.src, sync.dst, sync.num_bytes, link)
            for link in ("local", cross_link, "host")
        )
        syncs.append((sync.src, sync.dst, local, cross, host))
    loop_transfer: dict[int, float] = {}
    loop_host_transfer: dict[int, float] = {}
    if workflow.loop is not None:
        loop = workflow.loop
        for stages in space.loop_ladder:
            envs = workflow.batch_size // stages
            for link, into in ((cross_link, loop_transfer), ("host", loop_host_transfer)):
                into[stages] = sum(
                    costs.movement_seconds(
                        Op(
                            index=0,
                            kind="transfer",
                            component=loop.env,
                            name="transfer",
                            num_bytes=envs * per_env,
                            link=link,
                        )
                    )
                    for per_env in (loop.obs_bytes_per_env, loop.action_bytes_per_env)
                )
    return CostTables(
        space=space,
        costs=costs,
        component_sizes=component_sizes,
        group_sizes=_group_sizes(space, component_sizes, core_sizes),
        switch_s=switch,
        onload_s=onload,
        offload_s=offload,
        state_bytes=state,
        sync_s=tuple(syncs),
        loop_transfer_s=loop_transfer,
        capacity_bytes=cluster.device.memory_bytes,
        core_sizes=core_sizes,
        core_capacity_bytes=cluster.core.memory_bytes,
        loop_host_transfer_s=loop_host_transfer,
    )


def _sync_seconds(costs: CostModel, src: str, dst: str, num_bytes: int, link: str) -> float:
    """Seconds of the lowering's weight-sync op of ``num_bytes`` from ``src`` to ``dst`` over ``link``."""
    op = Op(
        index=0,
        kind="sync_weights",
        component=src,
        peer=dst,
        name="sync_weights",
        num_bytes=num_bytes,
        link=link,
    )
    with warnings.catch_warnings():  # probing, like the profiles: the judged plans' simulations warn
        warnings.simplefilter("ignore", ExtrapolationWarning)
        return costs.movement_seconds(op)


def _profile(
    workflow: Workflow,
    costs: CostModel,
    name: str,
    devices: int,
    count: int,
    pool: str = "device",
    continuous: bool = False,
) -> Profile:
    component = workflow.component(name)
    loop = workflow.loop
    placed = tuple(range(devices))
    if loop is not None and name in (loop.env, loop.policy):
        # Assuming the other loop component has as many devices (and pricing steps as not shared).
        busy_s, step_s, span = loop_busy(workflow, costs, name, devices, devices, count, pool=pool)
        op = Op(
            index=0,
            kind="compute",
            component=name,
            name=_op_name(workflow, name),
            devices=placed[:span],
            samples=workflow.batch_size // count,
        )
        return Profile(
            busy_s=busy_s, first_s=step_s, activation_bytes=costs.activation_bytes(op), last_s=step_s
        )
    op_name = COMPUTE_NAMES[component.role]
    num_groups = workflow.batch_size // workflow.group_size
    sizes = [(hi - lo) * workflow.group_size for lo, hi in micro_batch_ranges(num_groups, count)]
    activation = max(
        costs.activation_bytes(
            Op(index=0, kind="compute", component=name, name=op_name, devices=placed, samples=s)
        )
        for s in set(sizes)
    )
    if op_name == "generate":
        measured = "generate_continuous" if continuous else "generate"
        whole = costs.compute_seconds(name, measured, devices, workflow.batch_size, pool=pool)
        fractions = (np.arange(count) + 1.0) / count if continuous else costs.generation_fractions(count)
        return Profile(
            busy_s=float(whole * fractions[-1]),
            first_s=float(whole * fractions[0]),
            activation_bytes=activation,
            last_s=float(whole * (fractions[-1] - (fractions[-2] if count > 1 else 0.0))),
        )
    seconds = {s: costs.compute_seconds(name, op_name, devices, s, pool=pool) for s in set(sizes)}
    return Profile(
        busy_s=float(sum(seconds[s] for s in sizes)),
        first_s=float(seconds[sizes[0]]),
        activation_bytes=activation,
        last_s=float(seconds[sizes[-1]]),
    )


def loop_busy(
    workflow: Workflow,
    costs: CostModel,
    name: str,
    env_devices: int,
    policy_devices: int,
    count: int,
    shared: bool = False,
    pool: str = "device",
) -> tuple[float, float, int]:
    """Loop component ``name`` at ``count`` stages with env and policy on ``env_devices`` and ``policy_devices``
    devices, priced as the lowering's ops are (``shared``: steps whose env and policy share devices): (seconds it
    keeps each of its devices busy, seconds of one step, devices one step spans). Pinned
    (:func:`rlinf.core.lowering.loop_pinned`), each device runs ``count / devices`` whole stages on its own; else every
    stage's ops span all of the component's devices."""
    loop = workflow.loop
    assert loop is not None and name in (loop.env, loop.policy)
    devices = env_devices if name == loop.env else policy_devices
    pinned = loop_pinned(env_devices, policy_devices, count)
    span = 1 if pinned else devices
    step_s = costs.compute_seconds(
        name, _op_name(workflow, name), span, workflow.batch_size // count, shared, pool
    )
    return loop.num_steps * (count // devices if pinned else count) * step_s, step_s, span


def tick_for(tables: CostTables, resolution: float = 1e7) -> float:
    """A tick so that the largest busy time (a component on its fewest devices) is about ``resolution`` ticks."""
    space = tables.space
    largest = max(
        [
            tables.profile(name, tables.component_sizes[name][0], count).busy_s
            for name in space.order
            for count in micro_batch_options(space, name)
        ]
        + [
            tables.profile(name, sizes[0], count, "cpu").busy_s
            for name, sizes in tables.core_sizes.items()
            for count in micro_batch_options(space, name)
        ]
        + [1e-9]
    )
    return float(np.float64(largest) / resolution)
