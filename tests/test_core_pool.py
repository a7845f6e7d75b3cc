"""Two kinds of device in one cluster: CPU cores beside the GPUs (the core pool) for the components that need
no GPU. Plans name them (``env: cpu:0-3``), the lowering numbers them after the devices and links them by the
host link, memory is checked per pool, costs are fitted and priced per pool, the planner searches both pools,
probes measure both, and the executor runs a plan with cores (here with CPU devices standing in for the GPU: the
same code path, and on a machine without a core pool nothing changes)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import attrs
import pytest
from factories import SYNTHETIC, embodied_workflow, linear_samples

from executor.devices import run_devices
from planner import search
from planner.brute_force import brute_force
from planner.space import build_space
from rlinf.app.jobs import load_job_config
from rlinf.app.plan_choice import PlanChoice
from rlinf.app.request import RunRequest
from rlinf.app.runner import run
from rlinf.cli import main
from rlinf.core.cluster import CPU_MACHINE, GIB, cluster_from_dict, parse_cluster
from rlinf.core.costs import fit
from rlinf.core.errors import ConfigError, ExtrapolationWarning, InfeasiblePlanError
from rlinf.core.lowering import lower
from rlinf.core.plan import plan_from_yaml
from rlinf.core.trace import Trace, load_trace
from rlinf.core.workflow import Component


def cpu_ok_workflow(num_envs: int = 8, num_steps: int = 4):
    workflow = embodied_workflow(num_envs=num_envs, num_steps=num_steps)
    env = attrs.evolve(workflow.component("env"), cpu_ok=True)
    return attrs.evolve(workflow, components=(env, *workflow.components[1:]))


def test_a_cluster_counts_its_cores_after_its_devices_and_round_trips() -> None:
    cluster = parse_cluster("2x4xH100+6cores")
    assert (cluster.num_devices, cluster.num_cores, cluster.num_ids) == (8, 12, 20)
    assert (
        cluster.global_id("cpu", 7) == 15 and cluster.pool_of(15) == "cpu" and cluster.pool_of(7) == "device"
    )
    assert cluster.node_of(15) == 1 and cluster.node_of(9) == 0 and cluster.spec_of(15).name == "CPU"
    assert cluster.spec() == "2x4xH100+6cores" and cluster_from_dict(cluster.to_dict()) == cluster
    assert "cores_per_node" not in parse_cluster("8xH100").to_dict()


def test_a_plan_places_a_component_on_cores_and_checks_the_pool() -> None:
    workflow = cpu_ok_workflow()
    plan = plan_from_yaml("placement: {env: 'cpu:0-3', rollout: 0, actor: 0}\n", 1, num_cores=4)
    assert plan.placement("env").pool == "cpu" and plan.placement("env").devices == (0, 1, 2, 3)
    assert plan.mode == "hybrid" and plan.num_logical == (1, 4)
    assert "env: cpu:0-3" in plan.to_yaml() and "env@cpu:0-3" in plan.describe()
    assert plan_from_yaml(plan.to_yaml(), 1, num_cores=4) == plan
    with pytest.raises(
        ConfigError, match=r"placement.env='cpu:3': core out of range \(the cluster has cores cpu:0-1\)"
    ):
        plan.validate_for(workflow, 1, 2)
    with pytest.raises(ConfigError, match="the cluster has no CPU cores beside its devices.*--cpu-devices"):
        plan.validate_for(workflow, 1, 0)
    # Device 0 and core 0 are different devices: the env shares nothing with the others.
    same_ids = plan_from_yaml("placement: {env: 'cpu:0', rollout: 0, actor: 0}\n", 1, num_cores=1)
    assert not same_ids.shares_device("env", "rollout") and same_ids.shares_device("rollout", "actor")


def test_the_lowering_numbers_cores_after_devices_and_moves_data_over_the_host_link() -> None:
    workflow = cpu_ok_workflow()
    cluster = parse_cluster("1xH100+4cores")
    plan = plan_from_yaml(
        "placement: {env: 'cpu:0-3', rollout: 0, actor: 0}\ngranularity: {loop: 2}\n", 1, num_cores=4
    )
    program = lower(workflow, plan, cluster)
    assert program.num_devices == 5 and program.devices_of("env") == (1, 2, 3, 4)
    steps = [op for op in program.ops if op.name == "env_step"]
    assert steps and all(op.pool == "cpu" and op.devices == (1, 2, 3, 4) for op in steps)
    assert all(op.pool == "device" for op in program.ops if op.name in ("act", "train"))
    links = {op.link for op in program.ops if op.kind == "transfer" and "env" in (op.component, op.peer)}
    assert links == {"host"}


def test_memory_is_checked_against_the_device_of_each_pool() -> None:
    workflow = cpu_ok_workflow()
    heavy = attrs.evolve(workflow.component("env"), state_bytes=20 * GIB)  # fits an H100, not a core (8 GiB)
    workflow = attrs.evolve(workflow, components=(heavy, *workflow.components[1:]))
    cluster = parse_cluster("1xH100+2cores")
    on_cores = plan_from_yaml("placement: {env: 'cpu:0-1', rollout: 0, actor: 0}\n", 1, num_cores=2)
    with pytest.raises(InfeasiblePlanError, match=r"component env needs 20.0 GiB .* more than a CPU holds"):
        lower(workflow, on_cores, cluster)
    lower(workflow, plan_from_yaml("placement: {env: 0, rollout: 0, actor: 0}\n", 1), cluster)


def test_costs_are_fitted_per_pool_and_borrowed_from_the_other_pool_with_a_warning() -> None:
    workflow = cpu_ok_workflow()
    samples = (
        linear_samples("env", "env_step", 0.004, 0.001, max_devices=1)
        + linear_samples("env", "env_step", 0.001, 0.001, max_devices=4, pool="cpu")
        + linear_samples("rollout", "act", 0.003, 0.0002, max_devices=1)
        + linear_samples("actor", "train", 0.05, 0.0005, max_devices=1)
    )
    trace = Trace(
        workflow=workflow, cluster=parse_cluster("1xH100+4cores"), provenance=SYNTHETIC, samples=samples
    )
    costs = fit(trace)
    assert costs.compute_seconds("env", "env_step", 1, 1) == pytest.approx(0.005)
    assert costs.compute_seconds("env", "env_step", 1, 1, pool="cpu") == pytest.approx(0.002)
    with pytest.warns(
        ExtrapolationWarning, match="prices rollout.act on CPU cores beside the GPUs from samples"
    ):
        assert costs.compute_seconds("rollout", "act", 1, 1, pool="cpu") == pytest.approx(0.0032)
    assert (
        '"pool": "cpu"' in json.dumps(trace.to_dict()) and trace.to_dict()["samples"][0].get("pool") is None
    )


def core_trace(num_cores: int) -> Trace:
    """Env steps as fast per environment on a core as on the GPU, policy and training on the GPU only."""
    workflow = cpu_ok_workflow()
    samples = (
        linear_samples("env", "env_step", 0.002, 0.001, max_devices=1)
        + linear_samples("env", "env_step", 0.002, 0.001, max_devices=num_cores, pool="cpu")
        + linear_samples("rollout", "act", 0.003, 0.0002, max_devices=1)
        + linear_samples("actor", "train", 0.05, 0.0005, max_devices=1)
    )
    cluster = parse_cluster(f"1xH100+{num_cores}cores")
    return Trace(workflow=workflow, cluster=cluster, provenance=SYNTHETIC, samples=samples)


def test_the_planner_puts_the_env_on_cores_when_that_is_faster_and_brute_force_agrees() -> None:
    trace = core_trace(4)
    cluster = trace.cluster
    costs = fit(trace)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        result = search(trace.workflow, cluster, costs, max_granularity=4, max_loop_stages=4)
        space = build_space(trace.workflow, 1, num_cores=4, max_granularity=4, max_loop_stages=4)
        exhaustive = brute_force(trace.workflow, cluster, costs, space)
        alone = search(trace.workflow, attrs.evolve(cluster, cores_per_node=0), costs, max_loop_stages=4)
    assert result.plan.pool_of("env") == "cpu" and result.plan.pool_of("rollout") == "device"
    assert exhaustive.best.plan.pool_of("env") == "cpu"
    assert result.best.iteration_s <= exhaustive.best.iteration_s * 1.005
    assert any(p.pool == "cpu" for p in exhaustive.best.plan.placements)
    assert all(p.pool == "device" for p in alone.plan.placements)
    assert result.best.iteration_s < alone.best.iteration_s  # the cores add capacity
    assert space.count() > build_space(trace.workflow, 1, max_granularity=4, max_loop_stages=4).count()


def test_without_a_core_pool_the_space_is_what_it_was() -> None:
    workflow = cpu_ok_workflow()
    with_flag = build_space(workflow, 4, max_granularity=4)
    without_flag = build_space(embodied_workflow(), 4, max_granularity=4)
    assert with_flag.partitions == without_flag.partitions and with_flag.count() == without_flag.count()
    assert set(with_flag.pools) == {("device",) * len(p) for p in with_flag.partitions}


def test_probes_measure_the_components_that_need_no_gpu_on_cores() -> None:
    job, config = load_job_config("examples/hopper_ppo.yaml", ["num_steps=8"])
    machine = attrs.evolve(CPU_MACHINE, num_cores=2)
    probes = [plan for plan, _ in job.probes(1, config, machine=machine)]
    on_cores = [plan for plan in probes if plan.pool_of("env") == "cpu"]
    assert on_cores and {len(plan.placement("env").devices) for plan in on_cores} >= {1, 2}
    assert all(plan.pool_of("rollout") == "device" for plan in probes)
    assert not any(p.pool_of("env") == "cpu" for p, _ in job.probes(1, config))


def computed(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.endswith("_s")} for line in lines]


def test_a_run_with_the_env_on_a_core_computes_what_the_same_layout_on_devices_computes(
    tmp_path: Path,
) -> None:
    """The env on core cpu:0 beside device 0 runs the code a GPU machine runs with its envs on cores (the device
    is a CPU core here); it computes exactly what the env on device 1 computes, and its samples record the pool."""
    job, config = load_job_config("examples/hopper_ppo.yaml", ["num_steps=8", "num_epochs=1"], iterations=2)
    machine = attrs.evolve(CPU_MACHINE, num_cores=1)
    on_core = plan_from_yaml(
        "placement: {env: 'cpu:0', rollout: 0, actor: 0}\ngranularity: {loop: 2}\n", 1, num_cores=1
    )
    on_device = plan_from_yaml("placement: {env: 1, rollout: 0, actor: 0}\ngranularity: {loop: 2}\n", 2)
    core = RunRequest(job=job, config=config, out=tmp_path / "core", machine=machine, progress=False)
    run(core, PlanChoice.given(on_core, 1, run_devices("cpu", 1, (0,), 1)))
    run(
        RunRequest(job=job, config=config, out=tmp_path / "device", progress=False),
        PlanChoice.given(on_device, 2),
    )
    assert computed(tmp_path / "core") == computed(tmp_path / "device")
    trace = load_trace(tmp_path / "core" / "trace.json")
    assert trace.cluster.num_cores == 1
    assert {s.pool for s in trace.samples if s.op == "env_step"} == {"cpu"}
    assert {s.pool for s in trace.samples if s.op in ("act", "train")} == {"device"}


def test_cpu_devices_need_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "train",
        "examples/hopper_ppo.yaml",
        "--accelerator",
        "cpu",
        "--cpu-devices",
        "2",
        "--iterations",
        "1",
    ]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "rlinf: error: --cpu-devices=2: places components on CPU cores"
    )


def test_a_component_on_cores_stays_a_component_of_the_same_workflow() -> None:
    plain, flagged = embodied_workflow(), cpu_ok_workflow()
    assert plain != flagged and plain.same_flow(flagged)
    assert not plain.same_flow(attrs.evolve(plain, batch_size=16))
    assert "cpu_ok" not in json.dumps(plain.to_dict()) and '"cpu_ok": true' in json.dumps(flagged.to_dict())
    assert Component(name="r", role="reward", cpu_ok=True).cpu_ok


def test_the_train_command_places_a_plan_and_its_core_pool_together() -> None:
    """A run's placement of a plan's devices and the core pool beside them (the path a GPU machine
    takes with ``--cpu-devices``; here the devices are CPU cores too): one device per global id, nothing
    oversubscribed when device and cores are distinct."""
    from rlinf.app.placement import oversubscribed, place

    job, config = load_job_config("examples/hopper_ppo.yaml")
    request = RunRequest(job=job, config=config, out=Path("unused"), num_devices=1, num_cpu_devices=1)
    devices, nodes = place(request, 1)
    assert [(d.index, d.kind) for d in devices] == [(0, "cpu"), (1, "cpu")] and nodes is None
    assert devices[0].core != devices[1].core and not oversubscribed(devices, nodes)
    crowded, _ = place(request, 2)
    assert oversubscribed(crowded, None)  # two logical devices on one core, beside the pool's core
