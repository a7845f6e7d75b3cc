"""One exception family for everything a user can get wrong.

Every message names the field, the offending value and the fix, so the CLI can print it as one line.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import attrs


class RlinfError(Exception):
    """Base of all user-facing errors. The CLI prints ``str(error)`` and exits with code 2."""


class ConfigError(RlinfError, ValueError):
    """A value supplied by the user (file, flag, constructor argument) is invalid."""

    def __init__(self, field: str, value: Any, problem: str, fix: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        self.fix = fix
        super().__init__(f"{_one_line(field)}={_short(value)}: {_one_line(problem)}; fix: {_one_line(fix)}")


class InfeasiblePlanError(RlinfError):
    """A plan (or every plan) cannot run on the cluster, e.g. resident states exceed device memory."""


class RlinfWarning(UserWarning):
    """A setting has no effect, or a cost model extrapolates beyond its samples."""


class ExtrapolationWarning(RlinfWarning):
    """The cost model was asked about a batch or device count outside the profiled samples."""


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` on one line, at most ``limit`` characters: a longer one keeps its start and its end (a
    path's file name, a location's line number), joined by ``...``."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an integer of thousands of digits, a structure nested too deeply
        text = f"<{type(value).__name__} too large to show>"
    if len(text) > limit:
        tail = (limit - 3) // 2
        text = text[: limit - 3 - tail] + "..." + text[-tail:]
    return _one_line(text)


def _one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped: a message is always one line."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def require(condition: bool, field: str, value: Any, problem: str, fix: str) -> None:
    """Raise :class:`ConfigError` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(field, value, problem, fix)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (not a bool, not text, not NaN or infinite)."""
    if type(value) is float:  # the common cases first: traces hold hundreds of thousands of numbers
        return math.isfinite(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    if isinstance(value, numbers.Integral):
        return bool(abs(int(value)) <= sys.float_info.max)  # an integer of hundreds of digits is no float
    return math.isfinite(value)


def number(field: str, value: Any) -> None:
    """Validate that ``value`` is a finite int or float (not a bool, not text, not NaN or infinite)."""
    if (type(value) is float and math.isfinite(value)) or (type(value) is int and abs(value) <= MAX_INTEGER):
        return  # the common case, before any message is formatted
    fix = (
        "write a plain number (in YAML, exponents need a sign: 1.0e+12)"
        if isinstance(value, str)
        else "write a number"
    )
    require(
        isinstance(value, numbers.Real) and not isinstance(value, bool), field, value, "must be a number", fix
    )
    require(is_number(value), field, value, "must be a finite number", f"give {field} a finite value")


MAX_INTEGER = 2**63 - 1
"""Counts are 64-bit integers once they reach numpy."""


def integer(
    field: str, value: Any, *, minimum: int | None = None, maximum: int | None = None, fix: str = ""
) -> None:
    """Validate that ``value`` is a whole number (an int, not a bool or a float) in ``[minimum, maximum]``."""
    if (
        type(value) is int
        and -MAX_INTEGER <= value <= MAX_INTEGER
        and (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
    ):
        return  # the common case, before any message is formatted
    parts = ([f">= {minimum}"] if minimum is not None else []) + (
        [f"<= {maximum}"] if maximum is not None else []
    )
    bounds = " and ".join(parts)
    problem = f"must be an integer {bounds}".rstrip()
    advice = fix or f"set {field} to a whole number {bounds}".rstrip()
    require(
        isinstance(value, numbers.Integral) and not isinstance(value, bool), field, value, problem, advice
    )
    require(minimum is None or value >= minimum, field, value, problem, advice)
    require(maximum is None or value <= maximum, field, value, problem, advice)
    require(
        abs(value) <= MAX_INTEGER, field, value, f"is beyond the 64-bit range (|n| <= {MAX_INTEGER})", advice
    )


def positive(field: str, value: Any) -> None:
    """Validate that ``value`` is a number > 0."""
    number(field, value)
    require(value > 0, field, value, "must be > 0", f"set {field} to a positive number")


def non_negative(field: str, value: Any) -> None:
    """Validate that ``value`` is a number >= 0."""
    number(field, value)
    require(value >= 0, field, value, "must be >= 0", f"set {field} to zero or a positive number")


def to_tuple(values: Iterable[Any]) -> tuple[Any, ...]:
    """attrs converter: any iterable to a tuple (typed, unlike the bare ``tuple`` builtin)."""
    return tuple(values)


def reject_unknown_keys(data: Mapping[str, Any], known: Iterable[str], source: str) -> None:
    """Raise naming the first key of ``data`` that is not in ``known``, listing the valid keys."""
    valid = sorted(known)
    allowed = set(valid)
    unknown = sorted((key for key in data if key not in allowed), key=repr)
    if unknown:
        raise ConfigError(f"{source}.{unknown[0]}", unknown, "unknown key", f"use only {valid}")


def require_keys(data: Mapping[str, Any], required: Iterable[str], source: str, hint: str = "") -> None:
    """Raise naming the first key of ``required`` that ``data`` lacks."""
    for key in required:
        if key not in data:
            raise ConfigError(f"{source}.{key}", None, "is missing", f"add {key}{hint}")


def build_from_mapping(cls: type, value: Any, field: str) -> Any:
    """Build an attrs class from a mapping (parsed YAML/JSON), naming unknown and missing keys."""
    fields = attrs.fields(cls)
    if not isinstance(value, Mapping):
        raise ConfigError(field, value, "must be a mapping", f"give the fields {[a.name for a in fields]}")
    reject_unknown_keys(value, (a.name for a in fields), field)
    require_keys(value, (a.name for a in fields if a.default is attrs.NOTHING), field)
    return cls(**value)


V = TypeVar("V")


def registry_entry(table: Mapping[str, V], key: str, field: str, problem: str) -> V:
    """``table[key]``; else a :class:`ConfigError` naming ``field`` and ``key`` with ``problem``, listing the known
    keys (a registry is explicit and loud)."""
    if key not in table:
        raise ConfigError(field, key, problem, f"use one of {sorted(table)}")
    return table[key]
