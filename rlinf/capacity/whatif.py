"""What-if knobs on a trace (``--set trace.KEY=VALUE``): each ``--set`` becomes one extra series of the sweep.

The registry :data:`KNOBS` is explicit: an unknown key raises and lists the valid ones. A trace synthesized by
:func:`rlinf.analytic.synthesis.synthesize` is re-synthesized from the workload its provenance records, with the knob
applied, so every derived quantity (KV pool, concurrency, memory, weight-sync bytes) follows. A profiled trace
only takes the knobs that are exact on its samples (``batch_scale``: the cost model reads costs per sample per
replica); the others need the analytic model and say so.

Several knobs in one series are separated by commas: ``--set trace.response_length_scale=1.5,trace.batch_scale=2``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from rlinf.analytic.llm_workload import LLMWorkload, ResponseLengths
from rlinf.analytic.synthesis import synthesize
from rlinf.core.cluster import DEVICE_PRESETS, Cluster
from rlinf.core.config_structure import structure_config
from rlinf.core.errors import ConfigError, require
from rlinf.core.trace import Trace

PREFIX = "trace."
ANALYTIC_GENERATOR = "rlinf.analytic.synthesis.synthesize"
MAX_SCALE = 1e6
"""A what-if scale beyond this is a typo, not a question (and would overflow the cost model)."""
MAX_WHOLE = 1_000_000


def _scale(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"--set {PREFIX}{key}", text, "is not a number", f"write e.g. {key}=1.5") from None
    require(
        math.isfinite(value) and 0 < value <= MAX_SCALE,
        f"--set {PREFIX}{key}",
        text,
        f"must be > 0 and <= {MAX_SCALE:g}",
        f"write e.g. {key}=1.5",
    )
    return value


def _whole(key: str, text: str) -> int:
    try:
        value = int(text) if len(text.strip()) <= len(str(MAX_WHOLE)) else MAX_WHOLE + 1
    except ValueError:
        raise ConfigError(
            f"--set {PREFIX}{key}", text, "is not a whole number", f"write e.g. {key}=16"
        ) from None
    require(
        1 <= value <= MAX_WHOLE,
        f"--set {PREFIX}{key}",
        text,
        f"must be in 1-{MAX_WHOLE:,}",
        f"write e.g. {key}=16",
    )
    return value


def _device(key: str, text: str) -> str:
    name = text.strip().upper()
    require(
        name in DEVICE_PRESETS,
        f"--set {PREFIX}{key}",
        text,
        "unknown device type",
        f"use one of {sorted(DEVICE_PRESETS)}",
    )
    return name


def _scaled_lengths(workload: LLMWorkload, cluster: Cluster, value: Any) -> tuple[LLMWorkload, Cluster]:
    response = workload.response
    scaled = ResponseLengths(
        median_tokens=response.median_tokens * value,
        sigma=response.sigma,
        max_tokens=max(1, int(round(response.max_tokens * value))),
    )
    return attrs.evolve(workload, response=scaled), cluster


def _median_tokens(workload: LLMWorkload, cluster: Cluster, value: Any) -> tuple[LLMWorkload, Cluster]:
    response = workload.response
    require(
        value <= response.max_tokens,
        f"--set {PREFIX}response_median_tokens",
        value,
        f"exceeds the generation limit ({response.max_tokens} tokens)",
        "give a median at most the limit (or scale both with response_length_scale)",
    )
    return attrs.evolve(workload, response=attrs.evolve(response, median_tokens=float(value))), cluster


def _scaled_batch(workload: LLMWorkload, cluster: Cluster, value: Any) -> tuple[LLMWorkload, Cluster]:
    prompts = workload.num_prompts * value
    require(
        abs(prompts - round(prompts)) < 1e-9 and round(prompts) >= 1,
        f"--set {PREFIX}batch_scale",
        value,
        f"gives {prompts:g} prompts (from {workload.num_prompts}), not a whole number",
        "pick a scale that keeps the prompt count whole",
    )
    return attrs.evolve(workload, num_prompts=int(round(prompts))), cluster


def _group_size(workload: LLMWorkload, cluster: Cluster, value: Any) -> tuple[LLMWorkload, Cluster]:
    return attrs.evolve(workload, group_size=value), cluster


def _other_device(workload: LLMWorkload, cluster: Cluster, value: Any) -> tuple[LLMWorkload, Cluster]:
    device, links = DEVICE_PRESETS[value]
    return workload, attrs.evolve(cluster, device=device, links=links)


def _profiled_batch(trace: Trace, value: Any) -> Trace:
    workflow = trace.workflow
    batch = workflow.batch_size * value
    require(
        abs(batch - round(batch)) < 1e-9 and round(batch) % workflow.group_size == 0 and round(batch) >= 1,
        f"--set {PREFIX}batch_scale",
        value,
        f"gives a batch of {batch:g} samples, not a whole number of groups of {workflow.group_size}",
        "pick a scale that keeps whole groups",
    )
    return attrs.evolve(trace, workflow=attrs.evolve(workflow, batch_size=int(round(batch))))


@attrs.frozen(kw_only=True)
class Knob:
    """One what-if setting: how to read its value and how it changes a synthesized (or profiled) trace."""

    key: str
    help: str
    parse: Callable[[str, str], Any]
    on_workload: Callable[[LLMWorkload, Cluster, Any], tuple[LLMWorkload, Cluster]]
    on_profiled: Callable[[Trace, Any], Trace] | None = None
    """The exact transformation of a profiled trace's samples, where one exists."""


KNOBS: dict[str, Knob] = {
    knob.key: knob
    for knob in (
        Knob(
            key="response_length_scale",
            help="multiply response lengths (median and the generation limit) by this factor",
            parse=_scale,
            on_workload=_scaled_lengths,
        ),
        Knob(
            key="response_median_tokens",
            help="the median response length in tokens (the generation limit kept): a response-length drift",
            parse=_scale,
            on_workload=_median_tokens,
        ),
        Knob(
            key="batch_scale",
            help="multiply the prompts per iteration by this factor (group size kept)",
            parse=_scale,
            on_workload=_scaled_batch,
            on_profiled=_profiled_batch,
        ),
        Knob(
            key="group_size",
            help="responses per prompt (prompts per iteration kept)",
            parse=_whole,
            on_workload=_group_size,
        ),
        Knob(
            key="device",
            help=f"another device type, one of {sorted(DEVICE_PRESETS)} (with its preset links)",
            parse=_device,
            on_workload=_other_device,
        ),
    )
}


@attrs.frozen(kw_only=True)
class WhatIf:
    """One what-if series: knob settings applied together, labelled by the text the user wrote."""

    label: str
    settings: tuple[tuple[str, Any], ...]
    """(knob key, parsed value), in the order written."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"label": self.label, "settings": dict(self.settings)}


def parse_whatif(text: str) -> WhatIf:
    """``trace.response_length_scale=1.5`` or several such settings joined by commas."""
    settings: list[tuple[str, Any]] = []
    for item in [part.strip() for part in str(text).split(",") if part.strip()]:
        key, equals, value = item.partition("=")
        key = key.strip().removeprefix(PREFIX)
        require(
            bool(equals) and bool(value.strip()),
            "--set",
            item,
            "is not KEY=VALUE",
            f"write e.g. {PREFIX}response_length_scale=1.5",
        )
        require(
            key in KNOBS,
            "--set",
            item,
            f"unknown knob {key!r}",
            f"use one of {[PREFIX + k for k in KNOBS]}",
        )
        require(
            key not in dict(settings),
            "--set",
            text,
            f"sets {key} twice",
            "set each knob once per series (use another --set for another series)",
        )
        settings.append((key, KNOBS[key].parse(key, value.strip())))
    require(bool(settings), "--set", text, "is empty", f"write e.g. {PREFIX}response_length_scale=1.5")
    label = ", ".join(f"{key}={_show(value)}" for key, value in settings)
    return WhatIf(label=label, settings=tuple(settings))


def _show(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def is_synthesized(trace: Trace) -> bool:
    """Whether the trace came from the analytic model and records its workload."""
    generator = str(trace.provenance.get("generator", ""))
    return generator.startswith(ANALYTIC_GENERATOR) and isinstance(trace.provenance.get("workload"), Mapping)


def workload_of(trace: Trace) -> LLMWorkload:
    """The :class:`LLMWorkload` a synthesized trace's provenance records."""
    return structure_config(LLMWorkload, trace.provenance["workload"], "trace", "trace.provenance.workload.")


def apply_whatif(trace: Trace, whatif: WhatIf) -> Trace:
    """The trace with the series' knobs applied; provenance records the base trace and the settings."""
    if is_synthesized(trace):
        workload, cluster = workload_of(trace), trace.cluster
        for key, value in whatif.settings:
            workload, cluster = KNOBS[key].on_workload(workload, cluster, value)
        provenance = trace.provenance
        result = synthesize(
            workload,
            cluster,
            seed=_recorded_int(provenance, ("seed",), 0, 0, 2**32 - 1),
            date=str(provenance.get("date", "unspecified")),
            max_devices=_recorded_int(provenance, ("sampling", "max_devices"), 2048, 1024, 1 << 20),
        )
    else:
        result = trace
        for key, value in whatif.settings:
            knob = KNOBS[key]
            if knob.on_profiled is None:
                raise ConfigError(
                    "--set",
                    f"{PREFIX}{key}",
                    f"needs a trace synthesized by {ANALYTIC_GENERATOR} (this one is "
                    f"{trace.provenance.get('kind')!r}); its samples cannot be changed exactly",
                    f"use a synthesized trace (rlinf trace synth) or one of the exact knobs "
                    f"{[PREFIX + k for k, v in KNOBS.items() if v.on_profiled]}",
                )
            result = knob.on_profiled(result, value)
    provenance = dict(result.provenance)
    provenance["whatif"] = {"settings": dict(whatif.settings), "base_provenance": _brief(trace.provenance)}
    return attrs.evolve(result, provenance=provenance)


def _recorded_int(
    provenance: Mapping[str, Any], path: tuple[str, ...], default: int, low: int, high: int
) -> int:
    """The whole number a synthesized trace's provenance records at ``path`` (``default`` when absent)."""
    value: Any = provenance
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    if value is None:
        return default
    require(
        isinstance(value, int) and not isinstance(value, bool) and low <= value <= high,
        "trace.provenance." + ".".join(path),
        value,
        f"must be an integer in {low}-{high}",
        "re-synthesize the trace with rlinf trace synth",
    )
    return value


def _brief(provenance: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("kind", "generator", "command", "cluster", "date", "seed")
    return {key: provenance[key] for key in keys if key in provenance}
