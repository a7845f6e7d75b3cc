"""The micro flow: an immutable DAG of operations on devices, produced by :func:`rlinf.core.lowering.lower`.

Semantics, shared by the simulator and the executor: an op starts when all of its ``deps`` are done *and* every
device in ``devices`` has finished the ops before it in that device's order (``Program.device_order``). Ops are
stored in one global topological order; each device's order is that order restricted to the device, so a lowered
program can never deadlock. Transfers occupy no device (they run on links) and are ordered by their deps alone.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs

from rlinf.core.schedule import Schedule

OP_KINDS = ("compute", "transfer", "onload", "offload", "sync_weights")
LINKS = ("", "local", "intra_node", "inter_node", "host")


@attrs.frozen(kw_only=True)
class Op:
    """One micro-operation. Sizes are totals over the op's devices."""

    index: int
    """Position in :attr:`Program.ops`; deps always point to smaller indices."""
    kind: str
    """One of :data:`OP_KINDS`."""
    component: str
    """The component that computes, or the producer of a transfer / source of a weight sync."""
    name: str
    """What the op does, for costs and display: ``generate``, ``env_step``, ``train``, ``transfer``, ..."""
    micro_batch: int = 0
    """Micro-batch (or loop pipeline stage) index."""
    num_micro_batches: int = 1
    """How many micro-batches the component's batch is split into."""
    step: int = 0
    """Loop step, for the embodied env <-> policy loop; 0 elsewhere."""
    devices: tuple[int, ...] = ()
    """Devices the op occupies (empty for transfers)."""
    samples: int = 0
    tokens: int = 0
    num_bytes: int = 0
    """Bytes moved by transfer / sync / onload / offload (per device for onload/offload)."""
    link: str = ""
    """Where bytes move: ``local`` (same devices), ``intra_node``, ``inter_node`` or ``host``."""
    peer: str = ""
    """Consumer of a transfer or destination of a weight sync."""
    deps: tuple[int, ...] = ()
    lagged: tuple[int, ...] = ()
    """Ops whose output this op reads :attr:`Program.max_staleness` iterations later: a training component's input
    from the rollout side under a staleness bound. Not a dependency: the producer's output of this iteration waits
    in a buffer while the op reads an earlier one."""
    pool: str = "device"
    """The pool of a compute op's devices (:mod:`rlinf.core.cluster`): ``device``, or ``cpu`` for the cores beside
    GPUs. Costs are measured and priced per pool."""
    shared: bool = False
    """A compute op of the env <-> policy loop whose two components run on the same devices: every step hands
    off between two processes that share those devices, which costs a context switch that a hand-off to another
    device does not (:class:`rlinf.core.trace.CostSample` ``shared``)."""

    @property
    def label(self) -> str:
        """Short display text, e.g. ``rollout.generate[3]``."""
        suffix = f"[{self.micro_batch}]" if self.num_micro_batches > 1 else ""
        step = f"@{self.step}" if self.step else ""
        target = f"->{self.peer}" if self.peer else ""
        return f"{self.component}{target}.{self.name}{suffix}{step}"


@attrs.frozen(kw_only=True)
class Lane:
    """Devices that run exactly the same op sequence (they host the same components; a device that runs the steps
    of a pinned loop has a lane of its own)."""

    devices: tuple[int, ...]
    ops: tuple[int, ...]
    """Op indices in the order these devices run them."""
    initial_resident_bytes: int = 0
    """Bytes of component state resident on each of these devices when the iteration starts."""


@attrs.frozen(kw_only=True)
class Program:
    """One RL iteration as a DAG of ops, with per-device order and what is resident at the start.

    Per-device order is stored once per :class:`Lane` (group of devices hosting the same components), so a
    1024-device program costs no more to build or simulate than a 16-device one."""

    ops: tuple[Op, ...]
    num_devices: int
    lanes: tuple[Lane, ...]
    state_bytes_per_device: tuple[tuple[str, int], ...] = ()
    """Per component, the resident bytes it holds on each of its devices when onloaded."""
    mode: str = "collocated"
    plan_summary: str = ""
    unit: str = "samples"
    units_per_iteration: int = 1
    """Samples or env steps one iteration produces (for throughput)."""
    tokens_per_iteration: int = 0
    samples_per_iteration: int = 1
    component_devices: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """Each component's devices (global ids), sorted by component."""
    max_staleness: int = 0
    """The plan's staleness bound: with ``k >= 1`` one run of this program is one step of the asynchronous pipeline,
    the rollout side producing iteration ``i + k`` while the training side trains iteration ``i``."""
    trainer_side: tuple[str, ...] = ()
    """With a staleness bound, the training components (they sit out the first ``k`` steps, while the rollout side
    fills the buffer, and the rollout side sits out the last ``k``: :meth:`schedule`)."""
    buffered_bytes_per_device: tuple[tuple[str, int], ...] = ()
    """Per training component, the bytes of samples it holds in its buffer per device (``k`` iterations' worth)."""

    def schedule(self, num_iterations: int) -> Schedule:
        """The steps of a training run of ``num_iterations`` of this program: under its staleness bound ``k``,
        ``k`` fill steps, steady steps and ``k`` drain steps, each with its policy version
        (:mod:`rlinf.core.schedule`)."""
        return Schedule(num_iterations=num_iterations, max_staleness=self.max_staleness)

    def devices_of(self, component: str) -> tuple[int, ...]:
        """The devices (global ids) of ``component``."""
        for name, devices in self.component_devices:
            if name == component:
                return devices
        raise KeyError(f"{component} is not placed in this program")

    def __attrs_post_init__(self) -> None:
        for position, op in enumerate(self.ops):
            assert op.index == position, f"op {op.label} has index {op.index} at position {position}"
            assert all(dep < position for dep in op.deps), f"op {op.label} depends on a later op"
        seen: set[int] = set()
        for lane in self.lanes:
            assert not seen & set(lane.devices), "a device is in two lanes"
            seen |= set(lane.devices)
            assert list(lane.ops) == sorted(lane.ops), "a lane's order must follow the global order"
        assert all(0 <= d < self.num_devices for d in seen)

    @property
    def num_ops(self) -> int:
        """How many ops the program holds."""
        return len(self.ops)

    @functools.cached_property
    def device_order(self) -> tuple[tuple[int, ...], ...]:
        """For each device, the indices of the ops it runs, in order."""
        out: list[tuple[int, ...]] = [()] * self.num_devices
        for lane in self.lanes:
            for device in lane.devices:
                out[device] = lane.ops
        return tuple(out)

    @functools.cached_property
    def initial_resident_bytes(self) -> tuple[int, ...]:
        """Per device, bytes of component state resident when the iteration starts (non-offloaded components)."""
        out = [0] * self.num_devices
        for lane in self.lanes:
            for device in lane.devices:
                out[device] = lane.initial_resident_bytes
        return tuple(out)

    @functools.cached_property
    def release_graph(self) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        """The execution semantics as a graph, shared by the simulator and the executor.

        Returns ``(waiting, releases)``: ``waiting[i]`` is how many events op ``i`` waits for (its deps plus, for
        each lane it runs on, the previous op of that lane), and ``releases[i]`` lists the ops that each lose one
        wait when op ``i`` ends. An op may start when its count reaches zero."""
        waiting = [len(op.deps) for op in self.ops]
        releases: list[list[int]] = [[] for _ in self.ops]
        for op in self.ops:
            for dep in op.deps:
                releases[dep].append(op.index)
        for lane in self.lanes:
            for before, after in zip(lane.ops, lane.ops[1:], strict=False):
                releases[before].append(after)
                waiting[after] += 1
        return tuple(waiting), tuple(tuple(r) for r in releases)

    @functools.cached_property
    def lanes_of_op(self) -> tuple[tuple[int, ...], ...]:
        """Per op, the indices of the lanes that run it."""
        out: list[list[int]] = [[] for _ in self.ops]
        for lane_index, lane in enumerate(self.lanes):
            for index in lane.ops:
                out[index].append(lane_index)
        return tuple(tuple(x) for x in out)

    def summary(self) -> dict[str, Any]:
        """Counts per op kind, for display."""
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[op.kind] = counts.get(op.kind, 0) + 1
        return {"num_ops": self.num_ops, "by_kind": counts, "mode": self.mode, "num_lanes": len(self.lanes)}
