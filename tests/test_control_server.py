"""Strangers cannot stall a Ray run's start: the driver's control server (and an actor's peer socket) read hellos
side by side, each within a short deadline; a connection with garbage, the wrong token, nothing, or an early close
is dropped with a warning and delays nobody else."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import struct
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
from test_executor import HYBRID, chain_program, specs
from test_ports import exposed_sockets

import executor
from executor.handshake import HELLO, BadHello, HelloServer, check_hello, hello
from rlinf.core.errors import RlinfWarning

TESTS = Path(__file__).resolve().parent
TOKEN = b"t" * 32
FRAME = struct.Struct("!i")


def framed(payload: bytes) -> bytes:
    """``payload`` as ``Connection.send_bytes`` writes it."""
    return FRAME.pack(len(payload)) + payload


def bad_peers(address: tuple[str, int]) -> list[socket.socket]:
    """Five strangers: garbage, the wrong token, silence, half a hello, and one that closes at once."""
    opened = [socket.create_connection(address) for _ in range(5)]
    opened[0].sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    opened[1].sendall(framed(hello(b"w" * 32, 0)))
    opened[3].sendall(framed(hello(TOKEN, 0))[:10])
    opened[4].close()
    return opened


# --------------------------------------------------------------------------- the hello itself
def test_check_hello() -> None:
    whole = framed(hello(TOKEN, 7))
    assert check_hello(whole, TOKEN) == 7
    assert check_hello(whole[:3], TOKEN) is None and check_hello(whole[:-1], TOKEN) is None
    with pytest.raises(BadHello, match="wrong token"):
        check_hello(framed(hello(b"w" * 32, 7)), TOKEN)
    with pytest.raises(BadHello, match=r"not a hello \(it starts with b'GET / HT'\)"):
        check_hello(b"GET / HT", TOKEN)
    with pytest.raises(BadHello, match="wrong token"):  # the right length, but garbage
        check_hello(framed(b"x" * HELLO.size), TOKEN)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


def test_strangers_do_not_delay_the_workers(listener: socket.socket) -> None:
    address = listener.getsockname()[:2]
    strangers = bad_peers(address)
    workers = [socket.create_connection(address) for _ in range(2)]
    for worker, sock in enumerate(workers):
        sock.sendall(framed(hello(TOKEN, worker)))
    with (
        pytest.warns(RlinfWarning) as warned,
        HelloServer(listener, TOKEN, [0, 1], label="the test server", hello_timeout_s=600.0) as server,
    ):
        accepted = server.accept_all(timeout_s=60.0)
        # the workers were welcomed while the silent strangers still had minutes to speak
        assert server.waiting == 2
    assert sorted(accepted) == [0, 1]
    messages = [str(w.message) for w in warned]
    assert any("not a hello" in m for m in messages) and any("wrong token" in m for m in messages)
    assert any("closed before saying hello" in m for m in messages)
    # the silent ones are dropped when the server stops waiting
    assert len(server.dropped) == 5
    assert sum("no hello before the server stopped waiting" in d for d in server.dropped) == 2
    assert all(d.startswith("127.0.0.1:") for d in server.dropped)
    for sock in strangers + workers:
        sock.close()
    for sock in accepted.values():
        sock.close()


def test_silence_past_the_deadline_and_impostors(listener: socket.socket) -> None:
    address = listener.getsockname()[:2]
    silent = socket.create_connection(address)
    first, copy, unknown = (socket.create_connection(address) for _ in range(3))
    first.sendall(framed(hello(TOKEN, 0)))
    copy.sendall(framed(hello(TOKEN, 0)))
    unknown.sendall(framed(hello(TOKEN, 9)))
    with (
        HelloServer(listener, TOKEN, [0, 1], label="the test server", hello_timeout_s=0.3) as server,
        pytest.warns(RlinfWarning, match="dropped a connection from 127.0.0.1:"),
        pytest.raises(TimeoutError, match=r"workers \[1\] did not connect to the test server within 1 s"),
    ):
        server.accept_all(timeout_s=1.0)
    assert sorted(server.dropped, key=lambda d: d.split(": ", 1)[1]) == sorted(
        [
            f"127.0.0.1:{silent.getsockname()[1]}: no hello within 0.3 s",
            f"127.0.0.1:{copy.getsockname()[1]}: says it is worker 0, which has already connected",
            f"127.0.0.1:{unknown.getsockname()[1]}: says it is worker 9, which is not expected here",
        ],
        key=lambda d: d.split(": ", 1)[1],
    )
    for sock in (silent, first, copy, unknown):
        sock.close()


def test_a_welcome_connection_carries_messages_after_its_hello(tmp_path: Path) -> None:
    """Over a Unix socket too (an actor's peer socket): nothing past the hello is consumed."""
    from executor.ray_actor import socket_connection

    path = str(tmp_path / "peers.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix_listener:
        unix_listener.bind(path)
        unix_listener.listen()
        garbage = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        garbage.connect(path)
        garbage.sendall(b"\xff" * 64)
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        peer.connect(path)
        sender = socket_connection(peer)
        sender.send_bytes(hello(TOKEN, 3))
        sender.send({"payload": [1, 2, 3]})
        with (
            HelloServer(unix_listener, TOKEN, [3], label="a peer socket") as server,
            pytest.warns(
                RlinfWarning, match="a peer socket dropped a connection from a local process: not a hello"
            ),
        ):
            accepted = server.accept_all(timeout_s=5.0)
    receiver: Connection = socket_connection(accepted[3])
    assert receiver.recv() == {"payload": [1, 2, 3]}
    for connection in (receiver, sender):
        connection.close()
    garbage.close()


# --------------------------------------------------------------------------- a Ray run
@pytest.fixture(scope="module")
def private_ray() -> Iterator[None]:
    """One private loopback Ray for both runs, so that neither pays for starting it."""
    pytest.importorskip("ray")
    from executor import ray_session

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
        with ray_session.session(None, num_cpus=2):
            yield


def one_ray_run() -> None:
    """Start the Ray backend, run one iteration and stop the actors."""
    from executor.ray_backend import RayBackend

    with RayBackend(executor.cpu_devices(2)) as backend:
        executor.run(chain_program(HYBRID), specs(), backend=backend)


def test_bad_peers_do_not_stall_a_ray_run(private_ray: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five strangers connect to the driver's control server before any actor does (the backlog used to be the
    number of actors and each hello was awaited in turn: the run failed after minutes). The hello timeout is set
    to ten minutes, so the run can only finish if the actors were welcomed while the silent strangers were still
    waiting: those two are dropped when the server stops waiting, after every actor said hello (an order of
    events, not a duration)."""
    from executor import handshake

    strangers: list[socket.socket] = []
    create_server = socket.create_server

    def create_server_with_strangers(address: tuple[str, int], **options: object) -> socket.socket:
        server = create_server(address, **options)  # type: ignore[arg-type]
        strangers.extend(bad_peers(server.getsockname()[:2]))
        return server

    monkeypatch.setattr(socket, "create_server", create_server_with_strangers)
    defaults = dict(handshake.HelloServer.__init__.__kwdefaults__ or {})
    monkeypatch.setattr(
        handshake.HelloServer.__init__, "__kwdefaults__", {**defaults, "hello_timeout_s": 600.0}
    )
    with pytest.warns(RlinfWarning) as warned:
        one_ray_run()
    monkeypatch.undo()
    for sock in strangers:
        sock.close()
    assert len(strangers) == 5
    reported = [str(w.message) for w in warned if "the driver's control server dropped" in str(w.message)]
    assert len(reported) == 5, reported
    assert any("wrong token" in m for m in reported) and any("not a hello" in m for m in reported)
    assert sum("no hello before the server stopped waiting" in m for m in reported) == 2, reported


def test_a_failed_start_names_each_missing_actor_and_why(
    private_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Just before the actors are told to connect, one is killed and one is frozen (SIGSTOP): the error names
    both, with the death cause of the one and the wait for the other, instead of Ray's header of a failed call."""
    from executor.ray_backend import RayBackend

    frozen: list[int] = []
    connect_driver = RayBackend._connect_driver

    def kill_and_freeze_then_connect(backend: RayBackend, token: bytes) -> None:
        pids = backend.worker_pids()
        os.kill(pids["reward[0]"], signal.SIGKILL)
        frozen.append(pids["actor[1]"])
        os.kill(frozen[0], signal.SIGSTOP)
        connect_driver(backend, token)

    monkeypatch.setattr(RayBackend, "_connect_driver", kill_and_freeze_then_connect)
    try:
        with (
            RayBackend(executor.cpu_devices(2)) as backend,
            pytest.raises(executor.WorkerError) as caught,
        ):
            executor.run(chain_program(HYBRID), specs(), backend=backend)
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    message = str(caught.value)
    print(message)
    assert re.search(
        r"worker reward\[0\] failed while running connect: 2 of 4 workers did not connect", message
    )
    assert re.search(r"reward\[0\]: actor died \(.+\); actor\[1\]: no connection after \d+ s$", message)
    assert "repr=" not in message


def test_a_private_ray_run_listens_on_loopback_only(private_ray: None) -> None:
    """A single-machine run on a private Ray opens no port beyond loopback: the driver and the four actors
    (the actor component's two replicas with their gloo group) listen on 127.0.0.1 / ::1 only
    (``tests/test_ports.py`` checks the local backend)."""
    from executor.ray_backend import RayBackend

    program = chain_program(HYBRID)
    with RayBackend(executor.cpu_devices(2)) as backend:
        executor.run(program, specs(), backend=backend)
        assert len(set(backend.worker_pids().values())) == 4
        assert exposed_sockets(backend) == {}
        executor.run(program, specs(), backend=backend)  # the group still works
