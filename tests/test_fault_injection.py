"""Fault injection with real processes: SIGKILL a worker in the middle of an op (local and Ray backends), kill
the driver in the middle of a checkpoint write, corrupt the newest checkpoint. Nothing partial is ever loaded,
nothing is lost without a warning, and a dead worker is reported (worker and op) within 5 s.

Detection is checked by its cause, not by a duration: the local backend notices through the process sentinel
(milliseconds), Ray through the actor's failed call (the raylet sees the worker's socket close, typically well
under a second); the stall timeout that would otherwise end the run is 600 s, so an error that names the death
(exit code -9, "actor died") was not found by waiting. The latency is printed; a loaded 2-core machine has taken
seconds, so the only bound asserted is a guard against a hang (60 s, a tenth of the stall timeout).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from executor_workers import chain_facts
from fault_workers import HangWorker
from test_executor import HYBRID, chain_program

import executor
from rlinf.app.checkpoint import load_latest, read_manifest, verify
from rlinf.core.errors import RlinfWarning

TESTS = Path(__file__).resolve().parent
HANG_GUARD_S = 60.0


def hang_specs(marker: Path) -> dict[str, executor.WorkerSpec]:
    base = {"seconds": 0.005, "rows": 4}
    hang = {**base, "hang_on": ("reward", 2, 0), "marker": str(marker)}
    return {
        name: executor.WorkerSpec(
            factory=HangWorker, facts=chain_facts(name), config=hang if name == "reward" else base
        )
        for name in ("rollout", "reward", "actor")
    }


def kill_when_marked(marker: Path, killed_at: list[float]) -> threading.Thread:
    """A thread that waits until the worker wrote its pid into ``marker`` (it is inside the op), then SIGKILLs it."""

    def kill() -> None:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = int(marker.read_text())
        killed_at.append(time.monotonic())
        os.kill(pid, signal.SIGKILL)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def run_and_kill(backend, marker: Path) -> tuple[executor.WorkerError, float]:
    killed_at: list[float] = []
    thread = kill_when_marked(marker, killed_at)
    with pytest.raises(executor.WorkerError) as caught:
        executor.run(chain_program(HYBRID), hang_specs(marker), backend=backend)
    detected_at = time.monotonic()
    thread.join(timeout=5)
    assert killed_at, "the worker never reached the op it should hang in"
    return caught.value, detected_at - killed_at[0]


def test_local_worker_killed_mid_op_is_reported_as_its_death(tmp_path: Path) -> None:
    with executor.LocalBackend(executor.cpu_devices(2)) as backend:
        error, latency_s = run_and_kill(backend, tmp_path / "pid")
    print(f"local backend: SIGKILL detected after {latency_s * 1000:.0f} ms")
    assert "worker reward[0] failed while running reward.reward[2]: process exited with code -9" in str(error)
    assert latency_s < HANG_GUARD_S


def test_ray_worker_killed_mid_op_is_reported_as_its_death(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray")
    from executor.ray_backend import RayBackend

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    with RayBackend(executor.cpu_devices(2)) as backend:
        error, latency_s = run_and_kill(backend, tmp_path / "pid")
    print(f"ray backend: SIGKILL detected after {latency_s * 1000:.0f} ms")
    assert "worker reward[0] failed while running reward.reward[2]: actor died" in str(error)
    assert latency_s < HANG_GUARD_S


WRITER = textwrap.dedent(
    """
    import pathlib, sys, time, torch
    from rlinf.app import checkpoint
    from rlinf.core import files
    from rlinf.app.checkpoint import save_checkpoint
    directory, marker = sys.argv[1], sys.argv[2]
    for iteration in (1, 2):
        save_checkpoint(directory, iteration, {"iteration": iteration, "weights": torch.randn(1 << 18)})

    def slow_write(path, data):  # write half the checkpoint, say so, then stall until killed
        def writer(stream):
            stream.write(data[: len(data) // 2])
            stream.flush()
            pathlib.Path(marker).write_text("writing")
            time.sleep(60)
            stream.write(data[len(data) // 2 :])
        files.write_atomic(path, writer)

    checkpoint.files.write_bytes_atomic = slow_write
    save_checkpoint(directory, 3, {"iteration": 3, "weights": torch.randn(1 << 18)})
    """
)


def test_driver_killed_during_a_checkpoint_write_leaves_the_previous_one(tmp_path: Path) -> None:
    """SIGKILL the writing process in the middle of writing checkpoint 3: 1 and 2 stay valid, 3 never appears."""
    directory, marker = tmp_path / "checkpoints", tmp_path / "writing"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(directory), str(marker)])
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and writer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert marker.exists(), "the writer never reached checkpoint 3"
        partial = list(directory.glob(".iter_000003.safetensors.*.tmp"))
        assert partial and partial[0].stat().st_size > 0, "checkpoint 3 is not being written"
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    assert not (directory / "iter_000003.safetensors").exists()
    assert [e.iteration for e in read_manifest(directory)] == [1, 2]
    assert all(verify(directory, e) == "" for e in read_manifest(directory))
    with pytest.warns(
        RlinfWarning, match=r"removing .*\.iter_000003\.safetensors\..*\.tmp: a checkpoint write that never"
    ):
        loaded = load_latest(directory)
    assert loaded.iteration == 2 and loaded.state["weights"].numel() == 1 << 18
    assert not list(directory.glob(".*.tmp"))  # the partial file is gone, after saying so


def test_corrupt_newest_checkpoint_of_a_killed_run_falls_back(tmp_path: Path) -> None:
    """Flip one byte in the middle of the newest checkpoint a real writer left: loading says so and uses the one
    before."""
    directory = tmp_path / "checkpoints"
    script = textwrap.dedent(
        """
        import sys, torch
        from rlinf.app.checkpoint import save_checkpoint
        for iteration in (1, 2):
            save_checkpoint(sys.argv[1], iteration, {"iteration": iteration, "weights": torch.randn(1 << 16)})
        """
    )
    subprocess.run([sys.executable, "-c", script, str(directory)], check=True, timeout=120)
    newest = directory / "iter_000002.safetensors"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    with pytest.warns(
        RlinfWarning, match=r"iter_000002\.safetensors is corrupt \(the checksum does not match"
    ):
        loaded = load_latest(directory)
    assert loaded.iteration == 1


SMALL_TRAIN = [
    sys.executable,
    "-m",
    "rlinf",
    "train",
    "examples/hopper_ppo.yaml",
    "--no-progress",
    "--set",
    "num_steps=8",
    "--set",
    "num_epochs=2",
    "--set",
    "execution.checkpoint_every=2",
]
"""``rlinf train`` of a small Hopper config that checkpoints every 2 iterations."""
TRAIN = [*SMALL_TRAIN, "--mode", "collocated", "--devices", "1"]


def computed(run_dir: Path) -> list[dict]:
    """Per iteration, every metric that does not measure time (those end in ``_s``)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.endswith("_s")} for line in lines]


def has_checkpoint(run_dir: Path) -> Callable[[], bool]:
    """Whether the run in ``run_dir`` wrote a checkpoint yet."""
    return lambda: (run_dir / "checkpoints").is_dir() and bool(read_manifest(run_dir / "checkpoints"))


def has_metrics(run_dir: Path) -> Callable[[], bool]:
    """Whether the run in ``run_dir`` finished an iteration yet."""
    return lambda: (run_dir / "metrics.jsonl").is_file() and bool((run_dir / "metrics.jsonl").read_text())


def kill_when(
    run: subprocess.Popen, ready: Callable[[], bool], victims: Callable[[], list[int]]
) -> tuple[str, str]:
    """Wait until ``ready()``, SIGKILL the last of ``victims()`` and return ``run``'s output."""
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and run.poll() is None and not ready():
            time.sleep(0.01)
        found = victims()
        assert found, "the training run has no workers to kill"
        os.kill(found[-1], signal.SIGKILL)
        return run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            run.kill()


def descendants(root: int) -> list[int]:
    """Every process below ``root`` in the process tree (children of any of its threads, theirs, and so on)."""
    found: list[int] = []
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(pid) for pid in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            frontier += children
    return found


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid``."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    pids = [int(p) for p in children.read_text().split()] if children.exists() else []
    return [p for p in pids if Path(f"/proc/{p}/cmdline").exists()]


def local_workers(pid: int) -> list[int]:
    """A local-backend run's worker processes: the children of the fork server that ``pid`` (the run's driver)
    started (:data:`executor.local.FORKSERVER_PRELOAD`)."""
    workers = []
    for child in _children(pid):
        try:
            if b"multiprocessing.forkserver" in Path(f"/proc/{child}/cmdline").read_bytes():
                workers += _children(child)
        except OSError:
            continue
    return workers


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """What 6 undisturbed iterations of ``TRAIN`` with 32 steps per env compute (checkpointing does not change it:
    the runs below checkpoint every 2 iterations or never)."""
    out = tmp_path_factory.mktemp("undisturbed") / "run"
    subprocess.run(
        [*TRAIN, "--set", "num_steps=32", "--iterations", "6", "--out", str(out)], check=True, timeout=300
    )
    return computed(out)


def test_worker_killed_mid_training_then_resume_matches_an_uninterrupted_run(
    tmp_path: Path, undisturbed: list[dict]
) -> None:
    """Run B (asked for 50, no automatic restarts) loses a worker to SIGKILL right after its checkpoint of
    iteration 2 and stops with an error naming the worker; ``--resume`` continues B to iteration 4. Iterations 3
    and 4 of B compute exactly what an undisturbed run computed (bitwise: CPU, one torch thread per worker, every
    RNG and MuJoCo state restored; only timings differ)."""
    broken = tmp_path / "broken"
    command = [*TRAIN, "--set", "num_steps=32"]  # iterations long enough to kill between checkpoints 2 and 4
    run = subprocess.Popen(
        [*command, "--iterations", "50", "--max-restarts", "0", "--out", str(broken)],
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = kill_when(run, has_checkpoint(broken), lambda: local_workers(run.pid))
    assert run.returncode == 2 and "failed while running" in err and "exited with code -9" in err, err
    assert [e.iteration for e in read_manifest(broken / "checkpoints")] == [2]
    subprocess.run(
        [*command, "--iterations", "4", "--resume", str(broken)], check=True, timeout=300, capture_output=True
    )
    assert [m["iteration"] for m in computed(broken)] == [1, 2, 3, 4]
    assert computed(broken) == undisturbed[:4]
    assert undisturbed[2] != undisturbed[1]


def test_a_worker_killed_before_the_first_checkpoint_costs_a_restart_not_the_run(
    tmp_path: Path, undisturbed: list[dict]
) -> None:
    """No checkpoint yet (``checkpoint_every`` 100): a worker killed after iteration 1 makes the run restart its
    workers from scratch and go on by itself; it finishes with exit code 0, says what happened on stderr, and
    computes what an undisturbed run computes."""
    survived = tmp_path / "survived"
    command = [*TRAIN, "--set", "execution.checkpoint_every=100", "--set", "num_steps=32"]
    command += ["--iterations", "6"]
    run = subprocess.Popen(
        [*command, "--out", str(survived)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _, err = kill_when(run, has_metrics(survived), lambda: local_workers(run.pid))
    assert run.returncode == 0, err
    assert re.search(r"exited with code -9; restarted the workers at iteration 1 \(2 restarts left\)", err), (
        err
    )
    assert [m["iteration"] for m in computed(survived)] == [1, 2, 3, 4, 5, 6]
    assert computed(survived) == undisturbed
