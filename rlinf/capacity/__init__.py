"""Capacity planning: sweep cluster sizes with the planner and fixed modes, and report throughput, scaling,
bottlenecks and cost as HTML and Markdown (``rlinf capacity``)."""

from rlinf.capacity.config import SweepOptions, Target, parse_device_counts
from rlinf.capacity.report import ReportFiles, write_report
from rlinf.capacity.result import BASELINE, CapacityResult, CapacityRow
from rlinf.capacity.sweep import simulate_plan, sweep
from rlinf.capacity.whatif import KNOBS, WhatIf, apply_whatif, parse_whatif

__all__ = [
    "BASELINE",
    "KNOBS",
    "CapacityResult",
    "CapacityRow",
    "ReportFiles",
    "SweepOptions",
    "Target",
    "WhatIf",
    "apply_whatif",
    "parse_device_counts",
    "parse_whatif",
    "simulate_plan",
    "sweep",
    "write_report",
]
