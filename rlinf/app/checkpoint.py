"""Checkpoints that survive crashes and hold no code: atomic files, a manifest of checksums, fallback past a
corrupt one.

A checkpoint directory holds ``iter_NNNNNN.safetensors`` files (:mod:`rlinf.app.state_codec`: tensors plus the rest
of the state as JSON, never a pickle) and ``manifest.json``, which lists the kept checkpoints with their SHA-256
and size. Writing one:

1. stream the state into a temporary file next to it (``.iter_NNNNNN.safetensors.<random>.tmp``), hashing it;
2. ``fsync`` the file, ``os.replace`` it onto its name, ``fsync`` the directory;
3. write the new manifest the same way, then delete the checkpoints that fell out of the last ``keep``.

A crash at any point leaves the previous manifest and every file it lists intact: either a temporary file (never
read, removed with a warning by the next :func:`load_latest`) or a complete checkpoint the manifest does not list
yet (ignored with a warning: it could not be verified). :func:`load_latest` returns the newest listed checkpoint
whose size and checksum match and which decodes, warning (:class:`rlinf.core.errors.RlinfWarning`) for every newer one
it had to skip, and raises :class:`rlinf.core.errors.ConfigError` when none is valid.

A run directory may come from anyone, so the manifest is checked before anything it names is opened or deleted:
each entry's file must be exactly ``iter_NNNNNN.safetensors`` for its iteration (no path, so nothing outside the
directory), neither the directory nor the file may be a symbolic link, and checkpoints of the old pickle format
(``.pt``, manifest version 1) are refused, since loading them could run code.

What a training run's checkpoint holds, as a typed record, is :mod:`rlinf.app.run_checkpoint`.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from rlinf.app import state_codec
from rlinf.core import files
from rlinf.core.errors import ConfigError, RlinfWarning

MANIFEST = "manifest.json"
MANIFEST_VERSION = 2
SUFFIX = ".safetensors"
_NAME = re.compile(r"^iter_(\d{6,})\.safetensors$")
_TEMPORARY = re.compile(r"^\.(iter_\d{6,}\.safetensors|manifest\.json)\..+\.tmp$")
_ENTRY_KEYS = frozenset({"file", "iteration", "sha256", "num_bytes"})
_OLD_FORMAT_FIX = "start a new run (rlinf no longer loads pickled .pt checkpoints: they can run code)"


@attrs.frozen(kw_only=True)
class CheckpointEntry:
    """One kept checkpoint as the manifest lists it."""

    file: str
    """File name inside the checkpoint directory (always :func:`checkpoint_name` of ``iteration``)."""
    iteration: int
    sha256: str
    num_bytes: int


@attrs.frozen(kw_only=True)
class LoadedCheckpoint:
    """A checkpoint that verified and loaded."""

    path: Path
    iteration: int
    state: dict[str, Any]


def checkpoint_name(iteration: int) -> str:
    """``iter_NNNNNN.safetensors``."""
    return f"iter_{iteration:06d}{SUFFIX}"


def _require_plain_directory(directory: Path) -> None:
    if directory.is_symlink():
        raise ConfigError(
            "checkpoints", str(directory), "is a symbolic link", "use a run directory rlinf wrote (no links)"
        )


def _entry(directory: Path, position: int, raw: Any) -> CheckpointEntry:
    """Entry ``position`` of the manifest, checked: a plain dict of the four fields, the file named after the
    iteration."""
    field = f"{directory / MANIFEST} entry {position}"
    fix = "restore the manifest rlinf wrote, or start a new run"
    if not isinstance(raw, dict) or set(raw) != _ENTRY_KEYS:
        raise ConfigError(field, raw, f"must be an object with exactly {sorted(_ENTRY_KEYS)}", fix)
    iteration, name = raw["iteration"], raw["file"]
    if not isinstance(iteration, int) or isinstance(iteration, bool) or iteration < 0:
        raise ConfigError(f"{field} iteration", iteration, "must be an integer >= 0", fix)
    if isinstance(name, str) and name == f"iter_{iteration:06d}.pt":
        raise ConfigError(f"{field} file", name, "is an old pickle-format checkpoint", _OLD_FORMAT_FIX)
    if name != checkpoint_name(iteration):
        raise ConfigError(
            f"{field} file", name, f"must be the plain name {checkpoint_name(iteration)} (no path)", fix
        )
    digest, size = raw["sha256"], raw["num_bytes"]
    if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
        raise ConfigError(f"{field} sha256", digest, "must be 64 lowercase hex digits", fix)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ConfigError(f"{field} num_bytes", size, "must be an integer >= 0", fix)
    return CheckpointEntry(file=name, iteration=iteration, sha256=digest, num_bytes=size)


def read_manifest(directory: Path) -> list[CheckpointEntry]:
    """Entries of ``directory``'s manifest, oldest first (empty when there is none); raises
    :class:`ConfigError` for a manifest that is unreadable, of the old format, or names anything but its own
    checkpoint files."""
    directory = Path(directory)
    _require_plain_directory(directory)
    path = directory / MANIFEST
    if not path.exists() and not path.is_symlink():
        return []
    fix = "restore the manifest rlinf wrote, or start a new run"
    if path.is_symlink() or not path.is_file():
        raise ConfigError("checkpoint manifest", str(path), "is not a regular file", fix)
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ConfigError("checkpoint manifest", str(path), f"is unreadable ({error})", fix) from None
    if not isinstance(data, dict) or not isinstance(data.get("checkpoints"), list):
        raise ConfigError("checkpoint manifest", str(path), "is unreadable (no checkpoints list)", fix)
    if data.get("version") != MANIFEST_VERSION:
        raise ConfigError(
            "checkpoint manifest",
            str(path),
            f"is version {data.get('version')!r}, not {MANIFEST_VERSION} (an old pickle-format run?)",
            _OLD_FORMAT_FIX,
        )
    entries = [_entry(directory, i, raw) for i, raw in enumerate(data["checkpoints"])]
    if len({e.iteration for e in entries}) != len(entries):
        raise ConfigError("checkpoint manifest", str(path), "lists an iteration twice", fix)
    return sorted(entries, key=lambda e: e.iteration)


def _write_manifest(directory: Path, entries: list[CheckpointEntry]) -> None:
    body = {"version": MANIFEST_VERSION, "checkpoints": [attrs.asdict(e) for e in entries]}
    files.write_text_atomic(directory / MANIFEST, json.dumps(body, indent=1))


def save_checkpoint(
    directory: str | Path, iteration: int, state: Mapping[str, Any], *, keep: int = 3
) -> Path:
    """Write ``state`` as the checkpoint of ``iteration``; keep the newest ``keep`` checkpoints. Only files the
    checked manifest names (``iter_NNNNNN.safetensors`` inside ``directory``) are ever deleted."""
    if keep < 1:
        raise ConfigError("keep", keep, "must be >= 1", "keep at least one checkpoint")
    directory = Path(directory)
    entries = read_manifest(directory)  # checked before anything is written or deleted
    path = directory / checkpoint_name(iteration)
    data = state_codec.encode(state)
    files.write_bytes_atomic(path, data)
    entries = [e for e in entries if e.iteration != iteration]
    digest = hashlib.sha256(data).hexdigest()
    entries.append(CheckpointEntry(file=path.name, iteration=iteration, sha256=digest, num_bytes=len(data)))
    entries.sort(key=lambda e: e.iteration)
    kept, dropped = entries[-keep:], entries[:-keep]
    _write_manifest(directory, kept)
    for entry in dropped:
        _remove_checkpoint_file(directory, entry.file)
    return path


def _remove_checkpoint_file(directory: Path, name: str) -> None:
    """Unlink ``directory/name`` when ``name`` is one of rlinf's checkpoint or temporary names (a link is
    removed, never followed)."""
    assert "/" not in name and (_NAME.match(name) or _TEMPORARY.match(name)), f"refusing to delete {name!r}"
    (directory / name).unlink(missing_ok=True)


def _read_verified(directory: Path, entry: CheckpointEntry) -> tuple[bytes | None, str]:
    """The file's bytes when its size and checksum match, else ``None`` and why not."""
    path = directory / entry.file
    if path.is_symlink():
        return None, "it is a symbolic link"
    if not path.is_file():
        return None, "the file is missing"
    if path.stat().st_size != entry.num_bytes:
        return None, f"{path.stat().st_size} bytes instead of {entry.num_bytes}"
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        return None, "the checksum does not match the manifest"
    return data, ""


def verify(directory: Path, entry: CheckpointEntry) -> str:
    """Why ``entry`` is not a valid checkpoint, or ``""`` when its size and checksum match."""
    return _read_verified(Path(directory), entry)[1]


def remove_temporaries(directory: Path) -> None:
    """Delete, with a warning each, the temporary files of writes that never finished."""
    for stray in sorted(Path(directory).glob(".*.tmp")):
        if _TEMPORARY.match(stray.name):
            warnings.warn(
                RlinfWarning(f"removing {stray}: a checkpoint write that never finished"), stacklevel=2
            )
            _remove_checkpoint_file(stray.parent, stray.name)


def load_latest(directory: str | Path) -> LoadedCheckpoint:
    """The newest valid checkpoint in ``directory``, warning for each newer one that is corrupt or unlisted."""
    directory = Path(directory)
    entries = read_manifest(directory)  # checked before anything is opened or deleted
    remove_temporaries(directory)
    newest_listed = max((e.iteration for e in entries), default=-1)
    listed = {e.file for e in entries}
    for path in sorted(directory.glob("iter_*")):
        match = _NAME.match(path.name)
        if match and path.name not in listed and int(match.group(1)) > newest_listed:
            warnings.warn(
                RlinfWarning(f"ignoring {path}: its write was interrupted before the manifest listed it"),
                stacklevel=2,
            )
    for position, entry in enumerate(reversed(entries)):
        data, problem = _read_verified(directory, entry)
        if data is not None:
            try:
                return LoadedCheckpoint(
                    path=directory / entry.file, iteration=entry.iteration, state=state_codec.decode(data)
                )
            except state_codec.StateFormatError as error:
                problem = f"it does not decode ({error})"
        previous = entries[-position - 2].file if position + 1 < len(entries) else "nothing"
        warnings.warn(
            RlinfWarning(
                f"checkpoint {directory / entry.file} is corrupt ({problem}); falling back to {previous}"
            ),
            stacklevel=2,
        )
    raise ConfigError(
        "checkpoints",
        str(directory),
        "holds no valid checkpoint",
        "resume from a run directory with a checkpoint, or start a new run",
    )
