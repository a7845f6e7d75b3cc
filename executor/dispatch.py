"""Lanes: what each worker runs in an iteration, derived once from the program; and the driver's side of a run.

:func:`build_lanes` turns a lowered program into one list of commands per worker (its ops in program order), each
command carrying the completions it waits for and the workers it signals, read from ``Program.release_graph``:
an op starts when every op it follows (its deps, and the previous op of each lane it runs on) has finished on
every worker that runs it. That is the simulator's rule (``simulator.engine.replay`` reads the same graph), kept
by the workers themselves (:mod:`executor.runtime`): they wait for each other's signals, and payloads go straight
from producer to consumer. The driver (:func:`drive`) only hands out the lanes, collects the measured records
(in batches) and turns a failure into a :class:`WorkerError`; it does no per-op work. The local backend
(processes and pipes) and the Ray backend (actors and sockets) run the same lanes for the same program.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, Protocol

import attrs

from executor.messages import (
    Command,
    Compute,
    Failed,
    Hold,
    Offload,
    Onload,
    Push,
    Record,
    Records,
    Send,
    SyncRecv,
    SyncSend,
    ToDriver,
)
from executor.profile import MemoryMeter, OpRecord, build_timeline, cost_samples
from executor.protocol import share_overlaps
from executor.routing import Layout, Replica, Routes
from rlinf.core.errors import ConfigError, RlinfError
from rlinf.core.program import Op, Program
from rlinf.core.schedule import Step
from rlinf.core.timeline import Timeline
from rlinf.core.trace import CostSample


class WorkerError(RlinfError):
    """A worker failed; the message names it and the op it was running, and carries the remote traceback."""

    def __init__(self, message: str, remote_traceback: str = "") -> None:
        super().__init__(message)
        self.remote_traceback = remote_traceback


@attrs.frozen(kw_only=True)
class OpInfo:
    """A small result a worker attached to a compute op (losses, finished episodes)."""

    component: str
    rank: int
    op_index: int
    op_name: str
    info: Mapping[str, Any]


@attrs.frozen(kw_only=True)
class RunResult:
    """One executed program: the measured timeline, its cost samples and the workers' infos."""

    timeline: Timeline
    samples: tuple[CostSample, ...]
    infos: tuple[OpInfo, ...]
    """In program order (op, component, rank), whichever order the replies arrived in."""
    op_overhead_s: tuple[float, ...] = ()
    """Per compute op on each worker, the executor's share of its time: how long it started after every op it
    follows had ended, plus its span outside ``worker.compute`` (receiving inputs, sending outputs, timing)."""


class Transport(Protocol):
    """How one backend talks to its workers during a run."""

    def send_lane(self, worker: int, commands: tuple[Command, ...]) -> None:
        """Deliver ``worker``'s lane; it runs the commands in order."""

    def receive(self, running: Callable[[], Mapping[int, str]]) -> list[ToDriver]:
        """Messages that arrived (waits for at least one). Raises :class:`WorkerError` when a worker died or
        nothing happened for too long; ``running()`` maps worker -> the op label it runs, for that message."""

    def current_ops(self) -> Mapping[int, int]:
        """Per worker, the op it is running now where the backend can see it (else empty)."""

    def fail(self, worker: int, op_label: str, message: str, remote_traceback: str) -> NoReturn:
        """Stop every worker and raise :class:`WorkerError` naming ``worker`` and ``op_label``."""


class Backend(Protocol):
    """What :func:`executor.run` needs: the local backend and the Ray backend both follow it."""

    def execute(
        self,
        program: Program,
        workers: Mapping[str, Any],
        step: Step | None = None,
        *,
        expected: Timeline | None = None,
        deadline: float | None = None,
    ) -> RunResult:
        """Run ``program`` once with ``workers`` (component -> spec) as ``step`` of its run (the next synchronous
        step when ``None``); ``expected`` scales the watchdog, ``deadline`` stops the run."""

    def call(self, component: str, method: str, *args: Any, rank: int = 0) -> Any:
        """Call ``method`` (e.g. ``checkpoint``) on replica ``rank`` of ``component`` and return its answer."""


def check_workers(layout: Layout, workers: Mapping[str, Any], num_devices: int) -> None:
    """Raise when a component has no worker spec or a replica's device is beyond the backend's devices."""
    missing = sorted(set(layout.components) - set(workers))
    if missing:
        raise ConfigError(
            "workers",
            missing,
            "components of the program have no worker spec",
            f"give specs for {list(layout.components)}",
        )
    too_high = [r for r in layout.replicas if r.device >= num_devices]
    if too_high:
        raise ConfigError(
            "devices",
            too_high[0].device,
            f"the backend has {num_devices} devices",
            "give the backend as many devices as the program uses",
        )


WorkerStates = dict[str, list[Any]]
"""Per component, every replica's ``checkpoint()`` in rank order."""


def check_states(layout: Layout, states: Mapping[str, Sequence[Any]]) -> None:
    """Raise unless ``states`` has one state per replica of every component of ``layout``."""
    expected = {name: len(layout.of(name)) for name in layout.components}
    given = {name: len(per_rank) for name, per_rank in states.items()}
    if given != expected:
        raise ConfigError(
            "checkpoint",
            given,
            f"holds worker states for a different layout (the program has {expected} replicas)",
            "resume with the plan the checkpoint was written under",
        )


class WorkerStateMixin:
    """``snapshot`` and ``restore`` of every replica, built on a backend's ``call`` (shared by the backends)."""

    _layout: Layout | None

    def call(self, component: str, method: str, *args: Any, rank: int = 0) -> Any:
        """Call ``method`` on replica ``rank`` of ``component`` (each backend implements it)."""
        raise NotImplementedError

    def snapshot(self) -> WorkerStates:
        """``checkpoint()`` of every replica, per component in rank order (between runs)."""
        assert self._layout is not None, "no workers are running"
        layout = self._layout
        return {
            name: [self.call(name, "checkpoint", rank=r.rank) for r in layout.of(name)]
            for name in layout.components
        }

    def restore(self, states: WorkerStates) -> None:
        """``restore(state)`` on every replica from a :meth:`snapshot` of the same layout."""
        assert self._layout is not None, "no workers are running: call start() first"
        check_states(self._layout, states)
        for name, per_rank in states.items():
            for rank, state in enumerate(per_rank):
                self.call(name, "restore", state, rank=rank)


def drive(run: RunState, transport: Transport) -> RunResult:
    """Hand every worker its lane and collect the records until every command has reported; returns the
    measured result."""
    for worker, lane in run.lanes.items():
        transport.send_lane(worker, lane)
    while not run.finished:
        for message in transport.receive(lambda: run.running_labels(transport.current_ops())):
            if isinstance(message, Failed):
                label = run.program.ops[message.op].label if message.op >= 0 else "setup"
                transport.fail(message.worker, label, message.description, message.traceback)
            assert isinstance(message, Records), f"unexpected message {message!r} during a run"
            run.take(message)
    return run.result()


def build_lanes(program: Program, layout: Layout, routes: Routes) -> dict[int, tuple[Command, ...]]:
    """Per worker, the commands of its ops in program order, with the signals each waits for and sends."""
    parts = [_parts(program, layout, routes, op) for op in program.ops]
    workers_of = [tuple(dict.fromkeys(w for w, _ in part)) for part in parts]
    _, releases = program.release_graph
    follows: list[set[int]] = [set() for _ in program.ops]
    for before, afters in enumerate(releases):
        for after in afters:
            follows[after].add(before)
    lanes: dict[int, list[Command]] = {}
    for op in program.ops:
        index = op.index
        later = {v for successor in releases[index] for v in workers_of[successor]}
        for worker, command in parts[index]:
            waits = tuple(
                sorted((before, v) for before in follows[index] for v in workers_of[before] if v != worker)
            )
            notify = tuple(sorted(later - {worker}))
            lanes.setdefault(worker, []).append(attrs.evolve(command, waits=waits, notify=notify))
    return {worker: tuple(commands) for worker, commands in sorted(lanes.items())}


def _parts(program: Program, layout: Layout, routes: Routes, op: Op) -> list[tuple[int, Command]]:
    """(worker, command) pairs that run ``op`` (without their waits and signals)."""
    if op.kind == "compute":
        out: list[tuple[int, Command]] = []
        lagged_producers = routes.lagged_producers[op.index] if routes.lagged_producers else ()
        lagged_consumers = routes.lagged_consumers[op.index] if routes.lagged_consumers else ()
        for replica in _runners(layout, op.component, op.devices):
            inputs, lagged = (
                tuple(
                    (producer, source.worker)
                    for producer in producers
                    for source in _overlapping(_runners_of(layout, program.ops[producer]), replica)
                )
                for producers in (routes.producers[op.index], lagged_producers)
            )
            pushes = _pushes(
                layout, routes.reader_devices, op.index, replica, routes.direct_consumers[op.index]
            )
            later = _pushes(layout, routes.lagged_reader_devices, op.index, replica, lagged_consumers)
            command = Compute(
                op=op.index,
                name=op.name,
                micro_batch=op.micro_batch,
                step=op.step,
                inputs=inputs,
                pushes=pushes,
                share=(replica.rank, replica.world),
                lagged=lagged,
                lagged_pushes=later,
            )
            out.append((replica.worker, command))
        return out
    if op.kind == "transfer":
        source = routes.transfer_source[op.index]
        buffered = (op.index, op.peer) in routes.lagged_reader_devices  # the peer reads it in a later run
        readers = routes.lagged_reader_devices if buffered else routes.reader_devices
        return [
            (
                r.worker,
                Send(
                    op=op.index,
                    source_op=source,
                    pushes=() if buffered else _pushes(layout, readers, op.index, r, (op.peer,)),
                    share=(r.rank, r.world),
                    lagged_pushes=_pushes(layout, readers, op.index, r, (op.peer,)) if buffered else (),
                ),
            )
            for r in _runners_of(layout, program.ops[source])
        ]
    if op.kind == "onload":
        return [(r.worker, Onload(op=op.index)) for r in layout.of(op.component)]
    if op.kind == "offload":
        return [(r.worker, Offload(op=op.index)) for r in layout.of(op.component)]
    assert op.kind == "sync_weights", f"unknown op kind {op.kind!r}"
    sources = layout.of(op.component)
    destinations = layout.of(op.peer)
    out = [(sources[0].worker, SyncSend(op=op.index, destinations=tuple(d.worker for d in destinations)))]
    out += [(s.worker, Hold(op=op.index)) for s in sources[1:]]
    out += [(d.worker, SyncRecv(op=op.index, source=sources[0].worker)) for d in destinations]
    return out


def _runners(layout: Layout, component: str, devices: tuple[int, ...]) -> tuple[Replica, ...]:
    """The replicas of ``component`` that run an op on ``devices``, each with its rank and world among them:
    every replica as it is, or (a pinned loop step, :func:`rlinf.core.lowering.loop_pinned`) the one on its device,
    holding the whole micro-batch."""
    replicas = layout.of(component)
    mine = tuple(r for r in replicas if r.device in devices)
    if len(mine) == len(replicas):
        return replicas
    return tuple(attrs.evolve(r, rank=i, world=len(mine)) for i, r in enumerate(mine))


def _runners_of(layout: Layout, op: Op) -> tuple[Replica, ...]:
    return _runners(layout, op.component, op.devices)


def _overlapping(producers: Sequence[Replica], consumer: Replica) -> list[Replica]:
    return [p for p in producers if share_overlaps(p.rank, p.world, consumer.rank, consumer.world)]


def _pushes(
    layout: Layout,
    readers: Mapping[tuple[int, str], tuple[int, ...]],
    op: int,
    producer: Replica,
    components: Sequence[str],
) -> tuple[Push, ...]:
    return tuple(
        (consumer.worker, consumer.rank, consumer.world)
        for name in components
        for consumer in _runners(layout, name, readers[(op, name)])
        if share_overlaps(producer.rank, producer.world, consumer.rank, consumer.world)
    )


class RunState:
    """The driver's bookkeeping of one run: the lanes it handed out, the records that came back, the infos."""

    def __init__(
        self,
        program: Program,
        layout: Layout,
        lanes: Mapping[int, tuple[Command, ...]],
        resident: Sequence[int],
    ) -> None:
        self.program = program
        self.layout = layout
        self.lanes = lanes
        """:func:`build_lanes` of ``program`` (built once per program by the backend, not per run)."""
        self.reported = dict.fromkeys(self.lanes, 0)
        """Per worker, how many commands of its lane have reported."""
        self._outstanding = sum(len(lane) for lane in self.lanes.values())
        self._records: list[tuple[int, Record]] = []
        self.resident = list(resident)
        self._initial_resident = list(resident)

    @property
    def finished(self) -> bool:
        """Whether every command of every lane has reported."""
        return self._outstanding == 0

    def take(self, message: Records) -> None:
        """Take a batch of one worker's records (in the order it ran them)."""
        worker = message.worker
        lane = self.lanes[worker]
        for record in message.records:
            position = self.reported[worker]
            assert lane[position].op == record.op, f"worker {worker} reported op {record.op} out of order"
            self.reported[worker] = position + 1
            self._outstanding -= 1
            self._records.append((worker, record))
            self.resident[worker] = record.resident

    def running_labels(self, current: Mapping[int, int]) -> dict[int, str]:
        """Per worker still running its lane, the label of its op: the one the backend sees it run, else the first
        one it has not reported."""
        out = {}
        for worker, lane in self.lanes.items():
            position = self.reported[worker]
            if position < len(lane):
                index = current.get(worker, -1)
                out[worker] = self.program.ops[index if index >= 0 else lane[position].op].label
        return out

    def result(self) -> RunResult:
        """The measured timeline, cost samples and infos of the finished run."""
        program = self.program
        count = program.num_ops
        start = [math.inf] * count
        end = [-math.inf] * count
        moved = [0] * count
        infos: list[OpInfo] = []
        for worker, record in self._records:
            start[record.op] = min(start[record.op], record.start)
            end[record.op] = max(end[record.op], record.end)
            moved[record.op] += record.moved
            if record.info:
                replica = self.layout.replicas[worker]
                infos.append(
                    OpInfo(
                        component=replica.component,
                        rank=replica.rank,
                        op_index=record.op,
                        op_name=program.ops[record.op].name,
                        info=record.info,
                    )
                )
        memory = MemoryMeter(
            program.num_devices, [r.device for r in self.layout.replicas], self._initial_resident
        )
        for worker, record in sorted(self._records, key=lambda item: item[1].end):
            memory.report(worker, record.resident)
        records = [
            OpRecord(start_s=s, end_s=e, num_bytes=m) for s, e, m in zip(start, end, moved, strict=True)
        ]
        _, releases = program.release_graph
        ready = [-math.inf] * count
        for before, afters in enumerate(releases):
            for after in afters:
                ready[after] = max(ready[after], end[before])
        overhead = tuple(
            max(0.0, record.start - ready[record.op] if ready[record.op] > -math.inf else 0.0)
            + max(0.0, record.end - record.start - record.busy)
            for _, record in self._records
            if program.ops[record.op].kind == "compute"
        )
        return RunResult(
            op_overhead_s=overhead,
            timeline=build_timeline(program, records, memory.peak_bytes),
            samples=cost_samples(program, records),
            # in program order, not arrival order: sums over infos then do not depend on timing
            infos=tuple(sorted(infos, key=lambda i: (i.op_index, i.component, i.rank))),
        )
