"""Re-planning inside ``rlinf train``: the tracking prediction rides along in auto mode's metrics, and a switch at
an iteration boundary loses nothing (same plan: bit-exact learning metrics, also under a staleness bound and for
GRPO; another plan with the same replicas: the workers' state carried exactly, by checksum)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import attrs
import pytest
from factories import HOPPER_CONFIG, HOPPER_SMALL

from rlinf.app.plan_choice import PlanChoice, choose_plan
from rlinf.app.replan import SwitchAt, switchable
from rlinf.app.request import RunFlags, build_request
from rlinf.app.runner import run
from rlinf.cli import main
from rlinf.core.plan import plan_from_yaml
from rlinf.core.trace import load_trace

ITERATIONS = 5
SMALL_SETS = [arg for item in HOPPER_SMALL for arg in ("--set", item)]


def computed(run_dir: Path) -> list[dict[str, Any]]:
    """Per step, every metric that does not measure time (those end in ``_s``)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.endswith("_s")} for line in lines]


def switches(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "switches.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def train(
    out: Path,
    *,
    mode: str = "hybrid",
    k: int = 0,
    switch_to: Any = None,
    config: str = HOPPER_CONFIG,
    **flags: Any,
) -> tuple[PlanChoice, SwitchAt | None]:
    """A small run; ``switch_to(choice)`` gives the choice to switch to after iteration 3 (none: no switch), on new
    workers (their state comes entirely from the live snapshot)."""
    flags.setdefault("overrides", tuple(HOPPER_SMALL))
    request = build_request(
        RunFlags(
            config=Path(config),
            mode=mode,
            iterations=ITERATIONS,
            num_devices=flags.pop("num_devices", 2),
            max_staleness=k,
            out=out,
            progress=False,
            **flags,
        )
    )
    choice = choose_plan(request)
    rule = None if switch_to is None else SwitchAt(at={3: switch_to(choice)}, fresh_workers=True)
    run(request, choice, switches=rule)
    return choice, rule


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("replan") / "plain"
    train(out)
    return out


def test_auto_mode_metrics_carry_the_tracking_prediction(plain: Path, tmp_path: Path) -> None:
    """Planned from the trace of a run on this machine (no drift but the run's own noise), the tracking prediction
    starts at the original and follows the measured iterations: it ends nearer their median than the original."""
    out = tmp_path / "auto"
    code = main(
        ["train", HOPPER_CONFIG, "--mode", "auto", "--trace", str(plain / "trace.json"), "--devices", "2"]
        + ["--iterations", "10", "--no-progress", "--out", str(out), *SMALL_SETS]
    )
    assert code == 0
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all({"predicted_iteration_s", "tracking_predicted_iteration_s"} <= set(m) for m in metrics)
    original = metrics[0]["predicted_iteration_s"]
    assert metrics[0]["tracking_predicted_iteration_s"] == original  # a warm-up iteration is not taken
    measured = statistics.median(m["iteration_s"] for m in metrics[1:])
    tracking = metrics[-1]["tracking_predicted_iteration_s"]
    assert abs(tracking / measured - 1) <= max(0.25, abs(original / measured - 1))
    assert 0.5 < tracking / original < 2.0  # no drift: it stays near the original


def test_a_switch_to_the_same_plan_is_bit_exact(plain: Path, tmp_path: Path) -> None:
    out = tmp_path / "switched"
    _, rule = train(out, switch_to=lambda choice: choice)
    assert rule is not None and len(rule.seconds) == 1
    assert computed(out) == computed(plain)
    (recorded,) = switches(out)
    assert recorded["iteration"] == 3 and recorded["from"] == recorded["to"]
    assert recorded["state_sha256_carried"] == recorded["state_sha256_restored"]


def test_a_switch_under_a_staleness_bound_loses_no_batch(tmp_path: Path) -> None:
    """Under ``k = 1`` the switch comes after a steady step with a batch in the buffer: the switched run trains
    the same batches in the same steps and phases (fill, steady, drain), each once, at the same lags."""
    train(tmp_path / "plain", k=1)
    train(tmp_path / "switched", k=1, switch_to=lambda choice: choice)
    plain, switched = computed(tmp_path / "plain"), computed(tmp_path / "switched")
    assert [m["phase"] for m in plain] == ["fill", *["steady"] * (ITERATIONS - 1), "drain"]
    trained = [m["trained_iterations"] for m in switched]
    assert trained == [m["trained_iterations"] for m in plain]
    assert sorted(set(trained[1:])) == trained[1:] == list(range(1, ITERATIONS + 1))  # each batch once
    assert max(m.get("policy_lag_max", 0.0) for m in switched) == 1.0  # the bound holds across the switch
    assert switched == plain


def test_a_switch_to_a_plan_with_the_same_replicas_carries_the_state(plain: Path, tmp_path: Path) -> None:
    """The env and the rollout trade devices: each worker's state crosses the switch unchanged (checksums), and the
    run goes on to its last iteration."""

    def swapped(choice: PlanChoice) -> PlanChoice:
        trade = {"env": "rollout", "rollout": "env"}
        devices = {p.component: p.devices for p in choice.plan.placements}
        placements = [
            attrs.evolve(p, devices=devices[trade.get(p.component, p.component)])
            for p in choice.plan.placements
        ]
        plan = attrs.evolve(choice.plan, placements=placements)
        assert plan != choice.plan and switchable(choice.plan, plan)
        return attrs.evolve(choice, plan=plan)

    out = tmp_path / "swapped"
    train(out, switch_to=swapped)
    (recorded,) = switches(out)
    assert recorded["to"]["placement"] != recorded["from"]["placement"]
    assert recorded["state_sha256_carried"] == recorded["state_sha256_restored"]
    assert [m["iteration"] for m in computed(out)] == list(range(1, ITERATIONS + 1))
    assert computed(out)[:3] == computed(plain)[:3]


def test_plans_with_other_replica_counts_are_not_switch_candidates() -> None:
    hybrid = plan_from_yaml("placement: {actor: 0-1, env: 0, rollout: 1}\n", 2)
    assert switchable(hybrid, plan_from_yaml("placement: {actor: 0-1, env: 1, rollout: 0}\n", 2))
    assert not switchable(hybrid, plan_from_yaml("placement: {actor: 0-1, env: 0-1, rollout: 0-1}\n", 2))
    assert not switchable(hybrid, attrs.evolve(hybrid, max_staleness=1))
    assert not switchable(hybrid, attrs.evolve(hybrid, granularity={"loop": 2}))  # the envs split per stage


def test_a_grpo_switch_to_the_same_plan_is_bit_exact(grpo_cache: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason='needs the hf extra: pip install -e ".[hf]"')
    from hf_grpo_tiny import CONFIG, one_thread, tiny_overrides

    sets = tuple(f"{key}={value}" for key, value in tiny_overrides(grpo_cache).items())
    with one_thread():
        train(tmp_path / "plain", mode="collocated", config=CONFIG, overrides=sets, num_devices=1)
        train(
            tmp_path / "switched",
            mode="collocated",
            config=CONFIG,
            overrides=sets,
            num_devices=1,
            switch_to=lambda choice: choice,
        )
    assert computed(tmp_path / "switched") == computed(tmp_path / "plain")
    assert len(switches(tmp_path / "switched")) == 1


def test_a_bad_replan_value_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["train", HOPPER_CONFIG, "--replan", "sometimes", "--out", str(tmp_path / "run"), "--no-progress"]
    )
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--replan" in line and "sometimes" in line and "'off', 'auto'" in line


@pytest.mark.parametrize(
    ("mode", "given", "expected"), [("auto", None, "auto"), ("hybrid", None, "off"), ("auto", "off", "off")]
)
def test_replan_is_auto_by_default_in_auto_mode_only(
    tmp_path: Path, mode: str, given: str | None, expected: str
) -> None:
    request = build_request(
        RunFlags(config=Path(HOPPER_CONFIG), mode=mode, replan=given, out=tmp_path / "run")
    )
    assert request.replan == expected


@pytest.mark.parametrize("replan", ["auto", "off"])
def test_a_run_off_its_band_re_plans_on_the_drifted_costs(plain: Path, tmp_path: Path, replan: str) -> None:
    """Planned from a trace 3x too fast, every iteration lands above the band: after 10 iterations (5 of them
    outside in a row) ``--replan auto`` chooses again on the profile's costs scaled by the measured drift and
    records the decision (on two cores every switch candidate, same replicas, is predicted no faster: it keeps the
    plan); ``--replan off`` does nothing of the kind."""
    trace = load_trace(plain / "trace.json")
    fast = tmp_path / "fast.json"
    attrs.evolve(trace, samples=[attrs.evolve(s, seconds=s.seconds * 0.3) for s in trace.samples]).save(fast)
    out = tmp_path / "run"
    code = main(
        ["train", HOPPER_CONFIG, "--mode", "auto", "--trace", str(fast), "--devices", "2", "--replan", replan]
        + ["--iterations", "12", "--no-progress", "--out", str(out), *SMALL_SETS]
    )
    assert code == 0
    assert len(computed(out)) == 12
    if replan == "off":
        assert not (out / "switches.jsonl").exists()
        return
    (decision,) = switches(out)
    assert decision["iteration"] == 10 and decision["why"].startswith("measured ")
    assert decision["tracking_s"] > 2 * load_prediction(out)  # the tracking saw the drift
    assert decision["to"] is None and decision["decision"].startswith(("kept", "no switch candidate"))


def load_prediction(run_dir: Path) -> float:
    return json.loads((run_dir / "prediction.json").read_text())["predicted_iteration_s"]


@pytest.mark.parametrize(("faster_by", "switches_plan"), [(0.5, True), (1e-6, False)])
def test_the_replanner_switches_when_the_gain_pays_for_the_switch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, faster_by: float, switches_plan: bool
) -> None:
    """Simulated iterations twice the prediction: the re-plan comes after the 10th; a candidate faster by half an
    iteration over the 990 iterations left pays for a switch that costs an iteration (its prediction comes from the
    drifted costs), one faster by a microsecond does not (the plan is kept, the band follows the drift)."""
    from test_auto_mode import synthetic_trace

    import rlinf.app.auto
    from rlinf.app.auto import AutoPlan, Candidate
    from rlinf.app.jobs import load_job_config
    from rlinf.app.replan import Boundary, Replanner, Tracker, predict_from
    from rlinf.app.request import RunRequest

    job, config = load_job_config(HOPPER_CONFIG, HOPPER_SMALL)
    request = RunRequest(job=job, config=config, out=tmp_path, num_devices=2, replan="auto")
    trace = synthetic_trace()
    hybrid = plan_from_yaml("placement: {actor: 0-1, env: 0, rollout: 1}\ngranularity: {loop: 1}\n", 2)
    swapped = plan_from_yaml("placement: {actor: 0-1, env: 1, rollout: 0}\ngranularity: {loop: 1}\n", 2)
    prediction = predict_from(request, hybrid, 2, trace)
    slow = attrs.evolve(trace, samples=[attrs.evolve(s, seconds=2 * s.seconds) for s in trace.samples])
    predicted, measured = prediction.timeline, predict_from(request, hybrid, 2, slow).timeline
    choice = attrs.evolve(PlanChoice.given(hybrid, 2), prediction=prediction)
    tracker, last_step = Tracker(predicted), 1000
    replanner = Replanner(request=request, trace=trace, switch_s=measured.iteration_s)

    def faster(*args: Any, **kwargs: Any) -> AutoPlan:
        target_s = tracker.current_s - faster_by * measured.iteration_s
        best = Candidate(plan=swapped, num_devices=2, predicted_s=target_s, source="test")
        return AutoPlan(chosen=best, candidates=(best,), predicted=measured, search_s=0.0)

    monkeypatch.setattr(rlinf.app.auto, "plan_from_trace", faster)
    decisions = []
    for iteration in range(2, 11):
        assert tracker.observe(measured)
        boundary = Boundary(
            iteration=iteration,
            last_step=last_step,
            segment_first=1,
            measured_s=measured.iteration_s,
            counted=True,
            choice=choice,
            tracker=tracker,
        )
        decisions.append(replanner.after(boundary))
    assert decisions[:-1] == [None] * 8
    if switches_plan:  # the runner records the switch once it is made
        switch = decisions[-1]
        assert not switches(tmp_path)
        assert switch is not None and switch.choice.plan == swapped and switch.why.startswith("measured ")
        assert switch.predicted_gain_s == pytest.approx(0.5 * measured.iteration_s)
        assert (
            switch.choice.prediction is not None
            and switch.choice.prediction.iteration_s > predicted.iteration_s
        )
    else:
        (recorded,) = switches(tmp_path)
        assert recorded["iteration"] == 10 and recorded["why"].startswith("measured ")
        assert decisions[-1] is None and recorded["decision"].startswith("kept")
        assert replanner.scale == pytest.approx(tracker.current_s / predicted.iteration_s)
