"""A stalled run ends cleanly (issue 48): ``rlinf train`` with a worker that never answers exits with code 2 within
the watchdog's bound, prints one line naming every worker and the op or channel it waits on, keeps the full state
in ``RUN_DIR/stall.json`` and leaves no process behind. A stall is not restarted (``--max-restarts`` is for
workers that fail; a deadlock would only stall again).

The planted stall: the custom-workload example with a critic that sleeps for ever in its second training op, a
real run of real workers, only told where to stop answering."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
import time
from pathlib import Path

from test_failure_exit import REPO, alive, run_watched

WATCHDOG_S = 3.0
EXIT_SLACK_S = 7.0
"""Besides the bound: the driver's stack dump (0.5 s), stopping the workers, writing the state and exiting."""

STALLING_WORKLOAD = textwrap.dedent(
    """
    import pathlib, time

    import ppo_critic as example  # a copy of examples/custom_workload/ppo_critic.py beside this file


    class StallingCritic(example.Critic):
        trained = 0

        def compute(self, op_name, micro_batch, step, inputs):
            if op_name == "train":
                self.trained += 1
                if self.trained == 2:
                    pathlib.Path({marker!r}).write_text(repr(time.time()))
                    time.sleep(3600)  # never answers
            return super().compute(op_name, micro_batch, step, inputs)


    class Stalling(example.PPOCritic):
        def workers(self, config):
            return {{**super().workers(config), "critic": StallingCritic}}


    WORKLOAD = Stalling()
    """
)


def test_a_stalled_run_exits_2_within_the_bound_naming_each_worker_with_its_state_kept(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "stalled_at"
    shutil.copy(REPO / "examples/custom_workload/ppo_critic.py", tmp_path / "ppo_critic.py")
    (tmp_path / "stalling.py").write_text(STALLING_WORKLOAD.format(marker=str(marker)))
    config = tmp_path / "config.yaml"
    config.write_text(
        "workload: stalling.py:WORKLOAD\nnum_envs: 4\nnum_steps: 16\nhidden: 16\nepochs: 1\n"
        f"execution: {{iterations: 6, checkpoint_every: 100, mode: collocated, watchdog_s: {WATCHDOG_S}}}\n"
    )
    out = tmp_path / "run"
    command = [sys.executable, "-m", "rlinf", "train", str(config), "--devices", "2", "--no-progress"]
    # the default --max-restarts (3): a stall is not restarted
    run, err, workers = run_watched([*command, "--out", str(out)], marker)
    exited_at = time.time()
    assert marker.exists(), err
    assert exited_at - float(marker.read_text()) < WATCHDOG_S + EXIT_SLACK_S
    assert run.returncode == 2, err
    errors = [line for line in err.splitlines() if line.startswith("rlinf: error:")]
    assert len(errors) == 1 and "Traceback" not in err and "restarted" not in err, err
    line = errors[0]
    state = out / "stall.json"
    assert line.startswith(f"rlinf: error: no op finished for 3 s (watchdog {WATCHDOG_S:.0f} s")
    assert line.endswith(f"; state: {state}")
    kept = json.loads(state.read_text())
    names = [w["name"] for w in kept["workers"]]
    assert {n.split("[")[0] for n in names} == {"env", "policy", "critic", "actor"}
    assert all(f"{w['name']} {w['doing']}" in line for w in kept["workers"])  # each worker, what it does
    critic = next(w for w in kept["workers"] if w["doing"] == "runs critic.train")
    assert "stalling.py" in critic["stack"] and "in compute" in critic["stack"]  # where it sleeps
    assert any(w["doing"].startswith("waits for critic.train from critic[") for w in kept["workers"])
    assert all(w["pid"] in workers for w in kept["workers"])
    assert workers, "no worker process was seen"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(pid) for pid in workers):
        time.sleep(0.05)
    assert not [pid for pid in workers if alive(pid)], "worker processes outlived the run"
