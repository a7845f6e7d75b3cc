"""Executes programs with real workers and measures them.

``run(program, workers, backend=...)`` dispatches each op when its dependencies are done and its devices have
finished the ops before it in their order (the simulator's rule), and returns the measured
:class:`rlinf.core.timeline.Timeline` plus one :class:`rlinf.core.trace.CostSample` per op. The executor imports only the
``rlinf`` core and the public worker protocol (:mod:`rlinf.api`: ``Worker`` and the ``WorkerContext`` it builds for
each replica); it knows workers only through :mod:`executor.protocol`. Backends: :class:`LocalBackend` (processes
on this machine) and ``executor.ray_backend.RayBackend`` (Ray actors across nodes; imported on demand so that
Ray stays optional); both run :func:`executor.dispatch.drive`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from executor.devices import Device, cpu_devices, cuda_devices, is_oversubscribed
from executor.dispatch import Backend, OpInfo, RunResult, WorkerError
from executor.local import LocalBackend
from executor.protocol import Worker
from executor.runtime import WorkerSpec
from executor.watchdog import OutOfTime, StallError, Watchdog
from rlinf.core.errors import ConfigError
from rlinf.core.program import Program
from rlinf.core.schedule import Step
from rlinf.core.timeline import Timeline

BACKENDS = ("local", "ray")


def open_backend(
    kind: str,
    devices: Sequence[Device],
    *,
    address: str | None = None,
    nodes: Sequence[int] | None = None,
    watchdog: Watchdog | None = None,
) -> Any:
    """A backend of ``kind`` (``local`` or ``ray``) over ``devices``; ``address`` and ``nodes`` (plan node per
    device) are for Ray; ``watchdog``: when a run counts as stalled (the default :class:`Watchdog`). Use the
    result as a context manager."""
    if kind == "local":
        if address is not None or (nodes is not None and any(nodes)):
            raise ConfigError("--address", address, "only the ray backend spans nodes", "add --backend ray")
        return LocalBackend(devices, watchdog=watchdog)
    if kind == "ray":
        require_ray()
        from executor.ray_backend import RayBackend

        return RayBackend(devices, address=address, nodes=nodes, watchdog=watchdog)
    raise ConfigError("--backend", kind, "unknown backend", f"use one of {list(BACKENDS)}")


def require_ray() -> None:
    """Raise a :class:`ConfigError` with the install command when Ray cannot be imported."""
    try:
        import ray  # noqa: F401
    except ImportError as error:
        raise ConfigError(
            "--backend", "ray", f"Ray is not installed ({error})", 'pip install "ray[default]==2.60.0"'
        ) from None


def run(
    program: Program,
    workers: Mapping[str, WorkerSpec],
    *,
    backend: Backend,
    step: Step | None = None,
    expected: Timeline | None = None,
    deadline: float | None = None,
) -> RunResult:
    """Execute one iteration of ``program`` with ``workers`` (component -> spec) on ``backend``, as ``step`` of its
    run (:meth:`rlinf.core.program.Program.schedule`: under a staleness bound, its phase says who works; every
    batch moved is stamped with its policy version, :meth:`executor.control.ControlDriver.execute`).
    ``expected``: the program's predicted timeline (its longest op scales the watchdog's bound); ``deadline``: a
    ``time.monotonic()`` past which the run is stopped (:class:`OutOfTime`). A run in which no op finishes for the
    watchdog's bound raises :class:`StallError`."""
    return backend.execute(program, workers, step, expected=expected, deadline=deadline)


__all__ = [
    "BACKENDS",
    "Backend",
    "Device",
    "LocalBackend",
    "OpInfo",
    "OutOfTime",
    "RunResult",
    "StallError",
    "Watchdog",
    "Worker",
    "WorkerError",
    "WorkerSpec",
    "cpu_devices",
    "cuda_devices",
    "is_oversubscribed",
    "open_backend",
    "require_ray",
    "run",
]
