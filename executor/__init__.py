"""Executes programs with real workers and measures them.

``run(program, workers, backend=...)`` dispatches each op when its dependencies are done and its devices have
finished the ops before it in their order (the simulator's rule), and returns the measured
:class:`rlinf.timeline.Timeline` plus one :class:`rlinf.trace.CostSample` per op. The executor imports only the
``rlinf`` core; it knows workers only through :mod:`executor.protocol`.
"""

from __future__ import annotations

from collections.abc import Mapping

from executor.devices import Device, cpu_devices, cuda_devices, is_oversubscribed
from executor.local import LocalBackend, OpInfo, RunResult, WorkerError
from executor.protocol import Worker
from executor.runtime import WorkerSpec
from rlinf.program import Program


def run(program: Program, workers: Mapping[str, WorkerSpec], *, backend: LocalBackend) -> RunResult:
    """Execute one iteration of ``program`` with ``workers`` (component -> spec) on ``backend``."""
    return backend.execute(program, workers)


__all__ = [
    "Device",
    "LocalBackend",
    "OpInfo",
    "RunResult",
    "Worker",
    "WorkerError",
    "WorkerSpec",
    "cpu_devices",
    "cuda_devices",
    "is_oversubscribed",
    "run",
]
