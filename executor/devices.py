"""Devices of the local backend: CPU cores or CUDA GPUs behind one small abstraction, plus device locks.

Program devices are logical ids. On a CPU machine logical device ``i`` is core ``cores[i % len(cores)]`` (more
logical devices than cores oversubscribes, and :func:`cpu_devices` says so); on a GPU machine it is ``cuda:i``.
A worker process binds itself to its device once (:meth:`Device.bind`): CPU affinity and one torch thread per
core, or the CUDA current device. Collocated workers time-share a device under its lock.
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from rlinf.errors import ConfigError, require

KINDS = ("cpu", "cuda")


@attrs.frozen
class Device:
    """One logical device of a run."""

    index: int
    """Logical id, as in the program."""
    kind: str = "cpu"
    """``cpu`` (a core) or ``cuda`` (a GPU)."""
    core: int = 0
    """For ``cpu``: the OS core the worker is pinned to. For ``cuda``: the GPU ordinal."""

    def __attrs_post_init__(self) -> None:
        require(
            self.kind in KINDS, "device.kind", self.kind, "unknown device kind", f"use one of {list(KINDS)}"
        )

    @property
    def torch_device(self) -> str:
        """``cpu`` or ``cuda:N``."""
        return "cpu" if self.kind == "cpu" else f"cuda:{self.core}"

    @property
    def collective_backend(self) -> str:
        """torch.distributed backend for data-parallel groups on this kind of device."""
        return "gloo" if self.kind == "cpu" else "nccl"

    def bind(self) -> None:
        """Pin the calling process to this device (call once, in the worker process)."""
        import torch

        if self.kind == "cpu":
            if hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, {self.core})
            torch.set_num_threads(1)
        else:
            torch.cuda.set_device(self.core)
            torch.set_num_threads(1)


def available_cores() -> tuple[int, ...]:
    """OS cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


def cpu_devices(num_devices: int, cores: tuple[int, ...] | None = None) -> tuple[Device, ...]:
    """``num_devices`` logical CPU devices, round-robin over ``cores`` (default: this process's cores)."""
    cores = cores or available_cores()
    require(num_devices >= 1, "devices", num_devices, "must be >= 1", "use at least one device")
    return tuple(Device(index=i, kind="cpu", core=cores[i % len(cores)]) for i in range(num_devices))


def cuda_devices(num_devices: int) -> tuple[Device, ...]:
    """``num_devices`` CUDA devices ``cuda:0..``; raises when the machine has fewer."""
    import torch

    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if num_devices > available:
        raise ConfigError(
            "devices",
            num_devices,
            f"this machine has {available} CUDA devices",
            f"use at most {available} devices or device kind cpu",
        )
    return tuple(Device(index=i, kind="cuda", core=i) for i in range(num_devices))


def is_oversubscribed(devices: tuple[Device, ...]) -> bool:
    """Whether two logical devices share one physical core or GPU."""
    physical = [(d.kind, d.core) for d in devices]
    return len(set(physical)) < len(physical)


class DeviceLocks:
    """One inter-process lock per logical device; a worker holds the locks of an op's devices while it runs.

    Locks are taken in ascending device order so that multi-device ops cannot deadlock."""

    def __init__(self, context: Any, num_devices: int) -> None:
        self._locks = [context.Lock() for _ in range(num_devices)]

    def acquire(self, devices: tuple[int, ...]) -> None:
        """Take the locks of ``devices`` (sorted)."""
        for device in sorted(devices):
            self._locks[device].acquire()

    def release(self, devices: tuple[int, ...]) -> None:
        """Release the locks of ``devices``."""
        for device in sorted(devices, reverse=True):
            self._locks[device].release()
