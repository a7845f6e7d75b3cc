"""``rlinf train --backend ray`` end to end: the command starts a private Ray on 127.0.0.1 (one session for
profiling and training), trains, checkpoints and resumes exactly. Kept apart from ``test_ray_backend.py`` so that
its emulated two-node cluster is gone before this command starts its own Ray (joining a running cluster with
``--address`` is tested there, on that cluster)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("ray")

from test_fault_injection import SMALL_TRAIN, computed, descendants, has_checkpoint, kill_when  # noqa: E402


def ray_worker_pids(root: int) -> list[int]:
    """Processes of rlinf's Ray actors (Ray titles them ``ray::RayWorker.<method>``) below ``root``, the run whose
    private Ray started them: not those of another test's Ray running beside it (``pytest -n 2``)."""
    pids = []
    for pid in descendants(root):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::RayWorker"):
                pids.append(pid)
        except OSError:
            continue
    return pids


@pytest.mark.slow  # 52 s on 2 cores: `python3 -m pytest -m slow -n 2`
def test_cli_auto_mode_on_ray_survives_a_killed_actor_and_matches_an_uninterrupted_local_run(
    tmp_path: Path,
) -> None:
    """``rlinf train --backend ray --mode auto`` (a private Ray on 127.0.0.1, started and stopped by the command)
    plans from the shipped trace (profiling skipped), then loses an actor to SIGKILL right after its checkpoint of
    iteration 2. The run names the worker on stderr, restarts the actors from that checkpoint by itself and finishes
    (exit code 0); all 4 iterations compute bit for bit what an uninterrupted 4-iteration local run of the same
    command computes (only timings differ)."""
    straight, survived = tmp_path / "local", tmp_path / "ray"
    command = [*SMALL_TRAIN, "--set", "num_steps=32", "--devices", "2", "--iterations", "4"]
    command += ["--mode", "auto", "--trace", "traces/hopper_ppo_cpu2.json"]  # profiled with num_steps=32
    local = subprocess.run(
        [*command, "--out", str(straight)], check=True, timeout=300, capture_output=True, text=True
    )
    run = subprocess.Popen(
        [*command, "--backend", "ray", "--out", str(survived)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = kill_when(run, has_checkpoint(survived), lambda: ray_worker_pids(run.pid))
    assert "ray: started a private Ray on 127.0.0.1 (1 node, 8 CPUs, 0 GPUs)" in out
    assert run.returncode == 0, err[-3000:]

    def chosen(printed: str) -> list[str]:
        return [line.split("; ")[0] for line in printed.splitlines() if line.startswith("auto: chose")]

    assert len(chosen(out)) == 1 and chosen(out) == chosen(local.stdout), out  # one plan on both backends
    assert "iteration 4: measured" in out
    assert re.search(
        r"worker \w+\[\d\] failed while running .*actor died.*; restarted the workers at iteration", err
    )
    assert [m["iteration"] for m in computed(survived)] == list(range(1, 5))
    assert computed(survived) == computed(straight)
