"""GRPO on a Hugging Face causal LM through ``rlinf train``: collocated and hybrid runs, and ``--resume`` continuing
exactly (2 + 2 iterations compute what 4 straight do)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hf_grpo_tiny import CONFIG, tiny_config, tiny_sets

from rlinf.app.checkpoint import load_latest
from rlinf.app.jobs import get_job
from rlinf.app.profiling import ProfileSettings, profile
from rlinf.cli import main
from rlinf.core.costs import fit
from rlinf.core.trace import load_trace

pytest.importorskip("transformers", reason='needs the hf extra: pip install -e ".[hf]"')


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "hf_grpo_cache"


def computed(run_dir: Path) -> list[dict]:
    """Per iteration, every metric that does not measure time (durations and rates end in ``_s``)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.endswith("_s")} for line in lines]


def train(cache: Path, out: Path, *args: str, skip: bool = False) -> int:
    sets = tiny_sets(cache, **{"grpo.skip_zero_advantages": skip})
    return main(["train", CONFIG, *args, "--out", str(out), *sets, "--no-progress"])


@pytest.mark.parametrize(
    ("skip", "offload"),
    [(False, False), (True, False), (False, True)],
    ids=["every-response", "skip-zero-advantages", "offload"],
)
def test_collocated_runs_and_resume_continues_exactly(
    cache: Path, tmp_path: Path, skip: bool, offload: bool
) -> None:
    """2 + 2 iterations compute what 4 straight do; with ``offload`` the 2 + 2 run context-switches the rollout
    and the actor (their state leaves and re-enters the device every iteration, and the checkpoint is taken while
    it is offloaded) and still computes exactly what the straight run without offload does."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    base = ["--mode", "collocated", "--devices", "1"]
    sets = tiny_sets(cache, **{"grpo.skip_zero_advantages": skip})
    switched = ["--set", "execution.offload=[rollout, actor]"] if offload else []
    assert train(cache, straight, *base, "--iterations", "4", skip=skip) == 0
    assert train(cache, resumed, *base, *switched, "--iterations", "2", skip=skip) == 0
    assert main(["train", CONFIG, *base, *switched, "--iterations", "4", "--resume", str(resumed), *sets, "--no-progress"]) == 0  # fmt: skip
    if offload:
        kinds = {e.get("cat") for e in json.loads((resumed / "timeline.json").read_text())["traceEvents"]}
        assert {"onload", "offload"} <= kinds
    metrics = computed(straight)
    assert [m["iteration"] for m in metrics] == [1, 2, 3, 4]
    assert computed(resumed) == metrics
    assert all(m["tokens"] > 0 and m["optimizer_steps"] == 2 for m in metrics)
    assert (
        "warm_start_accuracy" in metrics[0]
        and "heldout_accuracy" in metrics[1]
        and "heldout_accuracy" in metrics[3]
    )
    assert any(
        m["mean_reward"] > 0 and m["policy_loss"] != 0 for m in metrics
    )  # teeth: training changes things
    assert metrics[2]["response_lengths"] != metrics[3]["response_lengths"]
    state = load_latest(resumed / "checkpoints").state
    assert state["workload"] == "grpo_hf" and "model" in state["workers"]["actor"][0]


def test_hybrid_streams_and_syncs_weights(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "hybrid"
    assert train(cache, out, "--mode", "hybrid", "--devices", "2", "--iterations", "2") == 0
    assert "hybrid:" in capsys.readouterr().out
    names = {e.get("name", "") for e in json.loads((out / "timeline.json").read_text())["traceEvents"]}
    assert sum("generate" in n for n in names) >= 2 and any("sync_weights" in n for n in names)
    assert [m["iteration"] for m in computed(out)] == [1, 2]


def test_the_profile_records_every_response_length(cache: Path, tmp_path: Path) -> None:
    """The profiled trace's response-length distribution holds every response of the measured iterations (what
    ``rlinf simulate --stochastic`` draws the long tail from), and survives saving."""
    settings = ProfileSettings(budget_s=1.0, iterations_per_plan=1, warmup_iterations=0)  # one plan, once
    result = profile(
        get_job("grpo_hf"), tiny_config(cache), 1, settings=settings, num_cores=1, progress=False
    )
    lengths = result.trace.response_lengths
    assert result.iterations == 1 and len(lengths) == 4 * 4  # 4 prompts x 4 responses
    assert all(1 <= n <= 48 and n == int(n) for n in lengths)  # tokens, EOS included, up to max_new_tokens
    result.trace.save(tmp_path / "trace.json")
    assert load_trace(tmp_path / "trace.json").response_lengths == lengths
    assert fit(result.trace).response_lengths == lengths
