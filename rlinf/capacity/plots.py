"""The report's charts as PNG bytes (matplotlib, Agg canvas, no pyplot state).

Strategies keep one colour across every chart; what-if series are drawn dashed or dotted against the solid
baseline. Breakdown colours match the Gantt chart's (:func:`rlinf.core.export.component_colors`).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping
from typing import Any

from rlinf.capacity.result import BASELINE, CapacityResult, CapacityRow
from rlinf.capacity.sweep import WAITING
from rlinf.core.export import PALETTE, SYNC_COLOR

STRATEGY_COLORS = {
    "best": "#1f3a93",
    "collocated": "#e67e22",
    "disaggregated": "#27ae60",
    "closed-form": "#8e44ad",
}
SERIES_STYLES = ("-", "--", ":", "-.")
SERIES_MARKERS = ("o", "s", "^", "D", "v", "P")
MOVEMENT_COLORS = {
    "onload": "#b0b0b0",
    "offload": "#8a8a8a",
    "transfer": "#d5c4a1",
    "sync_weights": SYNC_COLOR,
    WAITING: "#eeeeee",
    "other (< 1% each)": "#cfd4dc",
}
OTHER = "other (< 1% each)"
DPI = 110


def strategy_color(strategy: str, index: int) -> str:
    """A fixed colour per known strategy, palette colours for others."""
    return STRATEGY_COLORS.get(strategy, PALETTE[index % len(PALETTE)])


def _figure(width_in: float, height_in: float, columns: int = 1) -> tuple[Any, list[Any]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, columns, squeeze=False)[0]
    return figure, list(axes)


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _log_values(axes: Any) -> None:
    """A log y axis with plain-number ticks at 1, 2 and 5 times powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axes.set_yscale("log")
    axes.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.6g}"))
    axes.yaxis.set_minor_formatter(NullFormatter())


def _size_axis(axes: Any, counts: tuple[int, ...]) -> None:
    axes.set_xscale("log", base=2)
    axes.set_xticks(list(counts))
    axes.set_xticklabels([str(c) for c in counts], fontsize=8)
    axes.minorticks_off()
    axes.set_xlabel("devices in the cluster")
    axes.grid(True, which="major", linestyle=":", linewidth=0.6, alpha=0.8)


def _lines(
    axes: Any, result: CapacityResult, value: Callable[[CapacityRow], float], *, whatif_strategy: str
) -> None:
    """One line per strategy (baseline series), one per what-if series (headline strategy only)."""
    for index, strategy in enumerate(result.strategies):
        _line(axes, result, BASELINE, strategy, value, index, 0)
    for series_index, series in enumerate(result.series[1:], start=1):
        _line(
            axes,
            result,
            series,
            whatif_strategy,
            value,
            result.strategies.index(whatif_strategy),
            series_index,
        )


def _line(
    axes: Any,
    result: CapacityResult,
    series: str,
    strategy: str,
    value: Callable[[CapacityRow], float],
    color_index: int,
    series_index: int,
) -> None:
    rows = [r for r in result.rows_of(series, strategy) if r.has_plan and math.isfinite(value(r))]
    if not rows:
        return
    label = strategy if series == BASELINE else f"{strategy}, {series}"
    axes.plot(
        [r.num_devices for r in rows],
        [value(r) for r in rows],
        linestyle=SERIES_STYLES[series_index % len(SERIES_STYLES)],
        marker=SERIES_MARKERS[series_index % len(SERIES_MARKERS)],
        markersize=4,
        linewidth=2.2 if strategy == result.headline_strategy else 1.4,
        color=strategy_color(strategy, color_index),
        label=label,
    )


def throughput_png(result: CapacityResult) -> bytes:
    """Throughput against cluster size, with linear scaling from the smallest size as a reference."""
    figure, (axes,) = _figure(8.0, 4.6)
    headline = result.headline_strategy
    _lines(axes, result, lambda r: r.units_per_s, whatif_strategy=headline)
    reference = next((r for r in result.rows_of(BASELINE, headline) if r.has_plan), None)
    if reference is not None:
        counts = result.options.device_counts
        ideal = [reference.units_per_s * c / reference.num_devices for c in counts]
        axes.plot(
            counts, ideal, color="#999999", linestyle=(0, (1, 3)), linewidth=1.0, label="linear scaling"
        )
    _log_values(axes)
    axes.set_ylabel(f"throughput ({result.unit}/s)")
    axes.set_title("Throughput vs cluster size", loc="left", fontsize=11)
    _size_axis(axes, result.options.device_counts)
    axes.legend(fontsize=8, frameon=False, loc="upper left")
    return _png(figure)


def efficiency_png(result: CapacityResult) -> bytes:
    """Scaling efficiency (throughput per device relative to each line's smallest size)."""
    figure, (axes,) = _figure(8.0, 3.8)
    _lines(axes, result, result.scaling_efficiency, whatif_strategy=result.headline_strategy)
    axes.axhline(1.0, color="#999999", linestyle=(0, (1, 3)), linewidth=1.0)
    axes.set_ylim(bottom=0.0)
    axes.set_ylabel("scaling efficiency")
    axes.set_title("Scaling efficiency (1.0 = linear from the smallest size)", loc="left", fontsize=11)
    _size_axis(axes, result.options.device_counts)
    axes.legend(fontsize=8, frameon=False, loc="lower left")
    return _png(figure)


def breakdown_png(result: CapacityResult, colors: Mapping[str, str]) -> bytes:
    """Stacked critical-path seconds per component for the headline strategy, the bottleneck named on top."""
    rows = [r for r in result.rows_of(BASELINE, result.headline_strategy) if r.has_plan]
    figure, (axes,) = _figure(8.0, 4.4)
    parts = [_visible_parts(r) for r in rows]
    keys: list[str] = []
    for row_parts in parts:
        keys += [k for k in row_parts if k not in keys]
    keys.sort(key=lambda k: (k in MOVEMENT_COLORS or k == OTHER, k == OTHER, k == WAITING))
    positions = list(range(len(rows)))
    bottoms = [0.0] * len(rows)
    palette = dict(colors)
    for index, key in enumerate(keys):
        color = MOVEMENT_COLORS.get(key) or palette.get(key) or PALETTE[index % len(PALETTE)]
        heights = [row_parts.get(key, 0.0) for row_parts in parts]
        axes.bar(positions, heights, bottom=bottoms, color=color, edgecolor="white", linewidth=0.5, label=key)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    top = max(bottoms, default=1.0)
    for position, row in zip(positions, rows, strict=True):
        axes.text(
            position, row.iteration_s + top * 0.015, row.bottleneck, ha="center", va="bottom", fontsize=8
        )
    axes.set_xticks(positions)
    axes.set_xticklabels([str(r.num_devices) for r in rows], fontsize=8)
    axes.set_xlabel("devices in the cluster")
    axes.set_ylabel("seconds on the critical path")
    axes.set_ylim(0, top * 1.12)
    axes.set_title(
        f"Iteration time by component ({result.headline_strategy} plan; label = bottleneck)",
        loc="left",
        fontsize=11,
    )
    axes.grid(axis="y", linestyle=":", linewidth=0.6, alpha=0.8)
    axes.set_axisbelow(True)
    axes.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(figure)


def _visible_parts(row: CapacityRow) -> dict[str, float]:
    """The row's breakdown with parts under 1% of its iteration merged into ``other``."""
    out: dict[str, float] = {}
    for key, seconds in row.breakdown_s:
        name = key if seconds >= 0.01 * row.iteration_s else OTHER
        out[name] = out.get(name, 0.0) + seconds
    return out


def cost_png(result: CapacityResult) -> bytes:
    """Cost per 1,000 samples and per million generated tokens (currency with a price, else device-hours)."""
    price = result.options.price_per_device_hour
    scale = price if price is not None else 1.0
    figure, (per_samples, per_tokens) = _figure(11.0, 4.2, columns=2)
    headline = result.headline_strategy
    _lines(per_samples, result, lambda r: r.device_hours_per_1k_samples * scale, whatif_strategy=headline)
    _lines(per_tokens, result, lambda r: r.device_hours_per_1m_tokens * scale, whatif_strategy=headline)
    unit = f"cost (at {price:g} per device-hour)" if price is not None else "device-hours"
    for axes, what in ((per_samples, "per 1,000 samples"), (per_tokens, "per million generated tokens")):
        axes.set_ylabel(unit)
        axes.set_title(f"{unit.split(' (')[0].capitalize()} {what}", loc="left", fontsize=11)
        axes.set_ylim(bottom=0.0)
        _size_axis(axes, result.options.device_counts)
    per_samples.legend(fontsize=8, frameon=False, loc="upper left")
    if not any(r.tokens_per_iteration for r in result.rows):
        per_tokens.text(
            0.5,
            0.5,
            "no generated tokens (not a language workload)",
            ha="center",
            va="center",
            transform=per_tokens.transAxes,
            color="#5a6272",
        )
    return _png(figure)
