"""Structure of lowered programs: micro-batches, transfers, the loop, context switches and ordering."""

from __future__ import annotations

import pytest
from factories import embodied_trace, embodied_workflow, grpo_workflow

from rlinf.core.cluster import parse_cluster
from rlinf.core.costs import fit
from rlinf.core.lowering import lower, micro_batch_ranges
from rlinf.core.plan import plan_from_yaml
from simulator import simulate

CLUSTER = parse_cluster("1x8xH100")
STREAM = "granularity: {rollout->reward: 4, reward->inference: 4, inference->actor: 4}"


def _kinds(program) -> dict[str, int]:
    return program.summary()["by_kind"]


def test_micro_batch_ranges_cover_groups_without_gaps() -> None:
    ranges = micro_batch_ranges(10, 4)
    assert ranges == ((0, 2), (2, 5), (5, 7), (7, 10))


def test_disaggregated_stream_has_transfers_per_micro_batch() -> None:
    plan = plan_from_yaml("placement: {rollout: 0-3, reward: 4, inference: 5, actor: 6-7}\n" + STREAM, 8)
    program = lower(grpo_workflow(), plan, CLUSTER)
    assert plan.mode == "disaggregated"
    assert _kinds(program) == {"compute": 16, "transfer": 12, "sync_weights": 1}
    for op in program.ops:
        if op.kind == "compute" and op.component == "actor":
            (dep,) = op.deps  # one transfer from the matching inference micro-batch
            assert program.ops[dep].kind == "transfer" and program.ops[dep].micro_batch == op.micro_batch
    sync = next(op for op in program.ops if op.kind == "sync_weights")
    assert sync.devices == (0, 1, 2, 3, 6, 7) and sync.link == "intra_node"


def test_collocated_without_offload_interleaves_micro_batches_without_transfers() -> None:
    plan = plan_from_yaml("placement: {rollout: all, reward: all, inference: all, actor: all}\n" + STREAM, 8)
    program = lower(grpo_workflow(), plan, CLUSTER)
    assert _kinds(program) == {"compute": 16, "sync_weights": 1}
    order = [program.ops[i] for i in program.device_order[0]]
    # Interleaved: rollout[0] is followed by its consumers before rollout[1] runs.
    assert [f"{op.component}{op.micro_batch}" for op in order[:5]] == [
        "rollout0",
        "reward0",
        "inference0",
        "actor0",
        "rollout1",
    ]
    assert len(program.lanes) == 1 and program.lanes[0].devices == tuple(range(8))


def test_offloaded_components_run_contiguously_with_one_switch_each() -> None:
    plan = plan_from_yaml(
        "placement: {rollout: all, reward: all, inference: all, actor: all}\noffload: [rollout, actor]\n"
        + STREAM,
        8,
    )
    program = lower(grpo_workflow(), plan, CLUSTER)
    labels = [program.ops[i].label for i in program.device_order[5]]
    assert labels[0] == "rollout.onload"
    assert labels.index("rollout.offload") == labels.index("rollout.generate[3]") + 1
    assert labels.index("actor.onload") < labels.index("actor.train[0]")
    assert labels[-2:] == ["actor->rollout.sync_weights", "actor.offload"]
    assert _kinds(program)["onload"] == 2 and _kinds(program)["offload"] == 2
    # Offloaded states are not resident when the iteration starts.
    workflow = grpo_workflow()
    assert program.initial_resident_bytes[0] == workflow.component("inference").state_bytes_per_device()


def test_hybrid_lanes_group_devices_by_hosted_components() -> None:
    plan = plan_from_yaml("placement: {rollout: 0-3, reward: 0-3, inference: 4-7, actor: all}\n" + STREAM, 8)
    program = lower(grpo_workflow(), plan, CLUSTER)
    assert plan.mode == "hybrid"
    assert [lane.devices for lane in program.lanes] == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_embodied_loop_lowers_into_stages_and_steps() -> None:
    workflow = embodied_workflow(num_envs=8, num_steps=4)
    plan = plan_from_yaml("placement: {env: 0, rollout: 1, actor: 2-3}\ngranularity: {loop: 2}", 8)
    program = lower(workflow, plan, CLUSTER)
    counts = {}
    for op in program.ops:
        counts[(op.kind, op.name)] = counts.get((op.kind, op.name), 0) + 1
    # 2 stages x 4 steps of act and env_step; obs and action transfers except the first observation.
    assert counts[("compute", "act")] == 8 and counts[("compute", "env_step")] == 8
    assert counts[("transfer", "transfer")] == 8 + 6 + 2  # actions, observations, trajectories to the actor
    assert counts[("compute", "train")] == 1
    env_order = [(program.ops[i].step, program.ops[i].micro_batch) for i in program.device_order[0]]
    assert env_order == [(t, s) for t in range(4) for s in range(2)]


def test_two_env_stages_overlap_stepping_with_inference() -> None:
    workflow = embodied_workflow(num_envs=8, num_steps=16)
    trace = embodied_trace(workflow)
    costs = fit(trace)
    times = {}
    for stages in (1, 2):
        plan = plan_from_yaml(
            f"placement: {{env: 0, rollout: 1, actor: 2}}\ngranularity: {{loop: {stages}}}", 8
        )
        times[stages] = simulate(lower(workflow, plan, trace.cluster), costs).iteration_s
    assert times[2] < times[1]


def test_streaming_lets_consumers_start_before_generation_ends() -> None:
    workflow = grpo_workflow()
    from factories import grpo_trace

    trace = grpo_trace(workflow, "1x8xH100", response_lengths=tuple(float(x) for x in range(100, 4100, 10)))
    costs = fit(trace)
    results = {}
    for m in (1, 8):
        plan = plan_from_yaml(
            f"placement: {{rollout: 0-3, reward: 4, inference: 5, actor: 6-7}}\ngranularity: {{rollout->reward: {m}, reward->inference: {m}, inference->actor: {m}}}",
            8,
        )
        timeline = simulate(lower(workflow, plan, CLUSTER), costs)
        generation_end = max(s.end_s for s in timeline.spans if s.name == "generate")
        first_train = min(s.start_s for s in timeline.spans if s.name == "train")
        results[m] = (timeline.iteration_s, first_train < generation_end)
    assert results[8][1] and not results[1][1]
    assert results[8][0] < results[1][0]


@pytest.mark.parametrize("stages", [3, 5])
def test_loop_granularity_must_divide_envs(stages: int) -> None:
    from rlinf.core.errors import ConfigError

    plan = plan_from_yaml(f"placement: {{env: 0, rollout: 1, actor: 2}}\ngranularity: {{loop: {stages}}}", 8)
    with pytest.raises(ConfigError, match=rf"granularity.loop={stages}: does not divide the 8 environments"):
        lower(embodied_workflow(num_envs=8), plan, CLUSTER)


def test_offload_on_one_group_keeps_streaming_elsewhere() -> None:
    """Offloading the actor (shared with inference) must not stop inference from streaming behind generation."""
    from factories import grpo_trace

    workflow = grpo_workflow(state_gib=10.0)
    trace = grpo_trace(workflow, "1x8xH100")
    text = (
        "placement: {rollout: 0-3, reward: 0-3, inference: 4-7, actor: 4-7}\n" + STREAM + "\noffload: [actor]"
    )
    program = lower(workflow, plan_from_yaml(text, 8), CLUSTER)
    timeline = simulate(program, fit(trace))
    generation_end = max(s.end_s for s in timeline.spans if s.name == "generate")
    first_infer = min(s.start_s for s in timeline.spans if s.name == "infer")
    assert first_infer < generation_end
    labels = [program.ops[i].label for i in program.device_order[4]]
    assert labels.count("actor.onload") == 1 and labels.count("actor.offload") == 1
    assert labels.index("actor.onload") > max(
        i for i, label in enumerate(labels) if label.startswith("inference.")
    )


def test_loop_steps_are_shared_only_where_env_and_policy_share_devices() -> None:
    workflow = embodied_workflow(num_envs=8, num_steps=4)
    for placement, shared in (
        ("{env: 0, rollout: 0, actor: 1}", True),
        ("{env: 0-1, rollout: 0-1, actor: 0-1}", True),
        ("{env: 0, rollout: 1, actor: 0}", False),
    ):
        program = lower(
            workflow, plan_from_yaml(f"placement: {placement}\ngranularity: {{loop: 2}}", 8), CLUSTER
        )
        flags = {op.shared for op in program.ops if op.name in ("act", "env_step")}
        assert flags == {shared}, placement
        assert not any(op.shared for op in program.ops if op.name not in ("act", "env_step"))


def test_a_loop_over_as_many_env_as_policy_replicas_is_pinned_one_stage_per_replica() -> None:
    """Stage ``s`` runs its env steps and policy calls on replica ``s % k`` of each, so the replica pairs step
    their own environments; each device's lane holds only its stages, in step order."""
    workflow = embodied_workflow(num_envs=8, num_steps=4)

    def loop_ops(placement: str, stages: int):
        plan = plan_from_yaml(f"placement: {placement}\ngranularity: {{loop: {stages}}}", 8)
        program = lower(workflow, plan, CLUSTER)
        return program, [op for op in program.ops if op.name in ("act", "env_step")]

    program, ops = loop_ops("{env: 0-1, rollout: 0-1, actor: 0}", 2)
    assert {(op.micro_batch, op.devices) for op in ops} == {(0, (0,)), (1, (1,))}
    assert all(op.shared and op.samples == 4 for op in ops)
    for device in (0, 1):
        mine = [
            program.ops[i] for i in program.device_order[device] if program.ops[i].name in ("act", "env_step")
        ]
        assert {op.micro_batch for op in mine} == {device}
        assert [(op.name, op.step) for op in mine] == [(n, t) for t in range(4) for n in ("act", "env_step")]
    _, ops = loop_ops("{env: 0-1, rollout: 0-1, actor: 0}", 4)
    assert {(op.micro_batch, op.devices) for op in ops} == {(s, (s % 2,)) for s in range(4)}
    # env and policy apart: stage s hands off between env device s and policy device 2 + s, over a link
    program, ops = loop_ops("{env: 0-1, rollout: 2-3, actor: 4}", 2)
    assert {(op.name, op.micro_batch, op.devices) for op in ops} == {
        ("env_step", 0, (0,)), ("env_step", 1, (1,)), ("act", 0, (2,)), ("act", 1, (3,))
    }  # fmt: skip
    assert not any(op.shared for op in ops)
    assert {
        op.link for op in program.ops if op.kind == "transfer" and op.component in ("env", "rollout")
    } == {"intra_node"}
    # Not pinned: one stage, unequal replica counts, or stages that are no multiple of the replicas.
    for placement, stages, devices in (
        ("{env: 0-1, rollout: 0-1, actor: 0}", 1, {(0, 1)}),
        ("{env: 0-1, rollout: 2, actor: 3}", 2, {(0, 1), (2,)}),
        ("{env: 0-3, rollout: 0-3, actor: 0}", 2, {(0, 1, 2, 3)}),
    ):
        _, ops = loop_ops(placement, stages)
        assert {op.devices for op in ops} == devices, placement
