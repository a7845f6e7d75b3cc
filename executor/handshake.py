"""The hello that opens every connection of a Ray run, and the listener that reads hellos side by side.

A connection's first bytes are one :mod:`multiprocessing.connection` frame (a 4-byte length, then the payload)
holding the run's random 32-byte token and the sender's worker id; they are read as raw bytes, so nothing from an
unauthenticated peer is unpickled. :class:`HelloServer` accepts connections and reads their hellos concurrently,
each within :data:`HELLO_TIMEOUT_S`: a peer that sends garbage, the wrong token or nothing, or that closes early,
is dropped with a :class:`rlinf.core.errors.RlinfWarning` naming it and the reason, and delays nobody else.
"""

from __future__ import annotations

import hmac
import selectors
import socket
import struct
import time
import warnings
from collections.abc import Iterable
from typing import Any

import attrs

from rlinf.core.errors import RlinfWarning

HELLO = struct.Struct("!32si")
"""A hello's payload: the run's token and the sender's worker id."""
FRAME_HEADER = struct.Struct("!i")
"""The length that :meth:`multiprocessing.connection.Connection.send_bytes` writes before a payload."""
HELLO_FRAME_BYTES = FRAME_HEADER.size + HELLO.size
HELLO_TIMEOUT_S = 2.0
"""How long an accepted connection may take to say hello (a worker sends it right after connecting)."""


def hello(token: bytes, worker: int) -> bytes:
    """The payload of the first message on every connection of a run (sent with ``send_bytes``)."""
    return HELLO.pack(token, worker)


class BadHello(Exception):
    """A connection's first bytes cannot be a hello with the run's token; the message says why."""


def check_hello(data: bytes, token: bytes) -> int | None:
    """The worker id in ``data``, a connection's first bytes (at most one hello frame); ``None`` while they are
    the beginning of a hello. Raises :class:`BadHello` as soon as they cannot be one."""
    if len(data) >= FRAME_HEADER.size and FRAME_HEADER.unpack_from(data)[0] != HELLO.size:
        raise BadHello(f"not a hello (it starts with {data[:16]!r})")
    if len(data) < HELLO_FRAME_BYTES:
        return None
    sent, worker = HELLO.unpack_from(data, FRAME_HEADER.size)
    if not hmac.compare_digest(sent, token):
        raise BadHello("wrong token")
    return int(worker)


@attrs.define
class _Greeting:
    """An accepted connection whose hello is not complete yet."""

    sock: socket.socket
    peer: str
    deadline: float
    received: bytes = b""


class HelloServer:
    """Accepts connections on ``listener`` (a listening socket, owned by the caller) until every ``expected``
    worker has said hello; :attr:`sockets` holds their sockets, positioned after the hello. Use as a context
    manager: leaving drops the connections whose hello is not complete (and, on an error, the accepted ones)."""

    def __init__(
        self,
        listener: socket.socket,
        token: bytes,
        expected: Iterable[int],
        *,
        label: str,
        hello_timeout_s: float = HELLO_TIMEOUT_S,
    ) -> None:
        self.listener = listener
        self.token = token
        self.expected = frozenset(expected)
        self.label = label
        """What is listening, for the warnings (e.g. ``the driver's control server``)."""
        self.hello_timeout_s = hello_timeout_s
        self.sockets: dict[int, socket.socket] = {}
        self.dropped: list[str] = []
        """Why each dropped connection was dropped (``peer: reason``)."""
        self._greetings: dict[socket.socket, _Greeting] = {}
        self._selector = selectors.DefaultSelector()

    def __enter__(self) -> HelloServer:
        self.listener.setblocking(False)
        self._selector.register(self.listener, selectors.EVENT_READ)
        return self

    def __exit__(self, error_type: type[BaseException] | None, *rest: object) -> None:
        for greeting in list(self._greetings.values()):
            self._drop(greeting, "no hello before the server stopped waiting")
        self._selector.close()
        if error_type is not None:  # the caller gives up: the accepted connections go too
            for sock in self.sockets.values():
                sock.close()

    @property
    def missing(self) -> list[int]:
        """The expected workers that have not said hello yet."""
        return sorted(self.expected - self.sockets.keys())

    @property
    def waiting(self) -> int:
        """How many accepted connections have not finished their hello yet."""
        return len(self._greetings)

    def poll(self, timeout_s: float) -> None:
        """Accept connections and read hellos for up to ``timeout_s`` (less once something arrived); drop the
        connections whose hello is late."""
        now = time.monotonic()
        deadlines = [g.deadline - now for g in self._greetings.values()]
        for key, _ in self._selector.select(max(0.0, min([timeout_s, *deadlines]))):
            if key.fileobj is self.listener:
                self._accept()
            else:
                self._read(key.data)
        now = time.monotonic()
        for greeting in [g for g in self._greetings.values() if g.deadline <= now]:
            self._drop(greeting, f"no hello within {self.hello_timeout_s:g} s")

    def accept_all(self, timeout_s: float) -> dict[int, socket.socket]:
        """Wait until every expected worker said hello; raises ``TimeoutError`` naming the missing ones."""
        deadline = time.monotonic() + timeout_s
        while self.missing and time.monotonic() < deadline:
            self.poll(deadline - time.monotonic())
        if self.missing:
            raise TimeoutError(
                f"workers {self.missing} did not connect to {self.label} within {timeout_s:g} s"
            )
        return self.sockets

    def _accept(self) -> None:
        while True:
            try:
                sock, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            peer = _peer_name(address)
            greeting = _Greeting(sock=sock, peer=peer, deadline=time.monotonic() + self.hello_timeout_s)
            self._greetings[sock] = greeting
            self._selector.register(sock, selectors.EVENT_READ, greeting)

    def _read(self, greeting: _Greeting) -> None:
        try:
            chunk = greeting.sock.recv(HELLO_FRAME_BYTES - len(greeting.received))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:
            self._drop(greeting, f"connection failed ({error})")
            return
        if not chunk:
            self._drop(greeting, "closed before saying hello")
            return
        greeting.received += chunk
        try:
            worker = check_hello(greeting.received, self.token)
        except BadHello as error:
            self._drop(greeting, str(error))
            return
        if worker is not None:
            self._welcome(greeting, worker)

    def _welcome(self, greeting: _Greeting, worker: int) -> None:
        if worker not in self.expected:
            self._drop(greeting, f"says it is worker {worker}, which is not expected here")
        elif worker in self.sockets:
            self._drop(greeting, f"says it is worker {worker}, which has already connected")
        else:
            self._forget(greeting)
            self.sockets[worker] = greeting.sock

    def _drop(self, greeting: _Greeting, reason: str) -> None:
        self._forget(greeting)
        greeting.sock.close()
        self.dropped.append(f"{greeting.peer}: {reason}")
        warnings.warn(
            RlinfWarning(f"{self.label} dropped a connection from {greeting.peer}: {reason}"), stacklevel=2
        )

    def _forget(self, greeting: _Greeting) -> None:
        del self._greetings[greeting.sock]
        self._selector.unregister(greeting.sock)


def _peer_name(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return "a local process"  # a Unix-socket peer has no address
