"""The executor's watchdog (issue 48): a run in which no op finishes for a bound scaled from the expected op times
(predicted, or measured in an earlier run), with a floor, is stopped with one line naming what every worker waits
on and its full state; nothing of it is left running. The stall is planted: a real worker that sleeps inside an
op and never answers."""

from __future__ import annotations

import time
from pathlib import Path

import attrs
import pytest
from executor_workers import chain_facts
from fault_workers import HangWorker
from test_executor import HYBRID, chain_program
from test_failure_exit import alive

import executor
from executor.watchdog import Watchdog
from rlinf.core.errors import ConfigError
from rlinf.core.timeline import Timeline


def hang_specs(marker: Path, **hang: object) -> dict[str, executor.WorkerSpec]:
    base = {"seconds": 0.005, "rows": 4}
    planted = {**base, "hang_on": ("reward", 2, 0), "marker": str(marker), "hang_s": 600.0, **hang}
    return {
        name: executor.WorkerSpec(
            factory=HangWorker, facts=chain_facts(name), config=planted if name == "reward" else base
        )
        for name in ("rollout", "reward", "actor")
    }


def stall(backend: executor.LocalBackend, marker: Path, runs: int = 1, **run: object) -> tuple[object, float]:
    """Run the chain program ``runs`` times, the last of which stalls; the StallError and the seconds from the
    planted stall to the error."""
    program = chain_program(HYBRID)
    specs = hang_specs(marker, hang_run=runs)
    for _ in range(runs - 1):
        executor.run(program, specs, backend=backend)
    with pytest.raises(executor.StallError) as caught:
        executor.run(program, specs, backend=backend, **run)
    return caught.value, time.time() - marker.stat().st_mtime


def test_a_planted_stall_stops_the_run_within_the_floor_naming_every_worker(tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    with executor.LocalBackend(executor.cpu_devices(2), watchdog=Watchdog(floor_s=2.0)) as backend:
        error, after_s = stall(backend, marker)
        assert backend.worker_pids() == {}  # the backend stopped its workers
    report = error.report
    assert report.silent_s >= 2.0 and after_s < 2.0 + 3.0  # the bound, plus the stack dump and the stop
    assert report.bound_s == 2.0 and report.longest_op_s is None
    line = str(error)
    assert "\n" not in line and line.startswith("no op finished for 2 s (watchdog 2 s: the floor")
    doing = {w.name: w.doing for w in report.workers}
    assert doing["reward[0]"] == "runs reward.reward[2]"  # the planted stall
    # the other process (rollout[0] and actor[0] on core 0) waits for what reward[0] has not sent
    assert doing["actor[0]"] == "waits for reward->actor.transfer[2] from reward[0]"
    assert doing["rollout[0]"] == "idle (first op not reported: actor->rollout.sync_weights)"
    assert (
        doing["actor[1]"] == "idle (first op not reported: actor.train)"
    )  # beside reward[0], in its process
    assert all(f"{name} {what}" in line for name, what in doing.items())
    stalled = next(w for w in report.workers if w.name == "reward[0]")
    assert "time.sleep" in stalled.stack or "in compute" in stalled.stack  # its process's Python stack
    assert not alive(int(marker.read_text()))


def test_the_bound_scales_with_the_predicted_longest_op(tmp_path: Path) -> None:
    program = chain_program(HYBRID)
    predicted = Timeline(
        program=program,
        start_s=[0.0] * program.num_ops,
        end_s=[0.1] * (program.num_ops - 1) + [1.5],  # one op predicted to take 1.5 s
        peak_memory_bytes=[0] * program.num_devices,
        source="simulated",
    )
    watchdog = Watchdog(floor_s=0.5, factor=2.0)
    with executor.LocalBackend(executor.cpu_devices(2), watchdog=watchdog) as backend:
        error, _ = stall(backend, tmp_path / "pid", expected=predicted)
    assert error.report.longest_op_s == 1.5 and error.report.bound_s == 3.0 and error.report.silent_s >= 3.0
    assert "(watchdog 3 s: 2 x the longest expected op, 1.5 s)" in str(error)


def test_the_bound_scales_with_the_longest_op_measured_in_earlier_runs(tmp_path: Path) -> None:
    watchdog = Watchdog(floor_s=0.5, factor=4.0)
    program = chain_program(HYBRID)
    specs = hang_specs(tmp_path / "pid", hang_run=2)
    specs["actor"] = attrs.evolve(specs["actor"], config={"seconds": 0.4, "rows": 4})  # ops of 0.4 s and more
    with executor.LocalBackend(executor.cpu_devices(2), watchdog=watchdog) as backend:
        first = executor.run(program, specs, backend=backend)
        longest = max(e - s for s, e in zip(first.timeline.start_s, first.timeline.end_s, strict=True))
        with pytest.raises(executor.StallError) as caught:
            executor.run(program, specs, backend=backend)
    assert longest >= 0.4
    assert caught.value.report.longest_op_s == pytest.approx(longest)
    assert caught.value.report.bound_s == pytest.approx(4.0 * longest) and caught.value.report.silent_s >= 1.6


def test_a_run_past_its_deadline_is_stopped(tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    with executor.LocalBackend(executor.cpu_devices(2)) as backend:  # the default floor: 60 s
        started = time.monotonic()
        with pytest.raises(executor.OutOfTime, match="stopped at its deadline"):
            executor.run(chain_program(HYBRID), hang_specs(marker), backend=backend, deadline=started + 3.0)
        assert time.monotonic() - started < 3.0 + 3.0
        assert backend.worker_pids() == {}
    assert not alive(int(marker.read_text()))


def test_watchdog_settings_are_checked() -> None:
    assert Watchdog(floor_s=5.0).bound_s(None) == 5.0
    assert Watchdog(floor_s=5.0).bound_s(0.1) == 5.0
    assert Watchdog(floor_s=5.0, factor=10.0).bound_s(2.0) == 20.0
    with pytest.raises(ConfigError, match=r"execution.watchdog_s=0: must be > 0"):
        Watchdog(floor_s=0)
    with pytest.raises(ConfigError, match=r"must be >= 1"):
        Watchdog(factor=0.5)
