"""The GRPO workload through ``rlinf train`` (the tests' tiny addition setup): ``--resume`` continues exactly (2 + 1
iterations compute what 3 straight do) collocated with the rollout and actor context-switching, and hybrid with
the zero-advantage responses skipped; a profile records every response length; bad settings fail in one line;
the shipped profile is a profile of the example."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hf_grpo_tiny import CONFIG, GROUP_SIZE, PROMPTS, tiny_config, tiny_sets

from rlinf.app.checkpoint import load_latest
from rlinf.app.jobs import get_job, load_job_config
from rlinf.app.profiling import ProfileSettings, profile
from rlinf.cli import main
from rlinf.core.costs import fit
from rlinf.core.errors import ConfigError
from rlinf.core.trace import load_trace
from rlinf.workloads.hf_grpo.warm_start import warm_start_checkpoint

pytest.importorskip("transformers", reason='needs the hf extra: pip install -e ".[hf]"')


def computed(run_dir: Path) -> list[dict]:
    """Per iteration, every metric that does not measure time (durations and rates end in ``_s``)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.endswith("_s")} for line in lines]


def train(cache: Path, out: Path, *args: str, **settings: object) -> int:
    return main(["train", CONFIG, *args, "--out", str(out), *tiny_sets(cache, **settings), "--no-progress"])


def resumed_equals_straight(cache: Path, tmp_path: Path, mode: str, devices: int, **settings: object) -> Path:
    """Train 3 iterations straight, and 2 then ``--resume`` to 3 (with ``settings``, which must not change what is
    computed); assert both compute the same; the resumed run's directory."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    base = ["--mode", mode, "--devices", str(devices)]
    no_offload = {k: v for k, v in settings.items() if k != "execution.offload"}
    assert train(cache, straight, *base, "--iterations", "3", **no_offload) == 0
    assert train(cache, resumed, *base, "--iterations", "2", **settings) == 0
    assert train(cache, resumed, *base, "--iterations", "3", "--resume", str(resumed), **settings) == 0
    metrics = computed(straight)
    assert [m["iteration"] for m in metrics] == [1, 2, 3]
    assert computed(resumed) == metrics
    assert all(m["tokens"] > 0 and m["optimizer_steps"] == 2 for m in metrics)
    assert (
        "warm_start_accuracy" in metrics[0]
        and metrics[1]["heldout_accuracy"]
        == metrics[1]["validation_accuracy"]  # eval.sets defaults to validation
        and "test_accuracy" not in metrics[1]
    )
    assert any(
        m["mean_reward"] > 0 and m["policy_loss"] != 0 for m in metrics
    )  # teeth: training changes things
    assert metrics[1]["response_lengths"] != metrics[2]["response_lengths"]
    state = load_latest(resumed / "checkpoints").state
    assert state["workload"] == "grpo_hf" and "model" in state["workers"]["actor"][0]
    return resumed


def test_collocated_resume_continues_exactly_while_context_switching(
    grpo_cache: Path, tmp_path: Path
) -> None:
    """The 2 + 1 run context-switches the rollout and the actor (their state leaves and re-enters the device every
    iteration, and the checkpoint is taken while it is offloaded) and still computes exactly what the straight run
    without offload does."""
    resumed = resumed_equals_straight(
        grpo_cache, tmp_path, "collocated", 1, **{"execution.offload": "[rollout, actor]"}
    )
    kinds = {e.get("cat") for e in json.loads((resumed / "timeline.json").read_text())["traceEvents"]}
    assert {"onload", "offload"} <= kinds


def test_hybrid_resume_continues_exactly_skipping_zero_advantages(
    grpo_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rollout and reward on one device, inference and actor on the other: groups stream across, weights sync
    back every iteration, and a resumed run still computes what the straight one does."""
    settings = {"grpo.skip_zero_advantages": True, "grpo.kl_coef": 0.0}
    resumed = resumed_equals_straight(grpo_cache, tmp_path, "hybrid", 2, **settings)
    printed = capsys.readouterr().out
    assert "hybrid:" in printed and "generated tokens/s" in printed and "held-out accuracy" in printed
    names = {e.get("name", "") for e in json.loads((resumed / "timeline.json").read_text())["traceEvents"]}
    assert sum("generate" in n for n in names) >= 2 and any("sync_weights" in n for n in names)


def test_the_test_set_is_evaluated_and_reported_first_when_asked(grpo_cache: Path, tmp_path: Path) -> None:
    """``eval.sets=[test, validation]``: both sets at the warm start and at each evaluation, the test set's as the
    run's ``heldout_accuracy``; the warm start's accuracies are the cached ones (both sets measured once)."""
    out = tmp_path / "run"
    args = ["--mode", "collocated", "--devices", "1", "--iterations", "2"]
    assert train(grpo_cache, out, *args, **{"eval.sets": "[test, validation]"}) == 0
    first, last = computed(out)
    warm = warm_start_checkpoint(tiny_config(grpo_cache), torch.device("cpu")).accuracies
    assert warm is not None
    assert first["warm_start_test_accuracy"] == first["warm_start_accuracy"] == warm["test"]
    assert first["warm_start_validation_accuracy"] == warm["validation"]
    assert last["heldout_accuracy"] == last["test_accuracy"] and 0 <= last["validation_accuracy"] <= 1


def test_the_profile_records_every_response_length(grpo_cache: Path, tmp_path: Path) -> None:
    """The profiled trace keeps every response's length (what ``rlinf simulate --stochastic`` draws the long tail
    from, and how the cost model splits a streamed generation into its micro-batches: as the groups really
    complete, not evenly), and the lengths survive saving."""
    settings = ProfileSettings(budget_s=1.0, iterations_per_plan=1, warmup_iterations=0)  # one plan, once
    config = tiny_config(grpo_cache)
    result = profile(get_job("grpo_hf"), config, 1, settings=settings, num_cores=1, progress=False)
    lengths = result.trace.response_lengths
    assert result.iterations == 1 and len(lengths) == PROMPTS * GROUP_SIZE
    assert all(1 <= n <= config.grpo.max_new_tokens and n == int(n) for n in lengths)  # EOS included
    result.trace.save(tmp_path / "trace.json")
    assert load_trace(tmp_path / "trace.json").response_lengths == lengths
    assert fit(result.trace).response_lengths == lengths
    group_max = np.sort(
        np.asarray(lengths).reshape(-1, GROUP_SIZE).max(axis=1)
    )  # sorted: not generation order
    fractions = fit(result.trace).generation_fractions(2)
    assert fractions[-1] == pytest.approx(1.0) and fractions[0] > 0.5
    assert fractions[0] >= group_max[0] / group_max[-1] - 1e-9  # the first half ends after its slowest group


def test_bad_settings_fail_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="bogus"):
        load_job_config(CONFIG, ["grpo.bogus=1"])
    with pytest.raises(ConfigError, match="execution.mode"):
        load_job_config(CONFIG, ["execution.mode=sideways"])
    code = main(
        ["train", CONFIG, "--iterations", "1", "--set", "execution.granularity=32", "--out", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "a micro-batch of 1 groups leaves some of them without a whole group" in err


def test_the_probe_plans_run_and_the_shipped_profile_is_the_examples() -> None:
    job, config = load_job_config(CONFIG)
    probes = job.probes(2, config)
    assert len(probes) >= 4 and {plan.mode for plan, _ in probes} == {"collocated", "hybrid"}
    for plan, logical in probes:
        assert logical == 2
        job.check_plan(plan, config)
    trace = load_trace("traces/grpo_arith_cpu2.json")
    assert trace.workflow == job.workflow(config) and trace.provenance["kind"] == "profiled"
    assert len(trace.response_lengths) > 0 and max(trace.response_lengths) <= config.grpo.max_new_tokens
