"""Per-step metric logs of other RL systems (veRL, RLinf), read from console, JSONL or CSV text.

A :class:`StepLog` maps each logged step to its numeric metrics. Accepted layouts:

* console output as veRL's ``console`` logger prints it, one line per step
  ``step:3 - timing_s/gen:41.2 - response_length/mean:812.5 - ...``, with or without Ray's process prefix
  (``(TaskRunner pid=12) ``, ``(main_task pid=12) ``) and colour codes; every other line is ignored, and
  ``np.float64(41.2)`` (numpy 2's repr) counts as ``41.2``. A step printed on two lines (validation before
  training, then the training step) is one step;

* JSONL, one object per line: ``{"step": 3, "data": {"timing_s/gen": 41.2, ...}}`` (veRL's ``file`` logger) or
  flat ``{"step": 3, "timing_s/gen": 41.2, ...}``; ``_step`` (Weights & Biases) also names the step;
* CSV in long form, one value per row: columns ``step``, ``metric`` (or ``tag``, ``name``, ``key``), ``value``
  (as TensorBoard scalars are exported by tools such as ``tbparse``);
* CSV in wide form, one step per row: a step column (``step``, ``_step``, ``Step`` or ``global_step``) and one
  column per metric, named by the metric or ``<run> - <metric>`` (a Weights & Biases panel export, whose
  ``__MIN`` / ``__MAX`` columns are ignored). Empty cells are values not logged at that step.

Only the metrics ``keep`` selects are read, under the name ``rename`` gives them; each must be a number (``null`` or
an empty cell counts as not logged). A metric logged twice for one step with different values is an error. Pure:
text in, values out.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from rlinf.core.errors import ConfigError, require

FORMATS = ("console", "jsonl", "csv")
STEP_KEYS = ("step", "_step", "global_step")
METRIC_COLUMNS = ("metric", "tag", "name", "key")


@attrs.frozen(kw_only=True)
class StepLog:
    """Numeric metrics by step, as one run logged them."""

    source: str
    """The file, for messages."""
    file_format: str
    values: Mapping[int, Mapping[str, float]]
    """Step -> metric name -> value."""

    def __attrs_post_init__(self) -> None:
        require(
            self.file_format in FORMATS, "--input-format", self.file_format, "unknown", f"use {list(FORMATS)}"
        )
        require(
            bool(self.values),
            self.source,
            None,
            "has no step that logs a metric looked for",
            "check --format (veRL logs timing_s/..., RLinf time/...; see docs/trace_import.md)",
        )


def format_of(path: str) -> str:
    """The layout a file name implies: ``.log`` / ``.txt`` / ``.out`` -> console, ``.jsonl`` / ``.json`` -> jsonl,
    ``.csv`` -> csv."""
    lower = path.lower()
    if lower.endswith((".log", ".txt", ".out")):
        return "console"
    if lower.endswith((".jsonl", ".json")):
        return "jsonl"
    if lower.endswith(".csv"):
        return "csv"
    raise ConfigError(
        "--input-format", None, f"cannot be told from the name {path!r}", f"pass one of {list(FORMATS)}"
    )


def read_step_log(
    text: str,
    *,
    source: str,
    file_format: str,
    keep: Callable[[str], bool],
    rename: Callable[[str], str] = str,
) -> StepLog:
    """Parse ``text`` (the file's contents) into a :class:`StepLog` of the metrics ``keep`` selects, each stored
    under ``rename(metric)`` (``keep`` sees the renamed metric)."""
    require(
        file_format in FORMATS, "--input-format", file_format, "unknown format", f"use one of {list(FORMATS)}"
    )
    collected = _Steps(source, rename)
    readers = {"console": _read_console, "jsonl": _read_jsonl, "csv": _read_csv}
    readers[file_format](text, collected, keep)
    return StepLog(source=source, file_format=file_format, values=collected.values)


class _Steps:
    """Accumulates values by step, refusing conflicting duplicates."""

    def __init__(self, source: str, rename: Callable[[str], str]) -> None:
        self.source = source
        self.rename = rename
        self.values: dict[int, dict[str, float]] = {}

    def add(self, step: int, metric: str, raw: Any, where: str, keep: Callable[[str], bool]) -> None:
        metric = self.rename(metric)
        if not keep(metric) or raw is None or (isinstance(raw, str) and not raw.strip()):
            return
        value = _number(raw, f"{where} {metric}")
        known = self.values.setdefault(step, {})
        if metric in known and known[metric] != value:
            raise ConfigError(
                f"{where} {metric}",
                value,
                f"conflicts with {known[metric]!r} logged earlier for step {step}",
                "export one run only (one value per metric and step)",
            )
        known[metric] = value


def _number(raw: Any, where: str) -> float:
    if isinstance(raw, str):
        try:
            raw = float(raw)
        except ValueError:
            raise ConfigError(where, raw, "must be a number", "export numeric metric values") from None
    require(
        isinstance(raw, (int, float)) and not isinstance(raw, bool) and math.isfinite(raw),
        where,
        raw,
        "must be a finite number",
        "export numeric metric values",
    )
    return float(raw)


def _step(raw: Any, where: str) -> int:
    value = _number(raw, where)
    require(
        value == int(value) and value >= 0, where, raw, "must be a whole number >= 0", "log integer steps"
    )
    return int(value)


_COLOUR = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STEP_LINE = re.compile(r"(?:^|[\s)\]])step:(\d{1,12}) - (.*)$")
_PROCESS_PREFIX = re.compile(r"^\s*\([^()]*\)\s?")
_CONTINUATION = re.compile(r"^\S*( - [^\s:]+:\S+)+\s*$")
_NUMPY_SCALAR = re.compile(r"^(?:np|numpy)\.[a-z]+[0-9]*\((.*)\)$")


def _read_console(text: str, steps: _Steps, keep: Callable[[str], bool]) -> None:
    """veRL's console lines ``step:N - name:value - ...``; Ray splits a long line it reads while it is being
    written, so a line that only continues ``name:value`` items (after the process prefix) joins the step line
    before it."""
    lines = [_COLOUR.sub("", line) for line in text.splitlines()]
    number = 0
    while number < len(lines):
        match = _STEP_LINE.search(lines[number])
        number += 1
        if match is None:
            continue
        where = f"{steps.source}:{number}"
        items = match.group(2)
        while number < len(lines):
            rest = _PROCESS_PREFIX.sub("", lines[number])
            if _STEP_LINE.search(lines[number]) or not _CONTINUATION.match(rest):
                break
            items, number = items + rest, number + 1
        step = _step(match.group(1), f"{where} step")
        for item in items.split(" - "):
            name, separator, raw = item.partition(":")
            if separator:
                scalar = _NUMPY_SCALAR.match(raw.strip())
                steps.add(step, name.strip(), scalar.group(1) if scalar else raw, where, keep)


def _read_jsonl(text: str, steps: _Steps, keep: Callable[[str], bool]) -> None:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{steps.source}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ConfigError(
                where, line[:40], f"is not valid JSON ({error.msg})", "write one JSON object per line"
            ) from None
        require(isinstance(record, dict), where, record, "must be a JSON object", "write one object per step")
        step_key = next((key for key in STEP_KEYS if key in record), None)
        require(
            step_key is not None,
            where,
            sorted(record)[:4],
            "has no step",
            f"give each line one of {list(STEP_KEYS)} (veRL's file logger writes 'step')",
        )
        step = _step(record[step_key], f"{where} {step_key}")
        metrics = record.get("data", record)
        require(
            isinstance(metrics, dict),
            f"{where} data",
            metrics,
            "must be a JSON object",
            "map metric -> value",
        )
        for metric, raw in metrics.items():
            steps.add(step, metric, raw, where, keep)


def _read_csv(text: str, steps: _Steps, keep: Callable[[str], bool]) -> None:
    rows = list(csv.reader(io.StringIO(text)))
    require(bool(rows), steps.source, "empty", "is empty", "export the metrics with a header row")
    header = [column.strip() for column in rows[0]]
    lowered = [column.lower() for column in header]
    step_column = next((lowered.index(k) for k in STEP_KEYS if k in lowered), None)
    require(
        step_column is not None,
        f"{steps.source}:1",
        header[:6],
        "has no step column",
        f"name one column {list(STEP_KEYS)}",
    )
    assert step_column is not None
    metric_column = next((lowered.index(k) for k in METRIC_COLUMNS if k in lowered), None)
    long_form = metric_column is not None and "value" in lowered
    value_column = lowered.index("value") if long_form else -1
    wide = (
        {} if long_form else {i: _metric_of_column(name) for i, name in enumerate(header) if i != step_column}
    )
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        where = f"{steps.source}:{number}"
        require(
            len(row) == len(header),
            where,
            len(row),
            f"cells where the header has {len(header)}",
            "export a rectangular CSV",
        )
        step = _step(row[step_column], f"{where} {header[step_column]}")
        if long_form:
            assert metric_column is not None
            steps.add(step, row[metric_column].strip(), row[value_column], where, keep)
            continue
        for index, column_metric in wide.items():
            if column_metric is not None:
                steps.add(step, column_metric, row[index], where, keep)


def _metric_of_column(name: str) -> str | None:
    """The metric a wide column holds; ``None`` for Weights & Biases ``__MIN`` / ``__MAX`` companions."""
    if name.endswith(("__MIN", "__MAX")):
        return None
    return name.rsplit(" - ", 1)[-1].strip()
