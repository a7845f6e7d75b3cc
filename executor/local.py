"""The local backend: worker processes pinned to their devices, each running its own workers' lanes.

On a CPU core one process hosts every worker of that device (:func:`hosts_of`): the components that time-share a
core hand data to each other within the process and run their ops one after the other in program order, which is
what the program asks of a device anyway, without a pipe, a wake-up or a context switch per op (on a shared core
those cost about three times a hand-off between cores). A process joins at most one collective group, so a second
component of the device that needs one (:attr:`executor.runtime.WorkerSpec.collective`) gets a process of its
own; on a GPU each worker keeps its own process (its resident bytes are read per process from the allocator).
``LocalBackend(..., share_processes=False)`` starts one process per worker everywhere.

The driver runs :func:`executor.dispatch.drive` through :class:`executor.control.ControlDriver`: a pipe carries
each worker's lane to it and its records back; the workers signal each other and exchange payloads over their own
pipes (and shared memory). Workers persist across runs (one run = one
iteration), so environments, models and optimizers keep their state; they are rebuilt only when a program needs a
different layout. A worker that raises or dies stops the run with a :class:`WorkerError` that names the worker and
the op it was running; a run in which no op finishes for the watchdog's bound stops with a
:class:`executor.watchdog.StallError` naming what every worker waits on (read from the shared
:class:`executor.watchdog.StatusBoard`, with each process's Python stack); the workers are terminated.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import shutil
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

from executor.collective import FileRendezvous, private_directory
from executor.control import ControlDriver
from executor.devices import Device, DeviceLocks
from executor.dispatch import OpInfo, RunResult, WorkerError
from executor.messages import Shutdown
from executor.routing import Layout, Replica
from executor.runtime import Wiring, WorkerSpec, grouped_components, worker_main
from executor.watchdog import StatusBoard, Watchdog

__all__ = ["LocalBackend", "OpInfo", "RunResult", "WorkerError"]

SHARE_PROCESSES = True
"""The default of ``LocalBackend(share_processes=...)``: whether the workers of one CPU core share a process
(a benchmark sets it to ``False`` to measure one process per worker through the whole runner)."""


def _worker_process(wiring: Wiring, specs: bytes, path: list[str], environ: dict[str, str]) -> None:
    """A worker process's entry point: the driver's ``sys.path`` and environment as they are now (a fork server
    started earlier holds those of its own start: a workload loaded from a file since then puts its folder on the
    driver's path), then the worker specs, unpickled only once the path can import their classes."""
    sys.path[:] = path
    os.environ.clear()
    os.environ.update(environ)
    # Bytes this driver pickled for its own child process: nothing read from a file or a socket.
    worker_main(wiring, pickle.loads(specs))


FORKSERVER_PRELOAD = ["numpy", "torch", "torch._dynamo"]
"""Modules the worker processes' fork server imports once (``start_method="forkserver"``, the default), with the
modules of the first run's worker classes. ``torch._dynamo``: torch imports it on the first construction of any
``torch.optim`` optimizer (``Optimizer.__init__`` is wrapped to disable compilation), about 1.4 s of CPU that every
worker holding an optimizer would otherwise pay at each start."""


class LocalBackend(ControlDriver):
    """Runs programs with worker processes on this machine. Use as a context manager."""

    def __init__(
        self,
        devices: Sequence[Device],
        *,
        start_method: str = "forkserver",
        stall_timeout_s: float = 600.0,
        share_processes: bool | None = None,
        watchdog: Watchdog | None = None,
    ) -> None:
        super().__init__(devices, stall_timeout_s=stall_timeout_s, watchdog=watchdog)
        self._context = mp.get_context(start_method)
        self._start_method = start_method
        self._share_processes = SHARE_PROCESSES if share_processes is None else share_processes
        """Whether the workers of one CPU core share a process (:func:`hosts_of`)."""
        self._processes: list[Any] = []
        """One per host, in :attr:`_hosts` order."""
        self._hosts: list[tuple[Replica, ...]] = []
        """The workers of each process."""
        self._process_of: dict[int, int] = {}
        """Per worker, the index of its process."""
        self._directory: str | None = None
        """A private directory, while the workers run: where their collective groups meet (file stores) and where
        each process writes its stack on ``SIGUSR1``."""
        self._board: StatusBoard | None = None
        """What each worker is doing (shared with the worker processes), read when one dies or the run stalls."""

    def _start(self, layout: Layout, workers: Mapping[str, WorkerSpec]) -> None:
        context = self._context
        if self._start_method == "forkserver":
            # Workers fork from a server that has imported torch and the workers' own modules once: a worker
            # starts in milliseconds instead of importing them anew (torch alone is about 1.5 s of CPU per
            # process with spawn). The server starts with the first backend of the process (this list only
            # counts then) and imports nothing else of the driver's, so workers start as clean as spawned ones.
            found = {getattr(spec.factory, "__module__", None) for spec in workers.values()}
            modules = sorted(m for m in found if isinstance(m, str) and m != "__main__")
            context.set_forkserver_preload([*FORKSERVER_PRELOAD, *modules])
        count = len(layout.replicas)
        locks = DeviceLocks(context, len(self.devices))
        hosts = hosts_of(layout, self.devices, workers, share=self._share_processes)
        self._hosts = hosts
        outbound: list[dict[int, Connection]] = [{} for _ in hosts]
        inbound: list[list[Connection]] = [[] for _ in hosts]
        for src in range(len(hosts)):
            for dst, guests in enumerate(hosts):
                if src != dst:
                    receiver, sender = context.Pipe(duplex=False)
                    outbound[src].update(dict.fromkeys((r.worker for r in guests), sender))
                    inbound[dst].append(receiver)
        self._directory = private_directory()
        rendezvous = self._rendezvous(layout, workers, self._directory)
        self._board = StatusBoard(context.RawArray("i", StatusBoard.size(count)))
        spin_for = _spin_for(layout, self.devices)
        connections: dict[int, Connection] = {}
        child_ends = []
        for index, guests in enumerate(hosts):
            driver_end, worker_end = context.Pipe()
            grouped = next((r for r in guests if r.component in rendezvous), None)
            wiring = Wiring(
                replicas=guests,
                device=self.devices[guests[0].device],
                connection=worker_end,
                outbound=outbound[index],
                inbound=tuple(inbound[index]),
                locks=locks,
                rendezvous=None if grouped is None else rendezvous[grouped.component],
                grouped=None if grouped is None else grouped.worker,
                status=self._board.array,
                stack_file=os.path.join(self._directory, f"stack{index}.txt"),
                spin_for=spin_for.get(guests[0].worker, frozenset()),
            )
            names = "+".join(f"{r.component}-{r.rank}" for r in guests)
            process = context.Process(  # type: ignore[attr-defined]
                target=_worker_process,
                args=(
                    wiring,
                    pickle.dumps({r.worker: workers[r.component] for r in guests}),
                    list(sys.path),
                    dict(os.environ),
                ),
                name=f"rlinf-{names}",
                daemon=True,
            )
            process.start()
            self._processes.append(process)
            for replica in guests:
                connections[replica.worker] = driver_end
                self._process_of[replica.worker] = index
            child_ends.append(worker_end)
        self._connections = [connections[w] for w in range(count)]
        for connection in (
            child_ends
            + list({id(c): c for group in outbound for c in group.values()}.values())
            + [c for group in inbound for c in group]
        ):
            connection.close()
        self._await_ready(range(count), "setup")

    def _rendezvous(
        self, layout: Layout, workers: Mapping[str, WorkerSpec], directory: str
    ) -> dict[str, FileRendezvous]:
        """A file store in ``directory`` per component with several replicas that uses collectives."""
        groups = grouped_components(layout, workers)
        return {
            name: FileRendezvous(path=os.path.join(directory, f"group{index}.store"))
            for index, name in enumerate(groups)
        }

    def _shutdown_workers(self) -> None:
        """Stop every worker process (politely, then by force)."""
        for connection in self._processes_connections():
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
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
        self._processes, self._connections, self._layout = [], [], None
        self._hosts, self._process_of = [], {}
        self._board = None
        self._directory = None

    def current_ops(self) -> dict[int, int]:
        """Per worker, the op it runs now (from the status board)."""
        if self._board is None:
            return {}
        return self._board.current_ops(len(self._process_of))

    def _statuses(self) -> dict[int, tuple[int, int, int, int]]:
        if self._board is None:
            return {}
        return {worker: self._board.read(worker) for worker in self._process_of}

    def _stacks(self) -> dict[int, str]:
        """Each worker's process's Python stack now (every thread), by ``SIGUSR1`` (``faulthandler``)."""
        if self._directory is None:
            return {}
        alive = [(i, p) for i, p in enumerate(self._processes) if p.is_alive()]
        for _, process in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGUSR1)
        time.sleep(STACK_DUMP_S)
        out = {}
        for index, _ in alive:
            with (
                contextlib.suppress(OSError),
                open(os.path.join(self._directory, f"stack{index}.txt")) as file,
            ):
                text = file.read()
                for replica in self._hosts[index]:
                    out[replica.worker] = text
        return out

    def _pids(self) -> dict[int, int]:
        return {w: int(self._processes[i].pid) for w, i in self._process_of.items()}

    def _watched(self) -> dict[Any, int]:
        return {p.sentinel: self._hosts[i][0].worker for i, p in enumerate(self._processes)}

    def _culprit(self, worker: int) -> int:
        """Of the workers in ``worker``'s process, the one that was running an op (else ``worker``)."""
        running = self.current_ops()
        guests = self._hosts[self._process_of[worker]] if worker in self._process_of else ()
        return next((r.worker for r in guests if r.worker in running), worker)

    def _death(self, worker: int) -> str:
        process = self._processes[self._process_of[worker]]
        process.join(timeout=5.0)  # the sentinel fires before the exit status is ready
        return f"process exited with code {process.exitcode}"

    def worker_pids(self) -> dict[str, int]:
        """Process id of every worker, keyed ``component[rank]`` (for fault injection and monitoring)."""
        return {self._name(w): int(self._processes[i].pid) for w, i in sorted(self._process_of.items())}


STACK_DUMP_S = 0.5
"""How long the driver gives the worker processes to write their stacks (``faulthandler`` writes from the signal
handler, at once, even in a process blocked in a system call)."""


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


def hosts_of(
    layout: Layout, devices: Sequence[Device], workers: Mapping[str, WorkerSpec], *, share: bool = True
) -> list[tuple[Replica, ...]]:
    """The workers of each process: on a CPU core (when ``share``) one process for the device's workers, with at
    most one of them in a collective group (a component with several replicas whose spec says ``collective``;
    another such worker gets a process of its own); elsewhere one process per worker."""
    grouped = grouped_components(layout, workers)
    hosts: list[list[Replica]] = []
    shared: dict[int, list[Replica]] = {}
    for replica in layout.replicas:
        host = shared.get(replica.device)
        if not share or devices[replica.device].kind != "cpu":
            hosts.append([replica])
        elif host is None:
            shared[replica.device] = [replica]
            hosts.append(shared[replica.device])
        elif replica.component in grouped and any(r.component in grouped for r in host):
            hosts.append([replica])
        else:
            host.append(replica)
    return [tuple(host) for host in hosts]
