"""Decode as it happens (rlinf/analytic/decode.py) and the analytic model's use of it: the schedule, preemption, the slowest
replica, the straggler tail."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from rlinf.analytic import roofline
from rlinf.analytic.decode import TAIL_BATCH_FRACTION, schedule_decode, straggler_start
from rlinf.analytic.llm_workload import LLMWorkload, ResponseLengths, model_preset
from rlinf.analytic.physics import Physics
from rlinf.analytic.synthesis import synthesize
from rlinf.core.cluster import parse_cluster
from rlinf.core.errors import ConfigError


@pytest.fixture
def lengths() -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.clip(np.rint(rng.lognormal(np.log(300), 0.6, 200)), 1, 2000).astype(int)


def long_cot(**changes: object) -> LLMWorkload:
    """The 1.5B preset with long responses, decoded as it happens."""
    workload = LLMWorkload(
        model=model_preset("1.5b"),
        num_prompts=32,
        group_size=16,
        prompt_tokens=150,
        response=ResponseLengths(median_tokens=12000, sigma=0.6, max_tokens=27648),
        rollout_model_parallel=2,
        inference_model_parallel=2,
        actor_model_parallel=2,
        max_concurrent_sequences=1024,
        kv_preemption=True,
        decode_step_overhead_s=0.002,
    )
    return attrs.evolve(workload, **changes)


def test_without_a_pool_limit_the_schedule_is_continuous_batching(lengths):
    schedule = schedule_decode(lengths, prompt_tokens=100, max_running=32)
    active, context = roofline.decode_activity(lengths, prompt_tokens=100, max_concurrent=32)
    np.testing.assert_array_equal(schedule.active, active)
    np.testing.assert_allclose(schedule.context_tokens, context)
    assert schedule.num_preemptions == schedule.recomputed_tokens == 0


def test_every_token_is_generated_once_and_the_pool_is_never_overfilled(lengths):
    capacity = 20_000
    schedule = schedule_decode(lengths, prompt_tokens=100, max_running=256, kv_capacity_tokens=capacity)
    assert schedule.active.sum() == lengths.sum()  # one token per sequence in flight per step
    assert (schedule.context_tokens + schedule.active).max() <= capacity  # what the step writes fits
    assert schedule.num_preemptions > 0 and schedule.recomputed_tokens > 0
    assert schedule.active.max() <= 256


def test_a_smaller_pool_takes_more_steps(lengths):
    steps = [
        schedule_decode(lengths, prompt_tokens=100, max_running=256, kv_capacity_tokens=capacity).num_steps
        for capacity in (1e9, 60_000, 20_000, 5_000)
    ]
    assert steps == sorted(steps) and steps[0] < steps[-1]
    assert steps[0] == lengths.max()  # all at once: the longest sets the end


def test_the_running_batch_shrinks_as_sequences_end():
    schedule = schedule_decode(np.array([1, 2, 3, 10]), prompt_tokens=5, max_running=4)
    np.testing.assert_array_equal(schedule.active, [4, 3, 2, 1, 1, 1, 1, 1, 1, 1])
    # Each sequence holds its prompt plus what it generated: 4 * 5 at the first step, then one more each.
    assert schedule.context_tokens[0] == 20 and schedule.context_tokens[1] == 3 * 5 + 3


def test_a_pool_that_cannot_hold_the_longest_sequence_is_refused():
    with pytest.raises(ConfigError, match="cannot hold one sequence of 110 tokens"):
        schedule_decode(np.array([10, 100]), prompt_tokens=10, max_running=4, kv_capacity_tokens=100)
    with pytest.raises(ConfigError, match="max_running"):
        schedule_decode(np.array([10]), prompt_tokens=10, max_running=0)


def test_straggler_tail_starts_where_the_batch_stays_below_a_quarter_of_its_peak():
    active = np.array([8, 8, 8, 6, 3, 1, 1, 1, 1])
    assert straggler_start(active) == 5  # from the first 1: below 8 / 4 = 2 to the end
    assert (
        straggler_start(np.array([8, 8, 8, 6, 3, 1, 1, 2, 1])) == 8
    )  # back at 2 (not below): the tail is after
    assert straggler_start(np.array([8, 8, 4, 4])) == 4  # never below a quarter: no tail
    assert straggler_start(np.array([])) == 0
    with pytest.raises(ConfigError, match="fraction"):
        straggler_start(active, fraction=1.5)


def test_the_model_waits_for_its_slowest_replica():
    workload = long_cot()
    physics = Physics.of(workload, parse_cluster("8xH100"), seed=0)
    per_replica, slowest = physics.decode_schedule(workload.batch_size, 4)
    assert per_replica == workload.batch_size // 4
    # Any other dealing of the same lengths to 4 replicas gives some replica at least the mean's work.
    seconds = float(physics._step_seconds(slowest).sum())
    one_replica = physics.decode_schedule(workload.batch_size // 4, 1)[1]
    assert seconds >= 0.9 * float(physics._step_seconds(one_replica).sum())
    op = physics.generate_time(workload.batch_size, 4)
    assert (
        op.num_decode_steps == slowest.num_steps == workload.response.max_tokens
    )  # a response hits the limit


def test_the_engine_cost_is_paid_once_per_step():
    base = Physics.of(long_cot(decode_step_overhead_s=0.0), parse_cluster("8xH100"), seed=0)
    paid = Physics.of(long_cot(decode_step_overhead_s=0.002), parse_cluster("8xH100"), seed=0)
    a, b = base.generate_time(512, 4), paid.generate_time(512, 4)
    assert b.fixed_s - a.fixed_s == pytest.approx(0.002 * b.num_decode_steps)
    per_sequence = Physics.of(
        long_cot(decode_step_overhead_per_sequence_s=1e-5), parse_cluster("8xH100"), seed=0
    )
    c = per_sequence.generate_time(512, 4)
    schedule = per_sequence.decode_schedule(512, 4)[1]
    assert c.fixed_s - b.fixed_s == pytest.approx(1e-5 * schedule.active.sum())


def test_generation_tail_is_a_share_of_the_slowest_replicas_generation():
    physics = Physics.of(long_cot(), parse_cluster("8xH100"), seed=0)
    tail = physics.generation_tail(512, 4)
    assert 0 < tail.tail_share < 1
    assert 0 < tail.tail_batch < TAIL_BATCH_FRACTION * tail.peak_batch
    assert tail.tail_steps < tail.num_steps == 27648
    assert tail.responses == 128


def test_kv_preemption_needs_a_pool_that_holds_one_long_sequence():
    with pytest.raises(ConfigError, match="kv_cache_fraction"):
        Physics.of(long_cot(kv_cache_fraction=0.001), parse_cluster("8xH100"), seed=0)


def test_the_switch_off_leaves_the_previous_schedule():
    on = synthesize(long_cot(), parse_cluster("8xH100"), seed=0, device_counts=(8,))
    off = synthesize(long_cot(kv_preemption=False), parse_cluster("8xH100"), seed=0, device_counts=(8,))
    assert {s.seconds for s in on.samples} != {s.seconds for s in off.samples}
    assert on.provenance["sampling"]["device_counts"] == [8]
    with pytest.raises(ConfigError, match="device_counts"):
        synthesize(long_cot(), parse_cluster("8xH100"), seed=0, device_counts=(3,))
