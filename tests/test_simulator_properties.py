"""Property tests (hypothesis) over random workflows and plans: invariants of lowering and simulation."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlinf.core.cluster import GIB, parse_cluster
from rlinf.core.costs import fit
from rlinf.core.errors import ExtrapolationWarning, RlinfWarning
from rlinf.core.lowering import lower
from rlinf.core.plan import Placement, Plan
from rlinf.core.program import Program
from rlinf.core.timeline import Timeline
from rlinf.core.trace import CostSample, Trace
from rlinf.core.workflow import Component, Edge, Loop, WeightSync, Workflow
from simulator import simulate

MAX_DEVICES = 8
ROLE_OPS = {
    "rollout": "generate",
    "reward": "reward",
    "inference": "infer",
    "actor": "train",
    "critic": "train",
    "env": "env_step",
}


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Workflow, Plan, Trace]:
    """A random workflow (a chain-shaped DAG with extra edges, or an embodied loop), a valid plan and costs."""
    num_devices = draw(st.integers(1, MAX_DEVICES))
    embodied = draw(st.booleans())
    if embodied:
        num_envs = draw(st.sampled_from([2, 4, 6, 8]))
        components = [
            Component(name="env", role="env", state_bytes=GIB),
            Component(name="policy", role="rollout", state_bytes=GIB),
            Component(name="actor", role="actor", state_bytes=GIB),
        ]
        workflow = Workflow(
            name="random-embodied",
            components=components,
            edges=[
                Edge(
                    src="policy",
                    dst="actor",
                    kind=draw(st.sampled_from(["stream", "barrier"])),
                    bytes_per_sample=100,
                )
            ],
            loop=Loop(
                env="env",
                policy="policy",
                num_steps=draw(st.integers(1, 4)),
                obs_bytes_per_env=64,
                action_bytes_per_env=8,
            ),
            weight_sync=[WeightSync(src="actor", dst="policy", num_bytes=10**6)],
            batch_size=num_envs,
            unit="env_steps",
        )
    else:
        count = draw(st.integers(2, 4))
        roles = (
            ["rollout"]
            + draw(
                st.lists(
                    st.sampled_from(["reward", "inference", "critic"]), min_size=count - 2, max_size=count - 2
                )
            )
            + ["actor"]
        )
        components = [Component(name=f"c{i}", role=role, state_bytes=GIB) for i, role in enumerate(roles)]
        edges = [
            Edge(
                src=f"c{i}",
                dst=f"c{i + 1}",
                kind=draw(st.sampled_from(["stream", "barrier"])),
                bytes_per_sample=draw(st.integers(0, 10**5)),
            )
            for i in range(count - 1)
        ]
        if count > 2 and draw(st.booleans()):
            edges.append(Edge(src="c0", dst=f"c{count - 1}", kind="stream", bytes_per_sample=10))
        group_size = draw(st.sampled_from([1, 2, 4]))
        num_prompts = draw(st.sampled_from([4, 8, 12]))
        workflow = Workflow(
            name="random",
            components=components,
            edges=edges,
            weight_sync=[WeightSync(src=f"c{count - 1}", dst="c0", num_bytes=10**8)],
            batch_size=num_prompts * group_size,
            group_size=group_size,
            tokens_per_sample=100.0,
        )
    placements = []
    for component in workflow.components:
        start = draw(st.integers(0, num_devices - 1))
        stop = draw(st.integers(start + 1, num_devices))
        placements.append(Placement(component=component.name, devices=range(start, stop)))
    granularity = {}
    for key in workflow.granularity_keys:
        if key == "loop":
            divisors = [d for d in range(1, workflow.batch_size + 1) if workflow.batch_size % d == 0]
            granularity[key] = draw(st.sampled_from(divisors))
        else:
            granularity[key] = draw(st.integers(1, workflow.batch_size // workflow.group_size))
    offload = draw(st.sets(st.sampled_from([c.name for c in workflow.components])))
    plan = Plan(placements=placements, granularity=granularity, offload=offload)
    samples = []
    for component in workflow.components:
        base, per_sample = draw(st.floats(0.0, 1.0)), draw(st.floats(0.0, 0.1))
        op = (
            "act"
            if workflow.loop is not None and component.name == workflow.loop.policy
            else ROLE_OPS[component.role]
        )
        for devices in range(1, MAX_DEVICES + 1):
            for per_replica in (0.5, float(workflow.batch_size)):
                samples.append(
                    CostSample(
                        component=component.name,
                        op=op,
                        devices=devices,
                        samples=int(per_replica * devices) or 1,
                        seconds=base + per_sample * per_replica,
                    )
                )
    lengths = tuple(draw(st.lists(st.floats(10, 4000), min_size=1, max_size=30)))
    trace = Trace(
        workflow=workflow,
        cluster=parse_cluster(f"{num_devices}xH100"),
        provenance={"kind": "synthesized", "source": "hypothesis"},
        samples=samples,
        response_lengths=lengths,
    )
    return workflow, plan, trace


def _run(
    scenario: tuple[Workflow, Plan, Trace], seed: int = 0, stochastic: bool = False
) -> tuple[Program, Timeline]:
    workflow, plan, trace = scenario
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RlinfWarning)  # offload without effect, extrapolation
        program = lower(workflow, plan, trace.cluster)
        timeline = simulate(program, fit(trace), seed=seed, stochastic=stochastic)
    return program, timeline


PROPERTY_SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(scenarios())
def test_no_device_runs_two_ops_at_once(scenario: tuple[Workflow, Plan, Trace]) -> None:
    program, timeline = _run(scenario, stochastic=True)
    for device in range(program.num_devices):
        spans = sorted((s for s in timeline.spans if device in s.devices), key=lambda s: (s.start_s, s.end_s))
        for before, after in zip(spans, spans[1:], strict=False):
            assert after.start_s >= before.end_s - 1e-9, (device, before.label, after.label)


@PROPERTY_SETTINGS
@given(scenarios())
def test_every_dependency_and_device_order_holds(scenario: tuple[Workflow, Plan, Trace]) -> None:
    program, timeline = _run(scenario, stochastic=True)
    for span in timeline.spans:
        for dep in span.deps:
            assert span.start_s >= timeline.spans[dep].end_s - 1e-9
    for device, order in enumerate(program.device_order):
        starts = [timeline.start_s[i] for i in order]
        assert starts == sorted(starts), f"device {device} ran its ops out of order"


@PROPERTY_SETTINGS
@given(scenarios())
def test_iteration_time_bounds(scenario: tuple[Workflow, Plan, Trace]) -> None:
    _, timeline = _run(scenario)
    tolerance = 1e-9 * max(1.0, timeline.iteration_s)
    assert timeline.iteration_s >= timeline.dependency_path_seconds() - tolerance
    assert timeline.iteration_s >= float(np.max(timeline.device_busy_seconds())) - tolerance


@PROPERTY_SETTINGS
@given(scenarios(), st.integers(0, 2**32 - 1))
def test_same_seed_identical_timeline(scenario: tuple[Workflow, Plan, Trace], seed: int) -> None:
    _, first = _run(scenario, seed=seed, stochastic=True)
    _, second = _run(scenario, seed=seed, stochastic=True)
    assert first.start_s == second.start_s
    assert first.end_s == second.end_s
    assert first.peak_memory_bytes == second.peak_memory_bytes


@PROPERTY_SETTINGS
@given(scenarios())
def test_simpy_matches_longest_path_oracle(scenario: tuple[Workflow, Plan, Trace]) -> None:
    """An independent evaluation of the semantics: start = max(end of deps, end of previous op on each device)."""
    program, timeline = _run(scenario)
    _, _, trace = scenario
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        durations = fit(trace).durations(program)
    end = np.zeros(program.num_ops)
    last_on_device: dict[int, float] = {}
    for op in program.ops:  # global order is topological and consistent with every device order
        start = max([end[d] for d in op.deps] + [last_on_device.get(d, 0.0) for d in op.devices], default=0.0)
        end[op.index] = start + durations[op.index]
        for device in op.devices:
            last_on_device[device] = end[op.index]
    assert np.allclose(end, timeline.end_s, rtol=1e-9, atol=1e-12)


@PROPERTY_SETTINGS
@given(scenarios())
def test_memory_never_exceeds_resident_plus_one_offloaded_state(
    scenario: tuple[Workflow, Plan, Trace],
) -> None:
    workflow, plan, _ = scenario
    program, timeline = _run(scenario)
    for device, peak in enumerate(timeline.peak_memory_bytes):
        hosted = [p.component for p in plan.placements if device in p.devices]
        resident = sum(
            workflow.component(n).state_bytes_per_device()
            for n in hosted
            if n not in plan.offload or len(hosted) == 1
        )
        offloaded = [
            workflow.component(n).state_bytes_per_device()
            for n in hosted
            if n in plan.offload and len(hosted) > 1
        ]
        assert program.initial_resident_bytes[device] <= peak
        assert peak <= resident + sum(offloaded)


@PROPERTY_SETTINGS
@given(scenarios())
def test_switched_components_run_between_one_onload_and_one_offload(
    scenario: tuple[Workflow, Plan, Trace],
) -> None:
    """Context switching: on each device, an offloaded component that shares it runs only between its onload and
    its offload, and nothing but its own ops (or its loop partner's) runs there in between."""
    workflow, plan, _ = scenario
    program, _ = _run(scenario)
    loop_names = {workflow.loop.env, workflow.loop.policy} if workflow.loop else set()
    for name in plan.offload:
        devices = set(plan.devices_of(name))
        if not any(devices & set(p.devices) for p in plan.placements if p.component != name):
            continue
        for device in devices:
            ops = [program.ops[i] for i in program.device_order[device]]
            kinds = [(op.kind, op.component) for op in ops]
            assert kinds.count(("onload", name)) == 1 and kinds.count(("offload", name)) == 1
            begin, end = kinds.index(("onload", name)), kinds.index(("offload", name))
            mine = [i for i, op in enumerate(ops) if op.component == name and op.kind == "compute"]
            assert begin < min(mine) and max(mine) < end
            allowed = {name} | (loop_names if name in loop_names else set())
            for op in ops[begin:end]:
                if op.kind == "sync_weights":
                    continue
                assert op.component in allowed or op.kind in ("onload", "offload"), (name, op.label)
