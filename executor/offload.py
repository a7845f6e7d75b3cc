"""Context switching: move a worker's resident state off its device and back, for real.

* CUDA: every state tensor is copied to pinned host memory and its device storage released
  (``torch.cuda.empty_cache`` returns it to the driver); onload copies it back.
* CPU: the "device" is the worker's own memory. Offload packs every state tensor into one shared-memory segment
  (``/dev/shm``, outside the worker's address space once unmapped) and releases the tensors' storage, so the
  worker's resident memory drops; onload copies them back and frees the segment.

Tensors are emptied and refilled *in place* (``Tensor.set_``), so modules and optimizers keep pointing at them.
"""

from __future__ import annotations

from multiprocessing import shared_memory

import numpy as np
import torch


def tensor_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes the tensors currently hold."""
    return sum(t.numel() * t.element_size() for t in tensors)


class HostStore:
    """Holds one worker's offloaded state between an offload and the next onload."""

    def __init__(self) -> None:
        self._segment: shared_memory.SharedMemory | None = None
        self._pinned: list[torch.Tensor] = []
        self._layout: list[tuple[int, tuple[int, ...], torch.dtype, torch.device]] = []

    @property
    def holds_state(self) -> bool:
        """Whether state is offloaded right now."""
        return bool(self._layout)

    def offload(self, tensors: list[torch.Tensor]) -> int:
        """Move ``tensors`` out of the device and release their storage; returns bytes moved."""
        assert not self.holds_state, "offload while already offloaded"
        moved = tensor_bytes(tensors)
        on_cuda = any(t.is_cuda for t in tensors)
        if not on_cuda and moved:
            self._segment = shared_memory.SharedMemory(create=True, size=moved)
        offset = 0
        with torch.no_grad():
            for tensor in tensors:
                size = tensor.numel() * tensor.element_size()
                self._layout.append((offset, tuple(tensor.shape), tensor.dtype, tensor.device))
                if tensor.is_cuda:
                    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
                    host.copy_(tensor, non_blocking=True)
                    self._pinned.append(host)
                elif size:
                    assert self._segment is not None
                    view = np.ndarray((size,), dtype=np.uint8, buffer=self._segment.buf, offset=offset)
                    view[:] = tensor.detach().contiguous().view(-1).view(torch.uint8).numpy()
                    del view
                offset += size
                tensor.set_()  # type: ignore[call-overload]  # no argument: release the storage
        if on_cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        return moved

    def onload(self, tensors: list[torch.Tensor]) -> int:
        """Refill ``tensors`` (the same list given to :meth:`offload`); returns bytes moved."""
        assert self.holds_state, "onload without a previous offload"
        assert len(tensors) == len(self._layout), "state tensors changed between offload and onload"
        moved = 0
        with torch.no_grad():
            for position, (tensor, (offset, shape, dtype, device)) in enumerate(
                zip(tensors, self._layout, strict=True)
            ):
                if device.type == "cuda":
                    restored = self._pinned[position].to(device, non_blocking=True)
                else:
                    restored = torch.empty(shape, dtype=dtype)
                    size = restored.numel() * restored.element_size()
                    if size:
                        assert self._segment is not None
                        source = np.ndarray((size,), dtype=np.uint8, buffer=self._segment.buf, offset=offset)
                        restored.view(-1).view(torch.uint8).numpy()[:] = source
                        del source
                tensor.set_(restored)  # type: ignore[call-overload]  # share the refilled storage
                moved += restored.numel() * restored.element_size()
        if self._pinned:
            torch.cuda.synchronize()
        self.close()
        return moved

    def close(self) -> None:
        """Free whatever the store holds."""
        self._layout = []
        self._pinned = []
        if self._segment is not None:
            self._segment.close()
            self._segment.unlink()
            self._segment = None
