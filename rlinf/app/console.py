"""What a user reads while a run goes and when it ends.

In a terminal, one progress bar (on stderr) with the running figures and nothing else per iteration. Elsewhere (a
log file, a CI console: stderr is not a terminal), or with ``--no-progress``, no bar at all: one line on stdout
every :attr:`Cadence.every_iterations` iterations or :attr:`Cadence.every_s` seconds, whichever comes first, and
at the first iteration, the last and each change of phase (fill, steady, drain). The bar and the lines never share
a run, so they never interleave into one stream. ``RLINF_LOG_EVERY`` sets the cadence: ``20`` (iterations) or
``30s`` (seconds).

The closing summary (:func:`closing_summary`) states the workload's own summary of the last iterations (for an RL
workload: the mean return of the episodes they finished) and how the prediction held (measured / predicted - 1).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TextIO

import attrs

from rlinf.core.errors import ConfigError
from rlinf.core.schedule import Phase

ENV_LOG_EVERY = "RLINF_LOG_EVERY"
RECENT_ITERATIONS = 10
"""Iterations the closing summary speaks of: the last ten that sampled and trained (fewer in a shorter run)."""

Progress = bool | Literal["lines"]
"""How a run shows its progress: ``True`` a bar in a terminal, else lines; ``"lines"`` lines even in a terminal
(``--no-progress``); ``False`` nothing (a caller that prints its own report, such as ``rlinf validate --json``)."""


@attrs.frozen(kw_only=True)
class Cadence:
    """How often a run without a bar prints a line."""

    every_iterations: int = 10
    """A line every this many iterations."""
    every_s: float = 60.0
    """... or when this many seconds passed since the last line, whichever comes first."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Cadence:
        """The default cadence, or the one ``RLINF_LOG_EVERY`` gives (``N`` iterations or ``Ns`` seconds)."""
        text = (os.environ if environ is None else environ).get(ENV_LOG_EVERY, "").strip()
        if not text:
            return cls()
        seconds = text.endswith("s")
        try:
            value = float(text[:-1]) if seconds else int(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise ConfigError(
                ENV_LOG_EVERY, text, "is not a positive number of iterations or seconds",
                f"set {ENV_LOG_EVERY} to e.g. 20 (iterations) or 30s (seconds)",
            )  # fmt: skip
        if seconds:
            return cls(every_iterations=sys.maxsize, every_s=value)
        return cls(every_iterations=int(value), every_s=float("inf"))


class Console:
    """The progress of one run of ``total`` iterations: a bar, or lines at a :class:`Cadence`, or nothing."""

    def __init__(
        self, *, total: int, initial: int, desc: str, bar: bool, quiet: bool = False, cadence: Cadence | None = None,
        clock: Callable[[], float] = time.monotonic, lines: TextIO | None = None, notes: TextIO | None = None,
    ) -> None:  # fmt: skip
        """``bar``: a tqdm bar on ``notes`` (stderr); else, unless ``quiet``, lines on ``lines`` (stdout) at the
        ``cadence`` (:meth:`Cadence.from_env` by default) timed by ``clock``."""
        self.total, self.quiet, self.clock = total, quiet, clock
        self.cadence = cadence or Cadence.from_env()
        self.lines, self.notes = lines or sys.stdout, notes or sys.stderr
        self.bar: Any = None
        if bar and not quiet:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit="it", file=self.notes)
        self.last_line_at = clock()
        self.last_line_iteration = initial
        self.phase: Phase | None = None

    @classmethod
    def open(cls, *, total: int, initial: int, desc: str, progress: Progress) -> Console:
        """The console of a run: a bar when ``progress`` is ``True`` and stderr is a terminal, else lines (none
        when ``progress`` is ``False``)."""
        terminal = sys.stderr.isatty()
        return cls(
            total=total, initial=initial, desc=desc, bar=progress is True and terminal, quiet=not progress
        )

    def iteration(
        self, iteration: int, figures: Mapping[str, str], line: str, *, phase: Phase = Phase.STEADY
    ) -> None:
        """Iteration ``iteration`` is done: the bar moves and shows ``figures``; without a bar, ``line`` is printed
        when one is due (the first iteration, the last, a new phase, or the cadence's count or seconds reached)."""
        if self.bar is not None:
            self.bar.update(iteration - self.bar.n)
            self.bar.set_postfix(dict(figures))
            return
        if self.quiet:
            return
        now = self.clock()
        due = (
            self.phase != phase
            or iteration >= self.total
            or iteration - self.last_line_iteration >= self.cadence.every_iterations
            or now - self.last_line_at >= self.cadence.every_s
        )
        self.phase = phase
        if due:
            print(line, file=self.lines, flush=True)
            self.last_line_at, self.last_line_iteration = now, iteration

    def note(self, text: str, *, at: int | None = None) -> None:
        """A message on stderr that must not wait for the cadence (a restart); ``at``: the iteration the run goes
        back to."""
        if self.bar is not None:
            if at is not None:
                self.bar.n = at
                self.bar.refresh()
            self.bar.write(text, file=self.notes)
        else:
            print(text, file=self.notes, flush=True)
        if at is not None:
            self.last_line_iteration = at

    def close(self) -> None:
        """Take the bar down."""
        if self.bar is not None:
            self.bar.close()


def iteration_line(metrics: Mapping[str, Any], fields: Mapping[str, str]) -> str:
    """One iteration as a line: its measured time (against the prediction, when there is one) and the workload's
    headline ``fields``. A fill or drain step under a staleness bound runs one side alone, so it is not compared
    with the plan's steady-state prediction."""
    measured = metrics["iteration_s"]
    shown = ", ".join(f"{key} {value}" for key, value in fields.items())
    phase = Phase.of_record(metrics)
    if phase is not Phase.STEADY:
        return (
            f"step {metrics['iteration']} ({phase.value}, {phase.label}): measured {measured:.4f} s; {shown}"
        )
    predicted = metrics.get("predicted_iteration_s")
    if predicted is None:
        return f"iteration {metrics['iteration']}: measured {measured:.4f} s; {shown}"
    return (
        f"iteration {metrics['iteration']}: measured {measured:.4f} s = predicted {predicted:.4f} s "
        f"{100 * (measured / predicted - 1):+.1f}%; {shown}"
    )


def iteration_figures(metrics: Mapping[str, Any], fields: Mapping[str, str]) -> dict[str, str]:
    """The bar's running figures: the workload's headline ``fields`` and, with a prediction, the measured and
    predicted seconds of the iteration."""
    if metrics.get("predicted_iteration_s") is None:
        return dict(fields)
    return {
        **fields,
        "it_s": f"{metrics['iteration_s']:.3f}",
        "pred_s": f"{metrics['predicted_iteration_s']:.3f}",
    }


def recent_metrics(
    metrics: Sequence[Mapping[str, Any]], count: int = RECENT_ITERATIONS
) -> list[Mapping[str, Any]]:
    """The metrics of the last ``count`` iterations that both sampled and trained (under a staleness bound the
    last steps only drain the buffer, the first only fill it), oldest first; the last iteration when none did.
    Where iterations report finished episodes (``episodes``) and none of those finished one (a policy that learnt
    to stay up runs episodes longer than ten iterations), the window reaches back to the ``count``-th last
    iteration that finished one, so a summary states the policy's recent return rather than none."""
    steady = [m for m in metrics if Phase.of_record(m) is Phase.STEADY]
    if not steady:
        return list(metrics[-1:])
    window = steady[-count:]
    if any("episodes" in m for m in window) and not any(m.get("episodes") for m in window):
        finishing = [i for i, m in enumerate(steady) if m.get("episodes")]
        if finishing:
            window = steady[finishing[max(0, len(finishing) - count)] :]
    return window


def closing_summary(
    *,
    plan: str,
    iterations: int,
    workload_summary: str,
    prediction: Mapping[str, Any] | None,
    run_dir: str,
) -> str:
    """The line a run ends with: the plan, the iterations, the workload's summary of its last iterations, and
    how the prediction held (``prediction``: ``prediction.json``; ``None`` when nothing was predicted)."""
    held = (
        "no prediction (a fixed plan)"
        if prediction is None
        else f"prediction bias {100 * prediction['bias']:+.1f}% (measured / predicted - 1)"
    )
    return f"{plan}: {iterations} iterations, {workload_summary}; {held}; wrote {run_dir}"


class WorkProgress:
    """The progress of one long computation counted in units of work (``rlinf trace synth``: responses decoded),
    called as ``progress(done, total)``: a bar on stderr in a terminal, else a line on stderr at each tenth of the
    work, so that a log shows the command is alive and how far it got."""

    def __init__(
        self, desc: str, unit: str, *, bar: bool | None = None, stream: TextIO | None = None
    ) -> None:
        self.desc, self.unit = desc, unit
        self.stream = stream or sys.stderr
        self.use_bar = self.stream.isatty() if bar is None else bar
        self.bar: Any = None
        self.tenths_shown = 0
        self.started = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        if self.use_bar:
            if self.bar is None:
                from tqdm import tqdm

                self.bar = tqdm(
                    total=total, desc=self.desc, unit=self.unit, unit_scale=True, file=self.stream
                )
            self.bar.update(done - self.bar.n)
            return
        if done == 0:
            print(f"{self.desc}: {total:,} {self.unit} to go", file=self.stream, flush=True)
            return
        tenths = 10 * done // max(total, 1)
        if tenths > self.tenths_shown:
            self.tenths_shown = tenths
            elapsed = time.monotonic() - self.started
            print(
                f"{self.desc}: {100 * done // max(total, 1)}% ({done:,} of {total:,} {self.unit}) "
                f"after {elapsed:.0f} s",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        """Take the bar down."""
        if self.bar is not None:
            self.bar.close()
