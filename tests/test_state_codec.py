"""The checkpoint state codec: every value a worker checkpoints survives exactly, and bytes rlinf did not write
are refused (never turned into objects)."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
from safetensors.torch import save

from rlinf.app.state_codec import METADATA_KEY, StateFormatError, decode, encode


def test_worker_states_round_trip_exactly() -> None:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    generator = np.random.default_rng(5)
    state = {
        "python_rng": random.getstate(),
        "numpy_rng": np.random.get_state(),
        "torch_rng": torch.get_rng_state(),
        "bit_generator": generator.bit_generator.state,
        "optimizer": optimizer.state_dict(),  # integer keys, tuples, a 0-d step tensor
        "model": model.state_dict(),
        "floats": [float("nan"), float("inf"), -0.0, 1e-300],
        "scalars": [np.float64(2.5), np.int32(-3), np.bool_(True), np.complex64(1 + 2j)],
        "arrays": {"f32": np.arange(6, dtype=np.float32).reshape(2, 3), "empty": np.zeros((0, 4)), "u32": np.arange(3, dtype=np.uint32)},
        "$dollar": None,
    }  # fmt: skip
    back = decode(encode(state))
    assert back["python_rng"] == random.getstate() and isinstance(back["python_rng"][1], tuple)
    numpy_back = back["numpy_rng"]
    assert numpy_back[0] == "MT19937" and np.array_equal(numpy_back[1], np.random.get_state()[1])
    assert torch.equal(back["torch_rng"], torch.get_rng_state())
    assert back["bit_generator"] == generator.bit_generator.state
    assert back["optimizer"]["param_groups"] == optimizer.state_dict()["param_groups"]
    assert torch.equal(
        back["optimizer"]["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"]
    )
    assert all(torch.equal(back["model"][k], v) for k, v in model.state_dict().items())
    assert math.isnan(back["floats"][0]) and back["floats"][1:] == [float("inf"), -0.0, 1e-300]
    assert [type(x) for x in back["scalars"]] == [np.float64, np.int32, np.bool_, np.complex64]
    assert back["scalars"][3] == np.complex64(1 + 2j)
    assert back["arrays"]["f32"].dtype == np.float32 and back["arrays"]["empty"].shape == (0, 4)
    assert back["arrays"]["u32"].dtype == np.uint32 and "$dollar" in back
    restored = np.random.default_rng(0)
    restored.bit_generator.state = back["bit_generator"]
    assert restored.random() == generator.random()


def test_unsupported_values_are_refused_when_writing() -> None:
    with pytest.raises(TypeError, match="cannot hold a object"):
        encode({"x": object()})
    with pytest.raises(TypeError, match="array of object"):
        encode({"x": np.array([object()])})


def planted(tree: object, tensors: dict | None = None) -> bytes:
    return bytes(save(tensors or {}, metadata={METADATA_KEY: json.dumps(tree)}))


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "too short"),
        (b"\xff" * 16, "does not fit"),
        (planted({"$pickle": "gASV"}), "malformed '\\$pickle'"),
        (planted({"x": {"$tensor": "missing"}}), "malformed '\\$tensor'"),
        (planted({"x": {"$array": "t0", "dtype": "|O", "shape": [1]}}, {"t0": torch.zeros(8, dtype=torch.uint8)}), "not a plain numeric"),
        (planted({"x": {"$array": "t0", "dtype": "<f8", "shape": [3]}}, {"t0": torch.zeros(8, dtype=torch.uint8)}), "does not match"),
        (planted([1, 2]), "not a mapping"),
        (bytes(save({}, metadata={"other": "1"})), "no 'rlinf.state'"),
    ],
)  # fmt: skip
def test_bytes_rlinf_did_not_write_are_refused(data: bytes, problem: str) -> None:
    with pytest.raises(StateFormatError, match=problem):
        decode(data)
