"""The published-results page (docs/analytic_validation.md): its generated blocks and its JSON must state what the
analytic model computes now, so that a change of the model that moves a prediction fails here until the page is
redone with ``python benchmarks/analytic_validation.py --write``."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import numpy as np
import pytest
from benchmark_scripts import load

from rlinf.analytic.llm_workload import ResponseLengths

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "analytic_validation.md"
DOC_JSON = ROOT / "docs" / "analytic_validation.json"


@pytest.fixture(scope="module")
def validation() -> ModuleType:
    """benchmarks/analytic_validation.py as a module."""
    return load("analytic_validation")


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
def asynchronous(validation: ModuleType) -> ModuleType:
    """benchmarks/analytic_validation_async.py: the async/sync section."""
    return sys.modules["analytic_validation_async"]


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
    names = [t[0] for t in validation.TARGETS] + [t[0] for t in validation.PAIR_TARGETS]
    assert [t["target"] for t in computed["targets"]] == names
    for target, (_, summary, figure, low, high) in zip(computed["targets"], validation.TARGETS, strict=False):
        value = computed[summary][f"{figure}_exact"]
        assert target["holds"] == (low <= value <= high)
    pairs = computed["asynchronous"]["every_pair"]
    direction, within = computed["targets"][-2:]
    assert direction["holds"] == all(pair["direction"] for pair in pairs)
    assert within["holds"] == (sum(pair["within"] for pair in pairs) >= 6)


def test_the_worst_row_target_leaves_out_the_flagged_engine_modes(computed, rows):
    flagged = {run.key for run in rows if run.unpriced_engine}
    assert flagged == {"verl-deepseek7b-grpo-mi300x-8", "verl-deepseek7b-ppo-mi300x-8"}
    priced = [row["ratio"] for row in computed["runs"] if row["key"] not in flagged]
    assert computed["summary_priced"]["worst_ratio"] == pytest.approx(
        max(priced, key=lambda r: abs(math.log(r))), abs=0.006
    )
    assert computed["summary_priced"]["num_runs"] == len(rows) - 2


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


def test_the_decode_step_check_prices_rows_the_engine_cost_was_not_read_from(validation):
    """The long-context rows of vLLM's pure-decode table, priced as the model prices a step: weights and KV cache at
    70% of the datasheet bandwidth, plus vLLM V1's fixed and per-sequence costs (read from the 128-token rows)."""
    from rlinf.analytic.engine_costs import ENGINE_STEP_COSTS

    cost = ENGINE_STEP_COSTS["vllm-v1"]
    read = {(m.model, m.batch, m.kv_bytes) for m in cost.measurements}
    checks = sys.modules["analytic_validation_tables"].step_checks()
    assert len(checks) == 12 and all(check.cache_len >= 4096 for check in checks)
    assert all(
        m.kv_bytes == m.batch * 192 * (12288 if "0.5B" in m.model else 114688) for m in cost.measurements
    )
    assert len(read) == len(cost.measurements)
    (longest,) = [c for c in checks if c.model == "Qwen2.5-0.5B" and c.batch == 32 and c.cache_len == 32640]
    step_bytes = 2 * 0.49e9 + 32 * (32640 + 64) * 12288
    engine_s = cost.fixed_step_s + 32 * cost.per_sequence_s
    assert longest.published_s == pytest.approx(10.399e-3)
    assert longest.model_s == pytest.approx(step_bytes / (0.7 * 2.0e12) + engine_s)
    assert longest.datasheet_s == pytest.approx(step_bytes / 2.0e12 + engine_s)


def test_one_step_off_rows_are_their_plans_simulated_at_staleness_one(model, rows, computed):
    by_key = {row["key"]: row for row in computed["runs"]}
    disaggregated = [run for run in rows if run.mode == "one-step-off"]
    assert len(disaggregated) == 6
    for run in disaggregated:
        setup = model.setup_of(run)
        asynchronous, synchronous = setup.timeline(1), setup.timeline(0)
        assert asynchronous.program.max_staleness == 1
        assert any(
            op.lagged for op in asynchronous.program.ops
        )  # the trainer reads the previous step's batch
        row = by_key[run.key]
        assert row["predicted_s"] == round(asynchronous.iteration_s, 1), run.key
        assert row["synchronous_s"] == round(synchronous.iteration_s, 1), run.key
        assert asynchronous.iteration_s < 0.9 * synchronous.iteration_s, (
            run.key
        )  # a synchronous plan would not be
    for run in rows:
        if run.mode == "collocated":
            assert by_key[run.key]["predicted_s"] == by_key[run.key]["synchronous_s"]


def test_the_trainer_folds_the_log_prob_forwards_into_its_update(model, rows):
    run = rows[1]
    assert run.log_prob_forwards == "trainer"
    synthesized = model.setup_of(run, as_run=False).trace
    folded = model.as_the_trainer_reads(synthesized, run)
    assert "inference" not in folded.workflow.component_names
    assert {edge.key for edge in folded.workflow.edges} == {"rollout->reward", "reward->actor"}
    assert all(sync.dst != "inference" for sync in folded.workflow.weight_sync)

    def seconds(trace, component):
        return {(s.devices, s.samples): s.seconds for s in trace.samples if s.component == component}

    forwards, update = seconds(synthesized, "inference"), seconds(synthesized, "actor")
    assert seconds(folded, "actor") == {key: update[key] + forwards[key] for key in update}
    state = {c.name: c.state_bytes for c in synthesized.workflow.components}
    assert folded.workflow.component("actor").state_bytes == state["actor"] + state["inference"]
    dropped = model.as_the_trainer_reads(synthesized, attrs.evolve(run, log_prob_forwards="engine"))
    assert seconds(dropped, "actor") == update
    assert dropped.workflow.component("actor").state_bytes == state["actor"]


def test_read_literally_the_one_step_off_placement_gains_nothing(computed, rows):
    # rlinf's staleness bound cuts only the edges into the actor: log-prob forwards left in the inference
    # component on the training GPUs wait for the same step's generation, and the trainer behind them.
    literal = computed["asynchronous"]["literal_placement"]
    assert [row["key"] for row in literal] == [run.key for run in rows if run.mode == "one-step-off"]
    predicted = {row["key"]: row["predicted_s"] for row in computed["runs"]}
    for row in literal:
        assert row["staleness_s"] == row["synchronous_s"] > predicted[row["key"]]


def test_the_async_pairs_are_published_rows_beside_their_predictions(rows, computed):
    by_key = {run.key: run for run in rows}
    predicted = {row["key"]: row["predicted_s"] for row in computed["runs"]}
    pairs = computed["asynchronous"]["pairs"]
    assert len(pairs) == 6
    for pair in pairs:
        synchronous, asynchronous = (by_key[key] for key in pair["keys"])
        assert (synchronous.mode, asynchronous.mode) == ("collocated", "one-step-off")
        assert {(r.system, r.model.name, r.device) for r in (synchronous, asynchronous)} == {
            (synchronous.system, synchronous.model.name, synchronous.device)
        }
        assert pair["published_s"] == [synchronous.reported_s, asynchronous.reported_s]
        assert pair["published_step_ratio"] == round(asynchronous.reported_s / synchronous.reported_s, 3)
        gpu_seconds = synchronous.reported_s * synchronous.num_devices
        assert pair["published_per_gpu_ratio"] == round(
            gpu_seconds / (asynchronous.reported_s * asynchronous.num_devices), 3
        )
        ratio = predicted[asynchronous.key] / predicted[synchronous.key]
        assert pair["predicted_step_ratio"] == pytest.approx(ratio, abs=0.002)
    assert pairs[0]["keys"] == ["nemo-llama8b-h100-16", "nemo-llama8b-h100-16-off1"]
    assert pairs[0]["published_step_ratio"] == 0.698  # 64.8 / 92.8 s per step, the v0.5 H100 table


def test_each_verl_recipe_is_predicted_at_the_same_assumed_length_for_both_runs(computed):
    verl_recipes = sys.modules["analytic_validation_async"]
    published = {"fully-async": 150.63 / 356.30, "one-step-off": 520 / 749}
    for recipe in verl_recipes.RECIPES:
        report = computed["asynchronous"]["verl"][recipe.key]
        assert report["published_ratio"] == round(published[recipe.key], 3)
        assert [row["mean_response_tokens"] for row in report["rows"]] == list(verl_recipes.ASSUMED_MEANS)
        for mean in verl_recipes.ASSUMED_MEANS:
            synchronous, asynchronous = recipe.runs(mean)
            same = ("response_mean_tokens", "max_response_tokens", "prompt_tokens", "num_prompts", "group_size",
                    "model", "num_devices", "framework", "train_mp")  # fmt: skip
            assert all(getattr(synchronous, f) == getattr(asynchronous, f) for f in same)
            assert synchronous.mode == "collocated" and asynchronous.log_prob_forwards != "inference"
        for row in report["rows"]:
            for k in recipe.staleness:
                assert row[f"staleness_{k}_ratio"] == pytest.approx(
                    row[f"staleness_{k}_s"] / row["synchronous_s"], abs=0.001
                )
    one_step = verl_recipes.ONE_STEP_OFF.runs(4000)[1]
    assert (one_step.num_devices, one_step.rollout_devices, one_step.rollout_mp) == (16, 4, 2)


def test_every_published_pair_is_judged_against_its_published_ratio(computed):
    pairs = computed["asynchronous"]["every_pair"]
    assert len(pairs) == 8  # NeMo RL's six, veRL's fully asynchronous and one-step-off recipes
    nemo = computed["asynchronous"]["pairs"]
    for judged, row in zip(pairs, nemo, strict=False):
        assert judged["published"] == row["published_step_ratio"]
        assert judged["predicted"] == [round(row["predicted_step_ratio"], 3)]
    for pair in pairs:
        errors = [p / pair["published"] - 1 for p in pair["predicted"]]
        assert pair["within"] == all(abs(e) <= 0.15 for e in errors)
        assert pair["direction"] == all((p < 1) == (pair["published"] < 1) for p in pair["predicted"])


def test_the_7b_plans_are_the_shipped_trace_without_the_earlier_model(computed):
    planner = computed["planner_7b"]
    for switch in (
        "--terms none",
        "--train-efficiency none",
        "--weight-sync none",
        "--decode-step-overhead-s 0",
    ):
        assert switch not in planner["command"]
    assert planner["command"].startswith("rlinf trace synth --model 7b --device H100 --num-devices 32")
    for trace in ("now", "shipped"):
        row = planner[trace]
        for staleness in (0, 1):
            chosen = row[f"staleness_{staleness}"]
            assert chosen["gain"] == pytest.approx(row["collocated_s"] / chosen["iteration_s"], abs=0.002)
        assert row["staleness_1"]["iteration_s"] <= row["staleness_0"]["iteration_s"]
    assert planner["now"]["curves"]["reshard_s"] > 0 == planner["shipped"]["curves"]["reshard_s"]


def test_published_run_places_the_log_prob_forwards_where_its_mode_allows(rows):
    collocated, disaggregated = rows[0], rows[1]
    with pytest.raises(ValueError, match="does not suit mode 'one-step-off'"):
        attrs.evolve(disaggregated, log_prob_forwards="inference")
    with pytest.raises(ValueError, match="does not suit mode 'collocated'"):
        attrs.evolve(collocated, log_prob_forwards="trainer")
    with pytest.raises(ValueError, match="is not one of"):
        attrs.evolve(disaggregated, log_prob_forwards="critic")


@pytest.mark.parametrize("index", [0, 1, 16])
def test_step_line_is_the_simulated_prediction_at_any_extra_cost(model, rows, index):
    # Collocated (0), one-step-off (1), long chain-of-thought (16): two simulations give the exact prediction at
    # every extra per-step cost, which the held-out fit's grid search relies on.
    run = rows[index]
    line = model.step_line(run)
    direct = model.simulate_run(run, inputs=model.Inputs(extra_step_s=0.0037)).iteration_s
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
