"""A worker that fails for good ends the run cleanly: with ``--max-restarts 0`` (or after the last restart) the
command exits with code 2 within 10 s of the failure, prints the worker's error as one line naming its op, keeps
the full traceback in the run directory and leaves no process behind.

The failing workload is the custom-workload example with a critic that raises in its second training op: a real
run of real workers (``rlinf train`` in a subprocess), only told where to fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
EXIT_BOUND_S = 10.0

FAILING_WORKLOAD = textwrap.dedent(
    """
    import pathlib, time

    import ppo_critic as example  # a copy of examples/custom_workload/ppo_critic.py beside this file


    class FailingCritic(example.Critic):
        trained = 0

        def compute(self, op_name, micro_batch, step, inputs):
            if op_name == "train":
                self.trained += 1
                if self.trained == {fail_at}:
                    pathlib.Path({marker!r}).write_text(repr(time.time()))
                    raise RuntimeError("injected failure in the critic's training op")
            return super().compute(op_name, micro_batch, step, inputs)


    class Failing(example.PPOCritic):
        def workers(self, config):
            return {{**super().workers(config), "critic": FailingCritic}}


    WORKLOAD = Failing()
    """
)


def write_config(directory: Path, fail_at: int) -> tuple[Path, Path]:
    marker = directory / "failed_at"
    shutil.copy(REPO / "examples/custom_workload/ppo_critic.py", directory / "ppo_critic.py")
    (directory / "failing.py").write_text(FAILING_WORKLOAD.format(fail_at=fail_at, marker=str(marker)))
    config = directory / "config.yaml"
    config.write_text(
        "workload: failing.py:WORKLOAD\nnum_envs: 4\nnum_steps: 16\nhidden: 16\nepochs: 1\n"
        "execution: {iterations: 6, checkpoint_every: 100, mode: collocated}\n"
    )
    return config, marker


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def descendants(root: int) -> set[int]:
    found: set[int] = set()
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = {int(pid) for pid in (task / "children").read_text().split()}
            except OSError:
                continue
            frontier += children - found
            found |= children
    return found


def run_watched(command: list[str], marker: Path) -> tuple[subprocess.Popen, str, set[int]]:
    """Run ``command`` in the repository, noting its descendant processes until ``marker`` appears; the finished
    process, its stderr and the descendants seen."""
    run = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    workers: set[int] = set()
    try:
        while run.poll() is None and not marker.exists():
            workers |= descendants(run.pid)
            time.sleep(0.05)
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    return run, err, workers


ACCELERATORS = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device (GPU check)"),
        ],
    ),
]


@pytest.mark.parametrize("accelerator", ACCELERATORS)
def test_a_failing_worker_ends_the_run_within_10_s_with_one_line_and_the_traceback_kept(
    tmp_path: Path, accelerator: str
) -> None:
    config, marker = write_config(tmp_path, fail_at=2)
    out = tmp_path / "run"
    devices = "2" if accelerator == "cpu" else "1"
    command = [sys.executable, "-m", "rlinf", "train", str(config), "--devices", devices, "--no-progress"]
    command += ["--accelerator", accelerator]
    mode = "disaggregated" if accelerator == "cpu" else "collocated"
    run, err, workers = run_watched(
        [*command, "--mode", mode, "--max-restarts", "0", "--out", str(out)], marker
    )
    exited_at = time.time()
    assert marker.exists(), err
    assert exited_at - float(marker.read_text()) < EXIT_BOUND_S
    assert run.returncode == 2, err
    errors = [line for line in err.splitlines() if line.startswith("rlinf: error:")]
    assert len(errors) == 1, err
    assert "worker critic[0] failed while running critic.train" in errors[0]
    assert "RuntimeError: injected failure in the critic's training op" in errors[0]
    assert "Traceback" not in err
    failure = out / "failure.txt"
    assert str(failure) in errors[0]
    text = failure.read_text()
    assert (
        "Traceback (most recent call last)" in text and "failing.py" in text and "raise RuntimeError" in text
    )
    assert workers, "no worker process was seen"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(pid) for pid in workers):
        time.sleep(0.05)
    assert not [pid for pid in workers if alive(pid)], "worker processes outlived the run"
