"""The worker side of the Ray backend: one actor per component replica, talking to the driver and its peers
over direct connections.

Ray places the actor, starts its process, moves payloads between nodes and notices its death; the per-op
traffic does not go through Ray's task submission (about a millisecond per call), but over connections the
actor opens at start-up:

* **control**: a TCP connection to the driver, on which the actor runs :func:`executor.runtime.serve`, the local
  backend's worker loop: a lane of commands in per run, batches of records out;
* **same node**: a Unix-socket connection to every other actor of its node, carrying
  :mod:`executor.channels` messages (arrays of 16 KiB or more through shared memory, as in the local backend);
* **other nodes**: the producer calls the consumer actor's :meth:`RayWorker.deliver` with the arrays; Ray
  carries them (through its object store when they are large) and a second thread of the consumer actor hands
  them to its mailbox (:class:`executor.channels.RemoteInbox`).

Every connection starts with a hello (:mod:`executor.handshake`): the run's random token and the sender's worker
id; a connection without the token is closed. Ops finish on wall-clock time (``time.time``), the one clock the
nodes of a cluster share (through NTP). Data-parallel replicas join a ``torch.distributed`` group (gloo on CPUs,
NCCL on GPUs) through a file store in rank 0's private directory when they share a node, else at a TCP store on
rank 0's node address (:mod:`executor.collective`).
"""

from __future__ import annotations

import os
import pickle
import shutil
import socket
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
from executor.collective import FileRendezvous, Rendezvous, join_group, open_tcp_rendezvous
from executor.devices import Device
from executor.handshake import HelloServer, hello
from executor.messages import Failed, Ready
from executor.routing import Replica
from executor.runtime import CommandRunner, Host, WorkerSpec, build_worker, serve

CONNECT_TIMEOUT_S = 30.0
"""How long an actor may take to reach the driver, and its same-node peers to reach it."""


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
        self._store_listener: socket.socket | None = None

    def describe(self) -> tuple[int, str, str, tuple[int, ...]]:
        """(pid, Ray node id, node IP, GPU ids Ray gave this actor)."""
        gpus = tuple(int(g) for g in ray.get_gpu_ids())
        node_id = ray.get_runtime_context().get_node_id()
        return os.getpid(), node_id, ray.util.get_node_ip_address(), gpus

    def collective_rendezvous(self, same_node: bool) -> Rendezvous:
        """Where the component's collective group meets (called on rank 0): a file store in this actor's private
        directory when every replica runs on this node, else a TCP store on this node's Ray address."""
        if same_node:
            return FileRendezvous(path=os.path.join(self._directory, "collective.store"))
        rendezvous, self._store_listener = open_tcp_rendezvous(ray.util.get_node_ip_address())
        return rendezvous

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
        assert self._listener is not None, "listen() comes first"
        label = f"the peer socket of {self.replica.component}[{self.replica.rank}]"
        with self._listener, HelloServer(self._listener, self.token, peers, label=label) as server:
            accepted = server.accept_all(CONNECT_TIMEOUT_S)
        inbound = [socket_connection(accepted[worker]) for worker in sorted(accepted)]
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

    def setup(self, rendezvous: Rendezvous | None) -> Ready | Failed:
        """Bind the device, join the collective group at ``rendezvous`` (``None``: one replica), build the worker;
        :class:`executor.messages.Ready` or :class:`executor.messages.Failed`."""
        replica = self.replica
        try:
            assert self.mailbox is not None, "connect() comes first"
            self.device.bind()
            if rendezvous is not None:
                listener, self._store_listener = self._store_listener, None
                join_group(rendezvous, self.device.collective_backend, replica.rank, replica.world, listener)
            worker = build_worker(self.spec, replica, self.device)
            self.runner = CommandRunner(worker, replica, self.device, self.mailbox, clock=time.time)
            return Ready(replica.worker, self.runner.resident_bytes())
        except BaseException as error:
            return Failed(replica.worker, -1, f"{type(error).__name__}: {error}", traceback.format_exc())

    def serve(self, driver: tuple[str, int]) -> None:
        """Connect to the driver and run its commands until it says shutdown or goes away."""
        assert self.runner is not None, "setup() comes first"
        self.device.bind()  # this thread runs the ops: pin it too (CPU affinity and CUDA device are per thread)
        connection = socket_connection(socket.create_connection(driver, timeout=CONNECT_TIMEOUT_S))
        connection.send_bytes(hello(self.token, self.replica.worker))
        try:
            serve(connection, Host([self.runner], self.runner.mailbox))
        finally:
            connection.close()
            shutil.rmtree(self._directory, ignore_errors=True)

    def deliver(self, key: tuple, arrays: dict[str, np.ndarray]) -> None:
        """A payload from a worker on another node (runs on a second thread while :meth:`serve` runs)."""
        self.inbox.put(key, arrays)
