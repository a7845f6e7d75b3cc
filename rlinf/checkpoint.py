"""Checkpoints that survive crashes: atomic files, a manifest of checksums, fallback past a corrupt one.

A checkpoint directory holds ``iter_NNNNNN.pt`` files (``torch.save`` of a mapping) and ``manifest.json``, which
lists the kept checkpoints with their SHA-256 and size. Writing one:

1. stream the state into a temporary file next to it (``.iter_NNNNNN.pt.<random>.tmp``), hashing as it goes;
2. ``fsync`` the file, ``os.replace`` it onto its name, ``fsync`` the directory;
3. write the new manifest the same way, then delete the checkpoints that fell out of the last ``keep``.

A crash at any point leaves the previous manifest and every file it lists intact: either a temporary file (never
read, removed with a warning by the next :func:`load_latest`) or a complete checkpoint the manifest does not list
yet (ignored with a warning: it could not be verified). :func:`load_latest` returns the newest listed checkpoint
whose size and checksum match and which loads, warning (:class:`rlinf.errors.RlinfWarning`) for every newer one it
had to skip, and raises :class:`rlinf.errors.ConfigError` when none is valid.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import attrs

from rlinf import files
from rlinf.errors import ConfigError, RlinfWarning

MANIFEST = "manifest.json"
_NAME = re.compile(r"^iter_(\d{6,})\.pt$")


@attrs.frozen(kw_only=True)
class CheckpointEntry:
    """One kept checkpoint as the manifest lists it."""

    file: str
    """File name inside the checkpoint directory."""
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
    """``iter_NNNNNN.pt``."""
    return f"iter_{iteration:06d}.pt"


class _HashingWriter:
    """A binary stream that hashes and counts what goes through it."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.digest = hashlib.sha256()
        self.num_bytes = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.num_bytes += len(data)
        return self.stream.write(data)

    def flush(self) -> None:
        self.stream.flush()


def write_atomic(path: Path, writer: Callable[[Any], None]) -> tuple[str, int]:
    """Call ``writer(stream)`` through :func:`rlinf.files.write_atomic` (temporary file, fsync, rename, fsync the
    directory). Returns the SHA-256 and the size of what was written."""
    hashing: list[_HashingWriter] = []

    def write(stream: BinaryIO) -> None:
        hashing.append(_HashingWriter(stream))
        writer(hashing[0])

    files.write_atomic(path, write)
    return hashing[0].digest.hexdigest(), hashing[0].num_bytes


def read_manifest(directory: Path) -> list[CheckpointEntry]:
    """Entries of ``directory``'s manifest, oldest first (empty when there is none)."""
    path = Path(directory) / MANIFEST
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    return [CheckpointEntry(**entry) for entry in data["checkpoints"]]


def _write_manifest(directory: Path, entries: list[CheckpointEntry]) -> None:
    text = json.dumps({"version": 1, "checkpoints": [attrs.asdict(e) for e in entries]}, indent=1)
    write_atomic(directory / MANIFEST, lambda stream: stream.write(text.encode()))


def save_checkpoint(
    directory: str | Path, iteration: int, state: Mapping[str, Any], *, keep: int = 3
) -> Path:
    """Write ``state`` as the checkpoint of ``iteration``; keep the newest ``keep`` checkpoints."""
    import torch

    if keep < 1:
        raise ConfigError("keep", keep, "must be >= 1", "keep at least one checkpoint")
    directory = Path(directory)
    path = directory / checkpoint_name(iteration)
    sha256, num_bytes = write_atomic(path, lambda stream: torch.save(dict(state), stream))
    try:
        entries = read_manifest(directory)
    except (ValueError, KeyError, TypeError):
        warnings.warn(RlinfWarning(f"{directory / MANIFEST} is unreadable; starting a new one"), stacklevel=2)
        entries = []
    entries = [e for e in entries if e.iteration != iteration]
    entries.append(CheckpointEntry(file=path.name, iteration=iteration, sha256=sha256, num_bytes=num_bytes))
    entries.sort(key=lambda e: e.iteration)
    kept, dropped = entries[-keep:], entries[:-keep]
    _write_manifest(directory, kept)
    for entry in dropped:
        (directory / entry.file).unlink(missing_ok=True)
    return path


def verify(directory: Path, entry: CheckpointEntry) -> str:
    """Why ``entry`` is not a valid checkpoint, or ``""`` when its size and checksum match."""
    path = Path(directory) / entry.file
    if not path.is_file():
        return "the file is missing"
    if path.stat().st_size != entry.num_bytes:
        return f"{path.stat().st_size} bytes instead of {entry.num_bytes}"
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != entry.sha256:
        return "the checksum does not match the manifest"
    return ""


def load_latest(directory: str | Path) -> LoadedCheckpoint:
    """The newest valid checkpoint in ``directory``, warning for each newer one that is corrupt or unlisted."""
    import torch

    directory = Path(directory)
    for stray in sorted(directory.glob(".iter_*.tmp")):
        warnings.warn(RlinfWarning(f"removing {stray}: a checkpoint write that never finished"), stacklevel=2)
        stray.unlink(missing_ok=True)
    try:
        entries = read_manifest(directory)
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(
            "checkpoint manifest",
            str(directory / MANIFEST),
            f"is unreadable ({error})",
            "restore it or start a new run",
        ) from None
    listed = {e.file for e in entries}
    newest_listed = max((e.iteration for e in entries), default=-1)
    for path in sorted(directory.glob("iter_*.pt")):
        match = _NAME.match(path.name)
        if match and path.name not in listed and int(match.group(1)) > newest_listed:
            warnings.warn(
                RlinfWarning(f"ignoring {path}: its write was interrupted before the manifest listed it"),
                stacklevel=2,
            )
    for position, entry in enumerate(reversed(entries)):
        problem = verify(directory, entry)
        state: Any = None
        if not problem:
            try:
                state = torch.load(directory / entry.file, map_location="cpu", weights_only=False)
            except (
                Exception
            ) as error:  # a checksum collision or a torch incompatibility: report and fall back
                problem = f"it does not load ({type(error).__name__}: {error})"
        if not problem and not isinstance(state, dict):
            problem = f"it holds a {type(state).__name__}, not a mapping"
        if not problem:
            return LoadedCheckpoint(path=directory / entry.file, iteration=entry.iteration, state=state)
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


# --------------------------------------------------------------------------- resuming a training run
def driver_rng_state() -> dict[str, Any]:
    """The driver's random states (Python, NumPy's global, torch's CPU generator)."""
    import random

    import numpy as np
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def restore_driver_rng(state: Mapping[str, Any]) -> None:
    """Put back what :func:`driver_rng_state` returned."""
    import random

    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


RESUME_MAY_CHANGE = frozenset({"iterations", "num_iterations", "checkpoint_every"})
"""Config keys (at any depth) that may differ between a run and its resumption."""


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_resumable(state: Mapping[str, Any], *, workload: str, config: Mapping[str, Any], plan: Any) -> None:
    """Raise unless the checkpoint was written by the same workload, config (iteration count and checkpoint
    interval aside, :data:`RESUME_MAY_CHANGE`) and plan, and holds every worker's state."""

    def relevant(flat: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in flat.items() if k.rsplit(".", 1)[-1] not in RESUME_MAY_CHANGE}

    saved_config = relevant(_flatten(state.get("config", {})))
    now_config = relevant(_flatten(config))
    fix = "resume with the config the run was started with"
    if state.get("workload") != workload:
        raise ConfigError(
            "--resume workload", workload, f"differs from the checkpoint's {state.get('workload')!r}", fix
        )
    changed = sorted(
        k for k in set(saved_config) | set(now_config) if saved_config.get(k) != now_config.get(k)
    )
    if changed:
        raise ConfigError("--resume config", changed, "differs from the checkpoint's", fix)
    if state.get("plan") != plan:
        raise ConfigError(
            "--resume plan",
            plan,
            "differs from the checkpoint's",
            "resume without --plan/--mode (the run's plan)",
        )
    if "workers" not in state:
        raise ConfigError(
            "--resume",
            state.get("iteration"),
            "the checkpoint has no worker states",
            "resume a run written by this version",
        )


def resume_workers(backend: Any, program: Any, specs: Mapping[str, Any], loaded: LoadedCheckpoint) -> int:
    """Start ``backend``'s workers for ``program``, restore them and the driver's RNG; returns the next iteration."""
    backend.start(program, specs)
    backend.restore(loaded.state["workers"])
    restore_driver_rng(loaded.state["driver_rng"])
    return loaded.iteration + 1


def metrics_until(path: Path, iteration: int) -> list[dict[str, Any]]:
    """Rewrite the metrics file (JSON lines) keeping the iterations up to ``iteration``; returns them."""
    kept = []
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip() and json.loads(line)["iteration"] <= iteration:
                kept.append(json.loads(line))
    text = "".join(json.dumps(m) + "\n" for m in kept)
    write_atomic(path, lambda stream: stream.write(text.encode()))
    return kept
