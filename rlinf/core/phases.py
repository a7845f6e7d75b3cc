"""Phase marks: where a run's wall time goes, written as it happens so that a run killed at a limit still says.

When the environment variable ``RLINF_PHASES`` names a file, :func:`mark` appends one JSON line per phase reached
(``{"phase", "t", "pid", ...}``, ``t`` in seconds since the epoch) to it, from the driver and from every worker
process (they inherit the environment). Without the variable it does nothing. ``benchmarks/gpu_check.py`` sets it
for each check and turns the lines into durations with :func:`durations`, also for a check cut by its time limit.

Phases in order of a run: ``config_checked`` (driver: config loaded, prompts tokenized), ``profiling_started`` /
``profiling_done`` (auto mode and validate), ``workers_starting`` (driver), ``worker_process`` (a worker process
runs), ``device_bound`` (its device bound: on a GPU, CUDA initialised), ``base_model_ready`` / ``warm_start_ready``
(GRPO on a Hugging Face model: the built model and its warm start, from the cache or made now),
``worker_ready`` (a worker's setup done), ``iteration_done`` (driver, with ``iteration``), ``run_done``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

PHASES_ENV = "RLINF_PHASES"
"""The environment variable naming the file phase marks go to (unset: no marks)."""


def mark(phase: str, **fields: Any) -> None:
    """Append ``phase`` (with ``fields``, JSON values) to the file named by ``RLINF_PHASES``, if set. One short
    ``write`` in append mode per mark, so that lines from several processes do not interleave."""
    path = os.environ.get(PHASES_ENV)
    if not path:
        return
    line = json.dumps({"phase": phase, "t": time.time(), "pid": os.getpid(), **fields}) + "\n"
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, line.encode())
    finally:
        os.close(descriptor)


def read_marks(path: str | Path) -> list[dict[str, Any]]:
    """The marks in ``path`` in time order (none when the file is missing; a torn last line is skipped)."""
    path = Path(path)
    if not path.is_file():
        return []
    marks = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if (
            isinstance(entry, dict)
            and isinstance(entry.get("phase"), str)
            and isinstance(entry.get("t"), float)
        ):
            marks.append(entry)
    return sorted(marks, key=lambda m: m["t"])


def _label(entry: Mapping[str, Any]) -> str:
    extra = [f"{k}={entry[k]}" for k in ("component", "iteration", "probe") if k in entry]
    return entry["phase"] + (f" ({', '.join(str(e) for e in extra)})" if extra else "")


def durations(
    marks: Iterable[Mapping[str, Any]], started: float, ended: float | None = None
) -> list[dict[str, Any]]:
    """Each mark as ``{phase, at_s, took_s}``: seconds from ``started`` (the command's start, epoch seconds) to the
    mark, and from the mark before it (the first: from ``started``). With ``ended`` (the command's end, killed or
    not) a last entry ``end`` says how long the run went on after its last mark: where a cut run was stuck."""
    out: list[dict[str, Any]] = []
    before = started
    for entry in marks:
        out.append(
            {
                "phase": _label(entry),
                "at_s": round(entry["t"] - started, 2),
                "took_s": round(entry["t"] - before, 2),
            }
        )
        before = entry["t"]
    if ended is not None:
        out.append({"phase": "end", "at_s": round(ended - started, 2), "took_s": round(ended - before, 2)})
    return out
