"""``rlinf train --backend ray`` end to end: the command starts a private Ray on 127.0.0.1 (one session for
profiling and training), trains, checkpoints and resumes exactly. Kept apart from ``test_ray_backend.py`` so that
its emulated two-node cluster is gone before these commands start their own Ray."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("ray")

from test_fault_injection import SMALL_TRAIN, computed, kill_after_first_checkpoint  # noqa: E402

from rlinf.checkpoint import read_manifest  # noqa: E402


def ray_worker_pids() -> list[int]:
    """Processes of rlinf's Ray actors (Ray titles them ``ray::RayWorker.<method>``)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(b"ray::RayWorker"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_cli_on_ray_worker_killed_then_resume_matches_an_uninterrupted_local_run(tmp_path: Path) -> None:
    """``rlinf train --backend ray`` (a private Ray on 127.0.0.1, started and stopped by the command) loses an
    actor to SIGKILL right after its checkpoint of iteration 2: it stops with exit code 2 and an error naming the
    worker and the op. ``--resume`` on Ray continues to iteration 4, and all 4 iterations compute bit for bit what
    an uninterrupted 4-iteration local run computes (only timings differ)."""
    straight, broken = tmp_path / "local", tmp_path / "ray"
    command = [*SMALL_TRAIN, "--set", "num_steps=32", "--mode", "collocated", "--devices", "2"]
    subprocess.run([*command, "--iterations", "4", "--out", str(straight)], check=True, timeout=300)
    run = subprocess.Popen(
        [*command, "--backend", "ray", "--iterations", "50", "--out", str(broken)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = kill_after_first_checkpoint(run, broken, ray_worker_pids)
    assert "ray: started a private Ray on 127.0.0.1 (1 node, 8 CPUs, 0 GPUs)" in out
    assert run.returncode == 2 and re.search(r"worker \w+\[\d\] failed while running .*actor died", err), err
    assert [e.iteration for e in read_manifest(broken / "checkpoints")] == [2]
    subprocess.run(
        [*command, "--backend", "ray", "--iterations", "4", "--resume", str(broken)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    assert [m["iteration"] for m in computed(broken)] == [1, 2, 3, 4]
    assert computed(broken) == computed(straight)


def test_cli_auto_mode_on_ray_plans_and_trains(tmp_path: Path) -> None:
    """Auto mode on Ray: plan from the shipped trace (profiling skipped), then train on the chosen plan."""
    done = subprocess.run(
        [
            *SMALL_TRAIN[:6],  # the shipped trace was profiled with the config's own sizes
            "--backend",
            "ray",
            "--iterations",
            "2",
            "--trace",
            "traces/hopper_ppo_cpu2.json",
            "--out",
            str(tmp_path / "auto"),
        ],
        check=True,
        timeout=300,
        capture_output=True,
        text=True,
    )
    assert "auto: chose" in done.stdout and "iteration 2: measured" in done.stdout
    assert len(computed(tmp_path / "auto")) == 2


def test_cli_joins_a_running_two_node_cluster_with_address(tmp_path: Path) -> None:
    """``--address`` joins a running cluster (two Ray nodes emulated on this machine, started by this test as an
    operator would with ``ray start``); ``--nodes 2`` puts logical device 0 on node 0 and device 1 on node 1, so
    the hybrid plan's env -> rollout traffic crosses nodes and the actor's two replicas all-reduce across them.
    The run computes what the same plan computes on the local backend."""
    from executor import ray_session

    hybrid = ["--mode", "hybrid", "--devices", "2", "--iterations", "2"]
    local = tmp_path / "local"
    subprocess.run([*SMALL_TRAIN, *hybrid, "--out", str(local)], check=True, timeout=300)
    with ray_session.emulated_cluster([1, 1]) as address:
        joined = subprocess.run(
            [*SMALL_TRAIN, *hybrid, "--backend", "ray", "--address", address, "--nodes", "2"]
            + ["--out", str(tmp_path / "ray")],
            timeout=300,
            capture_output=True,
            text=True,
        )
    assert joined.returncode == 0, joined.stderr[-3000:]
    assert f"ray: joined the Ray cluster at {address} (2 nodes, 2 CPUs, 0 GPUs)" in joined.stdout
    assert computed(tmp_path / "ray") == computed(local)
