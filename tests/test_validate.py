"""``rlinf validate`` and the fidelity math: per-plan errors, median and maximum, top-1, Kendall's tau."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import attrs
import pytest
from test_auto_mode import CONFIG, SMALL, synthetic_trace

from rlinf.cli import main
from rlinf.core.errors import ConfigError
from rlinf.core.fidelity import PlanFidelity, bias, kendall_tau, relative_error, report, slower_p_value


def test_kendall_tau_by_hand() -> None:
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    # Pairs: (1,2)+ (1,3)+ (1,4)+ (2,3)- (2,4)+ (3,4)+ -> (5 - 1) / 6.
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # tau-b with a tie in y: C=2, D=0, ties_y=1 -> 2 / sqrt(3 * 2).
    assert kendall_tau([1, 2, 3], [1, 2, 2]) == pytest.approx(2 / math.sqrt(6))
    assert math.isnan(kendall_tau([1, 1], [2, 3]))
    with pytest.raises(ConfigError, match="differ in length"):
        kendall_tau([1, 2], [1])


def test_report_errors_and_top1() -> None:
    plans = [
        PlanFidelity(name="a", predicted_s=1.0, measured_s=1.1),
        PlanFidelity(name="b", predicted_s=2.0, measured_s=1.0),
        PlanFidelity(name="c", predicted_s=3.0, measured_s=3.0),
    ]
    result = report(plans)
    # rlinf's one error measure: |measured / predicted - 1|
    assert [p.error for p in plans] == pytest.approx([0.1, 0.5, 0.0])
    assert result.median_error == pytest.approx(0.1) and result.max_error == pytest.approx(0.5)
    assert not result.top1_match and result.top1_regret == pytest.approx(
        0.1
    )  # predicted best a is 10% slower
    assert result.kendall_tau == pytest.approx(1 / 3)
    assert relative_error(0.95, 1.0) == pytest.approx(1 / 0.95 - 1)
    with pytest.raises(ConfigError, match="predicted=0.0: must be > 0"):
        relative_error(0.0, 1.0)
    with pytest.raises(ConfigError, match="measured_s=0: must be > 0"):
        PlanFidelity(name="x", predicted_s=1.0, measured_s=0)


def test_a_top1_miss_is_tested_against_noise() -> None:
    clear = [
        PlanFidelity(
            name="a", predicted_s=1.0, measured_s=1.2, measured_each_s=(1.19, 1.2, 1.21, 1.22, 1.18)
        ),
        PlanFidelity(
            name="b", predicted_s=1.1, measured_s=1.0, measured_each_s=(0.99, 1.0, 1.01, 0.98, 1.02)
        ),
    ]
    # every a iteration is slower than every b iteration: of the 252 relabellings, only the 6 that keep a's
    # three middle samples together reach a difference of medians as large (counted by hand)
    assert report(clear).top1_p_value == pytest.approx(6 / 252)
    noisy = [
        PlanFidelity(
            name="a", predicted_s=1.0, measured_s=1.01, measured_each_s=(0.9, 1.01, 1.15, 0.95, 1.1)
        ),
        PlanFidelity(
            name="b", predicted_s=1.1, measured_s=1.0, measured_each_s=(1.12, 0.92, 1.0, 1.05, 0.97)
        ),
    ]
    assert report(noisy).top1_p_value > 0.3  # a 1% regret among overlapping samples is noise
    match = [clear[1], attrs.evolve(clear[0], predicted_s=2.0)]
    assert report(match).top1_match and report(match).top1_p_value is None  # a match has nothing to test
    assert slower_p_value([3.0, 4.0], [1.0, 2.0]) == pytest.approx(1 / 6)


def test_a_prediction_is_checked_against_the_range_of_its_plans_turn_medians() -> None:
    """A plan measured in turns (fresh worker processes each): its prediction lies within or outside the range of
    the turns' medians, an interval that holds the plan's typical turn time with probability 1 - 2 / 2**turns."""
    each = (1.0, 1.2, 1.1, 1.3, 1.4, 0.9, 1.0)  # three turns: 3, 2 and 2 iterations
    plan = PlanFidelity(
        name="a",
        predicted_s=1.2,
        measured_s=statistics.median(each),
        measured_each_s=each,
        turn_sizes=(3, 2, 2),
    )
    assert plan.turn_medians_s == pytest.approx((1.1, 1.35, 0.95))
    assert plan.within_turn_range
    assert attrs.evolve(plan, predicted_s=1.36).within_turn_range is False  # above the slowest turn
    assert attrs.evolve(plan, predicted_s=0.94).within_turn_range is False  # below the fastest
    assert attrs.evolve(plan, turn_sizes=(7,)).within_turn_range is None  # one turn: no range
    assert attrs.evolve(plan, turn_sizes=()).turn_medians_s == ()
    outside = attrs.evolve(plan, name="b", predicted_s=2.0)
    result = report([plan, outside, PlanFidelity(name="c", predicted_s=1.0, measured_s=1.0)])
    assert result.within_turn_range == (1, 2)  # c has no turns and is not counted
    as_json = result.to_dict()
    assert as_json["within_turn_range"] == [1, 2]
    assert (
        as_json["plans"][1]["within_turn_range"] is False and as_json["plans"][2]["within_turn_range"] is None
    )
    assert as_json["plans"][0]["turn_medians_s"] == pytest.approx([1.1, 1.35, 0.95])
    with pytest.raises(
        ConfigError, match=r"a.turn_sizes=\(3, 2\): must be positive and add up to the 7 measured"
    ):
        attrs.evolve(plan, turn_sizes=(3, 2))
    with pytest.raises(ConfigError, match=r"a.turn_sizes=\(7, 0\)"):
        attrs.evolve(plan, turn_sizes=(7, 0))


def test_bias_is_the_signed_median_and_the_verdict_asks_for_both() -> None:
    """Errors of 20-30% all one way are a bias, not spread: the absolute errors alone would not tell them from
    errors of 25% either way, which have no bias. The verdict needs |bias| <= 5% and 80% of plans within their
    turn range."""
    one_way = [
        PlanFidelity(name=n, predicted_s=1.0, measured_s=m) for n, m in (("a", 1.2), ("b", 1.3), ("c", 1.25))
    ]
    both_ways = [
        PlanFidelity(name=n, predicted_s=1.0, measured_s=m) for n, m in (("a", 1.25), ("b", 0.8), ("c", 1.0))
    ]
    assert report(one_way).bias == pytest.approx(0.25)
    assert report(both_ways).bias == pytest.approx(0.0)
    assert report(one_way).verdict == "biased" and report(both_ways).verdict == "trustworthy"
    assert report(one_way).to_dict()["bias"] == pytest.approx(0.25)
    # Unbiased, but the predictions lie outside their plans' turn ranges: spread.
    turns = (1.0, 1.0, 1.1, 1.1)
    off = [
        PlanFidelity(name=n, predicted_s=p, measured_s=1.05, measured_each_s=turns, turn_sizes=(2, 2))
        for n, p in (("a", 0.9), ("b", 1.2), ("c", 1.05))
    ]
    assert abs(report(off).bias) <= 0.05 and report(off).within_turn_range == (1, 3)
    assert report(off).verdict == "spread"
    assert report([attrs.evolve(p, predicted_s=0.5) for p in off]).verdict == "biased and spread"
    assert bias([1.0, 2.0], [1.1, 2.0]) == pytest.approx(0.05)


def test_validate_json_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.json"
    synthetic_trace().save(trace)
    out = tmp_path / "validate"
    # one measured iteration: one generation of workers (two generations are tested in tests/test_profiling.py)
    args = ["validate", CONFIG, "--trace", str(trace), "--plans", "2", "--iterations", "1", "--warmup", "0"]
    args += ["--devices", "2", "--out", str(out), "--json"] + [a for s in SMALL for a in ("--set", s)]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"plans", "median_error", "max_error", "top1_match", "kendall_tau", "bias", "verdict"} <= set(
        result
    )
    assert result["bias"] == pytest.approx(
        statistics.median(
            p["measured_s"] / p["predicted_s"] - 1 for p in result["plans"] if not p["oversubscribed"]
        )
    )
    assert result["prediction"].startswith("from every sample of --trace")  # a synthetic trace: plans unknown
    modes = {plan["name"].split(":")[0] for plan in result["plans"]}
    assert modes == {"collocated", "hybrid", "disaggregated"}  # every mode represented
    for plan in result["plans"]:
        assert plan["predicted_s"] > 0 and plan["measured_s"] > 0
        assert plan["error"] == pytest.approx(
            abs(plan["measured_s"] / plan["predicted_s"] - 1)
        )  # one measure
    on_cores = [p["error"] for p in result["plans"] if not p["oversubscribed"]]
    assert result["max_error"] == pytest.approx(max(on_cores))
    assert isinstance(result["top1_match"], bool)
    assert all(len(plan["measured_each_s"]) == 1 for plan in result["plans"])  # raw per-iteration times
    assert all(plan["turn_medians_s"] == plan["measured_each_s"] for plan in result["plans"])  # one turn each
    assert result["within_turn_range"] is None and all(
        p["within_turn_range"] is None for p in result["plans"]
    )
    assert result["measurement"].startswith("one plan at a time, in 1 turns per plan, each with fresh worker")
    for plan in result["plans"]:
        assert plan["measured_s"] == pytest.approx(statistics.median(plan["measured_each_s"]))
    assert (out / "timeline_pair.png").stat().st_size > 0
    assert json.loads((out / "validate.json").read_text())["median_error"] == result["median_error"]
    # Each plan's error split in two: its ops' own durations, then the time between ops.
    assert set(result["breakdown"]) == {plan["name"] for plan in result["plans"]}
    for plan in result["plans"]:
        split = result["breakdown"][plan["name"]]
        assert split["replayed_s"] > 0
        assert (1 + split["ops_explain"]) * (1 + split["between_ops"]) == pytest.approx(
            plan["measured_s"] / plan["predicted_s"]
        )


def test_a_replay_with_every_op_slower_is_that_much_slower() -> None:
    """:func:`rlinf.app.validation.simulated`, given a run whose op samples all took 1.25x the profile's, returns
    1.25x the profile's iteration time: the part of an error that the ops' own durations explain."""
    from rlinf.app.validation import simulated
    from rlinf.core.lowering import lower
    from rlinf.core.plan import plan_from_yaml

    trace = synthetic_trace()
    plan = plan_from_yaml("placement: {env: 0, rollout: 1, actor: 0-1}", 2)
    program = lower(trace.workflow, plan, trace.cluster)
    slower = attrs.evolve(
        trace, samples=tuple(attrs.evolve(s, seconds=1.25 * s.seconds) for s in trace.samples)
    )
    assert simulated(program, slower, trace.cluster).iteration_s == pytest.approx(
        1.25 * simulated(program, trace, trace.cluster).iteration_s,
        rel=1e-3,  # fixed link latencies do not scale
    )


def test_validate_rejects_bad_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", CONFIG, "--plans", "1"]) == 2
    assert "--plans=1: must be >= 2" in capsys.readouterr().err


def test_each_plan_is_predicted_without_its_own_samples_or_those_of_its_offload_variant() -> None:
    """Out of sample, as in real use: the profile's samples of the plan itself and of a probe with the same
    compute ops (differing only in offload) never feed its prediction; the others' all do."""
    from rlinf.app.jobs import load_job_config
    from rlinf.app.validation import out_of_sample, same_compute
    from rlinf.core.trace import load_trace

    job, config = load_job_config(CONFIG)
    probes = [plan for plan, _ in job.probes(2, config)]
    offloaded = next(p for p in probes if p.offload)
    variant = attrs.evolve(offloaded, offload=frozenset())  # the same compute ops, nothing offloaded
    trace = load_trace("traces/hopper_ppo_cpu2.json")
    samples = trace.samples
    by_plan = [(plan, samples[i :: len(probes)]) for i, plan in enumerate(probes)]
    kept, feeding = out_of_sample(trace, by_plan, variant)
    left_out = [plan for plan in probes if same_compute(plan, variant)]
    assert left_out and all(plan.describe() not in feeding for plan in left_out)
    assert len(feeding) == len(probes) - len(left_out)
    own = {id(s) for plan, chunk in by_plan if plan in left_out for s in chunk}
    assert not any(id(s) in own for s in kept.samples)
    assert len(kept.samples) == sum(len(chunk) for plan, chunk in by_plan if plan not in left_out)
    assert out_of_sample(trace, [], variant) == (trace, [])


def test_a_profile_records_which_probe_plan_measured_which_samples() -> None:
    """``rlinf validate --trace`` on a profile written by rlinf predicts out of sample too: the trace's provenance
    says which probe plan measured which samples; samples merged in after them are no probe's and always feed."""
    from rlinf.app.jobs import load_job_config
    from rlinf.app.profiling import samples_by_plan
    from rlinf.app.validation import out_of_sample
    from rlinf.core.errors import RlinfError
    from rlinf.core.trace import load_trace

    job, config = load_job_config(CONFIG)
    first, second = (plan for plan, _ in job.probes(2, config)[:2])
    shipped = load_trace("traces/hopper_ppo_cpu2.json")
    recorded_split = samples_by_plan(shipped)  # the shipped profile records its probes' samples
    assert recorded_split and sum(len(chunk) for _, chunk in recorded_split) == len(shipped.samples)
    older = {key: value for key, value in shipped.provenance.items() if key != "probe_plan_samples"}
    trace = attrs.evolve(shipped, provenance=older)
    assert samples_by_plan(trace) == ()  # an older profile: its plans are unknown
    entries = [{"plan": p.to_dict(), "devices": 2, "samples": n} for p, n in ((first, 300), (second, 200))]
    recorded = attrs.evolve(trace, provenance={**trace.provenance, "probe_plan_samples": entries})
    split = samples_by_plan(recorded)
    assert [plan for plan, _ in split] == [first, second]
    assert split[0][1] == trace.samples[:300] and split[1][1] == trace.samples[300:500]
    kept, feeding = out_of_sample(recorded, split, first)
    assert feeding == [second.describe()] and kept.samples == trace.samples[300:]  # the merged rest kept
    entries[1]["samples"] = len(trace.samples)
    with pytest.raises(RlinfError, match=r"trace.provenance.probe_plan_samples=.* trace holds only"):
        samples_by_plan(attrs.evolve(trace, provenance={**trace.provenance, "probe_plan_samples": entries}))
    entries[1]["samples"] = 0
    with pytest.raises(RlinfError, match=r"probe_plan_samples\[1\].samples=0: must be an integer >= 1"):
        samples_by_plan(attrs.evolve(trace, provenance={**trace.provenance, "probe_plan_samples": entries}))


def test_mirror_images_of_a_plan_are_measured_once() -> None:
    """Plans that differ only in which device is which (the actor beside a loop spread over both cores on core 0 or
    on core 1) share a layout and are predicted alike: validate measures one of them, not both, while distinct
    plans remain (an earlier run measured both twins, and its top-1 check came down to their order)."""
    from rlinf.app.auto import Candidate
    from rlinf.app.validation import choose_plans, layout
    from rlinf.core.plan import plan_from_yaml

    def plan(text: str):
        return plan_from_yaml(text, 2)

    spread = "placement: {env: 0-1, rollout: 0-1, actor: %d}\ngranularity: {loop: 2}"
    apart = "placement: {env: %d, rollout: %d, actor: %d}\ngranularity: {loop: 2}"
    plans = [plan(spread % 0), plan(spread % 1), plan(apart % (0, 1, 1)), plan(apart % (1, 0, 0))]
    plans.append(plan("placement: {env: 0, rollout: 0, actor: 0}\ngranularity: {loop: 1}"))
    assert layout(plans[0]) == layout(plans[1]) and layout(plans[2]) == layout(plans[3])
    assert layout(plans[0]) != layout(plans[2]) != layout(plans[4])
    candidates = tuple(
        Candidate(plan=p, num_devices=2, predicted_s=0.08 + 0.01 * (i // 2), source="test")
        for i, p in enumerate(plans)
    )
    chosen = choose_plans(candidates, 3, 2)
    assert {layout(c.plan) for c in chosen} == {layout(p) for p in plans} and len(chosen) == 3
    assert len(choose_plans(candidates, 5, 2)) == 5  # mirror images fill in only when distinct plans run out


def test_a_profile_of_one_probe_says_which_and_what_to_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan with the compute ops of the only probe measured has nothing to be predicted from out of sample (on a
    GPU a 75 s budget measured one GRPO probe and validate said only "trace has no samples for rollout.generate"):
    the error names the probe measured and the flags that fix it, before any plan is measured."""
    trace = json.loads(Path("traces/hopper_ppo_cpu2.json").read_text())
    first = trace["provenance"]["probe_plan_samples"][:1]
    trace["provenance"]["probe_plan_samples"] = first
    trace["samples"] = trace["samples"][: first[0]["samples"]]
    one_probe = tmp_path / "one_probe.json"
    one_probe.write_text(json.dumps(trace))
    args = ["validate", "examples/hopper_ppo.yaml", "--trace", str(one_probe), "--plans", "2"]
    assert (
        main([*args, "--iterations", "1", "--warmup", "0", "--out", str(tmp_path / "out"), "--no-progress"])
        == 2
    )
    error = capsys.readouterr().err.splitlines()[-1]
    probe = "collocated: actor@0-1 env@0-1 rollout@0-1 | loop=1"
    assert (
        error.startswith("rlinf: error: --trace=") and f": {probe} cannot be predicted out of sample" in error
    )
    assert f"measured only the probe plan {probe} (408 samples)" in error
    assert error.endswith(
        "fix: profile again (drop --trace) with a larger --profile-budget or a lower --profile-iterations, so that "
        "two probe plans with different compute ops are measured"
    )
