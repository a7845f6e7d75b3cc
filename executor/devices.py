"""Devices of the local backend: CPU cores or CUDA GPUs behind one small abstraction, plus device locks.

Program devices are logical ids. On a CPU machine logical device ``i`` is core ``cores[i % len(cores)]`` (more
logical devices than cores oversubscribes, and :func:`cpu_devices` says so); on a GPU machine it is ``cuda:i``.
A worker process binds itself to its device once (:meth:`Device.bind`): CPU affinity and one torch thread per
core, or the CUDA current device. Collocated workers time-share a device under its lock.
"""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path
from typing import Any

import attrs

from rlinf.core.errors import ConfigError, require

KINDS = ("cpu", "cuda")
ACCELERATORS = KINDS
"""What ``--accelerator`` may name: devices are CPU cores or CUDA GPUs."""


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

    def synchronize(self) -> None:
        """Wait for the work queued on this device (CUDA kernels run asynchronously; a CPU op is done when it
        returns), so that an op's measured end is its real end."""
        if self.kind == "cuda":
            import torch

            torch.cuda.synchronize(self.core)

    def peak_bytes(self) -> int | None:
        """On a GPU: the most memory allocated on it since the last call (then the counter restarts); ``None``
        on a CPU core (the executor counts state tensors there)."""
        if self.kind != "cuda":
            return None
        import torch

        peak = int(torch.cuda.max_memory_allocated(self.core))
        torch.cuda.reset_peak_memory_stats(self.core)
        return peak

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


def processor_name() -> str:
    """This machine's processor model (``/proc/cpuinfo``'s ``model name`` on Linux, e.g. ``AMD EPYC 9B14``), else
    what :func:`platform.processor` says, else the architecture. Profiles and measured artifacts record it: op
    costs measured on one processor do not predict another."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return " ".join(value.split())
    return platform.processor() or platform.machine()


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


def visible_gpus() -> tuple[int, ...]:
    """Ordinals of the CUDA GPUs this process sees (none without CUDA)."""
    import torch

    return tuple(range(torch.cuda.device_count())) if torch.cuda.is_available() else ()


def resolve_accelerator(name: str | None) -> str:
    """``--accelerator``: ``cuda`` when a GPU is visible and nothing is asked, else ``cpu``; asking for ``cuda``
    without a GPU is a :class:`ConfigError`."""
    if name is None:
        return "cuda" if visible_gpus() else "cpu"
    require(
        name in ACCELERATORS, "--accelerator", name, "unknown accelerator", f"use one of {list(ACCELERATORS)}"
    )
    if name == "cuda" and not visible_gpus():
        raise ConfigError(
            "--accelerator", name, "no CUDA GPU is visible to this process (torch.cuda.is_available() is False)",
            "use --accelerator cpu, or run on a machine with a GPU and a CUDA build of torch",
        )  # fmt: skip
    return name


def physical_units(accelerator: str) -> tuple[int, ...]:
    """What one device is on this machine: the CPU cores this process may use, or the visible GPUs."""
    return available_cores() if accelerator == "cpu" else visible_gpus()


def cuda_devices(num_devices: int, gpus: tuple[int, ...] | None = None) -> tuple[Device, ...]:
    """``num_devices`` logical CUDA devices, round-robin over ``gpus`` (default: every visible GPU; more logical
    devices than GPUs time-share them); raises when no GPU is visible."""
    gpus = gpus or visible_gpus()
    require(num_devices >= 1, "devices", num_devices, "must be >= 1", "use at least one device")
    require(bool(gpus), "devices", "cuda", "no CUDA GPU is visible", "use CPU devices")
    return tuple(Device(index=i, kind="cuda", core=gpus[i % len(gpus)]) for i in range(num_devices))


def logical_devices(
    accelerator: str, num_devices: int, units: tuple[int, ...] | None = None
) -> tuple[Device, ...]:
    """``num_devices`` logical devices of ``accelerator`` over the physical ``units`` (cores or GPU ordinals)."""
    return cpu_devices(num_devices, units) if accelerator == "cpu" else cuda_devices(num_devices, units)


def default_cpu_devices(accelerator: str) -> int:
    """``--cpu-devices`` when not given: on a GPU machine the cores this process may use less one per visible
    GPU (left to the GPU workers and the driver); without GPUs none (the cores are the devices)."""
    if accelerator != "cuda":
        return 0
    return max(0, len(available_cores()) - len(visible_gpus()))


def core_pool_cores(num_cores: int) -> tuple[int, ...]:
    """The OS cores of a core pool of ``num_cores``: the last ones this process may use (the first are left to
    the GPU workers and the driver); raises when the machine has fewer."""
    cores = available_cores()
    require(
        0 <= num_cores <= len(cores),
        "--cpu-devices",
        num_cores,
        f"this process may use {len(cores)} CPU cores",
        f"use --cpu-devices {max(0, len(cores) - 1)} or fewer",
    )
    return cores[len(cores) - num_cores :] if num_cores else ()


def run_devices(
    accelerator: str, num_devices: int, units: tuple[int, ...] | None = None, num_cores: int = 0
) -> tuple[Device, ...]:
    """The devices of a run, indexed by a program's global ids: ``num_devices`` logical devices of
    ``accelerator`` over ``units``, then one CPU device per core of the core pool (:func:`core_pool_cores`)."""
    cores = core_pool_cores(num_cores)
    pool = tuple(Device(index=num_devices + i, kind="cpu", core=core) for i, core in enumerate(cores))
    return logical_devices(accelerator, num_devices, units) + pool


def machine_for(accelerator: str, num_cores: int = 0) -> Any:
    """The :class:`rlinf.core.cluster.Machine` a run trains on: CPU cores (the CPU preset), or this machine's GPU
    with the memory torch reports (its peak FLOP/s and bandwidth from the preset of its type when its name
    holds one: H100, H200, A100; else the H100's) and ``num_cores`` CPU cores beside it."""
    from rlinf.core.cluster import CPU_MACHINE, DEVICE_PRESETS, DeviceSpec, Machine

    if accelerator != "cuda":
        return CPU_MACHINE
    import torch

    properties = torch.cuda.get_device_properties(visible_gpus()[0])
    known = next((name for name in ("H200", "H100", "A100") if name in properties.name.upper()), None)
    preset, links = DEVICE_PRESETS[known or "H100"]
    device = DeviceSpec(
        name=known or properties.name.replace(" ", "-"),
        memory_bytes=int(properties.total_memory),
        peak_flops=preset.peak_flops,
        memory_bandwidth_bytes_per_s=preset.memory_bandwidth_bytes_per_s,
    )
    return Machine(device=device, links=links, num_cores=num_cores)


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
