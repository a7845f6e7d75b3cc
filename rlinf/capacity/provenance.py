"""The report's first section: the trace's provenance and assumptions, and the report's own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlinf.capacity.document import Bullets, Section, Table
from rlinf.capacity.result import CapacityResult

CAPACITY_ASSUMPTIONS = (
    "each cluster size is the trace's kind of cluster with that many devices (whole nodes above one node)",
    "one iteration is simulated with expected response lengths (deterministic); costs come from the trace's "
    "samples through rlinf.core.costs.fit, as in `rlinf simulate`",
    "cost counts every device of the cluster for the whole iteration, idle or not",
    "the breakdown is the iteration's critical path: seconds per component add up to the iteration time",
)


def provenance_section(result: CapacityResult) -> Section:
    """Where the trace's numbers come from, what it assumes and what this report assumes."""
    provenance = result.provenance
    rows = [("kind", str(provenance.get("kind", "?")))]
    for key in ("generator", "command", "date", "seed", "cluster"):
        if key in provenance:
            rows.append((key, str(provenance[key])))
    workload = provenance.get("workload")
    if isinstance(workload, Mapping):
        rows += _workload_rows(workload)
    lengths = provenance.get("response_lengths")
    if isinstance(lengths, Mapping) and "mean" in lengths:
        rows.append(
            (
                "response lengths",
                f"{lengths.get('distribution', '')}; mean {lengths['mean']:.0f}, p50 {lengths.get('p50', 0):.0f}, "
                f"p90 {lengths.get('p90', 0):.0f}, p99 {lengths.get('p99', 0):.0f} tokens",
            )
        )
    for key, value in provenance.items():
        if key not in {
            "kind",
            "generator",
            "command",
            "date",
            "seed",
            "cluster",
            "workload",
            "response_lengths",
            "assumptions",
            "formulas",
            "derived",
            "sampling",
            "device",
            "links",
            "batch",
            "whatif",
        }:
            rows.append((key, _short(value)))
    price = result.options.price_per_device_hour
    rows.append(
        ("price", f"{price:g} per device-hour" if price is not None else "not given (device-hours only)")
    )
    rows.append(
        (
            "planner budget",
            f"CP-SAT limit {result.options.search_time_s:g} s per size (best), seed {result.options.seed}",
        )
    )
    recorded = provenance.get("assumptions")
    assumptions = [str(a) for a in recorded] if isinstance(recorded, list) else []
    blocks: list[Any] = [Table(id="table-provenance", header=("", "value"), rows=rows, numeric_from=99)]
    blocks.append(
        Bullets(
            id="trace-assumptions", title="Assumptions of the trace", items=assumptions or ["none recorded"]
        )
    )
    blocks.append(
        Bullets(id="report-assumptions", title="Assumptions of this report", items=CAPACITY_ASSUMPTIONS)
    )
    return Section(id="provenance", title="Trace provenance and assumptions", blocks=blocks)


def _workload_rows(workload: Mapping[str, Any]) -> list[tuple[str, str]]:
    model = workload.get("model", {})
    rows = []
    if isinstance(model, Mapping) and "num_params" in model:
        rows.append(("model", f"{model.get('name', '?')} ({model['num_params'] / 1e9:.2f} B parameters)"))
    if "num_prompts" in workload:
        rows.append(
            (
                "batch",
                f"{workload['num_prompts']} prompts x {workload.get('group_size', 1)} responses, "
                f"{workload.get('prompt_tokens', '?')} prompt tokens, {workload.get('algorithm', '?')}",
            )
        )
    parallel = [
        f"{k.removesuffix('_model_parallel')} {workload[k]}"
        for k in workload
        if k.endswith("_model_parallel")
    ]
    if parallel:
        rows.append(("model parallel", ", ".join(parallel)))
    efficiency = [f"{k} {workload[k]:g}" for k in ("prefill_mfu", "train_mfu", "decode_mbu") if k in workload]
    if efficiency:
        rows.append(("efficiencies", ", ".join(efficiency)))
    return rows


def _short(value: Any, limit: int = 160) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
