"""What a workload reads of one measured iteration (:meth:`rlinf.api.Workload.metrics`): the measured timeline and
the small ``info`` mappings the workers returned. Read-only protocols, so that the executor's own result type
(``executor.RunResult``) is one without the workload importing the executor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from rlinf.core.timeline import Timeline


class WorkerInfo(Protocol):
    """What one worker's ``compute`` returned beside its payload, for one op."""

    @property
    def component(self) -> str:
        """The component whose worker returned it."""

    @property
    def rank(self) -> int:
        """The replica's rank among the component's replicas."""

    @property
    def op_name(self) -> str:
        """The op's name (the workflow's op of the component, e.g. ``train``)."""

    @property
    def info(self) -> Mapping[str, Any]:
        """The JSON-ready values the worker returned (losses, episode returns, response lengths)."""


class IterationResult(Protocol):
    """One measured iteration, as :meth:`rlinf.api.Workload.metrics` gets it."""

    @property
    def timeline(self) -> Timeline:
        """The measured timeline (``timeline.iteration_s``: the iteration's seconds)."""

    @property
    def infos(self) -> Sequence[WorkerInfo]:
        """Every worker's info of the iteration, in program order (op, component, rank)."""
