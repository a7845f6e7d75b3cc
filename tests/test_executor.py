"""The executor against the simulator's semantics, with real worker processes (tests/executor_workers.py)."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import attrs
import numpy as np
import pytest
import torch
from executor_workers import ChainWorker, chain_facts

import executor
from executor.channels import Mailbox, WorkerAddress, choose_transport, pack, unpack
from executor.dispatch import build_lanes
from executor.offload import HostStore, tensor_bytes
from executor.protocol import share_overlaps, share_slice
from executor.routing import layout_of, routes_of
from rlinf.core.cluster import parse_cluster
from rlinf.core.errors import ConfigError
from rlinf.core.lowering import lower
from rlinf.core.plan import plan_from_yaml
from rlinf.core.timeline import Timeline
from rlinf.core.workflow import Component, Edge, WeightSync, Workflow
from simulator import replay

HYBRID = "placement: {rollout: 0, reward: 1, actor: 0-1}\ngranularity: {rollout->reward: 4}\n"
COLLOCATED_OFFLOAD = "placement: {rollout: 0-1, reward: 0-1, actor: 0-1}\noffload: [rollout, actor]\ngranularity: {rollout->reward: 2}\n"


def chain_workflow(state_bytes: int = 10**6) -> Workflow:
    return Workflow(
        name="chain",
        components=[
            Component(name="rollout", role="rollout", state_bytes=state_bytes),
            Component(name="reward", role="reward"),
            Component(name="actor", role="actor", state_bytes=3 * state_bytes),
        ],
        edges=[Edge(src="rollout", dst="reward"), Edge(src="reward", dst="actor", kind="barrier")],
        weight_sync=[WeightSync(src="actor", dst="rollout", num_bytes=1000)],
        batch_size=8,
    )


def chain_program(plan_yaml: str, num_devices: int = 2, state_bytes: int = 10**6):
    return lower(
        chain_workflow(state_bytes),
        plan_from_yaml(plan_yaml, num_devices),
        parse_cluster(f"{num_devices}xCPU"),
    )


def specs(**config) -> dict[str, executor.WorkerSpec]:
    base = {"seconds": 0.005, "rows": 4}
    return {
        name: executor.WorkerSpec(
            factory=ChainWorker, facts=chain_facts(name), config={**base, **config.get(name, {})}
        )
        for name in ("rollout", "reward", "actor")
    }


def assert_follows_program(timeline: Timeline) -> None:
    """Every dependency and every device's order holds in the timeline."""
    program = timeline.program
    for op in program.ops:
        for dep in op.deps:
            assert timeline.start_s[op.index] >= timeline.end_s[dep], (
                f"{op.label} started before {program.ops[dep].label} ended"
            )
    for order in program.device_order:
        for before, after in zip(order, order[1:], strict=False):
            assert timeline.start_s[after] >= timeline.end_s[before]


def device_orders(timeline: Timeline) -> list[list[int]]:
    """Per device, op indices sorted by start time."""
    return [sorted(order, key=lambda i: (timeline.start_s[i], i)) for order in timeline.program.device_order]


# --------------------------------------------------------------------------- pure parts
@pytest.mark.parametrize(
    "plan_yaml", [HYBRID, COLLOCATED_OFFLOAD, "placement: {rollout: 0, reward: 0, actor: 1}\n"]
)
def test_lanes_wait_for_exactly_what_the_release_graph_says(plan_yaml: str) -> None:
    program = chain_program(plan_yaml)
    layout = layout_of(program)
    lanes = build_lanes(program, layout, routes_of(program))
    _, releases = program.release_graph
    runs_on: dict[int, set[int]] = {}
    for worker, lane in lanes.items():
        ops = [c.op for c in lane]
        assert ops == sorted(ops), "a lane runs its ops in program order"
        for command in lane:
            runs_on.setdefault(command.op, set()).add(worker)
    assert sorted(runs_on) == list(range(program.num_ops))  # every op runs somewhere
    for worker, lane in lanes.items():
        for command in lane:
            before = {b for b, afters in enumerate(releases) if command.op in afters}
            expected = {(b, v) for b in before for v in runs_on[b] if v != worker}
            assert set(command.waits) == expected
            after = {v for a in releases[command.op] for v in runs_on[a]} - {worker}
            assert set(command.notify) == after
    # Played as a token game (a worker runs its next command once every signal it waits for was sent), the lanes
    # finish, and each op starts only after every op it follows has finished on every worker.
    sent: set[tuple[int, int]] = set()
    position = dict.fromkeys(lanes, 0)
    finished_at: dict[int, int] = {}
    step = 0
    while any(position[w] < len(lane) for w, lane in lanes.items()):
        progressed = False
        for worker, lane in lanes.items():
            if position[worker] < len(lane) and all(key in sent for key in lane[position[worker]].waits):
                command = lane[position[worker]]
                for b in {b for b, afters in enumerate(releases) if command.op in afters}:
                    assert all((b, v) in sent or v == worker for v in runs_on[b])
                sent.add((command.op, worker))
                finished_at[command.op] = step
                position[worker] += 1
                step += 1
                progressed = True
        assert progressed, f"the lanes deadlock at {position}"
    assert len(sent) == sum(len(lane) for lane in lanes.values())


def test_share_slices_partition_the_rows() -> None:
    for producers, consumers, rows in [(1, 2, 6), (2, 1, 3), (2, 3, 5), (3, 2, 4)]:
        taken = []
        for p in range(producers):
            for c in range(consumers):
                lo, hi = share_slice(rows, p, producers, c, consumers)
                if hi > lo:
                    assert share_overlaps(p, producers, c, consumers)
                    taken.extend(p * rows + i for i in range(lo, hi))
        assert sorted(taken) == list(range(producers * rows))


def test_transport_follows_placement() -> None:
    assert choose_transport(WorkerAddress(worker=1), WorkerAddress(worker=1)) == "local"
    assert choose_transport(WorkerAddress(worker=1), WorkerAddress(worker=2)) == "shm"
    with pytest.raises(ConfigError, match="no transport between machines"):
        choose_transport(WorkerAddress(worker=1, node=0), WorkerAddress(worker=2, node=1))
    across = choose_transport(
        WorkerAddress(worker=1, node=0), WorkerAddress(worker=2, node=1), across_nodes=True
    )
    assert across == "object_store"


def test_pack_moves_large_arrays_through_shared_memory() -> None:
    small = np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]  # not contiguous
    words = np.array(["a", None], dtype=object)
    payload = {
        "big": np.arange(10_000, dtype=np.float32),
        "small": small,
        "words": words,
        "empty": np.ones((0, 2)),
    }
    packed, num_bytes = pack(payload)
    assert num_bytes == 40_000 + small.nbytes + words.nbytes
    assert not isinstance(packed["big"], np.ndarray) and not isinstance(packed["small"], np.ndarray)
    assert isinstance(packed["words"], np.ndarray)  # Python objects ride with the pickled message
    out = unpack(packed)
    for key, value in payload.items():
        np.testing.assert_array_equal(out[key], value)
        assert out[key].dtype == value.dtype and out[key].shape == value.shape
    out["small"][0, 0] = 7  # received arrays are the receiver's own, writable


def test_local_transport_hands_the_object_over() -> None:
    mailbox = Mailbox(WorkerAddress(worker=0), {}, [], {})
    assert mailbox.send(0, ("k",), {"x": np.ones(2)}) == 0
    np.testing.assert_array_equal(mailbox.receive(("k",))["x"], np.ones(2))


def _pipe_pair() -> tuple[Mailbox, Mailbox, Any]:
    """Worker 0's and worker 1's mailboxes joined by one real pipe 0 -> 1, and that pipe's reading end."""
    reader, writer = multiprocessing.Pipe(duplex=False)
    sender = Mailbox(WorkerAddress(worker=0), {1: writer}, [], {})
    receiver = Mailbox(WorkerAddress(worker=1), {}, [reader], {})
    return sender, receiver, reader


def test_a_bundle_sends_an_ops_payload_and_signal_as_one_pipe_message() -> None:
    sender, receiver, reader = _pipe_pair()
    with sender.bundle():
        sender.send(1, ("data",), {"x": np.arange(3)})
        sender.send(1, ("done",), {})
        assert not reader.poll()  # held back until the op has ended
    assert reader.poll()
    receiver.take(receiver.inbound[0])  # one read delivers both
    assert not reader.poll()
    assert receiver.has(("done",))
    np.testing.assert_array_equal(receiver.receive(("data",))["x"], np.arange(3))


def test_a_bundle_that_raises_sends_nothing() -> None:
    sender, _, reader = _pipe_pair()
    with pytest.raises(RuntimeError, match="op failed"), sender.bundle():
        sender.send(1, ("data",), {"x": np.ones(2)})
        raise RuntimeError("op failed")
    assert not reader.poll()
    sender.send(1, ("later",), {})  # outside a bundle a message leaves at once
    assert reader.poll()


def test_a_bundle_holds_back_what_goes_to_other_nodes_until_the_op_has_ended() -> None:
    """A consumer on another node must not start before the producer's recorded end: what an op sends through
    Ray leaves with the rest of the bundle, after the block (a Ray run's timeline once had ops starting before
    their dependencies ended)."""
    sent: list[tuple[int, tuple]] = []
    sender = Mailbox(
        WorkerAddress(worker=0, node=0),
        {},
        [],
        {1: 1},
        remote_send=lambda dst, key, arrays: sent.append((dst, key)),
    )
    with sender.bundle():
        assert sender.send(1, ("data",), {"x": np.arange(3, dtype=np.int64)}) == 24
        sender.send(1, ("done",), {})
        assert sent == []  # held back until the op has ended
    assert sent == [(1, ("data",)), (1, ("done",))]
    with pytest.raises(RuntimeError, match="op failed"), sender.bundle():
        sender.send(1, ("lost",), {})
        raise RuntimeError("op failed")
    sender.send(1, ("later",), {})  # outside a bundle it leaves at once, and the failed op's never did
    assert sent[2:] == [(1, ("later",))]


def test_host_store_releases_and_restores_state() -> None:
    model = torch.nn.Linear(256, 256)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 256)).sum().backward()
    optimizer.step()
    tensors = list(model.parameters()) + [
        v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)
    ]
    before = [t.detach().clone() for t in tensors]
    full = tensor_bytes(tensors)
    store = HostStore()
    assert store.offload(tensors) == full
    assert tensor_bytes(tensors) == 0 and model.weight.numel() == 0
    assert store.onload(tensors) == full
    for tensor, saved in zip(tensors, before, strict=True):
        assert torch.equal(tensor, saved)
    optimizer.step()  # the optimizer still points at the same (refilled) tensors


def test_layout_and_routes_of_a_hybrid_program() -> None:
    program = chain_program(HYBRID)
    layout = layout_of(program)
    assert [(r.component, r.rank, r.device) for r in layout.replicas] == [
        ("rollout", 0, 0),
        ("reward", 0, 1),
        ("actor", 0, 0),
        ("actor", 1, 1),
    ]
    routes = routes_of(program)
    train = next(op for op in program.ops if op.name == "train")
    assert sorted(program.ops[p].label for p in routes.producers[train.index]) == [
        f"reward.reward[{j}]" for j in range(4)
    ]


# --------------------------------------------------------------------------- with processes
def test_golden_executor_matches_simulator_order() -> None:
    """Simulator and executor run the same program: same per-device op order, every dependency holds."""
    program = chain_program(HYBRID)
    with executor.LocalBackend(executor.cpu_devices(2)) as backend:
        result = executor.run(program, specs(), backend=backend)
        again = executor.run(program, specs(), backend=backend)  # workers persist between runs
    measured = result.timeline
    assert measured.source == "measured" and isinstance(measured, Timeline)
    durations = [max(0.0, e - s) for s, e in zip(measured.start_s, measured.end_s, strict=True)]
    simulated = replay(program, durations)
    assert device_orders(measured) == device_orders(simulated) == [list(o) for o in program.device_order]
    assert_follows_program(measured)
    assert_follows_program(again.timeline)
    # every op became a cost sample; the consumers really received the producers' rows
    assert len(result.samples) == program.num_ops
    assert {s.op for s in result.samples} == {"generate", "transfer", "reward", "train", "sync_weights"}
    assert all(s.num_bytes > 0 for s in result.samples if s.op == "transfer")
    rows_in = {(i.component, i.rank): i.info["rows_in"] for i in result.infos if i.op_name == "train"}
    assert rows_in == {
        ("actor", 0): 8,
        ("actor", 1): 8,
    }  # 4 micro-batches x 4 rows from reward, split over 2 replicas


def test_context_switching_offloads_and_bounds_peak_memory() -> None:
    program = chain_program(
        "placement: {rollout: 0, reward: 0, actor: 0}\noffload: [rollout, actor]\n", num_devices=1
    )
    config = {"hidden": 512}
    with executor.LocalBackend(executor.cpu_devices(1)) as backend:
        result = executor.run(program, specs(rollout=config, actor=config), backend=backend)
    timeline = result.timeline
    kinds = [(s.kind, s.component) for s in timeline.spans]
    for kind in ("onload", "offload"):
        assert (kind, "rollout") in kinds and (kind, "actor") in kinds
    params = 4 * (512 * 512 + 512)
    rollout_state, actor_state = params, 3 * params  # actor: weights + Adam's two moments
    moved = {
        s.op: s.num_bytes for s in result.samples if s.component == "actor" and s.op in ("onload", "offload")
    }
    assert moved["offload"] >= actor_state  # the Adam step counters add a few bytes
    assert 0 < timeline.peak_memory_bytes[0] < rollout_state + actor_state
    assert_follows_program(timeline)


def test_worker_error_stops_the_run_with_worker_and_op() -> None:
    program = chain_program(HYBRID)
    started = time.monotonic()
    with (
        executor.LocalBackend(executor.cpu_devices(2)) as backend,
        pytest.raises(
            executor.WorkerError,
            match=r"worker reward\[0\] failed while running reward\.reward\[2\]: RuntimeError: injected failure",
        ) as caught,
    ):
        executor.run(program, specs(reward={"fail_on": ("reward", 2, 0)}), backend=backend)
    assert "Traceback" in caught.value.remote_traceback
    assert time.monotonic() - started < 120


def test_worker_that_dies_stops_the_run() -> None:
    program = chain_program(HYBRID)
    with (
        executor.LocalBackend(executor.cpu_devices(2)) as backend,
        pytest.raises(
            executor.WorkerError,
            match=r"worker actor\[[01]\] failed while running actor\.train: process exited with code 3",
        ),
    ):
        executor.run(program, specs(actor={"die_on": ("train", 0, 0)}), backend=backend)


def test_worker_that_fails_to_set_up_is_named() -> None:
    with (
        executor.LocalBackend(executor.cpu_devices(2)) as backend,
        pytest.raises(
            executor.WorkerError, match=r"worker reward\[0\] failed while running setup: RuntimeError"
        ),
    ):
        executor.run(chain_program(HYBRID), specs(reward={"hidden": -1}), backend=backend)


def test_backend_rejects_programs_with_more_devices() -> None:
    program = chain_program(HYBRID)
    with (
        executor.LocalBackend(executor.cpu_devices(1)) as backend,
        pytest.raises(ConfigError, match="backend has 1 devices"),
    ):
        executor.run(program, specs(), backend=backend)


def test_cuda_devices_follow_the_same_abstraction() -> None:
    if not torch.cuda.is_available():
        pytest.skip("torch.cuda is not available on this machine; the CUDA path is exercised only on a GPU")
    devices = executor.cuda_devices(1)
    assert devices[0].torch_device == "cuda:0" and devices[0].collective_backend == "nccl"
    program = chain_program(
        "placement: {rollout: 0, reward: 0, actor: 0}\noffload: [rollout, actor]\n", num_devices=1
    )
    with executor.LocalBackend(devices) as backend:
        result = executor.run(program, specs(), backend=backend)
    assert_follows_program(result.timeline)


def test_a_worker_polls_only_for_workers_on_other_cores() -> None:
    """Polling instead of sleeping (``executor.runtime.SPIN_S``) for a worker on the same core would take the core
    from it: in ``actor@0 env@0 rollout@1`` the env and the actor (core 0) poll for the rollout (core 1) and the
    rollout for both; with the actor on a third logical device that maps to core 0 again, the same; with everything
    on one core nobody polls; on GPUs nobody."""
    from executor.local import _spin_for
    from rlinf.app.jobs import load_job_config

    job, config = load_job_config("examples/hopper_ppo.yaml", ["num_steps=4"])
    for placement, devices in (("actor: 0", 2), ("actor: 2", 3)):
        plan = plan_from_yaml(
            f"placement: {{{placement}, env: 0, rollout: 1}}\ngranularity: {{loop: 2}}", devices
        )
        layout = layout_of(job.lower(plan, config, devices))
        worker = {r.component: r.worker for r in layout.replicas}
        spin = _spin_for(layout, executor.cpu_devices(devices, (0, 1)))
        assert spin == {
            worker["env"]: frozenset({worker["rollout"]}),
            worker["actor"]: frozenset({worker["rollout"]}),
            worker["rollout"]: frozenset({worker["env"], worker["actor"]}),
        }
        gpus = tuple(executor.Device(index=i, kind="cuda", core=i) for i in range(devices))
        assert _spin_for(layout, gpus) == {}
    plan = plan_from_yaml("placement: {actor: 0, env: 0, rollout: 0}\ngranularity: {loop: 2}", 1)
    layout = layout_of(job.lower(plan, config, 1))
    assert set(_spin_for(layout, executor.cpu_devices(1, (0,))).values()) == {frozenset()}


# --------------------------------------------------------------------------- workers that share a core
def test_a_cores_workers_share_a_process_with_at_most_one_collective_group() -> None:
    """On a CPU core one process hosts the device's workers, except that a second component needing a
    collective group (several replicas, ``collective=True``) gets its own process; on GPUs, or with sharing
    off, one process per worker."""
    from executor.local import hosts_of

    layout = layout_of(chain_program(COLLOCATED_OFFLOAD))  # every component on both devices
    cpus = executor.cpu_devices(2)

    def names(hosts: list) -> list[list[str]]:
        return [[f"{r.component}[{r.rank}]" for r in host] for host in hosts]

    grouped = specs()  # ChainWorker keeps the default: collective
    assert names(hosts_of(layout, cpus, grouped)) == [
        ["rollout[0]"],
        ["rollout[1]"],
        ["reward[0]"],
        ["reward[1]"],
        ["actor[0]"],
        ["actor[1]"],
    ]
    light = {name: attrs.evolve(spec, collective=name == "actor") for name, spec in specs().items()}
    assert names(hosts_of(layout, cpus, light)) == [
        ["rollout[0]", "reward[0]", "actor[0]"],
        ["rollout[1]", "reward[1]", "actor[1]"],
    ]
    assert len(hosts_of(layout, cpus, light, share=False)) == 6
    gpus = tuple(executor.Device(index=i, kind="cuda", core=i) for i in range(2))
    assert len(hosts_of(layout, gpus, light)) == 6
    one_core = layout_of(
        chain_program(HYBRID.replace("actor: 0-1", "actor: 0").replace("reward: 1", "reward: 0"), 1)
    )
    assert names(hosts_of(one_core, executor.cpu_devices(1), grouped)) == [
        ["rollout[0]", "reward[0]", "actor[0]"]
    ]


def test_merged_lanes_keep_program_order_and_drop_waits_within_the_process() -> None:
    """A process runs its workers' commands in program order (a topological order of the release graph), the
    sender of a weight sync before its receiver, and waits only for other processes' workers."""
    from executor.messages import SyncRecv, SyncSend
    from executor.runtime import merge_lanes

    program = chain_program("placement: {rollout: 0, reward: 0, actor: 0}\noffload: [rollout, actor]\n", 1)
    layout = layout_of(program)
    lanes = build_lanes(program, layout, routes_of(program))
    merged = merge_lanes(lanes)
    assert sorted(merged, key=lambda item: item[1].op) == merged
    assert sorted((w, c.op) for w, c in merged) == sorted(
        (w, c.op) for w, lane in lanes.items() for c in lane
    )
    assert all(not c.waits and not c.notify for _, c in merged)  # one process: the order alone keeps the rule
    assert any(c.waits for lane in lanes.values() for c in lane)  # ... which separate processes signal
    sync = [type(c) for _, c in merged if isinstance(c, (SyncSend, SyncRecv))]
    assert sync == [SyncSend, SyncRecv]
    # Two of three workers in one process: waits on the third remain.
    partial = merge_lanes({w: lanes[w] for w in (0, 1)})
    assert {v for _, c in partial for _, v in c.waits} == {2}


def test_shared_processes_run_the_same_program_as_one_process_per_worker() -> None:
    """The same program with the workers of each core in one process and with one process per worker: the
    simulator's per-device order, every dependency kept, the same rows delivered; fewer processes, and no bytes
    moved between workers of one process."""
    program = chain_program(HYBRID)  # rollout + actor[0] on core 0, reward + actor[1] on core 1
    results, processes = [], []
    for share in (True, False):
        with executor.LocalBackend(executor.cpu_devices(2), share_processes=share) as backend:
            results.append(executor.run(program, specs(), backend=backend))
            results.append(executor.run(program, specs(), backend=backend))
            processes.append(len(set(backend.worker_pids().values())))
    assert processes == [2, 4]
    for result in results:
        assert device_orders(result.timeline) == [list(o) for o in program.device_order]
        assert_follows_program(result.timeline)
    rows = [{(i.component, i.rank, i.op_index): i.info["rows_in"] for i in r.infos} for r in results]
    assert rows[0] == rows[1] == rows[2] == rows[3]
    one_core = chain_program(
        "placement: {rollout: 0, reward: 0, actor: 0}\ngranularity: {rollout->reward: 4}\n", 1
    )
    with executor.LocalBackend(executor.cpu_devices(1)) as backend:
        alone = executor.run(one_core, specs(), backend=backend)
        assert len(set(backend.worker_pids().values())) == 1
    assert_follows_program(alone.timeline)
    assert all(s.num_bytes == 0 for s in alone.samples if s.op in ("transfer", "sync_weights"))
    assert [i.info["rows_in"] for i in alone.infos if i.op_name == "train"] == [
        16
    ]  # 4 micro-batches x 4 rows
