"""Starting or joining Ray for the Ray backend, bound to loopback when it runs on this machine alone.

* :func:`connect` with no address starts a private single-node Ray bound to ``127.0.0.1`` (no dashboard, a small
  object store); with an address it joins that cluster as a driver.
* :func:`emulated_cluster` starts a Ray cluster of several nodes on this machine (one raylet and object store
  per node, all on ``127.0.0.1``), for tests and benchmarks of multi-node placements.

On Linux, Ray rewrites ``127.0.0.1`` to the machine's outward address and listens on every interface unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (Ray's own switch for single-machine instances); :func:`loopback_only`
sets it for this process and for the Ray processes it starts, and only for instances started here.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

LOOPBACK = "127.0.0.1"
OBJECT_STORE_BYTES = 200 * 1024 * 1024
"""Object store of a local instance (per node): ample for the payloads of one iteration."""
_SINGLE_MACHINE_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def loopback_only() -> None:
    """Make Ray instances started from this process bind ``127.0.0.1`` only (see the module docstring)."""
    os.environ[_SINGLE_MACHINE_SWITCH] = "0"
    import ray._private.ray_constants as constants

    constants.ENABLE_RAY_CLUSTER = False  # read when Ray resolves addresses, after import


def connect(address: str | None, *, num_cpus: int, num_gpus: int = 0) -> bool:
    """Join the Ray cluster at ``address``, or start a private loopback one; returns whether it was started
    here (and must be shut down by the caller). Does nothing when Ray is already initialised."""
    import ray

    if ray.is_initialized():
        return False
    if address is None:
        loopback_only()
        ray.init(
            address="local",
            _node_ip_address=LOOPBACK,
            include_dashboard=False,
            object_store_memory=OBJECT_STORE_BYTES,
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        return True
    ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    return False


@contextlib.contextmanager
def session(address: str | None, *, num_cpus: int, num_gpus: int = 0) -> Iterator[None]:
    """Ray for the duration of a command (e.g. profiling several plans, then training): the backends opened
    inside use it instead of starting their own; stopped on exit when it was started here."""
    owned = connect(address, num_cpus=num_cpus, num_gpus=num_gpus)
    try:
        yield
    finally:
        if owned:
            shutdown()


def describe_cluster() -> str:
    """``"2 nodes, 2 CPUs, 0 GPUs"`` for the alive nodes of the connected cluster."""
    import ray

    alive = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    cpus = sum(resources.get("CPU", 0.0) for resources in alive)
    gpus = sum(resources.get("GPU", 0.0) for resources in alive)
    return f"{len(alive)} node{'s' if len(alive) != 1 else ''}, {cpus:g} CPUs, {gpus:g} GPUs"


def shutdown() -> None:
    """Stop the driver's connection (and the instance, when it was started by :func:`connect`)."""
    import ray

    ray.shutdown()


@contextlib.contextmanager
def emulated_cluster(
    cpus_per_node: Sequence[int], *, object_store_bytes: int = 100 * 1024 * 1024
) -> Iterator[str]:
    """A Ray cluster of ``len(cpus_per_node)`` nodes on this machine, bound to loopback; yields its address.

    Node ``i`` carries the custom resource ``node{i}`` so :class:`executor.ray_backend.RayBackend` maps plan
    node ``i`` onto it. Connects this process as the driver and shuts everything down on exit."""
    import ray
    from ray.cluster_utils import Cluster

    loopback_only()
    common: dict[str, Any] = {"object_store_memory": object_store_bytes, "node_ip_address": LOOPBACK}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            **common,
            "num_cpus": cpus_per_node[0],
            "resources": {"node0": 1},
            "include_dashboard": False,
        },
    )
    try:
        for index, cpus in enumerate(cpus_per_node[1:], start=1):
            cluster.add_node(**common, num_cpus=cpus, resources={f"node{index}": 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.WARNING)
        yield cluster.address
    finally:
        ray.shutdown()
        cluster.shutdown()
