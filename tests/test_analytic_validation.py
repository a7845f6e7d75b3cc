"""The published-results page (docs/analytic_validation.md): its generated blocks and its JSON must state what the
analytic model computes now, so that a change of the model that moves a prediction fails here until the page is
redone with ``python benchmarks/analytic_validation.py --write``."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import numpy as np
import pytest

from rlinf.analytic.llm_workload import ResponseLengths

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
def runs(validation: ModuleType) -> ModuleType:
    """benchmarks/analytic_validation_runs.py: the row type, engines and devices."""
    return sys.modules["analytic_validation_runs"]


@pytest.fixture(scope="module")
def rows(validation: ModuleType) -> tuple[Any, ...]:
    """The published rows."""
    return sys.modules["analytic_validation_rows"].RUNS


@pytest.fixture(scope="module")
def model(validation: ModuleType) -> ModuleType:
    """benchmarks/analytic_validation_model.py: how a row is predicted."""
    return sys.modules["analytic_validation_model"]


@pytest.fixture(scope="module")
def computed(validation: ModuleType) -> dict[str, Any]:
    """Every prediction of every published run, recomputed now."""
    return validation.report()


def test_every_generated_block_of_the_doc_is_what_the_code_computes(validation, computed):
    text = DOC.read_text()
    for name, content in computed["blocks"].items():
        found = validation.block(name).search(text)
        assert found is not None, f"the doc has no block {name}"
        assert found.group(2) == content, (
            f"block {name}: run python benchmarks/analytic_validation.py --write"
        )


def test_doc_json_is_the_recomputed_report(computed):
    stored = json.loads(DOC_JSON.read_text())
    assert stored == json.loads(json.dumps(computed)), "run python benchmarks/analytic_validation.py --write"


def test_a_hand_edited_figure_of_a_block_is_caught(validation, computed, monkeypatch, tmp_path):
    text = DOC.read_text()
    found = validation.block("targets").search(text)
    assert found is not None
    edited = found.group(2).replace("| 0.", "| 9.", 1)
    assert edited != found.group(2)
    doc = tmp_path / "analytic_validation.md"
    doc.write_text(text.replace(found.group(2), edited))
    json_copy = tmp_path / "analytic_validation.json"
    json_copy.write_text(DOC_JSON.read_text())
    monkeypatch.setattr(validation, "DOC", doc)
    monkeypatch.setattr(validation, "DOC_JSON", json_copy)
    assert validation.differences(computed) == ["targets"]


def test_the_table_has_at_least_15_runs_with_long_chain_of_thought_ones(rows, computed):
    assert len(rows) >= 15
    assert len({run.key for run in rows}) == len(rows)
    long_cot = [run for run in rows if run.long_cot]
    assert len(long_cot) >= 3
    assert all(run.response_mean_tokens >= 8000 for run in long_cot)
    assert computed["summary_long_cot"]["num_runs"] == len(long_cot)


def test_summaries_state_the_median_and_worst_ratio_of_the_rows(computed):
    ratios = [row["ratio"] for row in computed["runs"]]
    summary = computed["summary"]
    assert summary["median_ratio"] == pytest.approx(float(np.median(ratios)), abs=0.006)
    worst = max(ratios, key=lambda r: abs(math.log(r)))
    assert summary["worst_ratio"] == pytest.approx(worst, abs=0.006)
    cot = [row["ratio"] for row in computed["runs"] if row["long_cot"]]
    assert computed["summary_long_cot"]["median_ratio"] == pytest.approx(float(np.median(cot)), abs=0.006)


def test_targets_say_whether_each_holds(computed, validation):
    assert [t["target"] for t in computed["targets"]] == [t[0] for t in validation.TARGETS]
    for target in computed["targets"]:
        assert target["holds"] == (target["low"] <= target["value"] <= target["high"])


def test_previous_column_reproduces_the_previous_page_on_its_ten_rows(computed):
    # The previous version of the page stated median 0.81 and worst 0.33 (veRL PPO on MI300X) over its 10 rows.
    first_ten = computed["summary_previous_first_ten"]
    assert (first_ten["median_ratio"], first_ten["worst_ratio"]) == (0.81, 0.33)
    assert first_ten["worst_run"] == "verl-deepseek7b-ppo-mi300x-8"
    assert computed["ablation"]["first"]["num_runs"] == len(computed["runs"])


def test_the_fitted_constant_is_fitted_on_a_named_subset_and_evaluated_on_the_rest(
    rows, computed, validation
):
    held_out = computed["held_out"]
    fitted_on = set(held_out["fitted_on"])
    assert fitted_on == {run.key for run in rows if run.system.startswith(validation.FITTED_ON)}
    assert fitted_on and not fitted_on & set(held_out["predicted_s"])
    assert fitted_on | set(held_out["predicted_s"]) == {run.key for run in rows}


def test_every_run_names_its_source_and_what_it_assumed(rows):
    for run in rows:
        assert "github.com" in run.source or "https://" in run.source, run.key
        assert run.assumptions, run.key


def test_the_long_cot_rows_read_the_rlinf_blog(rows):
    for run in rows:
        if run.long_cot:
            assert "compare_with_verl.rst" in run.source, run.key
            assert run.max_response_tokens == 28672 - 1024


def test_nemo_prompt_is_what_the_token_rate_leaves_beside_the_response(runs):
    # 1,581 tokens/s/GPU x 16 GPUs x 92.8 s over 2,048 samples = 1,146.3 tokens; minus 1,019 generated.
    assert runs.nemo_prompt_tokens(1581, 16, 92.8, 2048, 1019) == 127
    with pytest.raises(ValueError, match="leave no prompt"):
        runs.nemo_prompt_tokens(100, 16, 92.8, 2048, 1019)


def test_median_for_mean_reproduces_the_reported_mean_in_the_synthesized_draw(model):
    median = model.median_for_mean(1019, 3969)
    lengths = ResponseLengths(median_tokens=median, sigma=0.6, max_tokens=3969)
    assert lengths.draw(4096, np.random.default_rng(model.SEED)).mean() == pytest.approx(1019, abs=0.5)


def test_a_published_longest_response_sets_the_spread(rows, model):
    verl = next(run for run in rows if run.key == "verl-deepseek7b-grpo-mi300x-8")
    sigma = model.sigma_of(verl)
    assert 0.3 < sigma < 0.6
    assert model.sigma_of(verl, model.PREVIOUS) == model.RESPONSE_SIGMA
    unspread = next(run for run in rows if not run.spread_source)
    assert model.sigma_of(unspread) == model.RESPONSE_SIGMA


def test_published_run_rejects_an_unknown_mode_device_phase_engine_or_layout(rows):
    run = rows[0]
    with pytest.raises(ValueError, match="mode"):
        attrs.evolve(run, mode="async")
    with pytest.raises(ValueError, match="unknown device"):
        attrs.evolve(run, device="TPU")
    with pytest.raises(ValueError, match="unknown phases"):
        attrs.evolve(run, reported_phases_s=(("decode", 1.0),))
    with pytest.raises(ValueError, match="rollout_devices"):
        attrs.evolve(run, mode="one-step-off", rollout_devices=0)
    with pytest.raises(ValueError, match="unknown engine"):
        attrs.evolve(run, engine="trt-llm")
    with pytest.raises(ValueError, match="offload"):
        attrs.evolve(run, offload=("reward",))
    with pytest.raises(ValueError, match="train_pp"):
        attrs.evolve(run, train_pp=3)
    with pytest.raises(ValueError, match="not both"):
        attrs.evolve(run, response_clip_ratio=0.1, response_longest=100.0)


def test_every_engine_is_priced_by_a_published_table(runs):
    from rlinf.analytic.engine_costs import ENGINE_STEP_COSTS

    for key, engine in runs.ENGINES.items():
        assert engine.step_cost in ENGINE_STEP_COSTS, key
        assert runs.step_cost_of(key) == (
            ENGINE_STEP_COSTS[engine.step_cost].fixed_step_s,
            ENGINE_STEP_COSTS[engine.step_cost].per_sequence_s,
        )


def test_one_step_off_prediction_is_the_busiest_device_not_the_synchronous_iteration(rows, computed):
    by_key = {row["key"]: row for row in computed["runs"]}
    for run in rows:
        row = by_key[run.key]
        if run.mode == "one-step-off":
            assert row["predicted_s"] <= row["simulated_iteration_s"]
        else:
            assert row["predicted_s"] == row["simulated_iteration_s"]


@pytest.mark.parametrize("index", [0, 1, 16])
def test_step_line_is_the_simulated_prediction_at_any_extra_cost(model, rows, index):
    # Collocated (0), one-step-off (1), long chain-of-thought (16): two simulations give the exact prediction at
    # every extra per-step cost, which the held-out fit's grid search relies on.
    run = rows[index]
    line = model.step_line(run)
    timeline = model.simulate_run(run, inputs=model.Inputs(extra_step_s=0.0037))
    direct = model.predicted_seconds(run, timeline)
    assert float(line(np.array([0.0037]))[0]) == pytest.approx(direct, rel=1e-9)


def test_fit_extra_step_finds_the_value_that_makes_a_line_meet_its_report(model, rows):
    run = attrs.evolve(rows[0], reported_s=100.0)
    line = model.StepLine(run=run, at_zero=np.array([60.0]), slope=np.array([4000.0]))
    assert model.fit_extra_step([line]) == pytest.approx(0.01, abs=2e-6)


def test_sensitivity_moves_are_neutral_at_one_and_monotone_in_the_engine_cost(computed, rows):
    for row in computed["runs"]:
        moved = row["sensitivity"]
        zero, double = moved["engine per-step cost 0"], moved["engine per-step cost x2"]
        assert zero <= row["ratio"] + 0.005 <= double + 0.01, row["key"]
    long_cot = [row for row in computed["runs"] if row["long_cot"]]
    assert all(row["sensitivity"]["engine per-step cost 0"] < row["ratio"] - 0.05 for row in long_cot)


def test_the_straggler_demo_reports_a_tail_share_of_the_step(computed):
    demo = computed["straggler_demo"]
    assert 0 < demo["straggler_fraction"] < 1
    assert demo["straggler_s"] == pytest.approx(demo["straggler_fraction"] * demo["iteration_s"], rel=0.01)
    assert demo["tail"]["tail_batch"] < demo["tail"]["peak_batch"] / 4
    assert f"`straggler_fraction` = **{demo['straggler_fraction']:.3f}**" in DOC.read_text()
