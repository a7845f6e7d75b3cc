"""The public workload API: what a user writes to train their own RL workflow with rlinf.

A workload is an object with a name and five methods (:class:`Workload`); its components are plain worker
classes (:class:`Worker`). rlinf owns the run settings (the config's ``execution`` section,
:class:`~rlinf.core.run_settings.RunSettings`: iterations, seed, mode, checkpoints, granularity, offload, staleness)
and hands them to :meth:`Workload.load_config`; the workload's config holds only its own keys. Everything about
plans is derived by rlinf from the workflow and the lowered program: fixed-mode and probe plans, feasibility checks,
and each worker's :class:`~rlinf.api.worker_context.WorkerContext` (rank, share of every micro-batch, micro-batch
count, loop stages, offload, seed), handed to ``Worker.setup``. The executor drives workers through this same
protocol. Point a config at a workload with ``workload: package.module:attribute`` or
``workload: path/to/file.py:attribute``. A walk-through: ``docs/workloads.md``; a complete example:
``examples/custom_workload/``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from rlinf.api.iteration import IterationResult
from rlinf.api.worker_context import WorkerContext
from rlinf.core.payloads import Payload
from rlinf.core.run_settings import RunSettings
from rlinf.core.workflow import Workflow

C = TypeVar("C")


class Worker(Protocol):
    """One replica of one component, in its own process on its own device: what the executor calls
    (:mod:`executor.protocol`). Only :meth:`setup`, :meth:`compute`, :meth:`checkpoint` and :meth:`restore` are
    required; :meth:`state_tensors` defaults to no state, and a component that sends (receives) weights in a weight
    sync implements :meth:`weights` (:meth:`load_weights`). A worker may have other methods, which the runner or a
    test calls between iterations (``backend.call``)."""

    def setup(self, config: Any, context: WorkerContext) -> None:
        """Build models, environments and optimizers on ``context.device`` for this replica's share; called once,
        after the device is bound (and, when ``context.world > 1``, after the component's collective group is
        initialised, so data-parallel replicas may all-reduce in :meth:`compute`)."""

    def compute(
        self, op_name: str, micro_batch: int, step: int, inputs: Sequence[Payload]
    ) -> tuple[Payload, Mapping[str, Any]]:
        """Run one op of micro-batch ``micro_batch`` (loop step ``step``) on the producers' payloads (one per
        producer replica, already cut to this replica's share); return the payload for the consumers and small
        JSON-ready values (losses, episode returns) for :meth:`Workload.metrics`."""

    def checkpoint(self) -> dict[str, Any]:
        """Everything needed to resume this replica, between iterations: tensors, arrays, numbers, strings and
        lists/tuples/dicts of them (stored as safetensors + JSON, never pickled)."""

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`checkpoint` of the same replica, as if never stopped."""

    def state_tensors(self) -> list[Any]:
        """Live tensors of the resident state (weights, optimizer), moved in place by offload/onload."""

    def weights(self) -> Payload:
        """Weights for the destinations of a weight sync (rank 0 of the source sends)."""

    def load_weights(self, payload: Payload) -> None:
        """Take the weights of a weight sync."""


class Workload(Protocol, Generic[C]):
    """An RL workload, generic over its typed config ``C``. rlinf calls these five methods and, when the workload
    has them, :meth:`check`, :meth:`check_replica` and :meth:`response_lengths`; nothing else."""

    name: str
    """Short name (run directories, checkpoints)."""
    headline: Mapping[str, str]
    """Metric key -> short label, shown in the progress bar (e.g. ``{"episodic_return": "ret"}``)."""

    def load_config(self, data: Mapping[str, Any], source: str, settings: RunSettings) -> C:
        """The typed config from the YAML mapping ``data`` read from ``source`` (without its ``workload`` key and
        rlinf's ``execution`` section); raise :class:`rlinf.core.errors.ConfigError` naming the key for a bad or
        unknown one (:func:`rlinf.api.structure_config` does this for a tree of attrs classes). ``settings`` are the
        run's validated settings (:class:`~rlinf.core.run_settings.RunSettings`, command-line flags applied): copy
        into the config what the workload computes with (``settings.seed`` for its RNGs, ``settings.iterations``
        for a learning-rate schedule)."""

    def check(self, config: C) -> None:
        """Optional: check the run's config against what lies outside it (checkpoints, tokenizers, data) once, on the
        driver, after ``--iterations`` and ``--seed`` are applied and before any worker starts (``rlinf train``,
        ``rlinf validate``); raise :class:`rlinf.core.errors.ConfigError` naming the key. What fails here is one
        line and exit code 2, not a worker failure after models have loaded."""

    def check_replica(self, config: C, context: WorkerContext) -> None:
        """Optional: check what one replica would get under a plan (``context``, as its worker's ``setup`` gets it,
        without a device: ``context.device`` is ``None``), on the driver, whenever a plan is checked (a fixed-mode
        plan, ``--plan``, each plan auto-planning considers and each probe plan) and before any worker starts;
        raise :class:`rlinf.core.errors.ConfigError` naming the key (rlinf adds the plan). A plan refused here is
        never run; a share refused only in ``setup`` would fail after the workers have loaded."""

    def workflow(self, config: C) -> Workflow:
        """The macro flow of one iteration: components, edges, loop, weight syncs, batch."""

    def workers(self, config: C) -> Mapping[str, type]:
        """The worker class of every component of :meth:`workflow`."""

    def metrics(self, result: IterationResult, config: C, iteration: int) -> dict[str, Any]:
        """JSON-ready metrics of one measured iteration (:class:`~rlinf.api.iteration.IterationResult`):
        ``result.timeline`` is the measured :class:`~rlinf.core.timeline.Timeline` and ``result.infos`` the
        ``info`` mappings the workers returned, each with its ``component``, ``rank``, ``op_name`` and ``info``.
        Include ``iteration_s`` (the timeline's ``iteration_s``) and a throughput."""

    def summary(self, recent: Sequence[Mapping[str, Any]]) -> str:
        """One line about how the run ended, printed when training ends: ``recent`` are the :meth:`metrics` of
        its last iterations (up to 10 that both sampled and trained, oldest first), so that a figure some
        iterations lack (the return of the episodes an iteration finished) is still stated
        (:func:`episode_mean`)."""

    def response_lengths(self, result: IterationResult, config: C) -> Sequence[int]:
        """Optional (language workloads): the generated tokens of every response of one measured iteration
        (``result`` as in :meth:`metrics`), each >= 1. The profiler records them as the trace's response-length
        distribution, from which the simulator draws the long tail (``rlinf simulate --stochastic``) and the
        planner predicts when streamed micro-batches finish; without this method that distribution stays empty."""


def reported_response_lengths(result: IterationResult) -> list[int]:
    """The lengths the workers of one iteration reported under ``info["response_lengths"]``, in record order: what
    a workload whose rollout reports them returns from :meth:`Workload.response_lengths`."""
    return [n for record in result.infos for n in record.info.get("response_lengths", ())]


def episode_mean(
    recent: Sequence[Mapping[str, Any]], key: str = "episodic_return", count_key: str = "episodes"
) -> tuple[float | None, int]:
    """The mean of ``key`` over the episodes the iterations of ``recent`` finished (each iteration's ``key`` is
    the mean of its ``count_key`` episodes, ``None`` when it finished none), and the number of episodes; ``(None,
    0)`` when none finished."""
    total = sum(int(m.get(count_key) or 0) for m in recent if m.get(key) is not None)
    if total == 0:
        return None, 0
    weighted = sum(float(m[key]) * int(m[count_key]) for m in recent if m.get(key) is not None)
    return weighted / total, total


WORKLOAD_METHODS = ("load_config", "workflow", "workers", "metrics", "summary")
WORKER_METHODS = ("setup", "compute", "checkpoint", "restore")
