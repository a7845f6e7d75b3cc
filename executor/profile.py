"""Recording a run: measured spans become a :class:`rlinf.core.timeline.Timeline` (the simulator's type, with
``source="measured"``) and every op's measured cost becomes a :class:`rlinf.core.trace.CostSample`, so every run is
also a profile."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from rlinf.core.program import Program
from rlinf.core.timeline import Timeline
from rlinf.core.trace import CostSample


@attrs.frozen(kw_only=True)
class OpRecord:
    """What the workers reported for one op (merged over the replicas that ran it)."""

    start_s: float
    end_s: float
    num_bytes: int = 0
    """Bytes actually moved (transfers, weight syncs, onload/offload)."""


def build_timeline(
    program: Program, records: Sequence[OpRecord], peak_memory_bytes: Sequence[int]
) -> Timeline:
    """A measured timeline; times are relative to the earliest start."""
    assert len(records) == program.num_ops, f"{len(records)} records for {program.num_ops} ops"
    origin = min((r.start_s for r in records), default=0.0)
    return Timeline(
        program=program,
        start_s=[r.start_s - origin for r in records],
        end_s=[r.end_s - origin for r in records],
        peak_memory_bytes=[int(b) for b in peak_memory_bytes],
        source="measured",
    )


def cost_samples(program: Program, records: Sequence[OpRecord]) -> tuple[CostSample, ...]:
    """One cost sample per op: what ran, on how many devices, how much, how long."""
    return tuple(
        CostSample.of_op(op, record.end_s - record.start_s, record.num_bytes)
        for op, record in zip(program.ops, records, strict=True)
    )


class MemoryMeter:
    """Per-device resident state bytes over a run, from what each worker reports after each op."""

    def __init__(self, num_devices: int, worker_devices: Sequence[int], initial_bytes: Sequence[int]) -> None:
        self._worker_devices = list(worker_devices)
        self._resident = list(initial_bytes)
        self._peak = [0] * num_devices
        self._update_peak()

    def report(self, worker: int, resident_bytes: int) -> None:
        """Worker ``worker`` now holds ``resident_bytes``."""
        self._resident[worker] = resident_bytes
        self._update_peak()

    def _update_peak(self) -> None:
        totals = [0] * len(self._peak)
        for worker, device in enumerate(self._worker_devices):
            totals[device] += self._resident[worker]
        self._peak = [max(p, t) for p, t in zip(self._peak, totals, strict=True)]

    @property
    def peak_bytes(self) -> list[int]:
        """Per device, the most state bytes held at once."""
        return list(self._peak)
