"""GRPO's weight-sync payload and the decode attention kernels: what a GPU run measured slow (docs/gpu.md), checked
on the CPU where the mechanism exists here too (the casts, the one host buffer, the kernel flags)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlinf.workloads.hf_grpo.checkpoints import BFLOAT16_KEY, payload_tensors, weights_payload
from rlinf.workloads.hf_grpo.generation import decode_attention


@pytest.fixture
def weights() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    embed = torch.randn(50, 8, generator=generator)
    return {
        "embed.weight": embed,
        "layer.weight": torch.randn(8, 8, generator=generator),
        "layer.bias": torch.randn(8, generator=generator),
        "head.weight": embed,  # tied to the embedding, as Qwen2.5's small models are
    }


def test_a_float32_payload_round_trips_exactly(weights: dict[str, torch.Tensor]) -> None:
    back = payload_tensors(weights_payload(weights))
    assert set(back) == set(weights)
    for name, tensor in weights.items():
        assert back[name].dtype == torch.float32 and back[name].shape == tensor.shape
        assert torch.equal(back[name], tensor)


def test_a_bfloat16_payload_carries_what_the_receiver_would_cast_to_in_half_the_bytes(
    weights: dict[str, torch.Tensor],
) -> None:
    full = weights_payload(weights)
    half = weights_payload(weights, torch.bfloat16)
    assert BFLOAT16_KEY in half and BFLOAT16_KEY not in full
    sent = sum(a.nbytes for n, a in half.items() if n != BFLOAT16_KEY)
    assert 2 * sent == sum(a.nbytes for a in full.values())
    back = payload_tensors(half)
    assert BFLOAT16_KEY not in back
    for name, tensor in weights.items():
        assert back[name].dtype == torch.bfloat16
        assert torch.equal(back[name], tensor.to(torch.bfloat16))  # bit for bit: the same rounding


def test_a_bfloat16_model_loads_the_payload_as_if_given_float32_weights() -> None:
    torch.manual_seed(0)
    source = torch.nn.Linear(16, 4)
    by_bits, by_cast = torch.nn.Linear(16, 4).to(torch.bfloat16), torch.nn.Linear(16, 4).to(torch.bfloat16)
    by_bits.load_state_dict(payload_tensors(weights_payload(source.state_dict(), torch.bfloat16)))
    by_cast.load_state_dict(payload_tensors(weights_payload(source.state_dict())))
    for a, b in zip(by_bits.state_dict().values(), by_cast.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_the_payload_arrays_are_views_of_one_host_buffer(weights: dict[str, torch.Tensor]) -> None:
    """One device-to-host copy for the whole model, not one synchronised copy per tensor."""

    def root(array: np.ndarray) -> object:
        while isinstance(array.base, np.ndarray):
            array = array.base
        return array.base if array.base is not None else array

    payload = weights_payload(weights, torch.bfloat16)
    arrays = [a for n, a in payload.items() if n != BFLOAT16_KEY]
    assert len({id(root(a)) for a in arrays}) == 1
    assert sum(a.size for a in arrays) == sum(t.numel() for t in weights.values())


def test_generation_on_a_gpu_leaves_cudnn_attention_out_and_restores_it() -> None:
    """cuDNN's attention rebuilt its plan at every decode step (the keys grow by one position): 1 ms of host time
    per call on an H200. The flags are process-wide settings, so this holds without a GPU."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    with decode_attention(torch.device("cuda")):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    with decode_attention(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled() == before
