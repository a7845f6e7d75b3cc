"""Output paths checked before any work starts: a command that will write a file or a folder finds out at once,
with one line naming the flag, when the path cannot take it (a file where a folder is needed or the reverse, a
parent that is a file, a folder it may not write, a pseudo-filesystem such as ``/proc``, a name too long)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from rlinf.core.errors import ConfigError

PSEUDO_FILESYSTEMS = ("/proc", "/sys", "/dev")
"""Kernel filesystems: nothing rlinf writes belongs there (and writing may fail half-way or do harm)."""

MAX_PATH_BYTES = 4096
"""Linux's PATH_MAX."""


def check_output_dir(path: str | Path, field: str) -> Path:
    """Raise :class:`ConfigError` naming ``field`` unless ``path`` is, or can be created as, a writable folder."""
    path = _checked(path, field)
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ConfigError(
                field, str(path), "is a file, not a folder", "pass a folder path (created if missing)"
            )
        _require_writable(path, field, str(path))
        return path
    _require_creatable_parent(path, field)
    return path


def check_output_file(path: str | Path, field: str) -> Path:
    """Raise :class:`ConfigError` naming ``field`` unless ``path`` is, or can be created as, a writable file."""
    path = _checked(path, field)
    if os.path.isdir(path):
        raise ConfigError(field, str(path), "is a folder, not a file", "pass a file path such as out.json")
    if os.path.exists(path):
        _require_writable(path.parent, field, str(path))
        return path
    _require_creatable_parent(path, field)
    return path


def _checked(path: str | Path, field: str) -> Path:
    text = str(path)
    if not text.strip():
        raise ConfigError(field, text, "is empty", "pass a path")
    if "\x00" in text:
        raise ConfigError(field, text, "holds a zero byte", "pass a plain path")
    path = Path(text)
    if len(os.fsencode(str(path.absolute()))) >= MAX_PATH_BYTES:
        raise ConfigError(field, text, f"is longer than {MAX_PATH_BYTES} bytes", "use a shorter path")
    try:
        max_name = os.pathconf(_existing_ancestor(path), "PC_NAME_MAX")
    except (OSError, ValueError):
        max_name = 255
    for part in path.parts:
        if len(os.fsencode(part)) > max_name:
            raise ConfigError(field, text, f"has a name longer than {max_name} bytes", "use shorter names")
    resolved = os.path.realpath(path)
    for root in PSEUDO_FILESYSTEMS:
        if resolved == root or resolved.startswith(root + os.sep):
            raise ConfigError(
                field, text, f"is inside {root}, a kernel pseudo-filesystem", "write to an ordinary folder"
            )
    return path


def _existing_ancestor(path: Path) -> Path:
    candidate = path.absolute()
    while not os.path.exists(candidate) and candidate != candidate.parent:
        candidate = candidate.parent
    return candidate


def _require_creatable_parent(path: Path, field: str) -> None:
    ancestor = _existing_ancestor(path)
    if not os.path.isdir(ancestor):
        raise ConfigError(
            field,
            str(path),
            f"cannot be created: {ancestor} is a file, not a folder",
            "pass a path under a folder",
        )
    _require_writable(ancestor, field, str(path))


def _require_writable(folder: Path, field: str, shown: str) -> None:
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(
            field, shown, f"cannot be written ({folder} is not writable)", "pass a writable path"
        )


@contextlib.contextmanager
def writing(path: str | Path, field: str) -> Iterator[None]:
    """Turn an :class:`OSError` while writing ``path`` (a full disk, a folder made read-only meanwhile) into one
    line naming ``field``."""
    try:
        yield
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(field, str(path), f"cannot be written ({reason})", "pass a writable path") from None
