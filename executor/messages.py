"""Every message of the executor, as typed classes: driver <-> worker control and worker -> worker signals.

A run goes like this: the driver sends each worker a :class:`Prepare`, then one :class:`RunLane` holding the
commands of that worker's lane (its ops of the iteration, in program order). The worker runs them one after the
other; before each it waits for the :class:`Done` signals of the ops it must follow (the program's release graph)
from the other workers that run them, and after each it signals the workers whose next ops follow it. Payloads
go straight from producer to consumer (:mod:`executor.channels`). The driver only collects :class:`Records`
(sent in batches: every :data:`executor.runtime.FLUSH_EVERY_S` and at the lane's end; on Ray also before each
wait) and a :class:`Failed` when an op raises, then sends :class:`EndRun`. Between runs it sends
:class:`Call` (checkpoint, restore) and finally :class:`Shutdown`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

Push = tuple[int, int, int]
"""``(consumer worker, consumer rank, consumer world)``: a replica that receives part of an op's output (rank and
world among the workers of the consumer's op: all replicas of its component, or one for a pinned loop step)."""


# ---------------------------------------------------------------- commands (the entries of a lane)
@attrs.frozen(kw_only=True)
class Command:
    """One op on one worker. ``waits`` lists the ``(op, worker)`` completions to wait for first (other workers'
    ops that this op follows); ``notify`` the workers to signal when this worker's part of the op is done."""

    op: int
    waits: tuple[tuple[int, int], ...] = ()
    notify: tuple[int, ...] = ()


@attrs.frozen(kw_only=True)
class Compute(Command):
    """Run ``worker.compute(name, micro_batch, step, inputs)`` on the payloads of ``inputs``
    (``(producer op, producer worker)`` keys), keep the output and send each consumer in ``pushes`` its rows."""

    name: str
    micro_batch: int
    step: int
    inputs: tuple[tuple[int, int], ...] = ()
    pushes: tuple[Push, ...] = ()
    share: tuple[int, int] = (0, 1)
    """``(rank, world)`` of this worker among the op's workers: which part of the micro-batch its output is."""
    lagged: tuple[tuple[int, int], ...] = ()
    """``(producer op, producer worker)`` outputs read from the run :attr:`RunLane.lag` runs before (a training
    component's buffered input under a staleness bound), after ``inputs``."""
    lagged_pushes: tuple[Push, ...] = ()
    """Consumers that read this op's output :attr:`RunLane.lag` runs later (it waits in their buffer)."""


@attrs.frozen(kw_only=True)
class Send(Command):
    """A transfer op: send the kept output of ``source_op`` to ``pushes``."""

    source_op: int
    pushes: tuple[Push, ...] = ()
    share: tuple[int, int] = (0, 1)
    """``(rank, world)`` of this worker among the workers of ``source_op``."""
    lagged_pushes: tuple[Push, ...] = ()
    """Consumers that read the output :attr:`RunLane.lag` runs later."""


@attrs.frozen(kw_only=True)
class Onload(Command):
    """Move the worker's state back onto its device (and load weights that arrived while it was offloaded)."""


@attrs.frozen(kw_only=True)
class Offload(Command):
    """Move the worker's state to host memory."""


@attrs.frozen(kw_only=True)
class SyncSend(Command):
    """Send this worker's weights to ``destinations`` (rank 0 of the weight source)."""

    destinations: tuple[int, ...]


@attrs.frozen(kw_only=True)
class SyncRecv(Command):
    """Receive weights from worker ``source`` and load them (or keep them until the next onload)."""

    source: int


@attrs.frozen(kw_only=True)
class Hold(Command):
    """Occupy this worker's device for the span of a weight sync it takes no part in (other source ranks)."""


# ---------------------------------------------------------------- driver -> worker
@attrs.frozen
class Prepare:
    """Put ``worker``'s state where the next run expects it, untimed: offloaded (``True``) or on the device."""

    offloaded: bool
    worker: int
    """Which of the process's workers (a local process may host several, :mod:`executor.local`)."""


@attrs.frozen
class RunLane:
    """``worker``'s lane: run these commands, in order, as run ``run_id``; ``None``: the same lane as the previous
    run (the driver sends a lane once per program, not every iteration). A process that hosts several workers runs
    once it holds the lanes of all of them, merged in program order."""

    run_id: int
    commands: tuple[Command, ...] | None
    worker: int
    skip: frozenset[int] = frozenset()
    """Workers that sit this run out (their commands only signal): under a staleness bound, the training side
    while the rollout side fills the buffer, and the rollout side while the training side drains it."""
    lag: int = 0
    """The program's staleness bound: lagged inputs come from the run this many runs before."""
    version: int = 0
    """The policy version of the run's step (:attr:`rlinf.core.schedule.Step.policy_version`): what the
    worker's outputs are stamped with, and the version it reads its inputs at."""


@attrs.frozen
class EndRun:
    """The run is over: forget its outputs and received payloads (sent once per process)."""

    run_id: int


@attrs.frozen
class Call:
    """Call a worker method between runs (``checkpoint``, ``restore``) and answer with a :class:`Result`."""

    method: str
    args: tuple
    worker: int


@attrs.frozen
class Shutdown:
    """Free what the process's workers hold and stop (sent once per process)."""


# ---------------------------------------------------------------- worker -> driver
@attrs.frozen
class Ready:
    """The worker is set up (or prepared) and holds ``resident`` state bytes on its device."""

    worker: int
    resident: int


@attrs.frozen(kw_only=True)
class Record:
    """One finished command: measured span, the info the worker attached, state bytes held after it, bytes
    moved."""

    op: int
    start: float
    end: float
    info: Mapping[str, Any] = attrs.field(factory=dict)
    resident: int = 0
    moved: int = 0
    busy: float = 0.0
    """Seconds of the span spent in the worker's own code (``compute``); the rest is the executor's."""


@attrs.frozen
class Records:
    """A batch of finished commands of one worker, in the order it ran them."""

    worker: int
    records: tuple[Record, ...]


@attrs.frozen
class Failed:
    """Op ``op`` (``-1``: setup) raised on ``worker``."""

    worker: int
    op: int
    description: str
    traceback: str


@attrs.frozen
class Result:
    """The answer to a :class:`Call`."""

    worker: int
    value: Any


ToDriver = Ready | Records | Failed | Result
ToWorker = Prepare | RunLane | EndRun | Call | Shutdown


# ---------------------------------------------------------------- worker -> worker
def done_key(run_id: int, op: int, worker: int) -> tuple:
    """Mailbox key of the signal "``worker`` finished its part of ``op`` in run ``run_id``" (empty payload)."""
    return ("done", run_id, op, worker)


def data_key(run_id: int, op: int, worker: int) -> tuple:
    """Mailbox key of the rows of ``op``'s output that ``worker`` sends (also a weight sync's weights)."""
    return (run_id, op, worker)


def buffer_key(run_id: int, op: int, worker: int) -> tuple:
    """Mailbox key of the rows of ``op``'s output that ``worker`` sent in run ``run_id`` for a consumer that reads
    them in a later run (kept across runs until read)."""
    return ("buffer", run_id, op, worker)


BUFFERED = "rlinf.executor.buffered"
"""The :class:`Call` method that returns a worker's buffered inputs (for a checkpoint)."""
REBUFFER = "rlinf.executor.rebuffer"
"""The :class:`Call` method that puts buffered inputs back (restoring a checkpoint)."""
