"""The local backend: one OS process per component replica, pinned to its device, driven by the interpreter.

The driver runs the one dispatch loop (:func:`executor.dispatch.drive`) with this backend as its transport: pipes
carry batches of commands to the workers and their replies back. Workers persist across
runs (one run = one iteration), so environments, models and optimizers keep their state; they are rebuilt only
when a program needs a different layout. A worker that raises, dies or stalls stops the run with a
:class:`WorkerError` that names the worker and the op it was running; the other workers are terminated.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import socket
import time
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, NoReturn

from executor.devices import Device, DeviceLocks
from executor.dispatch import (
    OpInfo,
    RunResult,
    RunState,
    WorkerError,
    WorkerStateMixin,
    check_workers,
    drive,
)
from executor.routing import Layout, layout_of, routes_of
from executor.runtime import Wiring, WorkerSpec, worker_main
from rlinf.program import Program

__all__ = ["LocalBackend", "OpInfo", "RunResult", "WorkerError"]


class LocalBackend(WorkerStateMixin):
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
        check_workers(layout, workers, len(self.devices))
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
                    self.fail(worker, phase, message[3], message[4])

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
    def start(self, program: Program, workers: Mapping[str, WorkerSpec]) -> None:
        """Start (or keep) the workers ``program`` needs, e.g. to restore a checkpoint before the first run."""
        self._ensure_started(program, workers)

    def execute(self, program: Program, workers: Mapping[str, WorkerSpec]) -> RunResult:
        """Run ``program`` once and return its measured timeline, cost samples and infos."""
        layout = self._ensure_started(program, workers)
        routes = routes_of(program)
        self._prepare(program, layout)
        self._run_id += 1
        run = RunState(program, layout, routes, self._resident)
        result = drive(run, self)
        for connection in self._connections:
            connection.send(("end", self._run_id))
        self._resident = list(run.resident)
        return result

    def _prepare(self, program: Program, layout: Layout) -> None:
        """Offload the components the program onloads, onload the others (before the clock starts)."""
        onloaded = {op.component for op in program.ops if op.kind == "onload"}
        for replica in layout.replicas:
            self._connections[replica.worker].send(("prepare", replica.component in onloaded))
        self._await_ready([r.worker for r in layout.replicas], "prepare")

    def send(self, worker: int, commands: list[tuple]) -> None:
        """Send a batch of commands to ``worker`` (part of :class:`executor.dispatch.Transport`)."""
        self._connections[worker].send(("run", self._run_id, commands))

    def receive(self, running: Mapping[int, str]) -> list[tuple]:
        """Replies that arrived (part of :class:`executor.dispatch.Transport`)."""
        return self._receive(running)

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
                self.fail(worker, running.get(worker, "no op"), f"process exited with code {code}", "")
        return messages

    def fail(self, worker: int, op_label: str, message: str, remote_traceback: str) -> NoReturn:
        """Stop every worker and raise naming the failed one (part of :class:`executor.dispatch.Transport`)."""
        name = self._name(worker)
        self._terminate()
        raise WorkerError(f"worker {name} failed while running {op_label}: {message}", remote_traceback)

    def _name(self, worker: int) -> str:
        if self._layout is None or worker >= len(self._layout.replicas):
            return f"#{worker}"
        replica = self._layout.replicas[worker]
        return f"{replica.component}[{replica.rank}]"

    def call(self, component: str, method: str, *args: Any, rank: int = 0) -> Any:
        """Call a worker method (e.g. ``checkpoint``) between runs and return its result."""
        assert self._layout is not None, "no workers are running"
        replica = self._layout.of(component)[rank]
        self._connections[replica.worker].send(("call", method, args))
        while True:
            for message in self._receive(running={replica.worker: method}):
                if message[0] == "error":
                    self.fail(message[1], method, message[3], message[4])
                if message[0] == "result" and message[1] == replica.worker:
                    return message[2]

    def worker_pids(self) -> dict[str, int]:
        """Process id of every worker, keyed ``component[rank]`` (for fault injection and monitoring)."""
        return {self._name(w): int(p.pid) for w, p in enumerate(self._processes)}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
