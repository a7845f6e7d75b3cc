"""Messages between worker processes on non-blocking pipes (or Unix sockets): no process ever sleeps in a read or a
write that another sleeping process would have to finish.

A pipe holds 64 KiB on Linux. With blocking ends two processes that each write the other more than that, before
either reads, sleep in the kernel's pipe write for ever (issue 48: ``/proc/PID/wchan`` was ``anon_pipe_write`` in
both workers, 64,400 bytes queued each way). With a blocking read, a process that reads while its own message is
half written waits for the rest of a message whose writer may be doing the same. So both ends here are
non-blocking: :meth:`InboundPipe.read` returns the messages that have arrived whole and keeps a partial one, and
:func:`write_some` writes what fits; a writer whose message does not fit waits for room *or* for something to
read (:meth:`executor.channels.Mailbox.write`), which breaks every cycle of full pipes.

The framing is :class:`multiprocessing.connection.Connection`'s (a 4-byte big-endian length, or ``-1`` and an
8-byte one), so a ``Connection`` can read what :func:`frame` wrote.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
from typing import Any

_SHORT = struct.Struct("!i")
_LONG = struct.Struct("!iQ")
READ_CHUNK_BYTES = 1 << 16
"""The most one read takes from a pipe (a Linux pipe's capacity), into a buffer allocated once per pipe: an
``os.read`` of 1 MiB allocated its result each time and cost more than the rest of a small message's trip."""


def frame(message: Any) -> memoryview:
    """``message`` pickled and framed for one pipe."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    header = _SHORT.pack(len(body)) if len(body) <= 0x7FFFFFFF else _LONG.pack(-1, len(body))
    return memoryview(header + body)


def write_some(fd: int, data: memoryview) -> memoryview:
    """Write what ``fd`` (non-blocking) takes now of ``data``; returns the rest (empty when all went)."""
    try:
        return data[os.write(fd, data) :]
    except BlockingIOError:
        return data


class InboundPipe:
    """The reading end of one pipe from another process, non-blocking: :meth:`read` never waits."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        """The end it reads (kept open while this lives)."""
        self._fd = connection.fileno()
        os.set_blocking(self._fd, False)
        self._file = io.FileIO(self._fd, "rb", closefd=False)
        """Reads into :attr:`_chunk` (``None`` where a read would block, no exception raised)."""
        self._chunk = memoryview(bytearray(READ_CHUNK_BYTES))
        self._buffer = bytearray()
        self._closed = False

    def fileno(self) -> int:
        """Readable when bytes (or the end of the stream) arrived."""
        return self._fd

    def read(self) -> list[Any]:
        """The messages that have arrived whole since the last call (a partial one is kept for the next); raises
        ``EOFError`` once the writer has gone and every whole message was returned."""
        while not self._closed:
            count = self._file.readinto(self._chunk)
            if count is None:  # nothing more for now
                break
            if count == 0:
                self._closed = True
            self._buffer += self._chunk[:count]
            if count < READ_CHUNK_BYTES:
                break  # drained for now: another read would find nothing
        messages = []
        while True:
            message = self._next()
            if message is None:
                break
            messages.append(message[0])
        if not messages and self._closed:
            raise EOFError("the writer closed the pipe")
        return messages

    def _next(self) -> tuple[Any] | None:
        """The next whole message of the buffer (in a 1-tuple), removed from it; ``None`` when none is whole."""
        buffer = self._buffer
        if len(buffer) < _SHORT.size:
            return None
        (size,) = _SHORT.unpack_from(buffer)
        start = _SHORT.size
        if size == -1:
            if len(buffer) < _LONG.size:
                return None
            _, size = _LONG.unpack_from(buffer)
            start = _LONG.size
        if len(buffer) < start + size:
            return None
        message = pickle.loads(buffer[start : start + size])  # a copy: the buffer is cut next
        del buffer[: start + size]
        return (message,)
