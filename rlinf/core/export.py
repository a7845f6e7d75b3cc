"""Timeline exports: Chrome trace-event JSON (opens in Perfetto / chrome://tracing) and Gantt charts (PNG).

Both views group devices whose span sequences are identical (every device of a data-parallel component runs the
same ops), so a 1024-device timeline shows a handful of rows. Transfers occupy no device; they are drawn on link
rows named ``src->dst``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from rlinf.core.files import write_atomic, write_text_atomic
from rlinf.core.plan import format_devices
from rlinf.core.timeline import Span, Timeline

MICROSECONDS_PER_S = 1e6


@attrs.frozen(kw_only=True)
class DeviceGroup:
    """Devices that ran exactly the same spans (or none)."""

    devices: tuple[int, ...]
    span_indices: tuple[int, ...]
    """Positions in ``Timeline.spans``, in start order."""

    @property
    def label(self) -> str:
        """Row text, e.g. ``dev 0-511``."""
        return f"dev {format_devices(self.devices)}"


def device_groups(timeline: Timeline) -> list[DeviceGroup]:
    """Devices merged by identical span sequences (the program's lanes, plus one group of idle devices),
    ordered by their first device."""
    start_order = {i: (timeline.spans[i].start_s, i) for i in range(len(timeline.spans))}
    by_sequence: dict[tuple[int, ...], list[int]] = {}
    for lane in timeline.program.lanes:
        sequence = tuple(sorted(lane.ops, key=start_order.__getitem__))
        by_sequence.setdefault(sequence, []).extend(lane.devices)
    busy = {d for devices in by_sequence.values() for d in devices}
    idle = [d for d in range(timeline.num_devices) if d not in busy]
    if idle:
        by_sequence.setdefault((), []).extend(idle)
    groups = [
        DeviceGroup(devices=tuple(sorted(devices)), span_indices=seq) for seq, devices in by_sequence.items()
    ]
    return sorted(groups, key=lambda g: g.devices[0])


def link_lanes(timeline: Timeline) -> dict[str, list[list[int]]]:
    """Transfers (spans on no device) per link ``src->dst`` in order of first use, split into lanes of
    non-overlapping spans."""
    lanes: dict[str, list[list[int]]] = {}
    order = sorted(range(len(timeline.spans)), key=lambda i: (timeline.spans[i].start_s, i))
    for position in order:
        span = timeline.spans[position]
        if span.devices:
            continue
        rows = lanes.setdefault(link_name(span), [])
        free = next((row for row in rows if timeline.spans[row[-1]].end_s <= span.start_s), None)
        if free is None:
            rows.append([position])
        else:
            free.append(position)
    return lanes


def link_name(span: Span) -> str:
    """``src->dst`` of a transfer span."""
    return f"{span.component}->{span.peer}" if span.peer else span.component


def _components_of(timeline: Timeline, group: DeviceGroup) -> list[str]:
    names: list[str] = []
    for position in group.span_indices:
        span = timeline.spans[position]
        if span.kind == "compute" and span.component not in names:
            names.append(span.component)
    return names


# ---------------------------------------------------------------------------------------------- Chrome trace
def chrome_trace(
    timeline: Timeline, tails: Mapping[int, tuple[float, float]] | None = None
) -> dict[str, Any]:
    """The timeline as Chrome trace-event JSON: one process per device group, one thread per device, and a
    ``links`` process whose threads are the transfer links. Times are microseconds from the first span.
    ``tails`` (op index -> start, end) adds a ``straggler`` slice inside those ops' spans (the generation's tail at
    a small batch, :mod:`rlinf.analytic.straggler`)."""
    origin = min((s.start_s for s in timeline.spans), default=0.0)
    events: list[dict[str, Any]] = []
    metadata: list[dict[str, Any]] = []
    groups = device_groups(timeline)
    for pid, group in enumerate(groups, start=1):
        components = _components_of(timeline, group)
        name = group.label + (f" ({', '.join(components)})" if components else " (idle)")
        metadata += _process_metadata(pid, name)
        for device in group.devices:
            metadata += _thread_metadata(pid, device, f"dev {device}", device)
            events += [_complete_event(timeline.spans[i], origin, pid, device) for i in group.span_indices]
            events += [
                _tail_event(timeline.spans[i], tails[i], origin, pid, device)
                for i in group.span_indices
                if tails and i in tails
            ]
    links_pid = len(groups) + 1
    lanes = link_lanes(timeline)
    if lanes:
        metadata += _process_metadata(links_pid, "links")
    tid = 0
    for name, rows in lanes.items():
        for lane, row in enumerate(rows):
            metadata += _thread_metadata(links_pid, tid, name if lane == 0 else f"{name} ({lane + 1})", tid)
            events += [_complete_event(timeline.spans[i], origin, links_pid, tid) for i in row]
            tid += 1
    events.sort(key=lambda e: (e["ts"], e["pid"], e["tid"]))
    return {
        "traceEvents": metadata + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "mode": timeline.mode,
            "plan": timeline.plan_summary,
            "source": timeline.source,
            "iteration_s": timeline.iteration_s,
        },
    }


def _complete_event(span: Span, origin_s: float, pid: int, tid: int) -> dict[str, Any]:
    args: dict[str, Any] = {
        "component": span.component,
        "kind": span.kind,
        "micro_batch": span.micro_batch,
        "step": span.step,
        "op_index": span.op_index,
    }
    if span.peer:
        args["peer"] = span.peer
    if span.devices:
        args["devices"] = format_devices(span.devices)
    return {
        "name": span.label,
        "cat": span.kind,
        "ph": "X",
        "ts": (span.start_s - origin_s) * MICROSECONDS_PER_S,
        "dur": span.seconds * MICROSECONDS_PER_S,
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _tail_event(
    span: Span, interval: tuple[float, float], origin_s: float, pid: int, tid: int
) -> dict[str, Any]:
    start, end = interval
    return {
        "name": f"{span.label} tail (small batch)",
        "cat": "straggler",
        "ph": "X",
        "ts": (start - origin_s) * MICROSECONDS_PER_S,
        "dur": (end - start) * MICROSECONDS_PER_S,
        "pid": pid,
        "tid": tid,
        "args": {"component": span.component, "op_index": span.op_index},
    }


def _process_metadata(pid: int, name: str) -> list[dict[str, Any]]:
    return [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
    ]


def _thread_metadata(pid: int, tid: int, name: str, sort_index: int) -> list[dict[str, Any]]:
    return [
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}},
        {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": sort_index}},
    ]


def write_chrome_trace(
    timeline: Timeline, path: str | Path, tails: Mapping[int, tuple[float, float]] | None = None
) -> None:
    """Write :func:`chrome_trace` to ``path`` atomically."""
    write_text_atomic(Path(path), json.dumps(chrome_trace(timeline, tails), separators=(",", ":")) + "\n")


# ---------------------------------------------------------------------------------------------- Gantt charts
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
ROW_HEIGHT_IN = 0.45
LINK_ROW_HEIGHT_IN = 0.22
SYNC_COLOR = "#303030"
SYNC_EDGE_COLOR = "#a0a0a0"
MIN_VISIBLE_FRACTION = 0.002
"""Spans shorter than this share of the iteration are drawn this wide so that they stay visible."""
HATCHES = {"onload": "////", "offload": "\\\\\\\\", "sync_weights": "xxx"}
TAIL_HATCH, TAIL_COLOR = "....", "#202020"
"""How the straggler tail of a generate span is drawn: dotted over the span, under a dark edge."""


def write_gantt_png(
    timeline: Timeline,
    path: str | Path,
    *,
    title: str | None = None,
    tails: Mapping[int, tuple[float, float]] | None = None,
) -> None:
    """Draw the timeline as a Gantt chart (rows = device groups, thin rows = links) and save it atomically.
    ``tails`` (op index -> start, end) marks the straggler tail of those generate spans (dotted)."""
    colors = component_colors([timeline])
    figure = _new_figure(width_in=12.0, height_in=1.6 + _height_in(timeline))
    axes = figure.add_subplot(1, 1, 1)
    _draw(axes, timeline, colors, title or _default_title(timeline), tails or {})
    _add_legend(figure, axes, colors, [timeline], with_tail=bool(tails))
    _save_png_atomic(figure, Path(path))


def write_timeline_pair_png(predicted: Timeline, measured: Timeline, path: str | Path) -> None:
    """Two timelines one above the other on one time axis (e.g. a simulated and a measured run)."""
    timelines = [predicted, measured]
    colors = component_colors(timelines)
    heights = [_height_in(t) for t in timelines]
    figure = _new_figure(width_in=12.0, height_in=2.0 + sum(heights))
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=heights)
    figure.get_layout_engine().set(hspace=0.06)
    for axes, timeline, name in ((top, predicted, "predicted"), (bottom, measured, "measured")):
        _draw(axes, timeline, colors, f"{name} ({timeline.source}): {_default_title(timeline)}")
    top.set_xlabel("")
    horizon = max(t.iteration_s for t in timelines) or 1.0
    top.set_xlim(0.0, horizon * 1.02)
    _add_legend(figure, top, colors, timelines)
    _save_png_atomic(figure, Path(path))


def component_colors(timelines: Sequence[Timeline]) -> dict[str, str]:
    """One colour per component, in order of first appearance."""
    names: list[str] = []
    for timeline in timelines:
        for span in sorted(timeline.spans, key=lambda s: (s.start_s, s.op_index)):
            if span.component not in names:
                names.append(span.component)
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def _default_title(timeline: Timeline) -> str:
    lag = (
        f", staleness {timeline.program.max_staleness} (steady state)"
        if timeline.program.max_staleness
        else ""
    )
    return f"{timeline.mode or 'timeline'}{lag}: iteration {timeline.iteration_s:.3g} s"


def _height_in(timeline: Timeline) -> float:
    num_links = len(link_lanes(timeline))
    return max(1.0, len(device_groups(timeline)) * ROW_HEIGHT_IN + num_links * LINK_ROW_HEIGHT_IN)


def _draw(
    axes: Any,
    timeline: Timeline,
    colors: dict[str, str],
    title: str,
    tails: Mapping[int, tuple[float, float]] | None = None,
) -> None:
    """Device-group rows from the top, then thin link rows; y grows downwards."""
    origin = min((s.start_s for s in timeline.spans), default=0.0)
    horizon = timeline.iteration_s or 1.0
    ticks: list[float] = []
    labels: list[str] = []
    y = 0.0
    for group in device_groups(timeline):
        components = _components_of(timeline, group)
        ticks.append(y + 0.5)
        labels.append(group.label + (f"\n{', '.join(components)}" if components else "\n(idle)"))
        for position in group.span_indices:
            _draw_span(axes, timeline.spans[position], origin, y + 0.1, 0.8, colors, horizon)
            if tails and position in tails:
                start, end = tails[position]
                axes.broken_barh(
                    [(start - origin, end - start)],
                    (y + 0.1, 0.8),
                    facecolor="none",
                    edgecolor=TAIL_COLOR,
                    hatch=TAIL_HATCH,
                    linewidth=0.8,
                )
        y += 1.0
    for name, rows in link_lanes(timeline).items():
        ticks.append(y + 0.25)
        labels.append(name)
        for row in rows:
            for position in row:
                _draw_span(axes, timeline.spans[position], origin, y + 0.05, 0.4, colors, horizon)
        y += 0.5
    axes.set_ylim(y, 0.0)
    axes.set_yticks(ticks)
    axes.set_yticklabels(labels, fontsize=8)
    axes.set_xlim(0.0, horizon * 1.02)
    axes.set_xlabel("time (s)")
    axes.set_title(title, fontsize=10, loc="left")
    axes.grid(axis="x", linestyle=":", linewidth=0.6, alpha=0.7)
    axes.set_axisbelow(True)


def _draw_span(
    axes: Any, span: Span, origin_s: float, y: float, height: float, colors: dict, horizon_s: float
) -> None:
    start, width = span.start_s - origin_s, span.seconds
    style: dict[str, Any] = {"edgecolor": "black", "linewidth": 0.4}
    if span.kind == "sync_weights":
        style.update(facecolor=SYNC_COLOR, hatch=HATCHES["sync_weights"], edgecolor=SYNC_EDGE_COLOR)
    elif span.kind in ("onload", "offload"):
        style.update(facecolor=colors[span.component], alpha=0.55, hatch=HATCHES[span.kind])
    elif span.kind == "transfer":
        style.update(facecolor=colors[span.component], alpha=0.8, linewidth=0.2)
    else:
        style.update(facecolor=colors[span.component])
    axes.broken_barh([(start, max(width, horizon_s * MIN_VISIBLE_FRACTION))], (y, height), **style)
    if span.kind == "compute" and width > horizon_s * 0.06 and height > 0.5:
        text = span.label.removeprefix(f"{span.component}.")
        axes.text(start + width / 2, y + height / 2, text, ha="center", va="center", fontsize=6, clip_on=True)


def _add_legend(
    figure: Any, axes: Any, colors: dict[str, str], timelines: Sequence[Timeline], *, with_tail: bool = False
) -> None:
    from matplotlib.patches import Patch

    kinds = {s.kind for t in timelines for s in t.spans}
    handles = [Patch(facecolor=color, edgecolor="black", label=name) for name, color in colors.items()]
    if "onload" in kinds:
        handles.append(
            Patch(facecolor="white", edgecolor="black", hatch=HATCHES["onload"], label="onload (hatched)")
        )
    if "offload" in kinds:
        handles.append(
            Patch(facecolor="white", edgecolor="black", hatch=HATCHES["offload"], label="offload (hatched)")
        )
    if "sync_weights" in kinds:
        handles.append(
            Patch(
                facecolor=SYNC_COLOR,
                edgecolor=SYNC_EDGE_COLOR,
                hatch=HATCHES["sync_weights"],
                label="sync_weights",
            )
        )
    if with_tail:
        handles.append(
            Patch(
                facecolor="white",
                edgecolor=TAIL_COLOR,
                hatch=TAIL_HATCH,
                label="generation tail (small batch)",
            )
        )
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def _new_figure(*, width_in: float, height_in: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width_in, min(height_in, 60.0)), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save_png_atomic(figure: Any, path: Path) -> None:
    write_atomic(path, lambda stream: figure.savefig(stream, format="png", dpi=110))
