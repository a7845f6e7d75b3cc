"""The worker side of the backends: :class:`CommandRunner` runs one worker's commands, :class:`Host` runs the
lanes of the workers of one process, :func:`serve` is the process's loop.

A worker process binds itself to its device, joins a collective group (for at most one of its workers) and builds
its workers: one in the Ray backend, every worker of one device in the local backend (:mod:`executor.local`).
Each iteration the driver sends it each worker's lane (:class:`executor.messages.RunLane`): the commands of its ops
in program order. The process runs them itself, merged in program order (the program's ops are stored in a
topological order of its release graph, so that order never waits for a later command of the same process), one
after the other (under the device lock in the local backend): before a command it waits for the completion
signals of the ops it follows from the workers of other processes that run them, after it signals the other
processes' workers whose ops follow (within a process the order alone keeps the rule); payloads arrive straight
from their producers (:mod:`executor.channels`).
Measured spans, infos, bytes moved and resident state bytes go to the driver in batches
(:class:`executor.messages.Records`): every :data:`FLUSH_EVERY_S` and at the lane's end (and, where the driver has
no status board to read a worker's current op from, before each wait). A failing op is reported with its traceback
and ends the loop. Locally each worker also writes what it is doing (running an op, waiting for its device lock,
waiting for another worker's signal, sending into a full pipe) to a shared :class:`executor.watchdog.StatusBoard`,
and its process dumps its Python stack on ``SIGUSR1``: what the watchdog reports when a run stalls. The Ray
backend's actors run the same loop over a socket, with a mailbox that also reaches other nodes and wall-clock time
as their clock."""

from __future__ import annotations

import faulthandler
import signal
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

import attrs

from executor.channels import Mailbox, WorkerAddress
from executor.collective import FileRendezvous, join_group
from executor.devices import Device, DeviceLocks
from executor.messages import (
    BUFFERED,
    REBUFFER,
    Call,
    Command,
    Compute,
    EndRun,
    Failed,
    Hold,
    Offload,
    Onload,
    Prepare,
    Push,
    Ready,
    Record,
    Records,
    Result,
    RunLane,
    Send,
    Shutdown,
    SyncRecv,
    SyncSend,
    buffer_key,
    data_key,
    done_key,
)
from executor.offload import HostStore, owning_copy, tensor_bytes
from executor.protocol import Worker, share_slice, state_tensors
from executor.routing import Layout, Replica
from executor.stamps import attach, detach
from executor.watchdog import IDLE, LOCK, RUNNING, SENDING, WAITING, StatusBoard
from rlinf.api.worker_context import WorkerContext
from rlinf.core.component_facts import ComponentFacts
from rlinf.core.payloads import num_rows, slice_rows
from rlinf.core.phases import mark as mark_phase
from rlinf.core.schedule import Stamp, StampedPayload, check_lag, synced_version


@attrs.frozen(kw_only=True)
class WorkerSpec:
    """How to build the workers of one component."""

    factory: Any
    """A picklable callable (usually a class) returning a worker that follows :class:`executor.protocol.Worker`."""
    facts: ComponentFacts
    """What the program says of the component's batch, from which each replica's context is built
    (:func:`build_worker`)."""
    config: Any = None
    """Passed to ``setup``; must be picklable."""
    collective: bool = True
    """Whether the component's replicas form a ``torch.distributed`` group (when it has several): a worker that
    never calls a collective (an environment, a policy that only acts) says ``False``, so that it needs no group
    and may share a process with the other workers of its device (a process holds at most one group)."""


def grouped_components(layout: Layout, workers: Mapping[str, WorkerSpec]) -> tuple[str, ...]:
    """The components whose replicas form a collective group, in worker order: several replicas, and a spec that
    says :attr:`WorkerSpec.collective`."""
    return tuple(name for name in layout.components if len(layout.of(name)) > 1 and workers[name].collective)


@attrs.frozen(kw_only=True)
class Wiring:
    """Everything a worker process needs besides its workers' specs."""

    replicas: tuple[Replica, ...]
    """The workers this process hosts, all on ``device``, in worker order."""
    device: Device
    connection: Connection
    """Duplex pipe to the driver."""
    outbound: Mapping[int, Connection]
    """Per worker of another process, the pipe to that process."""
    inbound: tuple[Connection, ...]
    locks: DeviceLocks
    rendezvous: FileRendezvous | None = None
    """Where the collective group of :attr:`grouped` meets (``None``: no hosted worker joins a group)."""
    grouped: int | None = None
    """The hosted worker whose component's group this process joins."""
    status: Any = None
    """The shared array of a :class:`executor.watchdog.StatusBoard` where the process writes what each of its
    workers is doing, so that the driver can name it if the process dies or the run stalls."""
    stack_file: str | None = None
    """Where the process writes its Python stack when it gets ``SIGUSR1`` (the watchdog's report)."""
    spin_for: frozenset[int] = frozenset()
    """Workers on other cores whose signals this process polls for before sleeping (:data:`SPIN_S`)."""


def worker_main(wiring: Wiring, specs: Mapping[int, WorkerSpec]) -> None:
    """Process entry point: set up every hosted worker (``specs``: per worker id), then serve."""
    connection = wiring.connection
    hosted = frozenset(r.worker for r in wiring.replicas)
    mailbox = Mailbox(
        WorkerAddress(worker=wiring.replicas[0].worker),
        wiring.outbound,
        list(wiring.inbound),
        {},
        hosted=hosted,
    )
    runners: list[CommandRunner] = []
    current = wiring.replicas[0]
    board = None if wiring.status is None else StatusBoard(wiring.status)
    if wiring.stack_file is not None:
        faulthandler.register(signal.SIGUSR1, file=open(wiring.stack_file, "w"), all_threads=True)  # noqa: SIM115
    try:
        mark_phase("worker_process", device=wiring.device.torch_device)
        wiring.device.bind()
        mark_phase("device_bound", device=wiring.device.torch_device)
        for replica in wiring.replicas:
            current = replica
            if wiring.rendezvous is not None and replica.worker == wiring.grouped:
                join_group(wiring.rendezvous, wiring.device.collective_backend, replica.rank, replica.world)
            worker = build_worker(specs[replica.worker], replica, wiring.device)
            mark_phase("worker_ready", component=replica.component)
            runners.append(CommandRunner(worker, replica, wiring.device, mailbox, wiring.locks, board=board))
        for runner in runners:
            connection.send(Ready(runner.replica.worker, runner.resident_bytes()))
    except BaseException as error:  # report anything, including KeyboardInterrupt, then end
        connection.send(Failed(current.worker, -1, _describe(error), traceback.format_exc()))
        return
    serve(connection, Host(runners, mailbox, spin_for=wiring.spin_for))


def build_worker(spec: WorkerSpec, replica: Replica, device: Device) -> Worker:
    """The worker of ``replica``, set up with the spec's config and the replica's context: the component's facts
    with the replica's rank, world and ``device`` (bound, its collective group joined)."""
    worker: Worker = spec.factory()
    worker.setup(
        spec.config,
        WorkerContext.for_replica(spec.facts, rank=replica.rank, world=replica.world, device=device),
    )
    return worker


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


SPIN_S = 1e-3
"""How long a worker polls for the signals of ops on other cores before it sleeps. A sleeping process on this
project's 2-core VM woke ~50 us after the pipe write and then ran its next op about twice as slowly as in a hot
loop (a policy's act: 209 against 91 us): polling keeps the core awake between the loop's steps. After this long
the worker sleeps (a long wait, e.g. for training, costs one millisecond of polling)."""

FLUSH_EVERY_S = 0.05
"""A worker that runs ops without waiting sends its records at least this often (the driver's view of progress,
and a sign of life within the stall timeout)."""

_HOLDS_DEVICE = (Compute, Onload, Offload)
"""Commands that occupy the worker's device. A transfer occupies none; a weight sync is one op spanning two
components' workers, some of them on the same device, and the release graph already gives it those devices alone."""


_KEEPS_STATE = (Send, Hold)
"""Commands that cannot change the worker's state tensors (its resident bytes are not counted again after them)."""


class DriverGone(Exception):
    """The driver closed the connection or asked the worker to stop in the middle of a run."""


class CommandRunner:
    """Runs the commands of one worker and measures them."""

    def __init__(
        self,
        worker: Any,
        replica: Replica,
        device: Device,
        mailbox: Mailbox,
        locks: DeviceLocks | None = None,
        clock: Callable[[], float] = time.perf_counter,
        board: StatusBoard | None = None,
    ) -> None:
        self.worker = worker
        self.replica = replica
        self.device = device
        self.mailbox = mailbox
        """The mailbox of the process (shared by the workers it hosts)."""
        self.locks = locks
        self.clock = clock
        """``time.perf_counter`` (one system-wide monotonic clock on Linux) locally; wall time across nodes."""
        self.board = board
        """Where this worker says what it is doing (``None``: nobody reads it, on Ray)."""
        self.store = HostStore()
        self.outputs: dict[int, Mapping[str, Any]] = {}
        self.stamps: dict[int, int] = {}
        """Per op in :attr:`outputs`, the policy version its output is stamped with: the oldest of its inputs' (the
        data it derives from), or the run's own version for an op without inputs."""
        self.pending_weights: Mapping[str, Any] | None = None
        self.run_id = 0
        self.lane: tuple[Command, ...] = ()
        """The commands of the last lane received (reused when a run's :class:`RunLane` carries none)."""
        self.own_device = (self.replica.device,)
        self.skip: frozenset[int] = frozenset()
        """Workers that sit the current run out (:attr:`executor.messages.RunLane.skip`)."""
        self.lag = 0
        """How many runs before the current one lagged inputs come from (the plan's staleness bound)."""
        self.version = 0
        """The policy version of the current run's step (:attr:`executor.messages.RunLane.version`)."""
        self.last_resident: int | None = None
        """Resident bytes after the last command (CPU: counted from the state tensors)."""

    def resident_bytes(self) -> int:
        """State bytes on the device now."""
        if self.device.kind == "cuda":
            import torch

            return int(torch.cuda.memory_allocated(torch.device(self.device.torch_device)))
        return tensor_bytes(self.state_tensors())

    def state_tensors(self) -> list[Any]:
        """The worker's live state tensors (:func:`executor.protocol.state_tensors`)."""
        return state_tensors(self.worker)

    def end_run(self) -> None:
        """Forget this iteration's outputs."""
        self.outputs.clear()
        self.stamps.clear()

    def call(self, method: str, args: tuple = ()) -> Any:
        """Call a worker method between runs (``checkpoint``, ``restore``). A worker whose state is offloaded
        is onloaded for the call and offloaded again after it (its state tensors are empty while offloaded, and
        a restore may replace them, e.g. an optimizer's state); what the call returns keeps host copies of the
        state it views (a checkpoint's optimizer ``state_dict`` holds the live tensors)."""
        if method == BUFFERED:
            return self.mailbox.buffered(self.replica.worker)
        if method == REBUFFER:
            return self.mailbox.rebuffer(self.replica.worker, args[0])
        if not self.store.holds_state:
            return getattr(self.worker, method)(*args)
        self._onload()
        try:
            return owning_copy(getattr(self.worker, method)(*args), self.state_tensors())
        finally:
            self.store.offload(self.state_tensors())

    def close(self) -> None:
        """Free offloaded state."""
        self.store.close()

    def prepare(self, offloaded: bool) -> None:
        """Put the state where the program expects it at the start of an iteration (untimed)."""
        self.last_resident = None
        if offloaded and not self.store.holds_state:
            self.store.offload(self.state_tensors())
        elif not offloaded and self.store.holds_state:
            self._onload()

    def sits_out(self, command: Command) -> bool:
        """Whether this worker's part of ``command`` does nothing this run but signal: the worker sits the run out,
        or it receives weights from one that does."""
        if self.replica.worker in self.skip:
            return True
        return isinstance(command, SyncRecv) and command.source in self.skip

    def execute(self, command: Command) -> Record | Failed:
        """Run one command (its waits already met); returns its record or the failure."""
        if self.sits_out(command):
            now = self.clock()
            with self.mailbox.bundle():
                for destination in command.notify:
                    self.mailbox.send(destination, done_key(self.run_id, command.op, self.replica.worker), {})
            return Record(op=command.op, start=now, end=now, resident=self.last_resident or 0)
        holds_device = isinstance(command, _HOLDS_DEVICE) and self.locks is not None
        info: Mapping[str, Any] = {}
        board, me = self.board, self.replica.worker
        if board is not None:
            board.set(me, LOCK if holds_device else RUNNING, command.op)
        try:
            # The op's payloads and completion signals leave together, one message per destination, once it
            # has ended (so no consumer can start before this op's end), and after the device lock is released:
            # a process that waits for the lock reads no pipe, so a sender holding it could wait on a full pipe
            # to that process for ever.
            with self.mailbox.bundle():
                if holds_device:
                    assert self.locks is not None
                    self.locks.acquire(self.own_device)
                    if board is not None:
                        board.set(me, RUNNING, command.op)
                try:
                    start = self.clock()
                    moved, info, busy = self._run(command)
                    self.device.synchronize()  # a GPU op ends when its kernels do, not when they are queued
                    for destination in command.notify:
                        self.mailbox.send(
                            destination, done_key(self.run_id, command.op, self.replica.worker), {}
                        )
                    end = self.clock()
                finally:
                    if holds_device:
                        assert self.locks is not None
                        self.locks.release(self.own_device)
        except BaseException as error:
            return Failed(self.replica.worker, command.op, _describe(error), traceback.format_exc())
        if board is not None:
            board.set(me, IDLE)
        peak = self.device.peak_bytes()  # GPU: the most allocated during the op, counted by torch
        if peak is not None:
            resident = peak
        elif isinstance(command, _KEEPS_STATE) and self.last_resident is not None:
            resident = self.last_resident  # a send or hold leaves the worker's state as it was
        else:
            resident = self.resident_bytes()
        self.last_resident = resident
        busy = end - start if busy is None else busy
        return Record(
            op=command.op, start=start, end=end, info=dict(info), resident=resident, moved=moved, busy=busy
        )

    # ------------------------------------------------------------ commands
    def _run(self, command: Command) -> tuple[int, Mapping[str, Any], float | None]:
        """Run ``command``: bytes moved, the info, seconds in ``worker.compute`` (``None``: the op is all work)."""
        if isinstance(command, Compute):
            me = self.replica.worker
            received = [self.mailbox.receive(data_key(self.run_id, op, w), me) for op, w in command.inputs]
            earlier = self.run_id - self.lag
            received += [self.mailbox.pop(buffer_key(earlier, op, w), me) for op, w in command.lagged]
            inputs = [self._stamped(payload, command) for payload in received]
            begin = self.clock()
            data, info = self.worker.compute(command.name, command.micro_batch, command.step, inputs)
            busy = self.clock() - begin
            self.outputs[command.op] = data
            self.stamps[command.op] = min((p.stamp.policy_version for p in inputs), default=self.version)
            moved = self._push(command.op, command.pushes, command.share)
            moved += self._push(command.op, command.lagged_pushes, command.share, buffered=True)
            return moved, info, busy
        if isinstance(command, Send):
            moved = self._push(command.source_op, command.pushes, command.share)
            moved += self._push(command.source_op, command.lagged_pushes, command.share, buffered=True)
            return moved, {}, None
        if isinstance(command, Onload):
            return self._onload(), {}, None
        if isinstance(command, Offload):
            return (
                (0 if self.store.holds_state else self.store.offload(self.state_tensors())),
                {},
                None,
            )
        if isinstance(command, SyncSend):
            weights = attach(self.worker.weights(), synced_version(self.version))
            key = data_key(self.run_id, command.op, self.replica.worker)
            return sum(self.mailbox.send(d, key, weights) for d in command.destinations), {}, None
        if isinstance(command, SyncRecv):
            arrays, version = detach(
                self.mailbox.receive(data_key(self.run_id, command.op, command.source), self.replica.worker)
            )
            weights = StampedPayload(arrays, Stamp(version, version))
            if self.store.holds_state:
                self.pending_weights = weights  # loaded at the next onload; the state stays in host memory
            else:
                self.worker.load_weights(weights)
            return 0, {}, None
        assert isinstance(command, Hold), f"unknown command {command!r}"
        return 0, {}, None

    def _push(
        self, source_op: int, pushes: tuple[Push, ...], share: tuple[int, int], *, buffered: bool = False
    ) -> int:
        """Send each consumer its rows of ``source_op``'s output (``buffered``: for a consumer that reads them in a
        later run); the bytes carried."""
        if not pushes:
            return 0
        data, version = self.outputs[source_op], self.stamps[source_op]
        rows = num_rows(data)
        moved = 0
        key = (buffer_key if buffered else data_key)(self.run_id, source_op, self.replica.worker)
        for destination, rank, world in pushes:
            lo, hi = share_slice(rows, *share, rank, world)
            moved += self.mailbox.send(destination, key, attach(slice_rows(data, lo, hi), version))
        return moved

    def _stamped(self, payload: Mapping[str, Any], command: Compute) -> StampedPayload:
        """A received payload as the worker gets it: its arrays and stamp, read at this run's version; raises
        :class:`rlinf.core.schedule.LagBoundError` when it is further behind than the plan's bound."""
        arrays, version = detach(payload)
        stamp = Stamp(version, self.version)
        check_lag(stamp, self.lag, f"{self.replica.component}.{command.name}[{command.micro_batch}]")
        return StampedPayload(arrays, stamp)

    def _onload(self) -> int:
        moved = self.store.onload(self.state_tensors()) if self.store.holds_state else 0
        if self.pending_weights is not None:
            self.worker.load_weights(self.pending_weights)
            self.pending_weights = None
        return moved


class Host:
    """The workers of one process and the lanes it runs: every iteration it collects one :class:`RunLane` per
    hosted worker, then runs their commands merged in program order (:func:`merge_lanes`), waiting only for other
    processes' signals, and sends each worker's records to the driver in batches."""

    def __init__(
        self, runners: Sequence[CommandRunner], mailbox: Mailbox, *, spin_for: frozenset[int] = frozenset()
    ) -> None:
        self.runners = {runner.replica.worker: runner for runner in runners}
        self.mailbox = mailbox
        self.spin_for = spin_for
        """Workers whose signals are polled for (:data:`SPIN_S`) before sleeping."""
        self._received: dict[int, RunLane] = {}
        """The lanes of the coming run received so far, per hosted worker."""
        self._merged: tuple[tuple[CommandRunner, Command], ...] = ()
        self._board = next(iter(self.runners.values())).board
        self._sender = -1
        """The hosted worker whose command runs (and may find a pipe full)."""
        if self._board is not None:
            board = self._board
            mailbox.on_full = lambda peer: board.mark(self._sender, SENDING, peer)

    def runner(self, worker: int) -> CommandRunner:
        """The hosted worker ``worker``."""
        return self.runners[worker]

    def close(self) -> None:
        """Free every hosted worker's offloaded state."""
        for runner in self.runners.values():
            runner.close()

    def end_run(self) -> None:
        """Forget this iteration's outputs and received payloads."""
        for runner in self.runners.values():
            runner.end_run()
        self.mailbox.clear()

    def take_lane(self, message: RunLane) -> bool:
        """Keep one hosted worker's lane; whether the lanes of all of them are in (the run may start)."""
        self._received[message.worker] = message
        if len(self._received) < len(self.runners):
            return False
        lanes, self._received = self._received, {}
        changed = False
        for worker, lane in lanes.items():
            runner = self.runners[worker]
            runner.run_id = lane.run_id
            runner.skip, runner.lag, runner.version = lane.skip, lane.lag, lane.version
            if lane.commands is not None:
                runner.lane, changed = lane.commands, True
        if changed or not self._merged:
            merged = merge_lanes({w: r.lane for w, r in self.runners.items()})
            self._merged = tuple((self.runners[w], command) for w, command in merged)
        return True

    def run(self, connection: Connection) -> bool:
        """Run the merged lanes, sending records to the driver on ``connection``; ``False`` when a command failed
        (its :class:`Failed` has been sent). Raises :class:`DriverGone` when the driver went away or said shutdown
        while this process waited."""
        mailbox = self.mailbox
        pending: dict[int, list[Record]] = {}
        last_flush = time.monotonic()
        # Where the driver can see which op a worker runs (the local backend's status board), records go out
        # every FLUSH_EVERY_S; elsewhere (Ray) before each op, so that a dead worker's op can be named: the driver
        # takes the op after the last one recorded as running (flushing only before a wait left it one op behind
        # when an op's inputs had already arrived: the error named the op before the one that died).
        flush_before_each = self._board is None

        def flush() -> None:
            nonlocal last_flush
            for worker, records in pending.items():
                if records:
                    connection.send(Records(worker, tuple(records)))
            pending.clear()
            last_flush = time.monotonic()

        def flush_due() -> float | None:
            """Flush when the oldest pending record is due; seconds until the next flush (``None``: none)."""
            if not pending:
                return None
            left = last_flush + FLUSH_EVERY_S - time.monotonic()
            if left <= 0:
                flush()
                return None
            return left

        for runner, command in self._merged:
            me = runner.replica.worker
            keys = [done_key(runner.run_id, op, w) for op, w in command.waits]
            if flush_before_each:
                flush()
            ready = all(mailbox.has(k, me) for k in keys)
            if not ready and self.spin_for and all(w in self.spin_for for _, w in command.waits):
                ready = self._poll(keys, me)
            if not ready:
                self._await(keys, me, connection, flush_due, command)
            else:
                flush_due()
            self._sender = me
            outcome = runner.execute(command)
            if isinstance(outcome, Failed):
                flush()
                connection.send(outcome)
                return False
            pending.setdefault(me, []).append(outcome)
        flush()
        return True

    def _poll(self, keys: list[tuple], me: int) -> bool:
        """Read the pipes without sleeping for up to :data:`SPIN_S` or until every message in ``keys`` is in;
        whether they all are."""
        deadline = time.perf_counter() + SPIN_S
        while time.perf_counter() < deadline:
            self.mailbox.wait_any([], timeout=0)
            if all(self.mailbox.has(k, me) for k in keys):
                return True
        return False

    def _await(
        self,
        keys: list[tuple],
        me: int,
        connection: Connection,
        flush_due: Callable[[], float | None],
        command: Command,
    ) -> None:
        """Wait until every message in ``keys`` (the signals ``command`` waits for) has arrived, watching the driver's
        connection and sending records when they are due meanwhile; the status board says which signal is missing."""
        while True:
            missing = next(
                (w for k, w in zip(keys, command.waits, strict=True) if not self.mailbox.has(k, me)), None
            )
            if missing is None:
                return
            if self._board is not None:
                self._board.set_peer(me, WAITING, command.op, *missing)
            if self.mailbox.wait_any([connection], timeout=flush_due()):
                try:
                    message = connection.recv()
                except (EOFError, OSError):
                    raise DriverGone() from None
                assert isinstance(message, Shutdown), f"unexpected {message!r} during a run"
                raise DriverGone()


def merge_lanes(lanes: Mapping[int, Sequence[Command]]) -> list[tuple[int, Command]]:
    """The commands of one process's workers (``lanes``: per worker, in program order) as one sequence in program
    order, without the waits and signals between those workers: the program's ops are stored in a topological
    order of its release graph, so every op a command follows has run before it in this sequence. Within one op
    (a weight sync between two hosted workers) the sender comes first."""
    hosted = set(lanes)
    merged = [
        (
            worker,
            attrs.evolve(
                command,
                waits=tuple(w for w in command.waits if w[1] not in hosted),
                notify=tuple(n for n in command.notify if n not in hosted),
            ),
        )
        for worker, lane in lanes.items()
        for command in lane
    ]
    merged.sort(key=lambda item: (item[1].op, not isinstance(item[1], SyncSend), item[0]))
    return merged


def serve(connection: Connection, host: Host) -> None:
    """Answer the driver's messages on ``connection`` until shutdown (or the driver goes away); both backends'
    worker processes run this loop."""
    mailbox = host.mailbox
    while True:
        # Drain data pipes while idle too, so that a sender never blocks on a full pipe to an idle worker.
        try:
            if not mailbox.wait_any([connection]):
                continue
            message = connection.recv()
        except (EOFError, OSError):
            return
        if isinstance(message, Shutdown):
            host.close()
            return
        if isinstance(message, RunLane):
            if not host.take_lane(message):
                continue
            try:
                if not host.run(connection):
                    return
            except DriverGone:
                host.close()
                return
        elif isinstance(message, Prepare):
            runner = host.runner(message.worker)
            runner.prepare(message.offloaded)
            connection.send(Ready(message.worker, runner.resident_bytes()))
        elif isinstance(message, EndRun):
            host.end_run()
        elif isinstance(message, Call):
            connection.send(
                Result(message.worker, host.runner(message.worker).call(message.method, message.args))
            )
        else:
            raise AssertionError(f"unknown message {message!r}")
