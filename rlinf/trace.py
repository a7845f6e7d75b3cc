"""Traces: profiled or synthesized component costs, the input of every what-if question.

A trace is a versioned JSON document (schema ``rlinf.trace/v1``, described in ``traces/README.md``) holding the
workflow, the cluster it was measured on (or synthesized for), its provenance, cost samples and distributions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from rlinf.cluster import Cluster, cluster_from_dict
from rlinf.errors import ConfigError, non_negative, reject_unknown_keys, require, require_keys, to_tuple
from rlinf.files import write_text_atomic
from rlinf.workflow import Workflow, workflow_from_dict

SCHEMA = "rlinf.trace/v1"
SAMPLE_OPS = (
    "env_step",
    "act",
    "generate",
    "reward",
    "infer",
    "train",
    "transfer",
    "onload",
    "offload",
    "sync_weights",
)


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

    def __attrs_post_init__(self) -> None:
        where = f"samples[{self.component}.{self.op}]"
        require(self.op in SAMPLE_OPS, f"{where}.op", self.op, "unknown op", f"use one of {list(SAMPLE_OPS)}")
        require(
            isinstance(self.devices, int) and self.devices >= 1,
            f"{where}.devices",
            self.devices,
            "must be an integer >= 1",
            "give the device count",
        )
        non_negative(f"{where}.samples", self.samples)
        non_negative(f"{where}.tokens", self.tokens)
        require(
            isinstance(self.seconds, (int, float)) and math.isfinite(self.seconds) and self.seconds >= 0,
            f"{where}.seconds",
            self.seconds,
            "must be a finite number >= 0",
            "record a non-negative duration",
        )
        non_negative(f"{where}.num_bytes", self.num_bytes)


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
        for length in self.response_lengths:
            require(
                length > 0,
                "distributions.response_length",
                length,
                "must be > 0",
                "record generated token counts",
            )
        for name in self.activation_bytes_per_sample:
            require(
                name in names,
                "memory.activation_bytes_per_sample",
                name,
                "unknown component",
                f"use one of {sorted(names)}",
            )

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        return {
            "schema": SCHEMA,
            "workflow": self.workflow.to_dict(),
            "cluster": self.cluster.to_dict(),
            "provenance": dict(self.provenance),
            "samples": [attrs.asdict(s) for s in self.samples],
            "distributions": {"response_length": list(self.response_lengths)},
            "memory": {"activation_bytes_per_sample": dict(self.activation_bytes_per_sample)},
        }

    def save(self, path: str | Path) -> None:
        """Write atomically (temporary file, then rename)."""
        write_text_atomic(Path(path), json.dumps(self.to_dict(), indent=1) + "\n")


def trace_from_dict(data: Any, source: str = "trace") -> Trace:
    """Validate and build a trace from its JSON form."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            source,
            type(data).__name__,
            "must be a JSON object",
            "write a trace with schema, workflow, cluster, provenance, samples",
        )
    require(
        data.get("schema") == SCHEMA,
        f"{source}.schema",
        data.get("schema"),
        "unsupported schema",
        f"set schema to {SCHEMA!r}",
    )
    for key in ("workflow", "cluster", "provenance", "samples"):
        require(key in data, f"{source}.{key}", None, "is missing", f"add {key} (see traces/README.md)")
    known = {"schema", "workflow", "cluster", "provenance", "samples", "distributions", "memory"}
    reject_unknown_keys(data, known, source)
    samples_data = data["samples"]
    require(
        isinstance(samples_data, list),
        f"{source}.samples",
        type(samples_data).__name__,
        "must be a list",
        "write a list of samples",
    )
    samples = []
    for i, item in enumerate(samples_data):
        require(
            isinstance(item, Mapping),
            f"{source}.samples[{i}]",
            item,
            "must be an object",
            "write component, op, devices, samples, seconds",
        )
        reject_unknown_keys(item, (a.name for a in attrs.fields(CostSample)), f"{source}.samples[{i}]")
        require_keys(item, ("component", "op", "devices", "samples", "seconds"), f"{source}.samples[{i}]")
        try:
            samples.append(CostSample(**item))
        except ConfigError as error:
            # Name the sample by its position, so that one bad value among thousands can be found.
            attribute = error.field.rsplit(".", 1)[-1]
            raise ConfigError(
                f"{source}.samples[{i}].{attribute}", error.value, error.problem, error.fix
            ) from None
    distributions = data.get("distributions") or {}
    memory = data.get("memory") or {}
    return Trace(
        workflow=workflow_from_dict(data["workflow"], f"{source}.workflow"),
        cluster=cluster_from_dict(data["cluster"], f"{source}.cluster"),
        provenance=data["provenance"],
        samples=samples,
        response_lengths=distributions.get("response_length", []),
        activation_bytes_per_sample=memory.get("activation_bytes_per_sample", {}),
    )


def load_trace(path: str | Path) -> Trace:
    """Read a trace file, with errors naming the file and the field."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            "trace", str(path), "file does not exist", "pass the path of a trace JSON file (see traces/)"
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ConfigError(
            "trace",
            f"{path}:{error.lineno}:{error.colno}",
            f"is not valid JSON ({error.msg})",
            "fix the JSON syntax",
        ) from None
    return trace_from_dict(data, source=path.name)
