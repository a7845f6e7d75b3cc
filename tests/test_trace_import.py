"""``rlinf trace import``: veRL and RLinf per-step timing logs (JSONL, long and wide CSV) as traces that
``rlinf simulate`` replays and ``rlinf trace calibrate`` fits; every malformed input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlinf.cli import main
from rlinf.costs import fit
from rlinf.step_log import read_step_log
from rlinf.trace import load_trace
from rlinf.trace_import import SYSTEMS

# A 1.5B GRPO run on one 8-GPU node, 64 prompts x 8 responses per step.
RUN = ["--model", "1.5b", "--device", "H100", "--num-devices", "8", "--prompts", "64", "--group-size", "8"]
VERL_STEP = {
    "timing_s/gen": 60.0,
    "timing_s/reward": 2.0,
    "timing_s/old_log_prob": 8.0,
    "timing_s/ref": 7.0,
    "timing_s/adv": 0.3,
    "timing_s/update_actor": 30.0,
    "timing_s/update_weights": 1.5,
    "timing_s/step": 110.0,
    "response_length/mean": 1200.0,
    "prompt_length/mean": 300.0,
    "actor/entropy": 0.5,
}


def verl_jsonl(num_steps: int = 4) -> str:
    """What veRL's file logger writes: ``{"step": N, "data": {...}}`` per line; generation slows down by 1 s a step."""
    lines = []
    for step in range(1, num_steps + 1):
        data = {**VERL_STEP, "timing_s/gen": 60.0 + step, "training/global_step": step}
        lines.append(json.dumps({"step": step, "data": data}))
    return "\n".join(lines) + "\n"


def rlinf_long_csv() -> str:
    """RLinf's TensorBoard scalars exported one value per row; timings are logged at steps 0, 2, 4 (two
    mini-batches per step) and training metrics at the steps in between."""
    rows = ["step,tag,value"]
    for step in (0, 2, 4):
        rows += [
            f"{step},time/rollout,50.0",
            f"{step},time/reward,1.0",
            f"{step},time/actor/inference,9.0",
            f"{step},time/actor/training,25.0",
            f"{step},time/sync_weights,2.0",
            f"{step},time/step,90.0",
            f"{step},time/prepare_data,0.1",
            f"{step},rollout/prompt_length,200",
            f"{step},rollout/response_length,900",
        ]
        rows.append(f"{step + 1},actor/training/loss,0.1")
    return "\n".join(rows) + "\n"


def run_import(tmp_path: Path, name: str, text: str, *args: str) -> tuple[int, Path]:
    log = tmp_path / name
    log.write_text(text)
    out = tmp_path / "imported.json"
    return main(["trace", "import", str(log), *args, "--date", "2026-01-01", "--out", str(out)]), out


def samples_of(path: Path, component: str, op: str) -> list:
    return [s for s in load_trace(path).samples if s.component == component and s.op == op]


# ------------------------------------------------------------------------------------------------- happy paths
def test_verl_jsonl_becomes_one_sample_per_phase_per_step(tmp_path, capsys):
    code, out = run_import(tmp_path, "run.jsonl", verl_jsonl(), "--format", "verl", *RUN)
    assert code == 0, capsys.readouterr().err
    trace = load_trace(out)
    assert [s.seconds for s in samples_of(out, "rollout", "generate")] == [61.0, 62.0, 63.0, 64.0]
    assert {s.seconds for s in samples_of(out, "inference", "infer")} == {15.0}  # old_log_prob + ref
    assert {s.seconds for s in samples_of(out, "actor", "train")} == {30.0}
    (sync,) = set(samples_of(out, "actor", "sync_weights"))
    assert sync.num_bytes == int(2 * 1.78e9) and sync.seconds == 1.5
    generate = samples_of(out, "rollout", "generate")[0]
    assert generate.samples == 512 and generate.devices == 8 and generate.tokens == 512 * 1500
    provenance = trace.provenance
    assert provenance["kind"] == "profiled"
    imported = provenance["imported_from"]
    assert imported["steps"] == {"count": 4, "first": 1, "last": 4}
    assert imported["metrics"]["inference.infer"] == ["timing_s/old_log_prob", "timing_s/ref"]
    assert imported["not_imported_median_s"] == {"timing_s/adv": 0.3}
    assert imported["step_seconds"]["median"] == 110.0
    # The logged mean lengths set the prompt length and the response-length distribution.
    assert provenance["workload"]["prompt_tokens"] == 300
    assert abs(trace.workflow.tokens_per_sample - 1200) < 60
    printed = capsys.readouterr().out
    assert "timing_s/old_log_prob + timing_s/ref" in printed and "not imported: timing_s/adv" in printed


def test_rlinf_long_csv_and_skipped_warm_up_steps(tmp_path, capsys):
    code, out = run_import(
        tmp_path, "scalars.csv", rlinf_long_csv(), "--format", "rlinf", *RUN, "--skip-steps", "1"
    )
    assert code == 0, capsys.readouterr().err
    imported = load_trace(out).provenance["imported_from"]
    assert imported["steps"] == {"count": 2, "first": 2, "last": 4} and imported["skipped_steps"] == 1
    assert imported["not_imported_median_s"] == {"time/prepare_data": 0.1}
    assert [s.seconds for s in samples_of(out, "actor", "train")] == [25.0, 25.0]
    assert samples_of(out, "rollout", "generate")[0].tokens == 512 * 1100


def test_wide_csv_from_a_weights_and_biases_panel(tmp_path):
    header = (
        "Step,run-7 - timing_s/gen,run-7 - timing_s/gen__MIN,run-7 - timing_s/gen__MAX,timing_s/update_actor"
    )
    rows = [header, "1,40.0,39,41,20.0", "2,,,,21.0", "3,42.0,41,43,"]
    code, out = run_import(tmp_path, "export.csv", "\n".join(rows) + "\n", "--format", "verl", *RUN)
    assert code == 0
    assert [s.seconds for s in samples_of(out, "rollout", "generate")] == [40.0, 42.0]
    assert [s.seconds for s in samples_of(out, "actor", "train")] == [20.0, 21.0]


def test_flat_jsonl_with_wandb_step_key():
    text = (
        '{"_step": 7, "timing_s/gen": 3.5, "note": "text is ignored"}\n\n{"_step": 8, "timing_s/gen": null}\n'
    )
    log = read_step_log(text, source="x.jsonl", file_format="jsonl", keep=SYSTEMS["verl"].keep)
    assert log.values == {7: {"timing_s/gen": 3.5}}


def test_imported_run_replays_in_simulate_and_calibrates(tmp_path, capsys):
    code, out = run_import(tmp_path, "run.jsonl", verl_jsonl(), "--format", "verl", *RUN)
    assert code == 0
    plan = tmp_path / "collocated.yaml"
    plan.write_text(
        "placement: {rollout: all, reward: all, inference: all, actor: all}\n"
        "granularity: {rollout->reward: 1, reward->inference: 1, inference->actor: 1}\n"
        "offload: [rollout, inference, actor]\n"
    )
    capsys.readouterr()
    assert main(["simulate", "--trace", str(out), "--plan", str(plan), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    phases = 62.5 + 2.0 + 15.0 + 30.0  # median generate + reward + infer + train
    assert phases <= report["iteration_s"] < phases + 10.0
    # The import records its workload, so calibration needs no model flags.
    calibrated = tmp_path / "calibrated.json"
    assert main(["trace", "calibrate", "--measured", str(out), "--out", str(calibrated)]) == 0
    trace = load_trace(calibrated)
    costs = fit(trace)
    assert costs.compute_seconds("actor", "train", 8, 512) == pytest.approx(30.0, rel=0.05)
    assert costs.compute_seconds("actor", "train", 64, 512) < 10.0  # what-if: eight times the devices


# -------------------------------------------------------------------------------------------- malformed input
BAD = [
    ("bad.jsonl", '{"step": 1, "data": {"timing_s/gen": 1.0}}\n{"step": 2, "data": \n', "bad.jsonl:2="),
    ("list.jsonl", "[1, 2]\n", "list.jsonl:1="),
    ("nostep.jsonl", '{"data": {"timing_s/gen": 1.0}}\n', "nostep.jsonl:1="),
    ("text.jsonl", '{"step": 1, "data": {"timing_s/gen": "slow"}}\n', "text.jsonl:1 timing_s/gen="),
    ("negative.jsonl", '{"step": 1, "data": {"timing_s/gen": -4}}\n', "negative.jsonl step 1 timing_s/gen="),
    ("halfstep.jsonl", '{"step": 1.5, "data": {"timing_s/gen": 4}}\n', "halfstep.jsonl:1 step="),
    ("none.jsonl", '{"step": 1, "data": {"loss": 0.3}}\n', "none.jsonl="),
    ("prompt.jsonl", '{"step": 1, "data": {"prompt_length/mean": 30}}\n', "prompt.jsonl="),
    ("nosteps.csv", "metric,value\ntiming_s/gen,1.0\n", "nosteps.csv:1="),
    ("cell.csv", "step,timing_s/gen\n1,abc\n", "cell.csv:2 timing_s/gen="),
    ("ragged.csv", "step,timing_s/gen\n1,2.0,3.0\n", "ragged.csv:2="),
    ("twice.csv", "step,metric,value\n1,timing_s/gen,2.0\n1,timing_s/gen,3.0\n", "twice.csv:3 timing_s/gen="),
    ("empty.csv", "", "empty.csv="),
    ("critic.jsonl", '{"step": 1, "data": {"timing_s/update_critic": 4}}\n', "--algorithm="),
    ("run.txt", "step,timing_s/gen\n1,2\n", "--input-format="),
]


@pytest.mark.parametrize(("name", "text", "field"), BAD, ids=[b[0] for b in BAD])
def test_malformed_log_is_one_line_and_exit_2(tmp_path, capsys, name, text, field):
    code, out = run_import(tmp_path, name, text, "--format", "verl", *RUN)
    error = capsys.readouterr().err
    assert code == 2, error
    assert error.startswith("rlinf: error: ") and field in error, error
    assert len(error.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--format", "openrlhf", *RUN], "--format="),
        (["--format", "verl", *RUN, "--component-devices", "rollout=9"], "--component-devices.rollout="),
        (
            ["--format", "verl", *RUN, "--actor-mp", "2", "--component-devices", "actor=3"],
            "--component-devices.actor=",
        ),
        (["--format", "verl", *RUN, "--component-devices", "learner=4"], "--component-devices="),
        (["--format", "verl", *RUN, "--skip-steps", "4"], "--skip-steps="),
        (["--format", "verl", "--device", "H100"], "--model="),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(tmp_path, capsys, args, field):
    code, out = run_import(tmp_path, "run.jsonl", verl_jsonl(), *args)
    error = capsys.readouterr().err
    assert code == 2 and field in error and len(error.strip().splitlines()) == 1, error
    assert not out.exists()


def test_missing_file_is_one_line(tmp_path, capsys):
    assert (
        main(["trace", "import", str(tmp_path / "nope.jsonl"), "--format", "verl", *RUN, "--out", "x"]) == 2
    )
    assert "file does not exist" in capsys.readouterr().err
