"""The word-problem task (``task.kind: word_problems``, the default): procedurally generated multi-step math word
problems (GSM8K-style).

A problem tells a short story about someone's items over several steps (finding more, giving some away, buying
bags of them, getting several times as many, sharing them equally) and asks how many are left. The worked
solution writes one line per step with its arithmetic and ends with the answer after a marker, as GSM8K does::

    Question: Mia has 13 pencils. Mia buys 4 bags with 6 pencils each. Mia gives away 9 pencils.
    How many pencils does Mia have now?
    Answer: Mia starts with 13.
    Mia buys 4 bags of 6: 4*6=24. 13+24=37.
    Mia gives away 9: 37-9=28.
    #### 28

The number of steps is drawn from a decaying distribution over ``[min_steps, max_steps]``, so the lengths of
the solutions (and of the policy's responses) have a long tail that no knob forces. The reward is 1.0 exactly
when the integer after the first ``####`` of a response equals the answer. Problems come from an explicit
:class:`random.Random`; drawing, the held-out set and its exclusion from training draws are the task interface's
(:mod:`~rlinf.workloads.hf_grpo.task`).
"""

from __future__ import annotations

import random
import re
from typing import Any, Literal

import attrs

from rlinf.api import positive, require
from rlinf.workloads.hf_grpo.addition import carry_free_sum

ANSWER_MARKER = "####"
NAMES = ("Mia", "Tom", "Ava", "Leo", "Zoe", "Sam", "Ivy", "Max", "Eli", "Kai", "Nia", "Ben")
ITEMS = ("apples", "pencils", "stickers", "marbles", "cards", "coins", "books", "shells")
_ANSWER = re.compile(re.escape(ANSWER_MARKER) + r"\s*(-?\d+)")


@attrs.frozen(kw_only=True)
class WordProblemsTask:
    """Which word problems are generated (``task:`` with ``kind: word_problems``)."""

    kind: Literal["word_problems"] = "word_problems"
    min_steps: int = 1
    """Fewest operations in a problem."""
    max_steps: int = 6
    """Most operations in a problem."""
    step_decay: float = 0.6
    """P(k + 1 steps) / P(k steps): below 1, short problems are common and long ones form a tail."""
    max_number: int = 20
    """Largest number a story mentions (start, found, given away, bag contents)."""
    max_value: int = 99
    """No intermediate count exceeds this (operations that would are not drawn)."""

    def __attrs_post_init__(self) -> None:
        positive("task.min_steps", self.min_steps)
        require(
            self.min_steps <= self.max_steps <= 12,
            "task.max_steps",
            self.max_steps,
            f"must be in [min_steps={self.min_steps}, 12]",
            "raise max_steps or lower min_steps",
        )
        require(
            0.0 < self.step_decay <= 1.0, "task.step_decay", self.step_decay, "must be in (0, 1]", "use 0.6"
        )
        require(self.max_number >= 5, "task.max_number", self.max_number, "must be >= 5", "use 20")
        require(
            self.max_value >= 2 * self.max_number,
            "task.max_value",
            self.max_value,
            f"must be >= 2 * max_number = {2 * self.max_number}",
            "raise max_value",
        )

    @property
    def num_distinct_problems(self) -> int | None:
        """Not counted (far more than any held-out set)."""
        return None

    def sample(self, rng: random.Random) -> WordProblem:
        """One problem drawn from ``rng``."""
        return sample_problem(self, rng)

    def solution(self, problem: Any, rng: random.Random | None = None, error_rate: float = 0.0) -> str:
        """The worked solution of ``problem`` (a sloppy teacher's with probability ``error_rate``)."""
        assert isinstance(problem, WordProblem), problem
        return solution_text(problem, rng, error_rate)

    def reward(self, answer: int, response: str) -> float:
        """1.0 for the exact answer after ``####``, else 0.0."""
        return reward(answer, response)


@attrs.frozen(kw_only=True)
class Step:
    """One operation of a story: ``find``, ``give``, ``bags`` (``a`` bags of ``b``), ``times`` or ``share``."""

    kind: str
    sentence: str
    a: int
    b: int = 0

    def apply(self, value: int) -> int:
        """The count after this step, from the count ``value`` before it."""
        if self.kind == "find":
            return value + self.a
        if self.kind == "give":
            return value - self.a
        if self.kind == "bags":
            return value + self.a * self.b
        if self.kind == "times":
            return value * self.a
        return value // self.a

    def work(self, name: str, value: int, result: int) -> str:
        """The worked line of this step from ``value`` to ``result``."""
        if self.kind == "find":
            return f"{name} finds {self.a} more: {value}+{self.a}={result}."
        if self.kind == "give":
            return f"{name} gives away {self.a}: {value}-{self.a}={result}."
        if self.kind == "bags":
            bought = self.a * self.b
            return f"{name} buys {self.a} bags of {self.b}: {self.a}*{self.b}={bought}. {value}+{bought}={result}."
        if self.kind == "times":
            return f"{name} gets {self.a} times as many: {value}*{self.a}={result}."
        return f"{name} keeps one of {self.a} shares: {value}/{self.a}={result}."


@attrs.frozen(kw_only=True)
class WordProblem:
    """A problem with its exact answer."""

    name: str
    item: str
    start: int
    steps: tuple[Step, ...]

    @property
    def values(self) -> tuple[int, ...]:
        """The count after each step."""
        values, value = [], self.start
        for step in self.steps:
            value = step.apply(value)
            values.append(value)
        return tuple(values)

    @property
    def answer(self) -> int:
        return self.values[-1]

    @property
    def question(self) -> str:
        story = " ".join(step.sentence for step in self.steps)
        return (
            f"{self.name} has {self.start} {self.item}. {story} "
            f"How many {self.item} does {self.name} have now?"
        )

    @property
    def prompt(self) -> str:
        """What the policy sees; its response continues after ``Answer:``."""
        return f"Question: {self.question}\nAnswer:"


def _step(name: str, item: str, value: int, config: WordProblemsTask, rng: random.Random) -> Step:
    """One operation drawn among those that keep the count within ``[1, max_value]``."""
    room = config.max_value - value
    kinds = ["find"] * (room >= 1) + ["give"] * (value >= 2) + ["bags"] * (room >= 4)
    kinds += ["times"] * (2 * value <= config.max_value)
    kinds += ["share"] * any(value % k == 0 and value >= 2 * k for k in (2, 3, 4, 5))
    kind = rng.choice(kinds)
    if kind == "find":
        n = rng.randint(1, min(config.max_number, room))
        return Step(kind=kind, sentence=f"{name} finds {n} more {item}.", a=n)
    if kind == "give":
        n = rng.randint(1, min(config.max_number, value - 1))
        return Step(kind=kind, sentence=f"{name} gives away {n} {item}.", a=n)
    if kind == "bags":
        a, b = rng.choice([(a, b) for a in range(2, 6) for b in range(2, 10) if a * b <= room])
        return Step(kind=kind, sentence=f"{name} buys {a} bags with {b} {item} each.", a=a, b=b)
    if kind == "times":
        k = rng.choice([k for k in (2, 3) if k * value <= config.max_value])
        return Step(kind=kind, sentence=f"{name} gets {k} times as many {item}.", a=k)
    k = rng.choice([k for k in (2, 3, 4, 5) if value % k == 0 and value >= 2 * k])
    sentence = f"{name} shares the {item} equally among {k} people and keeps one share."
    return Step(kind=kind, sentence=sentence, a=k)


def num_steps(config: WordProblemsTask, rng: random.Random) -> int:
    """A step count in ``[min_steps, max_steps]`` with ``P(k + 1) = step_decay * P(k)``."""
    counts = range(config.min_steps, config.max_steps + 1)
    weights = [config.step_decay**i for i in range(len(counts))]
    return rng.choices(counts, weights=weights)[0]


def sample_problem(config: WordProblemsTask, rng: random.Random) -> WordProblem:
    """One problem drawn from ``rng``."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    start = rng.randint(2, config.max_number)
    steps: list[Step] = []
    value = start
    for _ in range(num_steps(config, rng)):
        steps.append(_step(name, item, value, config, rng))
        value = steps[-1].apply(value)
    return WordProblem(name=name, item=item, start=start, steps=tuple(steps))


def solution_text(problem: WordProblem, rng: random.Random | None = None, error_rate: float = 0.0) -> str:
    """The worked solution (the response to ``problem.prompt``). With probability ``error_rate`` (drawn from
    ``rng``) a sloppy teacher writes it: every addition forgets its carries and the later steps compute on from the
    wrong count (problems whose additions carry get a wrong answer)."""
    sloppy = rng is not None and error_rate > 0.0 and rng.random() < error_rate
    lines = [f" {problem.name} starts with {problem.start}."]
    value = problem.start
    for step in problem.steps:
        result = step.apply(value)
        if sloppy and step.kind in ("find", "bags"):
            result = carry_free_sum(value, step.a * (step.b if step.kind == "bags" else 1))
        result = max(result, 0)  # a wrong count may not cover a later step's give-away
        lines.append(step.work(problem.name, value, result))
        value = result
    return "\n".join(lines) + f"\n{ANSWER_MARKER} {value}"


def extract_answer(response: str) -> int | None:
    """The integer after the first ``####`` of ``response``, or None when there is none."""
    match = _ANSWER.search(response)
    return None if match is None else int(match.group(1))


def reward(problem_answer: int, response: str) -> float:
    """1.0 for the exact answer after the marker, 0.0 otherwise (no marker, no number, a wrong number)."""
    return 1.0 if extract_answer(response) == problem_answer else 0.0
