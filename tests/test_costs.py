"""The cost model: interpolation over batch, scaling over devices, generation segments, extrapolation warnings."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from factories import grpo_trace, grpo_workflow

from rlinf.core.cluster import parse_cluster
from rlinf.core.costs import fit
from rlinf.core.errors import ConfigError, ExtrapolationWarning, RlinfError
from rlinf.core.trace import CostSample, Trace


def _trace(samples: list[CostSample], lengths: tuple[float, ...] = ()) -> Trace:
    return Trace(
        workflow=grpo_workflow(),
        cluster=parse_cluster("8xH100"),
        provenance={"kind": "synthesized"},
        samples=samples,
        response_lengths=lengths,
    )


def test_interpolates_between_batches_and_scales_over_devices() -> None:
    costs = fit(
        _trace(
            [
                CostSample(component="actor", op="train", devices=2, samples=8, seconds=1.0),
                CostSample(component="actor", op="train", devices=2, samples=40, seconds=3.0),
            ]
        )
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExtrapolationWarning)
        # 24 samples on 2 replicas = 12 per replica, halfway between 4 and 20 per replica.
        assert costs.compute_seconds("actor", "train", 2, 24) == pytest.approx(2.0)
    with pytest.warns(
        ExtrapolationWarning, match=r"scales actor.train to 4 devices from samples on 2-2 devices"
    ):
        # Data-parallel scaling: 48 samples on 4 devices is 12 per replica again.
        assert costs.compute_seconds("actor", "train", 4, 48) == pytest.approx(2.0)


def test_warns_when_extrapolating_beyond_the_profiled_batches() -> None:
    costs = fit(
        _trace(
            [
                CostSample(component="actor", op="train", devices=1, samples=10, seconds=1.0),
                CostSample(component="actor", op="train", devices=1, samples=20, seconds=2.0),
            ]
        )
    )
    with pytest.warns(
        ExtrapolationWarning,
        match=r"extrapolates actor.train: 40 samples per replica on 1 devices is outside the profiled 10-20",
    ):
        assert costs.compute_seconds("actor", "train", 1, 40) == pytest.approx(4.0)


def test_out_of_range_shares_borrow_the_shape_of_a_device_count_that_measured_them() -> None:
    """A share outside one device count's profiled range, measured on another device count, follows that count's
    shape scaled to agree at the nearest profiled end (a straight line from 2 devices would give 2.5 s at 8 per
    replica and 17.5 s at 128); with no such count, the straight line and its warning stay."""
    samples = [
        CostSample(component="actor", op="train", devices=1, samples=n, seconds=s)
        for n, s in ((8, 1.0), (32, 2.0), (64, 4.0), (128, 12.0))
    ] + [
        CostSample(component="actor", op="train", devices=2, samples=64, seconds=3.0),  # 32 per replica
        CostSample(component="actor", op="train", devices=2, samples=128, seconds=5.0),  # 64 per replica
    ]
    with pytest.warns(ExtrapolationWarning, match=r"from the shape measured on 1 devices .*matched at 32"):
        # 8 per replica: the 1-device curve says 1.0 there against 2.0 at 32; the 2-device level at 32 is 3.0.
        assert fit(_trace(samples)).compute_seconds("actor", "train", 2, 16) == pytest.approx(1.5)
    with pytest.warns(ExtrapolationWarning, match=r"matched at 64"):
        assert fit(_trace(samples)).compute_seconds("actor", "train", 2, 256) == pytest.approx(
            12.0 * 5.0 / 4.0
        )
    with pytest.warns(ExtrapolationWarning, match=r"outside the profiled 32-64 \(batches 64-128 on 2"):
        assert fit(_trace(samples)).compute_seconds("actor", "train", 2, 512) == pytest.approx(
            5.0 + 2.0 / 32 * 192
        )


def test_repeated_samples_use_the_median() -> None:
    costs = fit(
        _trace(
            [
                CostSample(component="actor", op="train", devices=1, samples=10, seconds=s)
                for s in (1.0, 1.1, 9.0)
            ]
        )
    )
    assert costs.compute_seconds("actor", "train", 1, 10) == pytest.approx(1.1)


def test_missing_component_costs_name_the_component() -> None:
    costs = fit(_trace([CostSample(component="actor", op="train", devices=1, samples=10, seconds=1.0)]))
    with pytest.raises(RlinfError, match=r"trace has no samples for rollout.generate; fix: profile"):
        costs.compute_seconds("rollout", "generate", 1, 10)


def test_generation_segments_follow_group_completion_and_sum_to_one() -> None:
    lengths = tuple(float(x) for x in np.linspace(100, 8000, 500))
    costs = fit(grpo_trace(response_lengths=lengths))
    fractions = costs.generation_fractions(8)
    assert fractions[-1] == pytest.approx(1.0)
    assert np.all(np.diff(fractions) > 0)
    # A long tail: the first micro-batch of groups is done well before the halfway point of generation.
    assert fractions[0] < 0.6
    no_lengths = fit(grpo_trace())
    assert np.allclose(no_lengths.generation_fractions(4), [0.25, 0.5, 0.75, 1.0])


def test_stochastic_generation_depends_only_on_the_seed() -> None:
    lengths = tuple(float(x) for x in np.random.default_rng(0).lognormal(7, 0.8, 300))
    costs = fit(grpo_trace(response_lengths=lengths))
    first = costs.generation_fractions(4, np.random.default_rng(5))
    again = costs.generation_fractions(4, np.random.default_rng(5))
    other = costs.generation_fractions(4, np.random.default_rng(6))
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)


def test_movement_uses_measured_bandwidth_or_links() -> None:
    from rlinf.core.program import Op

    samples = [
        CostSample(component="actor", op="offload", devices=1, samples=0, seconds=2.0, num_bytes=10**9)
    ]
    costs = fit(_trace(samples))
    offload = Op(
        index=0, kind="offload", component="actor", name="offload", devices=(0,), num_bytes=10**9, link="host"
    )
    assert costs.movement_seconds(offload) == pytest.approx(2.0 + 10e-6)
    onload = Op(
        index=0,
        kind="onload",
        component="actor",
        name="onload",
        devices=(0,),
        num_bytes=55 * 10**9,
        link="host",
    )
    assert costs.movement_seconds(onload) == pytest.approx(1.0 + 10e-6)  # H100 preset: 55 GB/s host link
    local = Op(index=0, kind="transfer", component="actor", name="transfer", num_bytes=10**9, link="local")
    assert costs.movement_seconds(local) == 0.0


def test_fit_refuses_another_device_type() -> None:
    with pytest.raises(
        ConfigError, match=r"cluster='1x8xA100': has A100 devices but the trace was made on H100"
    ):
        fit(grpo_trace(), parse_cluster("8xA100"))


def _loop_trace(samples: list[CostSample]) -> Trace:
    from factories import embodied_workflow

    return Trace(
        workflow=embodied_workflow(),
        cluster=parse_cluster("1x8xCPU"),
        provenance={"kind": "synthesized"},
        samples=samples,
    )


def test_shared_loop_steps_are_priced_from_shared_samples_where_measured() -> None:
    def step(samples: int, seconds: float, shared: bool) -> CostSample:
        return CostSample(
            component="env", op="env_step", devices=1, samples=samples, seconds=seconds, shared=shared
        )

    costs = fit(
        _loop_trace([step(2, 1.0, False), step(8, 4.0, False), step(4, 3.0, True), step(8, 5.0, True)])
    )
    # Apart: only the unshared samples (2 -> 1 s, 8 -> 4 s); together: the shared ones.
    assert costs.compute_seconds("env", "env_step", 1, 4, shared=False) == pytest.approx(2.0)
    assert costs.compute_seconds("env", "env_step", 1, 4, shared=True) == pytest.approx(3.0)
    assert costs.compute_seconds("env", "env_step", 1, 6, shared=True) == pytest.approx(4.0)
    # Outside the shared samples' sizes, or at another device count: every sample, pooled (median at 8 of 4 and 5).
    assert costs.compute_seconds("env", "env_step", 1, 2, shared=True) == pytest.approx(1.0)
    pooled = fit(_loop_trace([step(2, 1.0, False), step(8, 4.0, False), step(8, 5.0, False)]))
    assert costs.compute_seconds("env", "env_step", 1, 8, shared=False) == pytest.approx(4.0)
    assert pooled.compute_seconds("env", "env_step", 1, 8, shared=True) == pytest.approx(4.5)
    assert not pooled.flagged_curves


def test_shared_flag_round_trips_and_is_checked(tmp_path) -> None:
    from rlinf.core.errors import RlinfError as Error
    from rlinf.core.trace import load_trace

    samples = [
        CostSample(component="env", op="env_step", devices=1, samples=4, seconds=1.0, shared=True),
        CostSample(component="env", op="env_step", devices=1, samples=4, seconds=1.0),
    ]
    trace = _loop_trace(samples)
    written = trace.to_dict()["samples"]
    assert written[0]["shared"] is True and "shared" not in written[1]
    trace.save(tmp_path / "t.json")
    assert load_trace(tmp_path / "t.json").samples == trace.samples
    with pytest.raises(Error, match=r"shared"):
        CostSample(component="env", op="env_step", devices=1, samples=4, seconds=1.0, shared="yes")  # type: ignore[arg-type]
