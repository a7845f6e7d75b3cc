"""The Ray backend on a two-node Ray cluster emulated on this machine (two raylets and object stores on
127.0.0.1): same op order and same results as the local backend, placement on the plan's nodes, errors that
name the worker and the op; ``rlinf train --address`` joins the same running cluster."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray")

from test_checkpoint import SMALL, embodied_program, outcomes  # noqa: E402
from test_executor import HYBRID, assert_follows_program, chain_program, device_orders, specs  # noqa: E402
from test_fault_injection import SMALL_TRAIN, computed  # noqa: E402

import executor  # noqa: E402
from executor import ray_session  # noqa: E402
from executor.channels import SHM_MIN_BYTES  # noqa: E402
from executor.ray_backend import RayBackend  # noqa: E402
from rlinf.app.jobs import get_job, load_job_config  # noqa: E402
from rlinf.core.errors import ConfigError  # noqa: E402
from rlinf.core.plan import plan_from_yaml  # noqa: E402

TESTS = Path(__file__).resolve().parent
BIG_ROWS = 512
"""Rows per chain op: 512 x 96 float32 = 192 KiB per payload: through shared memory between actors of one node,
and through Ray's object store between the nodes (Ray stores call arguments over 100 KiB there)."""
RAY_INLINE_ARGUMENT_BYTES = 100 * 1024


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[str]:
    """Ray nodes 0 and 1, one CPU each; the actors can import the test workers."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
        with ray_session.emulated_cluster([1, 1]) as address:
            yield address


def test_same_op_order_and_data_as_the_local_backend(two_nodes: str) -> None:
    """HYBRID: rollout on device 0 (node 0), reward on device 1 (node 1), actor on both. The local backend runs
    one process per worker, as Ray does (sharing a process, it would move no bytes between a core's workers)."""
    assert max(SHM_MIN_BYTES, RAY_INLINE_ARGUMENT_BYTES) < BIG_ROWS * 96 * 4
    program = chain_program(HYBRID)
    workers = specs(**{name: {"rows": BIG_ROWS} for name in ("rollout", "reward", "actor")})
    with executor.LocalBackend(executor.cpu_devices(2), share_processes=False) as backend:
        local = executor.run(program, workers, backend=backend)
    with RayBackend(executor.cpu_devices(2), nodes=[0, 1]) as backend:
        first = executor.run(program, workers, backend=backend)
        second = executor.run(program, workers, backend=backend)  # actors persist between runs
        nodes = backend.worker_nodes()
        pids = backend.worker_pids()
    assert nodes["rollout[0]"] == nodes["actor[0]"] != nodes["reward[0]"] == nodes["actor[1]"]
    assert len(set(pids.values())) == 4 and os.getpid() not in pids.values()
    for result in (first, second):
        assert (
            device_orders(result.timeline)
            == device_orders(local.timeline)
            == [list(o) for o in program.device_order]
        )
        assert_follows_program(result.timeline)
        assert len(result.samples) == program.num_ops
    rows_in = {(i.component, i.rank, i.op_index): i.info["rows_in"] for i in first.infos}
    assert rows_in == {(i.component, i.rank, i.op_index): i.info["rows_in"] for i in local.infos}
    moved = {s.op: s.num_bytes for s in first.samples if s.op in ("transfer", "sync_weights")}
    assert moved == {s.op: s.num_bytes for s in local.samples if s.op in ("transfer", "sync_weights")}
    assert moved["transfer"] >= BIG_ROWS * 96 * 4


def test_embodied_ppo_matches_the_local_backend_exactly(two_nodes: str) -> None:
    """Tolerance 0: the same worker code, seeds and op order on CPU with one torch thread per worker give the
    same losses and returns bit for bit, whichever backend carries the data (two data-parallel actor replicas
    all-reduce across the two nodes)."""
    program, workers = embodied_program(SMALL, 2)
    with executor.LocalBackend(executor.cpu_devices(2)) as backend:
        local = [outcomes(executor.run(program, workers, backend=backend)) for _ in range(2)]
    with RayBackend(executor.cpu_devices(2), nodes=[0, 1]) as backend:
        remote = [outcomes(executor.run(program, workers, backend=backend)) for _ in range(2)]
    assert remote == local
    assert any("policy_loss" in entry[3] for entry in local[1])


@pytest.mark.slow  # 58 s on 2 cores; the embodied and pinned-loop runs below check the same on Ray
def test_grpo_matches_the_local_backend_exactly(two_nodes: str, grpo_cache: Path) -> None:
    """The GRPO job on its hybrid plan (streamed generation, weight syncs from the actor to rollout and inference,
    the actor's two replicas on the two nodes): rewards, losses and token counts of two iterations equal the local
    backend's, bit for bit."""
    pytest.importorskip("transformers", reason='needs the hf extra: pip install -e ".[hf]"')
    from hf_grpo_tiny import CONFIG, one_thread, tiny_overrides

    overrides = {**tiny_overrides(grpo_cache), "eval.enabled": "false"}
    job, config = load_job_config(CONFIG, [f"{key}={value}" for key, value in overrides.items()])
    plan, logical = job.fixed_plan("hybrid", 2, config)
    program = job.lower(plan, config, logical)
    workers = job.worker_specs(config, plan, program)
    assert {op.name for op in program.ops} >= {"sync_weights"}
    with one_thread():
        with executor.LocalBackend(executor.cpu_devices(2)) as backend:
            local = [outcomes(executor.run(program, workers, backend=backend)) for _ in range(2)]
        with RayBackend(executor.cpu_devices(2), nodes=[0, 1]) as backend:
            remote = [outcomes(executor.run(program, workers, backend=backend)) for _ in range(2)]
    assert remote == local
    assert any("loss" in entry[3] for entry in local[1]) and any("reward" in entry[3] for entry in local[1])


def test_a_pinned_loop_matches_the_local_backend_exactly(two_nodes: str) -> None:
    """Stage ``s`` of a 2-stage loop on node ``s`` (its env and policy replicas there), the actor on node 0: the
    same losses and returns, bit for bit, as with the local backend's processes."""
    job = get_job("embodied_ppo")
    config = SMALL
    plan = plan_from_yaml("placement: {env: 0-1, rollout: 0-1, actor: 0}\ngranularity: {loop: 2}", 2)
    program = job.lower(plan, config, 2)
    assert {op.devices for op in program.ops if op.name == "env_step"} == {(0,), (1,)}
    workers = job.worker_specs(config, plan, program)
    with executor.LocalBackend(executor.cpu_devices(2)) as backend:
        local = [outcomes(executor.run(program, workers, backend=backend)) for _ in range(2)]
    with RayBackend(executor.cpu_devices(2), nodes=[0, 1]) as backend:
        remote = [outcomes(executor.run(program, workers, backend=backend)) for _ in range(2)]
    assert remote == local
    assert any("policy_loss" in entry[3] for entry in local[1])


def test_worker_error_names_the_worker_and_the_op(two_nodes: str) -> None:
    with (
        RayBackend(executor.cpu_devices(2), nodes=[0, 1]) as backend,
        pytest.raises(
            executor.WorkerError,
            match=r"worker reward\[0\] failed while running reward\.reward\[2\]: RuntimeError: injected failure",
        ) as caught,
    ):
        executor.run(chain_program(HYBRID), specs(reward={"fail_on": ("reward", 2, 0)}), backend=backend)
    assert "Traceback" in caught.value.remote_traceback


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"hidden": -1}, r"worker reward\[0\] failed while running setup: RuntimeError"),
        (
            {"die_on": ("reward", 1, 0)},
            r"worker reward\[0\] failed while running reward\.reward\[1\]: actor died",
        ),
    ],
    ids=["setup raises", "process exits mid-op"],
)
def test_failures_name_the_worker(two_nodes: str, config: dict, message: str) -> None:
    with (
        RayBackend(executor.cpu_devices(2), nodes=[0, 1]) as backend,
        pytest.raises(executor.WorkerError, match=message),
    ):
        executor.run(chain_program(HYBRID), specs(reward=config), backend=backend)


def test_plan_on_more_nodes_than_the_cluster_has(two_nodes: str) -> None:
    with (
        RayBackend(executor.cpu_devices(2), nodes=[0, 2]) as backend,
        pytest.raises(ConfigError, match="the plan uses 3 nodes and the Ray cluster has 2"),
    ):
        executor.run(chain_program(HYBRID), specs(), backend=backend)


def test_nodes_must_cover_every_device() -> None:
    with pytest.raises(ConfigError, match="needs one node per device"):
        RayBackend(executor.cpu_devices(2), nodes=[0])


def test_an_actor_ray_cannot_place_is_reported_not_waited_for(two_nodes: str) -> None:
    """Another job holds node 1's only CPU (a placement group): the backend stops after its start timeout with an
    error naming the worker and the node, instead of waiting forever for Ray to place the actor. (On a loaded
    machine a node-0 actor may start later than the timeout too: the error then names it as well.)"""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    hog = placement_group([{"CPU": 1, "node1": 1}])
    ray.get(hog.ready(), timeout=60)
    try:
        with (
            RayBackend(executor.cpu_devices(2), nodes=[0, 1], start_timeout_s=3) as backend,
            pytest.raises(executor.WorkerError, match=r"within 3 s: its node has no free CPU") as failure,
        ):
            executor.run(chain_program(HYBRID), specs(), backend=backend)
    finally:
        remove_placement_group(hog)
    late = re.search(r"did not place and start (.+) within 3 s", str(failure.value))
    assert late is not None, failure.value
    named = dict(re.findall(r"(\w+\[\d+\]) \(plan node (\d)\)", late.group(1)))
    assert {"reward[0]", "actor[1]"} <= set(named), named  # node 1's actors, which Ray cannot place
    assert named["reward[0]"] == named["actor[1]"] == "1"
    with RayBackend(executor.cpu_devices(2), nodes=[0, 1]) as backend:  # the cluster is usable again
        assert len(executor.run(chain_program(HYBRID), specs(), backend=backend).samples) > 0


def test_cli_joins_a_running_two_node_cluster_with_address(two_nodes: str, tmp_path: Path) -> None:
    """``--address`` joins a running cluster (the two emulated nodes, as an operator would start them with ``ray
    start``); ``--nodes 2`` puts logical device 0 on node 0 and device 1 on node 1, so the hybrid plan's env ->
    rollout traffic crosses nodes and the actor's two replicas all-reduce across them. The run computes what the
    same plan computes on the local backend."""
    hybrid = ["--mode", "hybrid", "--devices", "2", "--iterations", "2"]
    local = tmp_path / "local"
    subprocess.run([*SMALL_TRAIN, *hybrid, "--out", str(local)], check=True, timeout=300)
    joined = subprocess.run(
        [*SMALL_TRAIN, *hybrid, "--backend", "ray", "--address", two_nodes, "--nodes", "2"]
        + ["--out", str(tmp_path / "ray")],
        timeout=300,
        capture_output=True,
        text=True,
    )
    assert joined.returncode == 0, joined.stderr[-3000:]
    assert f"ray: joined the Ray cluster at {two_nodes} (2 nodes, 2 CPUs, 0 GPUs)" in joined.stdout
    assert computed(tmp_path / "ray") == computed(local)
