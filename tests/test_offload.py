"""Context switching moves real model state: offload releases the storage of every state tensor and onload
restores it bit for bit, with tied weights, views and optimizer state, by the code path a GPU takes too (only
the host buffer differs: shared memory here, pinned memory beside a GPU)."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest
import torch

from executor.offload import HostStore, StateChangedError, tensor_bytes

transformers = pytest.importorskip("transformers")


def anonymous_rss_bytes() -> int:
    """This process's resident anonymous memory (``RssAnon``: heap and private mappings, not shared memory), after
    glibc has handed its free heap pages back (``malloc_trim``: freed blocks below its mmap threshold would stay
    resident in the heap, freed or not)."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"RssAnon:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]


def build(architecture: str, tied: bool) -> torch.nn.Module:
    """A small causal LM from a transformers config (about 26 MB of float32 weights)."""
    sizes = dict(
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=tied,
    )
    config = (
        transformers.Qwen2Config(**sizes) if architecture == "qwen2" else transformers.LlamaConfig(**sizes)
    )
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, model.config.vocab_size, (2, 16), generator=generator).to(model.device)
    loss = model(input_ids=tokens, labels=tokens).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def state_of(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """What the GRPO actor hands the executor: parameters, buffers and the optimizer's state tensors."""
    tensors = list(model.parameters()) + list(model.buffers())
    for state in optimizer.state.values():
        tensors.extend(value for value in state.values() if torch.is_tensor(value))
    return tensors


def resident_bytes(device: str) -> int:
    """Memory the state can occupy on ``device``: the GPU's allocated bytes, or this process's anonymous RSS."""
    return torch.cuda.memory_allocated() if device == "cuda" else anonymous_rss_bytes()


DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device (GPU check)"),
        ],
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("architecture", "tied"), [("qwen2", True), ("qwen2", False), ("llama", True), ("llama", False)]
)
def test_a_model_and_its_adamw_state_round_trip_bit_exactly_and_release_their_memory(
    architecture: str, tied: bool, device: str
) -> None:
    """On a GPU the state mixes devices: AdamW keeps its ``step`` counters on the host beside GPU moments (the
    tensors c3a6c1c's offload tripped over with a bare AssertionError)."""
    torch.set_num_threads(1)
    model, twin = build(architecture, tied).to(device), build(architecture, tied).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    twin_optimizer = torch.optim.AdamW(twin.parameters(), lr=1e-3)
    for seed in (1, 2):
        train_step(model, optimizer, seed)
        train_step(twin, twin_optimizer, seed)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    state = state_of(model, optimizer)
    before = [tensor.clone() for tensor in state]
    held = tensor_bytes(state)
    assert held > 50 * 2**20  # weights + two AdamW moments
    store = HostStore()
    resident = resident_bytes(device)
    moved = store.offload(state)
    released = resident - resident_bytes(device)

    assert moved == held
    assert all(tensor.untyped_storage().nbytes() == 0 for tensor in state)
    assert released > 0.9 * held, f"offload released {released} of {held} bytes"

    assert store.onload(state) == held
    assert all(torch.equal(a, b) and a.device == b.device for a, b in zip(state, before, strict=True))
    if tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    # The optimizer still steps the restored tensors: training goes on exactly as without the round trip.
    train_step(model, optimizer, 3)
    train_step(twin, twin_optimizer, 3)
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_views_of_one_storage_are_moved_once_and_stay_views() -> None:
    """Parameters laid out as views of one flat buffer (as Megatron's DDP buffers hold them), listed together
    with the buffer: the bytes move once and the views still alias the buffer after onload."""
    flat = torch.arange(64, dtype=torch.float32)
    weight, bias = flat[:48].view(6, 8), flat[48:]
    transposed = weight.t()
    state = [flat, weight, bias, transposed, flat]
    store = HostStore()
    assert store.offload(state) == 64 * 4
    assert all(t.untyped_storage().nbytes() == 0 for t in state)
    store.onload(state)
    assert torch.equal(flat, torch.arange(64, dtype=torch.float32))
    flat.zero_()
    assert weight.abs().sum() == 0 and bias.abs().sum() == 0 and transposed.abs().sum() == 0
    assert transposed.stride() == (1, 8)


def test_tensors_that_lie_on_different_devices_share_one_store() -> None:
    """A host step counter beside the weights (AdamW keeps ``step`` on the host even for GPU parameters): every
    tensor goes through the same path whatever its device; empty tensors are left as they are."""
    state = [torch.randn(10), torch.tensor(7.0), torch.empty(0), torch.zeros((), dtype=torch.int64)]
    copies = [t.clone() for t in state]
    store = HostStore()
    store.offload(state)
    store.onload(state)
    assert all(torch.equal(a, b) for a, b in zip(state, copies, strict=True))
    assert not store.holds_state


def test_a_worker_whose_state_changes_while_offloaded_gets_a_message() -> None:
    store = HostStore()
    store.offload([torch.ones(4), torch.ones(2)])
    with pytest.raises(StateChangedError, match=r"returned 1 tensors at onload and 2 at offload; fix: "):
        store.onload([torch.ones(4)])
    store.close()
