"""The plan space the planner searches, defined once so that CP-SAT and brute force search the same set.

A point of the space (:class:`PlanPoint`) is:

* **collocated groups**: the workflow's *heavy* components, in topological order, cut into runs of consecutive
  components (the "cuts of the workflow"); each *light* component (a reward or env with no device state: little
  compute, no device memory, :func:`is_light`) either gets a group of its own or joins any heavy group, where it
  costs no extra devices. The loop's env and policy are consecutive in the topological order;
* a **device count** per group: any multiple of its components' model-parallel sizes, up to the cluster (and to
  one replica per sample); data-parallel replicas then hold uneven shares, differing by at most one sample (the
  cost model prices the busiest). Groups get contiguous blocks, in the order of their first component, starting
  at device 0; the counts add up to at most the cluster's devices;
* a **granularity** per stream edge from :attr:`PlanSpace.ladder` (powers of two up to the number of prompt
  groups, capped), and for the loop a number of pipeline stages from :attr:`PlanSpace.loop_ladder` (divisors of
  the environment count, capped);
* an **offload** flag per component that shares its group with another component and has state to move;
* with a staleness bound ``K >= 1`` (asynchronous plans), a **staleness** up to ``min(K, 2)``: at 1 the rollout
  side of iteration ``i + 1`` runs while iteration ``i`` trains (one step of the pipeline per iteration, the new
  weights synced at its end); at 2 the rollout may also admit the next iteration's prompts while it generates
  (continuous generation, where the trace measured it); a larger staleness lowers to the same steady-state step
  with more samples buffered, so it is never faster and the space stops at 2;
* on a cluster with CPU cores beside its GPUs (the core pool, :mod:`rlinf.core.cluster`), a **pool** per group: the
  components that need no GPU (``Component.cpu_ok``) may leave the device pool together and form one group on a
  contiguous block of cores (any count up to the pool), the others being cut into device groups as above.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator

import attrs

from planner.modes import StalenessMode, staleness_modes
from rlinf.core.errors import ConfigError, require
from rlinf.core.plan import Placement, Plan
from rlinf.core.workflow import Loop, Workflow

DEFAULT_MAX_GRANULARITY = 64
DEFAULT_MAX_LOOP_STAGES = 16
LIGHT_ROLES = ("reward", "env")
"""Roles whose components, when they hold no device state, may share any group's devices."""

Group = tuple[str, ...]
"""Names of the components of one collocated group, in topological order."""


@attrs.frozen(kw_only=True)
class PlanPoint:
    """One plan of the space, in the planner's coordinates."""

    groups: tuple[Group, ...]
    """Collocated groups, ordered by their first component in topological order."""
    sizes: tuple[int, ...]
    """Devices of each group."""
    granularity: tuple[tuple[str, int], ...]
    """(key, value) for every stream edge and the loop, sorted by key."""
    offload: frozenset[str] = frozenset()
    pools: tuple[str, ...] = ()
    """Pool of each group: ``device`` or ``cpu`` (the cores beside GPUs); empty means every group on devices."""
    staleness: int = 0
    """The plan's ``max_staleness``: 0 (synchronous), 1 or 2 (the rollout side that many iterations ahead)."""
    buffer_before: tuple[str, ...] = ()
    """The plan's ``buffer_before`` (with a staleness): components besides the trainers behind the buffer."""

    def __attrs_post_init__(self) -> None:
        assert len(self.groups) == len(self.sizes), (self.groups, self.sizes)
        if not self.pools:
            object.__setattr__(self, "pools", ("device",) * len(self.groups))
        assert len(self.pools) == len(self.groups), (self.groups, self.pools)

    def to_plan(self) -> Plan:
        """The plan: group ``i`` on the contiguous block of its pool after the earlier groups of that pool."""
        placements = []
        start = {"device": 0, "cpu": 0}
        for group, size, pool in zip(self.groups, self.sizes, self.pools, strict=True):
            first = start[pool]
            for name in group:
                placements.append(Placement(component=name, devices=range(first, first + size), pool=pool))
            start[pool] = first + size
        return Plan(
            placements=placements,
            granularity=dict(self.granularity),
            offload=self.offload,
            max_staleness=self.staleness,
            buffer_before=self.buffer_before,
        )


@attrs.frozen(kw_only=True)
class PlanSpace:
    """Every plan the planner considers for one workflow on ``num_devices`` devices."""

    workflow: Workflow
    num_devices: int
    order: tuple[str, ...]
    """Components in topological order."""
    light: tuple[str, ...]
    """Components that may join any group (:func:`is_light`)."""
    partitions: tuple[tuple[Group, ...], ...]
    """Each way to group the components, as its groups in plan order."""
    stream_keys: tuple[str, ...]
    """Stream edges, each given a granularity from :attr:`ladder`."""
    ladder: tuple[int, ...]
    loop_ladder: tuple[int, ...]
    """Pipeline stages of the loop (empty without a loop)."""
    num_cores: int = 0
    """Cores of the core pool (CPU cores beside GPUs); 0: every group is on devices."""
    pools: tuple[tuple[str, ...], ...] = ()
    """Per partition, the pool of each of its groups (empty: every group on devices)."""
    staleness_modes: tuple[StalenessMode, ...] = ((0, ()),)
    """Every (staleness, buffer_before) the space holds (:func:`planner.modes.staleness_modes`): ``(0, ())``, then
    under a bound ``K`` each staleness up to ``min(K, 2)`` with each buffer position."""

    @property
    def staleness_ladder(self) -> tuple[int, ...]:
        """The staleness values the space holds, in increasing order."""
        return tuple(dict.fromkeys(staleness for staleness, _ in self.staleness_modes))

    def __attrs_post_init__(self) -> None:
        if not self.pools:
            object.__setattr__(self, "pools", tuple(("device",) * len(p) for p in self.partitions))

    def budget(self, pool: str) -> int:
        """Devices of ``pool`` the groups share."""
        return self.num_cores if pool == "cpu" else self.num_devices

    def partition_of(self, point: PlanPoint) -> int:
        """The index of ``point``'s partition (its groups and their pools)."""
        for index, (groups, pools) in enumerate(zip(self.partitions, self.pools, strict=True)):
            if groups == point.groups and pools == point.pools:
                return index
        raise ValueError(f"{point} is not in the space")

    def has_device_partition(self, groups: tuple[Group, ...]) -> bool:
        """Whether ``groups``, every one on the device pool, is a partition of the space."""
        device = ("device",) * len(groups)
        return any(g == groups and p == device for g, p in zip(self.partitions, self.pools, strict=True))

    @property
    def placed_groups(self) -> tuple[tuple[Group, str], ...]:
        """Every (group, pool) of any partition, each once, in a fixed order."""
        return tuple(
            dict.fromkeys(
                (g, pool)
                for partition, pools in zip(self.partitions, self.pools, strict=True)
                for g, pool in zip(partition, pools, strict=True)
            )
        )

    def fits_budgets(self, sizes: tuple[int, ...], pools: tuple[str, ...]) -> bool:
        """Whether groups of ``sizes`` in ``pools`` fit within each pool's devices."""
        used = {"device": 0, "cpu": 0}
        for size, pool in zip(sizes, pools, strict=True):
            used[pool] += size
        return used["device"] <= self.num_devices and used["cpu"] <= self.num_cores

    def fitting_sizes(self, groups: tuple[Group, ...], pools: tuple[str, ...]) -> Iterator[tuple[int, ...]]:
        """The tuples of :meth:`sizes` of ``groups`` in ``pools`` that :meth:`fits_budgets`, in the order of
        ``itertools.product`` (without building the tuples that do not fit)."""
        options = [self.sizes(g, p) for g, p in zip(groups, pools, strict=True)]
        if not all(options):
            return
        # Devices of its pool that the groups after group i need at least.
        later = [
            sum(o[0] for o, q in zip(options[i + 1 :], pools[i + 1 :], strict=True) if q == p)
            for i, p in enumerate(pools)
        ]

        def extend(prefix: tuple[int, ...], left: dict[str, int]) -> Iterator[tuple[int, ...]]:
            i = len(prefix)
            if i == len(options):
                yield prefix
                return
            pool = pools[i]
            for size in options[i]:
                if size + later[i] > left[pool]:
                    break
                yield from extend((*prefix, size), {**left, pool: left[pool] - size})

        yield from extend((), {"device": self.num_devices, "cpu": self.num_cores})

    @property
    def granularity_keys(self) -> tuple[str, ...]:
        """Stream edge keys, then ``loop`` if the workflow has one."""
        return self.stream_keys + ((Loop.key,) if self.loop_ladder else ())

    @property
    def groups(self) -> tuple[Group, ...]:
        """Every device-pool group of any partition, each once, in a fixed order."""
        return tuple(g for g, pool in self.placed_groups if pool == "device")

    def step(self, group: Group) -> int:
        """The smallest device count of a group: every component's model-parallel size divides it."""
        return math.lcm(*(self.workflow.component(n).model_parallel_size for n in group))

    def sizes(self, group: Group, pool: str = "device") -> range:
        """Device counts of a group: multiples of :meth:`step` up to its pool, and up to one replica per sample
        of the batch for every component (more replicas would hold nothing)."""
        cap = min(
            [self.budget(pool)]
            + [self.workflow.component(n).model_parallel_size * self.workflow.batch_size for n in group]
        )
        step = self.step(group)
        return range(step, cap + 1, step)

    def offloadable(self, names: Group) -> tuple[str, ...]:
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
        for groups, pools in zip(self.partitions, self.pools, strict=True):
            offload_sets = list(subsets(tuple(n for g in groups for n in self.offloadable(g))))
            for sizes in itertools.product(*(self.sizes(g, p) for g, p in zip(groups, pools, strict=True))):
                if not self.fits_budgets(sizes, pools):
                    continue
                for granularity in granularities:
                    for offload in offload_sets:
                        for staleness, cut in self.staleness_modes:
                            yield PlanPoint(
                                groups=groups,
                                sizes=sizes,
                                granularity=granularity,
                                offload=offload,
                                pools=pools,
                                staleness=staleness,
                                buffer_before=cut,
                            )

    def sample(self, rng: random.Random) -> PlanPoint | None:
        """A random point: a partition, then each group's size from those that leave room for the groups after
        it, a granularity per key and an offload subset, all uniform; None when the partition drawn has no
        sizes that fit."""
        index = rng.randrange(len(self.partitions))
        groups, pools = self.partitions[index], self.pools[index]
        options = [self.sizes(g, p) for g, p in zip(groups, pools, strict=True)]
        if not all(options) or not self.fits_budgets(tuple(o[0] for o in options), pools):
            return None
        sizes = []
        left = {
            pool: self.budget(pool) - sum(o[0] for o, p in zip(options, pools, strict=True) if p == pool)
            for pool in ("device", "cpu")
        }
        for allowed, pool in zip(options, pools, strict=True):
            fitting = [d for d in allowed if d - allowed[0] <= left[pool]]
            size = rng.choice(fitting)
            left[pool] -= size - allowed[0]
            sizes.append(size)
        ladders = [self.ladder] * len(self.stream_keys) + ([self.loop_ladder] if self.loop_ladder else [])
        granularity = tuple(
            sorted(zip(self.granularity_keys, (rng.choice(ladder) for ladder in ladders), strict=True))
        )
        movable = [n for g in groups for n in self.offloadable(g)]
        offload = frozenset(n for n in movable if rng.random() < 0.5)
        staleness, cut = rng.choice(self.staleness_modes)
        return PlanPoint(
            groups=groups,
            sizes=tuple(sizes),
            granularity=granularity,
            offload=offload,
            pools=pools,
            staleness=staleness,
            buffer_before=cut,
        )

    def count(self) -> int:
        """Number of points (without enumerating them)."""
        num_granularities = len(self.ladder) ** len(self.stream_keys) * max(1, len(self.loop_ladder))
        total = 0
        for groups, pools in zip(self.partitions, self.pools, strict=True):
            num_offload = 2 ** sum(len(self.offloadable(g)) for g in groups)
            choices = 1
            for pool in ("device", "cpu"):
                mine = [self.sizes(g, pool) for g, p in zip(groups, pools, strict=True) if p == pool]
                if mine:
                    choices *= _num_size_choices(mine, self.budget(pool))
            total += choices * num_offload
        return total * num_granularities * len(self.staleness_modes)


def is_light(workflow: Workflow, name: str) -> bool:
    """Whether a component may share any group's devices at no cost of its own: a reward or env (little
    compute) with no device state."""
    component = workflow.component(name)
    return component.role in LIGHT_ROLES and component.state_bytes == 0


def build_space(
    workflow: Workflow,
    num_devices: int,
    *,
    num_cores: int = 0,
    max_granularity: int = DEFAULT_MAX_GRANULARITY,
    max_loop_stages: int = DEFAULT_MAX_LOOP_STAGES,
    max_staleness: int = 0,
) -> PlanSpace:
    """The plan space of ``workflow`` on ``num_devices`` devices and ``num_cores`` cores beside them.

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
    require(
        isinstance(max_staleness, int) and max_staleness >= 0,
        "--max-staleness",
        max_staleness,
        "must be an integer >= 0",
        "give how many iterations the rollout may run ahead of training (0: synchronous)",
    )
    require(
        isinstance(num_cores, int) and num_cores >= 0,
        "num_cores",
        num_cores,
        "must be an integer >= 0",
        "give the cores beside the devices (0 for none)",
    )
    partitions: list[tuple[Group, ...]] = []
    pools: list[tuple[str, ...]] = []
    movable = tuple(n for n in order if workflow.component(n).cpu_ok) if num_cores else ()
    for on_cores in subsets(movable):
        rest = tuple(n for n in order if n not in on_cores)
        core_group = tuple(n for n in order if n in on_cores)
        if not rest:
            partitions.append((core_group,))
            pools.append(("cpu",))
            continue
        for groups in _partitions(rest, _light(workflow, rest)):
            partitions.append(groups + ((core_group,) if core_group else ()))
            pools.append(("device",) * len(groups) + (("cpu",) if core_group else ()))
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
        light=_light(workflow, order),
        partitions=tuple(partitions),
        pools=tuple(pools),
        num_cores=num_cores,
        staleness_modes=staleness_modes(workflow, max_staleness),
        stream_keys=tuple(e.key for e in workflow.edges if e.kind == "stream"),
        ladder=ladder,
        loop_ladder=loop_ladder,
    )


def _light(workflow: Workflow, names: tuple[str, ...]) -> tuple[str, ...]:
    """The light components among ``names`` (:func:`is_light`); none when all are (nothing heavy to join: every
    component is then cut into runs like a heavy one)."""
    light = tuple(n for n in names if is_light(workflow, n))
    return () if len(light) == len(names) else light


def _partitions(order: tuple[str, ...], light: tuple[str, ...]) -> tuple[tuple[Group, ...], ...]:
    """Heavy components cut into runs; each light component alone or in one of the runs. Fewest groups first."""
    heavy = tuple(n for n in order if n not in light)
    position = {name: i for i, name in enumerate(order)}
    out = []
    for cuts in itertools.product((False, True), repeat=len(heavy) - 1):
        bounds = [0] + [i + 1 for i, cut in enumerate(cuts) if cut] + [len(heavy)]
        runs = [heavy[a:b] for a, b in itertools.pairwise(bounds)]
        for homes in itertools.product(range(len(runs) + 1), repeat=len(light)):
            members: list[list[str]] = [list(run) for run in runs]
            alone = []
            for name, home in zip(light, homes, strict=True):
                if home == len(runs):
                    alone.append([name])
                else:
                    members[home].append(name)
            groups = [tuple(sorted(g, key=position.__getitem__)) for g in members + alone]
            out.append(tuple(sorted(groups, key=lambda g: position[g[0]])))
    return tuple(sorted(out, key=lambda groups: (len(groups), [[position[n] for n in g] for g in groups])))


def _num_size_choices(options: list[range], num_devices: int) -> int:
    """How many tuples of sizes, one from each option (a range of multiples), add up to at most ``num_devices``."""
    ways = [1] + [0] * num_devices  # ways[t]: tuples so far that add up to exactly t
    for sizes in options:
        step, most = sizes.step, sizes[-1] if sizes else 0
        prefix = list(ways)  # prefix[t] = ways[t] + ways[t - step] + ...
        for t in range(step, num_devices + 1):
            prefix[t] += prefix[t - step]
        following = [0] * (num_devices + 1)
        for t in range(step, num_devices + 1):
            below = t - most - step  # sizes step..most: ways[t - most] + ... + ways[t - step]
            following[t] = prefix[t - step] - (prefix[below] if below >= 0 else 0)
        ways = following
    return sum(ways)


def subsets(items: tuple[str, ...]) -> Iterator[frozenset[str]]:
    """Every subset of ``items``, smallest first."""
    for count in range(len(items) + 1):
        for chosen in itertools.combinations(items, count):
            yield frozenset(chosen)


def canonical_granularity(workflow: Workflow, counts: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """The granularity that gives each component ``counts[name]`` micro-batches, written plainly: each stream
    edge the smaller count of its ends (the count of the end outside the loop when the other is in it), the loop
    its stage count; sorted (key, value) pairs. Granularities with the same counts lower to the same program."""
    loop = workflow.loop
    loop_names = (loop.env, loop.policy) if loop is not None else ()
    pairs = []
    for edge in workflow.edges:
        if edge.kind == "stream":
            ends = [counts[n] for n in (edge.src, edge.dst) if n not in loop_names]
            pairs.append((edge.key, min(ends) if ends else 1))
    if loop is not None:
        pairs.append((Loop.key, counts[loop.env]))
    return tuple(sorted(pairs))
