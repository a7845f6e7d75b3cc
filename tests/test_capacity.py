"""``rlinf capacity``: device lists, what-if knobs, the sweep's rows and figures, and every kind of bad input."""

from __future__ import annotations

import itertools
import json
import math
import warnings
from pathlib import Path

import attrs
import pytest
from factories import grpo_trace

from planner import search
from rlinf.analytic.synthesis import synthesize
from rlinf.capacity import (
    BASELINE,
    SweepOptions,
    Target,
    apply_whatif,
    parse_device_counts,
    parse_whatif,
    sweep,
)
from rlinf.capacity.sweep import WAITING, breakdown, simulate_plan
from rlinf.capacity.whatif import workload_of
from rlinf.cli import main
from rlinf.core.costs import fit
from rlinf.core.errors import ConfigError, ExtrapolationWarning
from rlinf.core.plan import load_plan
from rlinf.core.trace import load_trace

REPO = Path(__file__).resolve().parent.parent
TRACE_7B = REPO / "traces" / "grpo_7b_h100.json"
STRATEGIES = ("best", "collocated", "disaggregated")
FAST = 0.5
"""Planner seconds per cell in these tests: the small test workflow is solved to optimality well within it."""


def options(**changes: object) -> SweepOptions:
    base = SweepOptions(
        device_counts=(8, 16), strategies=STRATEGIES, search_time_s=FAST, price_per_device_hour=2.0
    )
    return attrs.evolve(base, **changes)


@pytest.fixture(scope="module")
def small_result():
    """The linear-cost test trace on 8 and 16 devices, all strategies, one what-if series, in one process."""
    whatif = parse_whatif("trace.batch_scale=2")
    return sweep(grpo_trace(), options(), whatifs=[whatif], trace_name="test", jobs=1)


# ------------------------------------------------------------------------------------------ device lists
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8,16,...,1024", (8, 16, 32, 64, 128, 256, 512, 1024)),
        ("8, 16, 32", (8, 16, 32)),
        ("8,24,...,216", (8, 24, 72, 216)),
        ("8,16,24,...,48", (8, 16, 24, 32, 40, 48)),
        ("8,12,...,20", (8, 12, 16, 20)),
    ],
)
def test_device_lists_expand_progressions(text: str, expected: tuple[int, ...]) -> None:
    assert parse_device_counts(text) == expected


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "is empty"),
        (" , ", "is empty"),
        ("8,x", "not a whole number"),
        ("8,...,64", "two or more terms before it"),
        ("8,16,...,1000", "does not reach 1000"),
        ("0,8", "is not >= 1"),
    ],
)
def test_bad_device_lists_name_the_flag(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as error:
        parse_device_counts(text)
    assert error.value.field == "--devices"


def test_options_reject_unsorted_sizes_and_bad_prices() -> None:
    with pytest.raises(ConfigError, match="ascending without repeats"):
        options(device_counts=(16, 8))
    with pytest.raises(ConfigError, match="is empty"):
        options(device_counts=())
    with pytest.raises(ConfigError, match="price-per-device-hour"):
        options(price_per_device_hour=-1.0)
    with pytest.raises(ConfigError, match="deadline-s"):
        Target(kind="deadline", value=0)


# ---------------------------------------------------------------------------------------------- what-if
def test_shipped_7b_trace_resynthesizes_exactly_from_its_provenance() -> None:
    trace = load_trace(TRACE_7B)
    again = synthesize(workload_of(trace), trace.cluster, seed=trace.provenance["seed"], date="2026-11-21")
    assert again.samples == trace.samples
    assert again.workflow == trace.workflow
    assert again.response_lengths == trace.response_lengths


def test_whatif_knobs_resynthesize_the_7b_trace() -> None:
    trace = load_trace(TRACE_7B)
    longer = apply_whatif(trace, parse_whatif("trace.response_length_scale=1.5"))
    assert longer.provenance["workload"]["response"]["median_tokens"] == pytest.approx(4500)
    assert longer.workflow.tokens_per_sample == pytest.approx(
        1.5 * trace.workflow.tokens_per_sample, rel=0.02
    )
    assert longer.provenance["whatif"]["settings"] == {"response_length_scale": 1.5}
    h200 = apply_whatif(trace, parse_whatif("device=H200"))
    assert h200.cluster.device.name == "H200"
    assert h200.cluster.num_devices == trace.cluster.num_devices
    one = [s.seconds for s in trace.samples if s.op == "generate" and s.devices == 8 and s.samples == 4096]
    faster = [s.seconds for s in h200.samples if s.op == "generate" and s.devices == 8 and s.samples == 4096]
    assert faster[0] < one[0]  # more HBM bandwidth: memory-bound decode is faster
    both = apply_whatif(trace, parse_whatif("trace.batch_scale=2,trace.group_size=16"))
    assert both.workflow.batch_size == 2 * 512 * 16


def test_profiled_traces_take_only_exact_knobs() -> None:
    trace = grpo_trace()
    doubled = apply_whatif(trace, parse_whatif("trace.batch_scale=2"))
    assert doubled.workflow.batch_size == 2 * trace.workflow.batch_size
    assert doubled.samples == trace.samples
    with pytest.raises(ConfigError, match="needs a trace synthesized"):
        apply_whatif(trace, parse_whatif("trace.response_length_scale=1.5"))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("trace.colour=red", "unknown knob 'colour'"),
        ("trace.batch_scale", "is not KEY=VALUE"),
        ("trace.batch_scale=two", "is not a number"),
        ("trace.response_length_scale=-1", "must be > 0"),
        ("trace.device=TPU", "unknown device type"),
        ("trace.batch_scale=2,batch_scale=3", "sets batch_scale twice"),
    ],
)
def test_bad_whatifs_list_the_valid_keys(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_whatif(text)


# ------------------------------------------------------------------------------------------------ sweep
def test_sweep_has_one_row_per_series_size_and_strategy(small_result) -> None:
    result = small_result
    assert result.series == (BASELINE, "batch_scale=2")
    assert len(result.rows) == 2 * 2 * 3
    for series in result.series:
        for n in (8, 16):
            assert result.row(series, "best", n).has_plan
    doubled = result.row("batch_scale=2", "best", 16)
    assert doubled.samples_per_iteration == 2 * result.row(BASELINE, "best", 16).samples_per_iteration


def test_breakdown_walks_the_critical_path(small_result) -> None:
    """Each row's breakdown is its simulated iteration's critical path: spans that follow one another in time
    back to the start, each component's part the seconds of its spans on that path, the bottleneck the largest
    compute part; and the cost columns follow from the row's devices, seconds and samples."""
    trace = grpo_trace()
    for row in small_result.rows_of(BASELINE, "best") + small_result.rows_of(BASELINE, "disaggregated"):
        timeline = simulate_plan(trace, row.num_devices, row.plan)
        path = [timeline.spans[i] for i in timeline.critical_path()]
        assert path[-1].end_s == pytest.approx(timeline.iteration_s)
        for before, after in itertools.pairwise(path):
            assert before.end_s <= after.start_s + 1e-9
        parts = dict(row.breakdown_s)
        for component in {s.component for s in path if s.kind == "compute"}:
            on_path = sum(s.seconds for s in path if s.kind == "compute" and s.component == component)
            assert parts[component] == pytest.approx(on_path)
        compute = {k: v for k, v in parts.items() if k in {c.name for c in trace.workflow.components}}
        assert row.bottleneck == max(compute, key=compute.__getitem__) and row.bottleneck != WAITING
        item = row.to_dict(2.0)
        assert item["cost_per_1k_samples"] == pytest.approx(
            2.0 * row.num_devices * row.iteration_s / 3600 * 1000 / row.samples_per_iteration
        )


def test_best_is_the_planners_plan_on_the_7b_trace() -> None:
    """The sweep plans in the planner's space: on the 7B trace's 32 GPUs its best row is the planner's own plan
    (not a fixed mode the sweep fell back to), the plan ``rlinf plan`` picks, strictly faster than both fixed
    modes and than the README's hand-written hybrid plan."""
    trace = load_trace(TRACE_7B)
    result = sweep(
        trace, options(device_counts=(32,), search_time_s=10.0), whatifs=[], trace_name="7b", jobs=1
    )
    best = result.row(BASELINE, "best", 32)
    assert best.source.startswith("cp-sat")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        planned = search(trace.workflow, trace.cluster, fit(trace), time_limit_s=10.0)
    assert best.plan == planned.plan and best.iteration_s == pytest.approx(planned.best.iteration_s)
    for strategy in ("collocated", "disaggregated"):
        assert best.iteration_s < result.row(BASELINE, strategy, 32).iteration_s, strategy
    hybrid = simulate_plan(trace, 32, load_plan(REPO / "examples" / "plans" / "hybrid.yaml", 32))
    assert best.iteration_s < hybrid.iteration_s  # the README's hand-written plan


def test_rows_equal_a_fresh_simulation_of_their_plan(small_result) -> None:
    trace = grpo_trace()
    row = small_result.row(BASELINE, "best", 16)
    timeline = simulate_plan(trace, 16, row.plan)
    assert timeline.iteration_s == row.iteration_s
    assert breakdown(timeline) == row.breakdown_s


def test_sweep_does_not_depend_on_the_number_of_workers() -> None:
    # A budget far above what these searches need (under a second): the planner finishes instead of being
    # cut off, so what is tested is that parallel cells, their order and the merge are deterministic.
    generous = options(strategies=(*STRATEGIES, "closed-form"), search_time_s=30.0)
    whatif = [parse_whatif("trace.batch_scale=2")]
    serial = sweep(grpo_trace(), generous, whatifs=whatif, trace_name="test", jobs=1)
    parallel = sweep(grpo_trace(), generous, whatifs=whatif, trace_name="test", jobs=2)
    assert parallel.rows == serial.rows
    assert parallel.to_dict() == serial.to_dict()
    assert [r.num_devices for r in parallel.rows_of(BASELINE, "closed-form")] == [8, 16]


def test_target_is_the_smallest_size_meeting_it(small_result) -> None:
    at_16 = small_result.row(BASELINE, "best", 16)
    loose = attrs.evolve(small_result, options=options(target=Target(kind="deadline", value=1e6)))
    assert loose.target_met is True and loose.target_row().num_devices == 8
    exact = attrs.evolve(
        small_result, options=options(target=Target(kind="deadline", value=at_16.iteration_s))
    )
    assert exact.target_row().num_devices == 16
    unmet = attrs.evolve(small_result, options=options(target=Target(kind="throughput", value=1e12)))
    assert unmet.target_met is False and unmet.target_row() is None
    assert unmet.to_dict()["target_met"] is False
    assert math.isclose(small_result.scaling_efficiency(small_result.row(BASELINE, "best", 8)), 1.0)


# ------------------------------------------------------------------------------------------- bad input
def test_trace_without_samples_for_a_component_is_refused(tmp_path: Path, capsys) -> None:
    trace = grpo_trace()
    partial = attrs.evolve(trace, samples=[s for s in trace.samples if s.component != "reward"])
    path = tmp_path / "partial.json"
    partial.save(path)
    code = main(
        ["capacity", "--trace", str(path), "--devices", "8", "--out", str(tmp_path / "out"), "--quiet"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "has no cost samples for component 'reward'" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--devices", ""], "--devices='': is empty"),
        (["--devices", "8", "--modes", "best,sideways"], "unknown mode"),
        (["--devices", "12"], "not a whole number of 8-device nodes"),
        (["--devices", "8", "--set", "trace.colour=red"], "unknown knob"),
        (["--devices", "8", "--jobs", "0"], "--jobs=0: must be >= 1"),
        (["--devices", "8", "--price-per-device-hour", "0"], "must be a finite number > 0"),
    ],
)
def test_bad_flags_exit_2_with_one_line(tmp_path: Path, capsys, flags: list[str], match: str) -> None:
    trace = tmp_path / "trace.json"
    grpo_trace().save(trace)
    code = main(["capacity", "--trace", str(trace), "--out", str(tmp_path / "out"), "--quiet", *flags])
    err = capsys.readouterr().err
    assert code == 2
    assert match in err
    assert err.count("\n") == 1 and err.startswith("rlinf: error: ")


def test_unmet_target_is_a_report_not_an_error(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "trace.json"
    grpo_trace().save(trace)
    out = tmp_path / "out"
    code = main(
        ["capacity", "--trace", str(trace), "--devices", "8,16", "--target-throughput", "1e9", "--out", str(out),
         "--search-time-s", str(FAST), "--jobs", "1", "--quiet", "--json"]
    )  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["target_met"] is False and report["target_num_devices"] is None
    html = (out / "report.html").read_text()
    assert 'class="answer target-unmet"' in html and "NOT MET by any swept size" in html
    assert "**Target throughput >= 1e+09 samples/s: NOT MET" in (out / "report.md").read_text()
