"""Typed values from parsed JSON/YAML: :func:`structure_config` builds a tree of attrs classes, checking every
value's type against the field's annotation before any constructor sees it, refusing unknown keys and naming
missing ones, with one clear error naming the key's full path.

It is the one conversion of user documents into values: traces (workflow, cluster, cost samples), cluster files,
workload configs and the analytic workload recorded in a trace all go through it. Range checks (``>= 1``, ``in
[0, 1]``, ...) stay in each class's constructor; an error a constructor raises about one of its fields is
re-raised under that field's full path.
"""

from __future__ import annotations

import functools
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from rlinf.core.errors import MAX_INTEGER, ConfigError, integer, number

T = TypeVar("T")


def structure_config(cls: type[T], data: Any, source: str = "config", prefix: str = "") -> T:
    """An instance of the attrs class ``cls`` from ``data`` (nested attrs classes from nested mappings). Fields
    typed ``int``, ``float`` (finite), ``bool``, ``str``, ``tuple[X, ...]``, ``Mapping[str, X]``,
    ``frozenset[X]``, ``X | None`` and attrs classes are checked; missing keys take the field's default (a field
    without one is reported missing); a key the class does not have, a value of the wrong type or one the class's
    own validation refuses is a :class:`ConfigError` naming ``prefix + key`` (and ``source``)."""
    where = prefix.rstrip(".") or source
    if not isinstance(data, Mapping):
        raise ConfigError(where, data, "must be a mapping", "write the section's keys")
    target: type = cls
    hints, fields = _hints(target), _fields(target)
    unknown = sorted((key for key in data if key not in fields), key=repr)
    if unknown:
        where_key = (
            f"{prefix}{unknown[0]}" if prefix else f"{source}.{unknown[0]}"
        )  # a top-level key: in the file
        raise ConfigError(where_key, unknown, "unknown key", f"use only {sorted(fields)}")
    kwargs = {
        key: value
        if isinstance(value, str) and fields[key].converter is not None and attrs.has(_section(hints[key]))
        else _convert(hints[key], value, f"{prefix}{key}", source)
        for key, value in data.items()
    }  # a section with a converter of its own takes a name too (a preset's name -> its section)
    for name, field in fields.items():
        if name not in kwargs and field.default is attrs.NOTHING:
            raise ConfigError(f"{prefix}{name}", None, "is missing", f"add {name} to {where}")
    try:
        return cls(**kwargs)
    except ConfigError as error:
        raise _under(error, prefix, kwargs) from None
    except (TypeError, ValueError, ArithmeticError) as error:
        raise ConfigError(where, type(data).__name__, str(error), "fix the section's values") from None


def _under(error: ConfigError, prefix: str, kwargs: Mapping[str, Any]) -> ConfigError:
    """A constructor's error about one of its own fields, renamed to that field's full path."""
    if not prefix or error.field.startswith(prefix):
        return error
    leaf = error.field.rsplit(".", 1)[-1]
    if leaf in kwargs:  # e.g. workflow.batch_size: the class names its own field
        return ConfigError(f"{prefix}{leaf}", error.value, error.problem, error.fix)
    head = error.field.replace("[", ".").split(".", 1)[0]
    if head in kwargs:  # e.g. edges.a->b or weight_sync[0].src: a path below one of this class's fields
        return ConfigError(f"{prefix}{error.field}", error.value, error.problem, error.fix)
    return error


def _section(kind: Any) -> Any:
    """The attrs class of ``Section`` or ``Section | None`` (else ``kind``)."""
    options = [a for a in typing.get_args(kind) if a is not type(None)]
    return options[0] if len(options) == 1 else kind


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _fields(cls: type) -> dict[str, Any]:
    return {f.name: f for f in attrs.fields(cls)}


def _convert(kind: Any, value: Any, field: str, source: str) -> Any:
    if kind is str and type(value) is str:  # the common cases first: a trace holds thousands of samples
        return value
    if kind is int and type(value) is int and -MAX_INTEGER <= value <= MAX_INTEGER:
        return value
    elif kind is float and type(value) is float:
        number(field, value)
        return value
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any or kind is object:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) != 1:
            return value
        return _convert(options[0], value, field, source)
    if origin is typing.Literal:
        _require(value in args, field, value, f"must be one of {list(args)}")
        return value
    if attrs.has(kind):
        return structure_config(kind, value, source, f"{field}.")
    if kind is bool:
        _require(isinstance(value, bool), field, value, "must be true or false")
    elif kind is int:
        integer(field, value)
    elif kind is float:
        number(field, value)
        _require(abs(value) <= sys.float_info.max, field, value, "is too large for a float")
        return float(value)
    elif kind is str:
        _require(isinstance(value, str), field, value, "must be a string")
    elif origin in (tuple, list, frozenset, set) or kind in (tuple, list):
        _require(isinstance(value, (list, tuple)), field, value, "must be a list")
        inner = args[0] if args else Any
        items = [_convert(inner, item, f"{field}[{i}]", source) for i, item in enumerate(value)]
        return frozenset(items) if origin in (frozenset, set) else tuple(items)
    elif origin in (Mapping, dict, typing.Mapping) or kind is dict:
        _require(isinstance(value, Mapping), field, value, "must be a mapping")
        value_kind = args[1] if len(args) == 2 else Any
        out = {}
        for key, item in value.items():
            _require(isinstance(key, str), f"{field}.{key}", key, "must be a text key")
            out[key] = _convert(value_kind, item, f"{field}.{key}", source)
        return out
    return value


def _require(condition: bool, field: str, value: Any, problem: str) -> None:
    if not condition:
        raise ConfigError(field, value, problem, f"set {field} to a value of the right type")
