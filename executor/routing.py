"""Where each op's data comes from and goes to, derived from the program alone.

Data flows along dependencies between compute ops of different components, either directly (the producer pushes
its output at the end of its op, when both share their devices) or through a transfer op (the producer's worker
pushes when the transfer runs). A consumer replica receives from every producer replica whose share of the
micro-batch overlaps its own (:func:`executor.protocol.share_overlaps`).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from rlinf.core.program import Program


@attrs.frozen(kw_only=True)
class Replica:
    """One worker: a component replica on one device."""

    worker: int
    component: str
    rank: int
    world: int
    device: int


@attrs.frozen(kw_only=True)
class Layout:
    """Every replica of a run, derived from the devices of each component's compute ops."""

    replicas: tuple[Replica, ...]

    def of(self, component: str) -> tuple[Replica, ...]:
        """Replicas of ``component`` in rank order."""
        return tuple(r for r in self.replicas if r.component == component)

    @property
    def components(self) -> tuple[str, ...]:
        """Component names in worker order."""
        return tuple(dict.fromkeys(r.component for r in self.replicas))

    def key(self) -> tuple:
        """Identity of the layout, to decide whether running workers can be reused."""
        return tuple((r.component, r.rank, r.world, r.device) for r in self.replicas)


def layout_of(program: Program) -> Layout:
    """One replica per device of each component (model-parallel size 1), components in workflow order.

    A component's devices, ranked in ascending order as a plan lists them, are those its compute ops run on; a
    pinned loop step (:func:`rlinf.core.lowering.loop_pinned`) runs on one of them."""
    used: dict[str, set[int]] = {}
    for op in program.ops:
        if op.kind == "compute":
            used.setdefault(op.component, set()).update(op.devices)
    devices = {name: tuple(sorted(ids)) for name, ids in used.items()}
    order = [name for name, _ in program.state_bytes_per_device if name in devices]
    order += sorted(set(devices) - set(order))
    replicas: list[Replica] = []
    for name in order:
        for rank, device in enumerate(devices[name]):
            replicas.append(
                Replica(
                    worker=len(replicas), component=name, rank=rank, world=len(devices[name]), device=device
                )
            )
    return Layout(replicas=tuple(replicas))


@attrs.frozen(kw_only=True)
class Routes:
    """Per op: the producer compute ops a compute op reads, and the components it (or a transfer) feeds."""

    producers: tuple[tuple[int, ...], ...]
    """Per op index, producer compute ops whose output it reads (compute ops only)."""
    direct_consumers: tuple[tuple[str, ...], ...]
    """Per compute op, components that read its output without a transfer op in between."""
    transfer_source: Mapping[int, int]
    """Transfer op index -> the compute op whose output it carries."""
    reader_devices: Mapping[tuple[int, str], tuple[int, ...]]
    """``(compute or transfer op, consumer component)`` -> the devices of the consumer's compute ops that read
    that op's output (every op of one consumer that reads it runs on the same devices)."""
    lagged_producers: tuple[tuple[int, ...], ...] = ()
    """Per op index, producer compute ops whose output it reads a staleness bound's runs later (``Op.lagged``)."""
    lagged_consumers: tuple[tuple[str, ...], ...] = ()
    """Per compute op, components that read its output a staleness bound's runs later without a transfer."""
    lagged_reader_devices: Mapping[tuple[int, str], tuple[int, ...]] = attrs.field(factory=dict)
    """:attr:`reader_devices` of those later readers."""


def routes_of(program: Program) -> Routes:
    """Data routes of ``program``."""
    ops = program.ops
    producers: list[list[int]] = [[] for _ in ops]
    consumers: list[list[str]] = [[] for _ in ops]
    transfer_source: dict[int, int] = {}
    for op in ops:
        if op.kind == "transfer":
            sources = [d for d in op.deps if ops[d].kind == "compute"]
            assert len(sources) == 1, (
                f"transfer {op.label} should carry one compute op's output, has {sources}"
            )
            transfer_source[op.index] = sources[0]
    readers: dict[tuple[int, str], tuple[int, ...]] = {}
    lagged: list[list[int]] = [[] for _ in ops]
    lagged_consumers: list[list[str]] = [[] for _ in ops]
    lagged_readers: dict[tuple[int, str], tuple[int, ...]] = {}
    for op in ops:
        if op.kind != "compute":
            continue
        for dep, into, to, devices in [(d, producers, consumers, readers) for d in op.deps] + [
            (d, lagged, lagged_consumers, lagged_readers) for d in op.lagged
        ]:
            source = ops[dep]
            if source.kind == "transfer":
                into[op.index].append(transfer_source[dep])
            elif source.kind == "compute" and source.component != op.component:
                into[op.index].append(dep)
                if op.component not in to[dep]:
                    to[dep].append(op.component)
            else:
                continue
            known = devices.setdefault((dep, op.component), op.devices)
            assert known == op.devices, f"{op.component} reads {source.label} on {known} and {op.devices}"
    return Routes(
        producers=tuple(tuple(p) for p in producers),
        direct_consumers=tuple(tuple(c) for c in consumers),
        transfer_source=transfer_source,
        reader_devices=readers,
        lagged_producers=tuple(tuple(p) for p in lagged),
        lagged_consumers=tuple(tuple(c) for c in lagged_consumers),
        lagged_reader_devices=lagged_readers,
    )
