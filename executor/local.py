"""The local backend: one OS process per component replica, pinned to its device, running its own lane.

The driver runs :func:`executor.dispatch.drive` through :class:`executor.control.ControlDriver`: a pipe carries
each worker's lane to it and its records back; the workers signal each other and exchange payloads over their own
pipes (and shared memory). Workers persist across runs (one run = one
iteration), so environments, models and optimizers keep their state; they are rebuilt only when a program needs a
different layout. A worker that raises, dies or stalls stops the run with a :class:`WorkerError` that names the
worker and the op it was running; the other workers are terminated.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

from executor.collective import FileRendezvous, private_directory
from executor.control import ControlDriver
from executor.devices import Device, DeviceLocks
from executor.dispatch import OpInfo, RunResult, WorkerError
from executor.messages import Shutdown
from executor.routing import Layout
from executor.runtime import Wiring, WorkerSpec, worker_main

__all__ = ["LocalBackend", "OpInfo", "RunResult", "WorkerError"]


class LocalBackend(ControlDriver):
    """Runs programs with worker processes on this machine. Use as a context manager."""

    def __init__(
        self, devices: Sequence[Device], *, start_method: str = "spawn", stall_timeout_s: float = 600.0
    ) -> None:
        super().__init__(devices, stall_timeout_s=stall_timeout_s)
        self._context = mp.get_context(start_method)
        self._processes: list[Any] = []
        self._rendezvous_directory: str | None = None
        """Where the workers' collective groups meet (file stores), while they run."""
        self._progress: Any = None
        """Shared ints, one per worker: the op it runs (``-1`` between ops), read when a worker dies."""

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
        rendezvous = self._rendezvous(layout)
        self._progress = context.RawArray("i", [-1] * count)
        spin_for = _spin_for(layout, self.devices)
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
                rendezvous=rendezvous.get(replica.component),
                progress=self._progress,
                spin_for=spin_for.get(replica.worker, frozenset()),
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
        self._await_ready(range(count), "setup")

    def _rendezvous(self, layout: Layout) -> dict[str, FileRendezvous]:
        """A file store per component with several replicas, in a new private directory."""
        groups = [name for name in layout.components if len(layout.of(name)) > 1]
        if not groups:
            return {}
        self._rendezvous_directory = private_directory()
        return {
            name: FileRendezvous(path=os.path.join(self._rendezvous_directory, f"group{index}.store"))
            for index, name in enumerate(groups)
        }

    def _shutdown_workers(self) -> None:
        """Stop every worker process (politely, then by force)."""
        for connection in self._connections:
            with contextlib.suppress(OSError, ValueError):
                connection.send(Shutdown())
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
        if self._rendezvous_directory is not None:
            shutil.rmtree(self._rendezvous_directory, ignore_errors=True)
        self._processes, self._connections, self._layout = [], [], None
        self._progress = None
        self._rendezvous_directory = None

    def current_ops(self) -> dict[int, int]:
        """Per worker, the op it runs now (from the shared progress array)."""
        if self._progress is None:
            return {}
        return {worker: int(op) for worker, op in enumerate(self._progress) if op >= 0}

    def _watched(self) -> dict[Any, int]:
        return {p.sentinel: w for w, p in enumerate(self._processes)}

    def _death(self, worker: int) -> str:
        process = self._processes[worker]
        process.join(timeout=5.0)  # the sentinel fires before the exit status is ready
        return f"process exited with code {process.exitcode}"

    def worker_pids(self) -> dict[str, int]:
        """Process id of every worker, keyed ``component[rank]`` (for fault injection and monitoring)."""
        return {self._name(w): int(p.pid) for w, p in enumerate(self._processes)}


def _spin_for(layout: Layout, devices: Sequence[Device]) -> dict[int, frozenset[int]]:
    """Per worker on a CPU core, the workers on other cores it polls for (:data:`executor.runtime.SPIN_S`) before
    sleeping when it waits only for them; none on GPUs. A worker never polls for a worker on its own core (it would
    take the core from it); a worker that shares its core with another of the plan may take at most ``SPIN_S``
    from it per wait, and in these plans the other is then itself waiting (an actor for the rollout's end)."""
    core_of = {r.worker: devices[r.device].core for r in layout.replicas if devices[r.device].kind == "cpu"}
    return {
        worker: frozenset(other for other, c in core_of.items() if c != core)
        for worker, core in core_of.items()
    }
