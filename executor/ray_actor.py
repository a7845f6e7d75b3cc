"""The worker side of the Ray backend: one actor per component replica, talking to the driver and its peers
over direct connections.

Ray places the actor, starts its process, moves payloads between nodes and notices its death; the per-op
traffic does not go through Ray's task submission (about a millisecond per call), but over connections the
actor opens at start-up:

* **control**: a TCP connection to the driver, on which the actor runs :func:`executor.runtime.serve`, the local
  backend's worker loop: batches of commands in, one reply per op out;
* **same node**: a Unix-socket connection to every other actor of its node, carrying
  :mod:`executor.channels` messages (arrays of 16 KiB or more through shared memory, as in the local backend);
* **other nodes**: the producer calls the consumer actor's :meth:`RayWorker.deliver` with the arrays; Ray
  carries them (through its object store when they are large) and a second thread of the consumer actor hands
  them to its mailbox (:class:`executor.channels.RemoteInbox`).

Every connection starts with a hello: the run's random token and the sender's worker id; a connection without
the token is closed. Ops finish on wall-clock time (``time.time``), the one clock the nodes of a cluster share
(through NTP). Data-parallel replicas join a ``torch.distributed`` group (gloo on CPUs, NCCL on GPUs) at rank
0's node address.
"""

from __future__ import annotations

import hmac
import os
import pickle
import shutil
import socket
import struct
import tempfile
import time
import traceback
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

import attrs
import numpy as np
import ray

from executor.channels import Mailbox, RemoteInbox, WorkerAddress
from executor.devices import Device
from executor.routing import Replica
from executor.runtime import CommandRunner, WorkerSpec, serve

HELLO = struct.Struct("!32si")
"""A connection's first message: the run's token and the sender's worker id."""
HELLO_TIMEOUT_S = 30.0
"""How long an accepted connection may take to say hello."""


def hello(token: bytes, worker: int) -> bytes:
    """The first message on every connection of a run."""
    return HELLO.pack(token, worker)


def read_hello(connection: Connection, token: bytes, timeout_s: float = HELLO_TIMEOUT_S) -> int | None:
    """The worker id from ``connection``'s hello, or ``None`` (connection closed) when it has none or the
    token is wrong. Reads raw bytes: nothing from an unauthenticated peer is unpickled."""
    try:
        if not connection.poll(timeout_s):
            raise OSError("no hello")
        sent, worker = HELLO.unpack(connection.recv_bytes(maxlength=HELLO.size))
    except (OSError, EOFError, struct.error):
        connection.close()
        return None
    if not hmac.compare_digest(sent, token):
        connection.close()
        return None
    return int(worker)


class PlainConnection(Connection):
    """A connection that pickles with plain :mod:`pickle`: tensors travel as bytes. (``Connection.send`` uses
    multiprocessing's pickler, for which torch passes a tensor's shared-memory file descriptor instead, which only
    works between processes of one ``multiprocessing`` family on one machine.)"""

    def send(self, obj: Any) -> None:
        """Pickle ``obj`` and send it."""
        self.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    def recv(self) -> Any:
        """Receive and unpickle one object."""
        return pickle.loads(self.recv_bytes())


def socket_connection(sock: socket.socket) -> Connection:
    """A blocking :class:`PlainConnection` over ``sock`` (which it takes over)."""
    sock.setblocking(True)
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return PlainConnection(sock.detach())


class RayWorker:
    """Actor body (run with ``max_concurrency`` >= 2: :meth:`serve` occupies one thread for the actor's life,
    :meth:`deliver` and :meth:`describe` use the others)."""

    def __init__(self, replica: Replica, device: Device, spec: WorkerSpec, token: bytes) -> None:
        self.replica = replica
        self.device = attrs.evolve(device, core=0) if device.kind == "cuda" else device
        # Ray exposes the GPU it assigned as the only visible one
        self.spec = spec
        self.token = token
        self.runner: CommandRunner | None = None
        self.inbox = RemoteInbox()
        self.mailbox: Mailbox | None = None
        self._directory = tempfile.mkdtemp(prefix="rlinf-peers-")  # mode 0700: only this user can connect
        self._listener: socket.socket | None = None

    def describe(self) -> tuple[int, str, str, tuple[int, ...]]:
        """(pid, Ray node id, node IP, GPU ids Ray gave this actor)."""
        gpus = tuple(int(g) for g in ray.get_gpu_ids())
        node_id = ray.get_runtime_context().get_node_id()
        return os.getpid(), node_id, ray.util.get_node_ip_address(), gpus

    def collective_address(self) -> str:
        """A free TCP address on this node for the component's collective group (called on rank 0)."""
        host = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            return f"tcp://{host}:{probe.getsockname()[1]}"

    def listen(self, num_peers: int) -> str:
        """Open this actor's Unix socket for its ``num_peers`` same-node peers; returns its path."""
        path = os.path.join(self._directory, "peers.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(max(1, num_peers))  # the backlog holds every peer's connect until accept
        return path

    def connect(self, peers: Mapping[int, str], remote: Mapping[int, Any], nodes: Mapping[int, int]) -> None:
        """Connect to same-node ``peers`` (worker -> socket path), accept theirs, and build the mailbox;
        ``remote`` maps the workers on other nodes to their actor handles."""
        me = self.replica.worker
        outbound = {}
        for worker, path in peers.items():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            outbound[worker] = socket_connection(sock)
            outbound[worker].send_bytes(hello(self.token, me))
        inbound: list[Connection] = []
        assert self._listener is not None, "listen() comes first"
        self._listener.settimeout(HELLO_TIMEOUT_S)
        while len(inbound) < len(peers):
            sock, _ = self._listener.accept()
            connection = socket_connection(sock)
            if read_hello(connection, self.token) in peers:
                inbound.append(connection)
        self._listener.close()
        handles = dict(remote)

        def send_remote(destination: int, key: tuple, arrays: dict[str, np.ndarray]) -> None:
            handles[destination].deliver.remote(key, arrays)  # fire and forget; the consumer waits for it

        self.mailbox = Mailbox(
            WorkerAddress(worker=me, node=nodes[me]),
            outbound,
            inbound,
            nodes,
            remote_send=send_remote if handles else None,
            remote_inbox=self.inbox if handles else None,
        )

    def setup(self, collective_address: str) -> tuple:
        """Bind the device, join the collective group, build the worker; ``("ready", ...)`` or ``("error", ...)``."""
        replica = self.replica
        try:
            assert self.mailbox is not None, "connect() comes first"
            self.device.bind()
            if replica.world > 1:
                import torch.distributed as dist

                dist.init_process_group(
                    self.device.collective_backend,
                    init_method=collective_address,
                    rank=replica.rank,
                    world_size=replica.world,
                )
            worker = self.spec.factory()
            worker.setup(self.spec.config, replica.rank, replica.world, self.device)
            self.runner = CommandRunner(worker, replica, self.device, self.mailbox, clock=time.time)
            return ("ready", replica.worker, self.runner.resident_bytes())
        except BaseException as error:
            return ("error", replica.worker, -1, f"{type(error).__name__}: {error}", traceback.format_exc())

    def serve(self, driver: tuple[str, int]) -> None:
        """Connect to the driver and run its commands until it says shutdown or goes away."""
        assert self.runner is not None, "setup() comes first"
        self.device.bind()  # this thread runs the ops: pin it too (CPU affinity and CUDA device are per thread)
        connection = socket_connection(socket.create_connection(driver, timeout=HELLO_TIMEOUT_S))
        connection.send_bytes(hello(self.token, self.replica.worker))
        try:
            serve(connection, self.runner)
        finally:
            connection.close()
            shutil.rmtree(self._directory, ignore_errors=True)

    def deliver(self, key: tuple, arrays: dict[str, np.ndarray]) -> None:
        """A payload from a worker on another node (runs on a second thread while :meth:`serve` runs)."""
        self.inbox.put(key, arrays)
