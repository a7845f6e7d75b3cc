"""The driver's side of the control connections, shared by the local and the Ray backend.

Each worker (a process, or a Ray actor) holds one duplex connection to the driver and runs
:func:`executor.runtime.serve` on it: its lane goes out once per run, its records come back in batches
(:mod:`executor.messages`). :class:`ControlDriver`
keeps those connections and implements everything above them: starting the workers a program needs (or keeping
them), the untimed prepare step, the run itself (:func:`executor.dispatch.drive`), calls between runs, and
turning a closed connection or a silent worker into a :class:`executor.dispatch.WorkerError` that names the worker
and the op it was running. During a run the watchdog (:mod:`executor.watchdog`) bounds the silence: no op finished
for :meth:`executor.watchdog.Watchdog.bound_s` of the longest expected op (predicted, or measured in an earlier run
of the program) stops the run with a :class:`executor.watchdog.StallError` that names what each worker waits on; a
run given a deadline stops there with :class:`executor.watchdog.OutOfTime`. A backend says only how workers start
and stop, how a dead one is described and, where it can, what each worker is doing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, NoReturn

from executor.devices import Device
from executor.dispatch import (
    RunResult,
    RunState,
    WorkerError,
    WorkerStateMixin,
    build_lanes,
    check_workers,
    drive,
)
from executor.messages import (
    BUFFERED,
    REBUFFER,
    Call,
    Command,
    EndRun,
    Failed,
    Prepare,
    Ready,
    Result,
    RunLane,
    ToDriver,
    buffer_key,
)
from executor.routing import Layout, layout_of, routes_of
from executor.runtime import WorkerSpec
from executor.stamps import BufferedBatch, attach, detach
from executor.watchdog import OutOfTime, StallError, StallReport, Watchdog, WorkerState, describe_status
from rlinf.core.program import Program
from rlinf.core.schedule import Step, synchronous_step
from rlinf.core.timeline import Timeline

CHECK_EVERY_S = 1.0
"""While no reply arrives, how often the backend is asked whether a worker stopped without closing its
connection (e.g. a Ray node that vanished from the network)."""


Running = Mapping[int, str] | Callable[[], Mapping[int, str]]
"""Per worker, the label of what it runs (or a function giving it at the moment it is needed)."""


def sitting_out(program: Program, layout: Layout, step: Step) -> frozenset[int]:
    """The workers that sit ``step`` out: those of the components its phase idles (:meth:`Phase.idle`)."""
    idle = step.phase.idle(layout.components, program.trainer_side)
    return frozenset(r.worker for r in layout.replicas if r.component in idle)


def _longest_op_s(timeline: Timeline) -> float:
    return max(
        (end - start for start, end in zip(timeline.start_s, timeline.end_s, strict=True)), default=0.0
    )


def _labels(running: Running) -> Mapping[int, str]:
    return running() if callable(running) else running


class ControlDriver(WorkerStateMixin):
    """Drives workers over one connection each. Subclasses implement :meth:`_start`, :meth:`_terminate` and
    :meth:`_death`; use a backend as a context manager."""

    def __init__(
        self, devices: Sequence[Device], *, stall_timeout_s: float = 600.0, watchdog: Watchdog | None = None
    ) -> None:
        self.devices = tuple(devices)
        self._stall_timeout_s = stall_timeout_s
        """Outside runs (start-up, prepare, calls): how long a silent worker is waited for."""
        self.watchdog = watchdog or Watchdog()
        self._run: RunState | None = None
        """The run in progress (``None`` between runs)."""
        self._bound: tuple[float, float | None] = (self._stall_timeout_s, None)
        """The run's watchdog bound (seconds) and the longest expected op it was scaled from."""
        self._deadline: float | None = None
        """``time.monotonic()`` past which the current run is stopped (``None``: none)."""
        self._longest_measured: tuple[Program, float] | None = None
        """The longest op measured in the runs of the last program (what later runs' bound scales from)."""
        self._layout: Layout | None = None
        self._specs_key: tuple = ()
        self._connections: list[Connection] = []
        self._resident: list[int] = []
        self._run_id = 0
        self._lanes: tuple[Program, dict[int, tuple[Command, ...]]] | None = None
        """The program whose lanes were built last, and its lanes (rebuilt only for another program)."""
        self._lanes_sent: set[int] = set()
        """Workers that hold those lanes: later runs of the same program send them none."""
        self._skip: frozenset[int] = frozenset()
        """Workers that sit the current run out."""
        self._lag = 0
        """The current program's staleness bound."""
        self._version = 0
        """The policy version of the current run's step (:attr:`rlinf.core.schedule.Step.policy_version`)."""

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ what a backend provides
    def _start(self, layout: Layout, workers: Mapping[str, WorkerSpec]) -> None:
        """Start the workers of ``layout`` (one per replica, in processes of the backend's choosing); fill
        ``self._connections`` in worker order (workers of one process share its connection)."""
        raise NotImplementedError

    def _terminate(self) -> None:
        """Stop every worker at once and forget them (``self._connections`` and ``self._layout`` emptied)."""
        raise NotImplementedError

    def _death(self, worker: int) -> str:
        """Why ``worker``'s connection closed (e.g. its exit code)."""
        raise NotImplementedError

    def _watched(self) -> dict[Any, int]:
        """Extra objects to wait on that become ready when a worker dies (e.g. process sentinels)."""
        return {}

    def _stopped(self) -> list[int]:
        """Workers known to have stopped although their connection looks open (checked while waiting)."""
        return []

    def _shutdown_workers(self) -> None:
        """Ask every worker to stop, then stop them (the default: at once)."""
        self._terminate()

    def _statuses(self) -> dict[int, tuple[int, int, int, int]]:
        """Per worker, its :class:`executor.watchdog.StatusBoard` entry, where the backend has one (else empty)."""
        return {}

    def _stacks(self) -> dict[int, str]:
        """Per worker, its process's Python stack now, where the backend can take it (else empty)."""
        return {}

    def _pids(self) -> dict[int, int]:
        """Per worker, its process id, where the backend knows it (else empty)."""
        return {}

    # ------------------------------------------------------------------ lifecycle
    def start(self, program: Program, workers: Mapping[str, WorkerSpec]) -> None:
        """Start (or keep) the workers ``program`` needs, e.g. to restore a checkpoint before the first run."""
        self._ensure_started(program, workers)

    def _ensure_started(self, program: Program, workers: Mapping[str, WorkerSpec]) -> Layout:
        layout = layout_of(program)
        check_workers(layout, workers, len(self.devices))
        specs_key = tuple((name, workers[name]) for name in layout.components)
        if self._layout is not None and self._layout.key() == layout.key() and self._specs_key == specs_key:
            return self._layout
        self._shutdown_workers()
        self._layout = layout
        self._resident = [0] * len(layout.replicas)
        self._lanes_sent = set()
        self._start(layout, workers)
        self._specs_key = specs_key
        return layout

    def close(self) -> None:
        """Ask every worker to shut down, then stop them."""
        self._shutdown_workers()

    def _await_ready(self, workers: Sequence[int], phase: str) -> None:
        waiting = set(workers)
        while waiting:
            for message in self.receive(running={w: phase for w in waiting}):
                if isinstance(message, Ready):
                    self._resident[message.worker] = message.resident
                    waiting.discard(message.worker)
                elif isinstance(message, Failed):
                    self.fail(message.worker, phase, message.description, message.traceback)

    # ------------------------------------------------------------------ running
    def execute(
        self,
        program: Program,
        workers: Mapping[str, WorkerSpec],
        step: Step | None = None,
        *,
        expected: Timeline | None = None,
        deadline: float | None = None,
    ) -> RunResult:
        """Run ``program`` once, as ``step`` of its run (:meth:`rlinf.core.program.Program.schedule`), and return
        its measured timeline, cost samples and infos. The step's phase says who works under a staleness bound
        (:meth:`rlinf.core.schedule.Phase.idle`), its policy version what every batch moved is stamped with
        (:class:`rlinf.core.schedule.Stamp`); without a step, the run is the next step of a synchronous run (this
        backend's runs so far, plus one). ``expected``: the program's predicted timeline, whose longest op scales
        the watchdog's bound; ``deadline``: a ``time.monotonic()`` past which the run (its workers' start-up
        included) is stopped with :class:`executor.watchdog.OutOfTime`."""
        self._deadline = deadline
        step = synchronous_step(self._run_id + 1) if step is None else step
        try:
            layout = self._ensure_started(program, workers)
            self._skip = sitting_out(program, layout, step)
            self._lag = program.max_staleness
            self._version = step.policy_version
            self._prepare(program, layout)
            self._run_id += 1
            if self._lanes is None or self._lanes[0] is not program:
                self._lanes = (program, build_lanes(program, layout, routes_of(program)))
                self._lanes_sent = set()
            longest = self._longest_expected(program, expected)
            self._bound = (self.watchdog.bound_s(longest), longest)
            self._run = run = RunState(program, layout, self._lanes[1], self._resident)
            result = drive(run, self)
        finally:
            self._run, self._deadline = None, None
        for connection in self._processes_connections():
            connection.send(EndRun(self._run_id))
        self._resident = list(run.resident)
        measured = _longest_op_s(result.timeline)
        if self._longest_measured is not None and self._longest_measured[0] is program:
            measured = max(measured, self._longest_measured[1])
        self._longest_measured = (program, measured)
        return result

    def _longest_expected(self, program: Program, expected: Timeline | None) -> float | None:
        """The longest op of ``expected`` and of the earlier runs of ``program`` (``None``: neither is known)."""
        known = []
        if expected is not None:
            known.append(_longest_op_s(expected))
        if self._longest_measured is not None and self._longest_measured[0] is program:
            known.append(self._longest_measured[1])
        return max(known) if known else None

    def buffered(self) -> list[BufferedBatch]:
        """Every worker's buffered inputs, between runs, for a checkpoint (typed records with their stamps)."""
        assert self._layout is not None, "no workers are running"
        out = []
        for replica in self._layout.replicas:
            for key, payload in self.call(replica.component, BUFFERED, rank=replica.rank):
                _, run, op, producer = key
                arrays, version = detach(payload)
                out.append(
                    BufferedBatch(
                        worker=replica.worker,
                        age=self._run_id - run,
                        op=op,
                        producer=producer,
                        policy_version=version,
                        payload=arrays,
                    )
                )
        return out

    def rebuffer(self, entries: Sequence[BufferedBatch]) -> None:
        """Put the buffered inputs of :meth:`buffered` back, due in the same runs from now on."""
        assert self._layout is not None, "no workers are running: call start() first"
        by_worker: dict[int, list] = {}
        for entry in entries:
            key = buffer_key(self._run_id - entry.age, entry.op, entry.producer)
            by_worker.setdefault(entry.worker, []).append((key, attach(entry.payload, entry.policy_version)))
        for worker, items in sorted(by_worker.items()):
            replica = self._layout.replicas[worker]
            self.call(replica.component, REBUFFER, items, rank=replica.rank)

    def _prepare(self, program: Program, layout: Layout) -> None:
        """Offload the components the program onloads, onload the others (before the clock starts)."""
        onloaded = {op.component for op in program.ops if op.kind == "onload"}
        for replica in layout.replicas:
            self._connections[replica.worker].send(Prepare(replica.component in onloaded, replica.worker))
        self._await_ready([r.worker for r in layout.replicas], "prepare")

    def send_lane(self, worker: int, commands: tuple[Command, ...]) -> None:
        """Send ``worker`` its lane, or only the run id when it holds this program's lane already (part of
        :class:`executor.dispatch.Transport`), with the run's phase (who sits out), lag and policy version."""
        held = worker in self._lanes_sent
        lane = RunLane(
            self._run_id,
            None if held else commands,
            worker,
            skip=self._skip,
            lag=self._lag,
            version=self._version,
        )
        self._connections[worker].send(lane)
        self._lanes_sent.add(worker)

    def current_ops(self) -> dict[int, int]:
        """Per worker, the op it runs now, where the backend can see it (part of
        :class:`executor.dispatch.Transport`); none by default."""
        return {}

    def receive(self, running: Running) -> list[ToDriver]:
        """Messages that arrived (waiting for at least one); raises if a worker died or nothing happens (part of
        :class:`executor.dispatch.Transport`)."""
        watched = self._watched()
        owners: dict[int, int] = {}
        for worker, connection in enumerate(self._connections):
            owners.setdefault(id(connection), worker)
        connections = self._processes_connections()
        silence_s = self._bound[0] if self._run is not None else self._stall_timeout_s
        started = time.monotonic()
        deadline = min(started + silence_s, math.inf if self._deadline is None else self._deadline)
        ready: list[Any] = []
        while not ready and time.monotonic() < deadline:
            slice_s = min(CHECK_EVERY_S, max(0.0, deadline - time.monotonic()))
            ready = wait(connections + list(watched), timeout=slice_s)
            if not ready:
                for worker in self._stopped():
                    self.fail(worker, _labels(running).get(worker, "no op"), self._death(worker), "")
        if not ready and self._deadline is not None and time.monotonic() >= self._deadline:
            self._terminate()
            raise OutOfTime(
                f"stopped at its deadline, {time.monotonic() - started:.0f} s after the last report"
            )
        if not ready and self._run is not None:
            self._stall(time.monotonic() - started, running)
        if not ready:
            now = _labels(running)
            labels = ", ".join(f"{self._name(w)}: {label}" for w, label in sorted(now.items())) or "none"
            self._terminate()
            raise WorkerError(
                f"no worker reported for {self._stall_timeout_s:.0f} s (running: {labels}); fix: look for a stuck worker"
            )
        messages: list[ToDriver] = []
        dead: list[int] = []
        for item in ready:
            if item in watched:
                dead.append(watched[item])
                continue
            assert isinstance(item, Connection)
            try:
                while item.poll():
                    messages.append(item.recv())
            except (EOFError, OSError):
                dead.append(owners[id(item)])
        if messages:  # a failing worker's error reply comes before its connection closes: report that first
            return messages
        for worker in sorted({self._culprit(w) for w in dead}):
            self.fail(worker, _labels(running).get(worker, "no op"), self._death(worker), "")
        return messages

    def _stall(self, silent_s: float, running: Running) -> NoReturn:
        """Stop a run in which no op finished for the watchdog's bound and raise :class:`StallError` with what
        every worker was doing (its status where the backend keeps one, else the first op it had not reported)."""
        run = self._run
        assert run is not None and self._layout is not None
        labels = {op.index: op.label for op in run.program.ops}
        names = {r.worker: self._name(r.worker) for r in self._layout.replicas}
        statuses, unreported = self._statuses(), _labels(running)
        stacks, pids = self._stacks(), self._pids()
        states = []
        for replica in self._layout.replicas:
            worker = replica.worker
            first = unreported.get(worker)
            if worker in statuses:
                doing = describe_status(statuses[worker], labels, names, first)
            else:
                doing = "idle (lane done)" if first is None else f"has not reported {first}"
            states.append(
                WorkerState(
                    name=names[worker],
                    doing=doing,
                    reported=run.reported[worker],
                    lane=len(run.lanes.get(worker, ())),
                    pid=pids.get(worker),
                    stack=stacks.get(worker, ""),
                )
            )
        bound_s, longest = self._bound
        self._terminate()
        raise StallError(
            StallReport(
                silent_s=silent_s,
                bound_s=bound_s,
                floor_s=self.watchdog.floor_s,
                factor=self.watchdog.factor,
                longest_op_s=longest,
                workers=tuple(states),
            )
        )

    def _processes_connections(self) -> list[Connection]:
        """One connection per worker process (the workers one process hosts share its connection)."""
        return list({id(c): c for c in self._connections}.values())

    def _culprit(self, worker: int) -> int:
        """The worker to name when the process of ``worker`` died: the default, ``worker`` itself (one worker
        per process); a backend whose processes host several names the one that was running an op."""
        return worker

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
        self._connections[replica.worker].send(Call(method, args, replica.worker))
        while True:
            for message in self.receive(running={replica.worker: method}):
                if isinstance(message, Failed):
                    self.fail(message.worker, method, message.description, message.traceback)
                if isinstance(message, Result) and message.worker == replica.worker:
                    return message.value
