"""Batches as mappings of numpy arrays whose first axis is the sample (environment) axis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

Batch = Mapping[str, np.ndarray]


def concat_rows(parts: Sequence[Batch]) -> dict[str, np.ndarray]:
    """Concatenate non-empty batches along the first axis (their keys must agree)."""
    present = [p for p in parts if p]
    if not present:
        return {}
    keys = sorted(present[0])
    for part in present:
        assert sorted(part) == keys, f"batch keys differ: {sorted(part)} vs {keys}"
    return {key: np.concatenate([np.asarray(p[key]) for p in present]) for key in keys}
