"""The executor's watchdog: a run in which no op has finished anywhere for a bounded time is stopped, and what every
worker was doing is reported.

The bound (:meth:`Watchdog.bound_s`) is scaled from the op times the run is expected to take, the longest of the
plan's predicted ops (when the caller has a prediction) and of the ops measured in earlier runs of the same program,
with a floor for runs where nothing is known yet. Silence longer than that is a stall, not a slow op: the driver
reads what each worker is doing from a :class:`StatusBoard` (shared memory the worker processes write at each step,
locally; on Ray only the first op a worker has not reported is known) and, locally, each worker process's Python
stack (``faulthandler`` on ``SIGUSR1``); it stops every worker and raises :class:`StallError`, whose one line names
each worker and the op or channel it waits on and whose :attr:`StallError.report` holds the full state (the run
directory gets it as ``stall.json``, :mod:`rlinf.app.runner`). A run may also carry a deadline (a probe's share of
a profile budget): past it the run is stopped with :class:`OutOfTime`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from executor.dispatch import WorkerError
from rlinf.core.errors import require

DEFAULT_FLOOR_S = 60.0
"""The least silence that counts as a stall: a first iteration's lazy set-up (the first env step, the first
optimizer step, a GPU's kernels compiled) runs one op much longer than later ones."""
DEFAULT_FACTOR = 10.0
"""The silence allowed, in multiples of the longest expected op: a shared machine slows single ops several times."""


@attrs.frozen(kw_only=True)
class Watchdog:
    """When a run counts as stalled."""

    floor_s: float = DEFAULT_FLOOR_S
    """The bound when no op time is known, and the least bound otherwise (seconds)."""
    factor: float = DEFAULT_FACTOR
    """The bound is this many times the longest expected op, when that is more than the floor."""

    def __attrs_post_init__(self) -> None:
        require(
            self.floor_s > 0, "execution.watchdog_s", self.floor_s, "must be > 0", "give seconds, e.g. 60"
        )
        require(self.factor >= 1, "watchdog factor", self.factor, "must be >= 1", "use e.g. 10")

    def bound_s(self, longest_op_s: float | None) -> float:
        """Seconds without a finished op after which a run with ops of up to ``longest_op_s`` seconds has stalled
        (``None``: no op time known)."""
        return max(self.floor_s, self.factor * (longest_op_s or 0.0))


# ---------------------------------------------------------------- what a worker is doing
IDLE, RUNNING, LOCK, WAITING, SENDING = range(5)
"""The states of :class:`StatusBoard`: between ops (or done with its lane), running an op, waiting for its device's
lock, waiting for another worker's signal, writing an op's outputs into a full pipe."""
_STATE_NAMES = ("idle", "runs", "waits for its device lock to run", "waits", "sends")
_FIELDS = 3
"""Per worker: state and op in one int (``state << 24 | op + 1``, written at once), then the other worker's op and
the other worker (what it waits for or sends to)."""
_OP_BITS = 24


class StatusBoard:
    """What each worker of a local run is doing, in a shared array the worker processes write and the driver reads
    (one or two int writes per op: the hot path stays cheap)."""

    def __init__(self, array: Any) -> None:
        self.array = array
        """``multiprocessing`` ``RawArray("i", FIELDS * workers)``."""

    @staticmethod
    def size(num_workers: int) -> int:
        """Ints for ``num_workers`` workers."""
        return _FIELDS * num_workers

    def set(self, worker: int, state: int, op: int = -1) -> None:
        """``worker`` is in ``state`` for ``op`` (``-1``: none)."""
        self.array[_FIELDS * worker] = state << _OP_BITS | (op + 1)

    def set_peer(self, worker: int, state: int, op: int, peer_op: int, peer: int) -> None:
        """``worker`` is in ``state`` for ``op``, with respect to ``peer``'s ``peer_op`` (waiting for its signal)
        or to ``peer`` itself (``peer_op`` ``-1``: sending to it)."""
        base = _FIELDS * worker
        self.array[base + 1] = peer_op
        self.array[base + 2] = peer
        self.array[base] = state << _OP_BITS | (op + 1)

    def mark(self, worker: int, state: int, peer: int) -> None:
        """Keep ``worker``'s op, switch it to ``state`` with respect to ``peer`` (a write that found a full pipe)."""
        base = _FIELDS * worker
        self.array[base + 1] = -1
        self.array[base + 2] = peer
        self.array[base] = state << _OP_BITS | (self.array[base] & ((1 << _OP_BITS) - 1))

    def read(self, worker: int) -> tuple[int, int, int, int]:
        """``(state, op, peer op, peer)`` of ``worker`` (``-1`` where none)."""
        base = _FIELDS * worker
        word = int(self.array[base])
        state, op = word >> _OP_BITS, (word & ((1 << _OP_BITS) - 1)) - 1
        if state in (WAITING, SENDING):
            return state, op, int(self.array[base + 1]), int(self.array[base + 2])
        return state, op, -1, -1

    def current_ops(self, num_workers: int) -> dict[int, int]:
        """Per worker that is inside an op (running, waiting for its lock, sending its outputs), that op."""
        out = {}
        for worker in range(num_workers):
            state, op, _, _ = self.read(worker)
            if state in (RUNNING, LOCK, SENDING) and op >= 0:
                out[worker] = op
        return out


@attrs.frozen(kw_only=True)
class WorkerState:
    """One worker at the moment a run stalled."""

    name: str
    """``component[rank]``."""
    doing: str
    """What it does, in words: ``runs actor.train``, ``waits for rollout.act[1]@5 from rollout[1]``, ``sends
    env.env_step[0]@3's outputs to actor[1] (pipe full)``, ``idle (lane done)``."""
    reported: int
    """Commands of its lane it had reported done."""
    lane: int
    """Commands in its lane."""
    pid: int | None = None
    stack: str = ""
    """Its process's Python stack (every thread), where the backend can take it."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return attrs.asdict(self)


@attrs.frozen(kw_only=True)
class StallReport:
    """The state of a stalled run."""

    silent_s: float
    """Seconds since the last op finished (the driver's view)."""
    bound_s: float
    """The watchdog's bound for this run."""
    floor_s: float
    """The watchdog's floor."""
    factor: float
    """The watchdog's multiple of the longest expected op."""
    longest_op_s: float | None
    """The longest expected op the bound was scaled from (``None``: none known, the floor applied)."""
    workers: tuple[WorkerState, ...]
    where: str = ""
    """Where the full state was written (the caller's run directory), when it was."""

    def line(self) -> str:
        """One line: the silence, the bound, and each worker with what it waits on."""
        if not self.longest_op_s:
            scaled = f"{self.bound_s:.0f} s: the floor, no op time known"
        elif self.bound_s > self.floor_s:
            scaled = (
                f"{self.bound_s:.0f} s: {self.factor:g} x the longest expected op, {self.longest_op_s:.3g} s"
            )
        else:
            scaled = f"{self.bound_s:.0f} s: the floor; {self.factor:g} x the longest expected op, "
            scaled += f"{self.longest_op_s:.3g} s, is less"
        doing = "; ".join(f"{w.name} {w.doing}" for w in self.workers)
        kept = f"; state: {self.where}" if self.where else ""
        return f"no op finished for {self.silent_s:.0f} s (watchdog {scaled}): {doing}{kept}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "silent_s": self.silent_s,
            "bound_s": self.bound_s,
            "floor_s": self.floor_s,
            "factor": self.factor,
            "longest_op_s": self.longest_op_s,
            "line": self.line(),
            "workers": [w.to_dict() for w in self.workers],
        }


class StallError(WorkerError):
    """No op finished for the watchdog's bound; the workers have been stopped. ``report`` holds the state."""

    def __init__(self, report: StallReport) -> None:
        super().__init__(report.line())
        self.report = report


class OutOfTime(WorkerError):
    """A run passed the deadline it was given (a probe's share of the profile budget); the workers have been
    stopped."""


def describe_status(
    status: tuple[int, int, int, int],
    labels: Mapping[int, str],
    names: Mapping[int, str],
    unreported: str | None,
) -> str:
    """What a worker does, in words, from its :class:`StatusBoard` entry (``labels``: op -> label, ``names``:
    worker -> name, ``unreported``: the first op of its lane it has not reported, ``None`` when it reported them
    all)."""
    state, op, peer_op, peer = status
    if state == WAITING:
        return f"waits for {labels.get(peer_op, f'op {peer_op}')} from {names.get(peer, f'#{peer}')}"
    if state == SENDING:
        return f"sends {labels.get(op, f'op {op}')}'s outputs to {names.get(peer, f'#{peer}')} (pipe full)"
    if state in (RUNNING, LOCK):
        return f"{_STATE_NAMES[state]} {labels.get(op, f'op {op}')}"
    return "idle (lane done)" if unreported is None else f"idle (first op not reported: {unreported})"
