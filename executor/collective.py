"""How the data-parallel replicas of a component form their ``torch.distributed`` group (gloo on CPUs, NCCL on
GPUs) without opening a port to the network when they share a machine.

* **One machine** (the local backend; a Ray group whose replicas all run on one node): the replicas meet through a
  :class:`torch.distributed.FileStore` in a private directory (mode 0700, made by the backend, removed when the
  workers stop), and their gloo / NCCL sockets are bound to the loopback interface (``GLOO_SOCKET_IFNAME`` and
  ``NCCL_SOCKET_IFNAME`` set in the worker's own process). Nothing listens beyond 127.0.0.1.
* **Several nodes** (Ray): a file cannot be shared, so rank 0 opens a :class:`torch.distributed.TCPStore` on the
  address Ray uses for its node (not on every interface), and gloo / NCCL choose their interface as usual (the
  node's hostname, or ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` set by the user). Neither the store nor the
  collective sockets are authenticated: like Ray's own ports, they are for a trusted cluster network.
"""

from __future__ import annotations

import os
import socket
import tempfile

import attrs

from rlinf.core.errors import ConfigError

LOOPBACK_INTERFACES = ("lo", "lo0")
"""Names of the loopback interface (Linux, then macOS / BSD)."""


@attrs.frozen
class FileRendezvous:
    """Replicas on one machine meet through a file store."""

    path: str
    """The store's file, in a directory only this user can enter."""


@attrs.frozen
class TcpRendezvous:
    """Replicas on several nodes meet at rank 0's TCP store."""

    host: str
    """Rank 0's node address (the one Ray uses for that node)."""
    port: int


Rendezvous = FileRendezvous | TcpRendezvous


def private_directory() -> str:
    """A new directory (mode 0700) for the file stores of one set of workers; the caller removes it."""
    return tempfile.mkdtemp(prefix="rlinf-rendezvous-")


def open_tcp_rendezvous(host: str) -> tuple[TcpRendezvous, socket.socket]:
    """A listening socket on ``host`` only, for rank 0's store (handed to :func:`join_group`), and its address.
    Listening from here on also keeps the port from being taken before the group forms."""
    listener = socket.create_server((host, 0), backlog=socket.SOMAXCONN)
    return TcpRendezvous(host=host, port=int(listener.getsockname()[1])), listener


def join_group(
    rendezvous: Rendezvous, backend: str, rank: int, world: int, listener: socket.socket | None = None
) -> None:
    """Join the group of ``world`` replicas as ``rank`` (``listener``: rank 0's socket from
    :func:`open_tcp_rendezvous`, taken over by the store)."""
    import torch.distributed as dist

    store: dist.Store
    if isinstance(rendezvous, FileRendezvous):
        bind_collectives_to_loopback()
        store = dist.FileStore(rendezvous.path, world)
    else:
        store = dist.TCPStore(
            rendezvous.host,
            rendezvous.port,
            world,
            is_master=listener is not None,
            master_listen_fd=listener.detach() if listener is not None else None,
        )
    dist.init_process_group(backend, store=store, rank=rank, world_size=world)


def bind_collectives_to_loopback() -> None:
    """Make gloo and NCCL in this process listen and connect on the loopback interface only (call before the
    group forms; the process must be one of rlinf's workers, whose environment is its own)."""
    interface = loopback_interface()
    os.environ["GLOO_SOCKET_IFNAME"] = interface
    os.environ["NCCL_SOCKET_IFNAME"] = interface


def loopback_interface() -> str:
    """The name of this machine's loopback interface."""
    names = [name for _, name in socket.if_nameindex()]
    for name in LOOPBACK_INTERFACES:
        if name in names:
            return name
    raise ConfigError(
        "network interfaces",
        names,
        f"none is a loopback interface ({', '.join(LOOPBACK_INTERFACES)}) to bind data-parallel groups to",
        "bring up the loopback interface (ip link set lo up)",
    )
