"""The verifiable task: multi-digit addition with an exact answer.

A problem ``a+b=`` is answered by the digits of ``a + b``. In the ``reversed`` format (default) the response
writes the sum least-significant digit first, the order in which a person adds columns and carries; this makes
each output digit depend only on digits already seen, which a small transformer can learn. In the ``plain``
format the response is the sum as usual. The verifier parses the response and returns reward 1.0 for the exact
sum and 0.0 otherwise (including empty or malformed responses).

Problems are drawn from an explicit :class:`random.Random`, so a seed fixes the problem stream; a held-out set
is drawn from its own seed and excluded from training draws.
"""

from __future__ import annotations

import random
from collections.abc import Collection

import attrs

from rlinf.core.errors import require

ANSWER_FORMATS = ("reversed", "plain")


@attrs.frozen(kw_only=True)
class TaskConfig:
    """Which problems are generated and how answers are written."""

    min_digits: int = 2
    """Fewest digits of an operand."""
    max_digits: int = 3
    """Most digits of an operand; each operand's digit count is uniform in ``[min_digits, max_digits]``."""
    answer_format: str = "reversed"
    """``reversed`` (sum digits least-significant first) or ``plain``."""
    zero_pad: bool = True
    """Write operands with leading zeros to ``max_digits`` (``023+451=``), so that digits of the same place value
    always sit at the same prompt position."""

    def __attrs_post_init__(self) -> None:
        require(
            1 <= self.min_digits <= 9,
            "task.min_digits",
            self.min_digits,
            "must be in [1, 9]",
            "choose 1..9 digits",
        )
        require(
            self.min_digits <= self.max_digits <= 9,
            "task.max_digits",
            self.max_digits,
            f"must be in [min_digits={self.min_digits}, 9]",
            "raise max_digits or lower min_digits",
        )
        require(
            self.answer_format in ANSWER_FORMATS,
            "task.answer_format",
            self.answer_format,
            "unknown format",
            f"use one of {list(ANSWER_FORMATS)}",
        )

    @property
    def max_prompt_chars(self) -> int:
        """Characters of the longest prompt ``a+b=``."""
        return 2 * self.max_digits + 2

    @property
    def max_answer_chars(self) -> int:
        """Characters of the longest answer (the sum has at most one digit more than an operand)."""
        return self.max_digits + 1


@attrs.frozen
class ArithProblem:
    """``a + b``, with non-negative operands; ``width`` > 0 zero-pads the operands in the prompt."""

    a: int
    b: int
    width: int = attrs.field(default=0, eq=False)

    def __attrs_post_init__(self) -> None:
        require(
            self.a >= 0 and self.b >= 0,
            "problem",
            (self.a, self.b),
            "operands must be >= 0",
            "use non-negative operands",
        )

    @property
    def answer(self) -> int:
        return self.a + self.b

    @property
    def prompt(self) -> str:
        return f"{self.a:0{self.width}d}+{self.b:0{self.width}d}=" if self.width else f"{self.a}+{self.b}="


def solution_text(problem: ArithProblem, answer_format: str) -> str:
    """The correct response (without EOS) in ``answer_format``."""
    digits = str(problem.answer)
    return digits[::-1] if answer_format == "reversed" else digits


def carry_free_solution_text(problem: ArithProblem, answer_format: str) -> str:
    """A typical wrong worked solution: each column's digit sum modulo 10, carries forgotten."""
    width = max(len(str(problem.a)), len(str(problem.b)))
    a_digits = str(problem.a).zfill(width)[::-1]
    b_digits = str(problem.b).zfill(width)[::-1]
    low_first = "".join(str((int(x) + int(y)) % 10) for x, y in zip(a_digits, b_digits, strict=True))
    plain = low_first[::-1].lstrip("0") or "0"
    return plain[::-1] if answer_format == "reversed" else plain


def parse_answer(response: str, answer_format: str) -> int | None:
    """The integer a response states, or None unless it is a canonical number (digits, no leading zeros)."""
    if not response or not response.isdigit():
        return None
    stated = response[::-1] if answer_format == "reversed" else response
    if len(stated) > 1 and stated[0] == "0":
        return None
    return int(stated)


def verify(problem: ArithProblem, response: str, answer_format: str) -> float:
    """Reward: 1.0 when ``response`` states exactly ``problem.answer``, else 0.0."""
    return 1.0 if parse_answer(response, answer_format) == problem.answer else 0.0


def _problem(rng: random.Random, config: TaskConfig) -> ArithProblem:
    width = config.max_digits if config.zero_pad else 0
    return ArithProblem(_operand(rng, config), _operand(rng, config), width)


def _operand(rng: random.Random, config: TaskConfig) -> int:
    num_digits = rng.randint(config.min_digits, config.max_digits)
    low = 0 if num_digits == 1 else 10 ** (num_digits - 1)
    return rng.randint(low, 10**num_digits - 1)


def sample_problems(
    num_problems: int, config: TaskConfig, rng: random.Random, exclude: Collection[ArithProblem] = ()
) -> list[ArithProblem]:
    """``num_problems`` problems drawn from ``rng``, none of them in ``exclude`` (repeats are allowed)."""
    require(num_problems >= 0, "num_problems", num_problems, "must be >= 0", "ask for zero or more problems")
    excluded = frozenset(exclude)
    problems: list[ArithProblem] = []
    while len(problems) < num_problems:
        problem = _problem(rng, config)
        if problem not in excluded:
            problems.append(problem)
    return problems


def heldout_problems(num_problems: int, config: TaskConfig, seed: int) -> list[ArithProblem]:
    """A fixed set of ``num_problems`` distinct problems for evaluation, determined by ``seed``."""
    rng = random.Random(seed)
    seen: dict[ArithProblem, None] = {}
    space = sum(9 * 10 ** (d - 1) + (d == 1) for d in range(config.min_digits, config.max_digits + 1)) ** 2
    require(
        num_problems <= space // 2,
        "eval.num_problems",
        num_problems,
        f"too many for a problem space of {space}",
        "use fewer held-out problems or more digits",
    )
    while len(seen) < num_problems:
        seen.setdefault(_problem(rng, config), None)
    return list(seen)
