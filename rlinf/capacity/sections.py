"""The report's sections, built from a :class:`CapacityResult`: the answer to the target, throughput and scaling,
the breakdown with its bottleneck, cost, the chosen plans, what-if series, the Gantt chart and notes."""

from __future__ import annotations

from rlinf.capacity.document import Document, Section, Table, number, plot
from rlinf.capacity.provenance import provenance_section
from rlinf.capacity.result import BASELINE, CapacityResult, CapacityRow
from rlinf.core.cluster import GIB


def build_document(result: CapacityResult, *, has_gantt: bool) -> Document:
    """Every section of the report, provenance first."""
    counts = result.options.device_counts
    subtitle = (
        f"{result.workflow_name} on {result.device_name}, {len(counts)} cluster sizes from {counts[0]} to "
        f"{counts[-1]} devices; strategies: {', '.join(result.strategies)}"
        + (f"; what-if series: {', '.join(result.series[1:])}" if len(result.series) > 1 else "")
    )
    sections = [
        provenance_section(result),
        _answer(result),
        _throughput(result),
        _breakdown(result),
        _cost(result),
        _plans(result),
    ]
    if len(result.series) > 1:
        sections.append(_whatif(result))
    if has_gantt:
        sections.append(_gantt(result))
    problems = _problems(result)
    if problems is not None:
        sections.append(problems)
    return Document(title=f"Capacity plan: {result.trace_name}", subtitle=subtitle, sections=sections)


def _answer(result: CapacityResult) -> Section:
    target = result.options.target
    headline = result.headline_strategy
    focus = result.focus_row()
    if target is None:
        text = "No target was given (use --target-throughput or --deadline-s)."
        if focus is not None:
            text += (
                f" The most cost-efficient size for the {headline} plan is {_row_sentence(result, focus)}."
            )
        return Section(id="target", title="Answer", blocks=[text], css_class="target-none")
    wanted = target.describe(result.unit)
    met = result.target_row()
    if met is not None:
        text = f"Target {wanted}: met. The smallest cluster that meets it is {_row_sentence(result, met)}."
        return Section(id="target", title="Answer", blocks=[text], css_class="target-met")
    rows = [r for r in result.rows_of(BASELINE, headline) if r.has_plan]
    closest = max(rows, key=lambda r: (r.units_per_s, -r.num_devices), default=None)
    text = f"Target {wanted}: NOT MET by any swept size (up to {result.options.device_counts[-1]} devices)."
    if closest is not None:
        text += f" The closest is {_row_sentence(result, closest)}."
    text += " Sweep larger clusters, relax the target, or change the workload (see the what-if knobs)."
    return Section(id="target", title="Answer", blocks=[text], css_class="target-unmet")


def _row_sentence(result: CapacityResult, row: CapacityRow) -> str:
    return (
        f"{row.num_devices} devices ({row.mode}, iteration {number(row.iteration_s)} s, "
        f"{number(row.units_per_s)} {result.unit}/s, bottleneck {row.bottleneck})"
    )


def _throughput(result: CapacityResult) -> Section:
    header = ["devices"]
    for strategy in result.strategies:
        header += [f"{strategy} iteration (s)", f"{strategy} {result.unit}/s"]
    header += [f"{result.headline_strategy} tokens/s", f"{result.headline_strategy} scaling efficiency"]
    rows = []
    for n in result.options.device_counts:
        cells = [str(n)]
        for strategy in result.strategies:
            row = result.row(BASELINE, strategy, n)
            cells += [number(row.iteration_s), number(row.units_per_s) if row.has_plan else "no plan"]
        head = result.row(BASELINE, result.headline_strategy, n)
        cells += [number(head.tokens_per_s), number(result.scaling_efficiency(head), 3)]
        rows.append(cells)
    return Section(
        id="throughput",
        title="Throughput and scaling",
        blocks=[
            plot(
                "throughput",
                "throughput vs devices",
                f"{result.unit}/s per strategy (log-log); dotted: linear scaling from the smallest size.",
            ),
            Table(id="table-throughput", header=header, rows=rows),
            plot(
                "efficiency",
                "scaling efficiency vs devices",
                "Throughput per device relative to each line's smallest size with a plan.",
            ),
        ],
    )


def _breakdown(result: CapacityResult) -> Section:
    headline = result.headline_strategy
    rows_of = [r for r in result.rows_of(BASELINE, headline) if r.has_plan]
    keys: list[str] = []
    for row in rows_of:
        keys += [k for k, _ in row.breakdown_s if k not in keys]
    header = ["devices", "iteration (s)", "bottleneck", *[f"{k} (s)" for k in keys]]
    rows = [
        [
            str(r.num_devices),
            number(r.iteration_s),
            r.bottleneck,
            *[number(dict(r.breakdown_s).get(k, 0.0)) for k in keys],
        ]
        for r in rows_of
    ]
    return Section(
        id="breakdown",
        title="Where the iteration time goes",
        blocks=[
            plot(
                "breakdown",
                "iteration-time breakdown by component",
                f"Critical path of the {headline} plan at each size; the label names the bottleneck.",
            ),
            Table(id="table-breakdown", header=header, rows=rows, text_columns=(2,)),
        ],
    )


def _cost(result: CapacityResult) -> Section:
    price = result.options.price_per_device_hour
    headline = result.headline_strategy
    others = [s for s in result.strategies if s != headline]
    header = [
        "devices",
        f"{headline} device-hours / iteration",
        f"{headline} device-hours / 1k samples",
        f"{headline} device-hours / 1M tokens",
    ]
    if price is not None:
        header += [f"{headline} cost / 1k samples", f"{headline} cost / 1M tokens"]
    what = "cost" if price is not None else "device-hours"
    header += [f"{s} {what} / 1k samples" for s in others]
    scale = price if price is not None else 1.0
    rows = []
    for n in result.options.device_counts:
        row = result.row(BASELINE, headline, n)
        cells = [
            str(n),
            number(row.device_hours_per_iteration),
            number(row.device_hours_per_1k_samples),
            number(row.device_hours_per_1m_tokens),
        ]
        if price is not None:
            cells += [
                number(row.device_hours_per_1k_samples * price),
                number(row.device_hours_per_1m_tokens * price),
            ]
        cells += [number(result.row(BASELINE, s, n).device_hours_per_1k_samples * scale) for s in others]
        rows.append(cells)
    caption = "Every device of the cluster is paid for the whole iteration" + (
        f", at {price:g} per device-hour." if price is not None else " (no price given: device-hours)."
    )
    return Section(
        id="cost",
        title="Cost",
        blocks=[
            plot(
                "cost",
                "cost per 1,000 samples and per million tokens",
                caption,
            ),
            Table(id="table-cost", header=header, rows=rows),
        ],
    )


def _plans(result: CapacityResult) -> Section:
    header = ["devices", "strategy", "proposed by", "mode", "devices used", "peak memory (GiB)", "plan"]
    rows = []
    for n in result.options.device_counts:
        for strategy in result.strategies:
            row = result.row(BASELINE, strategy, n)
            if row.plan is None:
                rows.append([str(n), strategy, "–", "–", "–", "–", f"no plan: {row.problem}"])
                continue
            rows.append(
                [
                    str(n),
                    strategy,
                    row.source,
                    row.mode,
                    str(row.num_devices_used),
                    number(row.peak_memory_bytes / GIB, 3),
                    row.plan.describe(),
                ]
            )
    return Section(
        id="plans",
        title="Chosen plan for each size",
        blocks=[Table(id="table-plans", header=header, rows=rows, numeric_from=99)],
    )


def _whatif(result: CapacityResult) -> Section:
    headline = result.headline_strategy
    header = ["devices", f"{BASELINE} {result.unit}/s"]
    for series in result.series[1:]:
        header += [
            f"{series} ({result.series_devices.get(series, '?')}) {result.unit}/s",
            f"{series} bottleneck",
        ]
    rows = []
    for n in result.options.device_counts:
        base = result.row(BASELINE, headline, n)
        cells = [str(n), number(base.units_per_s) if base.has_plan else "no plan"]
        for series in result.series[1:]:
            row = result.row(series, headline, n)
            if not row.has_plan:
                cells += ["no plan", "–"]
                continue
            ratio = (
                f" (x{row.units_per_s / base.units_per_s:.2f})"
                if base.has_plan and base.units_per_s > 0
                else ""
            )
            cells += [number(row.units_per_s) + ratio, row.bottleneck]
        rows.append(cells)
    text = (
        f"Each what-if series re-plans every size with the {headline} strategy on the modified trace; the charts "
        "above draw them dashed or dotted against the baseline."
    )
    bottlenecks = tuple(range(3, len(header), 2))
    return Section(
        id="whatif",
        title="What-if series",
        blocks=[text, Table(id="table-whatif", header=header, rows=rows, text_columns=bottlenecks)],
    )


def _gantt(result: CapacityResult) -> Section:
    focus = result.focus_row()
    assert focus is not None
    why = (
        "the smallest size meeting the target"
        if result.target_row() is not None
        else (
            "the most cost-efficient size"
            if result.options.target is None
            else "the most cost-efficient size (no size meets the target)"
        )
    )
    return Section(
        id="gantt",
        title=f"Timeline of the {result.headline_strategy} plan on {focus.num_devices} devices",
        blocks=[
            f"{focus.num_devices} devices is {why}. Plan: {focus.plan.describe() if focus.plan else ''}.",
            plot(
                "gantt",
                "Gantt chart of the chosen plan",
                "Rows are groups of devices running the same ops; thin rows are links.",
            ),
        ],
    )


def _problems(result: CapacityResult) -> Section | None:
    lines = []
    for row in result.rows:
        if not row.has_plan:
            lines.append(
                f"{row.series} / {row.strategy} / {row.num_devices} devices: no plan ({row.problem})"
            )
        for warning in row.warnings:
            lines.append(f"{row.series} / {row.strategy} / {row.num_devices} devices: {warning}")
    if not lines:
        return None
    return Section(id="notes", title="Notes", blocks=lines)
