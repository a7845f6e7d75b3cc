"""The one payload concatenation (``rlinf.api.concat_payloads``, used by the executor's tests workers and every built-in
workload) and the row counting and slicing the executor routes payloads with."""

from __future__ import annotations

import numpy as np
import pytest

from rlinf.api import concat_payloads as api_concat
from rlinf.core.payloads import concat_payloads, num_rows, slice_rows


def test_payloads_join_along_the_sample_axis_in_order_skipping_empty_ones() -> None:
    first = {"obs": np.arange(6).reshape(3, 2), "reward": np.array([1.0, 2.0, 3.0])}
    second = {"reward": np.array([4.0]), "obs": np.array([[6, 7]])}  # keys in another order
    joined = concat_payloads([{}, first, {}, second])
    assert sorted(joined) == ["obs", "reward"] and num_rows(joined) == 4
    np.testing.assert_array_equal(joined["obs"], np.arange(8).reshape(4, 2))
    np.testing.assert_array_equal(joined["reward"], [1.0, 2.0, 3.0, 4.0])
    assert concat_payloads([{}, {}]) == {} and concat_payloads([]) == {}
    assert api_concat is concat_payloads  # one function for plug-ins and the executor


def test_payloads_with_other_keys_or_ragged_rows_are_refused() -> None:
    with pytest.raises(ValueError, match=r"payload keys differ: \['obs'\] vs \['obs', 'reward'\]"):
        concat_payloads([{"obs": np.zeros(2), "reward": np.zeros(2)}, {"obs": np.zeros(1)}])
    with pytest.raises(ValueError, match=r"disagree on the sample axis: \[2, 3\] rows"):
        num_rows({"obs": np.zeros(2), "reward": np.zeros(3)})


def test_slicing_and_joining_round_trip() -> None:
    payload = {"tokens": np.arange(20).reshape(5, 4), "answer": np.arange(5)}
    parts = [slice_rows(payload, lo, hi) for lo, hi in ((0, 2), (2, 2), (2, 5))]
    assert [num_rows(p) for p in parts] == [2, 0, 3] and num_rows({}) == 0
    joined = concat_payloads(parts)
    for key, array in payload.items():
        np.testing.assert_array_equal(joined[key], array)
