"""Atomic file writes: readers see the old file or the whole new one, never a part, and a crash mid-write leaves
only a hidden temporary file (``.NAME.*.tmp``) that the next write or a resume cleans up."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomic(path: str | Path, writer: Callable[[BinaryIO], object]) -> None:
    """Call ``writer(stream)`` on a temporary file next to ``path``, ``fsync`` it, make it readable to others
    (``mkstemp`` files are private), rename it onto ``path`` and ``fsync`` the directory so the rename survives a
    crash. On any error the temporary file is removed and the old ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            writer(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    descriptor = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` atomically (see :func:`write_atomic`)."""
    write_atomic(path, lambda stream: stream.write(data))


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write UTF-8 ``text`` atomically (see :func:`write_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))
