"""Every validation path of the core values raises a ConfigError naming the field, the value and the fix."""

from __future__ import annotations

import pytest
from factories import grpo_trace, grpo_workflow

from rlinf.core.cluster import GIB, DeviceSpec, Links, cluster_from_dict, parse_cluster
from rlinf.core.errors import ConfigError, InfeasiblePlanError
from rlinf.core.lowering import lower
from rlinf.core.plan import Placement, Plan, parse_devices, plan_from_yaml
from rlinf.core.trace import CostSample, load_trace, trace_from_dict
from rlinf.core.workflow import Component, Edge, Loop, Workflow, workflow_from_dict


def test_config_error_message_has_field_value_and_fix() -> None:
    error = ConfigError("plan.placement.actor", 99, "device out of range", "use ids below 8")
    assert str(error) == "plan.placement.actor=99: device out of range; fix: use ids below 8"


def test_a_long_value_keeps_its_start_and_its_end() -> None:
    """A long path is cut in the middle: the file name (and a JSON error's line number) at its end stays."""
    path = "/tmp/" + "deep/" * 30 + "broken.json:2:12"
    message = str(ConfigError("trace", path, "is not valid JSON", "fix the JSON syntax"))
    shown = message.removeprefix("trace=").split(": is not valid JSON")[0]
    assert len(shown) == 80 and shown.startswith("'/tmp/deep/") and shown.endswith("/broken.json:2:12'")
    assert "..." in shown and message.endswith("; fix: fix the JSON syntax")


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("8xB9000", r"cluster.device='B9000': is not a known device type; fix: use one of"),
        ("eight H100s", r"cluster='eight H100s': is not a cluster spec"),
        ("0x8xH100", r"cluster.num_nodes=0: must be an integer >= 1"),
        ("missing.yaml", r"cluster='missing.yaml': file does not exist"),
    ],
)
def test_bad_cluster_specs(spec: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_cluster(spec)


def test_cluster_spec_parses_nodes_devices_and_type() -> None:
    cluster = parse_cluster("4x8xH100")
    assert (cluster.num_nodes, cluster.devices_per_node, cluster.num_devices) == (4, 8, 32)
    assert cluster.node_of(9) == 1
    assert parse_cluster("2xcpu").device.name == "CPU"


def test_cluster_from_yaml_file(tmp_path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "num_nodes: 2\ndevices_per_node: 4\ndevice: {name: X1, memory_bytes: 1000, peak_flops: 1.0e+12, "
        "memory_bandwidth_bytes_per_s: 1.0e+9}\nlinks: {intra_node_bytes_per_s: 1.0e+9, inter_node_bytes_per_s: 1.0e+8, "
        "host_device_bytes_per_s: 1.0e+9}\n"
    )
    cluster = parse_cluster(str(path))
    assert cluster.num_devices == 8 and cluster.device.name == "X1"
    path.write_text(path.read_text().replace("1.0e+12", "1.0e12"))
    with pytest.raises(ConfigError, match=r"device.peak_flops='1.0e12': must be a number; fix: .*1.0e\+12"):
        parse_cluster(str(path))
    path.write_text("num_nodes: [1\n")
    with pytest.raises(ConfigError, match=r"is not valid YAML"):
        parse_cluster(str(path))


def test_cluster_dict_errors() -> None:
    with pytest.raises(ConfigError, match=r"cluster.devices_per_node=None: is missing"):
        cluster_from_dict({"num_nodes": 1, "device": "H100"})
    with pytest.raises(ConfigError, match=r"cluster.gpus=\['gpus'\]: unknown key"):
        cluster_from_dict({"num_nodes": 1, "devices_per_node": 1, "device": "H100", "gpus": 3})
    with pytest.raises(ConfigError, match=r"device.memory_bytes=-1: must be > 0"):
        DeviceSpec(name="X", memory_bytes=-1, peak_flops=1.0, memory_bandwidth_bytes_per_s=1.0)
    with pytest.raises(ConfigError, match=r"links.inter_node_bytes_per_s=0: must be > 0"):
        Links(intra_node_bytes_per_s=1.0, inter_node_bytes_per_s=0, host_device_bytes_per_s=1.0)


def test_workflow_validation() -> None:
    with pytest.raises(ConfigError, match=r"role='learner': unknown role; fix: use one of"):
        Component(name="x", role="learner")
    with pytest.raises(ConfigError, match=r"state_bytes=-5: must be >= 0"):
        Component(name="x", role="actor", state_bytes=-5)
    actor = Component(name="actor", role="actor")
    with pytest.raises(ConfigError, match=r"edges.ghost->actor='ghost': names an unknown component"):
        Workflow(name="w", components=[actor], edges=[Edge(src="ghost", dst="actor")])
    with pytest.raises(ConfigError, match=r"workflow.components=\['actor'\]: duplicate component names"):
        Workflow(name="w", components=[actor, actor])
    with pytest.raises(ConfigError, match=r"workflow.batch_size=10: is not a multiple of group_size=4"):
        Workflow(name="w", components=[actor], batch_size=10, group_size=4)
    a, b = Component(name="a", role="rollout"), Component(name="b", role="actor")
    with pytest.raises(ConfigError, match=r"form a cycle"):
        Workflow(name="w", components=[a, b], edges=[Edge(src="a", dst="b"), Edge(src="b", dst="a")])
    with pytest.raises(ConfigError, match=r"edges.a->b.kind='pipe': unknown edge kind"):
        Edge(src="a", dst="b", kind="pipe")
    with pytest.raises(ConfigError, match=r"loop.num_steps=0: must be > 0"):
        Loop(env="a", policy="b", num_steps=0)
    with pytest.raises(ConfigError, match=r"workflow.unit='samples': an embodied loop counts env steps"):
        Workflow(name="w", components=[a, b], loop=Loop(env="a", policy="b", num_steps=2))


def test_workflow_dict_round_trip_and_errors() -> None:
    workflow = grpo_workflow()
    assert workflow_from_dict(workflow.to_dict()) == workflow
    data = workflow.to_dict()
    data["components"][0]["colour"] = "red"
    with pytest.raises(ConfigError, match=r"workflow.components\[0\].colour=\['colour'\]: unknown key"):
        workflow_from_dict(data)
    with pytest.raises(ConfigError, match=r"workflow.components=None: is missing"):
        workflow_from_dict({"name": "w"})


def test_device_ranges() -> None:
    assert parse_devices("0-3,8", 16, "f") == (0, 1, 2, 3, 8)
    assert parse_devices("all", 4, "f") == (0, 1, 2, 3)
    assert parse_devices([1, "4-5"], 8, "f") == (1, 4, 5)
    assert parse_devices(3, 8, "f") == (3,)
    with pytest.raises(ConfigError, match=r"placement.actor='7-2': range ends before it starts"):
        parse_devices("7-2", 8, "placement.actor")
    with pytest.raises(ConfigError, match=r"placement.actor='zero': is not a device range"):
        parse_devices("zero", 8, "placement.actor")


def test_plan_yaml_round_trip_and_mode() -> None:
    text = "placement:\n  rollout: 0-3\n  reward: 0-3\n  inference: 4-7\n  actor: all\ngranularity:\n  rollout->reward: 4\noffload: [actor]\n"
    plan = plan_from_yaml(text, 8)
    assert plan.mode == "hybrid"
    assert plan.devices_of("actor") == tuple(range(8))
    assert plan_from_yaml(plan.to_yaml(), 8) == plan
    everything = plan_from_yaml("placement: {a: all, b: all}", 4)
    assert everything.mode == "collocated"
    split = plan_from_yaml("placement: {a: 0-1, b: 2-3}", 4)
    assert split.mode == "disaggregated"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("placement: {rollout: 0-3", r"plan=.*is not valid YAML"),
        ("granularity: {rollout->reward: 2}", r"plan.placement=None: is missing"),
        (
            "placement: {a: all}\nmode: disaggregated",
            r"plan.mode='disaggregated': does not match the placement, which is collocated",
        ),
        ("placement: {a: all}\ncolour: red", r"plan.colour=\['colour'\]: unknown key"),
        ("placement: {a: all}\ngranularity: {x: 0}", r"granularity.x=0: must be an integer >= 1"),
        ("placement: {a: all}\noffload: actor", r"plan.offload='actor': must be a list"),
    ],
)
def test_bad_plan_yaml(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        plan_from_yaml(text, 4)


def _grpo_plan(**overrides: str) -> Plan:
    placement = {"rollout": "0-3", "reward": "0-3", "inference": "4-7", "actor": "all"} | overrides
    return plan_from_yaml(
        "placement:\n"
        + "".join(f"  {k}: {v}\n" for k, v in placement.items())
        + "offload: [rollout, actor]\n",
        8,
    )


def test_plan_against_workflow_errors() -> None:
    workflow = grpo_workflow()
    cluster = parse_cluster("1x8xH100")
    with pytest.raises(ConfigError, match=r"placement.critic='critic': unknown component; fix: use one of"):
        lower(
            workflow,
            plan_from_yaml(
                "placement: {rollout: all, reward: all, inference: all, actor: all, critic: all}", 8
            ),
            cluster,
        )
    with pytest.raises(ConfigError, match=r"placement.inference=None: component is not placed"):
        lower(workflow, plan_from_yaml("placement: {rollout: all, reward: all, actor: all}", 8), cluster)
    with pytest.raises(
        ConfigError, match=r"placement.inference=9: device out of range \(the cluster has devices 0-7\)"
    ):
        lower(workflow, _grpo_plan(inference="4-9"), cluster)
    with pytest.raises(
        ConfigError, match=r"granularity.actor->rollout='actor->rollout': not a stream edge or loop"
    ):
        lower(
            workflow,
            plan_from_yaml(
                "placement: {rollout: all, reward: all, inference: all, actor: all}\ngranularity: {actor->rollout: 2}",
                8,
            ),
            cluster,
        )
    with pytest.raises(ConfigError, match=r"granularity.rollout->reward=128: exceeds the 64 prompt groups"):
        lower(
            workflow,
            plan_from_yaml(
                "placement: {rollout: all, reward: all, inference: all, actor: all}\ngranularity: {rollout->reward: 128}",
                8,
            ),
            cluster,
        )


def test_model_parallel_divisibility() -> None:
    workflow = Workflow(name="w", components=[Component(name="actor", role="actor", model_parallel_size=4)])
    with pytest.raises(
        ConfigError, match=r"placement.actor=6: device count is not a multiple of model_parallel_size=4"
    ):
        lower(workflow, plan_from_yaml("placement: {actor: 0-5}", 8), parse_cluster("8xH100"))


def test_plan_that_needs_offload_is_infeasible_without_it() -> None:
    workflow = grpo_workflow(state_gib=30.0)  # rollout 30 + inference 30 + actor 60 GiB per device
    cluster = parse_cluster("1x8xH100")
    everything = "placement: {rollout: all, reward: all, inference: all, actor: all}"
    with pytest.raises(
        InfeasiblePlanError,
        match=r"device 0 \(H100, 80.0 GiB\) must hold rollout 30.0 GiB \+ inference 30.0 GiB \+ actor 60.0 GiB = 120.0 GiB at once; fix: add 'offload: \[actor, inference, rollout\]' to the plan",
    ):
        lower(workflow, plan_from_yaml(everything, 8), cluster)
    program = lower(
        workflow, plan_from_yaml(everything + "\noffload: [rollout, inference, actor]", 8), cluster
    )
    assert {op.kind for op in program.ops} >= {"onload", "offload"}


def test_component_larger_than_device() -> None:
    workflow = Workflow(name="w", components=[Component(name="actor", role="actor", state_bytes=200 * GIB)])
    with pytest.raises(
        InfeasiblePlanError,
        match=r"component actor needs 200.0 GiB per device .* raise its model_parallel_size",
    ):
        lower(workflow, plan_from_yaml("placement: {actor: all}", 8), parse_cluster("8xH100"))


def test_trace_validation(tmp_path) -> None:
    with pytest.raises(
        ConfigError, match=r"samples\[actor.train\].seconds=-1.0: must be a finite number >= 0"
    ):
        CostSample(component="actor", op="train", devices=1, samples=4, seconds=-1.0)
    with pytest.raises(ConfigError, match=r"samples\[actor.fly\].op='fly': unknown op"):
        CostSample(component="actor", op="fly", devices=1, samples=4, seconds=1.0)
    data = grpo_trace().to_dict()
    del data["provenance"]
    with pytest.raises(ConfigError, match=r"trace.provenance=None: is missing"):
        trace_from_dict(data)
    data = grpo_trace().to_dict()
    data["samples"][0]["component"] = "ghost"
    with pytest.raises(ConfigError, match=r"trace.samples\[0\].component='ghost': unknown component"):
        trace_from_dict(data)
    data = grpo_trace().to_dict()
    data["schema"] = "rlinf.trace/v0"
    with pytest.raises(ConfigError, match=r"trace.schema='rlinf.trace/v0': unsupported schema"):
        trace_from_dict(data)
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": ')
    with pytest.raises(ConfigError, match=r"trace='.*bad.json:1:\d+': is not valid JSON"):
        load_trace(bad)
    with pytest.raises(ConfigError, match=r"file does not exist"):
        load_trace(tmp_path / "none.json")


def test_trace_save_load_round_trip(tmp_path) -> None:
    trace = grpo_trace(response_lengths=(100.0, 200.0))
    path = tmp_path / "t.json"
    trace.save(path)
    assert load_trace(path) == trace
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary file left behind


def test_placement_rejects_empty_and_duplicates() -> None:
    with pytest.raises(ConfigError, match=r"placement.a=\(\): has no devices"):
        Placement(component="a", devices=[])
    with pytest.raises(ConfigError, match=r"a component is placed twice"):
        Plan(placements=[Placement(component="a", devices=[0]), Placement(component="a", devices=[1])])


def test_offloaded_loop_components_count_together() -> None:
    from factories import embodied_workflow

    workflow = embodied_workflow()  # env 1 GiB, rollout 1 GiB, actor 2 GiB
    cluster = cluster_from_dict(
        {
            "num_nodes": 1,
            "devices_per_node": 1,
            "device": {
                "name": "small",
                "memory_bytes": int(2.5 * GIB),
                "peak_flops": 1e12,
                "memory_bandwidth_bytes_per_s": 1e10,
            },
            "links": {
                "intra_node_bytes_per_s": 1e9,
                "inter_node_bytes_per_s": 1e9,
                "host_device_bytes_per_s": 1e9,
            },
        }
    )
    everything = "placement: {env: all, rollout: all, actor: all}\noffload: [env, rollout, actor]"
    # env and rollout are onloaded together for the whole loop: 1 + 1 GiB fits in 2.5 GiB, 1.8 + 1 GiB does not.
    lower(workflow, plan_from_yaml(everything, 1), cluster)
    bigger = attrs_evolve_component(workflow, "env", int(1.8 * GIB))
    with pytest.raises(InfeasiblePlanError, match=r"device 0 \(small, 2.5 GiB\) must hold"):
        lower(bigger, plan_from_yaml(everything, 1), cluster)


def attrs_evolve_component(workflow: Workflow, name: str, state_bytes: int) -> Workflow:
    import attrs

    components = [
        attrs.evolve(c, state_bytes=state_bytes) if c.name == name else c for c in workflow.components
    ]
    return attrs.evolve(workflow, components=components)
