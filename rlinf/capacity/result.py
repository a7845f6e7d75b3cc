"""The value a capacity sweep returns: one row per (series, cluster size, strategy), and what follows from them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from rlinf.capacity.config import SweepOptions
from rlinf.capacity.whatif import WhatIf
from rlinf.core.errors import to_tuple
from rlinf.core.plan import Plan

BASELINE = "baseline"
"""Label of the series of the trace as given (what-if series are labelled by their settings)."""
SECONDS_PER_HOUR = 3600.0


@attrs.frozen(kw_only=True)
class CapacityRow:
    """One strategy's plan on one cluster size of one series, simulated."""

    series: str
    strategy: str
    num_devices: int
    plan: Plan | None
    """``None`` when the strategy has no plan that fits (see :attr:`problem`)."""
    problem: str = ""
    source: str = ""
    """Who proposed the plan: the strategy itself, or for ``best`` a fixed mode the simulator ranked faster."""
    mode: str = ""
    """Derived from the plan: collocated, disaggregated or hybrid."""
    num_devices_used: int = 0
    iteration_s: float = math.inf
    units_per_s: float = 0.0
    """Throughput in the workflow's unit (samples or env steps) per second."""
    samples_per_s: float = 0.0
    tokens_per_s: float = 0.0
    """Generated tokens per second (0 for non-language workloads)."""
    samples_per_iteration: int = 0
    tokens_per_iteration: int = 0
    breakdown_s: tuple[tuple[str, float], ...] = attrs.field(converter=to_tuple, default=())
    """The iteration's critical path, seconds per component (movement ops by kind, ``waiting`` for gaps);
    the seconds add up to :attr:`iteration_s`."""
    bottleneck: str = ""
    """The component with the most seconds on the critical path."""
    bubble_fraction: float = 0.0
    peak_memory_bytes: int = 0
    warnings: tuple[str, ...] = attrs.field(converter=to_tuple, default=())
    """What the cost model warned about (extrapolation) while this plan was simulated."""

    @property
    def has_plan(self) -> bool:
        """Whether the strategy found a plan that fits."""
        return self.plan is not None

    @property
    def device_hours_per_iteration(self) -> float:
        """Every device of the cluster, idle or not, for one iteration."""
        return self.num_devices * self.iteration_s / SECONDS_PER_HOUR if self.has_plan else math.inf

    @property
    def device_hours_per_1k_samples(self) -> float:
        """Device-hours per 1,000 samples."""
        if not self.has_plan or not self.samples_per_iteration:
            return math.inf
        return self.device_hours_per_iteration * 1000.0 / self.samples_per_iteration

    @property
    def device_hours_per_1m_tokens(self) -> float:
        """Device-hours per million generated tokens (infinite without tokens)."""
        if not self.has_plan or not self.tokens_per_iteration:
            return math.inf
        return self.device_hours_per_iteration * 1e6 / self.tokens_per_iteration

    def to_dict(self, price_per_device_hour: float | None) -> dict[str, Any]:
        """JSON-ready form, with currency figures when a price is given."""
        price = price_per_device_hour
        return {
            "series": self.series,
            "strategy": self.strategy,
            "num_devices": self.num_devices,
            "plan": None if self.plan is None else self.plan.to_dict(),
            "plan_text": None if self.plan is None else self.plan.describe(),
            "problem": self.problem or None,
            "source": self.source or None,
            "mode": self.mode or None,
            "num_devices_used": self.num_devices_used,
            "iteration_s": _finite(self.iteration_s),
            "units_per_s": self.units_per_s,
            "samples_per_s": self.samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "breakdown_s": dict(self.breakdown_s),
            "bottleneck": self.bottleneck or None,
            "bubble_fraction": self.bubble_fraction,
            "peak_memory_bytes": self.peak_memory_bytes,
            "device_hours_per_iteration": _finite(self.device_hours_per_iteration),
            "device_hours_per_1k_samples": _finite(self.device_hours_per_1k_samples),
            "device_hours_per_1m_tokens": _finite(self.device_hours_per_1m_tokens),
            "cost_per_1k_samples": _priced(self.device_hours_per_1k_samples, price),
            "cost_per_1m_tokens": _priced(self.device_hours_per_1m_tokens, price),
            "warnings": list(self.warnings),
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _priced(device_hours: float, price: float | None) -> float | None:
    return None if price is None or not math.isfinite(device_hours) else device_hours * price


@attrs.frozen(kw_only=True)
class CapacityResult:
    """Every row of a sweep, with the trace's provenance and the question asked."""

    trace_name: str
    workflow_name: str
    unit: str
    """What throughput counts: ``samples`` or ``env_steps``."""
    device_name: str
    provenance: Mapping[str, Any]
    options: SweepOptions
    whatifs: tuple[WhatIf, ...] = attrs.field(converter=to_tuple)
    rows: tuple[CapacityRow, ...] = attrs.field(converter=to_tuple)
    series_devices: Mapping[str, str] = attrs.field(factory=dict)
    """Device type of each series (a what-if may change it)."""

    @property
    def series(self) -> tuple[str, ...]:
        """``baseline`` then each what-if label, in the order given."""
        return (BASELINE,) + tuple(w.label for w in self.whatifs)

    @property
    def strategies(self) -> tuple[str, ...]:
        """Strategies swept, in the order given."""
        return self.options.strategies

    def rows_of(self, series: str, strategy: str) -> tuple[CapacityRow, ...]:
        """Rows of one series and strategy, by ascending cluster size."""
        rows = [r for r in self.rows if r.series == series and r.strategy == strategy]
        return tuple(sorted(rows, key=lambda r: r.num_devices))

    def row(self, series: str, strategy: str, num_devices: int) -> CapacityRow:
        """The row of one cell; raises ``KeyError`` when it was not swept."""
        for row in self.rows:
            if (row.series, row.strategy, row.num_devices) == (series, strategy, num_devices):
                return row
        raise KeyError((series, strategy, num_devices))

    @property
    def headline_strategy(self) -> str:
        """The strategy the target, the chosen plans and the Gantt chart refer to: ``best`` when swept."""
        return "best" if "best" in self.strategies else self.strategies[0]

    def scaling_efficiency(self, row: CapacityRow) -> float:
        """Throughput per device relative to the smallest size of the same series and strategy that has a plan
        (1.0 = linear scaling); NaN without a plan."""
        reference = next((r for r in self.rows_of(row.series, row.strategy) if r.has_plan), None)
        if reference is None or not row.has_plan or reference.units_per_s <= 0:
            return math.nan
        return (row.units_per_s / row.num_devices) / (reference.units_per_s / reference.num_devices)

    def target_row(self, series: str = BASELINE) -> CapacityRow | None:
        """The smallest cluster whose headline plan meets the target; ``None`` without a target or when none does."""
        target = self.options.target
        if target is None:
            return None
        for row in self.rows_of(series, self.headline_strategy):
            if row.has_plan and target.met_by(row.iteration_s, row.units_per_s):
                return row
        return None

    @property
    def target_met(self) -> bool | None:
        """Whether some swept size meets the target (baseline series); ``None`` without a target."""
        return None if self.options.target is None else self.target_row() is not None

    def focus_row(self) -> CapacityRow | None:
        """The baseline row the report draws a Gantt chart of: the target size when met, else the size with the
        fewest device-hours per 1,000 samples (ties: the smaller cluster)."""
        met = self.target_row()
        if met is not None:
            return met
        rows = [r for r in self.rows_of(BASELINE, self.headline_strategy) if r.has_plan]
        return min(rows, key=lambda r: (r.device_hours_per_1k_samples, r.num_devices), default=None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the CLI's ``--json``)."""
        options = self.options
        target = options.target
        met = self.target_row()
        price = options.price_per_device_hour
        rows = []
        for row in self.rows:
            item = row.to_dict(price)
            item["scaling_efficiency"] = _finite_or_none(self.scaling_efficiency(row))
            rows.append(item)
        return {
            "trace": self.trace_name,
            "workflow": self.workflow_name,
            "unit": self.unit,
            "device": self.device_name,
            "devices": list(options.device_counts),
            "strategies": list(options.strategies),
            "series": [{"label": BASELINE, "settings": {}}] + [w.to_dict() for w in self.whatifs],
            "price_per_device_hour": price,
            "target": None if target is None else {"kind": target.kind, "value": target.value},
            "target_met": self.target_met,
            "target_num_devices": None if met is None else met.num_devices,
            "target_plan": None if met is None or met.plan is None else met.plan.to_dict(),
            "search_time_s": options.search_time_s,
            "seed": options.seed,
            "rows": rows,
        }


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None
