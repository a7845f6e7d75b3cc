"""Decode as it happens: one inference-engine replica generating a batch of responses step by step.

Every decode step produces one token for each sequence in flight. A sequence enters when the engine admits it
and leaves at its own drawn length, so the running batch shrinks as the short responses finish and the last steps
of a synchronous rollout run a handful of long responses at a small batch: the straggler tail.

:func:`schedule_decode` follows the scheduling rules of vLLM and SGLang (continuous batching):

* at most ``max_running`` sequences run at once (vLLM ``max_num_seqs``, SGLang ``max_running_requests``);
* a waiting sequence is admitted, in order, while the KV-cache pool has room for the tokens it holds
  (its prompt and what it generated before) plus the one it is about to write;
* every step each running sequence writes one more token to the pool; when the pool cannot hold the next step,
  the most recently admitted sequences are preempted (their KV cache is freed) until it can, and they wait at the
  front of the queue; when readmitted they recompute their prompt and generated tokens (vLLM's recompute
  preemption, SGLang's retraction) and then continue.

The result is the pair the roofline prices (:mod:`rlinf.analytic.roofline`): the sequences in flight at each step and the
KV-cache tokens they hold (which the step reads), plus the tokens prefilled again after preemptions. Pure
functions; no randomness: the lengths come in, in admission order.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections import OrderedDict

import attrs
import numpy as np

from rlinf.core.errors import require

TAIL_BATCH_FRACTION = 0.25
"""The straggler tail of a generation: its last steps, from the one after which fewer than this share of the
replica's peak running batch is still in flight. Such a step still reads all the weights and pays the engine's
fixed per-step work, for a quarter of the peak's tokens or fewer: the steps that a synchronous step waits on."""


@attrs.frozen(kw_only=True)
class DecodeSchedule:
    """Per decode step of one replica: the sequences in flight and the KV-cache tokens they hold."""

    active: np.ndarray = attrs.field(eq=False)
    """Sequences in flight at each step (each writes one token)."""
    context_tokens: np.ndarray = attrs.field(eq=False)
    """KV-cache tokens those sequences hold when the step starts (what the step's attention reads)."""
    recomputed_tokens: int = 0
    """Tokens prefilled again after preemptions (prompt and generated tokens of each readmitted sequence)."""
    num_preemptions: int = 0

    @property
    def num_steps(self) -> int:
        """Decode steps until the last sequence ends."""
        return int(self.active.size)


@attrs.frozen(kw_only=True)
class GenerationTail:
    """The slowest rollout replica's generation, and the share of it spent in its straggler tail
    (:func:`straggler_start`)."""

    responses: int
    """Responses the replica generates."""
    peak_batch: int
    """Most sequences it runs at once."""
    num_steps: int
    """Decode steps until its longest response ends."""
    tail_steps: int
    """Decode steps of the straggler tail: fewer than ``TAIL_BATCH_FRACTION`` of ``peak_batch`` in flight."""
    tail_batch: int
    """Sequences still running when the tail starts (0 without a tail)."""
    tail_share: float
    """Share of the generation's seconds (prefill included) spent in the tail."""
    num_preemptions: int = 0


def straggler_start(active: np.ndarray, fraction: float = TAIL_BATCH_FRACTION) -> int:
    """The first step of the straggler tail of a replica's generation: the step from which fewer than
    ``fraction`` of its peak running batch is in flight to the end (``active.size`` when the last step is not)."""
    require(0 < fraction < 1, "fraction", fraction, "must be in (0, 1)", "use e.g. 0.25")
    active = np.asarray(active, dtype=float)
    if active.size == 0:
        return 0
    return int(np.flatnonzero(active >= fraction * active.max())[-1]) + 1


def schedule_decode(
    lengths: np.ndarray, *, prompt_tokens: int, max_running: int, kv_capacity_tokens: float | None = None
) -> DecodeSchedule:
    """Decode ``lengths`` (generated tokens per sequence, in admission order) on one replica.

    ``kv_capacity_tokens`` is the KV-cache pool in tokens (``None``: unlimited, only ``max_running`` bounds the
    batch). The pool must hold the longest sequence on its own (prompt + its length), as an engine checks at
    start-up; see the module docstring for the rules."""
    lengths = np.maximum(np.asarray(lengths, dtype=np.int64), 1)
    require(
        max_running >= 1, "max_running", max_running, "must be >= 1", "allow one sequence or more in flight"
    )
    require(prompt_tokens >= 0, "prompt_tokens", prompt_tokens, "must be >= 0", "use the mean prompt length")
    if lengths.size == 0:
        return DecodeSchedule(active=np.zeros(0), context_tokens=np.zeros(0))
    capacity = math.inf if kv_capacity_tokens is None else float(kv_capacity_tokens)
    longest = prompt_tokens + int(lengths.max())
    require(
        longest <= capacity,
        "kv_capacity_tokens",
        kv_capacity_tokens,
        f"cannot hold one sequence of {longest} tokens (prompt + its length)",
        "give the rollout more KV-cache memory (kv_cache_fraction) or lower the generation limit",
    )
    key = (
        hashlib.blake2b(lengths.tobytes(), digest_size=16).digest(),
        int(lengths.size),
        prompt_tokens,
        max_running,
        capacity,
    )
    known = _SCHEDULES.get(key)
    if known is not None:
        _SCHEDULES.move_to_end(key)
        return known
    schedule = _Scheduler(lengths.tolist(), prompt_tokens, max_running, capacity).run()
    schedule.active.setflags(write=False)  # shared by every caller that asks the same: never changed in place
    schedule.context_tokens.setflags(write=False)
    _SCHEDULES[key] = schedule
    if len(_SCHEDULES) > SCHEDULES_KEPT:
        _SCHEDULES.popitem(last=False)
    return schedule


SCHEDULES_KEPT = 256
"""Decode schedules kept (least recently used dropped): a synthesis and its what-ifs ask for the same schedule
many times (the published-runs page asks 16,552 times for 4,458 schedules); a schedule is a pure function of its
inputs, kept read-only."""
_SCHEDULES: OrderedDict[tuple[bytes, int, int, int, float], DecodeSchedule] = OrderedDict()


class _Scheduler:
    """The event loop of :func:`schedule_decode`. Between two events (a sequence ends, the pool fills up) the
    running set is fixed and its tokens grow by one per sequence per step, so only events are visited; each run
    of a sequence becomes an interval of steps from which the per-step arrays are summed."""

    def __init__(self, lengths: list[int], prompt: int, max_running: int, capacity: float) -> None:
        self.lengths, self.prompt, self.max_running, self.capacity = lengths, prompt, max_running, capacity
        self.waiting: list[tuple[int, int]] = [(i, 0) for i in reversed(range(len(lengths)))]
        """A stack (next to admit last) of (sequence, tokens generated before)."""
        self.running: dict[int, tuple[int, int]] = {}
        """sequence -> (step admitted, tokens generated before), in admission order."""
        self.ends: list[tuple[int, int]] = []
        """Heap of (step at which the sequence has written its last token, sequence); entries of preempted runs
        are skipped when they surface."""
        self.held = 0
        """Tokens the running sequences hold at ``self.step``."""
        self.step = 0
        self.intervals: list[tuple[int, int, int]] = []
        """(first step, end step, tokens held at the first step) of every run of a sequence."""
        self.recomputed = 0
        self.preemptions = 0

    def run(self) -> DecodeSchedule:
        self._admit()
        while self.running:
            n = len(self.running)
            room = self.capacity - self.held
            target = self._next_end()
            if not math.isinf(room):
                target = min(target, self.step + int(room // n))
            if target > self.step:
                self.held += n * (target - self.step)
                self.step = target
            self._finish()
            if self.running and self.held + len(self.running) > self.capacity:
                self._preempt()
            self._admit()
        return self._schedule()

    def _end_of(self, sequence: int) -> int:
        start, generated = self.running[sequence]
        return start + self.lengths[sequence] - generated

    def _next_end(self) -> int:
        while self.ends:
            end, sequence = self.ends[0]
            if sequence in self.running and self._end_of(sequence) == end:
                return end
            heapq.heappop(self.ends)  # a run that was preempted
        return self.step

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_running:
            sequence, generated = self.waiting[-1]
            tokens = self.prompt + generated
            if self.running and self.held + tokens + len(self.running) + 1 > self.capacity:
                break
            self.waiting.pop()
            if generated:
                self.recomputed += tokens
            self.running[sequence] = (self.step, generated)
            self.held += tokens
            heapq.heappush(self.ends, (self._end_of(sequence), sequence))

    def _finish(self) -> None:
        while self._next_end() <= self.step and self.ends:
            _, sequence = heapq.heappop(self.ends)
            start, generated = self.running.pop(sequence)
            self._close(start, generated)
            self.held -= self.prompt + self.lengths[sequence]

    def _preempt(self) -> None:
        """Free the newest sequences until the next step fits (never the last one: it fits alone)."""
        while len(self.running) > 1 and self.held + len(self.running) > self.capacity:
            sequence, (start, generated) = self.running.popitem()
            done = generated + self.step - start
            self._close(start, generated)
            self.held -= self.prompt + done
            self.waiting.append((sequence, done))
            self.preemptions += 1

    def _close(self, start: int, generated: int) -> None:
        if self.step > start:
            self.intervals.append((start, self.step, self.prompt + generated))

    def _schedule(self) -> DecodeSchedule:
        first, end, held = (np.array(column, dtype=np.int64) for column in zip(*self.intervals, strict=True))
        size = int(end.max()) + 1
        active = np.cumsum(np.bincount(first, minlength=size) - np.bincount(end, minlength=size))[:-1]
        # A run holds (tokens at its first step) + (steps since): sum the constant parts, add active * step.
        offset = (held - first).astype(float)
        constant = np.cumsum(
            np.bincount(first, weights=offset, minlength=size)
            - np.bincount(end, weights=offset, minlength=size)
        )[:-1]
        context = constant + active * np.arange(size - 1, dtype=float)
        return DecodeSchedule(
            active=active.astype(float),
            context_tokens=context,
            recomputed_tokens=int(self.recomputed),
            num_preemptions=self.preemptions,
        )
