"""Calibration of the analytic model: recovery of known parameters, the held-out split, what cannot be fitted,
the profile of the former GRPO arithmetic workload and ``rlinf trace calibrate``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from rlinf.analytic.calibration import calibrate, calibrated_trace
from rlinf.analytic.calibration_samples import split_observations
from rlinf.analytic.llm_workload import LLMWorkload, ModelSpec, ResponseLengths
from rlinf.analytic.synthesis import MODEL_PRESETS, OP_OF_ROLE, Physics, synthesize
from rlinf.cli import main
from rlinf.core.cluster import Cluster, parse_cluster
from rlinf.core.costs import fit
from rlinf.core.errors import ConfigError
from rlinf.core.trace import Trace, load_trace

ROOT = Path(__file__).resolve().parents[1]
ARITH = ROOT / "docs" / "data" / "grpo_arith_former_cpu2_trace.json"
# The profile of the former arithmetic workload (a GPT-2-shaped transformer written in torch, replaced by the addition
# task of the GRPO workload), kept with the calibration study it is the data of: the model rlinf validate trained
# for it: d_model 64, 2 layers, 4 heads, fp32; prompts "<bos>042+317=" (9 tokens), responses of at most 6 tokens.
ARITH_FLAGS = [
    "--params", "102016", "--layers", "2", "--hidden-size", "64", "--heads", "4", "--kv-heads", "4",
    "--device", "CPU", "--num-devices", "2", "--prompts", "32", "--group-size", "8", "--prompt-tokens", "9",
    "--response-median", "5", "--response-sigma", "0.1", "--response-max", "6", "--rollout-mp", "1",
    "--inference-mp", "1", "--actor-mp", "1", "--weight-bytes-per-param", "4",
]  # fmt: skip
TRUTH = {
    "prefill_mfu": 0.3,
    "decode_mbu": 0.45,
    "train_mfu": 0.22,
    "reward_seconds_per_sample": 0.004,
    "overhead_s.generate": 0.4,
    "overhead_s.reward": 0.05,
    "overhead_s.infer": 0.1,
    "overhead_s.train": 0.25,
}


@pytest.fixture
def cluster() -> Cluster:
    return parse_cluster("4x8xH100")


@pytest.fixture
def prior() -> LLMWorkload:
    """1.5B GRPO with a small batch and the default (uncalibrated) efficiencies."""
    return LLMWorkload(
        model=MODEL_PRESETS["1.5b"],
        num_prompts=16,
        group_size=8,
        response=ResponseLengths(median_tokens=1000, sigma=0.6, max_tokens=4096),
        actor_model_parallel=1,
    )


def with_truth(prior: LLMWorkload) -> LLMWorkload:
    overheads = {name.split(".")[1]: value for name, value in TRUTH.items() if name.startswith("overhead")}
    return attrs.evolve(
        prior,
        prefill_mfu=TRUTH["prefill_mfu"],
        decode_mbu=TRUTH["decode_mbu"],
        train_mfu=TRUTH["train_mfu"],
        reward_seconds_per_sample=TRUTH["reward_seconds_per_sample"],
        op_overheads_s=overheads,
    )


def noisy(trace: Trace, sigma: float, seed: int) -> Trace:
    """``trace`` with every sample's seconds multiplied by lognormal noise."""
    rng = np.random.default_rng(seed)
    samples = [attrs.evolve(s, seconds=s.seconds * float(rng.lognormal(0.0, sigma))) for s in trace.samples]
    return attrs.evolve(trace, samples=samples)


def fitted(result) -> dict[str, float]:
    return {p.name: p.fitted for p in result.parameters}


def test_op_time_parts_add_up_to_the_synthesized_seconds(prior, cluster):
    workload = with_truth(prior)
    trace = synthesize(workload, cluster, seed=0)
    physics = Physics.of(workload, cluster, 0)
    for sample in [s for s in trace.samples if s.op != "generate_continuous"][::7]:
        component = trace.workflow.component(sample.component)
        replicas = sample.devices // component.model_parallel_size
        parts = physics.op_time(component.role, sample.samples, replicas)
        seconds = workload.overhead_s(sample.op) + parts.seconds(
            prefill_mfu=0.3, train_mfu=0.22, decode_mbu=0.45, reward_seconds_per_sample=0.004
        )
        assert seconds == pytest.approx(sample.seconds, rel=1e-12)


def test_recovers_known_parameters_from_a_noise_free_trace(prior, cluster):
    measured = synthesize(with_truth(prior), cluster, seed=0)
    result = calibrate(prior, cluster, measured, seed=0, holdout_fraction=0.0)
    for name, value in TRUTH.items():
        assert fitted(result)[name] == pytest.approx(value, rel=0.01), name
    assert result.rms_log_residual < 1e-3
    assert result.heldout_errors == ()


def test_recovers_known_parameters_from_a_noisy_trace_and_beats_the_prior_on_held_out_samples(prior, cluster):
    measured = noisy(synthesize(with_truth(prior), cluster, seed=0), sigma=0.03, seed=1)
    result = calibrate(prior, cluster, measured, seed=0, split_seed=3, holdout_fraction=0.25)
    for parameter in result.parameters:
        assert parameter.status == "fitted", parameter
        assert parameter.fitted == pytest.approx(TRUTH[parameter.name], rel=0.12), parameter
        # The reported standard error is honest: the truth lies within 4 of them.
        assert parameter.relative_std_error is not None
        assert abs(np.log(parameter.fitted / TRUTH[parameter.name])) < 4 * parameter.relative_std_error + 0.01
    heldout = {row.op: row for row in result.heldout_errors}
    assert result.num_heldout == heldout["all"].num_samples > 0
    assert heldout["all"].median_before > 0.3
    assert heldout["all"].median_after < 0.05
    assert set(heldout) == {*OP_OF_ROLE.values(), "all"}


def test_ppo_recovers_the_critics_training_apart_from_the_actors(prior, cluster):
    # A critic that trains 2.5 times slower than the actor at every size: its own efficiency and fixed cost are
    # fitted, the actor's stay at the truth, and the calibrated trace prices the critic with its own.
    ppo = attrs.evolve(prior, algorithm="ppo")
    truth = synthesize(with_truth(ppo), cluster, seed=0)
    slower = [
        attrs.evolve(s, seconds=2.5 * s.seconds) if s.component == "critic" and s.op == "train" else s
        for s in truth.samples
    ]
    measured = attrs.evolve(truth, samples=slower)
    result = calibrate(ppo, cluster, measured, seed=0, holdout_fraction=0.0)
    values = fitted(result)
    assert values["train_mfu"] == pytest.approx(TRUTH["train_mfu"], rel=0.01)
    assert values["critic_train_mfu"] == pytest.approx(TRUTH["train_mfu"] / 2.5, rel=0.01)
    assert values["overhead_s.critic_train"] == pytest.approx(2.5 * TRUTH["overhead_s.train"], rel=0.01)
    assert result.critic == {
        "critic_train_mfu": values["critic_train_mfu"],
        "overhead_s.critic_train": values["overhead_s.critic_train"],
    }
    assert {row.op for row in result.fit_errors} >= {"train", "train (critic)"}
    costs = fit(calibrated_trace(result, cluster, measured, seed=0, date="2026-01-01", measured_source="m"))
    actor, critic = (costs.compute_seconds(name, "train", 8, 128) for name in ("actor", "critic"))
    assert critic == pytest.approx(2.5 * actor, rel=0.01)


def test_grpo_has_no_critic_parameters(prior, cluster):
    result = calibrate(prior, cluster, synthesize(with_truth(prior), cluster, seed=0), seed=0)
    assert result.critic == {} and "critic_train_mfu" not in fitted(result)


def test_recovers_known_parameters_with_the_fixed_terms_on(prior, cluster):
    # Tensor-parallel all-reduces and an engine overhead per decode step are seconds no efficiency scales: the fit
    # holds them at the prior's values and still recovers the efficiencies and overheads.
    terms = attrs.evolve(
        prior,
        rollout_model_parallel=2,
        inference_model_parallel=2,
        actor_model_parallel=2,
        count_tensor_parallel_comm=True,
        decode_step_overhead_s=0.002,
        free_kv_cache_on_offload=True,
    )
    workload = with_truth(terms)
    measured = synthesize(workload, cluster, seed=0)
    physics = Physics.of(workload, cluster, 0)
    assert physics.op_time("actor", 64, 4).fixed_s > 0 and physics.op_time("rollout", 64, 4).fixed_s > 0
    result = calibrate(terms, cluster, measured, seed=0, holdout_fraction=0.0)
    for name, value in TRUTH.items():
        assert fitted(result)[name] == pytest.approx(value, rel=0.01), name
    assert result.rms_log_residual < 1e-3


def test_split_is_deterministic_stratified_and_keeps_every_op_in_the_fit():
    ops = ["generate"] * 20 + ["train"] * 8 + ["reward"]
    fit_a, out_a = split_observations(ops, 0.25, seed=5)
    fit_b, out_b = split_observations(ops, 0.25, seed=5)
    _, out_c = split_observations(ops, 0.25, seed=6)
    assert fit_a.tolist() == fit_b.tolist() and out_a.tolist() == out_b.tolist()
    assert out_a.tolist() != out_c.tolist()
    assert sorted([*fit_a, *out_a]) == list(range(len(ops)))
    held = [ops[i] for i in out_a]
    assert held.count("generate") == 5 and held.count("train") == 2 and "reward" not in held


def test_a_parameter_no_sample_depends_on_keeps_its_prior(prior, cluster):
    trace = synthesize(with_truth(prior), cluster, seed=0)
    without_reward = attrs.evolve(trace, samples=[s for s in trace.samples if s.op != "reward"])
    result = calibrate(prior, cluster, without_reward, seed=0)
    by_name = {p.name: p for p in result.parameters}
    for name in ("reward_seconds_per_sample", "overhead_s.reward"):
        assert by_name[name].status == "unconstrained"
        assert by_name[name].fitted == by_name[name].prior
    assert by_name["train_mfu"].fitted == pytest.approx(TRUTH["train_mfu"], rel=1e-2)


def test_one_size_per_op_cannot_separate_overhead_from_efficiency(prior, cluster):
    trace = synthesize(with_truth(prior), cluster, seed=0)
    one_size = [s for s in trace.samples if s.devices == 8 and s.samples == prior.batch_size]
    result = calibrate(prior, cluster, attrs.evolve(trace, samples=one_size), seed=0, holdout_fraction=0.0)
    by_name = {p.name: p for p in result.parameters}
    assert by_name["overhead_s.train"].status == "weakly constrained"
    assert by_name["overhead_s.train"].fitted == pytest.approx(prior.op_overhead_s, rel=0.5)
    # The efficiency absorbs the difference, so the one measured size is still reproduced.
    assert result.fit_errors[-1].median_after < 0.01


def test_the_former_arith_profile_held_out_error_drops(tmp_path):
    measured = load_trace(ARITH)
    prior = LLMWorkload(
        model=ModelSpec(
            name="arith",
            num_params=102016,
            num_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            num_kv_heads=4,
        ),
        num_prompts=32,
        group_size=8,
        prompt_tokens=9,
        response=ResponseLengths(median_tokens=5, sigma=0.1, max_tokens=6),
        actor_model_parallel=1,
        weight_bytes_per_param=4.0,
    )
    result = calibrate(prior, measured.cluster, measured, seed=0, split_seed=0)
    # Streamed generate segments and data movement are not what the analytic model prices.
    assert any("streamed micro-batch" in reason for reason in result.excluded)
    assert any(reason.startswith("transfer") for reason in result.excluded)
    heldout = result.heldout_errors[-1]
    assert heldout.op == "all" and heldout.num_samples > 150
    assert heldout.median_after < 0.3 < 3.0 < heldout.median_before
    # Decode never reads enough memory to be bandwidth-bound on this 0.1M-parameter model.
    assert {p.name: p.status for p in result.parameters}["decode_mbu"] == "unconstrained"
    trace = calibrated_trace(result, measured.cluster, measured, seed=0, date="d", measured_source=str(ARITH))
    assert trace.provenance["calibration"]["samples"]["movement_carried"] > 0
    assert {s.op for s in trace.samples} >= {"generate", "train", "transfer", "sync_weights"}
    fit(trace).compute_seconds("actor", "train", 2, 256)


def test_rejects_an_embodied_trace_and_another_device(prior, cluster):
    hopper = load_trace(ROOT / "traces" / "hopper_ppo_cpu2.json")
    with pytest.raises(ConfigError, match="embodied env loop"):
        calibrate(prior, hopper.cluster, hopper, seed=0)
    measured = synthesize(prior, parse_cluster("8xA100"), seed=0)
    with pytest.raises(ConfigError, match=r"measured\.cluster\.device=.*A100"):
        calibrate(prior, cluster, measured, seed=0)
    with pytest.raises(ConfigError, match="holdout_fraction"):
        calibrate(prior, cluster, synthesize(prior, cluster, seed=0), seed=0, holdout_fraction=0.95)


# ------------------------------------------------------------------------------------------------------ the CLI
def test_cli_calibrates_the_arith_profile_and_writes_a_trace(tmp_path, capsys):
    out = tmp_path / "calibrated.json"
    args = ["trace", "calibrate", "--measured", str(ARITH), *ARITH_FLAGS, "--date", "2026-01-01"]
    assert main([*args, "--out", str(out)]) == 0
    report = capsys.readouterr().out
    assert "held out  all" in report and "decode_mbu" in report and "unconstrained" in report
    trace = load_trace(out)
    record = trace.provenance["calibration"]
    assert record["measured"]["file"] == str(ARITH) and record["measured"]["kind"] == "profiled"
    assert record["samples"]["fit"] > record["samples"]["heldout"] > 0
    assert record["parameters"]["train_mfu"]["fitted"] == trace.provenance["workload"]["train_mfu"]
    heldout = record["residuals"]["median_relative_error_heldout"]["all"]
    assert heldout["median_after"] < heldout["median_before"]
    assert "rlinf trace calibrate --measured" in trace.provenance["command"]
    json.dumps(trace.provenance)
    # The calibrated trace starts a second calibration as its prior; the fit is then already done.
    again = tmp_path / "again.json"
    assert (
        main(["trace", "calibrate", "--measured", str(ARITH), "--analytic", str(out), "--out", str(again)])
        == 0
    )
    second = load_trace(again).provenance["calibration"]["residuals"]["median_relative_error_fit"]["all"]
    assert second["median_before"] == pytest.approx(second["median_after"], rel=0.02)
    assert main(["trace", "show", str(out)]) == 0
    assert "held-out median error" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["--analytic", "traces/grpo_7b_h100.json", "--model", "7b"], "--analytic"),
        ([], "--measured"),  # a profiled trace records no workload to start from
        (["--model", "7b", "--device", "H100"], "measured.cluster.device"),
        ([*ARITH_FLAGS, "--holdout", "1.5"], "holdout_fraction"),
        ([*ARITH_FLAGS, "--prefill-mfu", "2"], "prefill_mfu"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, extra, field):
    out = tmp_path / "bad.json"
    code = main(["trace", "calibrate", "--measured", str(ARITH), *extra, "--out", str(out)])
    error = capsys.readouterr().err
    assert code == 2
    assert error.startswith("rlinf: error: ") and f"{field}=" in error
    assert len(error.strip().splitlines()) == 1
    assert not out.exists()


HF_PROFILE_ARGS = [
    "--measured",
    "docs/data/grpo_hf_cpu2_trace.json",
    "--params",
    "188992",
    "--layers",
    "2",
    "--hidden-size",
    "64",
    "--heads",
    "4",
    "--kv-heads",
    "2",
    "--device",
    "CPU",
    "--num-devices",
    "2",
    "--prompts",
    "32",
    "--group-size",
    "8",
    "--prompt-tokens",
    "40",
    "--response-median",
    "45",
    "--response-sigma",
    "0.6",
    "--response-max",
    "160",
    "--rollout-mp",
    "1",
    "--inference-mp",
    "1",
    "--actor-mp",
    "1",
    "--weight-bytes-per-param",
    "4",
    "--kv-cache-fraction",
    "0.00001",
]


def test_the_hf_profile_figures_in_the_docs_are_what_calibration_computes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/calibration.md's held-out figures for the Hugging Face GRPO profile, recomputed; the fit must also
    beat the prior on samples it never saw."""
    monkeypatch.chdir(ROOT)
    assert main(["trace", "calibrate", *HF_PROFILE_ARGS, "--out", str(tmp_path / "cal.json")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("held out  all"))
    before, after = (float(v) for v in re.findall(r"([\d.]+)% ", line)[:2])
    assert after < before / 2
    doc = (ROOT / "docs" / "calibration.md").read_text()
    assert f"**{before:.1f}% before -> {after:.1f}% after** the fit" in doc


def calibrate_arith_benchmark() -> Any:
    """benchmarks/calibrate_arith.py as a module (the benchmarks folder is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "calibrate_arith", ROOT / "benchmarks" / "calibrate_arith.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_arith_held_out_table_in_the_docs_is_what_the_benchmark_computes() -> None:
    """docs/calibration.md's five-split-seed table of the shipped profile, recomputed; a hand edit fails."""
    bench = calibrate_arith_benchmark()
    rows = bench.heldout_rows(load_trace(bench.PROFILE), [0, 1, 2, 3, 4])
    assert bench.PROFILE == ARITH
    assert "\n".join(rows) in (ROOT / "docs" / "calibration.md").read_text()


def test_the_arith_fit_in_the_docs_is_what_calibrate_finds() -> None:
    """docs/calibration.md's fitted-parameter table (statuses), sample counts and per-op held-out errors of the
    shipped profile at split seed 0 (what its ``rlinf trace calibrate`` command prints); a hand edit fails."""
    bench = calibrate_arith_benchmark()
    profile = load_trace(ARITH)
    result = calibrate(bench.PRIOR, profile.cluster, profile, seed=0, split_seed=0)
    doc = " ".join((ROOT / "docs" / "calibration.md").read_text().split())
    assert (
        f"Fitted (split seed 0; {result.num_fit} observations fitted, {result.num_heldout} held out)" in doc
    )
    for parameter in result.parameters:
        row = re.search(rf"\| `{re.escape(parameter.name)}` \|[^|]*\|[^|]*\|[^|]*\| ([a-z ]+) \|", doc)
        assert row is not None and row.group(1) == parameter.status, parameter.name
    for row in result.heldout_errors:
        if row.op != "all":
            assert row.median_lookup is not None
            text = (
                f"{row.op} {100 * row.median_before:.0f}% -> {100 * row.median_after:.1f}% "
                f"({100 * row.median_lookup:.1f}%"
            )
            assert text in doc, text


def test_the_arith_iteration_figures_in_the_docs_are_what_the_benchmark_computes() -> None:
    """docs/calibration.md's per-iteration table (docs/grpo_validate.json's measured plans against predictions
    from that run's own profile), recomputed by benchmarks/calibrate_arith.py's functions; a hand edit fails."""
    bench = calibrate_arith_benchmark()
    _, errors = bench.iteration_errors(bench.iteration_traces())
    summary = bench.iteration_summary(errors)
    doc = (ROOT / "docs" / "calibration.md").read_text()
    labels = {
        "profile": "the profile (per-configuration lookup)",
        "analytic, uncalibrated": "analytic, uncalibrated",
        "analytic, calibrated": "analytic, calibrated (8 parameters)",
    }
    for name, (median, worst) in summary.items():
        assert f"| {labels[name]} | {median:.1%} | {worst:.1%} |" in doc, name
    assert summary["analytic, calibrated"][0] < summary["analytic, uncalibrated"][0] / 10
