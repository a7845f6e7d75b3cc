"""Timelines: what ran where and when, predicted (simulator) or measured (executor), with derived metrics."""

from __future__ import annotations

import functools
from typing import Any

import attrs
import numpy as np

from rlinf.core.errors import to_tuple
from rlinf.core.program import Program


@attrs.frozen(kw_only=True)
class Span:
    """One op's execution."""

    op_index: int
    kind: str
    component: str
    name: str
    label: str
    devices: tuple[int, ...]
    start_s: float
    end_s: float
    micro_batch: int = 0
    step: int = 0
    peer: str = ""
    deps: tuple[int, ...] = ()

    @property
    def seconds(self) -> float:
        """Duration."""
        return self.end_s - self.start_s


@attrs.frozen(kw_only=True)
class Timeline:
    """When each op of a program ran, predicted (simulator) or measured (executor), with derived metrics.

    Build one with ``Timeline(program=program, start_s=starts, end_s=ends, peak_memory_bytes=peaks,
    source="simulated" | "measured")``: ``start_s[i]``/``end_s[i]`` belong to ``program.ops[i]``. Spans are
    derived on demand."""

    program: Program
    start_s: tuple[float, ...] = attrs.field(converter=to_tuple)
    end_s: tuple[float, ...] = attrs.field(converter=to_tuple)
    peak_memory_bytes: tuple[int, ...] = attrs.field(converter=to_tuple, default=())
    """Per device, the most memory in use at any moment (states plus transient activations)."""
    source: str = "simulated"
    """``simulated`` or ``measured``."""

    def __attrs_post_init__(self) -> None:
        assert len(self.start_s) == len(self.end_s) == self.program.num_ops, "one start and end per op"

    @functools.cached_property
    def spans(self) -> tuple[Span, ...]:
        """One span per op, indexed by op index."""
        return tuple(
            Span(
                op_index=op.index,
                kind=op.kind,
                component=op.component,
                name=op.name,
                label=op.label,
                devices=op.devices,
                start_s=self.start_s[op.index],
                end_s=self.end_s[op.index],
                micro_batch=op.micro_batch,
                step=op.step,
                peer=op.peer,
                deps=op.deps,
            )
            for op in self.program.ops
        )

    @property
    def num_devices(self) -> int:
        """Devices of the cluster the program was lowered for."""
        return self.program.num_devices

    @property
    def mode(self) -> str:
        """Mode of the plan."""
        return self.program.mode

    @property
    def plan_summary(self) -> str:
        """One-line plan description."""
        return self.program.plan_summary

    @property
    def unit(self) -> str:
        """``samples`` or ``env_steps``."""
        return self.program.unit

    @property
    def units_per_iteration(self) -> int:
        """Samples or env steps per iteration."""
        return self.program.units_per_iteration

    @property
    def samples_per_iteration(self) -> int:
        """Samples per iteration."""
        return self.program.samples_per_iteration

    @property
    def tokens_per_iteration(self) -> int:
        """Generated tokens per iteration (0 for non-language workloads)."""
        return self.program.tokens_per_iteration

    @property
    def iteration_s(self) -> float:
        """Makespan: from the first start to the last end."""
        if not self.end_s:
            return 0.0
        return max(self.end_s) - min(self.start_s)

    def throughput(self) -> dict[str, float]:
        """Units (samples or env steps), samples and tokens per second."""
        seconds = self.iteration_s
        if seconds <= 0:
            return {f"{self.unit}_per_s": 0.0}
        out = {f"{self.unit}_per_s": self.units_per_iteration / seconds}
        if self.unit != "samples":
            out["samples_per_s"] = self.samples_per_iteration / seconds
        if self.tokens_per_iteration:
            out["tokens_per_s"] = self.tokens_per_iteration / seconds
        return out

    def device_busy_seconds(self) -> np.ndarray:
        """Per device, the seconds it spent running ops."""
        busy = np.zeros(self.num_devices)
        for span in self.spans:
            for device in span.devices:
                busy[device] += span.seconds
        return busy

    def device_busy_fraction(self) -> list[float]:
        """Per device, busy seconds over the iteration time."""
        seconds = self.iteration_s
        busy = self.device_busy_seconds()
        return [float(b / seconds) if seconds > 0 else 0.0 for b in busy]

    def bubble_fraction(self) -> float:
        """Idle share of the devices that run anything: 1 - mean busy fraction over those devices."""
        fractions = [
            f for f, b in zip(self.device_busy_fraction(), self.device_busy_seconds(), strict=True) if b > 0
        ]
        return float(1.0 - np.mean(fractions)) if fractions else 0.0

    def component_seconds(self) -> dict[str, float]:
        """Seconds of each component's compute (wall time of its spans), for breakdowns."""
        out: dict[str, float] = {}
        for span in self.spans:
            key = span.component if span.kind == "compute" else span.kind
            out[key] = out.get(key, 0.0) + span.seconds
        return out

    def critical_path(self) -> list[int]:
        """Op indices of the chain that determines the iteration time, first to last.

        Walks back from the op that ends last, each time to the predecessor (a dependency or the previous op on
        one of its devices) that ended last before it started."""
        if not self.spans:
            return []
        previous_on_device: dict[int, int] = {}
        device_prev: list[list[int]] = [[] for _ in self.spans]
        for span in sorted(self.spans, key=lambda s: (s.start_s, s.op_index)):
            for device in span.devices:
                if device in previous_on_device:
                    device_prev[span.op_index].append(previous_on_device[device])
                previous_on_device[device] = span.op_index
        current = max(self.spans, key=lambda s: (s.end_s, s.op_index)).op_index
        path = [current]
        while True:
            span = self.spans[current]
            candidates = list(span.deps) + device_prev[current]
            if not candidates:
                break
            best = max(candidates, key=lambda i: (self.spans[i].end_s, i))
            if self.spans[best].end_s < span.start_s - 1e-9 * max(1.0, span.start_s):
                break  # nothing held this op back: the chain starts here
            path.append(best)
            current = best
        return path[::-1]

    def dependency_path_seconds(self) -> float:
        """Longest chain of durations through dependencies alone: a lower bound on the iteration time."""
        longest = np.zeros(len(self.spans))
        for span in sorted(self.spans, key=lambda s: s.op_index):
            before = max((longest[d] for d in span.deps), default=0.0)
            longest[span.op_index] = before + span.seconds
        return float(longest.max()) if len(longest) else 0.0

    def summary(self) -> dict[str, Any]:
        """Metrics as a JSON-ready dict."""
        path = self.critical_path()
        return {
            "mode": self.mode,
            "plan": self.plan_summary,
            "source": self.source,
            "iteration_s": self.iteration_s,
            "throughput": self.throughput(),
            "device_busy_fraction": self.device_busy_fraction(),
            "bubble_fraction": self.bubble_fraction(),
            "peak_memory_bytes": list(self.peak_memory_bytes),
            "critical_path": [self.spans[i].label for i in path],
            "critical_path_s": sum(self.spans[i].seconds for i in path),
            "component_seconds": self.component_seconds(),
            "num_ops": len(self.spans),
            "max_staleness": self.program.max_staleness,
            "buffered_bytes_per_device": dict(self.program.buffered_bytes_per_device),
        }
