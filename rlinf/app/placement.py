"""Where a run's workers go: the devices of a plan on this machine (and over Ray nodes), whether they share cores,
the backends profiling opens, and the one Ray session a run's profiling and training share."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import executor
from executor.devices import Device, is_oversubscribed, physical_units, run_devices
from rlinf.app.profiling import BackendFactory
from rlinf.app.request import RunRequest

RAY_CPUS_PER_CORE = 4
"""A private Ray gets this many CPUs per core: plans may use more logical devices than cores (each actor pins
itself to its core; Ray's CPU count only gates placement)."""


def place(request: RunRequest, num_logical: int) -> tuple[tuple[Device, ...], tuple[int, ...] | None]:
    """The devices of a plan on ``num_logical`` logical devices and the node of each. On one node they go round-robin
    over this process's first ``request.num_devices`` cores (or GPUs), the core pool after them; over ``nodes``
    Ray nodes the devices split into contiguous blocks and each block takes cores 0, 1, ... of its node (the nodes
    are assumed to have this machine's core ids). The nodes are ``None`` when every device is on node 0 (as is a
    plan on fewer devices than nodes)."""
    units = physical_units(request.accelerator)
    if request.nodes == 1 or num_logical < request.nodes:
        devices = run_devices(
            request.accelerator, num_logical, units[: request.num_devices], request.num_cpu_devices
        )
        return devices, None
    nodes = tuple(d * request.nodes // num_logical for d in range(num_logical))  # contiguous blocks
    placed, taken = [], dict.fromkeys(range(request.nodes), 0)
    for index, node in enumerate(nodes):
        placed.append(Device(index=index, kind=request.accelerator, core=units[taken[node] % len(units)]))
        taken[node] += 1
    return tuple(placed), nodes


def oversubscribed(devices: tuple[Device, ...], nodes: tuple[int, ...] | None) -> bool:
    """Whether two of a node's logical devices (devices and the cores beside them) share one core or GPU."""
    node_of = nodes or (0,) * len(devices)
    return any(
        is_oversubscribed(tuple(d for d, n in zip(devices, node_of, strict=True) if n == node))
        for node in set(node_of)
    )


def open_workers(request: RunRequest, devices: tuple[Device, ...], nodes: tuple[int, ...] | None) -> Any:
    """The request's backend (``local`` or ``ray``) over ``devices``, under the config's watchdog
    (``execution.watchdog_s``); use it as a context manager."""
    watchdog = executor.Watchdog(floor_s=request.settings.watchdog_s)
    return executor.open_backend(
        request.backend, devices, address=request.address, nodes=nodes, watchdog=watchdog
    )


def backends(request: RunRequest) -> BackendFactory:
    """What profiling opens for a probe plan on ``logical`` devices: :func:`open_workers` of its placement."""
    return lambda logical: open_workers(request, *place(request, logical))


@contextlib.contextmanager
def backend_session(request: RunRequest) -> Iterator[str | None]:
    """With ``backend="ray"``: one Ray session for profiling and training (started on 127.0.0.1 unless
    ``address``), whose CPU count leaves room for plans with more logical devices than cores; yields where it
    runs, in words (``None`` for the local backend)."""
    if request.backend != "ray":
        yield None
        return
    executor.require_ray()
    from executor import ray_session

    gpus = len(physical_units("cuda")) if request.accelerator == "cuda" else 0
    cpus = RAY_CPUS_PER_CORE * request.num_devices
    with ray_session.session(request.address, num_cpus=cpus, num_gpus=gpus):
        where = (
            f"joined the Ray cluster at {request.address}"
            if request.address
            else "started a private Ray on 127.0.0.1"
        )
        yield f"{where} ({ray_session.describe_cluster()})"
