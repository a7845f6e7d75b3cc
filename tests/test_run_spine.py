"""A run's spine: the request merges the flags with the config once (the values a run uses are the request's),
``choose_plan`` returns one record for every way of choosing, and a checkpoint is a typed record whose state keeps
the layout of earlier versions."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlinf.app.checkpoint import save_checkpoint
from rlinf.app.plan_choice import PlanChoice, choose_plan
from rlinf.app.request import RunFlags, build_request
from rlinf.app.run_checkpoint import DriverRng, KeptIteration, RunCheckpoint, load_run_checkpoint
from rlinf.app.runner import Start, restart_segment
from rlinf.core.errors import ConfigError

HOPPER = Path("examples/hopper_ppo.yaml")
SMALL = ("num_steps=8", "num_epochs=1")


def flags(tmp_path: Path, **given: object) -> RunFlags:
    return RunFlags(config=HOPPER, overrides=SMALL, num_devices=1, out=tmp_path / "run", **given)  # type: ignore[arg-type]


def test_the_flags_are_merged_into_the_settings_the_run_uses(tmp_path: Path) -> None:
    request = build_request(flags(tmp_path, mode="collocated", iterations=3, seed=7, max_staleness=1))
    settings = request.job.settings
    assert (settings.iterations, settings.seed, settings.max_staleness) == (3, 7, 1)
    assert request.settings is settings and request.mode == "collocated" and request.plan is None
    choice = choose_plan(request)
    assert choice.plan.max_staleness == 1 and choice.provenance == "fixed collocated mode"
    assert choice.prediction is None and len(choice.devices) == choice.num_logical == 1


def test_a_plan_file_sets_the_mode_and_the_bound_of_the_request(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("placement: {env: 0, rollout: 0, actor: 0}\nmax_staleness: 1\n")
    request = build_request(flags(tmp_path, plan=plan))
    assert request.plan is not None and request.mode == request.plan.mode == "collocated"
    assert request.settings.max_staleness == 1 and request.plan_source == f"--plan {plan}"
    choice = choose_plan(request)
    assert choice.plan == request.plan and choice.provenance == f"--plan {plan}"
    with pytest.raises(ConfigError, match="--mode='disaggregated': conflicts with --plan"):
        build_request(flags(tmp_path, plan=plan, mode="disaggregated"))


def test_bad_flags_are_refused_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--iterations=0: must be >= 1"):
        build_request(flags(tmp_path, iterations=0))
    with pytest.raises(ConfigError, match="--max-restarts=-1: must be >= 0"):
        build_request(flags(tmp_path, max_restarts=-1))
    with pytest.raises(ConfigError, match="--nodes=2: only the ray backend spans nodes"):
        build_request(RunFlags(config=HOPPER, num_devices=2, nodes=2, out=tmp_path / "run"))


def checkpoint(iteration: int = 2) -> RunCheckpoint:
    return RunCheckpoint(
        iteration=iteration,
        workload="embodied_ppo",
        config={"seed": 0, "execution": {"iterations": 4}},
        plan={"placement": {"env": "0"}},
        workers={"actor": [{"w": torch.arange(3.0)}]},
        driver_rng=DriverRng.capture(),
        measured=(
            KeptIteration(
                iteration=2, counted=True, start_s=(0.0, 1.0), end_s=(1.0, 2.5), peak_memory_bytes=(7,)
            ),
        ),
        buffered=[[0, 1, 3, 0, {"x": torch.ones(2)}]],
    )


def test_a_run_checkpoint_keeps_the_state_layout_of_earlier_versions(tmp_path: Path) -> None:
    state = checkpoint().to_state()
    assert list(state) == [
        "iteration", "workload", "config", "plan", "workers", "driver_rng", "measured", "buffered",
    ]  # fmt: skip
    assert set(state["driver_rng"]) == {"python", "numpy", "torch"}
    assert state["measured"]["iteration"] == [2] and state["measured"]["start_s"].dtype == torch.float64
    save_checkpoint(tmp_path / "checkpoints", 2, state)
    loaded = load_run_checkpoint(tmp_path / "checkpoints")
    assert loaded.iteration == 2 and loaded.plan == {"placement": {"env": "0"}}
    assert loaded.measured == checkpoint().measured
    assert torch.equal(loaded.workers["actor"][0]["w"], torch.arange(3.0))
    assert loaded.buffered[0][:4] == [0, 1, 3, 0]


def test_a_state_that_is_not_a_run_checkpoint_is_refused_in_one_line(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "checkpoints", 1, {"iteration": 1, "workers": {}})
    with pytest.raises(ConfigError, match="is not a training run's checkpoint"):
        load_run_checkpoint(tmp_path / "checkpoints")
    with pytest.raises(ConfigError, match="the checkpoint has no worker states"):
        RunCheckpoint.from_state({"iteration": 1}, "x")


def test_resuming_refuses_another_plan_but_not_another_bound_in_the_config() -> None:
    saved = checkpoint()
    now = {"seed": 0, "execution": {"iterations": 9, "max_staleness": 1}}
    saved.check_resumable(workload="embodied_ppo", config=now, plan={"placement": {"env": "0"}}, iterations=9)
    with pytest.raises(ConfigError, match="--resume plan"):
        saved.check_resumable(
            workload="embodied_ppo", config=now, plan={"placement": {"env": "1"}}, iterations=9
        )
    with pytest.raises(ConfigError, match=r"--resume config=\['seed'\]"):
        saved.check_resumable(workload="embodied_ppo", config={"seed": 1}, plan=saved.plan, iterations=9)


def test_a_restart_starts_a_segment_from_the_newest_checkpoint_or_fresh(tmp_path: Path) -> None:
    request = build_request(flags(tmp_path, mode="collocated"))
    choice = PlanChoice.given(choose_plan(request).plan, 1)
    fresh = restart_segment(request, choice)
    assert fresh.start is Start.FRESH and fresh.first_iteration == 1 and fresh.state is None
    save_checkpoint(request.out / "checkpoints", 2, checkpoint().to_state())
    resumed = restart_segment(request, choice)
    assert resumed.start is Start.CHECKPOINT and resumed.first_iteration == 3 and resumed.plan == choice.plan
