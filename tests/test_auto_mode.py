"""``rlinf train --mode auto``: a reused trace skips profiling; the chosen plan, its runner-ups and the measured
and predicted time of every iteration are printed; both timelines land in the run directory."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import attrs
import pytest
from factories import HOPPER_CONFIG, HOPPER_SMALL, made_up_seconds

import rlinf.app.profiling
from planner.search import is_own
from rlinf.app.auto import plan_from_trace
from rlinf.app.jobs import load_job_config
from rlinf.app.profiling import merge_traces
from rlinf.cli import main
from rlinf.core.cluster import cpu_cluster
from rlinf.core.errors import ConfigError
from rlinf.core.lowering import lower
from rlinf.core.trace import CostSample, Trace, load_trace

CONFIG, SMALL, _seconds = HOPPER_CONFIG, HOPPER_SMALL, made_up_seconds


def synthetic_trace(overrides: list[str] = SMALL) -> Trace:
    """A trace with one sample per op of each probe plan of the small config on 2 devices (no processes)."""
    job, config = load_job_config(CONFIG, overrides)
    workflow = job.workflow(config)
    samples = []
    for plan, logical in job.probes(2, config):
        for op in lower(workflow, plan, cpu_cluster(logical)).ops:
            samples.append(
                CostSample(
                    component=op.component,
                    op=op.name,
                    devices=max(1, len(op.devices)),
                    samples=op.samples,
                    seconds=_seconds(op.name, op.samples, op.num_bytes),
                    num_bytes=op.num_bytes if op.kind != "compute" else 0,
                )
            )
    return Trace(
        workflow=workflow, cluster=cpu_cluster(2), provenance={"kind": "synthesized"}, samples=samples
    )


def _set(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


def test_plan_from_trace_ranks_every_runnable_candidate() -> None:
    job, config = load_job_config(CONFIG, SMALL)
    auto = plan_from_trace(job, config, synthetic_trace(), 2)
    fitting = [c.predicted_s for c in auto.candidates if c.num_devices <= 2]
    assert fitting == sorted(fitting) and auto.chosen == auto.candidates[0]
    assert auto.chosen.num_devices <= 2  # a plan sharing cores between devices is never preferred
    # The planner's own proposals, without the fixed modes, their granularity variants and the probes that the
    # ranking also holds, are no slower than the best of those.
    on_two = [c for c in auto.candidates if c.num_devices <= 2]
    own = min(c.predicted_s for c in on_two if is_own(c.source))
    assert own <= min(
        c.predicted_s for c in on_two if c.source.startswith(("fixed", "probe")) or "placement" in c.source
    )
    assert {c.plan.mode for c in auto.candidates} == {"collocated", "hybrid", "disaggregated"}
    # Each probe's placement is ranked at every loop granularity, not only at the probe's own.
    probes = {c.plan for c in auto.candidates if c.source == "probe"}
    for probe in probes:
        tried = {
            c.plan.granularity_of("loop") for c in auto.candidates if c.plan.placements == probe.placements
        }
        assert tried == {1, 2, 4, 8}, probe.describe()
    for candidate in auto.candidates:  # every candidate can run: its stages split the environments
        job.check_plan(candidate.plan, config)


def test_reused_trace_skips_profiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    trace_path = tmp_path / "trace.json"
    # a profile from another processor model: planned from all the same, with a warning that says so
    profiled_elsewhere = {"kind": "profiled", "processor": "Another Processor 9000"}
    attrs.evolve(synthetic_trace(), provenance=profiled_elsewhere).save(trace_path)

    def no_profiling(*args: object, **kwargs: object) -> None:
        raise AssertionError("profiling ran although --trace was given")

    monkeypatch.setattr(rlinf.app.profiling, "profile", no_profiling)
    out = tmp_path / "run"
    code = main(
        ["train", CONFIG, "--mode", "auto", "--trace", str(trace_path), "--iterations", "3", "--devices", "2"]
        + ["--out", str(out), "--no-progress", *_set(SMALL)]
    )
    captured = capsys.readouterr()
    printed = captured.out
    assert code == 0, printed
    assert "profiling skipped" in printed and "auto: chose " in printed and "runner-up" in printed
    assert (
        f"rlinf: warning: --trace {trace_path}: the trace was profiled on 'Another Processor 9000'"
        in captured.err
    )
    last = [line for line in printed.splitlines() if line.startswith("iteration ")][-1]
    shown = re.match(r"iteration 3: measured ([\d.]+) s = predicted ([\d.]+) s ([+-][\d.]+)%;", last)
    assert shown is not None, last  # the sign as the bias has it: measured / predicted - 1
    assert float(shown[3]) == pytest.approx(100 * (float(shown[1]) / float(shown[2]) - 1), abs=1.0)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(m["predicted_iteration_s"] > 0 and m["iteration_s"] > 0 for m in metrics)
    for name in ("timeline.json", "timeline_predicted.json", "timeline_pair.png", "profile_trace.json"):
        assert (out / name).stat().st_size > 0, name
    # How the prediction held: the signed bias beside the absolute errors, over the iterations after the first.
    held = json.loads((out / "prediction.json").read_text())
    measured = [m["iteration_s"] for m in metrics[1:]]
    assert held["iterations"] == len(measured) == 2
    assert held["bias"] == pytest.approx(
        statistics.median(t / held["predicted_iteration_s"] - 1 for t in measured)
    )
    errors = sorted(abs(t / held["predicted_iteration_s"] - 1) for t in measured)  # the one error measure
    assert held["max_error"] == pytest.approx(errors[-1]) and held["median_error"] == pytest.approx(
        statistics.median(errors)
    )
    assert "prediction: measured median " in printed and "(measured / predicted - 1)" in printed
    # The run's own samples feed the next plan.
    run_trace = load_trace(out / "trace.json")
    merged = merge_traces(load_trace(out / "profile_trace.json"), run_trace)
    assert len(merged.samples) == len(synthetic_trace().samples) + len(run_trace.samples)
    assert merged.provenance["merged"][0]["samples"] == len(run_trace.samples)


def test_merge_refuses_another_workflow() -> None:
    with pytest.raises(ConfigError, match="describes another workflow"):
        merge_traces(synthetic_trace(), synthetic_trace([*SMALL[:-1], "num_steps=5"]))


def test_trace_of_another_config_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace_path = tmp_path / "trace.json"
    synthetic_trace().save(trace_path)
    code = main(
        ["train", CONFIG, "--trace", str(trace_path), "--out", str(tmp_path / "run"), "--no-progress"]
    )
    assert code == 2 and "was profiled for another workflow" in capsys.readouterr().err
