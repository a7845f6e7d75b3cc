"""Payloads: the data a component hands its consumers along an edge of the macro flow.

A payload maps names to NumPy arrays whose first axis is the sample axis (environments, sequences, prompt groups),
so rlinf can split a micro-batch between producer and consumer replicas, and join the shares of several producer
replicas, without understanding what the arrays hold. The executor slices what it sends (:func:`slice_rows`); a
worker joins what it receives (:func:`concat_payloads`, re-exported by :mod:`rlinf.api` for plug-ins); both count
samples with :func:`num_rows`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

Payload = Mapping[str, np.ndarray]
"""Data between components: arrays whose first axis is the sample axis."""


def num_rows(payload: Payload) -> int:
    """Samples in a payload (0 when it is empty); every array must have as many."""
    lengths = {len(array) for array in payload.values()}
    if len(lengths) > 1:
        raise ValueError(f"payload arrays disagree on the sample axis: {sorted(lengths)} rows")
    return lengths.pop() if lengths else 0


def slice_rows(payload: Payload, lo: int, hi: int) -> dict[str, np.ndarray]:
    """Rows ``[lo, hi)`` of every array (views, not copies)."""
    return {key: array[lo:hi] for key, array in payload.items()}


def concat_payloads(payloads: Sequence[Payload]) -> dict[str, np.ndarray]:
    """The payloads of several producer replicas (or micro-batches) as one, joined along the sample axis in the
    order given. Empty payloads are skipped (a replica whose share of a micro-batch was empty); the others must
    hold the same keys. ``{}`` when every payload is empty."""
    parts = [p for p in payloads if p]
    if not parts:
        return {}
    keys = sorted(parts[0])
    for part in parts[1:]:
        if sorted(part) != keys:
            raise ValueError(
                f"payload keys differ: {sorted(part)} vs {keys}; every producer must send the same keys"
            )
    return {key: np.concatenate([np.asarray(p[key]) for p in parts]) for key in keys}
