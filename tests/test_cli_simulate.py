"""``rlinf simulate``: the summary, the exports, and one clear line for every kind of bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlinf.core.cluster import GIB, parse_cluster
from rlinf.core.trace import CostSample, Trace
from rlinf.core.workflow import Component, Edge, WeightSync, Workflow

REPO = Path(__file__).resolve().parent.parent
MODES = ("collocated", "disaggregated", "hybrid")
PLANS = {
    # rollout 30 GiB + actor 60 GiB do not fit an 80 GiB H100 together: collocation needs offload.
    "collocated": "placement: {rollout: all, reward: all, actor: all}\n"
    "granularity: {rollout->reward: 4, reward->actor: 4}\n"
    "offload: [rollout, actor]\n",
    "disaggregated": "placement: {rollout: 0-3, reward: 4-5, actor: 6-7}\n"
    "granularity: {rollout->reward: 4, reward->actor: 4}\n",
    "hybrid": "placement: {rollout: 0-5, reward: 6-7, actor: all}\n"
    "granularity: {rollout->reward: 4}\n"
    "offload: [rollout, actor]\n",
}


def tiny_trace() -> Trace:
    """rollout -> reward -> actor on one 8-GPU node, linear costs profiled at 2, 4 and 8 devices."""
    workflow = Workflow(
        name="tiny-grpo",
        components=[
            Component(name="rollout", role="rollout", state_bytes=30 * GIB),
            Component(name="reward", role="reward"),
            Component(name="actor", role="actor", state_bytes=60 * GIB),
        ],
        edges=[
            Edge(src="rollout", dst="reward", bytes_per_sample=4096),
            Edge(src="reward", dst="actor", bytes_per_sample=4096),
        ],
        weight_sync=[WeightSync(src="actor", dst="rollout", num_bytes=14 * GIB)],
        batch_size=64,
        group_size=4,
        tokens_per_sample=512.0,
    )
    samples = []
    for devices in (2, 4, 6, 8):
        for batch in (8, 16, 32, 64):
            per_device = batch / devices
            samples += [
                CostSample(
                    component="rollout",
                    op="generate",
                    devices=devices,
                    samples=batch,
                    seconds=2.0 + 0.5 * per_device,
                ),
                CostSample(
                    component="reward", op="reward", devices=devices, samples=batch, seconds=0.05 * per_device
                ),
                CostSample(
                    component="actor",
                    op="train",
                    devices=devices,
                    samples=batch,
                    seconds=0.5 + 0.3 * per_device,
                ),
            ]
    return Trace(
        workflow=workflow,
        cluster=parse_cluster("1x8xH100"),
        provenance={"kind": "synthesized", "assumptions": "tests/test_cli_simulate.py: linear costs"},
        samples=samples,
        response_lengths=(100, 150, 200, 300, 400, 800, 1600, 3200),
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny trace and one plan per mode, on disk."""
    folder = tmp_path_factory.mktemp("simulate")
    out = {"trace": folder / "tiny.json"}
    tiny_trace().save(out["trace"])
    for mode, text in PLANS.items():
        out[mode] = folder / f"{mode}.yaml"
        out[mode].write_text(text)
    return out


def rlinf(*args: str | Path, module: str = "rlinf.cli") -> subprocess.CompletedProcess[str]:
    """Run the CLI in a fresh interpreter, as a user would."""
    command = [sys.executable, "-m", module, *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO, check=False)


def simulate_json(trace: Path, plan: Path, *extra: str | Path) -> dict:
    """``rlinf simulate --json``: checks that stdout is exactly one JSON object and returns it."""
    result = rlinf("simulate", "--trace", trace, "--plan", plan, "--json", *extra)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)  # fails on anything but a single JSON document
    assert result.stdout.count("\n") == 1
    return report


@pytest.fixture(scope="module")
def reports(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, Path]]:
    """Per mode: the --json report and the --out folder of one run."""
    out = {}
    for mode in MODES:
        folder = tmp_path_factory.mktemp(f"out-{mode}")
        out[mode] = (simulate_json(files["trace"], files[mode], "--out", folder), folder)
    return out


# ------------------------------------------------------------------------------------------- checks on exports
def complete_events(folder: Path) -> list[dict]:
    """The X events of ``folder/timeline.json``."""
    trace = json.loads((folder / "timeline.json").read_text())
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def assert_context_switches(folder: Path) -> None:
    """The Perfetto file shows onload and offload spans."""
    kinds = {e["cat"] for e in complete_events(folder)}
    assert {"onload", "offload"} <= kinds


def assert_components_overlap(folder: Path) -> None:
    """Compute spans of two different components run at the same time."""
    compute = sorted((e for e in complete_events(folder) if e["cat"] == "compute"), key=lambda e: e["ts"])
    overlapping = {
        tuple(sorted((a["args"]["component"], b["args"]["component"])))
        for i, a in enumerate(compute)
        for b in compute[i + 1 :]
        if a["args"]["component"] != b["args"]["component"] and b["ts"] < a["ts"] + a["dur"] - 1e-3
    }
    assert overlapping, "no two components overlap in time"


def assert_report_shape(report: dict, mode: str, num_devices: int) -> None:
    """The fields that scripts rely on."""
    assert report["mode"] == mode
    assert report["iteration_s"] > 0
    assert report["throughput"]["samples_per_s"] > 0
    assert len(report["device_busy_fraction"]) == num_devices
    assert len(report["peak_memory_bytes"]) == num_devices
    assert all(0.0 <= f <= 1.0 + 1e-9 for f in report["device_busy_fraction"])


# ------------------------------------------------------------------------------------------------ happy paths
def test_json_report_for_each_mode(reports: dict[str, tuple[dict, Path]]) -> None:
    for mode in MODES:
        assert_report_shape(reports[mode][0], mode, num_devices=8)
    iteration_s = {mode: reports[mode][0]["iteration_s"] for mode in MODES}
    assert len({round(v, 6) for v in iteration_s.values()}) == 3, iteration_s


def test_throughput_is_the_batch_over_the_iteration_time(reports: dict[str, tuple[dict, Path]]) -> None:
    report = reports["disaggregated"][0]
    assert report["throughput"]["samples_per_s"] == pytest.approx(64 / report["iteration_s"])
    assert report["throughput"]["tokens_per_s"] == pytest.approx(64 * 512 / report["iteration_s"])


def test_collocated_perfetto_file_has_onload_and_offload(reports: dict[str, tuple[dict, Path]]) -> None:
    assert_context_switches(reports["collocated"][1])


def test_disaggregated_perfetto_file_overlaps_components(reports: dict[str, tuple[dict, Path]]) -> None:
    assert_components_overlap(reports["disaggregated"][1])
    assert {"onload", "offload"}.isdisjoint({e["cat"] for e in complete_events(reports["disaggregated"][1])})


def test_out_folder_holds_trace_gantt_and_summary(reports: dict[str, tuple[dict, Path]]) -> None:
    report, folder = reports["hybrid"]
    assert sorted(p.name for p in folder.iterdir()) == ["gantt.png", "summary.json", "timeline.json"]
    assert (folder / "gantt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["iteration_s"] == report["iteration_s"]
    assert summary["mode"] == "hybrid"
    last_end_us = max(e["ts"] + e["dur"] for e in complete_events(folder))
    assert last_end_us == pytest.approx(report["iteration_s"] * 1e6)


def test_peak_memory_is_reported_per_device_group(reports: dict[str, tuple[dict, Path]]) -> None:
    report = reports["disaggregated"][0]
    groups = {g["devices"]: g["peak_memory_bytes"] for g in report["device_groups"]}
    assert groups == {"0-3": 30 * GIB, "4-5": 0, "6-7": 60 * GIB}
    assert report["memory_capacity_bytes"] == 80 * GIB


def test_table_summary(files: dict[str, Path]) -> None:
    result = rlinf("simulate", "--trace", files["trace"], "--plan", files["collocated"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    labels = [line.split("  ")[0] for line in lines if line and not line.startswith(" ")]
    assert labels == [
        "mode",
        "plan",
        "cluster",
        "iteration",
        "throughput",
        "bubble fraction",
        "busy fraction",
        "peak memory",
        "critical path",
        "seconds by component",
    ]
    assert lines[0].split()[-1] == "collocated"
    assert "dev 0-7: 60.0 / 80.0 GiB" in result.stdout
    assert "rollout.onload" in result.stdout


def test_stochastic_runs_depend_on_the_seed_only(files: dict[str, Path]) -> None:
    def iteration(seed: int) -> float:
        report = simulate_json(files["trace"], files["disaggregated"], "--stochastic", "--seed", str(seed))
        return report["iteration_s"]

    first, again = iteration(1), iteration(1)
    assert first == again
    assert len({first, iteration(2), iteration(3)}) > 1


def test_cluster_override_scales_to_1024_devices_with_warnings(files: dict[str, Path]) -> None:
    result = rlinf(
        "simulate",
        "--trace",
        files["trace"],
        "--plan",
        files["collocated"],
        "--cluster",
        "128x8xH100",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert_report_shape(report, "collocated", num_devices=1024)
    assert [g["devices"] for g in report["device_groups"]] == ["0-1023"]
    warnings = result.stderr.splitlines()
    assert warnings and all(line.startswith("rlinf: warning: cost model") for line in warnings)


def test_python_dash_m_rlinf_runs_the_cli(files: dict[str, Path]) -> None:
    result = rlinf("simulate", "--trace", files["trace"], "--plan", files["hybrid"], "--json", module="rlinf")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["mode"] == "hybrid"


# -------------------------------------------------------------------------------------------------- bad input
def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Exit code 2, nothing on stdout, one ``rlinf: error:`` line naming what is wrong."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rlinf: error: ")
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert result.stdout == ""
    return lines[0]


def write_trace(tmp_path: Path, edit) -> Path:  # noqa: ANN001
    """The tiny trace with ``edit`` applied to its JSON form."""
    data = tiny_trace().to_dict()
    edit(data)
    path = tmp_path / "bad-trace.json"
    path.write_text(json.dumps(data))
    return path


def test_trace_with_a_missing_field(tmp_path: Path, files: dict[str, Path]) -> None:
    trace = write_trace(tmp_path, lambda data: data["samples"][3].pop("seconds"))
    result = rlinf("simulate", "--trace", trace, "--plan", files["collocated"])
    assert_one_line_error(result, "samples[3].seconds", "is missing")


def test_trace_with_a_negative_cost(tmp_path: Path, files: dict[str, Path]) -> None:
    trace = write_trace(tmp_path, lambda data: data["samples"][0].update(seconds=-1.5))
    result = rlinf("simulate", "--trace", trace, "--plan", files["collocated"])
    assert_one_line_error(result, "bad-trace.json.samples[0].seconds=-1.5", ">= 0")


def test_plan_naming_an_unknown_component(tmp_path: Path, files: dict[str, Path]) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "placement: {rollout: all, reward: all, actor: all, critic: all}\noffload: [rollout, actor]\n"
    )
    result = rlinf("simulate", "--trace", files["trace"], "--plan", plan)
    assert_one_line_error(result, "placement.critic", "unknown component", "rollout")


def test_plan_with_a_device_out_of_range(tmp_path: Path, files: dict[str, Path]) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("placement: {rollout: 0-15, reward: 0-7, actor: 0-7}\noffload: [rollout, actor]\n")
    result = rlinf("simulate", "--trace", files["trace"], "--plan", plan)
    assert_one_line_error(result, "placement.rollout", "out of range", "0-7")


def test_plan_that_needs_offload_to_fit(tmp_path: Path, files: dict[str, Path]) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("placement: {rollout: all, reward: all, actor: all}\n")
    result = rlinf("simulate", "--trace", files["trace"], "--plan", plan)
    line = assert_one_line_error(result, "does not fit", "device 0", "90.0 GiB", "offload")
    assert "rollout" in line.split("fix:")[1] and "actor" in line.split("fix:")[1]


def test_malformed_json_trace(tmp_path: Path, files: dict[str, Path]) -> None:
    trace = tmp_path / "broken.json"
    trace.write_text('{"schema": "rlinf.trace/v1",\n "samples": [}\n')
    result = rlinf("simulate", "--trace", trace, "--plan", files["collocated"])
    assert_one_line_error(result, "trace=", "broken.json:2:", "not valid JSON")


def test_malformed_yaml_plan(tmp_path: Path, files: dict[str, Path]) -> None:
    plan = tmp_path / "broken.yaml"
    plan.write_text("placement: {rollout: all, reward: [0-3\n")
    result = rlinf("simulate", "--trace", files["trace"], "--plan", plan)
    assert_one_line_error(result, "broken.yaml", "not valid YAML")


@pytest.mark.parametrize("missing", ["trace", "plan"])
def test_nonexistent_file(tmp_path: Path, files: dict[str, Path], missing: str) -> None:
    paths = {"trace": files["trace"], "plan": files["collocated"], missing: tmp_path / "nowhere.file"}
    result = rlinf("simulate", "--trace", paths["trace"], "--plan", paths["plan"])
    assert_one_line_error(result, f"{missing}=", "nowhere.file", "does not exist")


def test_unknown_cluster_spec(files: dict[str, Path]) -> None:
    result = rlinf("simulate", "--trace", files["trace"], "--plan", files["collocated"], "--cluster", "8xTPU")
    assert_one_line_error(result, "cluster.device", "TPU")


def test_out_pointing_at_a_file(files: dict[str, Path]) -> None:
    result = rlinf(
        "simulate", "--trace", files["trace"], "--plan", files["collocated"], "--out", files["trace"]
    )
    assert_one_line_error(result, "--out", "is a file")


# ------------------------------------------------------------------------------------- shipped 7B trace and plans
def shipped_7b() -> tuple[Path, dict[str, Path]]:
    """The shipped 7B trace and example plans, or a skip when they are not in the tree."""
    traces = sorted((REPO / "traces").glob("*7b*.json"))
    plans = {mode: REPO / "examples" / "plans" / f"{mode}.yaml" for mode in MODES}
    if not traces or not all(p.is_file() for p in plans.values()):
        pytest.skip("traces/*7b*.json or examples/plans/{collocated,disaggregated,hybrid}.yaml not shipped")
    return traces[0], plans


def test_shipped_7b_plans_simulate_with_different_iteration_times(tmp_path: Path) -> None:
    trace, plans = shipped_7b()
    reports = {}
    for mode, plan in plans.items():
        reports[mode] = simulate_json(trace, plan, "--out", tmp_path / mode)
        assert reports[mode]["mode"] == mode
        assert len(reports[mode]["device_busy_fraction"]) == len(reports[mode]["peak_memory_bytes"]) > 0
    assert len({round(r["iteration_s"], 6) for r in reports.values()}) == 3
    assert_context_switches(tmp_path / "collocated")
    assert_components_overlap(tmp_path / "disaggregated")


# --------------------------------------------------------------------------------- the straggler tail (issue 35)
LONG_COT_SYNTH = (
    "trace", "synth", "--model", "1.5b", "--device", "H100", "--num-devices", "8", "--prompts", "8",
    "--group-size", "16", "--prompt-tokens", "150", "--response-mean", "6000", "--response-max", "16384",
    "--rollout-mp", "2", "--inference-mp", "2", "--actor-mp", "2", "--engine", "sglang-0.4", "--terms", "all",
    "--max-num-seqs", "1024", "--kv-cache-fraction", "0.3", "--date", "2026-01-01",
)  # fmt: skip
ONE_NODE_COLLOCATED = (
    "placement: {rollout: all, reward: all, inference: all, actor: all}\n"
    "granularity: {rollout->reward: 4, reward->inference: 1, inference->actor: 1}\n"
    "offload: [rollout, inference, actor]\n"
)


@pytest.fixture(scope="module")
def long_cot(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """A synthesized long chain-of-thought trace, simulated collocated with its rollout streamed in 4 parts."""
    folder = tmp_path_factory.mktemp("long-cot")
    trace, plan = folder / "long_cot.json", folder / "plan.yaml"
    plan.write_text(ONE_NODE_COLLOCATED)
    result = rlinf(*LONG_COT_SYNTH, "--out", trace)
    assert result.returncode == 0, result.stderr
    return simulate_json(trace, plan, "--out", folder / "out"), folder


def test_json_reports_the_straggler_tail_of_a_long_cot_generation(long_cot: tuple[dict, Path]) -> None:
    report, _ = long_cot
    straggler = report["straggler"]
    assert straggler["available"]
    (tail,) = straggler["components"]
    assert tail["component"] == "rollout"
    assert 0 < tail["tail_batch"] < tail["peak_batch"] * straggler["tail_batch_fraction"]
    assert 0 < tail["tail_steps"] < tail["decode_steps"] <= 16384
    assert 0 < report["straggler_fraction"] < 1
    assert report["straggler_fraction"] == pytest.approx(tail["seconds"] / report["iteration_s"])
    parts = tail["intervals"]
    assert sum(p["end_s"] - p["start_s"] for p in parts) == pytest.approx(tail["seconds"])
    assert tail["seconds"] == pytest.approx(
        tail["share_of_generation"] * report["component_seconds"]["rollout"]
    )


def test_the_tail_is_the_end_of_the_generate_spans_and_a_perfetto_slice(long_cot: tuple[dict, Path]) -> None:
    report, folder = long_cot
    events = complete_events(folder / "out")
    generate = {
        e["args"]["op_index"]: e for e in events if e["cat"] == "compute" and e["name"].startswith("rollout")
    }
    slices = [e for e in events if e["cat"] == "straggler"]
    assert slices and {e["args"]["op_index"] for e in slices} <= set(generate)
    last = max(generate.values(), key=lambda e: e["ts"])
    assert max(e["ts"] + e["dur"] for e in slices) == pytest.approx(last["ts"] + last["dur"])
    for piece in slices:
        span = generate[piece["args"]["op_index"]]
        assert (
            span["ts"] - 1e-3 <= piece["ts"] and piece["ts"] + piece["dur"] <= span["ts"] + span["dur"] + 1e-3
        )
    assert (folder / "out" / "gantt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((folder / "out" / "summary.json").read_text())["straggler_fraction"] == pytest.approx(
        report["straggler_fraction"]
    )


def test_table_names_the_straggler_tail(long_cot: tuple[dict, Path]) -> None:
    _, folder = long_cot
    result = rlinf("simulate", "--trace", folder / "long_cot.json", "--plan", folder / "plan.yaml")
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("straggler tail")]
    assert "of the iteration" in line and "rollout generation runs its last" in line


def test_a_trace_without_a_decode_schedule_has_no_straggler(reports: dict[str, tuple[dict, Path]]) -> None:
    report = reports["collocated"][0]
    assert report["straggler_fraction"] is None
    assert report["straggler"]["available"] is False
    assert "not synthesized by the analytic model" in report["straggler"]["reason"]


def test_a_large_plan_is_announced_up_front_with_an_estimate(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlinf.cli import main
    from rlinf.commands import simulate

    args = ["simulate", "--trace", str(files["trace"]), "--plan", str(files["collocated"]), "--json"]
    monkeypatch.setattr(simulate, "LARGE_PLAN_MICRO_BATCHES", 9)  # the plan has 4 + 4 micro-batches
    assert main(args) == 0
    assert "micro-batches over the plan's edges" not in capsys.readouterr().err
    monkeypatch.setattr(simulate, "LARGE_PLAN_MICRO_BATCHES", 8)
    assert main(args) == 0
    err = capsys.readouterr().err
    assert (
        "rlinf simulate: 8 micro-batches over the plan's edges, about 0 s to simulate at 5,000 a second"
        in err
    )
