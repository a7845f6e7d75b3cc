"""The shared-memory all-reduce of data-parallel replicas on one machine (``executor.local_group``)."""

from __future__ import annotations

import multiprocessing
from typing import Any

import numpy as np
import pytest
import torch

from executor import local_group
from executor.local_group import LocalGroup, SharedBlock, make_shared_block

SLOT = 64 * 1024
CALLS = 200


def _rank_main(shared: SharedBlock, rank: int, results: Any) -> None:
    """Many back-to-back all-reduces of rank-dependent tensors of changing sizes and dtypes; the sums seen."""
    group = LocalGroup(shared, rank, slot_bytes=SLOT)
    seen = []
    for call in range(CALLS):
        size = 1 + (call * 37) % 500
        dtype = torch.float64 if call % 3 == 0 else torch.float32
        tensor = torch.full((size,), float(rank + 1) * (call + 1), dtype=dtype)
        tensor[0] = 0.1 * (rank + 1)  # a value whose sum depends on the order of the additions
        group.all_reduce_(tensor)
        seen.append(tensor.numpy().tobytes())
    results.put((rank, seen))


def test_every_rank_gets_the_same_sums_call_after_call() -> None:
    world = 3
    context = multiprocessing.get_context("spawn")
    shared = make_shared_block(context, world, SLOT)
    results = context.Queue()
    processes = [context.Process(target=_rank_main, args=(shared, r, results)) for r in range(world)]
    for process in processes:
        process.start()
    seen = dict(results.get(timeout=120) for _ in range(world))
    for process in processes:
        process.join(timeout=30)
    ranks_sum = sum(range(1, world + 1))
    for call in range(CALLS):
        sums = {seen[r][call] for r in range(world)}
        assert len(sums) == 1, f"call {call}: ranks disagree"  # the same bits everywhere
        dtype = np.float64 if call % 3 == 0 else np.float32
        values = np.frombuffer(sums.pop(), dtype=dtype)
        assert values.size == 1 + (call * 37) % 500
        np.testing.assert_allclose(values[1:], ranks_sum * (call + 1))
        expected = dtype(0.1) * dtype(1)
        for rank in range(2, world + 1):
            expected = expected + dtype(0.1) * dtype(rank)
        assert values[0] == expected  # summed in rank order


def test_only_cpu_floating_point_tensors_that_fit_are_taken() -> None:
    group = LocalGroup(make_shared_block(multiprocessing.get_context("spawn"), 1, SLOT), 0, slot_bytes=SLOT)
    assert group.handles(torch.ones(SLOT // 4)) and not group.handles(torch.ones(SLOT // 4 + 1))
    assert not group.handles(torch.ones(4, dtype=torch.int64))
    tensor = torch.arange(6.0).reshape(2, 3)
    assert torch.equal(group.all_reduce_(tensor), torch.arange(6.0).reshape(2, 3))  # a group of one


def test_a_rank_alone_gives_up_naming_the_rank_that_never_came(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_group, "TIMEOUT_S", 0.05)
    group = LocalGroup(make_shared_block(multiprocessing.get_context("spawn"), 3, SLOT), 0, slot_bytes=SLOT)
    with pytest.raises(RuntimeError, match=r"rank 1 did not arrive within 0 s \(call 1\)"):
        group.all_reduce_(torch.ones(3))
