"""The worker side of the Ray backend: one actor per component replica, and its mailbox on the object store.

An actor runs the same :class:`executor.runtime.CommandRunner` as a local worker process. What differs is how
payloads travel (the transport follows the placement):

* ``local``: the consumer is this same actor, so the payload object is handed over;
* ``inline``: payloads under :data:`INLINE_MAX_BYTES` ride back to the driver with the reply and on to the
  consumer with its next batch (cheaper than an object-store round trip for a few observations);
* ``object_store``: larger payloads are put into the Ray object store; the consumer gets the reference and
  reads it: shared memory when it is on the same node, a transfer by Ray between the nodes' stores otherwise.

Ops finish on wall-clock time (``time.time``), the one clock the nodes of a cluster share (through NTP).
Data-parallel replicas join a ``torch.distributed`` group (gloo on CPUs, NCCL on GPUs) at rank 0's node address.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import ray

from executor.devices import Device
from executor.routing import Replica
from executor.runtime import CommandRunner, WorkerSpec

INLINE_MAX_BYTES = 64 * 1024
"""Payloads smaller than this travel with the reply instead of through the object store."""


class RayMailbox:
    """One actor's channels: payloads it received, and the ones it produced for other workers this batch."""

    def __init__(self, me: int) -> None:
        self.me = me
        self._arrived: dict[tuple, Any] = {}
        self._outbox: list[tuple[int, tuple, Any]] = []

    def send(self, dst: int, key: tuple, payload: Mapping[str, np.ndarray]) -> int:
        """Address ``payload`` to worker ``dst``; returns the bytes carried (0 within this actor)."""
        if dst == self.me:
            self._arrived[key] = dict(payload)
            return 0
        arrays = {name: np.ascontiguousarray(value) for name, value in payload.items()}
        num_bytes = sum(a.nbytes for a in arrays.values())
        value: Any = arrays if num_bytes < INLINE_MAX_BYTES else ray.put(arrays)
        self._outbox.append((dst, key, value))
        return num_bytes

    def receive(self, key: tuple) -> dict[str, np.ndarray]:
        """The payload sent under ``key`` (the driver delivered it with this batch)."""
        assert key in self._arrived, f"payload {key} was not delivered before the op that reads it"
        value = self._arrived[key]
        if isinstance(value, ray.ObjectRef):
            value = {name: np.array(array) for name, array in ray.get(value).items()}  # writable copies
            self._arrived[key] = value
        return value

    def deliver(self, entries: Sequence[tuple[tuple, Any]]) -> None:
        """Take payloads (or object references) the driver forwarded."""
        self._arrived.update(entries)

    def take_outbox(self) -> list[tuple[int, tuple, Any]]:
        """Payloads produced since the last call, as ``(destination worker, key, payload or reference)``."""
        out, self._outbox = self._outbox, []
        return out

    def clear(self) -> None:
        """Drop every received payload (end of an iteration)."""
        self._arrived.clear()


class RayWorker:
    """Actor body: builds the worker on its device and runs batches of commands for the driver."""

    def __init__(self, replica: Replica, device: Device, spec: WorkerSpec) -> None:
        self.replica = replica
        self.device = device
        self.spec = spec
        self.runner: CommandRunner | None = None

    def describe(self) -> tuple[int, str, str, tuple[int, ...]]:
        """(pid, Ray node id, node IP, GPU ids Ray gave this actor)."""
        gpus = tuple(int(g) for g in ray.get_gpu_ids())
        node_id = ray.get_runtime_context().get_node_id()
        return os.getpid(), node_id, ray.util.get_node_ip_address(), gpus

    def collective_address(self) -> str:
        """A free TCP address on this node for the component's collective group (called on rank 0)."""
        host = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            return f"tcp://{host}:{probe.getsockname()[1]}"

    def setup(self, collective_address: str) -> tuple:
        """Bind the device, join the collective group, build the worker; ``("ready", ...)`` or ``("error", ...)``."""
        replica = self.replica
        try:
            device = self.device
            if device.kind == "cuda":  # Ray exposes the GPU it assigned as the only visible one
                device = attrs.evolve(device, core=0)
            device.bind()
            if replica.world > 1:
                import torch.distributed as dist

                dist.init_process_group(
                    device.collective_backend,
                    init_method=collective_address,
                    rank=replica.rank,
                    world_size=replica.world,
                )
            worker = self.spec.factory()
            worker.setup(self.spec.config, replica.rank, replica.world, device)
            self.runner = CommandRunner(worker, replica, device, RayMailbox(replica.worker), clock=time.time)
            return ("ready", replica.worker, self.runner.resident_bytes())
        except BaseException as error:
            return ("error", replica.worker, -1, f"{type(error).__name__}: {error}", traceback.format_exc())

    def prepare(self, offloaded: bool) -> tuple:
        """Offload or onload before an iteration (untimed)."""
        assert self.runner is not None
        self.runner.prepare(offloaded)
        return ("ready", self.replica.worker, self.runner.resident_bytes())

    def run(self, run_id: int, commands: list[tuple], deliveries: list[tuple[tuple, Any]]) -> tuple:
        """Run a batch; returns (replies, outbox). Stops at the first failing command."""
        runner = self.runner
        assert runner is not None
        mailbox = runner.mailbox
        assert isinstance(mailbox, RayMailbox)
        runner.run_id = run_id
        mailbox.deliver(deliveries)
        replies = []
        for command in commands:
            reply = runner.execute(command)
            replies.append(reply)
            if reply[0] == "error":
                break
        return replies, mailbox.take_outbox()

    def end_run(self) -> None:
        """Forget the iteration's outputs and payloads."""
        assert self.runner is not None
        self.runner.end_run()

    def call(self, method: str, args: tuple) -> Any:
        """A worker method between runs (``checkpoint``, ``restore``)."""
        assert self.runner is not None
        return self.runner.call(method, args)
