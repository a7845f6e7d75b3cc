"""The GRPO workload's verifiable tasks and what every part of it asks of one.

``task.kind`` picks the task (:data:`TASKS`): ``word_problems`` (GSM8K-style multi-step word problems, the
default: :mod:`~rlinf.workloads.hf_grpo.word_problems`) or ``addition`` (multi-digit addition:
:mod:`~rlinf.workloads.hf_grpo.addition`); the section's other keys are that task's. A task draws problems from
an explicit :class:`random.Random` (``sample``), writes a problem's worked solution for the warm start, with a
sloppy teacher's errors at a given rate (``solution``), and scores a response against the exact answer
(``reward``: the verifier, 1.0 or 0.0). A problem has a ``prompt`` (the text the policy continues) and an integer
``answer`` (what travels in the payload to the reward component).

Two disjoint held-out sets (:class:`HeldoutSets`), each drawn from its own seed: the **validation** set
(``eval.seed``), on which settings are tuned, and the **test** set (``eval.test_seed``, its draws skipping the
validation prompts), on which nothing is tuned and final figures are reported. Training draws (the warm start's
and GRPO's) exclude the prompts of both, so held-out accuracy measures problems the policy never trained on.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Any, Protocol

import attrs

from rlinf.api import require, structure_config
from rlinf.workloads.hf_grpo.addition import AdditionTask
from rlinf.workloads.hf_grpo.word_problems import WordProblemsTask

TaskConfig = WordProblemsTask | AdditionTask
"""The ``task:`` section: one of the tasks of :data:`TASKS`."""
TASKS = MappingProxyType({"word_problems": WordProblemsTask, "addition": AdditionTask})
"""The tasks by ``task.kind``."""
HELDOUT_SETS = ("validation", "test")
"""The held-out sets by name (``eval.sets``)."""


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


def heldout_problems(count: int, task: TaskConfig, seed: int, *, exclude: Collection[str] = ()) -> list[Any]:
    """``count`` problems with distinct prompts, none in ``exclude``, drawn from their own ``seed``."""
    rng = random.Random(seed)
    seen: set[str] = set(exclude)
    problems: list[Any] = []
    for _ in range(100 * count):
        problem = task.sample(rng)
        if problem.prompt not in seen:
            seen.add(problem.prompt)
            problems.append(problem)
        if len(problems) == count:
            return problems
    raise ValueError(f"the task has fewer than {count} distinct problems; lower eval.num_problems")


@attrs.frozen(kw_only=True)
class HeldoutSets:
    """The validation and test problems of a run: disjoint, and excluded from every training draw."""

    validation: tuple[Any, ...]
    """Drawn from ``eval.seed``: the set settings are tuned on."""
    test: tuple[Any, ...]
    """Drawn from ``eval.test_seed``, skipping the validation prompts: never used to choose settings."""

    def __attrs_post_init__(self) -> None:
        shared = {p.prompt for p in self.validation} & {p.prompt for p in self.test}
        assert not shared, f"the validation and test sets share {len(shared)} prompts"

    def problems(self, name: str) -> tuple[Any, ...]:
        """The problems of the set ``name`` (one of :data:`HELDOUT_SETS`)."""
        assert name in HELDOUT_SETS, name
        return self.validation if name == "validation" else self.test

    @property
    def prompts(self) -> frozenset[str]:
        """The prompts of both sets: what training draws exclude."""
        return frozenset(p.prompt for p in (*self.validation, *self.test))


def heldout_sets(count: int, task: TaskConfig, *, validation_seed: int, test_seed: int) -> HeldoutSets:
    """The validation set (``count`` distinct problems from ``validation_seed``, as a single held-out set was drawn
    before the test set existed) and the test set (``count`` more from ``test_seed``, none of them a validation
    prompt)."""
    validation = heldout_problems(count, task, validation_seed)
    test = heldout_problems(count, task, test_seed, exclude={p.prompt for p in validation})
    return HeldoutSets(validation=tuple(validation), test=tuple(test))
