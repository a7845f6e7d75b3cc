"""A single-machine run opens no port beyond loopback: with a component of two data-parallel replicas (whose
``torch.distributed`` group needs a rendezvous and gloo sockets), the driver and every worker process listen on
127.0.0.1 / ::1 only, on the local backend and on a private Ray (that check runs in ``test_control_server.py``, on
the private Ray its module already runs)."""

from __future__ import annotations

import ipaddress
import os
import stat

import psutil
import pytest
from test_executor import HYBRID, chain_program, specs

import executor
from executor import collective, local


def listening_addresses(pid: int) -> list[str]:
    """``ip:port`` of every TCP/UDP socket ``pid`` listens on."""
    connections = psutil.Process(pid).net_connections(kind="inet")
    return [f"{c.laddr.ip}:{c.laddr.port}" for c in connections if c.status == psutil.CONN_LISTEN]


def is_loopback(address: str) -> bool:
    """Whether ``ip:port`` is on a loopback address (``::ffff:127.0.0.1``, IPv4 mapped into IPv6, counts)."""
    ip = ipaddress.ip_address(address.rsplit(":", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def exposed_sockets(backend: executor.Backend) -> dict[str, list[str]]:
    """The driver's and the workers' listening sockets that are not on loopback, by process."""
    pids = {**backend.worker_pids(), "driver": os.getpid()}  # type: ignore[attr-defined]
    exposed = {
        name: [a for a in listening_addresses(pid) if not is_loopback(a)] for name, pid in pids.items()
    }
    return {name: addresses for name, addresses in exposed.items() if addresses}


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1:80") and is_loopback("::1:80") and is_loopback("::ffff:127.0.0.1:80")
    assert not is_loopback("0.0.0.0:80") and not is_loopback(":::80") and not is_loopback("192.0.2.2:80")


def test_local_backend_listens_on_loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []

    def recorded_directory() -> str:
        made.append(collective.private_directory())
        return made[-1]

    monkeypatch.setattr(local, "private_directory", recorded_directory)
    program = chain_program(HYBRID)  # actor: 2 data-parallel replicas
    with executor.LocalBackend(executor.cpu_devices(2)) as backend:
        executor.run(program, specs(), backend=backend)
        pids = backend.worker_pids()
        assert listening_addresses(pids["actor[0]"]), (
            "the group's gloo sockets are not seen: the check is vacuous"
        )
        assert exposed_sockets(backend) == {}
        executor.run(program, specs(), backend=backend)  # the group still works
        assert len(made) == 1 and stat.S_IMODE(os.stat(made[0]).st_mode) == 0o700
    assert not os.path.exists(made[0])  # the rendezvous directory goes with the workers
