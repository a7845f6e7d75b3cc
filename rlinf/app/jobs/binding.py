"""Workers of a workload as the executor runs them: :class:`BoundWorker` gives a user's worker its
:class:`~rlinf.api.worker_context.WorkerContext` at setup and supplies the optional methods it does not implement.

The executor calls ``setup(spec_config, rank, world, device)`` with the :class:`Binding` below as the spec's
config (the workload's config plus the component's facts read from the program); everything else is passed
through unchanged."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from rlinf.api.worker_context import ComponentFacts, context_for


@attrs.frozen(kw_only=True)
class Binding:
    """What one component's workers are set up with."""

    config: Any
    facts: ComponentFacts


class BoundWorker:
    """One replica of a workload's component, as the executor's worker protocol sees it."""

    def __init__(self, worker_class: type) -> None:
        self.inner = worker_class()

    def setup(self, binding: Binding, rank: int, world: int, device: Any) -> None:
        """Build the context from the facts and the replica, then set the user's worker up."""
        self.inner.setup(binding.config, context_for(binding.facts, rank=rank, world=world, device=device))

    def compute(self, op_name: str, micro_batch: int, step: int, inputs: Sequence[Any]) -> tuple[Any, Any]:
        """The user's ``compute``."""
        return self.inner.compute(op_name, micro_batch, step, inputs)

    def state_tensors(self) -> list[Any]:
        """The user's live state tensors (none when the worker does not say)."""
        method = getattr(self.inner, "state_tensors", None)
        return [] if method is None else list(method())

    def weights(self) -> Mapping[str, Any]:
        """The user's weights for a weight sync."""
        return self.inner.weights()

    def load_weights(self, payload: Mapping[str, Any]) -> None:
        """The user's ``load_weights``."""
        self.inner.load_weights(payload)

    def checkpoint(self) -> dict[str, Any]:
        """The user's ``checkpoint``."""
        return self.inner.checkpoint()

    def restore(self, state: dict[str, Any]) -> None:
        """The user's ``restore``."""
        self.inner.restore(state)

    def __getattr__(self, name: str) -> Any:
        """Any other method the runner or a test calls between iterations (``backend.call``)."""
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
