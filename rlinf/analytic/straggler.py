"""The straggler phase of a simulated iteration: where its generation runs its last responses at a small batch.

A synchronous step cannot end before its longest response is generated. The analytic model knows, for a trace
it synthesized, how the slowest rollout replica's running batch shrinks step by step
(:meth:`rlinf.analytic.physics.Physics.generation_tail`); :func:`straggler_of` places that tail on the simulated
timeline (the last part of each rollout's generate spans) and says what share of the iteration it takes. Traces
that the analytic model did not make (profiled, imported) carry no decode schedule, so they have none.
"""

from __future__ import annotations

from typing import Any

import attrs

from rlinf.analytic.decode import TAIL_BATCH_FRACTION
from rlinf.analytic.llm_workload import LLMWorkload
from rlinf.analytic.physics import Physics
from rlinf.core.config_structure import structure_config
from rlinf.core.errors import RlinfError
from rlinf.core.timeline import Timeline
from rlinf.core.trace import Trace

DEFINITION = (
    f"the last decode steps of the slowest rollout replica, from the one after which fewer than "
    f"{TAIL_BATCH_FRACTION:g} of its peak batch is still running: each still reads all the weights and pays the "
    "engine's fixed per-step work, for few tokens"
)


@attrs.frozen(kw_only=True)
class StragglerTail:
    """One rollout component's straggler tail on a timeline."""

    component: str
    responses_per_replica: int
    peak_batch: int
    tail_batch: int
    decode_steps: int
    tail_steps: int
    share_of_generation: float
    seconds: float
    intervals: tuple[tuple[int, float, float], ...]
    """(op index, start, end) of the tail's parts on the timeline: the end of the component's generate spans."""

    def as_dict(self, iteration_s: float) -> dict[str, Any]:
        """JSON-ready, with the tail's share of the iteration."""
        out = attrs.asdict(self)
        out["intervals"] = [{"op_index": i, "start_s": a, "end_s": b} for i, a, b in self.intervals]
        out["fraction_of_iteration"] = self.seconds / iteration_s if iteration_s > 0 else 0.0
        return out


def straggler_of(trace: Trace, timeline: Timeline) -> list[StragglerTail]:
    """The straggler tail of every rollout component of ``timeline``, simulated from ``trace``; raises
    :class:`RlinfError` for a trace the analytic model did not synthesize (it has no decode schedule)."""
    provenance = trace.provenance
    if provenance.get("kind") != "synthesized" or "workload" not in provenance:
        raise RlinfError(
            "the trace was not synthesized by the analytic model (rlinf trace synth), so it has no decode "
            "schedule to place a straggler tail from"
        )
    seed = provenance.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise RlinfError(
            f"the trace's provenance.seed {seed!r} is no seed: its lengths cannot be drawn again"
        )
    try:
        workload = structure_config(
            LLMWorkload, provenance["workload"], "trace", "trace.provenance.workload."
        )
        physics = Physics.of(workload, trace.cluster, seed)
    except RlinfError as error:
        raise RlinfError(f"the trace's provenance.workload cannot be re-created ({error})") from None
    tails = []
    for component in trace.workflow.components:
        if component.role != "rollout":
            continue
        spans = [
            s
            for s in timeline.spans
            if s.component == component.name and s.kind == "compute" and s.name == "generate"
        ]
        if not spans:
            continue
        devices = len(spans[0].devices)
        tail = physics.generation_tail(
            trace.workflow.batch_size, max(1, devices // component.model_parallel_size)
        )
        lane = sorted((s for s in spans if s.devices == spans[0].devices), key=lambda s: s.start_s)
        seconds = tail.tail_share * sum(s.seconds for s in lane)
        intervals, left = [], seconds
        for span in reversed(lane):
            if left <= 0:
                break
            take = min(left, span.seconds)
            intervals.append((span.op_index, span.end_s - take, span.end_s))
            left -= take
        tails.append(
            StragglerTail(
                component=component.name,
                responses_per_replica=tail.responses,
                peak_batch=tail.peak_batch,
                tail_batch=tail.tail_batch,
                decode_steps=tail.num_steps,
                tail_steps=tail.tail_steps,
                share_of_generation=tail.tail_share,
                seconds=seconds,
                intervals=tuple(reversed(intervals)),
            )
        )
    return tails


def straggler_report(trace: Trace, timeline: Timeline) -> dict[str, Any]:
    """``straggler`` (the tails, or why there are none) and ``straggler_fraction`` (the longest tail's share of
    the iteration, ``None`` without a decode schedule) for ``rlinf simulate --json``."""
    try:
        tails = straggler_of(trace, timeline)
    except RlinfError as error:
        return {"straggler": {"available": False, "reason": str(error)}, "straggler_fraction": None}
    iteration = timeline.iteration_s
    longest = max((t.seconds for t in tails), default=0.0)
    return {
        "straggler": {
            "available": True,
            "definition": DEFINITION,
            "tail_batch_fraction": TAIL_BATCH_FRACTION,
            "seconds": longest,
            "components": [t.as_dict(iteration) for t in tails],
        },
        "straggler_fraction": longest / iteration if iteration > 0 else 0.0,
    }


def tail_intervals(report: dict[str, Any]) -> dict[int, tuple[float, float]]:
    """Op index -> (start, end) of the straggler tail, from :func:`straggler_report`'s output (for the Gantt)."""
    straggler = report.get("straggler") or {}
    out = {}
    for component in straggler.get("components", []):
        for part in component["intervals"]:
            out[int(part["op_index"])] = (float(part["start_s"]), float(part["end_s"]))
    return out
