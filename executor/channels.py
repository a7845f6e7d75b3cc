"""Channels carry micro-batches between workers; the transport is picked from the placement.

* ``local``: producer and consumer are the same worker process, so the payload object is handed over.
* ``shm``: different processes on the same machine. Arrays of at least :data:`SHM_MIN_BYTES` are copied once into
  a shared-memory segment and only a small header travels through the pipe; the receiver copies them out and
  frees the segment. Smaller arrays travel inline in the pipe, where a segment would cost more than it saves.
* Workers on other nodes need a network transport, which the local backend does not have.

Every pipe carries headers and small arrays only; a receiver drains all of its pipes while it waits for the
message it needs and while it is idle, so a sender never blocks for long on a full pipe.
"""

from __future__ import annotations

from collections.abc import Mapping
from multiprocessing import shared_memory
from multiprocessing.connection import Connection, wait
from typing import Any

import attrs
import numpy as np

from rlinf.errors import ConfigError

SHM_MIN_BYTES = 16 * 1024
"""Arrays this large or larger go through shared memory; smaller ones inline."""

TRANSPORTS = ("local", "shm")


@attrs.frozen
class WorkerAddress:
    """Where a worker lives."""

    worker: int
    """Worker id within the backend (one per component replica)."""
    node: int = 0
    """Machine it runs on."""


def choose_transport(src: WorkerAddress, dst: WorkerAddress) -> str:
    """``local`` within a process, ``shm`` within a machine; raises across machines."""
    if src.worker == dst.worker:
        return "local"
    if src.node == dst.node:
        return "shm"
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
        if array.nbytes >= min_shm_bytes:
            segment = shared_memory.SharedMemory(create=True, size=array.nbytes)
            np.ndarray(array.shape, dtype=array.dtype, buffer=segment.buf)[...] = array
            packed[key] = _SharedArray(name=segment.name, shape=array.shape, dtype=array.dtype.str)
            segment.close()
        else:
            packed[key] = array
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
        else:
            out[key] = value
    return out


class Mailbox:
    """One worker's ends of its channels: a pipe to every other worker and one from each."""

    def __init__(
        self,
        me: WorkerAddress,
        outbound: Mapping[int, Connection],
        inbound: list[Connection],
        nodes: Mapping[int, int],
    ) -> None:
        self.me = me
        self._outbound = dict(outbound)
        self._inbound = list(inbound)
        self._nodes = dict(nodes)
        self._arrived: dict[tuple, dict[str, np.ndarray]] = {}

    def send(self, dst: int, key: tuple, payload: Mapping[str, np.ndarray]) -> int:
        """Deliver ``payload`` under ``key`` to worker ``dst``; returns the bytes carried."""
        transport = choose_transport(self.me, WorkerAddress(worker=dst, node=self._nodes.get(dst, 0)))
        if transport == "local":
            self._arrived[key] = dict(payload)
            return 0
        packed, num_bytes = pack(payload)
        self._outbound[dst].send((key, packed))
        return num_bytes

    def receive(self, key: tuple) -> dict[str, np.ndarray]:
        """The payload sent under ``key``, waiting for it if needed (messages for other keys are kept)."""
        while key not in self._arrived:
            assert self._inbound, f"message {key} can only come from this worker, which never sent it"
            for connection in wait(self._inbound):
                assert isinstance(connection, Connection)
                self.take(connection)
        return self._arrived[key]

    @property
    def inbound(self) -> list[Connection]:
        """The pipes other workers send on."""
        return list(self._inbound)

    def take(self, connection: Connection) -> None:
        """Read one message from ``connection`` into the mailbox."""
        key, packed = connection.recv()
        self._arrived[key] = unpack(packed)

    def clear(self) -> None:
        """Drop every received payload (end of an iteration)."""
        self._arrived.clear()
