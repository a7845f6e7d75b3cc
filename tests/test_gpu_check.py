"""The GPU check's plumbing, on the CPU: a check cut at its time limit keeps its phase marks and ends every process
it started; the dry run's scaling; the H200 window's findings as the committed files show them."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import psutil
import pytest
from benchmark_scripts import load

from rlinf.core.phases import PHASES_ENV, durations, mark, read_marks

gpu_check = load("gpu_check")
measured_gpu = load("measured_gpu")

STALLS = """
import os, subprocess, sys, time
from rlinf.core.phases import mark
mark("config_checked")
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[1], "w").write(str(child.pid))
mark("workers_started")
time.sleep(120)
"""


def test_a_check_cut_at_its_limit_keeps_its_phases_and_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu_check, "WORK", tmp_path)
    child_pid = tmp_path / "child.pid"

    def stalls(limit_s: float) -> dict:
        gpu_check.run([sys.executable, "-c", STALLS, str(child_pid)], limit_s, "stalls")
        return {}

    monkeypatch.setattr(gpu_check, "CHECKS", (("stalls", 4.0, stalls),))
    monkeypatch.setattr(gpu_check, "MIN_START_S", 1.0)
    started = time.monotonic()
    [entry] = gpu_check.check_all(None, 60.0)
    assert time.monotonic() - started < 30
    assert not entry["ok"] and "timed out after 4 s" in entry["error"]
    phases = [p["phase"] for p in entry["phases"]]
    assert phases == ["config_checked", "workers_started", "end"]
    assert entry["phases"][-1]["took_s"] >= 2.0  # where it was stuck: after its last mark, until the cut
    pid = int(child_pid.read_text())
    deadline = time.monotonic() + 5
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the check's grandchild outlived the check"
        time.sleep(0.1)
    assert PHASES_ENV not in os.environ


def test_phase_marks_go_to_the_named_file_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "phases.jsonl"
    monkeypatch.delenv(PHASES_ENV, raising=False)
    mark("nowhere")
    assert not path.exists()
    monkeypatch.setenv(PHASES_ENV, str(path))
    mark("worker_ready", component="actor")
    mark("iteration_done", iteration=1)
    with path.open("a") as stream:
        stream.write('{"phase": "torn')  # a process killed mid-line
    marks = read_marks(path)
    assert [m["phase"] for m in marks] == ["worker_ready", "iteration_done"]
    rows = durations(marks, marks[0]["t"] - 1.0, marks[-1]["t"] + 2.0)
    assert [r["phase"] for r in rows] == [
        "worker_ready (component=actor)",
        "iteration_done (iteration=1)",
        "end",
    ]
    assert rows[0]["took_s"] == pytest.approx(1.0, abs=0.01) and rows[-1]["took_s"] == pytest.approx(
        2.0, abs=0.01
    )


def test_the_dry_run_maps_every_check_to_the_cpu_and_scales_it() -> None:
    command = [
        *gpu_check.RLINF, "validate", *gpu_check.GRPO_05B, "--cpu-devices", "3", "--plans", "4",
        "--iterations", "6", "--profile-budget", "75",
    ]  # fmt: skip
    gpu_check.QUICK[0] = False
    full = gpu_check.on_cpu(command)
    assert "cuda" not in full and "--cpu-devices" not in full and "model.config=tiny" in full
    assert (
        full[full.index("--profile-budget") + 1] == "75"
        and full[-len(gpu_check.GRPO_05B_CPU) :] == gpu_check.GRPO_05B_CPU
    )
    try:
        gpu_check.QUICK[0] = True
        quick = gpu_check.on_cpu(command)
        bench = gpu_check.on_cpu(
            [sys.executable, "benchmarks/bench_rollout.py", "--batches", "1", "8", "32", "--json", "x"]
        )
    finally:
        gpu_check.QUICK[0] = False
    assert quick[quick.index("--profile-budget") + 1] == gpu_check.QUICK_PROFILE_S
    assert quick[quick.index("--iterations") + 1] == "2" and quick[quick.index("--plans") + 1] == "2"
    assert bench[bench.index("--batches") + 1 : bench.index("--json")] == ["1", "8"] and bench[-2:] == [
        "--device",
        "cpu",
    ]


def test_the_h200_window_findings_hold_in_its_files() -> None:
    """What docs/gpu.md says the window found, recomputed from the files it left: Hopper's error is in the op costs
    (its own samples replay the run) of a pool the one-probe profile never measured; the weight sync was most of
    the profiled GRPO iteration; the fixes made the iteration faster and the rollout a match for `generate`."""
    cause = measured_gpu.hopper_cause()
    assert len(cause["probes"]) == 1 and "cpu" not in cause["probes"][0]
    assert "cpu:" in cause["plan"]
    assert abs(cause["replayed_s"] / cause["measured_s"] - 1) < 0.10
    assert cause["measured_s"] / cause["predicted_s"] > 1.5
    w = measured_gpu.window()
    assert w["syncs"] * w["sync_s"] > 0.5 * w["profile_iteration_s"]
    assert w["grpo_before_s"] / w["grpo_after_s"] > 1.5
    assert w["rlinf_b256"] >= w["generate_b256"] and w["busy_before"] < 0.2
    document = json.loads((Path(gpu_check.ROOT) / "docs" / "data" / "gpu_check_h200.json").read_text())
    assert document["provenance"]["commit"] == "2a2f7d2" and len(document["checks"]) == len(gpu_check.CHECKS)
