"""How a batch's stamp travels (:class:`rlinf.core.schedule.Stamp`): the policy version that produced a payload goes
with it as one more array (:data:`STAMP_KEY`), put on by the sender (:func:`attach`) and taken off by the receiver
before the worker sees the payload (:func:`detach`); a batch that waits in a consumer's buffer between runs leaves
in a checkpoint as a typed record (:class:`BufferedBatch`), never as a positional list or a pickle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from rlinf.core.errors import ConfigError
from rlinf.core.schedule import Schedule

STAMP_KEY = "rlinf.executor.policy_version"
"""The payload key the stamp travels under (no worker's key: workers never see it)."""


def attach(payload: Mapping[str, Any], policy_version: int) -> dict[str, Any]:
    """``payload`` with its stamp, ready to send."""
    return {**payload, STAMP_KEY: np.array([policy_version], dtype=np.int64)}


def detach(payload: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """``(arrays, policy version)`` of a payload :func:`attach` stamped (the payload itself is left as it is)."""
    assert STAMP_KEY in payload, "a payload moved by the executor without a stamp"
    arrays = {key: value for key, value in payload.items() if key != STAMP_KEY}
    return arrays, int(np.asarray(payload[STAMP_KEY])[0])


_FIELDS = ("worker", "age", "op", "producer", "policy_version", "payload")
_FIX = "resume with the run's own checkpoints, or start a new run"


@attrs.frozen(kw_only=True)
class BufferedBatch:
    """A batch that waits in a consumer's buffer between runs (under a staleness bound): what a checkpoint keeps
    of it, and puts back when the run resumes."""

    worker: int
    """The consumer worker that holds it."""
    age: int
    """How many runs before the last one it was produced (0: in the last run)."""
    op: int
    """The producing op."""
    producer: int
    """The producing worker."""
    policy_version: int
    """Its stamp: the version of the weights that produced it."""
    payload: dict[str, Any]
    """Its arrays (without the stamp)."""

    def to_checkpoint(self) -> dict[str, Any]:
        """The record as checkpoint state (named fields: :mod:`rlinf.app.state_codec` stores it as JSON and
        tensors)."""
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_checkpoint(
        cls, position: int, entry: Any, *, checkpoint_step: int, max_staleness: int
    ) -> BufferedBatch:
        """Entry ``position`` of a checkpoint's ``buffered`` list, checked. An entry of the positional format of
        checkpoints written before batches were stamped (``[worker, age, op, producer, payload]``) still loads:
        its stamp is the policy version of the step that produced it (``checkpoint_step - age``) in the run's
        schedule."""
        field = f"checkpoint buffered batch {position}"
        if isinstance(entry, (list, tuple)) and len(entry) == 5:
            worker, age, op, producer, payload = entry
            produced = int(checkpoint_step) - int(age)
            if produced < 1:
                raise ConfigError(
                    f"{field} age", age, f"is older than the checkpoint's step {checkpoint_step}", _FIX
                )
            schedule = Schedule(num_iterations=checkpoint_step, max_staleness=max_staleness)
            entry = {
                "worker": worker,
                "age": age,
                "op": op,
                "producer": producer,
                "policy_version": schedule.step(produced).policy_version,
                "payload": payload,
            }
        if not isinstance(entry, Mapping) or set(entry) != set(_FIELDS):
            given = sorted(entry) if isinstance(entry, Mapping) else type(entry).__name__
            raise ConfigError(field, given, f"must be a record with exactly {list(_FIELDS)}", _FIX)
        numbers = {}
        for name in _FIELDS[:-1]:
            value = entry[name]
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{field} {name}", value, "must be an integer >= 0", _FIX)
            numbers[name] = int(value)
        payload = entry["payload"]
        if not isinstance(payload, Mapping) or not all(isinstance(k, str) for k in payload):
            raise ConfigError(f"{field} payload", type(payload).__name__, "must map names to arrays", _FIX)
        return cls(**numbers, payload=dict(payload))
