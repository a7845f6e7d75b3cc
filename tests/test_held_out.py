"""The chosen plan's prediction from the half of the profile that did not choose it, and its interval
(:mod:`rlinf.app.held_out`), on made-up profiles (no processes) and through ``rlinf train``."""

from __future__ import annotations

import json
import statistics
import warnings
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from factories import HOPPER_CONFIG, HOPPER_SMALL, made_up_seconds

from rlinf.app.held_out import choose_and_predict, halves, iterations_of, probe_ratios
from rlinf.app.jobs import load_job_config
from rlinf.app.profiling import probe_records, samples_by_plan
from rlinf.app.validation import out_of_sample, simulated
from rlinf.cli import main
from rlinf.core.cluster import cpu_cluster
from rlinf.core.errors import RlinfError
from rlinf.core.lowering import lower
from rlinf.core.trace import CostSample, Trace

CONFIG, SMALL, _seconds = HOPPER_CONFIG, HOPPER_SMALL, made_up_seconds


def profiled(
    iterations: int = 4,
    factor: Callable[[int, int], float] = lambda probe, iteration: 1.0,
    times: Callable[[int], list[float]] | None = None,
) -> Trace:
    """A profile of every probe plan of the small config on 2 cores, ``iterations`` measured iterations each, every
    op of iteration ``i`` of probe ``p`` costing ``factor(p, i)`` times a made-up cost; ``times(p)`` its recorded
    iteration times (none recorded without it)."""
    job, config = load_job_config(CONFIG, SMALL)
    workflow = job.workflow(config)
    samples, entries = [], []
    for index, (plan, logical) in enumerate(job.probes(2, config)):
        ops = lower(workflow, plan, cpu_cluster(logical)).ops
        for iteration in range(iterations):
            samples += [
                CostSample(
                    component=op.component,
                    op=op.name,
                    devices=max(1, len(op.devices)),
                    samples=op.samples,
                    seconds=factor(index, iteration) * _seconds(op.name, op.samples, op.num_bytes),
                    num_bytes=op.num_bytes if op.kind != "compute" else 0,
                )
                for op in ops
            ]
        entry = {"plan": plan.to_dict(), "devices": logical, "samples": iterations * len(ops)}
        if times is not None:
            entry["iteration_s"] = times(index)
        entries.append(entry)
    provenance = {"kind": "profiled", "probe_plan_samples": entries}
    return Trace(workflow=workflow, cluster=cpu_cluster(2), provenance=provenance, samples=samples)


def test_the_halves_deal_each_probes_iterations_alternately() -> None:
    trace = profiled(4, factor=lambda probe, iteration: 1.0 + iteration, times=lambda p: [1.0, 2.0, 3.0, 4.0])
    split = halves(trace)
    assert split is not None
    choosing, predicting = split
    assert (choosing.provenance["half"], predicting.provenance["half"]) == ("choosing", "predicting")
    records = zip(probe_records(trace), probe_records(choosing), probe_records(predicting), strict=True)
    for whole, first, second in records:
        assert whole.plan == first.plan == second.plan
        assert first.iteration_s == (1.0, 3.0) and second.iteration_s == (2.0, 4.0)
        cut = iterations_of(trace, whole)
        assert cut is not None and len(cut) == 4
        assert first.samples == cut[0] + cut[2] and second.samples == cut[1] + cut[3]
    assert len(choosing.samples) + len(predicting.samples) == len(trace.samples)


def test_samples_merged_after_the_probes_are_dealt_out_per_op() -> None:
    trace = profiled(2)
    extra = [attrs.evolve(trace.samples[0], seconds=float(i)) for i in range(1, 6)]
    split = halves(attrs.evolve(trace, samples=trace.samples + tuple(extra)))
    assert split is not None
    tails = [half.samples[sum(len(r.samples) for r in probe_records(half)) :] for half in split]
    assert [s.seconds for s in tails[0]] == [1.0, 3.0, 5.0] and [s.seconds for s in tails[1]] == [2.0, 4.0]


def test_a_profile_that_cannot_be_split_gives_none() -> None:
    assert halves(profiled(1)) is None  # one iteration per probe: nothing to hold out
    bare = profiled(2)
    assert (
        halves(attrs.evolve(bare, provenance={"kind": "profiled"})) is None
    )  # which probe measured what: unknown
    entries = [dict(e) for e in bare.provenance["probe_plan_samples"]]
    entries[0]["samples"] -= 1  # not whole iterations of its plan (the rest shift with it)
    assert halves(attrs.evolve(bare, provenance={"kind": "profiled", "probe_plan_samples": entries})) is None


def test_the_prediction_comes_only_from_the_half_that_did_not_choose() -> None:
    """Making the choosing half's iterations twice as fast changes what chose the plan, not the prediction shown;
    making the predicting half's twice as slow doubles the prediction and leaves the choice's own figure."""
    job, config = load_job_config(CONFIG, SMALL)
    _, base = choose_and_predict(job, config, profiled(4), 2)
    auto, fast_choice = choose_and_predict(
        job, config, profiled(4, lambda p, i: 0.5 if i % 2 == 0 else 1.0), 2
    )
    assert base.held_out and fast_choice.held_out
    assert fast_choice.iteration_s == pytest.approx(base.iteration_s)
    assert fast_choice.choosing_s == pytest.approx(0.5 * base.choosing_s, rel=0.05)
    assert auto.chosen.predicted_s == fast_choice.choosing_s
    _, slow_held = choose_and_predict(job, config, profiled(4, lambda p, i: 1.0 if i % 2 == 0 else 2.0), 2)
    assert slow_held.iteration_s == pytest.approx(2 * base.iteration_s, rel=0.05)
    assert slow_held.choosing_s == pytest.approx(base.choosing_s)


def test_an_unsplittable_profile_predicts_in_sample_and_says_so() -> None:
    job, config = load_job_config(CONFIG, SMALL)
    auto, prediction = choose_and_predict(job, config, profiled(1, times=lambda p: [0.1]), 2)
    assert not prediction.held_out and prediction.interval_s is None and prediction.coverage is None
    assert prediction.iteration_s == auto.chosen.predicted_s == prediction.choosing_s
    assert "biased low" in prediction.note


def test_the_interval_is_the_range_of_the_probes_out_of_sample_ratios() -> None:
    """Each probe's recorded iterations measured at its own factor of the made-up costs: the ratios follow, and the
    interval spans the chosen plan's prediction times their smallest and largest."""
    factors = [0.8, 1.0, 1.3, 0.9, 1.1, 1.2, 1.0, 0.95, 1.05, 1.15, 0.85, 1.25]
    job, config = load_job_config(CONFIG, SMALL)
    trace = profiled(2)
    records = probe_records(trace)
    by_plan = samples_by_plan(trace)

    def times(index: int) -> list[float]:
        plan = records[index].plan
        cluster = cpu_cluster(records[index].num_devices)
        own = simulated(lower(trace.workflow, plan, cluster), trace, cluster).iteration_s
        return [factors[index % len(factors)] * own] * 2

    timed = profiled(2, times=times)
    _, prediction = choose_and_predict(job, config, timed, 2)
    assert prediction.interval_s is not None and prediction.coverage is not None
    ratios = prediction.ratios
    assert 3 <= len(ratios) <= len(records)
    low, high = prediction.interval_s
    assert low == pytest.approx(prediction.iteration_s * min(ratios))
    assert high == pytest.approx(prediction.iteration_s * max(ratios))
    assert prediction.coverage == pytest.approx((len(ratios) - 1) / (len(ratios) + 1))
    # every ratio is a probe's measured median over its prediction without its own samples (the predicting half)
    split = halves(timed)
    assert split is not None
    expected = []
    for record in probe_records(timed):
        kept, _ = out_of_sample(split[1], samples_by_plan(split[1]), record.plan, even_speeds=True)
        cluster = cpu_cluster(record.num_devices)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected.append(
                statistics.median(record.iteration_s)
                / simulated(lower(trace.workflow, record.plan, cluster), kept, cluster).iteration_s
            )
    assert all(any(r == pytest.approx(e) for e in expected) for r in ratios)
    assert by_plan  # the profile records its probes


def test_probes_without_recorded_times_give_no_interval() -> None:
    job, config = load_job_config(CONFIG, SMALL)
    _, prediction = choose_and_predict(job, config, profiled(2), 2)
    assert prediction.held_out and prediction.interval_s is None and prediction.ratios == ()
    assert probe_ratios(profiled(2), probe_records(profiled(2))) == ()


def test_recorded_iteration_times_are_checked() -> None:
    trace = profiled(2, times=lambda p: [0.1, 0.1])
    entries = [dict(e) for e in trace.provenance["probe_plan_samples"]]
    entries[1]["iteration_s"] = [0.1, -1.0]
    broken = attrs.evolve(trace, provenance={"kind": "profiled", "probe_plan_samples": entries})
    with pytest.raises(
        RlinfError, match=r"probe_plan_samples\[1\]\.iteration_s=.*must be a list of positive"
    ):
        probe_records(broken)


def test_train_prints_the_held_out_prediction_and_its_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace_path = tmp_path / "profile.json"
    profiled(2, times=lambda p: [0.02 * (1 + 0.05 * (p % 5))] * 2).save(trace_path)
    out = tmp_path / "run"
    code = main(
        ["train", CONFIG, "--mode", "auto", "--trace", str(trace_path), "--iterations", "3", "--devices", "2"]
        + ["--out", str(out), "--no-progress"]
        + [arg for item in SMALL for arg in ("--set", item)]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "that did not choose the plan (the choosing half: " in printed
    assert "auto: interval " in printed and "lands inside with probability" in printed
    held = json.loads((out / "prediction.json").read_text())
    assert held["held_out"] is True and len(held["interval_s"]) == 2
    low, high = held["interval_s"]
    assert held["inside_interval"] == (low <= held["measured_median_s"] <= high)
    assert ("inside the interval" in printed) == held["inside_interval"]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert {m["predicted_iteration_s"] for m in metrics} == {held["predicted_iteration_s"]}


def test_a_profile_of_one_probe_plan_is_held_out_without_an_interval() -> None:
    """One probe (a short budget): its halves choose and predict, but no other probe can predict it for a ratio."""
    job, config = load_job_config(CONFIG, SMALL)
    trace = profiled(2, times=lambda p: [0.1, 0.1])
    first = trace.provenance["probe_plan_samples"][0]
    one = attrs.evolve(
        trace,
        samples=trace.samples[: first["samples"]],
        provenance={"kind": "profiled", "probe_plan_samples": [first]},
    )
    _, prediction = choose_and_predict(job, config, one, 2)
    assert prediction.held_out and prediction.ratios == () and prediction.interval_s is None
