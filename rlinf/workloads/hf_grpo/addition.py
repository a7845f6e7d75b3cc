"""The addition task (``task.kind: addition``): verifiable multi-digit addition with an exact answer.

A problem ``a+b=`` is answered by the digits of ``a + b``. In the ``reversed`` format (the default) the response
writes the sum least-significant digit first, the order in which a person adds columns and carries, so each
output digit depends only on digits already written, which a tiny model can learn. In the ``plain`` format the
response is the sum as usual. The verifier returns reward 1.0 when the response states exactly the sum (digits
only, no leading zeros) and 0.0 otherwise (an empty or malformed response included).

The warm start's sloppy teacher forgets carries: each column's digit sum modulo 10 (:func:`carry_free_sum`). With
``zero_pad`` the prompt writes both operands with leading zeros to ``max_digits`` (``042+317=``), so digits of the
same place value always sit at the same prompt position.
"""

from __future__ import annotations

import random
from typing import Any, Literal

import attrs

from rlinf.api import require

ANSWER_FORMATS = ("reversed", "plain")


def carry_free_sum(a: int, b: int) -> int:
    """``a + b`` (both >= 0) added column by column without carrying (``37 + 24 = 51``): the sloppy teacher's
    addition."""
    assert a >= 0 and b >= 0, (a, b)
    digits, place = 0, 1
    while a or b:
        digits += (a % 10 + b % 10) % 10 * place
        a, b, place = a // 10, b // 10, place * 10
    return digits


@attrs.frozen
class AdditionProblem:
    """``a + b`` with non-negative operands; ``width`` > 0 zero-pads the operands in the prompt."""

    a: int
    b: int
    width: int = 0

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
        """What the policy sees; its response is the sum's digits."""
        return f"{self.a:0{self.width}d}+{self.b:0{self.width}d}=" if self.width else f"{self.a}+{self.b}="


def written(number: int, answer_format: str) -> str:
    """``number``'s digits as a response in ``answer_format`` writes them."""
    return str(number)[::-1] if answer_format == "reversed" else str(number)


def parse_answer(response: str, answer_format: str) -> int | None:
    """The integer a response states, or None unless it is a canonical number (digits, no leading zeros)."""
    if not response or not response.isdigit() or not response.isascii():
        return None
    stated = response[::-1] if answer_format == "reversed" else response
    if len(stated) > 1 and stated[0] == "0":
        return None
    return int(stated)


@attrs.frozen(kw_only=True)
class AdditionTask:
    """Which additions are generated and how answers are written (``task:`` with ``kind: addition``)."""

    kind: Literal["addition"] = "addition"
    min_digits: int = 2
    """Fewest digits of an operand."""
    max_digits: int = 3
    """Most digits of an operand; each operand's digit count is uniform in ``[min_digits, max_digits]``."""
    answer_format: str = "reversed"
    """``reversed`` (the sum's digits least-significant first) or ``plain``."""
    zero_pad: bool = True
    """Write the operands with leading zeros to ``max_digits`` (``042+317=``)."""

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
    def num_distinct_problems(self) -> int:
        """Distinct ordered operand pairs: the held-out set may take at most half of them."""
        operands = sum(9 * 10 ** (d - 1) + (d == 1) for d in range(self.min_digits, self.max_digits + 1))
        return operands**2

    def _operand(self, rng: random.Random) -> int:
        num_digits = rng.randint(self.min_digits, self.max_digits)
        low = 0 if num_digits == 1 else 10 ** (num_digits - 1)
        return rng.randint(low, 10**num_digits - 1)

    def sample(self, rng: random.Random) -> AdditionProblem:
        """One problem drawn from ``rng``."""
        width = self.max_digits if self.zero_pad else 0
        return AdditionProblem(self._operand(rng), self._operand(rng), width)

    def solution(self, problem: Any, rng: random.Random | None = None, error_rate: float = 0.0) -> str:
        """The correct response; with probability ``error_rate`` (drawn from ``rng``) the sloppy teacher's, who
        forgets carries."""
        assert isinstance(problem, AdditionProblem), problem
        sloppy = rng is not None and error_rate > 0.0 and rng.random() < error_rate
        total = carry_free_sum(problem.a, problem.b) if sloppy else problem.answer
        return written(total, self.answer_format)

    def reward(self, answer: int, response: str) -> float:
        """1.0 when ``response`` states exactly ``answer`` in this task's format, else 0.0."""
        return 1.0 if parse_answer(response, self.answer_format) == answer else 0.0
