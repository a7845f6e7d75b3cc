"""The Ray backend: workers as Ray actors placed on the plan's nodes, driven by the same dispatch loop.

Each component replica becomes one actor (:class:`executor.ray_actor.RayWorker`) on the Ray node that hosts its
logical device (plan node ``i`` is the Ray node carrying the custom resource ``node{i}``, else the ``i``-th
alive node, head first). Each actor asks for its share of its device: ``1/k`` CPU (or GPU) when ``k`` replicas
share the device. The driver runs :func:`executor.dispatch.drive`, so the op order is the local backend's; this
class is only the transport: one actor call per command (so replies stream back one op at a time), payload
references forwarded with the consumer's command (a command is held until the payloads it reads exist, e.g. a
weight sync's receivers wait for the sender's reply). An actor runs its calls in the order they were made, so
its commands keep their order.

A dead actor (killed, OOM, node lost) fails its pending call with ``RayActorError``; the run stops with a
:class:`executor.dispatch.WorkerError` naming the worker and the op it was running.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import ray
from ray.exceptions import RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from executor import ray_session
from executor.devices import Device
from executor.dispatch import (
    RunResult,
    RunState,
    WorkerError,
    WorkerStateMixin,
    check_workers,
    drive,
)
from executor.ray_actor import RayWorker
from executor.routing import Layout, layout_of, routes_of
from executor.runtime import WorkerSpec
from rlinf.errors import ConfigError
from rlinf.program import Program


class RayBackend(WorkerStateMixin):
    """Runs programs with Ray actors. Use as a context manager.

    ``nodes[d]`` is the plan node of logical device ``d`` (default: all on node 0). With ``address=None`` a
    private single-node Ray bound to loopback is started (and stopped by :meth:`close`); an address joins a
    running cluster; an already initialised Ray (e.g. :func:`executor.ray_session.emulated_cluster`) is used
    as it is."""

    def __init__(
        self,
        devices: Sequence[Device],
        *,
        nodes: Sequence[int] | None = None,
        address: str | None = None,
        stall_timeout_s: float = 600.0,
    ) -> None:
        self.devices = tuple(devices)
        self.nodes = tuple(nodes) if nodes is not None else (0,) * len(self.devices)
        if len(self.nodes) != len(self.devices):
            raise ConfigError(
                "nodes",
                self.nodes,
                f"needs one node per device ({len(self.devices)})",
                "list a node per device",
            )
        self.address = address
        self._stall_timeout_s = stall_timeout_s
        self._owns_ray = False
        self._layout: Layout | None = None
        self._specs_key: tuple = ()
        self._actors: list[Any] = []
        self._resident: list[int] = []
        self._run_id = 0
        self._pending: dict[Any, int] = {}
        self._held: dict[int, list[tuple]] = {}
        self._deliveries: dict[int, dict[tuple, Any]] = {}

    def __enter__(self) -> RayBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ lifecycle
    def start(self, program: Program, workers: Mapping[str, WorkerSpec]) -> None:
        """Start (or keep) the actors ``program`` needs, e.g. to restore a checkpoint before the first run."""
        self._ensure_started(program, workers)

    def _ensure_started(self, program: Program, workers: Mapping[str, WorkerSpec]) -> Layout:
        layout = layout_of(program)
        check_workers(layout, workers, len(self.devices))
        specs_key = tuple((name, workers[name]) for name in layout.components)
        if self._layout is not None and self._layout.key() == layout.key() and self._specs_key == specs_key:
            return self._layout
        self._stop_actors()
        if not ray.is_initialized():
            gpus = sum(1 for d in self.devices if d.kind == "cuda")
            self._owns_ray = ray_session.connect(self.address, num_cpus=len(self.devices), num_gpus=gpus)
        self._start(layout, workers)
        self._specs_key = specs_key
        return layout

    def _start(self, layout: Layout, workers: Mapping[str, WorkerSpec]) -> None:
        node_ids = _ray_nodes()
        needed = max(self.nodes) + 1
        if needed > len(node_ids):
            raise ConfigError(
                "nodes",
                needed,
                f"the plan uses {needed} nodes and the Ray cluster has {len(node_ids)}",
                "add Ray nodes or use a plan on fewer nodes",
            )
        sharing = [sum(1 for r in layout.replicas if r.device == d) for d in range(len(self.devices))]
        actor_class = ray.remote(max_restarts=0, max_task_retries=0)(RayWorker)
        self._layout = layout
        for replica in layout.replicas:
            device = self.devices[replica.device]
            share = 1.0 / sharing[replica.device]
            options: dict[str, Any] = {
                "num_cpus": share if device.kind == "cpu" else 0,
                "num_gpus": share if device.kind == "cuda" else 0,
                "scheduling_strategy": NodeAffinitySchedulingStrategy(
                    node_id=node_ids[self.nodes[replica.device]], soft=False
                ),
                "name": None,
            }
            actor = actor_class.options(**options).remote(replica, device, workers[replica.component])
            self._actors.append(actor)
        self._resident = [0] * len(layout.replicas)
        addresses = {}
        for name in layout.components:
            first = layout.of(name)[0]
            if first.world > 1:
                addresses[name] = self._get(
                    self._actors[first.worker].collective_address.remote(), first.worker
                )
        replies = [
            self._actors[r.worker].setup.remote(addresses.get(r.component, "")) for r in layout.replicas
        ]
        self._await_ready(replies, "setup")
        self._check_gpus(layout)

    def _check_gpus(self, layout: Layout) -> None:
        """Replicas of one logical GPU device must have been given the same physical GPU."""
        if not any(d.kind == "cuda" for d in self.devices):
            return
        seen: dict[int, tuple] = {}
        for replica in layout.replicas:
            _, _, ip, gpus = self._get(self._actors[replica.worker].describe.remote(), replica.worker)
            got = (ip, gpus)
            if seen.setdefault(replica.device, got) != got:
                self.close()
                raise ConfigError(
                    "devices",
                    replica.device,
                    f"Ray gave the replicas of this device different GPUs ({seen[replica.device]} and {got})",
                    "give each Ray node exactly the GPUs the plan uses on it",
                )

    def _await_ready(self, refs: Sequence[Any], phase: str) -> None:
        workers = dict(zip(refs, range(len(refs)), strict=True))
        for ref, worker in workers.items():
            message = self._get(ref, worker, phase)
            if message[0] == "error":
                self.fail(worker, phase, message[3], message[4])
            self._resident[worker] = message[2]

    def close(self) -> None:
        """Kill every actor; stop Ray when this backend started it."""
        self._stop_actors()
        if self._owns_ray:
            ray_session.shutdown()
            self._owns_ray = False

    def _stop_actors(self) -> None:
        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        self._actors, self._layout, self._specs_key = [], None, ()
        self._pending, self._held, self._deliveries = {}, {}, {}

    # ------------------------------------------------------------------ running
    def execute(self, program: Program, workers: Mapping[str, WorkerSpec]) -> RunResult:
        """Run ``program`` once and return its measured timeline, cost samples and infos."""
        layout = self._ensure_started(program, workers)
        onloaded = {op.component for op in program.ops if op.kind == "onload"}
        self._await_ready(
            [self._actors[r.worker].prepare.remote(r.component in onloaded) for r in layout.replicas],
            "prepare",
        )
        self._run_id += 1
        run = RunState(program, layout, routes_of(program), self._resident)
        result = drive(run, self)
        for actor in self._actors:
            actor.end_run.remote()
        self._deliveries = {}
        self._resident = list(run.resident)
        return result

    def send(self, worker: int, commands: list[tuple]) -> None:
        """Queue a batch for ``worker``; it goes out once the payloads it reads have been produced."""
        self._held.setdefault(worker, []).extend(commands)
        self._flush(worker)

    def _flush(self, worker: int) -> None:
        held = self._held.get(worker, [])
        if not held:
            return
        available = self._deliveries.get(worker, {})
        ready = 0
        while ready < len(held) and all(key in available for key in self._reads(worker, held[ready])):
            ready += 1
        if ready == 0:
            return
        batch, self._held[worker] = held[:ready], held[ready:]
        for command in batch:  # one call per command: replies stream back as in the local backend
            deliveries = [(key, available.pop(key)) for key in self._reads(worker, command)]
            self._pending[self._actors[worker].run.remote(self._run_id, [command], deliveries)] = worker

    def _reads(self, worker: int, command: tuple) -> list[tuple]:
        """Keys of the payloads a command reads from other workers."""
        if command[0] == "compute":
            return [(self._run_id, producer, source) for producer, source in command[5] if source != worker]
        if command[0] == "sync_recv" and command[2] != worker:
            return [(self._run_id, command[1], command[2])]
        return []

    def receive(self, running: Mapping[int, str]) -> list[tuple]:
        """Replies of the batches that finished (waiting for at least one)."""
        assert self._pending, "nothing is running but the program is unfinished"
        done, _ = ray.wait(list(self._pending), num_returns=1, timeout=self._stall_timeout_s)
        if not done:
            labels = ", ".join(f"{self._name(w)}: {label}" for w, label in sorted(running.items())) or "none"
            self._stop_actors()
            raise WorkerError(
                f"no worker finished an op for {self._stall_timeout_s:.0f} s (running: {labels}); fix: look for a stuck worker"
            )
        done, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
        messages: list[tuple] = []
        for ref in done:
            worker = self._pending.pop(ref)
            replies, outbox = self._get(ref, worker, running.get(worker, "no op"))
            for destination, key, value in outbox:
                self._deliveries.setdefault(destination, {})[key] = value
            messages.extend(replies)
        for worker in list(self._held):
            self._flush(worker)
        return messages

    def _get(self, ref: Any, worker: int, op_label: str = "setup") -> Any:
        try:
            return ray.get(ref)
        except RayActorError as error:
            self.fail(worker, op_label, f"actor died ({_first_line(error)})", "")
        except RayError as error:
            self.fail(worker, op_label, _first_line(error), str(error))

    def fail(self, worker: int, op_label: str, message: str, remote_traceback: str) -> NoReturn:
        """Kill every actor and raise naming the failed one (part of :class:`executor.dispatch.Transport`)."""
        name = self._name(worker)
        self._stop_actors()
        raise WorkerError(f"worker {name} failed while running {op_label}: {message}", remote_traceback)

    def _name(self, worker: int) -> str:
        if self._layout is None or worker >= len(self._layout.replicas):
            return f"#{worker}"
        replica = self._layout.replicas[worker]
        return f"{replica.component}[{replica.rank}]"

    # ------------------------------------------------------------------ between runs
    def call(self, component: str, method: str, *args: Any, rank: int = 0) -> Any:
        """Call a worker method (e.g. ``checkpoint``) between runs and return its result."""
        assert self._layout is not None, "no workers are running"
        worker = self._layout.of(component)[rank].worker
        return self._get(self._actors[worker].call.remote(method, args), worker, method)

    def worker_pids(self) -> dict[str, int]:
        """Process id of every actor, keyed ``component[rank]``."""
        return {
            self._name(w): int(self._get(actor.describe.remote(), w, "describe")[0])
            for w, actor in enumerate(self._actors)
        }

    def worker_nodes(self) -> dict[str, str]:
        """Ray node id of every actor, keyed ``component[rank]`` (to check the placement)."""
        return {
            self._name(w): str(self._get(a.describe.remote(), w, "describe")[1])
            for w, a in enumerate(self._actors)
        }


def _ray_nodes() -> list[str]:
    """Alive Ray node ids in plan-node order: the node carrying resource ``node{i}`` is node ``i``; nodes
    without such a resource follow, head first, then by id."""
    alive = [n for n in ray.nodes() if n.get("Alive")]
    labelled: dict[int, str] = {}
    rest = []
    for node in alive:
        marks = [int(k[4:]) for k in node.get("Resources", {}) if k.startswith("node") and k[4:].isdigit()]
        if marks:
            labelled[marks[0]] = node["NodeID"]
        else:
            is_head = "node:__internal_head__" in node.get("Resources", {})
            rest.append((not is_head, node["NodeID"]))
    ordered = [labelled[i] for i in sorted(labelled)]
    return ordered + [node_id for _, node_id in sorted(rest)]


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
