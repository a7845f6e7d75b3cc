"""Context switching: move a worker's resident state off its device and back, for real, by one code path on
CPUs and GPUs.

Offload works on *storages*, not tensors: the state tensors are grouped by the storage they view (tied weights,
views and parameters that share memory land in one group), every storage's bytes are copied once into host
memory and its device memory is released; onload allocates one new storage per group, copies the bytes back and
points every tensor at it with its own offset, shape and strides, so sharing survives the round trip. The only
difference between the devices is where the host copy lives:

* when any state is on a GPU: pinned host memory (copies are ``non_blocking`` and synchronised once), and the
  caching allocator returns the freed memory to the driver (``torch.cuda.empty_cache``);
* on a CPU-only worker: one shared-memory segment (``/dev/shm``), written and unmapped, so the bytes leave the
  worker's address space until onload maps them back.

Tensors are emptied and refilled *in place* (``Tensor.set_``), so modules and optimizers keep pointing at them.
State of any device may be mixed in one list (an optimizer's step counters stay on the host beside GPU weights).
"""

from __future__ import annotations

from collections.abc import Sequence
from multiprocessing import shared_memory
from typing import Any

import attrs
import torch

from rlinf.core.errors import RlinfError


def tensor_bytes(tensors: Sequence[torch.Tensor]) -> int:
    """Bytes the tensors' storages hold, each storage counted once (tied weights and views share one)."""
    seen: set[tuple[str, int]] = set()
    total = 0
    for tensor in tensors:
        storage = tensor.untyped_storage()
        key = (str(tensor.device), storage.data_ptr())
        if storage.nbytes() and key not in seen:
            seen.add(key)
            total += storage.nbytes()
    return total


@attrs.frozen
class _Group:
    """One storage that some state tensors view: its device and size, and where its bytes lie in host memory."""

    device: torch.device
    num_bytes: int
    offset: int


@attrs.frozen
class _View:
    """How one state tensor viewed its group's storage."""

    group: int
    storage_offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


class StateChangedError(RlinfError):
    """A worker's ``state_tensors()`` returned other tensors at onload than at offload."""


class HostStore:
    """Holds one worker's offloaded state between an offload and the next onload."""

    def __init__(self) -> None:
        self._groups: list[_Group] = []
        self._views: list[_View] = []
        self._on_gpu = False
        """Whether the offloaded state went to pinned memory (some of it was on a GPU)."""
        self._pinned: torch.Tensor | None = None
        """Pinned host memory for GPU state, kept between offloads (pinning a new buffer each time is slow)."""
        self._segment_name: str | None = None
        """The shared-memory segment holding the host copy of a CPU-only worker's state."""

    @property
    def holds_state(self) -> bool:
        """Whether state is offloaded right now."""
        return bool(self._views)

    def offload(self, tensors: Sequence[torch.Tensor]) -> int:
        """Copy the storages of ``tensors`` to host memory and release them; returns the bytes moved."""
        if self.holds_state:
            raise RuntimeError("offload while the state is already offloaded (the executor onloads first)")
        groups, views, sources = _group_storages(tensors)
        total = sum(g.num_bytes for g in groups)
        segment = None
        if any(g.device.type == "cuda" for g in groups):
            if self._pinned is None or self._pinned.numel() < total:
                self._pinned = None  # pinning is slow: the buffer is kept for the next offload of this size
                self._pinned = torch.empty(total, dtype=torch.uint8, pin_memory=True)
            host = self._pinned
            self._on_gpu = True
        else:
            segment = shared_memory.SharedMemory(create=True, size=max(1, total))
            self._segment_name = segment.name
            host = _bytes_of(segment, total)
        with torch.no_grad():
            for group, source in zip(groups, sources, strict=True):
                host[group.offset : group.offset + group.num_bytes].copy_(
                    source, non_blocking=group.device.type == "cuda"
                )
            del sources
            if self._on_gpu:
                torch.cuda.synchronize()
            for tensor in tensors:
                tensor.set_()  # type: ignore[call-overload]  # no argument: release the storage
        self._groups, self._views = groups, views
        del host
        if segment is not None:
            segment.close()  # unmapped: the bytes stay in /dev/shm, outside this process, until onload
        else:
            torch.cuda.empty_cache()
        return total

    def onload(self, tensors: Sequence[torch.Tensor]) -> int:
        """Refill ``tensors`` (the same list given to :meth:`offload`); returns the bytes moved."""
        if not self.holds_state:
            raise RuntimeError("onload without a previous offload")
        if len(tensors) != len(self._views):
            raise StateChangedError(
                f"state_tensors() returned {len(tensors)} tensors at onload and {len(self._views)} at "
                "offload; fix: return the same tensors, in the same order, whenever the worker is not running "
                "an op (create optimizer state in setup, not lazily between ops)"
            )
        moved = sum(g.num_bytes for g in self._groups)
        segment = None
        if self._on_gpu:
            assert self._pinned is not None, "offloaded GPU state has no pinned host copy"
            host = self._pinned
        else:
            assert self._segment_name is not None, "offloaded state has neither pinned memory nor a segment"
            segment = shared_memory.SharedMemory(name=self._segment_name)
            host = _bytes_of(segment, moved)
        storages = []
        with torch.no_grad():
            for group in self._groups:
                restored = torch.empty(group.num_bytes, dtype=torch.uint8, device=group.device)
                restored.copy_(host[group.offset : group.offset + group.num_bytes], non_blocking=True)
                storages.append(restored.untyped_storage())
            if self._on_gpu:
                torch.cuda.synchronize()
            for tensor, view in zip(tensors, self._views, strict=True):
                if view.group < 0:
                    continue
                tensor.set_(  # type: ignore[call-overload]
                    storages[view.group], view.storage_offset, view.shape, view.stride
                )
        del host
        if segment is not None:
            segment.close()
        self._forget()
        return moved

    def close(self) -> None:
        """Free whatever the store holds (the pinned buffer kept between offloads too)."""
        self._forget()
        self._pinned = None

    def _forget(self) -> None:
        """Drop the offloaded state's layout and its shared-memory segment."""
        self._groups, self._views = [], []
        self._on_gpu = False
        if self._segment_name is not None:
            try:
                segment = shared_memory.SharedMemory(name=self._segment_name)
            except FileNotFoundError:
                pass
            else:
                segment.close()
                segment.unlink()
            self._segment_name = None


def owning_copy(value: Any, state: Sequence[torch.Tensor]) -> Any:
    """``value`` (tensors, possibly nested in dicts, lists and tuples) with every tensor that views the storage of
    a ``state`` tensor replaced by a host copy: what a worker returned while onloaded (an optimizer's
    ``state_dict`` holds its live state tensors) must not change when that state is offloaded again."""
    storages = {
        (str(t.device), t.untyped_storage().data_ptr()) for t in state if t.untyped_storage().nbytes()
    }

    def copy(item: Any) -> Any:
        if torch.is_tensor(item):
            key = (str(item.device), item.untyped_storage().data_ptr())
            return item.detach().to("cpu", copy=True) if key in storages else item
        if isinstance(item, dict):
            return {k: copy(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return type(item)(copy(v) for v in item)
        return item

    return copy(value)


def _bytes_of(segment: shared_memory.SharedMemory, num_bytes: int) -> torch.Tensor:
    """The first ``num_bytes`` of a shared-memory segment as a uint8 tensor (drop it before closing the segment)."""
    if num_bytes == 0:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(segment.buf, dtype=torch.uint8, count=num_bytes)


def _group_storages(
    tensors: Sequence[torch.Tensor],
) -> tuple[list[_Group], list[_View], list[torch.Tensor]]:
    """The distinct storages of ``tensors`` (laid out one after another in host memory), how each tensor views
    its storage (group -1: a tensor without storage, left as it is), and a byte view of each storage."""
    index: dict[tuple[str, int], int] = {}
    groups: list[_Group] = []
    sources: list[torch.Tensor] = []
    views: list[_View] = []
    offset = 0
    for tensor in tensors:
        storage = tensor.untyped_storage()
        if storage.nbytes() == 0:
            views.append(_View(-1, 0, tuple(tensor.shape), tuple(tensor.stride())))
            continue
        key = (str(tensor.device), storage.data_ptr())
        if key not in index:
            index[key] = len(groups)
            groups.append(_Group(device=tensor.device, num_bytes=storage.nbytes(), offset=offset))
            offset += storage.nbytes()
            sources.append(
                torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(  # type: ignore[call-overload]
                    storage, 0, (storage.nbytes(),), (1,)
                )
            )
        views.append(
            _View(index[key], int(tensor.storage_offset()), tuple(tensor.shape), tuple(tensor.stride()))
        )
    return groups, views, sources
