"""Asynchrony in one place: a training run's steps (:class:`Schedule`), each with its :class:`Phase` and policy
version, and the :class:`Stamp` the executor puts on every batch it moves.

A run of ``N`` iterations under a staleness bound ``k`` (:attr:`rlinf.core.program.Program.max_staleness`) takes
``N + k`` steps, one run of the program each: ``k`` *fill* steps (the rollout side alone, while the training side's
buffer fills), *steady* steps (both sides: the rollout side produces iteration ``s`` while the trainers train on
the batch produced ``k`` steps before) and ``k`` *drain* steps (the training side alone): every batch produced is
trained on once. Without a bound every step is steady. The simulator (:func:`simulator.simulate`), the executor
(:func:`executor.run`) and the runner read the phase from here; only :class:`Phase` names them.

The *policy version* of a step is the number of training steps taken before it: the version of the weights the
rollout side samples with during the step (the trainers sync their weights at the end of each step they train),
and of the trainers' weights before they train in it. The executor stamps every batch it moves with the version
that produced it (:class:`Stamp`; a weight sync with the version it carries, one more) and refuses a batch read
more than ``k`` versions after it was produced (:func:`check_lag`). Workers read the stamp
(:func:`stamp_of`, re-exported by :mod:`rlinf.api`); they never count versions themselves.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

import attrs


class Phase(enum.Enum):
    """Who works in a step of a run under a staleness bound. The values are what metrics and files record."""

    FILL = "fill"
    """The rollout side alone: the trainers sit out while their buffer fills."""
    STEADY = "steady"
    """Both sides (always, without a staleness bound)."""
    DRAIN = "drain"
    """The training side alone: it trains on the last buffered batches."""

    def idle(self, components: Iterable[str], trainer_side: Collection[str]) -> frozenset[str]:
        """The components of ``components`` that sit a step of this phase out: none in a steady step, the
        training side's (``trainer_side``, :attr:`rlinf.core.program.Program.trainer_side`) in a fill step, every
        other component in a drain step. Without a staleness bound ``trainer_side`` is empty and only steady
        steps occur."""
        if self is Phase.STEADY or not trainer_side:
            return frozenset()
        return frozenset(c for c in components if (c in trainer_side) == (self is Phase.FILL))

    @property
    def label(self) -> str:
        """Who works, for a person: ``the rollout side alone`` / ``both sides`` / ``the training side alone``."""
        return {
            Phase.FILL: "the rollout side alone",
            Phase.STEADY: "both sides",
            Phase.DRAIN: "the training side alone",
        }[self]

    @classmethod
    def of_record(cls, record: Mapping[str, Any]) -> Phase:
        """The phase a metrics record (one line of ``metrics.jsonl``) states; steady when it states none (a
        synchronous run's records, and every record written before phases were recorded)."""
        return cls(record.get("phase", cls.STEADY.value))


@attrs.frozen(kw_only=True)
class Step:
    """One step of a run: one run of the program."""

    number: int
    """From 1."""
    phase: Phase
    policy_version: int
    """Training steps taken before this step: the version of the weights the rollout side samples with, and of
    the trainers' weights before they train in it."""
    produced_iterations: int
    """Iterations whose batch the rollout side has produced after this step (a drain step produces none)."""
    trained_iterations: int
    """Iterations trained after this step."""

    @property
    def synced_version(self) -> int:
        """The version of the weights a weight sync of this step carries (:func:`synced_version`)."""
        return synced_version(self.policy_version)

    @property
    def measures_plan(self) -> bool:
        """Whether both sides work, so the step's time is the plan's (fill and drain steps leave one side idle)."""
        return self.phase is Phase.STEADY


@attrs.frozen(kw_only=True)
class Schedule:
    """The steps of a training run of ``num_iterations`` under the staleness bound ``max_staleness``."""

    num_iterations: int = attrs.field(validator=attrs.validators.ge(0))
    max_staleness: int = attrs.field(default=0, validator=attrs.validators.ge(0))

    @property
    def num_steps(self) -> int:
        """``num_iterations + max_staleness``: the bound adds ``k`` steps (fill, then drain)."""
        return self.num_iterations + self.max_staleness

    def step(self, number: int) -> Step:
        """Step ``number`` (from 1; past :attr:`num_steps`, a drain step with nothing left to train)."""
        if number < 1:
            raise ValueError(f"step {number}: steps count from 1")
        k, n = self.max_staleness, self.num_iterations
        if number <= k:
            phase = Phase.FILL
        elif number > n:
            phase = Phase.DRAIN
        else:
            phase = Phase.STEADY
        return Step(
            number=number,
            phase=phase,
            policy_version=max(0, min(number - 1 - k, n)),
            produced_iterations=min(number, n),
            trained_iterations=max(0, min(number - k, n)),
        )

    def steps(self, first: int = 1) -> Iterator[Step]:
        """The steps from ``first`` to the last."""
        return (self.step(number) for number in range(first, self.num_steps + 1))

    def __iter__(self) -> Iterator[Step]:
        return self.steps()


def synced_version(policy_version: int) -> int:
    """The version of the weights a weight sync carries in a step of ``policy_version``: the trainers' after the
    step's training (a sync ends the step, after the trainers trained, :mod:`rlinf.core.lowering`)."""
    return policy_version + 1


def synchronous_step(number: int) -> Step:
    """Step ``number`` of a run without a staleness bound and without an end (the executor's default when it is
    not told the step: each run of a backend one more)."""
    return Schedule(num_iterations=number).step(number)


# ------------------------------------------------------------------------------------------------ stamps
@attrs.frozen
class Stamp:
    """What the executor stamps on a batch it hands a worker."""

    policy_version: int
    """The version of the weights that produced the batch (of a weight sync: the version it carries)."""
    read_at: int
    """The version of the step that reads it (the reader's weights before this step's training)."""

    @property
    def lag(self) -> int:
        """How many versions the reader is ahead of the weights that produced the batch (0 synchronous, at most
        the plan's ``max_staleness``)."""
        return self.read_at - self.policy_version


UNSTAMPED = Stamp(0, 0)
"""The stamp of a payload that did not come through the executor (a worker called directly, as in a unit test):
produced and read by the initial weights."""


class StampedPayload(dict[str, Any]):
    """A payload as the executor hands it to a worker: its arrays, and the :class:`Stamp` (:func:`stamp_of`)."""

    __slots__ = ("stamp",)

    def __init__(self, arrays: Mapping[str, Any], stamp: Stamp) -> None:
        super().__init__(arrays)
        self.stamp = stamp


def stamp_of(payload: Mapping[str, Any]) -> Stamp:
    """The stamp of a payload a worker received (:meth:`Worker.compute` inputs, :meth:`Worker.load_weights`);
    :data:`UNSTAMPED` for one that did not come through the executor."""
    stamp = getattr(payload, "stamp", None)
    return stamp if isinstance(stamp, Stamp) else UNSTAMPED


class LagBoundError(RuntimeError):
    """A batch read more versions after it was produced than the plan's staleness bound allows (or before it was
    produced): a scheduling bug, or a checkpoint's buffer that does not belong to the run."""


def check_lag(stamp: Stamp, max_staleness: int, reader: str) -> None:
    """Raise :class:`LagBoundError` unless ``stamp`` is at most ``max_staleness`` versions behind its reader
    (``reader``: what reads it, for the message)."""
    if not 0 <= stamp.lag <= max_staleness:
        raise LagBoundError(
            f"{reader} read a batch of policy version {stamp.policy_version} at version {stamp.read_at}: "
            f"{stamp.lag} versions behind, outside the plan's bound 0..{max_staleness} (max_staleness); "
            "a buffer restored from another run's checkpoint? resume with the run's own checkpoints"
        )
