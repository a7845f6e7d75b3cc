"""Worker and driver state as data that holds no code: tensors in a safetensors file, the rest as JSON.

A checkpoint's state is a tree of plain values (``None``, bools, ints, floats, strings, lists, tuples, dicts),
torch tensors, NumPy arrays and NumPy scalars: what ``state_dict()``, optimizer states and random generators
return. :func:`encode` turns such a tree into the bytes of one safetensors file: every tensor and array becomes a
named tensor, and the tree itself, with each tensor replaced by its name, is JSON in the file's metadata
(``rlinf.state``). :func:`decode` reads it back with nothing but the safetensors parser and :func:`json.loads`:
no pickle, so a file someone else wrote can be wrong, never run code.

JSON holds what JSON cannot say as one-key objects with a ``$`` tag: ``{"$tuple": [...]}``, ``{"$dict": [[key,
value], ...]}`` (keys that are not strings, or that start with ``$``), ``{"$float": "nan"}`` (non-finite floats),
``{"$tensor": name}``, ``{"$array": name, "dtype": "<f4", "shape": [...]}`` (NumPy arrays, stored as bytes) and
``{"$scalar": "<f8", "value": ...}`` (NumPy scalars). Anything else is refused when writing (an internal bug) and
when reading (a file rlinf did not write).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

METADATA_KEY = "rlinf.state"
_NUMERIC_KINDS = frozenset("biufc")
"""NumPy dtype kinds an array or scalar may have (bool, signed, unsigned, float, complex): never objects."""
MAX_HEADER_BYTES = 100 * 1024 * 1024
"""safetensors' own limit on a header, checked before parsing one."""


class StateFormatError(ValueError):
    """The bytes are not a state :func:`encode` wrote (says why)."""


def encode(state: Mapping[str, Any]) -> bytes:
    """The bytes of a safetensors file holding ``state`` (see the module docstring for what it may contain)."""
    from safetensors.torch import save

    tensors: dict[str, Any] = {}
    tree = _encode(dict(state), tensors)
    return bytes(save(tensors, metadata={METADATA_KEY: json.dumps(tree, allow_nan=False)}))


def decode(data: bytes) -> dict[str, Any]:
    """The state :func:`encode` wrote into ``data``; raises :class:`StateFormatError` for anything else."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    metadata = _metadata(data)
    if METADATA_KEY not in metadata:
        raise StateFormatError(f"the safetensors metadata has no {METADATA_KEY!r} entry")
    try:
        tree = json.loads(metadata[METADATA_KEY])
        tensors = load(data)
    except (ValueError, RecursionError, SafetensorError) as error:
        raise StateFormatError(f"unreadable ({type(error).__name__}: {error})") from None
    try:
        state = _decode(tree, tensors)
    except RecursionError:
        raise StateFormatError("the state is nested too deeply") from None
    if not isinstance(state, dict):
        raise StateFormatError(f"the state is a {type(state).__name__}, not a mapping")
    return state


def _metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors header (8-byte little-endian length, then JSON)."""
    if len(data) < 8:
        raise StateFormatError("too short for a safetensors file")
    length = int.from_bytes(data[:8], "little")
    if length > min(MAX_HEADER_BYTES, len(data) - 8):
        raise StateFormatError(f"header length {length} does not fit the file")
    try:
        header = json.loads(data[8 : 8 + length].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise StateFormatError(f"unreadable header ({type(error).__name__})") from None
    metadata = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise StateFormatError("the header has no string metadata")
    return metadata


def _encode(value: Any, tensors: dict[str, Any]) -> Any:
    import numpy as np
    import torch

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.generic):
        return _encode_scalar(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else {"$float": repr(float(value))}
    if isinstance(value, torch.Tensor):
        name = f"t{len(tensors)}"
        tensors[name] = value.detach().cpu().contiguous().clone()
        return {"$tensor": name}
    if isinstance(value, np.ndarray):
        return _encode_array(value, tensors)
    if isinstance(value, list):
        return [_encode(item, tensors) for item in value]
    if isinstance(value, tuple):
        return {"$tuple": [_encode(item, tensors) for item in value]}
    if isinstance(value, Mapping):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: _encode(v, tensors) for k, v in value.items()}
        return {"$dict": [[_encode(k, tensors), _encode(v, tensors)] for k, v in value.items()]}
    raise TypeError(f"a checkpoint cannot hold a {type(value).__name__} ({value!r:.80})")


def _encode_scalar(value: Any) -> dict[str, Any]:
    if value.dtype.kind not in _NUMERIC_KINDS:
        raise TypeError(f"a checkpoint cannot hold a NumPy {value.dtype} scalar")
    item = value.item()
    if isinstance(item, complex):
        item = [item.real, item.imag]
    return {"$scalar": value.dtype.str, "value": _encode(item, {})}


def _encode_array(value: Any, tensors: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch

    if value.dtype.kind not in _NUMERIC_KINDS:
        raise TypeError(f"a checkpoint cannot hold a NumPy array of {value.dtype}")
    name = f"t{len(tensors)}"
    raw = np.ascontiguousarray(value).tobytes()
    tensors[name] = (
        torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    )
    return {"$array": name, "dtype": value.dtype.str, "shape": list(value.shape)}


def _decode(node: Any, tensors: Mapping[str, Any]) -> Any:
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [_decode(item, tensors) for item in node]
    if not isinstance(node, dict):
        raise StateFormatError(f"unexpected JSON value {node!r:.60}")
    tag = next((k for k in node if k.startswith("$")), None)
    if tag is None:
        return {k: _decode(v, tensors) for k, v in node.items()}
    return _decode_tagged(tag, node, tensors)


def _decode_tagged(tag: str, node: dict[str, Any], tensors: Mapping[str, Any]) -> Any:
    body = node[tag]
    if tag == "$tuple" and isinstance(body, list):
        return tuple(_decode(item, tensors) for item in body)
    if tag == "$dict" and isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body):
        return {_hashable(_decode(k, tensors)): _decode(v, tensors) for k, v in body}
    if tag == "$float" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "$tensor" and isinstance(body, str) and body in tensors:
        return tensors[body]
    if tag == "$array" and isinstance(body, str) and body in tensors:
        return _decode_array(node, tensors[body])
    if tag == "$scalar" and isinstance(body, str):
        return _decode_scalar(body, _decode(node.get("value"), tensors))
    raise StateFormatError(f"malformed {tag!r} entry {node!r:.80}")


def _hashable(key: Any) -> Any:
    if isinstance(key, list | dict):
        raise StateFormatError(f"a mapping key cannot be {key!r:.60}")
    return key


def _numeric_dtype(text: Any) -> Any:
    import numpy as np

    try:
        dtype = np.dtype(text) if isinstance(text, str) else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in _NUMERIC_KINDS or dtype.fields is not None:
        raise StateFormatError(f"dtype {text!r:.40} is not a plain numeric type")
    return dtype


def _decode_array(node: dict[str, Any], raw: Any) -> Any:
    import numpy as np

    dtype = _numeric_dtype(node.get("dtype"))
    shape = node.get("shape")
    if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise StateFormatError(f"array shape {shape!r:.60} is not a list of sizes")
    data = raw.numpy().tobytes()
    if len(data) != dtype.itemsize * math.prod(shape):
        raise StateFormatError(
            f"array of shape {shape} and dtype {dtype} does not match its {len(data)} bytes"
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _decode_scalar(dtype_text: str, value: Any) -> Any:
    dtype = _numeric_dtype(dtype_text)
    if dtype.kind == "c" and isinstance(value, list) and len(value) == 2:
        value = complex(*value)
    if not isinstance(value, (bool, int, float, complex)):
        raise StateFormatError(f"scalar value {value!r:.40} is not a number")
    return dtype.type(value)
