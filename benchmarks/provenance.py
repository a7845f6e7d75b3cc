"""Provenance of a measured figure: every benchmark that writes a JSON artifact records the command that measured
it, the commit, the date, the machine's cores, processor model and load average before and after, next to the raw
per-iteration values, and writes the file atomically (readers see the old artifact or the whole new one).

    started = provenance.begin("python benchmarks/bench_ray.py", argv)
    ...measure...
    provenance.write_artifact(path, {"seconds": [...], ...}, started)

``tests/test_measurements.py`` checks that each artifact carries these fields and that the figures of the README
and docs equal what ``benchmarks/measurements.py`` renders from the artifacts.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from executor.devices import processor_name
from rlinf.core.files import write_text_atomic

FIELDS = (
    "command",
    "commit",
    "uncommitted_code_changes",
    "date",
    "cores",
    "processor",
    "load_average_before",
    "load_average_after",
)
"""The keys of an artifact's ``provenance`` object (plus ``wall_s``)."""


@attrs.frozen(kw_only=True)
class Started:
    """What is known when a measurement starts."""

    command: str
    """The command line that measures, as a user would type it from the repository root."""
    commit: str
    """``git rev-parse --short HEAD`` of the checkout that measured (``unknown`` outside git)."""
    uncommitted_code_changes: bool
    """Whether tracked files other than docs (``docs/``, ``*.md``: artifacts and prose that benchmarks rewrite)
    differed from that commit when the measurement started."""
    date: str
    """UTC start time, ISO 8601."""
    cores: int
    """``os.cpu_count()``."""
    processor: str
    """The processor model (:func:`executor.devices.processor_name`): figures measured on one model need not hold
    on another."""
    load_average_before: tuple[float, float, float]
    """1-, 5- and 15-minute load averages at the start."""
    started_s: float
    """``time.perf_counter()`` at the start."""


def begin(script: str, argv: Sequence[str] | None = None) -> Started:
    """Provenance of a measurement starting now; ``script`` is the command without its arguments (e.g.
    ``python benchmarks/bench_ray.py``), ``argv`` its arguments (default: ``sys.argv[1:]``)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    return Started(
        command=" ".join([script, *(shlex.quote(a) for a in arguments)]),
        commit=_git("rev-parse", "--short", "HEAD") or "unknown",
        uncommitted_code_changes=bool(
            _git("status", "--porcelain", "--untracked-files=no", "--", ":/", ":/!docs", ":/!*.md")
        ),
        date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        cores=os.cpu_count() or 0,
        processor=processor_name(),
        load_average_before=_load_average(),
        started_s=time.perf_counter(),
    )


def finish(started: Started) -> dict[str, Any]:
    """The ``provenance`` object of an artifact: :class:`Started`'s fields, the load average now and the wall
    seconds since :func:`begin`."""
    record = {name: getattr(started, name) for name in FIELDS if name != "load_average_after"}
    record["load_average_before"] = list(started.load_average_before)
    record["load_average_after"] = list(_load_average())
    record["wall_s"] = round(time.perf_counter() - started.started_s, 1)
    return record


def document(body: dict[str, Any], started: Started) -> dict[str, Any]:
    """``body`` with its ``provenance`` (see :func:`finish`) first."""
    return {"provenance": finish(started), **body}


def write_artifact(path: str | Path, body: dict[str, Any], started: Started) -> dict[str, Any]:
    """Write ``body`` with its ``provenance`` as indented JSON to ``path`` atomically; returns what was written."""
    written = document(body, started)
    write_text_atomic(path, json.dumps(written, indent=1) + "\n")
    return written


def _load_average() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return round(one, 2), round(five, 2), round(fifteen, 2)


def _git(*arguments: str) -> str:
    try:
        out = subprocess.run(
            ["git", *arguments], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        )
    except (OSError, subprocess.CalledProcessError):
        return ""
    return out.stdout.strip()
