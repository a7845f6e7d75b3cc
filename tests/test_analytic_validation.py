"""The published-results table (docs/analytic_validation.md): the doc and its JSON must state what the analytic
model computes now, so that a change of the model that moves a prediction fails here until the doc is redone with
``python benchmarks/analytic_validation.py --json docs/analytic_validation.json`` (and its ``--markdown``)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import numpy as np
import pytest

from rlinf.llm_workload import ResponseLengths

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "analytic_validation.md"
DOC_JSON = ROOT / "docs" / "analytic_validation.json"


@pytest.fixture(scope="module")
def validation() -> ModuleType:
    """benchmarks/analytic_validation.py, imported from its path (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "analytic_validation", ROOT / "benchmarks" / "analytic_validation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # attrs resolves the module of its classes by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def computed(validation: ModuleType) -> dict[str, Any]:
    """Both predictions of every published run, recomputed now."""
    return validation.report()


def test_doc_table_summaries_and_sources_are_what_the_code_computes(computed):
    doc = DOC.read_text()
    assert computed["markdown"] in doc


def test_doc_json_matches_the_recomputed_rows(computed):
    stored = json.loads(DOC_JSON.read_text())
    assert stored["summary"] == computed["summary"]
    assert stored["summary_before"] == computed["summary_before"]
    assert [row["key"] for row in stored["runs"]] == [row["key"] for row in computed["runs"]]
    for old, new in zip(stored["runs"], computed["runs"], strict=True):
        for field in (
            "reported_s",
            "predicted_s",
            "ratio",
            "predicted_s_before",
            "ratio_before",
            "component_s",
        ):
            assert old[field] == new[field], (new["key"], field)


def test_must_show_line_states_the_median_and_worst_ratio(computed, validation):
    doc = DOC.read_text()
    summary = computed["summary"]
    ratios = [row["ratio"] for row in computed["runs"]]
    assert summary["num_runs"] == len(ratios) >= 8
    assert summary["median_ratio"] == pytest.approx(float(np.median(ratios)), abs=0.006)
    assert abs(np.log(summary["worst_ratio"])) == pytest.approx(max(abs(np.log(r)) for r in ratios), abs=0.02)
    must_show = (
        f"median ratio of predicted to reported iteration time **{summary['median_ratio']:.2f}**, worst "
        f"**{summary['worst_ratio']:.2f}**"
    )
    assert must_show in doc
    before = computed["summary_before"]
    assert f"{before['median_ratio']:.2f} and {before['worst_ratio']:.2f} before" in doc


def test_every_run_names_its_source_and_what_it_assumed(validation):
    for run in validation.RUNS:
        assert "github.com" in run.source or "https://" in run.source, run.key
        assert run.assumptions, run.key
    assert len({run.key for run in validation.RUNS}) == len(validation.RUNS)


def test_nemo_prompt_is_what_the_token_rate_leaves_beside_the_response(validation):
    # 1,581 tokens/s/GPU x 16 GPUs x 92.8 s over 2,048 samples = 1,146.3 tokens; minus 1,019 generated.
    assert validation.nemo_prompt_tokens(1581, 16, 92.8, 2048, 1019) == 127
    with pytest.raises(ValueError, match="leave no prompt"):
        validation.nemo_prompt_tokens(100, 16, 92.8, 2048, 1019)


def test_median_for_mean_reproduces_the_reported_mean_in_the_synthesized_draw(validation):
    median = validation.median_for_mean(1019, 3969)
    lengths = ResponseLengths(median_tokens=median, sigma=0.6, max_tokens=3969)
    assert lengths.draw(4096, np.random.default_rng(validation.SEED)).mean() == pytest.approx(1019, abs=0.5)
    with pytest.raises(ValueError, match="must lie in"):
        validation.median_for_mean(5000, 3969)


def test_published_run_rejects_an_unknown_mode_device_or_phase(validation):
    run = validation.RUNS[0]
    with pytest.raises(ValueError, match="mode"):
        attrs.evolve(run, mode="async")
    with pytest.raises(ValueError, match="unknown device"):
        attrs.evolve(run, device="TPU")
    with pytest.raises(ValueError, match="unknown phases"):
        attrs.evolve(run, reported_phases_s=(("decode", 1.0),))
    with pytest.raises(ValueError, match="rollout_devices"):
        attrs.evolve(run, mode="one-step-off", rollout_devices=0)


def test_one_step_off_prediction_is_the_busiest_device_not_the_synchronous_iteration(validation, computed):
    rows = {row["key"]: row for row in computed["runs"]}
    for run in validation.RUNS:
        row = rows[run.key]
        if run.mode == "one-step-off":
            assert row["predicted_s"] <= row["simulated_iteration_s"]
        else:
            assert row["predicted_s"] == row["simulated_iteration_s"]
