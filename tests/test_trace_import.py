"""``rlinf trace import``: veRL and RLinf per-step timing logs (console output, JSONL, long and wide CSV) as traces
that ``rlinf simulate`` replays and ``rlinf trace calibrate`` fits; every malformed input is one line and exit 2.
The real published logs are read in tests/test_trace_import_real.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlinf.analytic.engine_costs import engine_step_cost
from rlinf.analytic.step_log import read_step_log
from rlinf.analytic.trace_import import SYSTEMS
from rlinf.cli import main
from rlinf.core.costs import fit
from rlinf.core.trace import load_trace

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
    assert {s.seconds for s in samples_of(out, "reward", "reward")} == {2.3}  # reward + adv
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
    assert imported["not_imported_median_s"] == {}
    assert imported["step_seconds"]["median"] == 110.0
    assert imported["step_seconds_by_step"] == {"1": 110.0, "2": 110.0, "3": 110.0, "4": 110.0}
    # The logged mean lengths set the prompt length and the response-length distribution.
    assert provenance["workload"]["prompt_tokens"] == 300
    assert abs(trace.workflow.tokens_per_sample - 1200) < 60
    printed = capsys.readouterr().out
    assert "timing_s/old_log_prob + timing_s/ref" in printed and "timing_s/adv + timing_s/reward" in printed
    # The log states no response limit, so the recipe's is used and the output says it is assumed.
    assert provenance["imported_from"]["response_limit"]["exact"] is False
    assert "response limit: 16384 tokens (assumed" in printed


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


def test_imported_run_replays_on_the_plan_it_wrote_without_counting_switches_twice(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    code, out = run_import(
        tmp_path, "run.jsonl", verl_jsonl(), "--format", "verl", *RUN, "--plan-out", str(plan)
    )
    assert code == 0
    capsys.readouterr()
    assert main(["simulate", "--trace", str(out), "--plan", str(plan), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # median generate + reward + infer + train + the logged weight sync: the onloads and offloads of the
    # collocated plan add nothing, since veRL's phases contain them.
    phases = 62.5 + 2.3 + 15.0 + 30.0 + 1.5
    assert report["iteration_s"] == pytest.approx(phases, rel=1e-3)
    assert report["mode"] == "collocated"
    # The import records its workload, so calibration needs no model flags.
    calibrated = tmp_path / "calibrated.json"
    assert main(["trace", "calibrate", "--measured", str(out), "--out", str(calibrated)]) == 0
    trace = load_trace(calibrated)
    costs = fit(trace)
    assert costs.compute_seconds("actor", "train", 8, 512) == pytest.approx(30.0, rel=0.05)
    assert costs.compute_seconds("actor", "train", 64, 512) < 10.0  # what-if: eight times the devices
    # The zero-second switches are not carried into the what-if trace: the cluster's links move those bytes (or,
    # for the rollout whose KV cache is freed on offload, the model's own samples price its weights' move).
    switches = [s for s in trace.samples if s.op in ("onload", "offload")]
    assert switches and all(s.seconds > 0 for s in switches)
    assert {s.component for s in switches} == {"rollout"}


# ------------------------------------------------------------------------------------ console output, old names
def test_console_lines_with_ray_prefix_colour_codes_and_numpy_scalars():
    text = (
        "\x1b[36m(TaskRunner pid=7)\x1b[0m step:0 - val-core/acc:0.5\n"
        "(TaskRunner pid=7) let's think step by step: step:9 is not a metric line\n"
        "\x1b[2m\x1b[36m(TaskRunner pid=7)\x1b[0m step:0 - timing_s/gen:np.float64(41.5) - actor/lr:1e-06\n"
        "step:1 - timing_s/gen:40.25 - timing_s/testing:12.0 - note:text is ignored\n"
    )
    log = read_step_log(text, source="x.log", file_format="console", keep=SYSTEMS["verl"].keep)
    assert log.values == {0: {"timing_s/gen": 41.5}, 1: {"timing_s/gen": 40.25, "timing_s/testing": 12.0}}


def test_a_step_line_ray_split_in_two_is_joined():
    text = (
        "(TaskRunner pid=7) step:4 - timing_s/gen:40.0 - response_length/me\n"
        "(TaskRunner pid=7) an:812.5 - timing_s/step:90.0\n"
        "(TaskRunner pid=7) list(reward_extra_infos_dict.keys())=[]\n"
    )
    log = read_step_log(text, source="x.log", file_format="console", keep=SYSTEMS["verl"].keep)
    assert log.values == {4: {"timing_s/gen": 40.0, "response_length/mean": 812.5, "timing_s/step": 90.0}}


@pytest.mark.parametrize("prefix", ["timing/", "timing(s)/"])
def test_timers_of_older_verl_releases_are_read_as_timing_s(tmp_path, capsys, prefix):
    text = "".join(
        f"step:{step} - {prefix}gen:20.0 - {prefix}ref:5.0 - {prefix}adv:0.5 - {prefix}update_actor:10.0\n"
        for step in (0, 1, 2)
    )
    code, out = run_import(tmp_path, "old.log", text, "--format", "verl", *RUN)
    assert code == 0, capsys.readouterr().err
    imported = load_trace(out).provenance["imported_from"]
    # The reward ran inside the adv timer in those releases: the trace has a reward component to replay.
    assert [s.seconds for s in samples_of(out, "reward", "reward")] == [0.5, 0.5, 0.5]
    assert imported["timer_prefixes_read_as_current"] == {prefix: "timing_s/"}
    # No whole-step timer: the step time is the sum of the step's timers, and the provenance says so.
    assert imported["step_seconds_by_step"] == {"0": 35.5, "1": 35.5, "2": 35.5}
    assert "has no timing_s/step" in imported["step_seconds_source"]
    assert f"timers logged as {prefix}" in capsys.readouterr().out


def test_validation_steps_are_left_out_of_the_step_statistics(tmp_path):
    lines = [
        f"step:{s} - timing_s/gen:50.0 - timing_s/update_actor:30.0 - timing_s/step:81.0" for s in (1, 2, 3)
    ]
    lines.append(
        "step:4 - timing_s/gen:50.0 - timing_s/update_actor:30.0 - timing_s/testing:60.0 - timing_s/step:141.0"
    )
    code, out = run_import(tmp_path, "run.log", "\n".join(lines) + "\n", "--format", "verl", *RUN)
    assert code == 0
    imported = load_trace(out).provenance["imported_from"]
    assert imported["validation_steps"] == [4]
    assert imported["step_seconds"] == {"median": 81.0, "mean": 81.0, "min": 81.0, "max": 81.0, "count": 3.0}
    assert imported["step_seconds_by_step"]["4"] == 141.0


# ----------------------------------------------------------------------------- response limit, actor sharding
def test_response_max_alone_is_enough(tmp_path):
    # Below the 1.5b recipe's median of 3000 tokens: the logged mean, not the recipe, sets the median.
    code, out = run_import(
        tmp_path, "run.jsonl", verl_jsonl(), "--format", "verl", *RUN, "--response-max", "2048"
    )
    assert code == 0
    workload = load_trace(out).provenance["workload"]
    assert workload["response"]["max_tokens"] == 2048
    assert workload["response"]["median_tokens"] == pytest.approx(1200 / math.exp(0.6**2 / 2))


def test_the_limit_comes_from_clipped_responses_when_nothing_else_states_it(tmp_path):
    steps = [
        {**VERL_STEP, "response_length/max": 2048.0, "response_length/clip_ratio": 0.0},
        {**VERL_STEP, "response_length/max": 4096.0, "response_length/clip_ratio": 0.02},
    ]
    text = "".join(json.dumps({"step": i, "data": data}) + "\n" for i, data in enumerate(steps, start=1))
    code, out = run_import(tmp_path, "run.jsonl", text, "--format", "verl", *RUN)
    assert code == 0
    imported = load_trace(out).provenance["imported_from"]
    assert imported["response_limit"]["tokens"] == 4096 and imported["response_limit"]["exact"] is True


def test_the_limit_comes_from_the_launch_command_in_a_console_log(tmp_path):
    text = "+ python3 -m verl.trainer.main_ppo data.max_response_length=1536 trainer.n_gpus_per_node=8\n"
    text += "".join(f"step:{s} - timing_s/gen:50.0 - response_length/mean:300.0\n" for s in (1, 2))
    code, out = run_import(tmp_path, "run.log", text, "--format", "verl", *RUN)
    assert code == 0
    assert load_trace(out).provenance["workload"]["response"]["max_tokens"] == 1536


def test_fsdp_sharding_fits_a_7b_actor_that_replicated_states_do_not(tmp_path, capsys):
    run = ["--model", "7b", "--device", "H100", "--num-devices", "8", "--prompts", "64", "--group-size", "8"]
    run += ["--actor-mp", "1", "--response-max", "2048"]
    code, out = run_import(tmp_path, "run.jsonl", verl_jsonl(), "--format", "verl", *run)
    assert code == 0, capsys.readouterr().err
    sharding = load_trace(out).provenance["imported_from"]["actor_sharding"]
    assert sharding["mode"] == "fsdp" and sharding["shards"] == 8
    assert sharding["train_state_bytes_per_device"] == int(7.62e9 * 16 / 8)
    code, _ = run_import(
        tmp_path, "run.jsonl", verl_jsonl(), "--format", "verl", *run, "--actor-sharding", "none"
    )
    error = capsys.readouterr().err
    assert code == 2 and "--actor-mp=1: needs 113.5 GiB per H100 device" in error, error
    assert "or pass --actor-sharding fsdp if the run's actor strategy was FSDP" in error


def test_response_max_alone_is_enough_for_a_log_without_lengths(tmp_path):
    """With no logged mean, the preset's median (3000 of 16384 tokens for 1.5b) scales with the limit instead of
    contradicting it; the trace says the median is assumed."""
    text = "".join(f"step:{s} - timing_s/gen:50.0 - timing_s/update_actor:20.0\n" for s in (1, 2))
    code, out = run_import(tmp_path, "run.log", text, "--format", "verl", *RUN, "--response-max", "2048")
    assert code == 0
    provenance = load_trace(out).provenance
    assert provenance["workload"]["response"]["median_tokens"] == pytest.approx(3000 * 2048 / 16384)
    assert provenance["imported_from"]["response_median"]["source"].startswith(
        "assumed: the model preset's median"
    )


def test_the_median_comes_from_the_logged_mean_and_says_so(tmp_path):
    code, out = run_import(
        tmp_path, "run.jsonl", verl_jsonl(), "--format", "verl", *RUN, "--response-max", "4096"
    )
    assert code == 0
    median = load_trace(out).provenance["imported_from"]["response_median"]
    assert median["tokens"] == pytest.approx(1200 / math.exp(0.6**2 / 2))
    assert median["source"].startswith("from the logged mean response (1200.0 tokens)")


STEPS = "".join(
    f"(TaskRunner pid=7) step:{s} - timing_s/gen:50.0 - response_length/mean:300.0\n" for s in (1, 2)
)
SEVEN_B = ["--model", "7b", "--device", "H100", "--num-devices", "8", "--prompts", "64", "--group-size", "8"]


@pytest.mark.parametrize(
    ("head", "mode", "source"),
    [
        # veRL prints its config with pprint (keys sorted, so the actor's section comes first).
        (
            "(TaskRunner pid=7)                                  'strategy': 'fsdp',\n",
            "fsdp",
            "printed config",
        ),
        (
            "(TaskRunner pid=7)                                               'use_distributed_optimizer': True,\n"
            "(TaskRunner pid=7)                                  'strategy': 'megatron',\n"
            "(TaskRunner pid=7)             'strategy': 'megatron',\n",
            "optimizer",
            "printed config",
        ),
        (
            "(TaskRunner pid=7)                                               'use_distributed_optimizer': False,\n"
            "(TaskRunner pid=7)                                  'strategy': 'megatron',\n",
            "none",
            "printed config",
        ),
        (
            "+ python3 -m verl.trainer.main_ppo actor_rollout_ref.actor.strategy=fsdp2 x=1\n",
            "fsdp",
            "launch command",
        ),
        (
            "+ python3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer.yaml x=1\n",
            "optimizer",
            "launch",
        ),
        (
            "python3 -m verl.trainer.main_ppo --config-name='ppo_megatron_trainer' "
            "actor_rollout_ref.actor.megatron.use_distributed_optimizer=False\n",
            "none",
            "launch command",
        ),
        ("", "fsdp", "assumed: veRL's default"),
    ],
    ids=[
        "printed-fsdp",
        "printed-megatron",
        "printed-megatron-no-distopt",
        "fsdp2",
        "megatron-config",
        "no-distopt",
        "nothing",
    ],
)
def test_the_actor_sharding_comes_from_the_logs_config_or_command(tmp_path, head, mode, source):
    run = [*SEVEN_B, "--actor-mp", "2", "--response-max", "1024"]
    code, out = run_import(tmp_path, "run.log", head + STEPS, "--format", "verl", *run)
    assert code == 0
    sharding = load_trace(out).provenance["imported_from"]["actor_sharding"]
    assert sharding["mode"] == mode and source in sharding["source"], sharding
    # 7.62e9 parameters over --actor-mp 2 and 4 data-parallel ranks: FSDP shards all 16 bytes a parameter, the
    # distributed optimizer the 12 bytes of fp32 master weights and Adam moments, none keeps all 16.
    per_param = {"fsdp": 16 / 4, "optimizer": 4 + 12 / 4, "none": 16}[mode]
    assert sharding["train_state_bytes_per_device"] == int(7.62e9 * per_param / 2)


def test_the_sharding_flag_wins_over_the_log(tmp_path):
    head = "(TaskRunner pid=7)                                  'strategy': 'megatron',\n"
    run = [*SEVEN_B, "--actor-mp", "2", "--response-max", "1024", "--actor-sharding", "fsdp"]
    code, out = run_import(tmp_path, "run.log", head + STEPS, "--format", "verl", *run)
    assert code == 0
    sharding = load_trace(out).provenance["imported_from"]["actor_sharding"]
    assert sharding == {**sharding, "mode": "fsdp", "source": "from --actor-sharding"}


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
    ("run.dat", "step,timing_s/gen\n1,2\n", "--input-format="),
    ("bad.log", "(TaskRunner pid=1) step:3 - timing_s/gen:slow - x:1\n", "bad.log:1 timing_s/gen="),
    ("twice.log", "step:1 - timing_s/gen:2.0\nstep:1 - timing_s/gen:3.0\n", "twice.log:2 timing_s/gen="),
    ("nothing.log", "Training Progress: 1/105\nlet's think step by step\n", "nothing.log="),
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
        (["--format", "verl", *RUN, "--actor-sharding", "zero3"], "--actor-sharding="),
        (
            ["--format", "verl", *RUN, "--response-max", "100", "--response-median", "200"],
            "--response-median=",
        ),
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


@pytest.mark.parametrize(
    ("head", "flags", "key", "source"),
    [
        ("python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.name=sglang x=1\n", [], "sglang-0.4", "launch"),
        ("(TaskRunner pid=7)                          'name': 'vllm',\n", [], "vllm-0.6", "printed config"),
        ("", [], "vllm-v1", "assumed: the least published engine cost"),
        ("python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.name=sglang\n", ["--engine", "vllm-0.6"],
         "vllm-0.6", "from the flags"),
        ("python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.name=sglang\n", ["--engine", "none"],
         None, "from the flags"),
    ],
    ids=["command-sglang", "printed-vllm", "nothing", "flag-wins", "flag-none"],
)  # fmt: skip
def test_the_decode_steps_engine_comes_from_the_logs_command_or_config(tmp_path, head, flags, key, source):
    run = [*SEVEN_B, "--actor-mp", "2", "--response-max", "1024", *flags]
    code, out = run_import(tmp_path, "run.log", head + STEPS, "--format", "verl", *run)
    assert code == 0
    provenance = load_trace(out).provenance
    engine = provenance["imported_from"]["engine"]
    fixed = 0.0 if key is None else engine_step_cost(key).fixed_step_s
    assert engine["decode_step_overhead_s"] == provenance["workload"]["decode_step_overhead_s"] == fixed
    per_sequence = 0.0 if key is None else engine_step_cost(key).per_sequence_s
    assert engine["decode_step_overhead_per_sequence_s"] == per_sequence
    assert provenance["workload"]["decode_step_overhead_per_sequence_s"] == per_sequence
    assert source in engine["source"], engine
    # The provenance command names the engine, so that it imports the same trace again.
    assert f"--engine {key or 'none'}" in provenance["command"]
