"""One exception family for everything a user can get wrong.

Every message names the field, the offending value and the fix, so the CLI can print it as one line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

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
        super().__init__(f"{field}={_short(value)}: {problem}; fix: {fix}")


class InfeasiblePlanError(RlinfError):
    """A plan (or every plan) cannot run on the cluster, e.g. resident states exceed device memory."""


class RlinfWarning(UserWarning):
    """A setting has no effect, or a cost model extrapolates beyond its samples."""


class ExtrapolationWarning(RlinfWarning):
    """The cost model was asked about a batch or device count outside the profiled samples."""


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def require(condition: bool, field: str, value: Any, problem: str, fix: str) -> None:
    """Raise :class:`ConfigError` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(field, value, problem, fix)


def number(field: str, value: Any) -> None:
    """Validate that ``value`` is an int or float (not a bool, not text)."""
    fix = (
        "write a plain number (in YAML, exponents need a sign: 1.0e+12)"
        if isinstance(value, str)
        else "write a number"
    )
    require(
        isinstance(value, (int, float)) and not isinstance(value, bool), field, value, "must be a number", fix
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
    unknown = sorted(set(data) - set(valid))
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
