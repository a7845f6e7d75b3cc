"""Traces: profiled or synthesized component costs, the input of every what-if question.

A trace is a versioned JSON document (schema ``rlinf.trace/v1``, described in ``traces/README.md``) holding the
workflow, the cluster it was measured on (or synthesized for), its provenance, cost samples and distributions.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from rlinf.core.cluster import POOLS, Cluster, cluster_from_dict
from rlinf.core.config_structure import structure_config
from rlinf.core.errors import (
    MAX_INTEGER,
    ConfigError,
    integer,
    is_number,
    reject_unknown_keys,
    require,
    to_tuple,
)
from rlinf.core.files import write_text_atomic
from rlinf.core.inputs import load_json
from rlinf.core.workflow import Workflow, workflow_from_dict

if TYPE_CHECKING:
    from rlinf.core.program import Op

SCHEMA = "rlinf.trace/v1"
SAMPLE_OPS = (
    "env_step",
    "act",
    "generate",
    "generate_continuous",
    "reward",
    "infer",
    "train",
    "transfer",
    "onload",
    "offload",
    "sync_weights",
)
MOVEMENT_OPS = ("transfer", "onload", "offload", "sync_weights")
"""The sample ops that move bytes (priced by bandwidth, not by samples per replica)."""


@attrs.frozen(kw_only=True)
class CostSample:
    """One measured (or synthesized) op cost."""

    component: str
    op: str
    """What ran: one of :data:`SAMPLE_OPS`."""
    devices: int
    """Devices the op spanned."""
    samples: int
    tokens: int = 0
    seconds: float
    num_bytes: int = 0
    """Bytes moved, for transfer / onload / offload / sync_weights samples."""
    shared: bool = False
    """Measured as a step of the env <-> policy loop with both components on the same devices
    (:attr:`rlinf.core.program.Op.shared`): the cost model prices such ops from such samples where it has them. Written
    to JSON only when true."""
    pool: str = "device"
    """Where the op ran (:mod:`rlinf.core.cluster`): ``device`` (GPUs, or cores without GPUs) or ``cpu`` (the cores
    beside GPUs). Written to JSON only when ``cpu``."""

    def __attrs_post_init__(self) -> None:
        if (  # the common case at once (a profiled trace holds tens of thousands of samples); else each check
            type(self.component) is str
            and self.component
            and self.op in SAMPLE_OPS
            and type(self.devices) is type(self.samples) is type(self.tokens) is type(self.num_bytes) is int
            and self.devices >= 1
            and min(self.samples, self.tokens, self.num_bytes) >= 0
            and max(self.devices, self.samples, self.tokens, self.num_bytes) <= MAX_INTEGER
            and type(self.seconds) is float
            and 0.0 <= self.seconds < math.inf
            and type(self.shared) is bool
            and self.pool == "device"
        ):
            return
        where = f"samples[{self.component}.{self.op}]"
        require(
            isinstance(self.component, str) and bool(self.component),
            f"{where}.component",
            self.component,
            "must be a component name",
            "name the component that ran the op",
        )
        require(self.op in SAMPLE_OPS, f"{where}.op", self.op, "unknown op", f"use one of {list(SAMPLE_OPS)}")
        integer(f"{where}.devices", self.devices, minimum=1, fix="give the device count")
        for name in ("samples", "tokens", "num_bytes"):
            integer(f"{where}.{name}", getattr(self, name), minimum=0, fix=f"record a whole number of {name}")
        require(
            is_number(self.seconds) and self.seconds >= 0,
            f"{where}.seconds",
            self.seconds,
            "must be a finite number >= 0",
            "record a non-negative duration",
        )
        require(
            type(self.shared) is bool,
            f"{where}.shared",
            self.shared,
            "must be true or false",
            "write true for a loop step measured with env and policy on the same devices, else leave it out",
        )
        require(self.pool in POOLS, f"{where}.pool", self.pool, "unknown pool", f"use one of {list(POOLS)}")

    @classmethod
    def of_op(cls, op: Op, seconds: float, num_bytes: int) -> CostSample:
        """The sample of one measured op of a program: what ran, on how many devices, how much, how long
        (``seconds``, clamped at 0) and, for a movement op, the ``num_bytes`` it moved."""
        return cls(
            component=op.component,
            op=op.name,
            devices=max(1, len(op.devices)),
            samples=op.samples,
            tokens=op.tokens,
            seconds=max(0.0, seconds),
            num_bytes=num_bytes if op.kind != "compute" else 0,
            shared=op.shared,
            pool=op.pool,
        )


@attrs.frozen(kw_only=True)
class Trace:
    """Workflow, cluster, provenance, cost samples and distributions."""

    workflow: Workflow
    cluster: Cluster
    provenance: Mapping[str, Any]
    """How the numbers came to be: ``kind`` (``profiled`` or ``synthesized``), the machine or the assumptions."""
    samples: tuple[CostSample, ...] = attrs.field(converter=to_tuple)
    response_lengths: tuple[float, ...] = attrs.field(converter=to_tuple, default=())
    """Empirical distribution of generated tokens per response (empty for non-language workloads)."""
    activation_bytes_per_sample: Mapping[str, float] = attrs.field(factory=dict)
    """Transient memory (activations, KV) per sample per replica, by component."""

    def __attrs_post_init__(self) -> None:
        require(
            isinstance(self.provenance, Mapping) and "kind" in self.provenance,
            "provenance.kind",
            None,
            "is missing",
            "say 'profiled' or 'synthesized'",
        )
        names = set(self.workflow.component_names)
        for sample in self.samples:
            require(
                sample.component in names,
                "samples.component",
                sample.component,
                "unknown component",
                f"use one of {sorted(names)}",
            )
        for i, length in enumerate(self.response_lengths):
            require(
                is_number(length) and length > 0,
                f"distributions.response_length[{i}]",
                length,
                "must be a finite number > 0",
                "record generated token counts",
            )
        require(
            isinstance(self.activation_bytes_per_sample, Mapping),
            "memory.activation_bytes_per_sample",
            self.activation_bytes_per_sample,
            "must be a mapping",
            "write component: bytes",
        )
        for name, value in self.activation_bytes_per_sample.items():
            require(
                name in names,
                f"memory.activation_bytes_per_sample.{name}",
                name,
                "unknown component",
                f"use one of {sorted(names)}",
            )
            require(
                is_number(value) and value >= 0,
                f"memory.activation_bytes_per_sample.{name}",
                value,
                "must be a finite number >= 0",
                "give the bytes per sample",
            )

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        return {
            "schema": SCHEMA,
            "workflow": self.workflow.to_dict(),
            "cluster": self.cluster.to_dict(),
            "provenance": dict(self.provenance),
            "samples": [_sample_dict(s) for s in self.samples],
            "distributions": {"response_length": list(self.response_lengths)},
            "memory": {"activation_bytes_per_sample": dict(self.activation_bytes_per_sample)},
        }

    def save(self, path: str | Path) -> None:
        """Write atomically (temporary file, then rename)."""
        write_text_atomic(Path(path), json.dumps(self.to_dict(), indent=1) + "\n")


DISTRIBUTION_KEYS = ("response_length",)
MEMORY_KEYS = ("activation_bytes_per_sample",)


def trace_from_dict(data: Any, source: str = "trace") -> Trace:
    """Validate and build a trace from its JSON form; errors name the field's path under ``source``."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            source,
            type(data).__name__,
            "must be a JSON object",
            "write a trace with schema, workflow, cluster, provenance, samples",
        )
    require(
        "schema" in data,
        f"{source}.schema",
        None,
        "is missing",
        f"add schema: {SCHEMA!r} (see traces/README.md)",
    )
    require(
        data["schema"] == SCHEMA,
        f"{source}.schema",
        data["schema"],
        "unsupported schema",
        f"set schema to {SCHEMA!r}",
    )
    for key in ("workflow", "cluster", "provenance", "samples"):
        require(key in data, f"{source}.{key}", None, "is missing", f"add {key} (see traces/README.md)")
    known = {"schema", "workflow", "cluster", "provenance", "samples", "distributions", "memory"}
    reject_unknown_keys(data, known, source)
    provenance = data["provenance"]
    require(
        isinstance(provenance, Mapping),
        f"{source}.provenance",
        provenance,
        "must be an object",
        "say how the numbers came to be: {kind: profiled | synthesized, ...}",
    )
    require(
        "kind" in provenance,
        f"{source}.provenance.kind",
        None,
        "is missing",
        "say 'profiled' or 'synthesized'",
    )
    workflow = workflow_from_dict(data["workflow"], f"{source}.workflow")
    cluster = cluster_from_dict(data["cluster"], f"{source}.cluster")
    samples = _samples(data["samples"], workflow, source)
    distributions = _section(data, "distributions", DISTRIBUTION_KEYS, source)
    memory = _section(data, "memory", MEMORY_KEYS, source)
    lengths = distributions.get("response_length", [])
    require(
        isinstance(lengths, list),
        f"{source}.distributions.response_length",
        lengths,
        "must be a list",
        "write generated token counts",
    )
    activations = memory.get("activation_bytes_per_sample", {})
    try:
        return Trace(
            workflow=workflow,
            cluster=cluster,
            provenance=provenance,
            samples=samples,
            response_lengths=lengths,
            activation_bytes_per_sample=activations,
        )
    except ConfigError as error:  # the trace's own checks name fields relative to the document
        raise ConfigError(f"{source}.{error.field}", error.value, error.problem, error.fix) from None


def _section(data: Mapping[str, Any], key: str, known: tuple[str, ...], source: str) -> Mapping[str, Any]:
    section = data.get(key)
    if section is None:
        return {}
    require(
        isinstance(section, Mapping), f"{source}.{key}", section, "must be an object", f"write {list(known)}"
    )
    reject_unknown_keys(section, known, f"{source}.{key}")
    return section


def _sample_dict(sample: CostSample) -> dict[str, Any]:
    out = attrs.asdict(sample)
    if not sample.shared:
        del out["shared"]
    if sample.pool == "device":
        del out["pool"]
    return out


def _samples(items: Any, workflow: Workflow, source: str) -> list[CostSample]:
    require(
        isinstance(items, list),
        f"{source}.samples",
        items,
        "must be a list",
        "write a list of samples",
    )
    names = set(workflow.component_names)
    samples = []
    for i, item in enumerate(items):
        where = f"{source}.samples[{i}]"
        require(
            isinstance(item, Mapping),
            where,
            item,
            "must be an object",
            "write component, op, devices, samples, seconds",
        )
        sample = structure_config(CostSample, item, source, f"{where}.")
        require(
            sample.component in names,
            f"{where}.component",
            sample.component,
            "unknown component",
            f"use one of {sorted(names)}",
        )
        samples.append(sample)
    return samples


def load_trace(path: str | Path, field: str = "trace") -> Trace:
    """Read a trace file (bytes, UTF-8, JSON within :mod:`rlinf.core.limits`), with errors naming the file and the
    field (``field`` names the file itself: the flag or argument it came from)."""
    data = load_json(path, field, what="trace JSON file (see traces/)")
    return trace_from_dict(data, source=os.path.basename(str(path)))
