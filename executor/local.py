"""The local backend: one OS process per component replica, pinned to its device, driven by the interpreter.

The driver owns the dispatch rule (:class:`executor.interpreter.Interpreter`); it sends each worker batches of
commands for the ops that just became ready and turns the replies into completions. Workers persist across
runs (one run = one iteration), so environments, models and optimizers keep their state; they are rebuilt only
when a program needs a different layout. A worker that raises, dies or stalls stops the run with a
:class:`WorkerError` that names the worker and the op it was running; the other workers are terminated.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import socket
import time
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import attrs

from executor.devices import Device, DeviceLocks
from executor.interpreter import Interpreter
from executor.profile import MemoryMeter, OpRecord, build_timeline, cost_samples
from executor.protocol import share_overlaps
from executor.routing import Layout, Replica, Routes, layout_of, routes_of
from executor.runtime import Wiring, WorkerSpec, worker_main
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


class LocalBackend:
    """Runs programs with worker processes on this machine. Use as a context manager."""

    def __init__(
        self, devices: Sequence[Device], *, start_method: str = "spawn", stall_timeout_s: float = 600.0
    ) -> None:
        self.devices = tuple(devices)
        self._context = mp.get_context(start_method)
        self._stall_timeout_s = stall_timeout_s
        self._layout: Layout | None = None
        self._specs_key: tuple = ()
        self._processes: list[Any] = []
        self._connections: list[Connection] = []
        self._resident: list[int] = []
        self._run_id = 0

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ lifecycle
    def _ensure_started(self, program: Program, workers: Mapping[str, WorkerSpec]) -> Layout:
        layout = layout_of(program)
        missing = sorted(set(layout.components) - set(workers))
        if missing:
            raise ConfigError(
                "workers",
                missing,
                "components of the program have no worker spec",
                f"give specs for {list(layout.components)}",
            )
        too_high = [r for r in layout.replicas if r.device >= len(self.devices)]
        if too_high:
            raise ConfigError(
                "devices",
                too_high[0].device,
                f"the backend has {len(self.devices)} devices",
                "give the backend as many devices as the program uses",
            )
        specs_key = tuple((name, workers[name]) for name in layout.components)
        if self._layout is not None and self._layout.key() == layout.key() and self._specs_key == specs_key:
            return self._layout
        self.close()
        self._start(layout, workers)
        self._specs_key = specs_key
        return layout

    def _start(self, layout: Layout, workers: Mapping[str, WorkerSpec]) -> None:
        context = self._context
        count = len(layout.replicas)
        locks = DeviceLocks(context, len(self.devices))
        outbound: list[dict[int, Connection]] = [{} for _ in range(count)]
        inbound: list[list[Connection]] = [[] for _ in range(count)]
        for src in range(count):
            for dst in range(count):
                if src != dst:
                    receiver, sender = context.Pipe(duplex=False)
                    outbound[src][dst] = sender
                    inbound[dst].append(receiver)
        ports = {name: _free_port() for name in layout.components if len(layout.of(name)) > 1}
        child_ends = []
        for replica in layout.replicas:
            driver_end, worker_end = context.Pipe()
            wiring = Wiring(
                replica=replica,
                device=self.devices[replica.device],
                connection=worker_end,
                outbound=outbound[replica.worker],
                inbound=tuple(inbound[replica.worker]),
                locks=locks,
                collective_port=ports.get(replica.component, 0),
            )
            process = context.Process(  # type: ignore[attr-defined]
                target=worker_main,
                args=(wiring, workers[replica.component]),
                name=f"rlinf-{replica.component}-{replica.rank}",
                daemon=True,
            )
            process.start()
            self._processes.append(process)
            self._connections.append(driver_end)
            child_ends.append(worker_end)
        for connection in (
            child_ends
            + [c for group in outbound for c in group.values()]
            + [c for group in inbound for c in group]
        ):
            connection.close()
        self._layout = layout
        self._resident = [0] * count
        self._await_ready(range(count), "setup")

    def _await_ready(self, workers: Sequence[int], phase: str) -> None:
        waiting = set(workers)
        while waiting:
            for message in self._receive(running={w: phase for w in waiting}):
                kind, worker = message[0], message[1]
                if kind == "ready":
                    self._resident[worker] = message[2]
                    waiting.discard(worker)
                elif kind == "error":
                    self._fail(worker, phase, message[3], message[4])

    def close(self) -> None:
        """Stop every worker process (politely, then by force)."""
        for connection in self._connections:
            with contextlib.suppress(OSError, ValueError):
                connection.send(("shutdown",))
        deadline = time.monotonic() + 5.0
        for process in self._processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        self._terminate()

    def _terminate(self) -> None:
        for process in self._processes:
            if process.is_alive():
                process.kill()
                process.join(timeout=5.0)
        for connection in self._connections:
            connection.close()
        self._processes, self._connections, self._layout = [], [], None

    # ------------------------------------------------------------------ running
    def execute(self, program: Program, workers: Mapping[str, WorkerSpec]) -> RunResult:
        """Run ``program`` once and return its measured timeline, cost samples and infos."""
        layout = self._ensure_started(program, workers)
        routes = routes_of(program)
        self._prepare(program, layout)
        self._run_id += 1
        run = _Run(program, layout, routes, self._resident)
        self._dispatch(run, run.interpreter.start())
        while not run.interpreter.finished:
            ready: list[int] = []
            for message in self._receive(running=run.running_labels()):
                if message[0] == "error":
                    self._fail(
                        message[1],
                        program.ops[message[2]].label if message[2] >= 0 else "setup",
                        message[3],
                        message[4],
                    )
                ready.extend(run.record(message))
            self._dispatch(run, sorted(ready))
        for connection in self._connections:
            connection.send(("end", self._run_id))
        self._resident = list(run.resident)
        return run.result()

    def _prepare(self, program: Program, layout: Layout) -> None:
        """Offload the components the program onloads, onload the others (before the clock starts)."""
        onloaded = {op.component for op in program.ops if op.kind == "onload"}
        for replica in layout.replicas:
            self._connections[replica.worker].send(("prepare", replica.component in onloaded))
        self._await_ready([r.worker for r in layout.replicas], "prepare")

    def _dispatch(self, run: _Run, ready: Sequence[int]) -> None:
        batches: dict[int, list[tuple]] = {}
        for index in ready:
            for worker, command in run.commands(index):
                batches.setdefault(worker, []).append(command)
        for worker, commands in batches.items():
            self._connections[worker].send(("run", self._run_id, commands))

    def _receive(self, running: Mapping[int, str]) -> list[tuple]:
        """Messages that arrived (waiting for at least one); raises if a worker died or nothing happens."""
        sentinels = {p.sentinel: w for w, p in enumerate(self._processes)}
        ready = wait(list(self._connections) + list(sentinels), timeout=self._stall_timeout_s)
        if not ready:
            labels = ", ".join(f"{self._name(w)}: {label}" for w, label in sorted(running.items())) or "none"
            self._terminate()
            raise WorkerError(
                f"no worker finished an op for {self._stall_timeout_s:.0f} s (running: {labels}); fix: look for a stuck worker"
            )
        messages: list[tuple] = []
        for item in ready:
            if item in sentinels:
                continue
            connection = item
            assert isinstance(connection, Connection)
            while connection.poll():
                try:
                    messages.append(connection.recv())
                except EOFError:
                    break
        if messages:
            return messages
        for item in ready:
            if item in sentinels:
                worker = sentinels[item]
                self._processes[worker].join(
                    timeout=5.0
                )  # the sentinel fires before the exit status is ready
                code = self._processes[worker].exitcode
                self._fail(worker, running.get(worker, "no op"), f"process exited with code {code}", "")
        return messages

    def _fail(self, worker: int, op_label: str, message: str, remote_traceback: str) -> None:
        name = self._name(worker)
        self._terminate()
        raise WorkerError(f"worker {name} failed while running {op_label}: {message}", remote_traceback)

    def _name(self, worker: int) -> str:
        if self._layout is None or worker >= len(self._layout.replicas):
            return f"#{worker}"
        replica = self._layout.replicas[worker]
        return f"{replica.component}[{replica.rank}]"

    def call(self, component: str, method: str, rank: int = 0) -> Any:
        """Call a no-argument worker method (e.g. ``checkpoint``) between runs and return its result."""
        assert self._layout is not None, "no workers are running"
        replica = self._layout.of(component)[rank]
        self._connections[replica.worker].send(("call", method))
        while True:
            for message in self._receive(running={replica.worker: method}):
                if message[0] == "error":
                    self._fail(message[1], method, message[3], message[4])
                if message[0] == "result" and message[1] == replica.worker:
                    return message[2]


class _Run:
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
        replicas = self.layout.of(op.component)
        out = []
        for replica in replicas:
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
        records = [
            OpRecord(start_s=s, end_s=e, num_bytes=m)
            for s, e, m in zip(self.start, self.end, self.moved, strict=True)
        ]
        return RunResult(
            timeline=build_timeline(self.program, records, self.memory.peak_bytes),
            samples=cost_samples(self.program, records),
            infos=tuple(self.infos),
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
