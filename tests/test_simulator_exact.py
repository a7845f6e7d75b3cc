"""Exact small cases whose timings can be computed by hand."""

from __future__ import annotations

import pytest

from rlinf.core.cluster import GIB, parse_cluster
from rlinf.core.costs import fit
from rlinf.core.lowering import lower
from rlinf.core.plan import Placement, Plan
from rlinf.core.trace import CostSample, Trace
from rlinf.core.workflow import Component, Edge, Workflow
from simulator import simulate

PROVENANCE = {"kind": "synthesized", "source": "hand-computed test costs"}


def _proportional(component: str, op: str, samples: int, seconds: float) -> list[CostSample]:
    """Two points through the origin: seconds is exactly proportional to samples per replica."""
    return [
        CostSample(component=component, op=op, devices=1, samples=samples, seconds=seconds),
        CostSample(component=component, op=op, devices=1, samples=2 * samples, seconds=2 * seconds),
    ]


def _two_stage(state_bytes: int = 0, kind: str = "stream") -> Workflow:
    return Workflow(
        name="two-stage",
        components=[
            Component(name="a", role="inference", state_bytes=state_bytes),
            Component(name="b", role="actor", state_bytes=state_bytes),
        ],
        edges=[Edge(src="a", dst="b", kind=kind)],
        batch_size=24,
    )


@pytest.mark.parametrize(
    ("a", "b", "m"), [(3.0, 1.0, 4), (1.0, 3.0, 4), (2.0, 2.0, 6), (0.5, 1.5, 1), (5.0, 0.25, 8)]
)
def test_two_stage_pipeline_finishes_at_m_max_plus_min(a: float, b: float, m: int) -> None:
    workflow = _two_stage()
    per_micro_batch = workflow.batch_size // m
    trace = Trace(
        workflow=workflow,
        cluster=parse_cluster("2xH100"),
        provenance=PROVENANCE,
        samples=_proportional("a", "infer", per_micro_batch, a)
        + _proportional("b", "train", per_micro_batch, b),
    )
    plan = Plan(
        placements=[Placement(component="a", devices=[0]), Placement(component="b", devices=[1])],
        granularity={"a->b": m},
    )
    timeline = simulate(lower(workflow, plan, trace.cluster), fit(trace))
    assert plan.mode == "disaggregated"
    assert timeline.iteration_s == pytest.approx(m * max(a, b) + min(a, b), rel=1e-12)


@pytest.mark.parametrize(("a", "b"), [(3.0, 1.0), (0.2, 4.0)])
def test_collocated_a_then_b_with_switch_costs(a: float, b: float) -> None:
    state = 11 * GIB
    bandwidth = 22e9  # measured host<->device bandwidth recorded in the trace
    workflow = _two_stage(state_bytes=state, kind="barrier")
    cluster = parse_cluster("1xH100")
    moves = [
        CostSample(component=c, op=op, devices=1, samples=0, seconds=state / bandwidth, num_bytes=state)
        for c in ("a", "b")
        for op in ("onload", "offload")
    ]
    trace = Trace(
        workflow=workflow,
        cluster=cluster,
        provenance=PROVENANCE,
        samples=_proportional("a", "infer", 24, a) + _proportional("b", "train", 24, b) + moves,
    )
    plan = Plan(
        placements=[Placement(component="a", devices=[0]), Placement(component="b", devices=[0])],
        offload=["a", "b"],
    )
    program = lower(workflow, plan, cluster)
    timeline = simulate(program, fit(trace))
    switches = [s for s in timeline.spans if s.kind in ("onload", "offload")]
    # Per iteration: onload a, offload a, onload b, offload b (the last one is the switch back to a).
    assert [s.label for s in switches] == ["a.onload", "a.offload", "b.onload", "b.offload"]
    s = sum(span.seconds for span in switches)
    assert s == pytest.approx(4 * (10e-6 + state / bandwidth), rel=1e-9)
    assert timeline.iteration_s == pytest.approx(a + b + s, rel=1e-12)
    # Context switching keeps one state resident at a time: peak is one state, not both.
    assert timeline.peak_memory_bytes == (state,)


def test_collocated_without_offload_is_sum_of_parts() -> None:
    workflow = _two_stage(state_bytes=GIB, kind="barrier")
    cluster = parse_cluster("1xH100")
    trace = Trace(
        workflow=workflow,
        cluster=cluster,
        provenance=PROVENANCE,
        samples=_proportional("a", "infer", 24, 2.0) + _proportional("b", "train", 24, 0.5),
    )
    plan = Plan(placements=[Placement(component="a", devices=[0]), Placement(component="b", devices=[0])])
    timeline = simulate(lower(workflow, plan, cluster), fit(trace))
    assert timeline.iteration_s == pytest.approx(2.5, rel=1e-12)
    assert timeline.peak_memory_bytes == (2 * GIB,)
    assert timeline.device_busy_fraction() == [pytest.approx(1.0)]
