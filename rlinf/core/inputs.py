"""Reading user files: bytes first, then text, then JSON or YAML, each step with a one-line error naming the file.

Every file a command reads (traces, plans, cluster specs, configs, metric logs) comes through here, so that every
one of them is checked the same way and within the same limits (:mod:`rlinf.core.limits`):

* the path must name a readable regular file (not a folder, a device or a FIFO) of at most ``max_input_bytes``;
* the bytes must be UTF-8 text (a UTF-8 byte-order mark is dropped; UTF-16/32 and binary files are refused);
* JSON and YAML may nest at most ``max_json_depth`` deep, hold lists of at most ``max_list_length`` items, and
  hold no NaN or infinite number; YAML documents expand to at most ``max_yaml_nodes`` values once their aliases
  are resolved (an alias bomb is refused before it is built) and have text keys only.

The parsed data is plain ``dict`` / ``list`` / ``str`` / number / ``bool`` / ``None``: turning it into typed
values is :func:`rlinf.core.config_structure.structure_config`'s job (or the owning module's ``*_from_dict``).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from rlinf.core import limits as limits_module
from rlinf.core.errors import ConfigError
from rlinf.core.limits import Limits, exceeded

_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)
_UTF8_BOM = b"\xef\xbb\xbf"


def read_bytes(path: str | Path, field: str, *, what: str = "file", limits: Limits | None = None) -> bytes:
    """The bytes of the regular file ``path``; :class:`ConfigError` naming ``field`` when it does not exist, is a
    folder or a device, cannot be read or is larger than ``max_input_bytes``."""
    limits = limits or limits_module.current()
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ConfigError(field, str(path), "file does not exist", f"pass the path of a {what}") from None
    except OSError as error:
        raise ConfigError(
            field, str(path), f"cannot be read ({_reason(error)})", f"pass the path of a readable {what}"
        ) from None
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(field, str(path), "is a folder, not a file", f"pass the path of a {what}")
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(
            field, str(path), "is not a regular file (a device, FIFO or socket)", f"pass the path of a {what}"
        )
    if info.st_size > limits.max_input_bytes:
        raise exceeded(
            field, str(path), f"bytes (it has {info.st_size:,})", "max_input_bytes", limits.max_input_bytes
        )
    try:
        with path.open("rb") as stream:
            data = stream.read(limits.max_input_bytes + 1)
    except OSError as error:
        raise ConfigError(
            field, str(path), f"cannot be read ({_reason(error)})", f"pass the path of a readable {what}"
        ) from None
    if len(data) > limits.max_input_bytes:  # a file that grew, or one whose size stat does not report
        raise exceeded(field, str(path), "bytes", "max_input_bytes", limits.max_input_bytes)
    return data


def decode_text(data: bytes, field: str, name: str) -> str:
    """UTF-8 text of ``data`` (a leading byte-order mark dropped); UTF-16/32 and binary data are refused."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            raise ConfigError(field, name, f"is {encoding} text", "save the file as UTF-8")
    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM) :]
    if b"\x00" in data:
        offset = data.index(b"\x00")
        raise ConfigError(
            field, name, f"is not text (a zero byte at offset {offset}: binary, or UTF-16 without a byte-order "
            "mark)", "pass a UTF-8 text file",
        )  # fmt: skip
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            field,
            name,
            f"is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})",
            "save the file as UTF-8",
        ) from None


MAX_STRAY_ZERO_BYTES = 0.01
"""The largest share of zero bytes a console log may hold and still be read as text, beyond
:data:`FEW_ZERO_BYTES` (published veRL logs carry a few: a C string printed with its terminator); UTF-16 text without
a byte-order mark holds one in every two or four bytes."""
FEW_ZERO_BYTES = 8


def decode_console_text(data: bytes, field: str, name: str) -> tuple[str, dict[str, int]]:
    """The UTF-8 text of a console log as published: stray zero bytes dropped and bytes that are not UTF-8 (a
    multi-byte character cut by a process's output buffer) replaced by U+FFFD, both counted in the returned
    ``{"zero_bytes_dropped": n, "invalid_utf8_replaced": m}``. UTF-16/32 text, and data with more than
    :data:`MAX_STRAY_ZERO_BYTES` zero bytes and more than :data:`FEW_ZERO_BYTES` (binary, or UTF-16 without a byte-order mark), are refused as
    :func:`decode_text` refuses them."""
    zeros = data.count(b"\x00")
    if zeros > max(FEW_ZERO_BYTES, MAX_STRAY_ZERO_BYTES * len(data)):
        decode_text(data, field, name)  # refuses it: binary, or UTF-16 without a byte-order mark
    cleaned = data.replace(b"\x00", b"")
    try:
        return decode_text(cleaned, field, name), {"zero_bytes_dropped": zeros, "invalid_utf8_replaced": 0}
    except ConfigError as error:
        if "is not UTF-8 text" not in str(error):
            raise
    if cleaned.startswith(_UTF8_BOM):
        cleaned = cleaned[len(_UTF8_BOM) :]
    text = cleaned.decode("utf-8", errors="replace")
    return text, {"zero_bytes_dropped": zeros, "invalid_utf8_replaced": text.count("\ufffd")}


def read_text(path: str | Path, field: str, *, what: str = "file", limits: Limits | None = None) -> str:
    """:func:`read_bytes` then :func:`decode_text`."""
    return decode_text(read_bytes(path, field, what=what, limits=limits), field, str(path))


def parse_json(
    text: str, field: str, name: str, *, root: str | None = None, limits: Limits | None = None
) -> Any:
    """The JSON value of ``text``, checked by :func:`check_tree`. ``field`` names the input in file-level errors,
    ``name`` is the file; paths inside the document start at ``root`` (default: the file's base name)."""
    limits = limits or limits_module.current()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(
            field,
            f"{name}:{error.lineno}:{error.colno}",
            f"is not valid JSON ({error.msg})",
            "fix the JSON syntax",
        ) from None
    except RecursionError:
        raise exceeded(field, name, "levels of nesting", "max_json_depth", limits.max_json_depth) from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        raise ConfigError(field, name, f"is not valid JSON ({_first_line(error)})", "fix the value") from None
    check_tree(data, root or os.path.basename(name), limits=limits)
    return data


def load_json(path: str | Path, field: str, *, what: str = "JSON file", limits: Limits | None = None) -> Any:
    """Read, decode and parse a JSON file (see the module docstring for the checks)."""
    limits = limits or limits_module.current()
    return parse_json(read_text(path, field, what=what, limits=limits), field, str(path), limits=limits)


def parse_yaml(
    text: str, field: str, name: str, *, root: str | None = None, limits: Limits | None = None
) -> Any:
    """The YAML value of ``text`` (safe tags only), with aliases expanded at most to ``max_yaml_nodes`` values and
    checked by :func:`check_tree` (``field``, ``name`` and ``root`` as for :func:`parse_json`)."""
    limits = limits or limits_module.current()
    if (
        _flow_depth(text) > limits.max_json_depth
    ):  # PyYAML's scanner is quadratic in flow nesting: refuse first
        raise exceeded(field, name, "levels of nesting", "max_json_depth", limits.max_json_depth)
    try:  # not libyaml's CSafeLoader: it crashes (SIGSEGV) on "- - - ... x" nesting
        loader = yaml.SafeLoader(text)  # its reader refuses control characters already here
    except yaml.YAMLError as error:
        raise ConfigError(
            field, name, f"is not valid YAML ({_first_line(error)})", "fix the YAML syntax"
        ) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_node_graph(node, field, name, limits)
        data = loader.construct_document(node)
    except ConfigError:
        raise
    except yaml.YAMLError as error:
        raise ConfigError(
            field, name, f"is not valid YAML ({_first_line(error)})", "fix the YAML syntax"
        ) from None
    except RecursionError:
        raise exceeded(field, name, "levels of nesting", "max_json_depth", limits.max_json_depth) from None
    except (ValueError, TypeError, OverflowError) as error:  # e.g. an integer of thousands of digits
        raise ConfigError(
            field, name, f"has a value YAML cannot read ({_first_line(error)})", "fix the value"
        ) from None
    finally:
        loader.dispose()
    check_tree(data, root or os.path.basename(name), limits=limits)
    return data


def load_yaml(path: str | Path, field: str, *, what: str = "YAML file", limits: Limits | None = None) -> Any:
    """Read, decode and parse a YAML file (see the module docstring for the checks)."""
    limits = limits or limits_module.current()
    return parse_yaml(read_text(path, field, what=what, limits=limits), field, str(path), limits=limits)


_QUOTED_OR_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\n]|\'\')*\'|#[^\n]*')
_BRACKET = re.compile(r"[\[\]{}]")


def _flow_depth(text: str) -> int:
    """The deepest nesting of flow collections (``[...]``, ``{...}``) outside quotes and comments."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_QUOTED_OR_COMMENT.sub("", text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(0, depth - 1)
    return deepest


def _check_node_graph(root: yaml.Node, field: str, name: str, limits: Limits) -> None:
    """Refuse a composed YAML graph whose expansion (aliases resolved) exceeds ``max_yaml_nodes`` values or
    ``max_json_depth`` levels, or that refers to itself. Shared nodes are counted once per use, in linear time."""
    expanded: dict[int, int] = {}  # node id -> values it expands to
    depth_of: dict[int, int] = {}  # node id -> nesting below it
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            children = _children(node)
            expanded[key] = 1 + sum(expanded[id(child)] for child in children)
            depth_of[key] = 1 + max((depth_of[id(child)] for child in children), default=0)
            if expanded[key] > limits.max_yaml_nodes:
                raise exceeded(
                    field,
                    name,
                    "values once its aliases are expanded",
                    "max_yaml_nodes",
                    limits.max_yaml_nodes,
                )
            if depth_of[key] > limits.max_json_depth + 1:
                raise exceeded(field, name, "levels of nesting", "max_json_depth", limits.max_json_depth)
            continue
        if key in expanded:
            continue
        if key in on_path:
            raise ConfigError(field, name, "has an alias that refers to itself", "remove the recursive alias")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in expanded)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def check_tree(data: Any, field: str, *, limits: Limits | None = None) -> None:
    """Refuse parsed JSON/YAML that nests deeper than ``max_json_depth``, has a list longer than
    ``max_list_length``, a NaN or infinite number, or a key that is not text; the error names the path."""
    limits = limits or limits_module.current()
    stack: list[tuple[Any, str, int]] = [(data, field, 0)]
    while stack:
        value, where, depth = stack.pop()
        kind = type(value)
        if kind is float:
            if not math.isfinite(value):
                raise ConfigError(where, value, "must be a finite number", "write a finite number")
            continue
        if kind is not dict and kind is not list and not isinstance(value, (Mapping, list)):
            continue  # text, a number, a bool, null: a leaf
        if depth >= limits.max_json_depth:
            raise exceeded(where, "[...]" if kind is list else "{...}", "levels of nesting", "max_json_depth",
                           limits.max_json_depth)  # fmt: skip
        if kind is list or isinstance(value, list):
            if len(value) > limits.max_list_length:
                raise exceeded(
                    where, f"<{len(value):,} items>", "items", "max_list_length", limits.max_list_length
                )
            stack.extend(
                (item, f"{where}[{index}]", depth + 1)
                for index, item in enumerate(value)
                if type(item) in _WALKED or isinstance(item, (Mapping, list))
            )
        else:
            for key, item in value.items():
                if type(key) is not str:
                    raise ConfigError(f"{where}.{key}", key, "is not a text key", "quote the key")
                if type(item) in _WALKED or isinstance(item, (Mapping, list)):
                    stack.append((item, f"{where}.{key}", depth + 1))


_WALKED = (float, dict, list)
"""What :func:`check_tree` looks into; every other value (text, int, bool, None) is a leaf."""


def _reason(error: OSError) -> str:
    return error.strerror or type(error).__name__


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
