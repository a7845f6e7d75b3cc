"""The Ray backend: workers as Ray actors placed on the plan's nodes, driven by the same dispatch loop.

Each component replica becomes one actor (:class:`executor.ray_actor.RayWorker`) on the Ray node that hosts its
logical device (plan node ``i`` is the Ray node carrying the custom resource ``node{i}``, else the ``i``-th
alive node, head first). Each actor asks for its share of its device: ``1/k`` CPU (or GPU) when ``k`` replicas
share the device. Ray starts, places, watches and stops the actors and carries payloads between nodes; the
driver talks to each actor over a direct TCP connection (:class:`executor.control.ControlDriver`, shared with the
local backend), so an op costs what it costs in the local backend rather than an actor call, and the op order is
the local backend's (:func:`executor.dispatch.drive`).

A dead actor (killed, OOM) closes its connection; one whose node vanished is noticed through its ``serve`` call,
which Ray fails with ``RayActorError``. Either way the run stops with a :class:`executor.dispatch.WorkerError`
naming the worker and the op it was running.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from executor import ray_session
from executor.collective import Rendezvous
from executor.control import CHECK_EVERY_S, ControlDriver
from executor.devices import Device
from executor.handshake import HelloServer
from executor.messages import Failed, Shutdown
from executor.ray_actor import RayWorker, socket_connection
from executor.routing import Layout
from executor.runtime import WorkerSpec, grouped_components
from executor.watchdog import Watchdog
from rlinf.core.errors import ConfigError

ACTOR_THREADS = 3
"""Threads per actor: ``serve`` (the ops), ``deliver`` (payloads from other nodes) and ``describe``."""
DEATH_REPORT_WAIT_S = 1.0
"""After an actor's connection closed, how long to wait for Ray's account of its death (for the message)."""
START_TIMEOUT_S = 120.0
"""How long Ray may take to place and start an actor, and the actors to connect back to the driver."""
LIVE_CONNECT_GRACE_S = 5.0
"""Once an actor has stopped during the start, how long the live ones still get to connect, so that the error
names only the actors that failed (a loaded machine connects them a moment after the death is seen)."""


class RayBackend(ControlDriver):
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
        start_timeout_s: float = START_TIMEOUT_S,
        watchdog: Watchdog | None = None,
    ) -> None:
        super().__init__(devices, stall_timeout_s=stall_timeout_s, watchdog=watchdog)
        self._start_timeout_s = start_timeout_s
        self.nodes = tuple(nodes) if nodes is not None else (0,) * len(self.devices)
        if len(self.nodes) != len(self.devices):
            raise ConfigError(
                "nodes",
                self.nodes,
                f"needs one node per device ({len(self.devices)})",
                "list a node per device",
            )
        self.address = address
        self._owns_ray = False
        self._actors: list[Any] = []
        self._serving: list[Any] = []

    # ------------------------------------------------------------------ lifecycle
    def _start(self, layout: Layout, workers: Mapping[str, WorkerSpec]) -> None:
        if not ray.is_initialized():
            gpus = sum(1 for d in self.devices if d.kind == "cuda")
            self._owns_ray = ray_session.connect(self.address, num_cpus=len(self.devices), num_gpus=gpus)
        node_ids = _ray_nodes()
        needed = max(self.nodes) + 1
        if needed > len(node_ids):
            raise ConfigError(
                "nodes",
                needed,
                f"the plan uses {needed} nodes and the Ray cluster has {len(node_ids)}",
                "add Ray nodes or use a plan on fewer nodes",
            )
        self._check_capacity(node_ids)
        token = secrets.token_bytes(32)
        sharing = [sum(1 for r in layout.replicas if r.device == d) for d in range(len(self.devices))]
        actor_class = ray.remote(max_restarts=0, max_task_retries=0)(RayWorker)
        for replica in layout.replicas:
            device = self.devices[replica.device]
            share = 1.0 / sharing[replica.device]
            options: dict[str, Any] = {
                "num_cpus": share if device.kind == "cpu" else 0,
                "num_gpus": share if device.kind == "cuda" else 0,
                "max_concurrency": ACTOR_THREADS,
                "scheduling_strategy": NodeAffinitySchedulingStrategy(
                    node_id=node_ids[self.nodes[replica.device]], soft=False
                ),
            }
            self._actors.append(
                actor_class.options(**options).remote(replica, device, workers[replica.component], token)
            )
        self._connect_peers(layout)
        rendezvous = self._rendezvous(layout, workers)
        replies = [self._actors[r.worker].setup.remote(rendezvous.get(r.component)) for r in layout.replicas]
        for worker, ref in enumerate(replies):
            message = self._get(ref, worker)
            if isinstance(message, Failed):
                self.fail(worker, "setup", message.description, message.traceback)
            self._resident[worker] = message.resident
        self._connect_driver(token)
        self._check_gpus(layout)

    def _check_capacity(self, node_ids: Sequence[str]) -> None:
        """Each Ray node must have a CPU (or GPU) per logical device the plan puts on it; Ray would otherwise
        wait forever to place the actors."""
        totals = {n["NodeID"]: n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")}
        for node in sorted(set(self.nodes)):
            for kind, resource in (("cpu", "CPU"), ("cuda", "GPU")):
                wanted = sum(
                    1 for d, n in zip(self.devices, self.nodes, strict=True) if n == node and d.kind == kind
                )
                has = totals[node_ids[node]].get(resource, 0.0)
                if wanted > has:
                    raise ConfigError(
                        "devices",
                        wanted,
                        f"the plan puts {wanted} {kind} devices on Ray node {node}, which has {has:g} {resource}s",
                        f"start that node with --num-{resource.lower()}s {wanted} or more, or use fewer devices",
                    )

    def _connect_peers(self, layout: Layout) -> None:
        """Unix sockets between the actors of each node; actor handles for the ones on other nodes."""
        node_of = {r.worker: self.nodes[r.device] for r in layout.replicas}
        same = {w: [p for p in node_of if p != w and node_of[p] == node_of[w]] for w in node_of}
        listening = [self._actors[w].listen.remote(len(same[w])) for w in node_of]
        paths = self._placed(listening, node_of)
        pending = []
        for worker in node_of:
            peers = {p: paths[p] for p in same[worker]}
            remote = {p: self._actors[p] for p in node_of if node_of[p] != node_of[worker]}
            pending.append(self._actors[worker].connect.remote(peers, remote, node_of))
        for worker, ref in enumerate(pending):
            self._get(ref, worker)

    def _rendezvous(self, layout: Layout, workers: Mapping[str, WorkerSpec]) -> dict[str, Rendezvous]:
        """Where each component with several replicas that uses collectives (:attr:`WorkerSpec.collective`)
        forms its group, chosen by its rank 0 (:meth:`executor.ray_actor.RayWorker.collective_rendezvous`)."""
        rendezvous: dict[str, Rendezvous] = {}
        for name in grouped_components(layout, workers):
            replicas = layout.of(name)
            same_node = len({self.nodes[r.device] for r in replicas}) == 1
            first = replicas[0].worker
            rendezvous[name] = self._get(self._actors[first].collective_rendezvous.remote(same_node), first)
        return rendezvous

    def _connect_driver(self, token: bytes) -> None:
        """Every actor connects back to the driver's control server and starts serving. Hellos are read side by
        side (:class:`executor.handshake.HelloServer`): a stranger's connection is dropped, with a warning, without
        delaying the actors."""
        host = ray_session.LOOPBACK if self._owns_ray else ray.util.get_node_ip_address()
        workers = range(len(self._actors))
        with (
            socket.create_server((host, 0), backlog=socket.SOMAXCONN) as listener,
            HelloServer(listener, token, workers, label="the driver's control server") as server,
        ):
            address = listener.getsockname()[:2]
            self._serving = [actor.serve.remote(address) for actor in self._actors]
            started = time.monotonic()
            first_stop: float | None = None
            while server.missing:
                stopped = self._stopped()
                now = time.monotonic()
                if stopped and first_stop is None:
                    first_stop = now
                live_missing = set(server.missing) - set(stopped)
                grace_over = first_stop is not None and (
                    not live_missing or now - first_stop > LIVE_CONNECT_GRACE_S
                )
                if grace_over or now - started > self._start_timeout_s:
                    self._fail_to_connect(server, stopped, f"{address[0]}:{address[1]}", now - started)
                server.poll(CHECK_EVERY_S)
        self._connections = [socket_connection(server.sockets[w]) for w in workers]

    def _fail_to_connect(
        self, server: HelloServer, stopped: Sequence[int], address: str, waited_s: float
    ) -> NoReturn:
        """Stop, naming every actor that did not connect (or stopped) and why."""
        reasons = {w: f"no connection after {waited_s:.0f} s" for w in server.missing}
        reasons.update({w: self._death(w) for w in stopped})
        details = "; ".join(f"{self._name(w)}: {reason}" for w, reason in sorted(reasons.items()))
        dropped = (
            f"; dropped {len(server.dropped)} other connections: {server.dropped}" if server.dropped else ""
        )
        fix = "" if stopped else " (fix: let the nodes reach the driver's address)"
        message = (
            f"{len(server.missing)} of {len(self._actors)} workers did not connect to the driver at {address}"
        )
        self.fail(min(reasons), "connect", f"{message}: {details}{dropped}{fix}", "")

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

    def close(self) -> None:
        """Stop every actor; stop Ray when this backend started it."""
        self._shutdown_workers()
        if self._owns_ray:
            ray_session.shutdown()
            self._owns_ray = False

    def _shutdown_workers(self) -> None:
        for connection in self._connections:
            with contextlib.suppress(OSError, ValueError):
                connection.send(Shutdown())
        if self._serving:
            ray.wait(self._serving, num_returns=len(self._serving), timeout=5.0)
        self._terminate()

    def _terminate(self) -> None:
        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        for connection in self._connections:
            connection.close()
        self._actors, self._serving, self._connections, self._layout = [], [], [], None

    # ------------------------------------------------------------------ faults
    def _stopped(self) -> list[int]:
        if not self._serving:
            return []
        done, _ = ray.wait(self._serving, num_returns=len(self._serving), timeout=0)
        finished = {id(ref) for ref in done}
        return [w for w, ref in enumerate(self._serving) if id(ref) in finished]

    def _death(self, worker: int) -> str:
        if worker >= len(self._serving):
            return "actor died"
        try:
            ray.get(self._serving[worker], timeout=DEATH_REPORT_WAIT_S)
        except GetTimeoutError:  # Ray has not noticed yet; the connection closing is proof enough
            return "actor died (its process closed the connection to the driver)"
        except RayActorError as error:
            return f"actor died ({_first_line(error)})"
        except RayError as error:
            return _explain(error)
        return "actor stopped serving (its control connection closed)"

    def _placed(self, refs: Sequence[Any], node_of: Mapping[int, int]) -> list[Any]:
        """The results of every actor's first call, each of which returns once Ray has placed and started that
        actor: all within one start timeout (the actors start together), else a failure naming every late
        actor and its plan node (a node without a free CPU or GPU, or a start slower than the timeout)."""
        _, waiting = ray.wait(list(refs), num_returns=len(refs), timeout=self._start_timeout_s)
        pending = {ref.hex() for ref in waiting}
        late = [w for w, ref in enumerate(refs) if ref.hex() in pending]
        if late:
            where = ", ".join(f"{self._name(w)} (plan node {node_of[w]})" for w in late)
            self.fail(
                late[0],
                "start",
                f"Ray did not place and start {where} within {self._start_timeout_s:g} s: its node has no free "
                "CPU (or GPU) for it, or it starts slower than that (fix: see `ray status`; free the node's "
                "resources, use fewer devices, or allow a longer start)",
                "",
            )
        return [self._get(ref, w) for w, ref in enumerate(refs)]

    def _get(self, ref: Any, worker: int, op_label: str = "setup") -> Any:
        try:
            return ray.get(ref)
        except RayActorError as error:
            self.fail(worker, op_label, f"actor died ({_first_line(error)})", "")
        except RayError as error:
            self.fail(worker, op_label, _explain(error), str(error))

    # ------------------------------------------------------------------ inspection
    def worker_pids(self) -> dict[str, int]:
        """Process id of every actor, keyed ``component[rank]``."""
        return {name: int(described[0]) for name, described in self._describe_all().items()}

    def worker_nodes(self) -> dict[str, str]:
        """Ray node id of every actor, keyed ``component[rank]`` (to check the placement)."""
        return {name: str(described[1]) for name, described in self._describe_all().items()}

    def _describe_all(self) -> dict[str, tuple]:
        """:meth:`executor.ray_actor.RayWorker.describe` of every actor, keyed ``component[rank]``."""
        refs = [actor.describe.remote() for actor in self._actors]
        return {self._name(w): self._get(ref, w, "describe") for w, ref in enumerate(refs)}


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


def _explain(error: RayError) -> str:
    """A Ray error in one line: for a call that raised, the actor's own exception (Ray's first line names only
    the call and the actor's repr)."""
    if isinstance(error, RayTaskError) and isinstance(error.cause, BaseException):
        return f"{error.function_name} raised {type(error.cause).__name__}: {_first_line(error.cause)}"
    return _first_line(error)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
