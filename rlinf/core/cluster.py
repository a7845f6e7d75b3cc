"""Clusters: nodes x devices per node, a device spec and the links between devices, plus the CPU cores beside them.

A cluster has two pools of devices. The **device pool** holds what the heavy components run on: GPUs, or CPU
cores on a machine without GPUs (then a device is one core and there is no second pool). The **core pool** holds
the CPU cores beside the GPUs (``cores_per_node`` on each node), where components that need no GPU (environments,
a rule-based reward) can run while the policy and training use the GPUs. Plans name devices within their pool
(``env: cpu:0-13``); programs number them globally: the devices ``0 .. num_devices - 1`` node-major, then the cores
``num_devices .. num_devices + num_cores - 1`` node-major (:meth:`Cluster.global_id`).

A cluster is parsed from a short spec (``4x8xH100``: 4 nodes of 8 H100s; ``8xH100``: one node; ``2xCPU``;
``1xH100+15cores``: one H100 and 15 CPU cores beside it) or from a YAML mapping with the fields of
:class:`Cluster`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import attrs

from rlinf.core import limits
from rlinf.core.config_structure import structure_config
from rlinf.core.errors import ConfigError, integer, positive, reject_unknown_keys, require
from rlinf.core.inputs import load_yaml

GIB = 1024**3
POOLS = ("device", "cpu")
"""The pools a placement names: ``device`` (GPUs, or cores without GPUs) and ``cpu`` (cores beside GPUs)."""


@attrs.frozen(kw_only=True)
class DeviceSpec:
    """What one device can do."""

    name: str
    """Device type, e.g. ``H100``."""
    memory_bytes: int
    """Usable device memory."""
    peak_flops: float
    """Dense bf16 peak, FLOP/s."""
    memory_bandwidth_bytes_per_s: float
    """Device memory (HBM) bandwidth."""

    def __attrs_post_init__(self) -> None:
        require(
            isinstance(self.name, str) and bool(self.name.strip()),
            "device.name",
            self.name,
            "must be a non-empty name",
            "name the device type",
        )
        integer("device.memory_bytes", self.memory_bytes, fix="give the device memory in bytes")
        positive("device.memory_bytes", self.memory_bytes)
        positive("device.peak_flops", self.peak_flops)
        positive("device.memory_bandwidth_bytes_per_s", self.memory_bandwidth_bytes_per_s)


@attrs.frozen(kw_only=True)
class Links:
    """Bandwidths between devices, bytes/s, per direction."""

    intra_node_bytes_per_s: float
    inter_node_bytes_per_s: float
    host_device_bytes_per_s: float

    def __attrs_post_init__(self) -> None:
        positive("links.intra_node_bytes_per_s", self.intra_node_bytes_per_s)
        positive("links.inter_node_bytes_per_s", self.inter_node_bytes_per_s)
        positive("links.host_device_bytes_per_s", self.host_device_bytes_per_s)


# Public datasheet figures (dense bf16, HBM) and typical interconnects: NVLink within a node,
# 8x400 Gb/s InfiniBand per node shared by 8 GPUs (50 GB/s per GPU), PCIe Gen5 x16 to the host.
DEVICE_PRESETS: dict[str, tuple[DeviceSpec, Links]] = {
    "H100": (
        DeviceSpec(
            name="H100", memory_bytes=80 * GIB, peak_flops=989e12, memory_bandwidth_bytes_per_s=3.35e12
        ),
        Links(intra_node_bytes_per_s=450e9, inter_node_bytes_per_s=50e9, host_device_bytes_per_s=55e9),
    ),
    "H200": (
        DeviceSpec(
            name="H200", memory_bytes=141 * GIB, peak_flops=989e12, memory_bandwidth_bytes_per_s=4.8e12
        ),
        Links(intra_node_bytes_per_s=450e9, inter_node_bytes_per_s=50e9, host_device_bytes_per_s=55e9),
    ),
    "A100": (
        DeviceSpec(
            name="A100", memory_bytes=80 * GIB, peak_flops=312e12, memory_bandwidth_bytes_per_s=2.0e12
        ),
        Links(intra_node_bytes_per_s=300e9, inter_node_bytes_per_s=25e9, host_device_bytes_per_s=25e9),
    ),
    # One CPU core of a small cloud VM: rough figures, used for the embodied workloads profiled here.
    "CPU": (
        DeviceSpec(name="CPU", memory_bytes=8 * GIB, peak_flops=50e9, memory_bandwidth_bytes_per_s=10e9),
        Links(intra_node_bytes_per_s=5e9, inter_node_bytes_per_s=1e9, host_device_bytes_per_s=10e9),
    ),
}


def _cpu_core() -> DeviceSpec:
    return DEVICE_PRESETS["CPU"][0]


@attrs.frozen(kw_only=True)
class Cluster:
    """``num_nodes`` nodes of ``devices_per_node`` identical devices, and ``cores_per_node`` CPU cores beside them
    (the core pool; 0 when there is none). Devices are numbered node-major, then the cores."""

    num_nodes: int
    devices_per_node: int
    device: DeviceSpec
    links: Links
    cores_per_node: int = 0
    """CPU cores beside the devices on each node, where components that need no GPU may run (0: no core pool;
    on a machine without GPUs the cores are the devices)."""
    core: DeviceSpec = attrs.field(factory=_cpu_core)
    """What one core of the core pool can do."""

    def __attrs_post_init__(self) -> None:
        integer("cluster.num_nodes", self.num_nodes, minimum=1, fix="use e.g. 4x8xH100 for 4 nodes")
        integer(
            "cluster.devices_per_node",
            self.devices_per_node,
            minimum=1,
            fix="use e.g. 4x8xH100 for 8 devices per node",
        )
        integer(
            "cluster.cores_per_node",
            self.cores_per_node,
            minimum=0,
            fix="give the CPU cores beside the devices of each node (0 for none)",
        )
        require(
            isinstance(self.device, DeviceSpec),
            "cluster.device",
            self.device,
            "is not a device",
            "use a preset",
        )
        require(
            isinstance(self.core, DeviceSpec), "cluster.core", self.core, "is not a device", "use a preset"
        )
        require(isinstance(self.links, Links), "cluster.links", self.links, "are not links", "use a preset")
        bound = limits.current().max_devices
        if self.num_nodes > bound:
            raise limits.exceeded("cluster.num_nodes", self.num_nodes, "nodes", "max_devices", bound)
        if self.num_nodes * self.devices_per_node > bound:
            field = "cluster.devices_per_node" if self.devices_per_node > bound else "cluster.num_nodes"
            raise limits.exceeded(
                field, self.num_nodes * self.devices_per_node, "devices in all", "max_devices", bound
            )
        if self.num_nodes * self.cores_per_node > bound:
            raise limits.exceeded(
                "cluster.cores_per_node", self.num_nodes * self.cores_per_node, "cores", "max_devices", bound
            )

    @property
    def num_devices(self) -> int:
        """Devices of the device pool."""
        return self.num_nodes * self.devices_per_node

    @property
    def num_cores(self) -> int:
        """Cores of the core pool (0 without one)."""
        return self.num_nodes * self.cores_per_node

    @property
    def num_ids(self) -> int:
        """Global ids of both pools: what a program's devices are numbered within."""
        return self.num_devices + self.num_cores

    def pool_size(self, pool: str) -> int:
        """Devices of ``pool`` (``device`` or ``cpu``)."""
        return self.num_cores if pool == "cpu" else self.num_devices

    def global_id(self, pool: str, index: int) -> int:
        """The global id of device ``index`` of ``pool``."""
        return self.num_devices + index if pool == "cpu" else index

    def pool_of(self, device: int) -> str:
        """The pool of a global id."""
        return "cpu" if device >= self.num_devices else "device"

    def spec_of(self, device: int) -> DeviceSpec:
        """What the device with this global id can do."""
        return self.core if device >= self.num_devices else self.device

    def node_of(self, device: int) -> int:
        """Node index of a global id."""
        if device >= self.num_devices:
            return (device - self.num_devices) // max(1, self.cores_per_node)
        return device // self.devices_per_node

    def nodes_of(self, devices: tuple[int, ...]) -> frozenset[int]:
        """Set of nodes that a set of global ids touches."""
        return frozenset(self.node_of(d) for d in devices)

    def spec(self) -> str:
        """The short spec this cluster parses from, when it is a preset."""
        cores = f"+{self.cores_per_node}cores" if self.cores_per_node else ""
        return f"{self.num_nodes}x{self.devices_per_node}x{self.device.name}{cores}"

    def with_num_devices(self, num_devices: int) -> Cluster:
        """The same kind of cluster with ``num_devices`` devices (whole nodes when larger than one node); each
        node keeps its cores."""
        integer("num_devices", num_devices, minimum=1)
        per_node = min(self.devices_per_node, num_devices)
        require(
            num_devices % per_node == 0,
            "num_devices",
            num_devices,
            f"is not a whole number of {self.devices_per_node}-device nodes",
            f"use a multiple of {self.devices_per_node}",
        )
        return attrs.evolve(self, num_nodes=num_devices // per_node, devices_per_node=per_node)

    def to_dict(self) -> dict[str, Any]:
        """JSON/YAML-ready form; :func:`cluster_from_dict` reads it back (the core pool only when it has cores)."""
        out = {
            "num_nodes": self.num_nodes,
            "devices_per_node": self.devices_per_node,
            "device": attrs.asdict(self.device),
            "links": attrs.asdict(self.links),
        }
        if self.cores_per_node:
            out["cores_per_node"] = self.cores_per_node
            out["core"] = attrs.asdict(self.core)
        return out


_SPEC = re.compile(r"^(?:(\d+)x)?(\d+)x([A-Za-z0-9_-]+?)(?:\+(\d+)cores)?$")


@attrs.frozen(kw_only=True)
class Machine:
    """What the machine a run trains on offers: its kind of device (GPUs, or CPU cores on a machine without
    them) and the CPU cores beside the GPUs. A run's cluster is this machine with as many (logical) devices as
    its plan uses (:meth:`cluster`)."""

    device: DeviceSpec
    links: Links
    num_cores: int = 0
    """CPU cores beside the GPUs that components which need no GPU may use (the core pool)."""
    core: DeviceSpec = attrs.field(factory=_cpu_core)

    def __attrs_post_init__(self) -> None:
        integer("--cpu-devices", self.num_cores, minimum=0, fix="give 0 or more CPU cores")

    def cluster(self, num_devices: int) -> Cluster:
        """One node of ``num_devices`` devices and this machine's cores beside them."""
        return Cluster(
            num_nodes=1,
            devices_per_node=num_devices,
            device=self.device,
            links=self.links,
            cores_per_node=self.num_cores,
            core=self.core,
        )


CPU_MACHINE = Machine(device=DEVICE_PRESETS["CPU"][0], links=DEVICE_PRESETS["CPU"][1])
"""A machine without GPUs: a device is one CPU core (there is no core pool beside it)."""


def cpu_cluster(num_devices: int) -> Cluster:
    """One node of ``num_devices`` CPU-core devices."""
    return CPU_MACHINE.cluster(num_devices)


def parse_cluster(spec: str) -> Cluster:
    """Parse ``NODESxDEVICESxTYPE``, ``DEVICESxTYPE`` or a path to a YAML file."""
    text = str(spec).strip()
    if text.endswith((".yaml", ".yml")) or os.path.isfile(text):
        return cluster_from_dict(
            load_yaml(text, "cluster", what="cluster YAML file"), source=os.path.basename(text)
        )
    match = _SPEC.match(text)
    if not match:
        raise ConfigError(
            "cluster",
            spec,
            "is not a cluster spec",
            "write NODESxDEVICESxTYPE (e.g. 4x8xH100), DEVICESxTYPE (8xH100), either with +Ncores (CPU cores "
            "beside the devices of each node, e.g. 1xH100+15cores) or a YAML file path",
        )
    nodes_text, devices_text, device_name, cores_text = match.groups()
    preset = DEVICE_PRESETS.get(device_name.upper())
    if preset is None:
        raise ConfigError(
            "cluster.device",
            device_name,
            "is not a known device type",
            f"use one of {sorted(DEVICE_PRESETS)} or describe the device in a YAML file",
        )
    device, links = preset
    return Cluster(
        num_nodes=_spec_count(nodes_text or "1", "cluster.num_nodes"),
        devices_per_node=_spec_count(devices_text, "cluster.devices_per_node"),
        device=device,
        links=links,
        cores_per_node=_spec_count(cores_text or "0", "cluster.cores_per_node"),
    )


def _spec_count(text: str, field: str) -> int:
    """A count of a cluster spec; one of more digits than any limit is refused before it is converted."""
    if len(text.lstrip("0")) > 18:
        bound = limits.current().max_devices
        raise limits.exceeded(
            field, text if len(text) < 40 else text[:37] + "...", "devices", "max_devices", bound
        )
    return int(text)


def cluster_from_dict(data: Any, source: str = "cluster") -> Cluster:
    """Build a cluster from a mapping; ``device`` may be a preset name or a full mapping. Errors name the field's
    path under ``source``."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            source, data, "must be a mapping", "write num_nodes, devices_per_node, device, links"
        )
    known = {"num_nodes", "devices_per_node", "device", "links", "cores_per_node", "core"}
    reject_unknown_keys(data, known, source)
    for key in ("num_nodes", "devices_per_node", "device"):
        require(key in data, f"{source}.{key}", None, "is missing", f"add {key}")
    device_value = data["device"]
    if isinstance(device_value, str):
        preset = DEVICE_PRESETS.get(device_value.upper())
        require(
            preset is not None,
            f"{source}.device",
            device_value,
            "unknown device type",
            f"use one of {sorted(DEVICE_PRESETS)}",
        )
        assert preset is not None
        device, links = preset
    else:
        device = structure_config(DeviceSpec, device_value, source, f"{source}.device.")
        links = None
    links_value = data.get("links")
    if links_value is not None:
        links = structure_config(Links, links_value, source, f"{source}.links.")
    require(
        links is not None,
        f"{source}.links",
        None,
        "is missing for a custom device",
        "add links with the three bandwidths",
    )
    assert links is not None
    core = _cpu_core()
    if data.get("core") is not None:
        core = structure_config(DeviceSpec, data["core"], source, f"{source}.core.")
    try:
        return Cluster(
            num_nodes=data["num_nodes"],
            devices_per_node=data["devices_per_node"],
            device=device,
            links=links,
            cores_per_node=data.get("cores_per_node", 0),
            core=core,
        )
    except ConfigError as error:
        leaf = error.field.rsplit(".", 1)[-1]
        raise ConfigError(f"{source}.{leaf}", error.value, error.problem, error.fix) from None
