"""What a user reads of a run (:mod:`rlinf.app.console`): without a terminal no bar and one line every N
iterations or seconds; the closing summary states the recent episodes' return and the prediction's bias."""

from __future__ import annotations

import io
import itertools
import math

import pytest

from rlinf.api import episode_mean
from rlinf.app.console import Cadence, Console, closing_summary, iteration_line, recent_metrics
from rlinf.core.errors import ConfigError
from rlinf.workloads.embodied.workload import WORKLOAD as HOPPER


def run_console(steps: int, cadence: Cadence, seconds_per_step: float = 0.0) -> tuple[list[str], str]:
    """The lines and the stderr text of a console without a terminal over ``steps`` steady iterations."""
    lines, notes = io.StringIO(), io.StringIO()
    ticks = itertools.count()
    console = Console(
        total=steps, initial=0, desc="train", bar=False, cadence=cadence, lines=lines, notes=notes,
        clock=lambda: next(ticks) * seconds_per_step,
    )  # fmt: skip
    for iteration in range(1, steps + 1):
        console.iteration(iteration, {"ret": "1.0"}, f"iteration {iteration}: measured 0.1000 s; ret 1.0")
    console.close()
    return lines.getvalue().splitlines(), notes.getvalue()


def test_without_a_terminal_there_is_no_bar_and_one_line_every_n_iterations() -> None:
    lines, notes = run_console(25, Cadence(every_iterations=10, every_s=math.inf))
    # the first, then every 10th after it, and the last
    assert [line.split(":")[0] for line in lines] == [f"iteration {i}" for i in (1, 11, 21, 25)]
    assert notes == ""  # no bar: nothing on stderr, no carriage returns anywhere
    assert not any("\r" in line or "it/s" in line for line in lines)


def test_without_a_terminal_a_line_comes_every_n_seconds() -> None:
    lines, _ = run_console(12, Cadence(every_iterations=1000, every_s=30.0), seconds_per_step=7.0)
    # 7 s per iteration: a line at the first, then once 30 s have passed since the last line, and the last
    assert [line.split(":")[0] for line in lines] == [f"iteration {i}" for i in (1, 6, 11, 12)]


def test_a_run_shows_a_bar_only_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    console = Console.open(total=3, initial=0, desc="train", progress=True)  # stderr is captured: no terminal
    assert console.bar is None and not console.quiet
    console.iteration(1, {}, "iteration 1: measured 0.1000 s; ")
    console.close()
    captured = capsys.readouterr()
    assert captured.out == "iteration 1: measured 0.1000 s; \n" and captured.err == ""
    assert Console.open(total=3, initial=0, desc="train", progress=False).quiet


def test_the_cadence_is_set_by_the_environment() -> None:
    assert Cadence.from_env({}) == Cadence(every_iterations=10, every_s=60.0)
    assert Cadence.from_env({"RLINF_LOG_EVERY": "20"}).every_iterations == 20
    assert Cadence.from_env({"RLINF_LOG_EVERY": "30s"}).every_s == 30.0
    with pytest.raises(ConfigError, match=r"RLINF_LOG_EVERY.*'ten'.*set RLINF_LOG_EVERY to e.g. 20"):
        Cadence.from_env({"RLINF_LOG_EVERY": "ten"})


def hopper_metrics(iteration: int, returns: list[float], phase: str = "steady") -> dict[str, object]:
    return {
        "iteration": iteration, "env_steps": 2048 * iteration, "env_steps_per_s": 900.0, "iteration_s": 2.3,
        "episodes": len(returns), "episodic_return": sum(returns) / len(returns) if returns else None,
        "phase": phase,
    }  # fmt: skip


def test_the_closing_summary_states_the_recent_return_when_the_last_iteration_finished_no_episode() -> None:
    history = [hopper_metrics(i, [10.0 * i] * 2) for i in range(1, 59)]
    history += [hopper_metrics(59, [600.0, 300.0]), hopper_metrics(60, [])]  # the last finished none
    recent = recent_metrics(history)
    assert [m["iteration"] for m in recent] == list(range(51, 61))
    mean, episodes = episode_mean(recent)
    assert episodes == 18 and mean == pytest.approx((2 * sum(10.0 * i for i in range(51, 59)) + 900.0) / 18)
    summary = HOPPER.summary(recent)
    assert f"episodic return {mean:.1f} (mean of the 18 episodes of the last 10 iterations)" in summary
    assert "n/a" not in summary
    line = closing_summary(
        plan="collocated", iterations=60, workload_summary=summary,
        prediction={"bias": 0.031}, run_dir="runs/x",
    )  # fmt: skip
    assert "prediction bias +3.1% (measured / predicted - 1)" in line and "episodic return 534.4 (" in line


def test_when_the_last_iterations_finished_no_episode_the_window_reaches_back_to_ones_that_did() -> None:
    """A policy that learnt to stay up runs episodes longer than ten iterations (the README's main job at 60
    iterations ended 'no episode finished in the last 10 iterations'): the summary still states a return."""
    history = [hopper_metrics(i, [10.0 * i]) for i in range(1, 41)] + [
        hopper_metrics(i, []) for i in range(41, 61)
    ]
    recent = recent_metrics(history)
    assert [m["iteration"] for m in recent] == list(range(31, 61))
    mean, episodes = episode_mean(recent)
    assert episodes == 10 and mean == pytest.approx(sum(10.0 * i for i in range(31, 41)) / 10)
    assert (
        f"episodic return {mean:.1f} (mean of the 10 episodes of the last 30 iterations)"
        in HOPPER.summary(recent)
    )


def test_the_closing_summary_says_so_when_no_episode_finished() -> None:
    recent = recent_metrics([hopper_metrics(1, []), hopper_metrics(2, [])])
    assert "no episode finished in the last 2 iterations" in HOPPER.summary(recent)


def test_drain_steps_are_left_out_of_the_recent_iterations() -> None:
    history = [hopper_metrics(1, [], "fill"), hopper_metrics(2, [5.0]), hopper_metrics(3, [], "drain")]
    assert [m["iteration"] for m in recent_metrics(history)] == [2]
    assert iteration_line({"iteration": 3, "iteration_s": 0.5, "phase": "drain"}, {}).startswith(
        "step 3 (drain, the training side alone)"
    )


def test_in_a_terminal_the_bar_alone_shows_the_running_figures() -> None:
    lines, notes = io.StringIO(), io.StringIO()
    console = Console(total=3, initial=0, desc="train", bar=True, lines=lines, notes=notes)
    for iteration in (1, 2, 3):
        console.iteration(iteration, {"ret": f"{iteration}.5"}, f"iteration {iteration}: measured 0.1000 s")
    console.note("rlinf: a worker failed; restarted the workers at iteration 2", at=1)
    console.close()
    assert lines.getvalue() == ""  # no per-iteration line beside the bar
    assert "3/3" in notes.getvalue() and "ret=3.5" in notes.getvalue()
    assert "restarted the workers at iteration 2" in notes.getvalue()
