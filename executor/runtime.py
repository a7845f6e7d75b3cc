"""The worker side of the backends: :class:`CommandRunner` executes commands, :func:`serve` is the worker loop.

A worker process binds itself to its device, joins the component's collective group, builds the worker, then
executes the batches of commands the driver sends, one op at a time (under its device lock in the local backend),
replying after each op with measured start/end times, the bytes moved and the state bytes it now holds. A failing
op is reported with its traceback and ends the loop. The Ray backend's actors run the same loop over a socket,
with a mailbox that also reaches other nodes and wall-clock time as their clock."""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection, wait
from typing import Any

import attrs

from executor.channels import Mailbox, WorkerAddress
from executor.collective import FileRendezvous, join_group
from executor.devices import Device, DeviceLocks
from executor.offload import HostStore, tensor_bytes
from executor.protocol import num_rows, share_slice, slice_rows
from executor.routing import Replica


@attrs.frozen(kw_only=True)
class WorkerSpec:
    """How to build the workers of one component."""

    factory: Any
    """A picklable callable (usually a class) returning a worker that follows :class:`executor.protocol.Worker`."""
    config: Any = None
    """Passed to ``setup``; must be picklable."""


@attrs.frozen(kw_only=True)
class Wiring:
    """Everything a worker process needs besides its spec."""

    replica: Replica
    device: Device
    connection: Connection
    """Duplex pipe to the driver."""
    outbound: Mapping[int, Connection]
    inbound: tuple[Connection, ...]
    locks: DeviceLocks
    rendezvous: FileRendezvous | None = None
    """Where the component's collective group meets (``None`` when the component has one replica)."""


def worker_main(wiring: Wiring, spec: WorkerSpec) -> None:
    """Process entry point."""
    replica = wiring.replica
    connection = wiring.connection
    try:
        wiring.device.bind()
        if wiring.rendezvous is not None:
            join_group(wiring.rendezvous, wiring.device.collective_backend, replica.rank, replica.world)
        worker = spec.factory()
        worker.setup(spec.config, replica.rank, replica.world, wiring.device)
        mailbox = Mailbox(WorkerAddress(worker=replica.worker), wiring.outbound, list(wiring.inbound), {})
        runner = CommandRunner(worker, replica, wiring.device, mailbox, wiring.locks)
        connection.send(("ready", replica.worker, runner.resident_bytes()))
    except BaseException as error:  # report anything, including KeyboardInterrupt, then end
        connection.send(("error", replica.worker, -1, _describe(error), traceback.format_exc()))
        return
    serve(connection, runner)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


class CommandRunner:
    """Executes commands for one worker and returns a reply per command (``done`` or ``error``)."""

    def __init__(
        self,
        worker: Any,
        replica: Replica,
        device: Device,
        mailbox: Mailbox,
        locks: DeviceLocks | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.worker = worker
        self.replica = replica
        self.device = device
        self.mailbox = mailbox
        self.locks = locks
        self.clock = clock
        """``time.perf_counter`` (one system-wide monotonic clock on Linux) locally; wall time across nodes."""
        self.store = HostStore()
        self.outputs: dict[int, Mapping[str, Any]] = {}
        self.pending_weights: Mapping[str, Any] | None = None
        self.run_id = 0
        self.own_device = (self.replica.device,)

    def resident_bytes(self) -> int:
        """State bytes on the device now."""
        if self.device.kind == "cuda":
            import torch

            return int(torch.cuda.memory_allocated(torch.device(self.device.torch_device)))
        return tensor_bytes(self.worker.state_tensors())

    def end_run(self) -> None:
        """Forget this iteration's outputs and received payloads."""
        self.outputs.clear()
        self.mailbox.clear()

    def call(self, method: str, args: tuple = ()) -> Any:
        """Call a worker method between runs (``checkpoint``, ``restore``)."""
        return getattr(self.worker, method)(*args)

    def close(self) -> None:
        """Free offloaded state."""
        self.store.close()

    def prepare(self, offloaded: bool) -> None:
        """Put the state where the program expects it at the start of an iteration (untimed)."""
        if offloaded and not self.store.holds_state:
            self.store.offload(self.worker.state_tensors())
        elif not offloaded and self.store.holds_state:
            self._onload()

    def execute(self, command: tuple) -> tuple:
        """Run one command; returns ``("done", worker, op, start, end, info, resident, moved)`` or
        ``("error", worker, op, description, traceback)``."""
        kind, op_index = command[0], command[1]
        # A transfer occupies no device; a weight sync is one op spanning two components' workers, some of them
        # on the same device, and the interpreter already gives it those devices alone.
        holds_device = kind in ("compute", "onload", "offload") and self.locks is not None
        info: Mapping[str, Any] = {}
        if holds_device:
            assert self.locks is not None
            self.locks.acquire(self.own_device)
        try:
            start = self.clock()
            moved, info = getattr(self, f"_{kind}")(*command[1:])
            self.device.synchronize()  # a GPU op ends when its kernels do, not when they are queued
            end = self.clock()
        except BaseException as error:
            return ("error", self.replica.worker, op_index, _describe(error), traceback.format_exc())
        finally:
            if holds_device:
                assert self.locks is not None
                self.locks.release(self.own_device)
        peak = self.device.peak_bytes()  # GPU: the most allocated during the op, counted by torch
        resident = self.resident_bytes() if peak is None else peak
        return ("done", self.replica.worker, op_index, start, end, dict(info), resident, moved)

    # ------------------------------------------------------------ commands
    def _compute(
        self, op_index: int, name: str, micro_batch: int, step: int, input_keys: tuple, pushes: tuple
    ) -> tuple[int, Mapping]:
        inputs = [self.mailbox.receive((self.run_id, producer, source)) for producer, source in input_keys]
        data, info = self.worker.compute(name, micro_batch, step, inputs)
        self.outputs[op_index] = data
        return self._push(op_index, pushes), info

    def _send(self, op_index: int, source_op: int, pushes: tuple) -> tuple[int, Mapping]:
        return self._push(source_op, pushes), {}

    def _push(self, source_op: int, pushes: tuple) -> int:
        data = self.outputs[source_op]
        rows = num_rows(data)
        moved = 0
        for destination, rank, world in pushes:
            lo, hi = share_slice(rows, self.replica.rank, self.replica.world, rank, world)
            moved += self.mailbox.send(
                destination, (self.run_id, source_op, self.replica.worker), slice_rows(data, lo, hi)
            )
        return moved

    def _onload(self, op_index: int = -1) -> tuple[int, Mapping]:
        moved = self.store.onload(self.worker.state_tensors()) if self.store.holds_state else 0
        if self.pending_weights is not None:
            self.worker.load_weights(self.pending_weights)
            self.pending_weights = None
        return moved, {}

    def _offload(self, op_index: int) -> tuple[int, Mapping]:
        moved = 0 if self.store.holds_state else self.store.offload(self.worker.state_tensors())
        return moved, {}

    def _sync_send(self, op_index: int, destinations: tuple[int, ...]) -> tuple[int, Mapping]:
        weights = self.worker.weights()
        moved = sum(
            self.mailbox.send(d, (self.run_id, op_index, self.replica.worker), weights) for d in destinations
        )
        return moved, {}

    def _sync_recv(self, op_index: int, source: int) -> tuple[int, Mapping]:
        weights = self.mailbox.receive((self.run_id, op_index, source))
        if self.store.holds_state:
            self.pending_weights = weights  # loaded at the next onload; the state stays in host memory
        else:
            self.worker.load_weights(weights)
        return 0, {}

    def _hold(self, op_index: int) -> tuple[int, Mapping]:
        return 0, {}


def serve(connection: Connection, runner: CommandRunner) -> None:
    """Answer the driver's messages on ``connection`` until shutdown (or the driver goes away); both backends'
    workers run this loop."""
    mailbox = runner.mailbox
    while True:
        # Drain data pipes while idle too, so that a sender never blocks on a full pipe to an idle worker.
        try:
            ready = wait([connection, *mailbox.inbound])
            for source in ready:
                if source is not connection:
                    with contextlib.suppress(EOFError):  # that peer has exited; the driver deals with it
                        mailbox.take(source)
            if connection not in ready:
                continue
            message = connection.recv()
        except (EOFError, OSError):
            return
        kind = message[0]
        if kind == "shutdown":
            runner.close()
            return
        if kind == "run":
            _, runner.run_id, commands = message
            for command in commands:
                reply = runner.execute(command)
                connection.send(reply)
                if reply[0] == "error":
                    return
        elif kind == "prepare":
            runner.prepare(message[1])
            connection.send(("ready", runner.replica.worker, runner.resident_bytes()))
        elif kind == "end":
            runner.end_run()
        elif kind == "call":
            connection.send(("result", runner.replica.worker, runner.call(message[1], message[2])))
        else:
            raise AssertionError(f"unknown message {kind!r}")
