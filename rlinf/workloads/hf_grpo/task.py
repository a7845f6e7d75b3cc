"""The GRPO workload's verifiable tasks and what every part of it asks of one.

``task.kind`` picks the task (:data:`TASKS`): ``word_problems`` (GSM8K-style multi-step word problems, the
default: :mod:`~rlinf.workloads.hf_grpo.word_problems`) or ``addition`` (multi-digit addition:
:mod:`~rlinf.workloads.hf_grpo.addition`); the section's other keys are that task's. A task draws problems from
an explicit :class:`random.Random` (``sample``), writes a problem's worked solution for the warm start, with a
sloppy teacher's errors at a given rate (``solution``), and scores a response against the exact answer
(``reward``: the verifier, 1.0 or 0.0). A problem has a ``prompt`` (the text the policy continues) and an integer
``answer`` (what travels in the payload to the reward component).

The held-out set is drawn from its own seed; training draws exclude its prompts, so held-out accuracy measures
problems the policy never trained on.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from rlinf.api import structure_config
from rlinf.core.errors import require
from rlinf.workloads.hf_grpo.addition import AdditionTask
from rlinf.workloads.hf_grpo.word_problems import WordProblemsTask

TaskConfig = WordProblemsTask | AdditionTask
"""The ``task:`` section: one of the tasks of :data:`TASKS`."""
TASKS = MappingProxyType({"word_problems": WordProblemsTask, "addition": AdditionTask})
"""The tasks by ``task.kind``."""


class Problem(Protocol):
    """One problem of a task."""

    @property
    def prompt(self) -> str:
        """The text the policy's response continues."""
        ...

    @property
    def answer(self) -> int:
        """The exact answer the verifier checks."""
        ...


def task_config(value: Any) -> TaskConfig:
    """The task section from its YAML mapping: ``kind`` (default ``word_problems``) picks the class, whose own keys
    are checked as every section's are (unknown keys refused, listing the valid ones)."""
    if isinstance(value, (WordProblemsTask, AdditionTask)):
        return value
    require(
        isinstance(value, Mapping), "task", value, "must be a mapping", "write the task's keys under task:"
    )
    kind = value.get("kind", "word_problems")
    require(
        isinstance(kind, str) and kind in TASKS,
        "task.kind",
        kind,
        "unknown task",
        f"use one of {sorted(TASKS)}",
    )
    task: TaskConfig = structure_config(TASKS[kind], value, "config", "task.")
    return task


def sample_problems(
    count: int, task: TaskConfig, rng: random.Random, *, exclude: Collection[str] = ()
) -> list[Any]:
    """``count`` problems drawn from ``rng`` whose prompts are not in ``exclude`` (the held-out prompts); repeats
    are allowed."""
    problems: list[Any] = []
    while len(problems) < count:
        problem = task.sample(rng)
        if problem.prompt not in exclude:
            problems.append(problem)
    return problems


def heldout_problems(count: int, task: TaskConfig, seed: int) -> list[Any]:
    """The fixed evaluation set: ``count`` problems with distinct prompts, drawn from their own ``seed``."""
    rng = random.Random(seed)
    seen: set[str] = set()
    problems: list[Any] = []
    for _ in range(100 * count):
        problem = task.sample(rng)
        if problem.prompt not in seen:
            seen.add(problem.prompt)
            problems.append(problem)
        if len(problems) == count:
            return problems
    raise ValueError(f"the task has fewer than {count} distinct problems; lower eval.num_problems")


def heldout_prompts(count: int, task: TaskConfig, seed: int) -> frozenset[str]:
    """The prompts of :func:`heldout_problems` (what training draws exclude)."""
    return frozenset(p.prompt for p in heldout_problems(count, task, seed))
