"""Channels carry micro-batches between workers; the transport is picked from the placement.

* ``local``: producer and consumer live in the same process (the same worker, or two workers the local backend
  hosts together because they share a device), so the arrays are handed over (copied when they go to another
  worker, which may change its inputs in place).
* ``shm``: different processes on the same machine. Arrays of at least :data:`SHM_MIN_BYTES` are copied once into
  a shared-memory segment and only a small header travels through the pipe; the receiver copies them out and
  frees the segment. Smaller arrays travel inline in the pipe (as dtype, shape and bytes), where a segment would
  cost more than it saves.
* ``object_store``: workers on different nodes (Ray backend only): the payload goes to the consumer as the
  argument of an actor call, which Ray moves through its object store (:class:`RemoteInbox` on the consumer's
  side). The local backend has no transport between nodes.

Every pipe carries headers and small arrays only; a receiver drains all of its pipes while it waits for the
message it needs and while it is idle. A pipe still fills (64 KiB on Linux) when a message, or the messages a busy
receiver has not read yet, hold more: arrays under :data:`SHM_MIN_BYTES` travel inline, and a loop cut into many
stages sends many of them at once (issue 48: Hopper with 8 environments x 188 steps in 4 stages on 2 cores sends
the other core's actor replica 2 x 32.7 KB). Both ends of every pipe are therefore non-blocking
(:mod:`executor.pipes`): a sender whose message does not fit reads its own inbound pipes while it waits for room
(:meth:`Mailbox.write`), so two processes that write each other at once no longer both sleep in a full pipe.

A worker sends what one op produces as one pipe message per destination process (:meth:`Mailbox.bundle`): the
op's payloads and its completion signals arrive together, so a waiting consumer wakes once per op it waits for, not
once for the data and again for the signal (on a shared core each wake is a context switch). Every message is
stored under its destination worker and its key, so that the workers of one process keep apart what each
received.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
from collections.abc import Callable, Iterator, Mapping
from multiprocessing import shared_memory
from multiprocessing.connection import Connection, wait
from typing import Any

import attrs
import numpy as np

from executor.pipes import InboundPipe, frame, write_some
from rlinf.core.errors import ConfigError

SHM_MIN_BYTES = 16 * 1024
"""Arrays this large or larger go through shared memory; smaller ones inline."""

RemoteSend = Callable[[int, tuple, dict[str, np.ndarray]], None]
"""Sends ``(destination worker, key, arrays)`` to a worker on another node (the Ray backend's actor call)."""


@attrs.frozen
class WorkerAddress:
    """Where a worker lives."""

    worker: int
    """Worker id within the backend (one per component replica)."""
    node: int = 0
    """Machine it runs on."""


def choose_transport(
    src: WorkerAddress, dst: WorkerAddress, *, across_nodes: bool = False, same_process: bool = False
) -> str:
    """``local`` within a process (the same worker, or ``same_process``: both hosted by one process), ``shm``
    within a machine, ``object_store`` across machines when the backend has one (``across_nodes``); raises across
    machines otherwise."""
    if src.worker == dst.worker or same_process:
        return "local"
    if src.node == dst.node:
        return "shm"
    if across_nodes:
        return "object_store"
    raise ConfigError(
        "placement",
        f"worker {src.worker}@node{src.node} -> worker {dst.worker}@node{dst.node}",
        "the local backend has no transport between machines",
        "place communicating components on one node",
    )


@attrs.frozen
class _SharedArray:
    """Header of an array parked in a shared-memory segment."""

    name: str
    shape: tuple[int, ...]
    dtype: str


def pack(payload: Mapping[str, np.ndarray], min_shm_bytes: int = SHM_MIN_BYTES) -> tuple[dict[str, Any], int]:
    """Headers for ``payload`` (large arrays copied into new shared-memory segments) and the bytes carried."""
    packed: dict[str, Any] = {}
    total = 0
    for key, value in payload.items():
        array = np.ascontiguousarray(value)
        total += array.nbytes
        if array.dtype.hasobject:
            packed[key] = array  # Python objects: pickled with the message
        elif array.nbytes >= min_shm_bytes:
            segment = shared_memory.SharedMemory(create=True, size=array.nbytes)
            np.ndarray(array.shape, dtype=array.dtype, buffer=segment.buf)[...] = array
            packed[key] = _SharedArray(name=segment.name, shape=array.shape, dtype=array.dtype.str)
            segment.close()
        else:
            # dtype, shape and raw bytes: pickling builtins costs a quarter of what an ndarray's reduce does
            # (11 -> 3 us for a loop step's four small arrays here), paid on every hand-off
            packed[key] = (array.dtype.str, array.shape, array.tobytes())
    return packed, total


def unpack(packed: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Arrays from :func:`pack` headers; frees the shared-memory segments."""
    out: dict[str, np.ndarray] = {}
    for key, value in packed.items():
        if isinstance(value, _SharedArray):
            segment = shared_memory.SharedMemory(name=value.name)
            out[key] = np.ndarray(value.shape, dtype=np.dtype(value.dtype), buffer=segment.buf).copy()
            segment.close()
            segment.unlink()
        elif isinstance(value, tuple):
            dtype, shape, raw = value
            out[key] = np.frombuffer(bytearray(raw), dtype=np.dtype(dtype)).reshape(shape)
        else:
            out[key] = value
    return out


class RemoteInbox:
    """Payloads from workers on other nodes, handed in by another thread (the actor call that carried them).

    The receiving thread waits on :meth:`fileno` alongside its pipes; :meth:`put` stores the payload, then
    writes a byte to wake it."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        self._lock = threading.Lock()
        self._arrived: dict[tuple, dict[str, np.ndarray]] = {}

    def fileno(self) -> int:
        """Readable when payloads arrived since the last :meth:`take`."""
        return self._read

    def put(self, key: tuple, payload: Mapping[str, np.ndarray]) -> None:
        """Store ``payload`` (called by the delivering thread) and wake the receiver."""
        with self._lock:
            self._arrived[key] = {name: np.array(value) for name, value in payload.items()}  # writable copies
        os.write(self._write, b"\0")

    def take(self) -> dict[tuple, dict[str, np.ndarray]]:
        """Everything that arrived since the last call."""
        os.read(self._read, 65536)
        with self._lock:
            out, self._arrived = self._arrived, {}
        return out


class Mailbox:
    """The ends of one process's channels: a pipe to every other worker process on its node and one from each,
    plus, in the Ray backend, the object-store path to and from workers on other nodes. A process hosts one
    worker (Ray) or every worker of one device (the local backend, :attr:`hosted`); what arrives is kept per
    destination worker."""

    def __init__(
        self,
        me: WorkerAddress,
        outbound: Mapping[int, Connection],
        inbound: list[Connection],
        nodes: Mapping[int, int],
        *,
        remote_send: RemoteSend | None = None,
        remote_inbox: RemoteInbox | None = None,
        hosted: frozenset[int] = frozenset(),
    ) -> None:
        self.me = me
        self.hosted = hosted | {me.worker}
        """Workers that live in this process (``me`` and the workers hosted with it)."""
        self._outbound = dict(outbound)
        """Per destination worker, the pipe to its process (workers of one process share a pipe); written without
        blocking (:meth:`write`)."""
        for pipe in {id(p): p for p in self._outbound.values()}.values():
            os.set_blocking(pipe.fileno(), False)
        self._inbound: list[Any] = [InboundPipe(c) for c in inbound]
        """Non-blocking reading ends (:class:`executor.pipes.InboundPipe`), and the inbox from other nodes."""
        if remote_inbox is not None:
            self._inbound.append(remote_inbox)
        self._nodes = dict(nodes)
        self._remote_send = remote_send
        self._arrived: dict[tuple, Mapping[str, Any]] = {}
        """``(destination worker, key) -> payload``."""
        self._held: dict[int, tuple[Connection, list[tuple[int, tuple, dict[str, Any]]]]] | None = None
        """Messages per destination pipe kept back while a :meth:`bundle` is open (``None``: none open)."""
        self._held_remote: list[tuple[int, tuple, dict[str, np.ndarray]]] = []
        """Payloads for other nodes kept back while a :meth:`bundle` is open, in the order sent."""
        self.on_full: Callable[[int], None] | None = None
        """Called with the destination worker when a message does not fit its pipe (the sender says so on its
        status board, :mod:`executor.watchdog`)."""

    def send(self, dst: int, key: tuple, payload: Mapping[str, np.ndarray]) -> int:
        """Deliver ``payload`` under ``key`` to worker ``dst``; returns the bytes carried (0 within a process)."""
        transport = choose_transport(
            self.me,
            WorkerAddress(worker=dst, node=self._nodes.get(dst, self.me.node)),
            across_nodes=self._remote_send is not None,
            same_process=dst in self.hosted,
        )
        if transport == "local":
            if dst == self.me.worker:
                self._arrived[(dst, key)] = dict(payload)
            else:  # another worker of this process: its own arrays, as if they had crossed a pipe
                self._arrived[(dst, key)] = {
                    name: np.array(value) if isinstance(value, np.ndarray) else value
                    for name, value in payload.items()
                }
            return 0
        if transport == "object_store":
            assert self._remote_send is not None
            arrays = {name: np.ascontiguousarray(value) for name, value in payload.items()}
            if self._held is not None:
                self._held_remote.append((dst, key, arrays))
            else:
                self._remote_send(dst, key, arrays)
            return sum(a.nbytes for a in arrays.values())
        packed, num_bytes = pack(payload)
        pipe = self._outbound[dst]
        if self._held is not None:
            self._held.setdefault(id(pipe), (pipe, []))[1].append((dst, key, packed))
        else:
            self.write(pipe, [(dst, key, packed)])
        return num_bytes

    def write(self, pipe: Connection, items: list[tuple[int, tuple, dict[str, Any]]]) -> None:
        """Send ``items`` on ``pipe`` as one message; while it does not fit, read the inbound pipes into the mailbox
        (a process never sleeps in a write while the process it writes to sleeps in a write to it)."""
        data, fd = frame(items), pipe.fileno()
        while True:
            data = write_some(fd, data)
            if not data:
                return
            if self.on_full is not None:
                self.on_full(items[0][0])
            with selectors.DefaultSelector() as selector:
                selector.register(fd, selectors.EVENT_WRITE)
                for source in self._inbound:
                    selector.register(source, selectors.EVENT_READ)
                for key, _ in selector.select():
                    if key.fd != fd:
                        with contextlib.suppress(EOFError):  # that peer has exited; the driver stops the run
                            self.take(key.fileobj)

    @contextlib.contextmanager
    def bundle(self) -> Iterator[None]:
        """Keep back what is sent to other processes inside the block and send it on leaving, one pipe message
        per destination process, in the order sent (nothing is sent when the block raises). What goes to other
        nodes (through Ray) is kept back too: sent inside the block, a consumer on another node could start before
        the producer's recorded end (a timeline with an op starting before its dependency ended)."""
        assert self._held is None, "bundles do not nest"
        self._held, self._held_remote = {}, []
        try:
            yield
            held, remote = self._held, self._held_remote
        finally:
            self._held, self._held_remote = None, []
        for pipe, items in held.values():
            self.write(pipe, items)
        for dst, key, arrays in remote:
            assert self._remote_send is not None
            self._remote_send(dst, key, arrays)

    def receive(self, key: tuple, worker: int | None = None) -> Mapping[str, Any]:
        """The payload sent to ``worker`` (default: :attr:`me`) under ``key``, waiting for it if needed (messages
        for other keys are kept)."""
        slot = (self.me.worker if worker is None else worker, key)
        while slot not in self._arrived:
            assert self._inbound, f"message {key} can only come from this process, which never sent it"
            for source in wait(self._inbound):
                self.take(source)
        return self._arrived[slot]

    def has(self, key: tuple, worker: int | None = None) -> bool:
        """Whether a message sent to ``worker`` (default: :attr:`me`) under ``key`` has arrived."""
        return (self.me.worker if worker is None else worker, key) in self._arrived

    def wait_any(self, also: list[Any], timeout: float | None = None) -> list[Any]:
        """Wait (at most ``timeout`` seconds) until some pipe or one of ``also`` is readable; read the pipes that
        are into the mailbox (a pipe whose sender has gone is dropped) and return those of ``also`` that are
        readable."""
        ready = wait(self._inbound + also, timeout)
        watched = [source for source in ready if any(source is extra for extra in also)]
        for source in ready:
            if source not in watched:
                # EOFError: that peer has exited; the driver notices and stops the run
                with contextlib.suppress(EOFError):
                    self.take(source)
        return watched

    @property
    def inbound(self) -> list[Any]:
        """What other workers send on: pipes, and the inbox of payloads from other nodes."""
        return list(self._inbound)

    def take(self, source: Any) -> None:
        """Read the messages ``source`` (one of :attr:`inbound`) holds whole into the mailbox, without waiting;
        raises ``EOFError`` when a pipe's sender has gone, after which the pipe is no longer waited on."""
        if isinstance(source, RemoteInbox):  # a Ray actor hosts one worker: what arrives is for it
            self._arrived.update(((self.me.worker, key), payload) for key, payload in source.take().items())
            return
        try:
            messages = source.read()
        except EOFError:
            self._inbound.remove(source)
            raise
        for items in messages:
            for dst, key, packed in items:
                self._arrived[(dst, key)] = unpack(packed)

    def pop(self, key: tuple, worker: int | None = None) -> Mapping[str, Any]:
        """:meth:`receive`, then forget the payload (a buffered input, read once)."""
        payload = self.receive(key, worker)
        del self._arrived[(self.me.worker if worker is None else worker, key)]
        return payload

    def buffered(self, worker: int) -> list[tuple[tuple, Mapping[str, Any]]]:
        """The buffered payloads ``worker`` holds (keys starting with ``"buffer"``), oldest first."""
        return sorted(
            (
                (key, payload)
                for (dst, key), payload in self._arrived.items()
                if dst == worker and key[0] == "buffer"
            ),
            key=lambda item: item[0][1:],
        )

    def rebuffer(self, worker: int, items: list[tuple[tuple, Mapping[str, Any]]]) -> None:
        """Put buffered payloads back for ``worker`` (a checkpoint's, when a run resumes)."""
        for key, payload in items:
            self._arrived[(worker, tuple(key))] = dict(payload)

    def clear(self) -> None:
        """Drop every received payload (end of an iteration) but the buffered ones, which a later run reads."""
        self._arrived = {slot: payload for slot, payload in self._arrived.items() if slot[1][0] == "buffer"}
