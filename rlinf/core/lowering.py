"""M2Flow lowering: (workflow, plan, cluster) -> program.

* Every component's batch is split into micro-batches (``m_c`` = the largest granularity of its stream edges;
  the loop's env and policy into ``granularity['loop']`` pipeline stages). Micro-batch ``j`` of ``m`` holds the
  groups ``[j*G/m, (j+1)*G/m)`` of the ``G`` prompt groups (or environments).
* A consumer micro-batch depends on the producer micro-batches whose sample ranges overlap its own (``stream``)
  or on all of them (``barrier``), through a transfer op when the two components do not share their devices.
* The loop alternates policy (act) and env (step) for ``num_steps`` steps per stage; with several stages one
  stage's env steps while another stage's policy infers (elastic pipelining). When env and policy have ``k > 1``
  replicas each and the stages are a multiple of ``k``, stage ``s`` runs on replica ``s % k`` of each
  (:func:`loop_pinned`): the replica pairs step their own environments without meeting at every step.
* Ops get one global order, sorted by (batch fraction the op needs, component rank, ...), and each device runs its
  ops in that order, so a program can never deadlock. Collocated consumers thus follow their producers micro-batch
  by micro-batch (interleaved). A component that offloads and shares a device is *switched*: all its ops take the
  largest fraction any of them needs, which makes them contiguous on every device, so it is onloaded once before
  its first op and offloaded once after its last (context switching), while the others keep interleaving.
* Weight sync (actor -> rollout) ends the iteration.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import NamedTuple

import attrs

from rlinf.core.cluster import GIB, Cluster
from rlinf.core.errors import InfeasiblePlanError, require
from rlinf.core.plan import Plan
from rlinf.core.program import Lane, Op, Program
from rlinf.core.workflow import Loop, Workflow


class OrderKey(NamedTuple):
    """Where a pending op stands in the program's total order: ops are sorted by these fields, in this order."""

    fraction: float
    """The fraction of the batch the op's inputs need (an op that needs less of the batch can run earlier)."""
    rank: int
    """Its component's position in topological order (the loop's env and policy share one)."""
    step: int
    """The loop step (0 outside the loop)."""
    micro_batch: int
    """The micro-batch or loop stage."""
    sub: float
    """Position among the ops derived from one compute op: transfers, syncs and context switches sit at small
    offsets before or after it."""
    name: str
    """The component, or a label of the derived op (``src->dst``, ``sync:src->dst``, ``onload:name``)."""

    def beside(self, offset: float, name: str) -> OrderKey:
        """The key of an op derived from this one, ``offset`` after it (before it when negative)."""
        return OrderKey(self.fraction, self.rank, self.step, self.micro_batch, self.sub + offset, name)


@attrs.frozen
class _Pending:
    """An op before its global index is known: ``deps`` are keys of other pending ops."""

    key: OrderKey
    op: Op
    dep_keys: tuple[OrderKey, ...]
    lagged_keys: tuple[OrderKey, ...] = ()
    """Keys of ops whose output this op reads ``max_staleness`` iterations later (no dependency within one)."""


def lower(workflow: Workflow, plan: Plan, cluster: Cluster) -> Program:
    """Lower a macro flow under a plan into a program for ``cluster``.

    Raises :class:`ConfigError` when the plan does not match the workflow or cluster, and
    :class:`InfeasiblePlanError` when resident states do not fit in device memory without offload."""
    plan = plan.validate_for(workflow, cluster.num_devices, cluster.num_cores)
    check_memory(workflow, plan, cluster)
    builder = _Builder(workflow, plan, cluster)
    return builder.build()


def global_devices(plan: Plan, cluster: Cluster) -> dict[str, tuple[int, ...]]:
    """Each component's devices as global ids of ``cluster`` (devices, then the cores of the core pool)."""
    return {p.component: tuple(cluster.global_id(p.pool, d) for d in p.devices) for p in plan.placements}


def check_memory(workflow: Workflow, plan: Plan, cluster: Cluster) -> None:
    """Raise :class:`InfeasiblePlanError` if some device cannot hold its components' states.

    Components that are not offloaded stay resident; offloaded ones are onloaded one at a time."""
    placed = global_devices(plan, cluster)
    for component in workflow.components:
        need = component.state_bytes_per_device()
        spec = cluster.spec_of(placed[component.name][0]) if component.name in placed else cluster.device
        if need > spec.memory_bytes:
            raise InfeasiblePlanError(
                f"component {component.name} needs {need / GIB:.1f} GiB per device for its state, more than a "
                f"{spec.name} holds ({spec.memory_bytes / GIB:.1f} GiB); fix: raise its model_parallel_size "
                f"(now {component.model_parallel_size}) or use devices with more memory"
            )
    order = workflow.component_names
    holders: dict[int, list[str]] = {}
    for placement in sorted(plan.placements, key=lambda p: order.index(p.component)):
        for device in placed[placement.component]:
            holders.setdefault(device, []).append(placement.component)
    # Devices hosting the same components need the same memory: check the first device of each such set.
    first_of: dict[tuple[str, ...], int] = {}
    for device, names in sorted(holders.items()):
        first_of.setdefault(tuple(names), device)
    for names_key, device in sorted(first_of.items(), key=lambda item: item[1]):
        names = list(names_key)
        sizes = {n: workflow.component(n).state_bytes_per_device() for n in names}
        resident = [n for n in names if n not in plan.offload]
        offloaded = [n for n in names if n in plan.offload]
        loop = workflow.loop
        if loop is not None and loop.env in offloaded and loop.policy in offloaded:
            # env and policy alternate every step, so both are onloaded for the whole loop.
            sizes[loop.env] = sizes[loop.policy] = sizes[loop.env] + sizes[loop.policy]
        peak = sum(sizes[n] for n in resident) + max((sizes[n] for n in offloaded), default=0)
        spec = cluster.spec_of(device)
        capacity = spec.memory_bytes
        if peak <= capacity:
            continue
        held = [n for n in resident if sizes[n] > 0] + sorted(
            (n for n in offloaded if sizes[n] > 0), key=lambda n: -sizes[n]
        )[:1]
        parts = " + ".join(f"{n} {sizes[n] / GIB:.1f} GiB" for n in held)
        raise InfeasiblePlanError(
            f"plan does not fit: {_device_name(cluster, device)} ({spec.name}, {capacity / GIB:.1f} GiB) must hold "
            f"{parts} = {peak / GIB:.1f} GiB at once; fix: {_offload_fix(sizes, resident, offloaded, capacity)}"
        )


def _device_name(cluster: Cluster, device: int) -> str:
    """``device 3`` or ``core cpu:2``, as a plan names it."""
    if cluster.pool_of(device) == "cpu":
        return f"core cpu:{device - cluster.num_devices}"
    return f"device {device}"


def _offload_fix(sizes: dict[str, int], resident: list[str], offloaded: list[str], capacity: int) -> str:
    """The smallest-first-to-mention offload set (largest states first) that makes a device fit, as advice."""
    chosen = list(offloaded)
    for name in sorted(resident, key=lambda n: -sizes[n]):
        if sizes[name] == 0:
            break
        chosen.append(name)
        still = sum(sizes[n] for n in resident if n not in chosen) + max(sizes[n] for n in chosen)
        if still <= capacity:
            return f"add 'offload: [{', '.join(sorted(chosen))}]' to the plan, or place these components on separate devices"
    return "place these components on separate devices (offloading alone is not enough)"


def micro_batch_ranges(num_groups: int, num_micro_batches: int) -> tuple[tuple[int, int], ...]:
    """Split ``num_groups`` groups into contiguous, near-equal ranges ``[lo, hi)``."""
    return tuple(
        (j * num_groups // num_micro_batches, (j + 1) * num_groups // num_micro_batches)
        for j in range(num_micro_batches)
    )


class _Builder:
    """Builds the pending ops of one lowering; used once."""

    def __init__(self, workflow: Workflow, plan: Plan, cluster: Cluster) -> None:
        self.workflow = workflow
        self.plan = plan
        self.cluster = cluster
        self.placed = global_devices(plan, cluster)
        """Each component's devices as global ids."""
        self.buffered = (
            frozenset(workflow.buffered_edges_for(plan.buffer_before)) if plan.max_staleness else frozenset()
        )
        """Edges whose consumer reads what the producer made ``max_staleness`` iterations before."""
        self.order = workflow.topological_order()
        self.rank = {name: i for i, name in enumerate(self.order)}
        self.num_groups = workflow.batch_size // workflow.group_size
        self.pending: dict[OrderKey, _Pending] = {}
        self._range_cache: dict[int, tuple[tuple[int, int], ...]] = {}
        self._ends_cache: dict[int, list[int]] = {}  # upper group bound of each range, for bisection
        self._link_cache: dict[tuple[tuple[int, ...], tuple[int, ...]], str] = {}
        # (component, micro-batch) -> key of the op whose completion makes that micro-batch's output available
        self.output: dict[tuple[str, int], OrderKey] = {}
        self.fraction: dict[OrderKey, float] = {}
        loop = workflow.loop
        self.loop_names = (loop.env, loop.policy) if loop is not None else ()
        if loop is not None:
            self.loop_rank = min(self.rank[loop.env], self.rank[loop.policy])
            for name in self.loop_names:
                self.rank[name] = self.loop_rank
        self.micro_batches = micro_batch_counts(workflow, plan.granularity)
        for name in self.order:
            self._check_micro_batches(name, self.micro_batches[name])
        self.pinned = loop is not None and loop_pinned(
            len(self.placed[loop.env]), len(self.placed[loop.policy]), self.micro_batches[loop.env]
        )
        """Whether the loop's stages run on one replica each (:func:`loop_pinned`)."""

    # ---------------------------------------------------------------- sizes
    def _check_micro_batches(self, name: str, count: int) -> None:
        if name in self.loop_names:
            stages = count
            require(
                self.workflow.batch_size % stages == 0,
                "granularity.loop",
                stages,
                f"does not divide the {self.workflow.batch_size} environments",
                "use a divisor of the number of environments",
            )
            return
        require(
            count <= self.num_groups,
            f"granularity of {name}",
            count,
            f"exceeds the {self.num_groups} prompt groups in a batch",
            f"use at most {self.num_groups} micro-batches",
        )

    def _samples(self, name: str, micro_batch: int) -> int:
        lo, hi = self._ranges(self.micro_batches[name])[micro_batch]
        return (hi - lo) * self.workflow.group_size

    def _link(self, a: tuple[int, ...], b: tuple[int, ...]) -> str:
        """Where data between two device sets moves: ``local``, ``intra_node``, ``host`` (between the devices and
        the cores of one node) or ``inter_node``."""
        key = (a, b)
        if key not in self._link_cache:
            cluster = self.cluster
            if a == b:
                self._link_cache[key] = "local"
            elif len(cluster.nodes_of(a) | cluster.nodes_of(b)) > 1:
                self._link_cache[key] = "inter_node"
            elif cluster.pool_of(a[0]) != cluster.pool_of(b[0]):
                self._link_cache[key] = "host"
            else:
                self._link_cache[key] = "intra_node"
        return self._link_cache[key]

    def _ranges(self, num_micro_batches: int) -> tuple[tuple[int, int], ...]:
        """Group ranges of ``num_micro_batches`` micro-batches, computed once per lowering."""
        if num_micro_batches not in self._range_cache:
            ranges = micro_batch_ranges(self.num_groups, num_micro_batches)
            self._range_cache[num_micro_batches] = ranges
            self._ends_cache[num_micro_batches] = [hi for _, hi in ranges]
        return self._range_cache[num_micro_batches]

    # ---------------------------------------------------------------- keys
    def _key(self, name: str, fraction: float, step: int, index: int, sub: float) -> OrderKey:
        return OrderKey(fraction, self.rank[name], step, index, sub, name)

    def _add(
        self,
        key: OrderKey,
        op: Op,
        dep_keys: tuple[OrderKey, ...],
        fraction: float,
        lagged: tuple[OrderKey, ...] = (),
    ) -> OrderKey:
        assert key not in self.pending, key
        self.pending[key] = _Pending(key=key, op=op, dep_keys=dep_keys, lagged_keys=lagged)
        self.fraction[key] = fraction
        return key

    # ---------------------------------------------------------------- build
    def build(self) -> Program:
        for name in self.order:
            if name not in self.loop_names:
                self._lower_component(name)
            elif (self.workflow.loop.env, 0) not in self.output:  # type: ignore[union-attr]
                self._lower_loop()
        self._lower_weight_sync()
        self._insert_context_switches()
        return self._finish()

    def _inputs(
        self, name: str, micro_batch: int
    ) -> tuple[tuple[OrderKey, ...], float, tuple[OrderKey, ...]]:
        """Dependency keys (through transfers where needed), the batch fraction they need, and the keys read
        ``max_staleness`` iterations later (the buffered edges into the training side: no dependency now)."""
        m = self.micro_batches[name]
        lo, hi = self._ranges(m)[micro_batch]
        deps: list[OrderKey] = []
        lagged: list[OrderKey] = []
        needed = (micro_batch + 1) / m
        for edge in self.workflow.incoming(name):
            producer_ranges = self._ranges(self.micro_batches[edge.src])
            if edge.kind == "barrier":
                overlapping = range(len(producer_ranges))
            else:
                # Ranges are contiguous and increasing: the first overlapping one ends after lo.
                first = bisect.bisect_right(self._ends_cache[self.micro_batches[edge.src]], lo)
                overlapping = range(first, len(producer_ranges))
            buffered = edge in self.buffered
            for i in overlapping:
                if producer_ranges[i][0] >= hi and edge.kind == "stream":
                    break
                key = self._transfer(edge.src, name, i, edge.bytes_per_sample)
                if buffered:
                    lagged.append(key)
                    continue
                deps.append(key)
                needed = max(needed, self.fraction[key])
        return tuple(deps), needed, tuple(lagged)

    def _transfer(self, src: str, dst: str, micro_batch: int, bytes_per_sample: int) -> OrderKey:
        """Key that makes producer output ``micro_batch`` available to ``dst`` (a transfer op if needed)."""
        produced = self.output[(src, micro_batch)]
        src_devices, dst_devices = self.placed[src], self.placed[dst]
        if src_devices == dst_devices:
            return produced
        samples = self._samples(src, micro_batch)
        return self._add_transfer(
            produced, src, dst, micro_batch=micro_batch, step=0, samples=samples,
            num_bytes=samples * bytes_per_sample, link=self._link(src_devices, dst_devices),
        )  # fmt: skip

    def _add_transfer(
        self,
        produced: OrderKey,
        src: str,
        dst: str,
        *,
        micro_batch: int,
        step: int,
        samples: int,
        num_bytes: int,
        link: str,
    ) -> OrderKey:
        """Key of the transfer op that carries the output of op ``produced`` (its key) from ``src`` to ``dst``
        over ``link``, added unless an earlier consumer on ``dst``'s devices added it."""
        key = produced.beside(0.25, f"{src}->{dst}")
        if key in self.fraction:
            return key
        op = Op(
            index=-1,
            kind="transfer",
            component=src,
            peer=dst,
            name="transfer",
            micro_batch=micro_batch,
            num_micro_batches=self.micro_batches[src],
            step=step,
            samples=samples,
            num_bytes=num_bytes,
            link=link,
        )
        return self._add(key, op, (produced,), self.fraction[produced])

    def _lower_component(self, name: str) -> None:
        component = self.workflow.component(name)
        m = self.micro_batches[name]
        devices = self.placed[name]
        inputs = [self._inputs(name, j) for j in range(m)]
        if name in self.plan.offload and self._shares_device(name):
            # Switched: one onload per iteration, so its ops stay together at the latest fraction any needs.
            latest = max(needed for _, needed, _ in inputs)
            inputs = [(dep_keys, latest, lagged) for dep_keys, _, lagged in inputs]
        for j, (dep_keys, needed, lagged) in enumerate(inputs):
            samples = self._samples(name, j)
            op = Op(
                index=-1,
                kind="compute",
                component=name,
                name=COMPUTE_NAMES[component.role],
                micro_batch=j,
                num_micro_batches=m,
                devices=devices,
                samples=samples,
                tokens=int(round(samples * self.workflow.tokens_per_sample)),
                pool=self.plan.pool_of(name),
            )
            key = self._add(self._key(name, needed, 0, j, 0.0), op, dep_keys, needed, lagged)
            self.output[(name, j)] = key

    def _lower_loop(self) -> None:
        loop = self.workflow.loop
        assert loop is not None
        stages = self.micro_batches[loop.env]
        envs = self.workflow.batch_size // stages
        placed = [self._stage_devices(stage) for stage in range(stages)]
        previous_env: dict[int, OrderKey] = {}
        for step in range(loop.num_steps):
            for stage in range(stages):
                env_devices, policy_devices = placed[stage]
                link = self._link(env_devices, policy_devices)
                deps: tuple[OrderKey, ...] = ()
                if stage in previous_env:
                    deps = (
                        self._loop_transfer(
                            previous_env[stage],
                            loop.env,
                            loop.policy,
                            stage,
                            step,
                            envs * loop.obs_bytes_per_env,
                            link,
                        ),
                    )
                where = (stage, stages, step, envs)
                act_key = self._add_loop_op(loop.policy, "act", policy_devices, where, link, 0.0, deps)
                to_env = self._loop_transfer(
                    act_key, loop.policy, loop.env, stage, step, envs * loop.action_bytes_per_env, link
                )
                previous_env[stage] = self._add_loop_op(
                    loop.env, "env_step", env_devices, where, link, 0.5, (to_env,)
                )
        for stage in range(stages):
            # A stage's trajectory is complete after its last env step; both loop components "emit" it then.
            self.output[(loop.env, stage)] = previous_env[stage]
            self.output[(loop.policy, stage)] = previous_env[stage]
            self.fraction[previous_env[stage]] = (stage + 1) / stages

    def _stage_devices(self, stage: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Devices of a loop stage's env steps and policy calls: pinned to one replica of each (replica
        ``stage % k``) when env and policy have ``k > 1`` replicas each and the stages are a multiple of ``k``,
        else every device of each component."""
        loop = self.workflow.loop
        assert loop is not None
        env, policy = self.placed[loop.env], self.placed[loop.policy]
        if self.pinned:
            return (env[stage % len(env)],), (policy[stage % len(policy)],)
        return env, policy

    def _add_loop_op(
        self,
        component: str,
        name: str,
        devices: tuple[int, ...],
        where: tuple[int, int, int, int],
        link: str,
        sub: float,
        deps: tuple[OrderKey, ...],
    ) -> OrderKey:
        """Add the loop's op ``name`` (``act`` or ``env_step``) of ``component`` on ``devices``: stage ``stage`` of
        ``stages`` at loop step ``step`` over ``envs`` environments (``where``), the other loop component reached
        over ``link``; ``sub`` orders it within the step. Returns its key."""
        stage, stages, step, envs = where
        op = Op(
            index=-1,
            kind="compute",
            component=component,
            name=name,
            micro_batch=stage,
            num_micro_batches=stages,
            step=step,
            devices=devices,
            samples=envs,
            shared=link == "local",
            pool=self.plan.pool_of(component),
        )
        return self._add(self._key(component, 0.0, step, stage, sub), op, deps, 0.0)

    def _loop_transfer(
        self, src_key: OrderKey, src: str, dst: str, stage: int, step: int, num_bytes: int, link: str
    ) -> OrderKey:
        if link == "local":
            return src_key
        return self._add_transfer(
            src_key, src, dst, micro_batch=stage, step=step, samples=0, num_bytes=num_bytes, link=link
        )

    def _lower_weight_sync(self) -> None:
        for sync in self.workflow.weight_sync:
            last = max(
                k for k, item in self.pending.items() if k.name == sync.src and item.op.kind == "compute"
            )
            devices = tuple(sorted(set(self.placed[sync.src]) | set(self.placed[sync.dst])))
            op = Op(
                index=-1,
                kind="sync_weights",
                component=sync.src,
                peer=sync.dst,
                name="sync_weights",
                devices=devices,
                num_bytes=sync.num_bytes,
                link=self._link(self.placed[sync.src], self.placed[sync.dst]),
            )
            key = last.beside(0.5, f"sync:{sync.src}->{sync.dst}")
            self._add(key, op, (last,), self.fraction[last])

    def _insert_context_switches(self) -> None:
        """Onload before and offload after each offloaded component's ops, where it shares a device."""
        for name in sorted(self.plan.offload):
            devices = self.placed[name]
            if not self._shares_device(name):
                continue
            mine = sorted(
                key
                for key, item in self.pending.items()
                if key.name == name or (item.op.kind == "sync_weights" and item.op.component == name)
            )
            per_device = self.workflow.component(name).state_bytes_per_device()
            first, last = mine[0], mine[-1]
            onload, offload = (
                Op(
                    index=-1,
                    kind=kind,
                    component=name,
                    name=kind,
                    devices=devices,
                    num_bytes=per_device,
                    link="host",
                )
                for kind in ("onload", "offload")
            )
            self._add(first.beside(-0.5, f"onload:{name}"), onload, (), 0.0)
            self._add(last.beside(0.75, f"offload:{name}"), offload, (last,), 0.0)

    def _finish(self) -> Program:
        ordered = [self.pending[key] for key in sorted(self.pending)]
        index = {item.key: i for i, item in enumerate(ordered)}
        ops = tuple(
            _placed(
                item.op,
                i,
                tuple(sorted({index[k] for k in item.dep_keys})),
                tuple(sorted({index[k] for k in item.lagged_keys})),
            )
            for i, item in enumerate(ordered)
        )
        lanes = self._lanes(ops)
        tokens = int(round(self.workflow.batch_size * self.workflow.tokens_per_sample))
        return Program(
            ops=ops,
            num_devices=self.cluster.num_ids,
            component_devices=tuple(sorted(self.placed.items())),
            lanes=lanes,
            state_bytes_per_device=tuple(
                (c.name, c.state_bytes_per_device()) for c in self.workflow.components
            ),
            mode=self.plan.mode,
            plan_summary=self.plan.describe(),
            unit=self.workflow.unit,
            units_per_iteration=self.workflow.units_per_iteration,
            tokens_per_iteration=tokens,
            samples_per_iteration=self.workflow.batch_size,
            max_staleness=self.plan.max_staleness,
            trainer_side=self.workflow.training_side(self.plan.buffer_before)
            if self.plan.max_staleness
            else (),
            buffered_bytes_per_device=self._buffered_bytes(),
        )

    def _buffered_bytes(self) -> tuple[tuple[str, int], ...]:
        """Per training-side component fed by a buffered edge: ``max_staleness`` iterations of its input per
        device; per component behind the buffer that receives weights (``Plan.buffer_before``): the
        ``max_staleness`` older versions it keeps to score the buffered batches with the weights that sampled
        them."""
        out: dict[str, int] = {}
        for edge in sorted(self.buffered, key=lambda e: e.key):
            whole = self.plan.max_staleness * self.workflow.batch_size * edge.bytes_per_sample
            out[edge.dst] = out.get(edge.dst, 0) + -(-whole // len(self.placed[edge.dst]))
        for sync in self.workflow.weight_sync if self.plan.max_staleness else ():
            if sync.dst in self.plan.buffer_before:
                mp = self.workflow.component(sync.dst).model_parallel_size
                out[sync.dst] = out.get(sync.dst, 0) + self.plan.max_staleness * -(-sync.num_bytes // mp)
        return tuple(sorted(out.items()))

    def _lanes(self, ops: tuple[Op, ...]) -> tuple[Lane, ...]:
        """Group devices by the set of components they host: such devices run the same op sequence, since
        every op spans whole component device sets - except the steps of a pinned loop
        (:func:`loop_pinned`), which split such a group into one lane per device."""
        hosted: dict[int, set[str]] = {}
        for name, placed in self.placed.items():
            for device in placed:
                hosted.setdefault(device, set()).add(name)
        groups: dict[tuple[frozenset[str], int], list[int]] = {}
        for device, names in sorted(hosted.items()):
            alone = self.pinned and not names.isdisjoint(self.loop_names)
            groups.setdefault((frozenset(names), device if alone else -1), []).append(device)
        owners = [(op.index, _owners(op), frozenset(op.devices)) for op in ops if op.devices]
        lanes = []
        for (group, _), devices in groups.items():
            order = tuple(
                index
                for index, names, on in owners
                if not names.isdisjoint(group) and not on.isdisjoint(devices)
            )
            buffered = dict(self._buffered_bytes())
            resident = sum(
                self.workflow.component(n).state_bytes_per_device()
                for n in group
                if not (n in self.plan.offload and self._shares_device(n))
            ) + sum(buffered.get(n, 0) for n in group)
            lanes.append(Lane(devices=tuple(devices), ops=order, initial_resident_bytes=resident))
        return tuple(sorted(lanes, key=lambda lane: lane.devices[0]))

    def _shares_device(self, name: str) -> bool:
        mine = set(self.placed[name])
        return any(mine & set(devices) for other, devices in self.placed.items() if other != name)


def micro_batch_counts(workflow: Workflow, granularity: Mapping[str, int]) -> dict[str, int]:
    """Micro-batches of each component under a granularity (the split rule, written once): the loop's env and
    policy split into ``granularity['loop']`` stages; every other component into the largest granularity of its
    stream edges (1 without any, and for a key the granularity does not name)."""
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


def loop_pinned(env_devices: int, policy_devices: int, stages: int) -> bool:
    """Whether the loop's stages are pinned to replicas: each stage's env steps run on one env replica and its
    policy calls on one policy replica (stage ``s`` on replica ``s % k``), so the ``k`` replica pairs step their
    own environments independently instead of meeting at every step. That needs as many env as policy replicas
    (``k > 1``, model-parallel size 1) and a stage count that is a multiple of ``k``; each replica then holds
    ``stages / k`` whole stages, the same share of the environments as an unpinned split would give it.

    Every caller passes the env's and the policy's *device counts* (one meaning: the lowering, the planner's
    tables and spread plans, and the application's plan check), never their replica counts."""
    return env_devices == policy_devices > 1 and stages % env_devices == 0


def _placed(draft: Op, index: int, deps: tuple[int, ...], lagged: tuple[int, ...] = ()) -> Op:
    """``attrs.evolve(draft, index=index, deps=deps, lagged=lagged)`` for a draft op that only this lowering holds:
    the fields are set in place, skipping evolve's copy of every field (a planner search lowers thousands of ops)."""
    object.__setattr__(draft, "index", index)
    object.__setattr__(draft, "deps", deps)
    if lagged:
        object.__setattr__(draft, "lagged", lagged)
    return draft


def _owners(op: Op) -> frozenset[str]:
    """Components whose devices an op occupies (a weight sync spans source and destination)."""
    return frozenset((op.component, op.peer)) if op.kind == "sync_weights" else frozenset((op.component,))


COMPUTE_NAMES = {
    "env": "env_step",
    "rollout": "generate",
    "reward": "reward",
    "inference": "infer",
    "actor": "train",
    "critic": "train",
}
"""Op name of each role's compute outside the loop."""
