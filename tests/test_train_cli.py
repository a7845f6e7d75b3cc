"""``rlinf train``: every mode runs end to end on this machine and writes every artifact; bad input fails clearly."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rlinf.app.checkpoint import load_latest
from rlinf.cli import main
from rlinf.core.trace import load_trace

CONFIG = "examples/hopper_ppo.yaml"
SMALL = ["--set", "num_steps=8", "--set", "num_epochs=2", "--no-progress"]
SMALL += ["--set", "execution.checkpoint_every=1"]


@pytest.mark.parametrize("mode", ["collocated", "disaggregated", "hybrid"])
def test_train_writes_every_artifact(mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / mode
    assert (
        main(
            [
                "train",
                CONFIG,
                "--mode",
                mode,
                "--iterations",
                "2",
                "--devices",
                "2",
                "--out",
                str(out),
                *SMALL,
            ]
        )
        == 0
    )
    printed = capsys.readouterr()
    assert f"{mode}:" in printed.out and "env steps/s" in printed.out
    if mode == "disaggregated":
        assert "oversubscribed" in printed.err
    for name in ("plan.yaml", "metrics.jsonl", "trace.json", "timeline.json", "gantt.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert f"mode: {mode}" in (out / "plan.yaml").read_text()
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [1, 2]
    assert metrics[-1]["env_steps"] == 2 * 8 * 8 and metrics[-1]["env_steps_per_s"] > 0
    assert "episodic_return" in metrics[0] and "policy_loss" in metrics[0]
    assert any(p.name.startswith("events.out.tfevents") for p in (out / "tensorboard").iterdir())
    trace = load_trace(out / "trace.json")
    assert trace.provenance["kind"] == "profiled"
    assert {s.op for s in trace.samples} >= {"act", "env_step", "train", "sync_weights"}
    chrome = json.loads((out / "timeline.json").read_text())
    assert chrome["traceEvents"]
    checkpoints = sorted(p.name for p in (out / "checkpoints").glob("iter_*"))
    assert checkpoints == ["iter_000001.safetensors", "iter_000002.safetensors"]
    state = load_latest(out / "checkpoints").state
    assert state["iteration"] == 2 and "model" in state["workers"]["actor"][0]


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["train", CONFIG, "--no-progress", *args])
    return code, capsys.readouterr().err


def test_unknown_config_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, err = run_cli(["--set", "num_env=4", "--out", str(tmp_path)], capsys)
    assert code == 2 and "num_env" in err and "unknown key" in err and "num_envs" in err


def test_unknown_key_in_the_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(Path(CONFIG).read_text() + "learning_rat: 0.1\n")
    code = main(["train", str(config), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "bad.yaml.learning_rat" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--devices", "64"], "--devices=64: this machine lets rlinf use"),
        (["--devices", "0"], "--devices=0: must be >= 1"),
        (["--mode", "hybrid", "--devices", "1"], "hybrid needs at least 2 devices"),
        (
            ["--set", "num_envs=6", "--mode=collocated", "--devices=2", "--set", "execution.granularity=6"],
            "actor replicas=2: a micro-batch of 1 groups from env leaves some of them without a whole group",
        ),
        (
            ["--set", "num_envs=1", "--mode=collocated", "--devices=2"],
            "fix: use at most 1 env replicas, a larger batch (at least 2 groups)",  # no "at most 0 micro-batches"
        ),
        (["--set", "execution.granularity=3"], "execution.granularity=3: does not divide the 8 environments"),
        (["--devices", "2", "--nodes", "2"], "--nodes=2: only the ray backend spans nodes"),
        (
            ["--devices", "2", "--nodes", "3", "--backend", "ray"],
            "--nodes=3: must be between 1 and the 2 devices",
        ),
        (["--devices", "64", "--nodes", "2", "--backend", "ray"], "and 2 nodes are assumed to have as many"),
    ],
)
def test_impossible_device_counts(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err = run_cli([*args, "--out", str(tmp_path)], capsys)
    assert code == 2 and message in err, err


def test_env_id_that_does_not_exist(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, err = run_cli(["--set", "env_id=Hoper-v5", "--out", str(tmp_path)], capsys)
    assert code == 2 and "env_id='Hoper-v5': is not a registered gymnasium environment" in err
    code, err = run_cli(["--set", "env_id=Hopper-v99", "--out", str(tmp_path)], capsys)
    assert code == 2 and "Hopper-v5" in err  # suggests the registered versions


def test_more_minibatches_than_samples_are_refused_before_any_worker_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Found by benchmarks/shape_sweep.py: 8 environments x 1 step in 32 minibatches was refused only when the
    actor's workers were set up."""
    sets = ["--set", "num_envs=8", "--set", "num_steps=1", "--set", "num_minibatches=32"]
    code, err = run_cli([*sets, "--out", str(tmp_path)], capsys)
    assert code == 2 and err.strip() == (
        "rlinf: error: num_minibatches=32: exceeds the 8 samples of an iteration (num_envs x num_steps); "
        "fix: use at most 8 minibatches, or more environments or steps"
    ), err
    assert not any(tmp_path.iterdir())  # nothing ran
    # enough samples in all, not in each of 2 actor replicas' shares: refused for the plan, before its workers start
    sets = ["--set", "num_envs=16", "--set", "num_steps=3", "--set", "num_minibatches=32"]
    code, err = run_cli(
        [*sets, "--mode", "collocated", "--devices", "2", "--out", str(tmp_path / "run")], capsys
    )
    assert code == 2 and err.strip().splitlines()[-1] == (
        "rlinf: error: num_minibatches=32: exceeds the 24 samples of each of the 2 actor replicas (plan collocated: "
        "actor@0-1 env@0-1 rollout@0-1 | loop=1); fix: use fewer minibatches or fewer actor devices"
    ), err
    assert not (tmp_path / "run").exists()


def test_plan_that_conflicts_with_mode(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("placement: {env: 0, rollout: 1, actor: 0-1}\n")
    code, err = run_cli(["--plan", str(plan), "--mode", "collocated", "--out", str(tmp_path / "run")], capsys)
    assert code == 2 and "conflicts with --plan, whose placement is hybrid" in err


def test_plan_granularity_reaches_the_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A plan's loop stages differ from the config's: each worker's context hands them over."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("placement: {env: 0, rollout: 1, actor: 0-1}\ngranularity: {loop: 2}\n")
    out = tmp_path / "run"
    code = main(
        [
            "train",
            CONFIG,
            "--plan",
            str(plan),
            "--iterations",
            "1",
            "--devices",
            "2",
            "--out",
            str(out),
            *SMALL,
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert "loop=2" in capsys.readouterr().out


def test_ray_backend_without_ray_installed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    code, err = run_cli(["--backend", "ray", "--mode", "collocated", "--out", str(tmp_path)], capsys)
    assert (
        code == 2 and "--backend='ray': Ray is not installed" in err and 'pip install "ray[default]' in err
    ), err
