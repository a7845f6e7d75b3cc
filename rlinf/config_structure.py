"""Typed configs from YAML mappings: :func:`structure_config` builds a tree of attrs classes, checking every
value's type against the field's annotation and refusing unknown keys, with one clear error naming the key."""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from rlinf.errors import ConfigError

T = TypeVar("T")


def structure_config(cls: type[T], data: Any, source: str = "config", prefix: str = "") -> T:
    """An instance of the attrs class ``cls`` from ``data`` (nested attrs classes from nested mappings). Fields
    typed ``int``, ``float``, ``bool``, ``str``, ``tuple[X, ...]`` and ``X | None`` are checked; missing keys take
    the field's default; a key the class does not have, a value of the wrong type or one the class's own
    validation refuses is a :class:`ConfigError` naming ``prefix + key`` (and ``source``)."""
    where = prefix.rstrip(".") or source
    if not isinstance(data, Mapping):
        raise ConfigError(where, data, "must be a mapping", "write the section's keys")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in attrs.fields(cls)}  # type: ignore[misc,arg-type]
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(
                f"{prefix}{key}", value, f"unknown key in {source}", f"use one of {sorted(fields)}"
            )
        kwargs[key] = _convert(hints[key], value, f"{prefix}{key}", source)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as error:
        raise ConfigError(where, dict(data), str(error), "fix the section's values") from None


def _convert(kind: Any, value: Any, field: str, source: str) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)] or [Any]
        return _convert(inner, value, field, source)
    if attrs.has(kind):
        return structure_config(kind, value, source, f"{field}.")
    if kind is bool:
        _require(isinstance(value, bool), field, value, "must be true or false")
    elif kind is int:
        _require(isinstance(value, int) and not isinstance(value, bool), field, value, "must be an integer")
    elif kind is float:
        _require(
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value),
            field, value, "must be a finite number",
        )  # fmt: skip
        return float(value)
    elif kind is str:
        _require(isinstance(value, str), field, value, "must be a string")
    elif origin is tuple:
        _require(isinstance(value, (list, tuple)), field, value, "must be a list")
        inner = args[0] if args else Any
        return tuple(_convert(inner, item, f"{field}[{i}]", source) for i, item in enumerate(value))
    return value


def _require(condition: bool, field: str, value: Any, problem: str) -> None:
    if not condition:
        raise ConfigError(field, value, problem, f"set {field} to a value of the right type")
