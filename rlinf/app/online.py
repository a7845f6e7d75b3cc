"""The online cost model: the plan in force re-predicted from the run's own recent iterations.

A run's prediction comes from a profile taken before it. While the run goes, every executed op is a measurement:
:class:`TrackingPrediction` compares each op's measured seconds (ready to end, as profiling samples them:
:func:`rlinf.app.profiling.dispatch_inclusive_samples`) with the seconds the prediction gave it, per (component,
op) pair and per iteration, and keeps the median ratio over a window of recent iterations (an iteration slowed by a
passing load moves the median little). The tracking prediction replays the program with the predicted durations
scaled by those ratios: where the machine or the workload drifts, it follows; where nothing drifts, it equals the
original prediction. :meth:`TrackingPrediction.scaled_trace` applies the same ratios to a trace's samples, the costs a
re-plan would use for every plan, not only the one in force.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping

import attrs
import numpy as np

from rlinf.app.profiling import dispatch_inclusive_samples
from rlinf.core.errors import require
from rlinf.core.timeline import Timeline
from rlinf.core.trace import Trace
from simulator import replay

DEFAULT_WINDOW = 8
"""Iterations the ratios are taken over."""

Key = tuple[str, str]
"""(component, op name)."""


class TrackingPrediction:
    """Re-predicts the iteration of ``predicted``'s program from the measured iterations it is shown."""

    def __init__(self, predicted: Timeline, window: int = DEFAULT_WINDOW) -> None:
        require(window >= 1, "window", window, "must be >= 1", "use a window of at least one iteration")
        self.program = predicted.program
        self.predicted_s = predicted.iteration_s
        self._base = np.asarray(predicted.end_s, dtype=float) - np.asarray(predicted.start_s, dtype=float)
        self._keys: list[Key] = [(op.component, op.name) for op in self.program.ops]
        self._base_by_key: dict[Key, float] = {}
        for key, seconds in zip(self._keys, self._base, strict=True):
            self._base_by_key[key] = self._base_by_key.get(key, 0.0) + float(seconds)
        self._rows: deque[dict[Key, float]] = deque(maxlen=window)

    @property
    def iterations_seen(self) -> int:
        """Iterations in the window."""
        return len(self._rows)

    def observe(self, measured: Timeline) -> bool:
        """Take one measured iteration of the same program (another program's, e.g. a pipeline's fill or drain
        step, is not taken: returns False)."""
        if measured.program is not self.program and measured.program != self.program:
            return False
        seconds: dict[Key, float] = {}
        for key, sample in zip(self._keys, dispatch_inclusive_samples(measured), strict=True):
            seconds[key] = seconds.get(key, 0.0) + sample.seconds
        self._rows.append(
            {
                key: seconds[key] / base
                for key, base in self._base_by_key.items()
                if base > 0 and key in seconds
            }
        )
        return True

    def ratios(self) -> dict[Key, float]:
        """Measured over predicted seconds per (component, op), the median over the window (empty before any
        iteration is seen)."""
        keys = {key for row in self._rows for key in row}
        return {key: statistics.median(row[key] for row in self._rows if key in row) for key in sorted(keys)}

    def predict(self) -> float:
        """The plan's iteration, seconds, with the recent ratios applied (the original prediction before any)."""
        if not self._rows:
            return self.predicted_s
        ratios = self.ratios()
        scale = np.array([ratios.get(key, 1.0) for key in self._keys])
        return replay(self.program, self._base * scale).iteration_s

    def scaled_trace(self, trace: Trace) -> Trace:
        """``trace`` with each sample's seconds scaled by its (component, op)'s ratio; a pair the run has not
        executed takes its component's median ratio (the machine's drift reaches every op), else 1."""
        ratios = self.ratios()
        by_component: dict[str, list[float]] = {}
        for (component, _), ratio in ratios.items():
            by_component.setdefault(component, []).append(ratio)
        fallback = {c: statistics.median(values) for c, values in by_component.items()}
        return attrs.evolve(
            trace,
            samples=[
                attrs.evolve(
                    s, seconds=s.seconds * ratios.get((s.component, s.op), fallback.get(s.component, 1.0))
                )
                for s in trace.samples
            ],
        )


def ratio_summary(ratios: Mapping[Key, float], top: int = 3) -> str:
    """``env.env_step x1.52, rollout.act x1.21`` for the pairs that drifted most."""
    ranked = sorted(ratios.items(), key=lambda item: -abs(np.log(max(item[1], 1e-12))))[:top]
    return ", ".join(f"{component}.{op} x{ratio:.2f}" for (component, op), ratio in ranked)
