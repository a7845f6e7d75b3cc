"""Run directories: one run per directory, never overwritten by another, files written so a crash loses nothing.

A run directory holds what :func:`rlinf.app.runner.run` writes (:data:`RUN_FILES`, ``tensorboard/`` and
``checkpoints/``). A fresh run refuses a directory that already holds one (:func:`require_fresh`); the default
directory is new for every run (:func:`default_out`). ``metrics.jsonl`` grows one line per iteration, each line
written with one ``write`` on an append-only descriptor and ``fsync``-ed (:func:`append_metrics`); a torn last line
(a crash in the middle of that write) is dropped with a warning when the run resumes (:func:`read_metrics`).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

from rlinf.core import files
from rlinf.core.errors import ConfigError, RlinfWarning

METRICS = "metrics.jsonl"
RUN_FILES = (
    "plan.yaml",
    METRICS,
    "trace.json",
    "profile_trace.json",
    "timeline.json",
    "gantt.png",
    "timeline_predicted.json",
    "gantt_predicted.png",
    "timeline_pair.png",
)
"""Files of a run (besides ``checkpoints/`` and ``tensorboard/``)."""
_TEMPORARY = re.compile(r"^\.(" + "|".join(re.escape(name) for name in RUN_FILES) + r")\..+\.tmp$")


def default_out(workload: str, *, now: datetime.datetime | None = None, root: Path = Path("runs")) -> Path:
    """A run directory no run has used: ``runs/<workload>-<YYYYmmdd-HHMMSS>`` (``-2``, ``-3``, ... appended
    when that exists). The directory is created, so two runs started in the same second get different ones."""
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    root.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, 1000):
        path = root / (f"{workload}-{stamp}" if attempt == 1 else f"{workload}-{stamp}-{attempt}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise ConfigError("--out", str(root), "has no free run directory name left", "pass --out explicitly")


def held_run(run_dir: Path) -> str | None:
    """What run ``run_dir`` holds, e.g. ``iterations 1-4``; ``None`` when it holds nothing a new run could lose:
    no iteration's metrics, no checkpoint and no measured trace (what a run that failed before its first
    iteration leaves, a plan and a profile, is rewritten by the next)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    iterations = [m["iteration"] for m in read_metrics(run_dir / METRICS, quiet=True)]
    if iterations:
        return f"iterations {min(iterations)}-{max(iterations)}"
    if (run_dir / "checkpoints" / "manifest.json").exists():
        return "checkpoints"
    if (run_dir / "trace.json").exists():
        return "a measured trace.json"
    return None


def require_fresh(run_dir: Path, *, flag: str = "--out") -> None:
    """Raise unless ``run_dir`` can take a new run: it does not exist, or is an empty-of-runs directory."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(flag, str(run_dir), "is a file, not a directory", f"choose another {flag}")
    held = held_run(run_dir)
    if held is not None:
        raise ConfigError(
            flag, str(run_dir), f"holds a run ({held})", f"--resume it, or choose another {flag}"
        )


def require_no_links(run_dir: Path) -> None:
    """Raise when a file or folder of the run in ``run_dir`` is a symbolic link (which would make rlinf read or
    write outside the run directory)."""
    for name in (*RUN_FILES, "checkpoints", "tensorboard"):
        if (Path(run_dir) / name).is_symlink():
            raise ConfigError(
                f"--resume {run_dir}",
                name,
                "is a symbolic link",
                "resume a run directory rlinf wrote",
            )


def keep_stall(directory: Path, error: Any, name: str = "stall.json") -> Path:
    """Write a stalled run's full state (every worker's status, op, lane position, process id and Python stack)
    to ``directory/name``; the command line shows one line."""
    path = directory / name
    directory.mkdir(parents=True, exist_ok=True)
    files.write_text_atomic(path, json.dumps(error.report.to_dict(), indent=1) + "\n")
    return path


def read_metrics(path: Path, *, quiet: bool = False) -> list[dict[str, Any]]:
    """The iterations' metrics in ``path`` (JSON lines). A torn last line (a crash while it was written) is
    dropped with a warning (none when ``quiet``); any other unreadable line is a :class:`ConfigError`."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_bytes().split(b"\n")
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            metrics = json.loads(line.decode("utf-8"))
            if not isinstance(metrics, dict) or not isinstance(metrics.get("iteration"), int):
                raise ValueError("not an object with an integer iteration")
        except (UnicodeDecodeError, ValueError, RecursionError):
            if number == len(lines) or (number == len(lines) - 1 and not lines[-1]):
                if not quiet:
                    warnings.warn(RlinfWarning(f"{path}: dropping its torn last line {number}"), stacklevel=2)
                break
            raise ConfigError(
                f"{path} line {number}",
                line[:60].decode("utf-8", "replace"),
                "is not a metrics record",
                "restore the file rlinf wrote, or start a new run",
            ) from None
        out.append(metrics)
    return out


def metrics_until(path: Path, iteration: int) -> list[dict[str, Any]]:
    """Rewrite the metrics file (atomically) keeping the iterations up to ``iteration``; returns them."""
    kept = [m for m in read_metrics(path) if m["iteration"] <= iteration]
    files.write_text_atomic(path, "".join(json.dumps(m) + "\n" for m in kept))
    return kept


def begin_segment(run_dir: Path, plan_yaml: str, iteration: int) -> list[dict[str, Any]]:
    """Set the run directory where a segment of the run starts, after ``iteration`` (0: fresh): its plan in
    ``plan.yaml`` (what ``--resume`` reads) and the metrics up to ``iteration`` (returned, the file rewritten)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    history = metrics_until(run_dir / METRICS, iteration)
    files.write_text_atomic(run_dir / "plan.yaml", plan_yaml)
    return history


def append_metrics(path: Path, metrics: dict[str, Any]) -> None:
    """Append one iteration's line with a single ``write`` and ``fsync`` it: after a crash the file ends with
    the whole line, or without it, or (a torn write) with a prefix that :func:`read_metrics` drops."""
    line = (json.dumps(metrics) + "\n").encode("utf-8")
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        written = os.write(descriptor, line)
        while written < len(line):
            written += os.write(descriptor, line[written:])
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def remove_temporaries(run_dir: Path) -> None:
    """Delete, with a warning each, the temporary files of run-file writes that never finished."""
    for stray in sorted(Path(run_dir).glob(".*.tmp")):
        if _TEMPORARY.match(stray.name):
            warnings.warn(RlinfWarning(f"removing {stray}: a write that never finished"), stacklevel=2)
            stray.unlink(missing_ok=True)
