"""Tests written to kill mutants that survived the mutation run over the lowering, the plan and the cost model
(``docs/mutation.md``): each asserts something the code's behaviour fixes and the earlier fast tests left free."""

from __future__ import annotations

import pytest
from factories import embodied_workflow, grpo_workflow

from rlinf.core import limits
from rlinf.core.cluster import GIB, parse_cluster
from rlinf.core.errors import ConfigError, InfeasiblePlanError
from rlinf.core.lowering import check_memory, lower
from rlinf.core.plan import parse_devices, plan_from_yaml

CLUSTER = parse_cluster("1x8xH100")
STREAM = "granularity: {rollout->reward: 4, reward->inference: 4, inference->actor: 4}"
APART = "placement: {rollout: 0-3, reward: 4, inference: 5, actor: 6-7}\n" + STREAM


def test_a_program_carries_its_plan_and_workflow_facts() -> None:
    workflow = grpo_workflow()
    plan = plan_from_yaml(APART, 8)
    program = lower(workflow, plan, CLUSTER)
    assert program.mode == "disaggregated" and program.plan_summary == plan.describe()
    assert program.unit == workflow.unit and program.units_per_iteration == workflow.units_per_iteration
    assert program.samples_per_iteration == workflow.batch_size == 256
    assert program.tokens_per_iteration == round(256 * 512.0)
    assert dict(program.component_devices) == {
        "rollout": (0, 1, 2, 3),
        "reward": (4,),
        "inference": (5,),
        "actor": (6, 7),
    }
    assert dict(program.state_bytes_per_device) == {
        c.name: c.state_bytes_per_device() for c in workflow.components
    }
    assert (
        program.max_staleness == 0 and program.trainer_side == () and program.buffered_bytes_per_device == ()
    )


def test_ops_record_their_tokens_peers_samples_and_steps() -> None:
    program = lower(grpo_workflow(), plan_from_yaml(APART, 8), CLUSTER)
    computes = [op for op in program.ops if op.kind == "compute"]
    assert all(op.tokens == round(op.samples * 512.0) and op.samples == 64 for op in computes)
    transfers = [op for op in program.ops if op.kind == "transfer"]
    assert {(op.component, op.peer) for op in transfers} == {
        ("rollout", "reward"),
        ("reward", "inference"),
        ("inference", "actor"),
    }
    assert all(op.samples == 64 and op.step == 0 for op in transfers)
    for op in transfers:  # the bytes of its micro-batch's samples over the edge
        per_sample = {"rollout": 4096, "reward": 4096, "inference": 8192}[op.component]
        assert op.num_bytes == 64 * per_sample
    # the weight sync follows the actor's last micro-batch: after every compute op of the actor
    sync = next(op for op in program.ops if op.kind == "sync_weights")
    actor = [op.index for op in computes if op.component == "actor"]
    assert max(actor) in sync.deps


def test_data_between_nodes_and_between_devices_and_cores_names_its_link() -> None:
    two_nodes = parse_cluster("2x4xH100")
    plan = plan_from_yaml("placement: {rollout: 0-3, reward: 4, inference: 5, actor: 6-7}\n" + STREAM, 8)
    program = lower(grpo_workflow(), plan, two_nodes)
    links = {(op.component, op.peer): op.link for op in program.ops if op.kind == "transfer"}
    assert links == {
        ("rollout", "reward"): "inter_node",
        ("reward", "inference"): "intra_node",
        ("inference", "actor"): "intra_node",
    }
    with_cores = parse_cluster("1x2xH100+4cores")
    plan = plan_from_yaml("placement: {env: 'cpu:0-1', rollout: 0, actor: 0-1}\n", 2, num_cores=4)
    program = lower(embodied_workflow(num_envs=8), plan, with_cores)
    env_ops = [op for op in program.ops if op.component == "env" and op.kind == "compute"]
    assert env_ops and all(op.pool == "cpu" for op in env_ops)
    assert {op.link for op in program.ops if op.kind == "transfer" and "env" in (op.component, op.peer)} == {
        "host"
    }


def test_the_lowering_checks_a_plans_cores_against_the_clusters() -> None:
    plan = plan_from_yaml("placement: {env: 'cpu:0-3', rollout: 0, actor: 0-1}\n", 2, num_cores=4)
    with pytest.raises(ConfigError, match="cpu"):
        lower(embodied_workflow(num_envs=8), plan, parse_cluster("1x2xH100+2cores"))


# ------------------------------------------------------------------------------------------------- memory
def _workflow(rollout_gib: float, actor_gib: float, inference_gib: float = 0.0):
    workflow = grpo_workflow()
    sizes = {"rollout": rollout_gib, "inference": inference_gib, "actor": actor_gib}
    return type(workflow)(
        **{
            **{f: getattr(workflow, f) for f in ("name", "edges", "weight_sync", "batch_size", "group_size")},
            "tokens_per_sample": workflow.tokens_per_sample,
            "components": [
                type(c)(name=c.name, role=c.role, state_bytes=int(sizes.get(c.name, 0.0) * GIB))
                for c in workflow.components
            ],
        }
    )


COLLOCATED = "placement: {rollout: all, reward: all, inference: all, actor: all}\n"


def test_resident_states_fit_a_device_up_to_its_memory_exactly() -> None:
    check_memory(_workflow(30, 50), plan_from_yaml(COLLOCATED, 8), CLUSTER)  # 80 GiB: just fits
    with pytest.raises(InfeasiblePlanError, match=r"must hold rollout 30.0 GiB \+ actor 50.5 GiB = 80.5 GiB"):
        check_memory(_workflow(30, 50.5), plan_from_yaml(COLLOCATED, 8), CLUSTER)


def test_offloaded_states_take_turns_only_the_largest_counts() -> None:
    offload = COLLOCATED + "offload: [rollout, actor]\n"
    check_memory(_workflow(70, 80), plan_from_yaml(offload, 8), CLUSTER)  # one at a time: 80 GiB
    check_memory(_workflow(65, 70, 10), plan_from_yaml(offload, 8), CLUSTER)  # 10 resident + 70: 80 GiB
    # resident plus the largest offloaded one, which the message names
    with pytest.raises(
        InfeasiblePlanError, match=r"must hold inference 10.0 GiB \+ actor 75.0 GiB = 85.0 GiB"
    ):
        check_memory(_workflow(65, 75, 10), plan_from_yaml(offload, 8), CLUSTER)
    one = COLLOCATED + "offload: [actor]\n"
    with pytest.raises(InfeasiblePlanError, match=r"rollout 30.0 GiB \+ actor 60.0 GiB = 90.0 GiB"):
        check_memory(_workflow(30, 60), plan_from_yaml(one, 8), CLUSTER)


def test_every_group_of_devices_is_checked_not_only_the_first() -> None:
    apart = "placement: {rollout: 0-3, reward: 0-3, inference: 4-7, actor: 4-7}\n"
    check_memory(_workflow(80, 40, 40), plan_from_yaml(apart, 8), CLUSTER)
    with pytest.raises(InfeasiblePlanError, match=r"device 4 .* inference 40.0 GiB \+ actor 45.0 GiB"):
        check_memory(_workflow(10, 45, 40), plan_from_yaml(apart, 8), CLUSTER)


def test_an_offloaded_loop_holds_env_and_policy_together() -> None:
    workflow = embodied_workflow()
    sizes = {"env": 40, "rollout": 41, "actor": 1}
    workflow = type(workflow)(
        **{
            **{
                f: getattr(workflow, f)
                for f in ("name", "edges", "loop", "weight_sync", "batch_size", "unit")
            },
            "components": [
                type(c)(name=c.name, role=c.role, state_bytes=sizes[c.name] * GIB)
                for c in workflow.components
            ],
        }
    )
    plan = plan_from_yaml("placement: {env: all, rollout: all, actor: all}\noffload: [env, rollout]\n", 8)
    with pytest.raises(InfeasiblePlanError, match=r"81.0 GiB"):  # 40 + 41 at once, though each alone fits
        check_memory(workflow, plan, CLUSTER)


# --------------------------------------------------------------------------------------------------- plans
def test_device_ids_stop_before_the_device_limit() -> None:
    bound = limits.current().max_devices
    assert parse_devices("0-7", 8, "actor") == tuple(range(8))
    assert parse_devices("0, 2", 8, "actor") == (0, 2)  # comma separated, spaces allowed
    assert parse_devices([bound - 1], 8, "actor") == (bound - 1,)
    for beyond in ([bound], f"0-{bound}", f"{bound}"):
        with pytest.raises(ConfigError, match="actor"):
            parse_devices(beyond, 8, "actor")
    with pytest.raises(ConfigError, match=r"actor=-1: negative device id"):
        parse_devices([-1], 8, "actor")
    with pytest.raises(ConfigError, match=r"actor=True: is not a device range"):
        parse_devices(True, 8, "actor")
    with pytest.raises(ConfigError, match=r"actor='all': names no device"):
        parse_devices("all", 0, "actor")


# ------------------------------------------------------------------------------------------------ the curve
def test_a_curve_interpolates_inside_and_extrapolates_outside_with_its_end_slopes() -> None:
    from rlinf.core.costs import Curve

    curve = Curve(devices=1, xs=(2.0, 4.0, 8.0), ys=(1.0, 3.0, 4.0))
    assert curve(2.0) == (1.0, False) and curve(4.0) == (3.0, False) and curve(8.0) == (4.0, False)
    assert curve(3.0) == (pytest.approx(2.0), False)  # between points: linear
    assert curve(6.0) == (pytest.approx(3.5), False)
    assert curve(1.0) == (
        pytest.approx(0.0),
        True,
    )  # below: the first segment's slope (1 per sample), not below 0
    assert curve(1.5) == (pytest.approx(0.5), True)
    assert curve(0.5) == (0.0, True)
    assert curve(10.0) == (pytest.approx(4.5), True)  # above: the last segment's slope (0.25 per sample)
    falling = Curve(devices=1, xs=(2.0, 4.0), ys=(3.0, 1.0))
    assert falling(6.0) == (1.0, True)  # a falling end does not make more samples cheaper
    assert falling(1.0) == (pytest.approx(4.0), True)
    one = Curve(devices=1, xs=(4.0,), ys=(2.0,))
    assert (
        one(4.0) == (2.0, False)
        and one(8.0) == (pytest.approx(4.0), True)
        and one(2.0) == (pytest.approx(1.0), True)
    )
    zero = Curve(devices=1, xs=(0.0,), ys=(2.0,))
    assert zero(3.0) == (2.0, True)  # no samples per replica measured: a fixed cost


def test_device_ranges_print_compactly_and_read_back() -> None:
    from rlinf.core.plan import format_devices

    assert format_devices((0, 1, 2, 3, 8)) == "0-3,8"
    assert format_devices((5,)) == "5" and format_devices((0, 2, 4)) == "0,2,4"
    assert format_devices((1, 2, 5, 6, 7)) == "1-2,5-7"
    for devices in [(0, 1, 2, 3, 8), (5,), (0, 2, 4), (1, 2, 5, 6, 7)]:
        assert parse_devices(format_devices(devices), 16, "x") == devices


def test_a_plan_writes_every_setting_it_holds() -> None:
    plan = plan_from_yaml(
        "placement: {rollout: 0-3, reward: 0-3, inference: 4-5, actor: 6-7}\ndata_parallel: {actor: 2}\n"
        "offload: [rollout, reward]\n" + STREAM,
        8,
    )
    data = plan.to_dict()
    assert data["data_parallel"] == {"actor": 2} and data["offload"] == ["reward", "rollout"]
    assert data["granularity"] == {"rollout->reward": 4, "reward->inference": 4, "inference->actor": 4}
    assert data["placement"] == {"rollout": "0-3", "reward": "0-3", "inference": "4-5", "actor": "6-7"}
    assert plan_from_yaml(plan.to_yaml(), 8) == plan
    assert plan.placement("inference").devices == (4, 5)
    with pytest.raises(ConfigError, match="critic"):
        plan.placement("critic")


def test_a_plan_is_checked_against_the_clusters_devices_and_the_workflows_groups() -> None:
    workflow = grpo_workflow(num_prompts=4, group_size=4)  # 4 prompt groups
    fits = plan_from_yaml("placement: {rollout: 0-3, reward: 4, inference: 5, actor: 6-7}\n", 8)
    resolved = fits.validate_for(workflow, 8)
    derived = {p.component: p.data_parallel_size for p in resolved.placements}  # from the devices
    assert derived == {"rollout": 4, "reward": 1, "inference": 1, "actor": 2}
    with pytest.raises(ConfigError, match=r"placement.actor=8: device out of range"):
        plan_from_yaml("placement: {rollout: 0-3, reward: 4, inference: 5, actor: 6-8}\n", 16).validate_for(
            workflow, 8
        )
    ok = plan_from_yaml(
        "placement: {rollout: all, reward: all, inference: all, actor: all}\n"
        "granularity: {rollout->reward: 4, reward->inference: 4, inference->actor: 4}\n",
        8,
    )
    ok.validate_for(workflow, 8)  # as many micro-batches as groups
    too_fine = plan_from_yaml(
        "placement: {rollout: all, reward: all, inference: all, actor: all}\n"
        "granularity: {rollout->reward: 5, reward->inference: 4, inference->actor: 4}\n",
        8,
    )
    with pytest.raises(ConfigError, match=r"granularity.rollout->reward=5: exceeds the 4 prompt groups"):
        too_fine.validate_for(workflow, 8)
    cores = plan_from_yaml("placement: {env: 'cpu:0-3', rollout: 0, actor: 0-1}\n", 2, num_cores=4)
    cores.validate_for(embodied_workflow(num_envs=8), 2, 4)  # cpu:3 of 4 cores
    with pytest.raises(ConfigError, match=r"placement.env='cpu:3': core out of range"):
        cores.validate_for(embodied_workflow(num_envs=8), 2, 3)


def test_offloading_a_component_that_shares_no_device_warns() -> None:
    from rlinf.core.errors import RlinfWarning

    workflow = grpo_workflow()
    alone = plan_from_yaml(
        "placement: {rollout: 0-3, reward: 4, inference: 4, actor: 6-7}\noffload: [actor]\n", 8
    )
    with pytest.warns(RlinfWarning, match="offload.actor: actor shares no device"):
        alone.validate_for(workflow, 8)
    shared = plan_from_yaml(
        "placement: {rollout: 0-3, reward: 4, inference: 4, actor: 6-7}\noffload: [inference]\n", 8
    )
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RlinfWarning)
        shared.validate_for(workflow, 8)  # shares device 4 with the reward: no warning


# ------------------------------------------------------------------------------------------ the cost model
def test_data_movement_is_priced_by_its_link_when_nothing_was_measured() -> None:
    from factories import grpo_trace

    from rlinf.core.costs import LINK_LATENCY_S, fit
    from rlinf.core.program import Op

    costs = fit(grpo_trace(cluster_spec="2x8xH100"))
    links, device = costs.cluster.links, costs.cluster.device
    size = 10**9

    def move(kind: str, link: str) -> float:
        op = Op(index=0, kind=kind, component="rollout", name=kind, num_bytes=size, link=link, devices=(0,))
        return costs.movement_seconds(op)

    assert move("transfer", "local") == 0.0  # the same devices: nothing moves
    assert move("transfer", "intra_node") == pytest.approx(
        LINK_LATENCY_S["intra_node"] + size / links.intra_node_bytes_per_s
    )
    assert move("transfer", "inter_node") == pytest.approx(
        LINK_LATENCY_S["inter_node"] + size / links.inter_node_bytes_per_s
    )
    assert move("transfer", "host") == pytest.approx(
        LINK_LATENCY_S["host"] + size / links.host_device_bytes_per_s
    )
    for kind in ("onload", "offload"):  # between host and device memory, whatever the link says
        assert move(kind, "local") == pytest.approx(size / links.host_device_bytes_per_s)
    assert move("sync_weights", "local") == pytest.approx(size / device.memory_bandwidth_bytes_per_s)
    assert len({move("transfer", link) for link in ("intra_node", "inter_node", "host")}) == 3


def test_a_movement_measured_at_two_sizes_or_more_is_priced_from_its_curve_over_bytes() -> None:
    from factories import grpo_trace

    from rlinf.core.costs import fit
    from rlinf.core.program import Op
    from rlinf.core.trace import CostSample

    trace = grpo_trace()
    moves = [
        CostSample(component="rollout", op="transfer", devices=1, samples=1, seconds=s, num_bytes=b)
        for b, s in ((1000, 1.0), (1000, 3.0), (3000, 4.0), (5000, 5.0))
    ]
    import attrs

    costs = fit(attrs.evolve(trace, samples=trace.samples + tuple(moves)), statistic="mean")
    curve = costs.movement_curves[("rollout", "transfer")]
    assert curve.xs == (1000.0, 3000.0, 5000.0) and curve.ys == (2.0, 4.0, 5.0)  # the mean at each size

    def seconds(num_bytes: int) -> float:
        op = Op(
            index=0,
            kind="transfer",
            component="rollout",
            name="transfer",
            num_bytes=num_bytes,
            link="intra_node",
        )
        return costs.seconds(op)

    assert seconds(2000) == pytest.approx(3.0) and seconds(5000) == pytest.approx(5.0)


def test_plans_load_from_files_hash_by_value_and_name_their_devices(tmp_path) -> None:
    from rlinf.core.plan import load_plan

    path = tmp_path / "plan.yaml"
    path.write_text(APART)
    plan = load_plan(path, 8)
    assert plan == plan_from_yaml(APART, 8) and hash(plan) == hash(plan_from_yaml(APART, 8))
    assert len({plan, plan_from_yaml(APART, 8), plan_from_yaml(COLLOCATED + STREAM, 8)}) == 2
    assert plan.devices_of("rollout") == (0, 1, 2, 3) and plan.devices_of("actor") == (6, 7)
    path.write_text("placement: {rollout: x-y}\n")
    with pytest.raises(ConfigError, match=r"rollout.*is not a device range"):
        load_plan(path, 8)
