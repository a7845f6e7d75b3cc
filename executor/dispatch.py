"""The one dispatch loop of every backend, and the per-run bookkeeping it keeps.

A backend provides a :class:`Transport` (how a batch of commands reaches a worker and how replies come back);
:func:`drive` does the rest: it asks the :class:`executor.interpreter.Interpreter` which ops are ready, turns
each op into commands for the replicas that run it (:class:`RunState`), sends them in batches per worker, and
turns the replies into completions until every op is done. The local backend (processes and pipes) and the Ray
backend (actors and the object store) therefore run the same op order for the same program.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn, Protocol

import attrs

from executor.interpreter import Interpreter
from executor.profile import MemoryMeter, OpRecord, build_timeline, cost_samples
from executor.protocol import share_overlaps
from executor.routing import Layout, Replica, Routes
from rlinf.errors import ConfigError, RlinfError
from rlinf.program import Op, Program
from rlinf.timeline import Timeline
from rlinf.trace import CostSample


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


class Transport(Protocol):
    """How one backend talks to its workers during a run."""

    def send(self, worker: int, commands: list[tuple]) -> None:
        """Deliver a batch of commands to ``worker``; it runs them in order."""

    def receive(self, running: Mapping[int, str]) -> list[tuple]:
        """Replies that arrived (waits for at least one). Raises :class:`WorkerError` when a worker died or
        nothing happened for too long; ``running`` maps worker -> the op label it runs, for that message."""

    def fail(self, worker: int, op_label: str, message: str, remote_traceback: str) -> NoReturn:
        """Stop every worker and raise :class:`WorkerError` naming ``worker`` and ``op_label``."""


class Backend(Protocol):
    """What :func:`executor.run` needs: the local backend and the Ray backend both follow it."""

    def execute(self, program: Program, workers: Mapping[str, Any]) -> RunResult:
        """Run ``program`` once with ``workers`` (component -> spec)."""

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
    """Run every op of ``run`` through ``transport`` under the dispatch rule; returns the measured result."""
    program = run.program
    _send_ready(run, transport, run.interpreter.start())
    while not run.interpreter.finished:
        ready: list[int] = []
        for message in transport.receive(run.running_labels()):
            if message[0] == "error":
                label = program.ops[message[2]].label if message[2] >= 0 else "setup"
                transport.fail(message[1], label, message[3], message[4])
            ready.extend(run.record(message))
        _send_ready(run, transport, sorted(ready))
    return run.result()


def _send_ready(run: RunState, transport: Transport, ready: Sequence[int]) -> None:
    batches: dict[int, list[tuple]] = {}
    for index in ready:
        for worker, command in run.commands(index):
            batches.setdefault(worker, []).append(command)
    for worker, commands in batches.items():
        transport.send(worker, commands)


class RunState:
    """Bookkeeping of one execution: commands per op, replies per op, records, infos, memory."""

    def __init__(self, program: Program, layout: Layout, routes: Routes, resident: Sequence[int]) -> None:
        self.program = program
        self.layout = layout
        self.routes = routes
        self.interpreter = Interpreter(program)
        count = program.num_ops
        self.remaining = [0] * count
        self.start = [math.inf] * count
        self.end = [-math.inf] * count
        self.moved = [0] * count
        self.infos: list[OpInfo] = []
        self.resident = list(resident)
        self.memory = MemoryMeter(program.num_devices, [r.device for r in layout.replicas], resident)
        self.on_worker: dict[int, list[int]] = {}

    def commands(self, index: int) -> list[tuple[int, tuple]]:
        """(worker, command) pairs that run op ``index``."""
        op = self.program.ops[index]
        out = getattr(self, f"_{op.kind}")(op)
        self.remaining[index] = len(out)
        for worker, _ in out:
            self.on_worker.setdefault(worker, []).append(index)
        return out

    def _compute(self, op: Op) -> list[tuple[int, tuple]]:
        out = []
        for replica in self.layout.of(op.component):
            keys = tuple(
                (producer, source.worker)
                for producer in self.routes.producers[op.index]
                for source in self._overlapping(self.layout.of(self.program.ops[producer].component), replica)
            )
            pushes = self._pushes(replica, self.routes.direct_consumers[op.index])
            out.append(
                (replica.worker, ("compute", op.index, op.name, op.micro_batch, op.step, keys, pushes))
            )
        return out

    def _transfer(self, op: Op) -> list[tuple[int, tuple]]:
        source = self.routes.transfer_source[op.index]
        producers = self.layout.of(self.program.ops[source].component)
        return [(r.worker, ("send", op.index, source, self._pushes(r, (op.peer,)))) for r in producers]

    def _onload(self, op: Op) -> list[tuple[int, tuple]]:
        return [(r.worker, ("onload", op.index)) for r in self.layout.of(op.component)]

    def _offload(self, op: Op) -> list[tuple[int, tuple]]:
        return [(r.worker, ("offload", op.index)) for r in self.layout.of(op.component)]

    def _sync_weights(self, op: Op) -> list[tuple[int, tuple]]:
        sources = self.layout.of(op.component)
        destinations = self.layout.of(op.peer)
        out: list[tuple[int, tuple]] = [
            (sources[0].worker, ("sync_send", op.index, tuple(d.worker for d in destinations)))
        ]
        out += [(s.worker, ("hold", op.index)) for s in sources[1:]]
        out += [(d.worker, ("sync_recv", op.index, sources[0].worker)) for d in destinations]
        return out

    def _overlapping(self, producers: Sequence[Replica], consumer: Replica) -> list[Replica]:
        return [p for p in producers if share_overlaps(p.rank, p.world, consumer.rank, consumer.world)]

    def _pushes(self, producer: Replica, components: Sequence[str]) -> tuple:
        return tuple(
            (consumer.worker, consumer.rank, consumer.world)
            for name in components
            for consumer in self.layout.of(name)
            if share_overlaps(producer.rank, producer.world, consumer.rank, consumer.world)
        )

    def record(self, message: tuple) -> list[int]:
        """Take one worker reply; returns ops that became ready."""
        kind, worker, index = message[0], message[1], message[2]
        assert kind == "done", f"unexpected message {kind!r} during a run"
        _, _, _, start, end, info, resident, moved = message
        self.start[index] = min(self.start[index], start)
        self.end[index] = max(self.end[index], end)
        self.moved[index] += moved
        self.resident[worker] = resident
        self.memory.report(worker, resident)
        self.on_worker[worker].remove(index)
        op = self.program.ops[index]
        if info:
            replica = self.layout.replicas[worker]
            self.infos.append(
                OpInfo(
                    component=replica.component, rank=replica.rank, op_index=index, op_name=op.name, info=info
                )
            )
        self.remaining[index] -= 1
        if self.remaining[index] == 0:
            return self.interpreter.complete(index)
        return []

    def running_labels(self) -> dict[int, str]:
        """Per worker, the first op it has been sent and not finished."""
        return {w: self.program.ops[ops[0]].label for w, ops in self.on_worker.items() if ops}

    def result(self) -> RunResult:
        """The measured timeline, cost samples and infos of the finished run."""
        records = [
            OpRecord(start_s=s, end_s=e, num_bytes=m)
            for s, e, m in zip(self.start, self.end, self.moved, strict=True)
        ]
        return RunResult(
            timeline=build_timeline(self.program, records, self.memory.peak_bytes),
            samples=cost_samples(self.program, records),
            # in program order, not arrival order: sums over infos then do not depend on timing
            infos=tuple(sorted(self.infos, key=lambda i: (i.op_index, i.component, i.rank))),
        )
