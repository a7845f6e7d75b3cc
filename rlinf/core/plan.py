"""Plans: where each component runs and at what granularity data moves.

A plan is written in YAML with RLinf-style device ranges::

    placement:
      rollout: 0-7
      reward: 0-7
      actor: all          # every device of the cluster
      env: cpu:0-13       # CPU cores beside the GPUs (the cluster's core pool)
    granularity:          # micro-batches per stream edge, pipeline stages of the embodied loop
      rollout->reward: 8
    offload: [rollout, actor]   # components that move their state to host memory when they yield a device
    max_staleness: 1      # the rollout side may run this many iterations ahead of training (0: synchronous)

The mode is derived from the placement, never declared: every component on the same devices is ``collocated``,
pairwise disjoint device sets are ``disaggregated``, anything else is ``hybrid``. Device ids count within their
pool (:mod:`rlinf.core.cluster`): ``0-7`` are devices (GPUs, or cores without GPUs), ``cpu:0-13`` the cores beside them.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

from rlinf.core import limits
from rlinf.core.cluster import POOLS
from rlinf.core.config_structure import structure_config
from rlinf.core.errors import ConfigError, RlinfWarning, integer, require
from rlinf.core.inputs import parse_yaml, read_text
from rlinf.core.workflow import Workflow

MODES = ("collocated", "disaggregated", "hybrid")
MAX_STALENESS = 64
"""The largest staleness bound a plan may hold."""


@attrs.frozen(kw_only=True)
class Placement:
    """The devices of one component."""

    component: str
    devices: tuple[int, ...] = attrs.field(converter=lambda v: tuple(sorted(set(v))))
    """Sorted device ids."""
    data_parallel_size: int = 0
    """Replicas; 0 means len(devices) // model_parallel_size (resolved by :meth:`Plan.validate_for`)."""
    pool: str = "device"
    """``device`` (GPUs, or cores without GPUs) or ``cpu`` (the cores beside GPUs): the pool ``devices`` count in."""

    def __attrs_post_init__(self) -> None:
        require(
            self.pool in POOLS,
            f"placement.{self.component}",
            self.pool,
            "unknown pool",
            f"use one of {POOLS}",
        )
        require(
            isinstance(self.component, str) and bool(self.component),
            "placement",
            self.component,
            "must be a component name",
            "write component: devices",
        )
        require(
            len(self.devices) > 0,
            f"placement.{self.component}",
            self.devices,
            "has no devices",
            "give a range like 0-7 or 'all'",
        )
        if set(map(type, self.devices)) != {int}:  # the common case, checked at once
            for device in self.devices:
                integer(f"placement.{self.component}", device, fix="use whole device ids")
        require(
            min(self.devices) >= 0,
            f"placement.{self.component}",
            min(self.devices),
            "negative device id",
            "use ids from 0",
        )
        integer(
            f"data_parallel.{self.component}",
            self.data_parallel_size,
            minimum=0,
            fix="give the number of replicas (or drop it to derive it)",
        )

    @property
    def num_devices(self) -> int:
        """How many devices the component spans."""
        return len(self.devices)

    @property
    def keyed(self) -> frozenset[tuple[str, int]]:
        """``(pool, id)`` of every device: what comparing placements across pools needs."""
        return frozenset((self.pool, d) for d in self.devices)

    @property
    def text(self) -> str:
        """The devices as a plan writes them: ``0-7`` or ``cpu:0-13``."""
        ranges = format_devices(self.devices)
        return f"cpu:{ranges}" if self.pool == "cpu" else ranges


def _names(values: Iterable[str]) -> frozenset[str]:
    return frozenset(values)


def _placements(value: Any) -> tuple[Placement, ...]:
    return tuple(sorted(value, key=lambda p: p.component))


@attrs.frozen(kw_only=True)
class Plan:
    """Placement, granularity and offload policy of every component."""

    placements: tuple[Placement, ...] = attrs.field(converter=_placements)
    granularity: Mapping[str, int] = attrs.field(
        factory=dict, converter=lambda v: dict(sorted(dict(v).items()))
    )
    """Micro-batches per stream edge (``src->dst``) and pipeline stages of the embodied loop (``loop``)."""
    offload: frozenset[str] = attrs.field(factory=frozenset, converter=_names)
    """Components that offload their state when they yield a shared device."""
    max_staleness: int = 0
    """How many iterations the rollout side (everything that feeds the training components) may run ahead of
    training: 0 is synchronous (an iteration's rollout starts after the previous iteration's training); with
    ``k >= 1`` iteration ``i + k``'s rollout runs while iteration ``i`` trains, on weights at most ``k`` versions
    old (an iteration of the program is then one step of that pipeline)."""
    buffer_before: tuple[str, ...] = attrs.field(default=(), converter=lambda v: tuple(sorted(v)))
    """With ``max_staleness >= 1``, the components besides the trainers that read the buffered batch and so run on
    the training side (one of ``Workflow.buffer_cuts``; empty: the buffer feeds the trainers). An inference
    component behind the buffer scores batch ``i`` while the rollout generates batch ``i + k``, with the weights
    that sampled batch ``i``: it keeps the last ``k + 1`` synced versions."""

    def __attrs_post_init__(self) -> None:
        names = [p.component for p in self.placements]
        require(
            len(set(names)) == len(names),
            "placement",
            names,
            "a component is placed twice",
            "list each component once",
        )
        for key, value in self.granularity.items():
            require(
                isinstance(key, str),
                f"granularity.{key}",
                key,
                "must be an edge name",
                "write src->dst or loop",
            )
            integer(
                f"granularity.{key}",
                value,
                minimum=1,
                fix="give the number of micro-batches (1 = whole batch)",
            )
        for name in self.offload:
            require(
                isinstance(name, str),
                "offload",
                name,
                "must be a component name",
                "write offload: [name, ...]",
            )
        integer(
            "max_staleness",
            self.max_staleness,
            minimum=0,
            maximum=MAX_STALENESS,
            fix="give how many iterations the rollout may run ahead of training (0: synchronous)",
        )
        for name in self.buffer_before:
            require(
                isinstance(name, str),
                "buffer_before",
                name,
                "must be a component name",
                "write buffer_before: [name, ...]",
            )
        require(
            not self.buffer_before or self.max_staleness >= 1,
            "buffer_before",
            list(self.buffer_before),
            "needs a staleness bound (there is no buffer at max_staleness 0)",
            "set max_staleness: 1 or more, or drop buffer_before",
        )

    def __hash__(self) -> int:
        return hash(
            (
                self.placements,
                tuple(self.granularity.items()),
                self.offload,
                self.max_staleness,
                self.buffer_before,
            )
        )

    def pool_of(self, component: str) -> str:
        """The pool ``component`` is placed in."""
        return self.placement(component).pool

    def shares_device(self, a: str, b: str) -> bool:
        """Whether components ``a`` and ``b`` have a device in common (in the same pool)."""
        return not self.placement(a).keyed.isdisjoint(self.placement(b).keyed)

    def placement(self, component: str) -> Placement:
        """The placement of ``component``; raises listing the placed components."""
        for placement in self.placements:
            if placement.component == component:
                return placement
        raise ConfigError(
            "placement", component, "component is not placed", f"add '{component}: <devices>' under placement"
        )

    def devices_of(self, component: str) -> tuple[int, ...]:
        """Device ids of ``component``."""
        return self.placement(component).devices

    def granularity_of(self, key: str) -> int:
        """Micro-batches for a stream edge or the loop; 1 when the plan is silent."""
        return self.granularity.get(key, 1)

    @property
    def mode(self) -> str:
        """``collocated``, ``disaggregated`` or ``hybrid``, derived from the placement."""
        sets = [p.keyed for p in self.placements]
        if all(s == sets[0] for s in sets):
            return "collocated"
        if all(a.isdisjoint(b) for i, a in enumerate(sets) for b in sets[i + 1 :]):
            return "disaggregated"
        return "hybrid"

    @property
    def devices_used(self) -> tuple[int, ...]:
        """Every device of the device pool any component uses."""
        return tuple(sorted({d for p in self.placements if p.pool == "device" for d in p.devices}))

    @property
    def cores_used(self) -> tuple[int, ...]:
        """Every core of the core pool any component uses."""
        return tuple(sorted({d for p in self.placements if p.pool == "cpu" for d in p.devices}))

    @property
    def num_logical(self) -> tuple[int, int]:
        """(devices, cores) a run of this plan needs: one past the highest id used in each pool."""
        devices, cores = self.devices_used, self.cores_used
        return (devices[-1] + 1 if devices else 0, cores[-1] + 1 if cores else 0)

    def validate_for(self, workflow: Workflow, num_devices: int, num_cores: int = 0) -> Plan:
        """Check the plan against a workflow and a cluster's device and core counts; returns the plan with
        data-parallel sizes resolved.

        Raises :class:`ConfigError` naming the field for unknown or missing components, devices out of range,
        device counts that are not a multiple of the model-parallel size and unknown granularity keys. Warns when
        an offload has no effect (the component shares no device)."""
        placed = {p.component for p in self.placements}
        for name in sorted(placed - set(workflow.component_names)):
            raise ConfigError(
                f"placement.{name}", name, "unknown component", f"use one of {list(workflow.component_names)}"
            )
        for name in workflow.component_names:
            require(
                name in placed,
                f"placement.{name}",
                None,
                "component is not placed",
                f"add '{name}: <devices>' (e.g. 'all')",
            )
        resolved = []
        for placement in self.placements:
            component = workflow.component(placement.component)
            top = max(placement.devices)
            if placement.pool == "cpu":
                require(
                    top < num_cores,
                    f"placement.{placement.component}",
                    f"cpu:{top}",
                    "core out of range ("
                    + (f"the cluster has cores cpu:0-{num_cores - 1}" if num_cores else "the cluster has no CPU "
                       "cores beside its devices") + ")",
                    f"use cores below cpu:{num_cores}" if num_cores else
                    "place it on devices, or give the cluster cores (--cpu-devices N on a GPU machine)",
                )  # fmt: skip
            else:
                require(
                    top < num_devices,
                    f"placement.{placement.component}",
                    top,
                    f"device out of range (the cluster has devices 0-{num_devices - 1})",
                    f"use ids below {num_devices} or a larger cluster",
                )
            mp = component.model_parallel_size
            require(
                placement.num_devices % mp == 0,
                f"placement.{placement.component}",
                placement.num_devices,
                f"device count is not a multiple of model_parallel_size={mp}",
                f"give {placement.component} a multiple of {mp} devices",
            )
            dp = placement.data_parallel_size or placement.num_devices // mp
            require(
                dp * mp == placement.num_devices,
                f"data_parallel.{placement.component}",
                dp,
                f"data_parallel x model_parallel ({dp}x{mp}) != {placement.num_devices} devices",
                "drop data_parallel to derive it, or make the product match",
            )
            resolved.append(attrs.evolve(placement, data_parallel_size=dp))
        valid_keys = set(workflow.granularity_keys)
        num_groups = workflow.batch_size // workflow.group_size
        for key, value in self.granularity.items():
            require(
                key in valid_keys,
                f"granularity.{key}",
                key,
                "not a stream edge or loop of the workflow",
                f"use one of {sorted(valid_keys)}",
            )
            if key == "loop":
                require(
                    workflow.batch_size % value == 0,
                    f"granularity.{key}",
                    value,
                    f"does not divide the {workflow.batch_size} environments",
                    "use a divisor of the number of environments",
                )
            else:
                require(
                    value <= num_groups,
                    f"granularity.{key}",
                    value,
                    f"exceeds the {num_groups} prompt groups in a batch",
                    f"use at most {num_groups} micro-batches",
                )
        if self.max_staleness:
            require(
                bool(workflow.buffered_edges),
                "max_staleness",
                self.max_staleness,
                f"needs an edge from the rollout side into a training component (actor or critic); "
                f"{workflow.name} has none",
                "use max_staleness: 0",
            )
        if self.buffer_before:
            cuts = [list(c) for c in workflow.buffer_cuts if c]
            require(
                list(self.buffer_before) in cuts,
                "buffer_before",
                list(self.buffer_before),
                "is not a set of components that can run behind the buffer (reward or inference components "
                "whose outputs all go to the training side)",
                f"use one of {cuts}" if cuts else "drop buffer_before: this workflow has no such components",
            )
        for name in sorted(self.offload):
            require(
                name in placed, f"offload.{name}", name, "unknown component", f"use one of {sorted(placed)}"
            )
            shared = any(
                self.shares_device(name, p.component) for p in self.placements if p.component != name
            )
            if not shared:
                warnings.warn(
                    f"offload.{name}: {name} shares no device, so offloading it has no effect",
                    RlinfWarning,
                    stacklevel=2,
                )
        return attrs.evolve(self, placements=resolved)

    def to_dict(self) -> dict[str, Any]:
        """YAML/JSON-ready form with compact ranges."""
        out: dict[str, Any] = {
            "mode": self.mode,
            "placement": {p.component: p.text for p in self.placements},
        }
        data_parallel = {p.component: p.data_parallel_size for p in self.placements if p.data_parallel_size}
        if data_parallel:
            out["data_parallel"] = data_parallel
        if self.granularity:
            out["granularity"] = dict(self.granularity)
        if self.offload:
            out["offload"] = sorted(self.offload)
        if self.max_staleness:
            out["max_staleness"] = self.max_staleness
        if self.buffer_before:
            out["buffer_before"] = list(self.buffer_before)
        return out

    def to_yaml(self) -> str:
        """YAML text that :func:`plan_from_yaml` reads back (``mode`` is written as a comment-like field and ignored)."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def describe(self) -> str:
        """One line: mode, placement, granularity, offload."""
        parts = [f"{p.component}@{p.text}" for p in self.placements]
        text = f"{self.mode}: " + " ".join(parts)
        if self.granularity:
            text += " | " + " ".join(f"{k}={v}" for k, v in self.granularity.items())
        if self.offload:
            text += " | offload " + ",".join(sorted(self.offload))
        if self.max_staleness:
            text += f" | staleness {self.max_staleness}"
        if self.buffer_before:
            text += f" (buffer before {','.join(self.buffer_before)})"
        return text


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def parse_placement(
    value: Any, num_devices: int, field: str, num_cores: int = 0
) -> tuple[str, tuple[int, ...]]:
    """``(pool, ids)`` of a placement: ``cpu:0-13`` (or ``cpu:all``) names cores of the core pool, anything else
    devices (:func:`parse_devices`)."""
    if isinstance(value, str) and value.strip().lower().startswith("cpu:"):
        return "cpu", parse_devices(value.strip()[4:], num_cores, field)
    return "device", parse_devices(value, num_devices, field)


def parse_devices(value: Any, num_devices: int, field: str) -> tuple[int, ...]:
    """Parse ``all``, ``3``, ``0-7``, ``0-3,8-11`` or a list of those into sorted device ids."""
    if isinstance(value, bool):
        raise ConfigError(field, value, "is not a device range", "write e.g. 0-7, 0-3,8-11 or all")
    if isinstance(value, int):
        items: list[Any] = [value]
    elif isinstance(value, str):
        if value.strip().lower() == "all":
            require(num_devices >= 1, field, value, "names no device (the pool is empty)", "give ids")
            return tuple(range(num_devices))
        items = [part.strip() for part in value.split(",")]
    elif isinstance(value, list):
        items = value
    else:
        raise ConfigError(field, value, "is not a device range", "write e.g. 0-7, 0-3,8-11 or all")
    bound = limits.current().max_devices
    devices: set[int] = set()
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool):
            if not 0 <= item < bound:
                require(item >= 0, field, item, "negative device id", "use ids from 0")
                raise limits.exceeded(field, item, "devices", "max_devices", bound)
            devices.add(item)
            continue
        match = _RANGE.match(item.strip()) if isinstance(item, str) else None
        if not match:
            raise ConfigError(field, item, "is not a device range", "write e.g. 0-7, 0-3,8-11 or all")
        if max(len(group.lstrip("0")) for group in match.groups() if group is not None) > len(str(bound)):
            raise limits.exceeded(field, item, "devices", "max_devices", bound)
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) else low
        require(low <= high, field, item, "range ends before it starts", f"write {high}-{low}")
        if high >= bound:
            raise limits.exceeded(field, item, "devices", "max_devices", bound)
        devices.update(range(low, high + 1))
    require(bool(devices), field, value, "is empty", "give at least one device")
    return tuple(sorted(devices))


def format_devices(devices: tuple[int, ...]) -> str:
    """Compact range text: (0,1,2,3,8) -> '0-3,8'."""
    parts: list[str] = []
    start = prev = devices[0]
    for device in devices[1:]:
        if device == prev + 1:
            prev = device
            continue
        parts.append(f"{start}-{prev}" if prev > start else f"{start}")
        start = prev = device
    parts.append(f"{start}-{prev}" if prev > start else f"{start}")
    return ",".join(parts)


@attrs.frozen(kw_only=True)
class PlanDocument:
    """A plan as its YAML file writes it, before device ranges are resolved against a cluster: what
    :func:`~rlinf.core.config_structure.structure_config` reads a plan file into (types checked, unknown keys
    refused, every error naming the key's path)."""

    placement: Mapping[str, Any]
    """Component -> device range (``0-7``, ``all``, ``cpu:0-13``, an id or a list of those)."""
    mode: str | None = None
    """Optional; must match the mode derived from the placement."""
    data_parallel: Mapping[str, int] = attrs.field(factory=dict)
    """Component -> replicas (derived from the devices when absent)."""
    granularity: Mapping[str, int] = attrs.field(factory=dict)
    offload: tuple[str, ...] = ()
    max_staleness: int = 0
    buffer_before: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        require(
            bool(self.placement), "placement", dict(self.placement), "must be a non-empty mapping",
            "write component: devices",
        )  # fmt: skip
        for name, size in self.data_parallel.items():
            require(
                name in self.placement, f"data_parallel.{name}", name, "names a component that is not placed",
                f"use components of placement: {sorted(self.placement)}",
            )  # fmt: skip
            integer(f"data_parallel.{name}", size, minimum=1, fix="give the number of replicas, or drop it")
        bound = limits.current().max_micro_batches
        for key, value in self.granularity.items():
            integer(
                f"granularity.{key}",
                value,
                minimum=1,
                fix="give the number of micro-batches (1 = whole batch)",
            )
            if value > bound:
                raise limits.exceeded(
                    f"granularity.{key}", value, "micro-batches", "max_micro_batches", bound
                )


def plan_from_dict(data: Any, num_devices: int, source: str = "plan", num_cores: int = 0) -> Plan:
    """Build a plan from its mapping form (``all`` means every device, ``cpu:all`` every one of ``num_cores``
    cores), read through the structured-config path (:class:`PlanDocument`; a key set to null counts as absent).
    Errors name the key's path under ``source``; ``mode``, if present, must match the derived mode."""
    if isinstance(data, Mapping):
        data = {key: value for key, value in data.items() if value is not None}
    document = structure_config(PlanDocument, data, source, f"{source}.")
    placements = []
    for name, devices in document.placement.items():
        pool, ids = parse_placement(devices, num_devices, f"{source}.placement.{name}", num_cores)
        placements.append(
            Placement(
                component=name, devices=ids, data_parallel_size=document.data_parallel.get(name, 0), pool=pool
            )
        )
    plan = Plan(
        placements=placements,
        granularity=document.granularity,
        offload=document.offload,
        max_staleness=document.max_staleness,
        buffer_before=document.buffer_before,
    )
    if document.mode is not None:
        require(
            document.mode == plan.mode,
            f"{source}.mode",
            document.mode,
            f"does not match the placement, which is {plan.mode}",
            "drop mode (it is derived) or change the placement",
        )
    return plan


def plan_from_yaml(text: str, num_devices: int, source: str = "plan", num_cores: int = 0) -> Plan:
    """Parse plan YAML text (aliases, nesting and sizes within :mod:`rlinf.core.limits`)."""
    return plan_from_dict(parse_yaml(text, source, source), num_devices, source, num_cores)


def load_plan(path: str | Path, num_devices: int, field: str = "plan", num_cores: int = 0) -> Plan:
    """Read a plan YAML file (bytes, UTF-8, YAML within :mod:`rlinf.core.limits`); errors name the file (``field``: the
    flag it came from) or the field in it."""
    text = read_text(path, field, what="plan YAML file (see examples/plans/)")
    return plan_from_yaml(text, num_devices, source=os.path.basename(str(path)), num_cores=num_cores)
