"""A shared-memory all-reduce for the data-parallel replicas of one component on one machine.

gloo's all-reduce goes through loopback TCP: each call costs a few hundred microseconds to a millisecond on a
shared CPU, and a PPO actor calls it once per minibatch (hundreds of times per iteration), which made data
parallelism slower than one replica. Here the replicas of a group share one block of memory (a
``multiprocessing`` shared array made by the backend before the workers start, freed with them):

* a sequence counter per rank, each on its own cache line;
* two buffers of one slot per rank (``slot_bytes`` each), used alternately by successive calls.

A call copies the rank's tensor into its slot of buffer ``call % 2``, publishes the call number in its counter,
posts a semaphore to every other rank and takes one from each (one semaphore per ordered pair of ranks, so each
take is that rank's post of this very call: it cannot post the next call before it has taken this rank's post of
this one), then sums the slots in rank order, so every rank computes the same bits. Two buffers suffice without
a second barrier: a rank can start call ``k + 2`` (reusing buffer ``k % 2``) only after every rank has posted
call ``k + 1``, which each does after it finished reading call ``k``. A waiting rank polls its semaphores for a
few microseconds, then blocks in the kernel until the post (like gloo in its socket read), so a rank that shares
its core with other processes neither spins nor sleeps on a timer. Tensors that are not on the CPU, not floating point or larger than a slot are not handled here (the
caller falls back to ``torch.distributed``). A semaphore post and take order memory as a release and an acquire,
so a slot written before a post is what the taker reads, on any processor.
"""

from __future__ import annotations

import time
from typing import Any

import attrs
import numpy as np

CACHE_LINE_BYTES = 64
SLOT_BYTES = 4 * 1024 * 1024
"""Largest tensor (bytes) one call carries through shared memory: a few million parameters of float32 gradients
(larger ones go through ``torch.distributed``)."""
SPIN_S = 100e-6
"""How long a waiting rank polls a semaphore before it blocks on it."""
TIMEOUT_S = 600.0
"""A rank that waits this long for the others raises (a peer died or hangs; the driver normally notices first)."""


def shared_bytes(world: int, slot_bytes: int = SLOT_BYTES) -> int:
    """Size of the shared block a group of ``world`` ranks needs."""
    return CACHE_LINE_BYTES * world + 2 * world * slot_bytes


@attrs.frozen
class SharedBlock:
    """What the ranks of one group share: the memory and a semaphore per ordered pair of ranks. Made by the
    backend before the workers start (:func:`make_shared_block`) and handed to each at spawn."""

    memory: Any
    """A ``multiprocessing.RawArray`` of :func:`shared_bytes` bytes."""
    signals: tuple[tuple[Any, ...], ...]
    """``signals[src][dst]``: rank ``src`` posts it when its slot holds the current call (``None`` on the
    diagonal)."""

    @property
    def world(self) -> int:
        """The number of ranks."""
        return len(self.signals)


def make_shared_block(context: Any, world: int, slot_bytes: int = SLOT_BYTES) -> SharedBlock:
    """A new block for ``world`` ranks from a ``multiprocessing`` context."""
    signals = tuple(
        tuple(None if src == dst else context.Semaphore(0) for dst in range(world)) for src in range(world)
    )
    return SharedBlock(memory=context.RawArray("b", shared_bytes(world, slot_bytes)), signals=signals)


class LocalGroup:
    """One rank's view of its group's :class:`SharedBlock`."""

    def __init__(self, shared: SharedBlock, rank: int, slot_bytes: int = SLOT_BYTES) -> None:
        world = shared.world
        block = np.frombuffer(shared.memory, dtype=np.uint8)
        assert block.nbytes >= shared_bytes(world, slot_bytes), "the shared block is too small"
        assert 0 <= rank < world
        self.rank, self.world, self.slot_bytes = rank, world, slot_bytes
        stride = CACHE_LINE_BYTES // 8
        self._counters = block[: CACHE_LINE_BYTES * world].view(np.int64)[::stride]
        self._slots = block[CACHE_LINE_BYTES * world : shared_bytes(world, slot_bytes)].reshape(
            2, world, slot_bytes
        )
        self._calls = int(self._counters[rank])
        self._posts = [shared.signals[rank][peer] for peer in range(world) if peer != rank]
        self._takes = [(peer, shared.signals[peer][rank]) for peer in range(world) if peer != rank]

    def handles(self, tensor: Any) -> bool:
        """Whether :meth:`all_reduce_` takes ``tensor`` (a CPU floating-point tensor that fits a slot)."""
        return (
            tensor.device.type == "cpu"
            and tensor.is_floating_point()
            and tensor.numel() * tensor.element_size() <= self.slot_bytes
        )

    def all_reduce_(self, tensor: Any) -> Any:
        """Sum ``tensor`` over the group, in place (every rank gets the same bits); returns it."""
        import torch

        assert self.handles(tensor), "not a CPU floating-point tensor that fits a slot"
        source = tensor.detach().contiguous().numpy().reshape(-1)
        self._calls += 1
        buffer = self._slots[self._calls % 2]
        size = source.nbytes
        np.copyto(buffer[self.rank, :size].view(source.dtype), source)
        self._counters[self.rank] = self._calls
        for signal in self._posts:
            signal.release()
        for peer, signal in self._takes:
            self._take(peer, signal)
        assert self._counters.min() >= self._calls, "a rank was signalled before its slot was written"
        total = buffer[0, :size].view(source.dtype).copy()
        for rank in range(1, self.world):
            total += buffer[rank, :size].view(source.dtype)
        tensor.copy_(torch.from_numpy(total).view(tensor.shape))
        return tensor

    def _take(self, peer: int, signal: Any) -> None:
        """Take ``peer``'s post of this call: poll for :data:`SPIN_S`, then block (raising after
        :data:`TIMEOUT_S`)."""
        started = time.perf_counter()
        while time.perf_counter() - started < SPIN_S:
            if signal.acquire(False):
                return
        if not signal.acquire(True, TIMEOUT_S):
            raise RuntimeError(
                f"data-parallel all-reduce: rank {peer} did not arrive within {TIMEOUT_S:.0f} s "
                f"(call {self._calls})"
            )
